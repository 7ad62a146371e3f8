/* Device helpers shared by the elementwise and normalisation kernels of this folder: a block-wide
 * float32 sum and bf16 conversions. Included by .cu files only; no host code. */
#ifndef S1_EX_CUDA_KERNEL_CUH
#define S1_EX_CUDA_KERNEL_CUH

#include <cuda_bf16.h>

/* Sum of v over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
 * `red` is shared memory of at least 33 floats. Summation order is fixed for a given blockDim. */
__device__ inline float exc_block_sum(float v, float *red) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  __syncthreads(); /* red may still be read by a previous call */
  if (lane == 0)
    red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < n_warps ? red[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
      s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0)
      red[32] = s;
  }
  __syncthreads();
  return red[32];
}

/* Maximum of v over the block, same contract as exc_block_sum. */
__device__ inline float exc_block_max(float v, float *red) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0)
    red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < n_warps ? red[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1)
      s = fmaxf(s, __shfl_xor_sync(0xffffffffu, s, o));
    if (lane == 0)
      red[32] = s;
  }
  __syncthreads();
  return red[32];
}

/* R(x) of spec/qwen3_5.md §0.2: x rounded to bf16 (nearest even), as float32. */
__device__ inline float exc_r16(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

/* Number of blocks of `threads` covering n items, as an unsigned grid size. */
static inline unsigned exc_blocks(size_t n, unsigned threads) {
  return (unsigned)((n + threads - 1) / threads);
}

#endif
