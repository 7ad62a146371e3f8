/* GELU (tanh and exact erf) with the preceding GEMM's bias on CUDA, bf16 out for the next GEMM; plus
 * the two elementwise helpers of the tower (bias add, fp32 → bf16 cast). Twin: cpu/vision_gelu.c
 * (same constants, fp32 tanhf / erff). */
#include <errno.h>

#include "cuda_vision_ops.h"
#include "exc_kernel.cuh"
#include "vision_common.cuh"

/* One block per row (gridDim.x = rows), threads over the columns: no 64-bit index division. */
template <int KIND>
static __global__ void gelu_kernel(const float *x, const __nv_bfloat16 *bias, __nv_bfloat16 *out,
                                   int dim, bool round_bf16) {
  const float inv_sqrt2 = 0.70710678118654752440f;
  const float beta = 0.79788456080286535588f;
  const float kappa = 0.044715f;
  const size_t base = (size_t)blockIdx.x * (size_t)dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = x[base + i];
    if (bias)
      v += __bfloat162float(bias[i]);
    if (round_bf16) /* the fc1 output R(x·Wᵀ + b) */
      v = exc_r16(v);
    float g;
    if (KIND == EX_GELU_TANH)
      g = 0.5f * v * (1.0f + tanhf(beta * (v + kappa * v * v * v)));
    else
      g = 0.5f * v * (1.0f + erff(v * inv_sqrt2));
    out[base + i] = __float2bfloat16(g);
  }
}

extern "C" int exc_vision_gelu(cudaStream_t stream, const float *x, const __nv_bfloat16 *bias,
                               __nv_bfloat16 *out, int64_t n, int dim, enum ex_gelu_kind kind,
                               bool round_bf16) {
  if (n < 0 || n > 0x7fffffffLL || dim < 1 || (kind != EX_GELU_TANH && kind != EX_GELU_ERF))
    return -EINVAL;
  if (n == 0)
    return 0;
  int threads = dim >= 1024 ? 512 : 128;
  if (kind == EX_GELU_TANH)
    gelu_kernel<EX_GELU_TANH><<<(unsigned)n, threads, 0, stream>>>(x, bias, out, dim, round_bf16);
  else
    gelu_kernel<EX_GELU_ERF><<<(unsigned)n, threads, 0, stream>>>(x, bias, out, dim, round_bf16);
  return VIS_LAUNCHED();
}

static __global__ void add_bias_kernel(float *x, const __nv_bfloat16 *bias, int dim,
                                       bool round_bf16) {
  const size_t base = (size_t)blockIdx.x * (size_t)dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = x[base + i] + __bfloat162float(bias[i]);
    x[base + i] = round_bf16 ? exc_r16(v) : v;
  }
}

extern "C" int exc_vision_add_bias(cudaStream_t stream, float *x, const __nv_bfloat16 *bias,
                                   int64_t n, int dim, bool round_bf16) {
  if (n < 0 || n > 0x7fffffffLL || dim < 1 || !bias)
    return -EINVAL;
  if (n == 0)
    return 0;
  add_bias_kernel<<<(unsigned)n, dim >= 1024 ? 512 : 128, 0, stream>>>(x, bias, dim, round_bf16);
  return VIS_LAUNCHED();
}

static __global__ void to_bf16_kernel(const float *x, __nv_bfloat16 *out, long long n) {
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
       e += (long long)gridDim.x * blockDim.x)
    out[e] = __float2bfloat16(x[e]);
}

extern "C" int exc_vision_to_bf16(cudaStream_t stream, const float *x, __nv_bfloat16 *out,
                                  int64_t n) {
  if (n < 0)
    return -EINVAL;
  if (n == 0)
    return 0;
  to_bf16_kernel<<<vis_blocks(n, 256), 256, 0, stream>>>(x, out, n);
  return VIS_LAUNCHED();
}
