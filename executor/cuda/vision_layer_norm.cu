/* Residual add + LayerNorm of the vision tower on CUDA (see cuda_vision_ops.h): one block per row,
 * two passes in fp32 (mean, then the centred sum of squares), bf16 out for the next GEMM. Twin:
 * cpu/vision_layer_norm.c, which accumulates in double. */
#include <errno.h>

#include "cuda_vision_ops.h"
#include "exc_kernel.cuh"
#include "vision_common.cuh"

#define LN_THREADS 256

static __global__ void add_layer_norm_kernel(float *x, const float *y, const __nv_bfloat16 *y_bias,
                                             const __nv_bfloat16 *w, const __nv_bfloat16 *b,
                                             __nv_bfloat16 *out, int dim, float eps,
                                             bool round_bf16) {
  __shared__ float red[32];
  size_t r = blockIdx.x;
  float *xr = x + r * (size_t)dim;
  float sum = 0.0f;
  if (y) {
    const float *yr = y + r * (size_t)dim;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
      float v = yr[i];
      if (y_bias)
        v += __bfloat162float(y_bias[i]);
      v = round_bf16 ? exc_r16(xr[i] + exc_r16(v)) : xr[i] + v;
      xr[i] = v;
      sum += v;
    }
  } else {
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
      sum += xr[i];
  }
  float mean = vis_block_sum(sum, red) / (float)dim;
  float sq = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float d = xr[i] - mean;
    sq += d * d;
  }
  float var = vis_block_sum(sq, red) / (float)dim;
  float rstd = rsqrtf(var + eps);
  __nv_bfloat16 *orow = out + r * (size_t)dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    orow[i] = __float2bfloat16((xr[i] - mean) * rstd * __bfloat162float(w[i]) +
                               __bfloat162float(b[i]));
}

extern "C" int exc_vision_add_layer_norm(cudaStream_t stream, float *x, const float *y,
                                         const __nv_bfloat16 *y_bias, const __nv_bfloat16 *w,
                                         const __nv_bfloat16 *b, __nv_bfloat16 *out, int64_t n,
                                         int dim, float eps, bool round_bf16) {
  if (n < 0 || dim < 1 || dim > 8192 || n > 0x7fffffffLL)
    return -EINVAL;
  if (n == 0)
    return 0;
  add_layer_norm_kernel<<<(unsigned)n, LN_THREADS, 0, stream>>>(x, y, y_bias, w, b, out, dim, eps,
                                                                round_bf16);
  return VIS_LAUNCHED();
}
