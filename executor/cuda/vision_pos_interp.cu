/* Position-embedding gather-and-add of the vision tower on CUDA (see cuda_vision_ops.h). The
 * geometry (four taps and fp32 weights per patch) comes from the host (ex_vision_pos_interp_taps);
 * here each element sums its four weighted table entries in the twin's order and adds the patch
 * embedding's bias. Twin: cpu/vision_pos_interp.c. */
#include <errno.h>

#include "cuda_vision_ops.h"
#include "vision_common.cuh"

static __global__ void pos_embed_add_kernel(const __nv_bfloat16 *table, const int32_t *taps,
                                            const float *weights, const __nv_bfloat16 *bias,
                                            float *x, long long n, int dim) {
  long long total = n * (long long)dim;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
       e += (long long)gridDim.x * blockDim.x) {
    long long r = e / dim;
    int i = (int)(e - r * dim);
    const int32_t *t = taps + 4 * r;
    const float *wt = weights + 4 * r;
    float pe = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; k++)
      pe = __fadd_rn(pe, __fmul_rn(__bfloat162float(table[(size_t)t[k] * dim + i]), wt[k]));
    float v = x[e];
    if (bias)
      v = __fadd_rn(v, __bfloat162float(bias[i]));
    x[e] = __fadd_rn(v, pe);
  }
}

extern "C" int exc_vision_pos_embed_add(cudaStream_t stream, const __nv_bfloat16 *table,
                                        const int32_t *taps, const float *weights,
                                        const __nv_bfloat16 *bias, float *x, int64_t n, int dim) {
  if (n < 0 || dim < 1)
    return -EINVAL;
  if (n == 0)
    return 0;
  pos_embed_add_kernel<<<vis_blocks(n * dim, 256), 256, 0, stream>>>(table, taps, weights, bias,
                                                                        x, n, dim);
  return VIS_LAUNCHED();
}
