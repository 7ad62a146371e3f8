/* The vision tower's 2-D rotary on CUDA (see cuda_vision_ops.h): the cos/sin tables, and the qkv
 * GEMM epilogue that adds the bias, rotates q and k in fp32 (rotate_half over the whole head) and
 * rounds to bf16 once. Twin: cpu/vision_rotary.c. */
#include <errno.h>

#include "cuda_vision_ops.h"
#include "exc_kernel.cuh"
#include "vision_common.cuh"

/* One block per row, threads over the head_dim table entries. */
static __global__ void rotary_tables_kernel(const int32_t *pos, const float *inv_freq, int head_dim,
                                            float *cos_t, float *sin_t) {
  const int q = head_dim / 4;
  const size_t r = blockIdx.x;
  for (int e = threadIdx.x; e < head_dim; e += blockDim.x) {
    const int k = e % (2 * q), axis = k / q, j = k % q;
    const float a = __fmul_rn((float)pos[2 * r + axis], inv_freq[j]);
    cos_t[r * head_dim + e] = cosf(a);
    sin_t[r * head_dim + e] = sinf(a);
  }
}

extern "C" int exc_vision_rotary_tables(cudaStream_t stream, const int32_t *pos, int64_t n,
                                        const float *inv_freq, int head_dim, float *cos_t,
                                        float *sin_t) {
  if (n < 0 || n > 0x7fffffffLL || head_dim < 4 || head_dim % 4 != 0)
    return -EINVAL;
  if (n == 0)
    return 0;
  rotary_tables_kernel<<<(unsigned)n, 128, 0, stream>>>(pos, inv_freq, head_dim, cos_t, sin_t);
  return VIS_LAUNCHED();
}

/* One block per row; thread item (part q|k|v, head, j < hd/2) owns the pair (j, j + hd/2). */
static __global__ void qkv_rotary_kernel(const float *qkv, const __nv_bfloat16 *bias,
                                         const float *cos_t, const float *sin_t, __nv_bfloat16 *out,
                                         int heads, int head_dim, bool round_bf16) {
  const int half = head_dim / 2, per_part = heads * half;
  const size_t r = blockIdx.x, stride = 3 * (size_t)heads * (size_t)head_dim;
  const float *c = cos_t + r * head_dim, *s = sin_t + r * head_dim;
  for (int item = threadIdx.x; item < 3 * per_part; item += blockDim.x) {
    const int part = item / per_part, col = item % per_part, h = col / half, j = col % half;
    const size_t c0 = (size_t)part * heads * head_dim + (size_t)h * head_dim + j, c1 = c0 + half;
    float a = qkv[r * stride + c0] + __bfloat162float(bias[c0]);
    float b = qkv[r * stride + c1] + __bfloat162float(bias[c1]);
    if (round_bf16) { /* qkv = R(a·Wᵀ + b) before the rotation */
      a = exc_r16(a);
      b = exc_r16(b);
    }
    if (part < 2) {
      const float lo = __fadd_rn(__fmul_rn(a, c[j]), __fmul_rn(-b, s[j]));
      const float hi = __fadd_rn(__fmul_rn(b, c[j + half]), __fmul_rn(a, s[j + half]));
      a = lo;
      b = hi;
    }
    out[r * stride + c0] = __float2bfloat16(a);
    out[r * stride + c1] = __float2bfloat16(b);
  }
}

extern "C" int exc_vision_qkv_rotary(cudaStream_t stream, const float *qkv,
                                     const __nv_bfloat16 *bias, const float *cos_t,
                                     const float *sin_t, __nv_bfloat16 *out, int64_t n, int heads,
                                     int head_dim, bool round_bf16) {
  if (n < 0 || n > 0x7fffffffLL || heads < 1 || head_dim < 4 || head_dim % 4 != 0)
    return -EINVAL;
  if (n == 0)
    return 0;
  qkv_rotary_kernel<<<(unsigned)n, 512, 0, stream>>>(qkv, bias, cos_t, sin_t, out, heads, head_dim,
                                                     round_bf16);
  return VIS_LAUNCHED();
}
