/* Position-embedding gather-and-add of the vision tower on CUDA (see cuda_vision_ops.h). The
 * geometry (four taps and fp32 weights per patch) comes from the host (ex_vision_pos_interp_taps);
 * here each element sums its four weighted table entries in the twin's order and adds the patch
 * embedding's bias. Twin: cpu/vision_pos_interp.c. */
#include <errno.h>

#include "cuda_vision_ops.h"
#include "exc_kernel.cuh"
#include "vision_common.cuh"

/* One block per row, threads over the columns. */
static __global__ void pos_embed_add_kernel(const __nv_bfloat16 *table, const int32_t *taps,
                                            const float *weights, const __nv_bfloat16 *bias,
                                            float *x, int dim, bool round_bf16) {
  const size_t r = blockIdx.x;
  const int32_t *t = taps + 4 * r;
  const float *wt = weights + 4 * r;
  const size_t t0 = (size_t)t[0] * dim, t1 = (size_t)t[1] * dim, t2 = (size_t)t[2] * dim,
               t3 = (size_t)t[3] * dim;
  const float w0 = wt[0], w1 = wt[1], w2 = wt[2], w3 = wt[3];
  float *xr = x + r * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float pe = __fmul_rn(__bfloat162float(table[t0 + i]), w0);
    pe = __fadd_rn(pe, __fmul_rn(__bfloat162float(table[t1 + i]), w1));
    pe = __fadd_rn(pe, __fmul_rn(__bfloat162float(table[t2 + i]), w2));
    pe = __fadd_rn(pe, __fmul_rn(__bfloat162float(table[t3 + i]), w3));
    float v = xr[i];
    if (bias)
      v = __fadd_rn(v, __bfloat162float(bias[i]));
    xr[i] = round_bf16 ? exc_r16(__fadd_rn(exc_r16(v), exc_r16(pe))) : __fadd_rn(v, pe);
  }
}

extern "C" int exc_vision_pos_embed_add(cudaStream_t stream, const __nv_bfloat16 *table,
                                        const int32_t *taps, const float *weights,
                                        const __nv_bfloat16 *bias, float *x, int64_t n, int dim,
                                        bool round_bf16) {
  if (n < 0 || n > 0x7fffffffLL || dim < 1)
    return -EINVAL;
  if (n == 0)
    return 0;
  pos_embed_add_kernel<<<(unsigned)n, dim >= 1024 ? 256 : 128, 0, stream>>>(
      table, taps, weights, bias, x, dim, round_bf16);
  return VIS_LAUNCHED();
}
