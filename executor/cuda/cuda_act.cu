/* SwiGLU and casts (cuda_act.h): one thread per output element (eight for the bf16-input SwiGLU),
 * grids of rows × column blocks (blockIdx.x the row, blockIdx.y the column block: no division per
 * element). */
#include <errno.h>
#include <stdint.h>

#include "cm_error.h"
#include "cuda_act.h"
#include "cuda_check.h"
#include "exc_kernel.cuh"

enum { ACT_THREADS = 256 };

/* The grid of n rows × ceil(width / (ACT_THREADS · per_thread)) column blocks. */
static dim3 row_grid(size_t n, size_t width, size_t per_thread) {
  size_t per_block = (size_t)ACT_THREADS * per_thread;
  return dim3((unsigned)n, (unsigned)((width + per_block - 1) / per_block));
}

/* Column blocks fit gridDim.y (65,535) and rows gridDim.x (2^31 − 1). */
static bool grid_ok(size_t n, size_t width, size_t per_thread) {
  size_t per_block = (size_t)ACT_THREADS * per_thread;
  return n < (1u << 31) && (width + per_block - 1) / per_block <= 65535;
}

static __global__ void swiglu_kernel(const float *gate, const float *up, size_t ld_in,
                                     __nv_bfloat16 *out, size_t width, bool round_in) {
  size_t t = blockIdx.x, c = (size_t)blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= width)
    return;
  size_t i = t * width + c;
  float g = gate[t * ld_in + c], u = up[t * ld_in + c];
  float a;
  if (round_in) { /* the bf16 reference: R(R(silu(R(g))) · R(u)), spec §3.4 */
    g = __bfloat162float(__float2bfloat16_rn(g));
    u = __bfloat162float(__float2bfloat16_rn(u));
    a = __bfloat162float(__float2bfloat16_rn(g / (1.0f + expf(-g))));
  } else {
    a = g / (1.0f + expf(-g));
  }
  out[i] = __float2bfloat16_rn(a * u);
}

int exc_swiglu(cudaStream_t stream, const float *gate, const float *up, size_t ld_in,
               __nv_bfloat16 *out, size_t n, size_t width) {
  if (!n || !width || ld_in < width || !grid_ok(n, width, 1))
    return -EINVAL;
  swiglu_kernel<<<row_grid(n, width, 1), ACT_THREADS, 0, stream>>>(gate, up, ld_in, out, width,
                                                                   false);
  return EXC_CUDA(cudaGetLastError());
}

int exc_swiglu_rounded(cudaStream_t stream, const float *gate, const float *up, size_t ld_in,
                       __nv_bfloat16 *out, size_t n, size_t width) {
  if (!n || !width || ld_in < width || !grid_ok(n, width, 1))
    return -EINVAL;
  swiglu_kernel<<<row_grid(n, width, 1), ACT_THREADS, 0, stream>>>(gate, up, ld_in, out, width,
                                                                   true);
  return EXC_CUDA(cudaGetLastError());
}

/* Eight columns per thread, 16-byte loads and stores: R(R(silu(g)) · u) on bf16 g and u, the same
 * float32 expressions as swiglu_kernel's rounded form (bit-identical on bf16-valued inputs). */
static __global__ void swiglu_bf16_kernel(const __nv_bfloat16 *gate, const __nv_bfloat16 *up,
                                          size_t ld_in, __nv_bfloat16 *out, size_t width) {
  size_t t = blockIdx.x, c = ((size_t)blockIdx.y * blockDim.x + threadIdx.x) * 8;
  if (c >= width)
    return;
  uint4 gv = *(const uint4 *)(gate + t * ld_in + c), uv = *(const uint4 *)(up + t * ld_in + c);
  uint4 ov;
  const __nv_bfloat16 *g8 = (const __nv_bfloat16 *)&gv, *u8 = (const __nv_bfloat16 *)&uv;
  __nv_bfloat16 *o8 = (__nv_bfloat16 *)&ov;
#pragma unroll
  for (int j = 0; j < 8; j++) {
    float g = __bfloat162float(g8[j]);
    float a = exc_r16(g / (1.0f + expf(-g)));
    o8[j] = __float2bfloat16_rn(a * __bfloat162float(u8[j]));
  }
  *(uint4 *)(out + t * width + c) = ov;
}

static bool aligned16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}

int exc_swiglu_bf16(cudaStream_t stream, const __nv_bfloat16 *gate, const __nv_bfloat16 *up,
                    size_t ld_in, __nv_bfloat16 *out, size_t n, size_t width) {
  if (!n || !width || ld_in < width || width % 8 || ld_in % 8 || !aligned16(gate) ||
      !aligned16(up) || !aligned16(out) || !grid_ok(n, width, 8))
    return -EINVAL;
  swiglu_bf16_kernel<<<row_grid(n, width, 8), ACT_THREADS, 0, stream>>>(gate, up, ld_in, out,
                                                                        width);
  return EXC_CUDA(cudaGetLastError());
}

static __global__ void cast_kernel(const float *x, size_t ld_x, __nv_bfloat16 *y, size_t ld_y,
                                   size_t width) {
  size_t t = blockIdx.x, c = (size_t)blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= width)
    return;
  y[t * ld_y + c] = __float2bfloat16_rn(x[t * ld_x + c]);
}

int exc_cast_bf16(cudaStream_t stream, const float *x, size_t ld_x, __nv_bfloat16 *y, size_t ld_y,
                  size_t n, size_t width) {
  if (!n || !width || ld_x < width || ld_y < width || !grid_ok(n, width, 1))
    return -EINVAL;
  cast_kernel<<<row_grid(n, width, 1), ACT_THREADS, 0, stream>>>(x, ld_x, y, ld_y, width);
  return EXC_CUDA(cudaGetLastError());
}

static __global__ void round_kernel(float *x, size_t ld_x, size_t width) {
  size_t t = blockIdx.x, c = (size_t)blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= width)
    return;
  float *p = x + t * ld_x + c;
  *p = __bfloat162float(__float2bfloat16_rn(*p));
}

int exc_round_bf16(cudaStream_t stream, float *x, size_t ld_x, size_t n, size_t width) {
  if (!n || !width || ld_x < width || !grid_ok(n, width, 1))
    return -EINVAL;
  round_kernel<<<row_grid(n, width, 1), ACT_THREADS, 0, stream>>>(x, ld_x, width);
  return EXC_CUDA(cudaGetLastError());
}

/* Y is float (rounded here) or __nv_bfloat16 (a GEMM's bf16 output, already rounded). */
template <typename Y>
static __global__ void add_round_kernel(float *h, const Y *y, size_t ld_y, size_t width) {
  size_t t = blockIdx.x, c = (size_t)blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= width)
    return;
  float yr = exc_r16((float)y[t * ld_y + c]);
  size_t i = t * width + c;
  h[i] = exc_r16(h[i] + yr);
}

int exc_add_round_bf16(cudaStream_t stream, float *h, const float *y, size_t ld_y, size_t n,
                       size_t width) {
  if (!n || !width || ld_y < width || !grid_ok(n, width, 1))
    return -EINVAL;
  add_round_kernel<float><<<row_grid(n, width, 1), ACT_THREADS, 0, stream>>>(h, y, ld_y, width);
  return EXC_CUDA(cudaGetLastError());
}

int exc_add_bf16_round(cudaStream_t stream, float *h, const __nv_bfloat16 *y, size_t ld_y,
                       size_t n, size_t width) {
  if (!n || !width || ld_y < width || !grid_ok(n, width, 1))
    return -EINVAL;
  add_round_kernel<__nv_bfloat16>
      <<<row_grid(n, width, 1), ACT_THREADS, 0, stream>>>(h, y, ld_y, width);
  return EXC_CUDA(cudaGetLastError());
}
