/* Small device helpers shared by the vision .cu files: a block-wide fp32 sum and the launch check.
 * Internal to executor/cuda; not a public interface. */
#ifndef S1_EX_CUDA_VISION_COMMON_CUH
#define S1_EX_CUDA_VISION_COMMON_CUH

#include <cuda_runtime.h>

#include "cm_error.h"
#include "cuda_check.h"

/* Sum of v over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
 * `red` is 32 floats of shared memory; the call holds two __syncthreads. */
static __device__ __forceinline__ float vis_block_sum(float v, float *red) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  __syncthreads(); /* red may still be read by a previous call */
  if (lane == 0)
    red[warp] = v;
  __syncthreads();
  float t = lane < n_warps ? red[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1)
    t += __shfl_xor_sync(0xffffffffu, t, o);
  return t;
}

/* 0 after a successful launch, else -CM_ECUDA with the call named. */
#define VIS_LAUNCHED() EXC_CUDA(cudaGetLastError())

/* Grid size for n items of `per_block` each, capped for grid-stride loops. */
static inline unsigned vis_blocks(long long n, int per_block) {
  long long b = (n + per_block - 1) / per_block;
  if (b < 1)
    b = 1;
  return b > 65535LL * 32 ? 65535u * 32u : (unsigned)b;
}

#endif
