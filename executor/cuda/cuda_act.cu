/* SwiGLU and casts (cuda_act.h): one thread per output element. */
#include <errno.h>

#include "cm_error.h"
#include "cuda_act.h"
#include "cuda_check.h"
#include "exc_kernel.cuh"

static __global__ void swiglu_kernel(const float *gate, const float *up, size_t ld_in,
                                     __nv_bfloat16 *out, size_t n, size_t width, bool round_in) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * width)
    return;
  size_t t = i / width, c = i % width;
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
  if (!n || !width || ld_in < width)
    return -EINVAL;
  swiglu_kernel<<<exc_blocks(n * width, 256), 256, 0, stream>>>(gate, up, ld_in, out, n, width,
                                                                false);
  return EXC_CUDA(cudaGetLastError());
}

int exc_swiglu_rounded(cudaStream_t stream, const float *gate, const float *up, size_t ld_in,
                       __nv_bfloat16 *out, size_t n, size_t width) {
  if (!n || !width || ld_in < width)
    return -EINVAL;
  swiglu_kernel<<<exc_blocks(n * width, 256), 256, 0, stream>>>(gate, up, ld_in, out, n, width,
                                                                true);
  return EXC_CUDA(cudaGetLastError());
}

static __global__ void cast_kernel(const float *x, size_t ld_x, __nv_bfloat16 *y, size_t ld_y,
                                   size_t n, size_t width) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * width)
    return;
  size_t t = i / width, c = i % width;
  y[t * ld_y + c] = __float2bfloat16_rn(x[t * ld_x + c]);
}

int exc_cast_bf16(cudaStream_t stream, const float *x, size_t ld_x, __nv_bfloat16 *y, size_t ld_y,
                  size_t n, size_t width) {
  if (!n || !width || ld_x < width || ld_y < width)
    return -EINVAL;
  cast_kernel<<<exc_blocks(n * width, 256), 256, 0, stream>>>(x, ld_x, y, ld_y, n, width);
  return EXC_CUDA(cudaGetLastError());
}

static __global__ void round_kernel(float *x, size_t ld_x, size_t n, size_t width) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * width)
    return;
  float *p = x + (i / width) * ld_x + i % width;
  *p = __bfloat162float(__float2bfloat16_rn(*p));
}

int exc_round_bf16(cudaStream_t stream, float *x, size_t ld_x, size_t n, size_t width) {
  if (!n || !width || ld_x < width)
    return -EINVAL;
  round_kernel<<<exc_blocks(n * width, 256), 256, 0, stream>>>(x, ld_x, n, width);
  return EXC_CUDA(cudaGetLastError());
}

static __global__ void add_round_kernel(float *h, const float *y, size_t ld_y, size_t n,
                                        size_t width) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * width)
    return;
  float yr = __bfloat162float(__float2bfloat16_rn(y[(i / width) * ld_y + i % width]));
  h[i] = __bfloat162float(__float2bfloat16_rn(h[i] + yr));
}

int exc_add_round_bf16(cudaStream_t stream, float *h, const float *y, size_t ld_y, size_t n,
                       size_t width) {
  if (!n || !width || ld_y < width)
    return -EINVAL;
  add_round_kernel<<<exc_blocks(n * width, 256), 256, 0, stream>>>(h, y, ld_y, n, width);
  return EXC_CUDA(cudaGetLastError());
}
