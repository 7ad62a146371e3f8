/* The vision tower's 2-D rotary on CUDA (see cuda_vision_ops.h): the cos/sin tables, and the qkv
 * GEMM epilogue that adds the bias, rotates q and k in fp32 (rotate_half over the whole head) and
 * rounds to bf16 once. Twin: cpu/vision_rotary.c. */
#include <errno.h>

#include "cuda_vision_ops.h"
#include "vision_common.cuh"

static __global__ void rotary_tables_kernel(const int32_t *pos, long long n, const float *inv_freq,
                                            int head_dim, float *cos_t, float *sin_t) {
  int q = head_dim / 4;
  long long total = n * (long long)head_dim;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
       e += (long long)gridDim.x * blockDim.x) {
    long long r = e / head_dim;
    int k = (int)(e - r * head_dim) % (2 * q);
    int axis = k / q, j = k % q;
    float a = __fmul_rn((float)pos[2 * r + axis], inv_freq[j]);
    cos_t[e] = cosf(a);
    sin_t[e] = sinf(a);
  }
}

extern "C" int exc_vision_rotary_tables(cudaStream_t stream, const int32_t *pos, int64_t n,
                                        const float *inv_freq, int head_dim, float *cos_t,
                                        float *sin_t) {
  if (n < 0 || head_dim < 4 || head_dim % 4 != 0)
    return -EINVAL;
  if (n == 0)
    return 0;
  rotary_tables_kernel<<<vis_blocks(n * head_dim, 256), 256, 0, stream>>>(pos, n, inv_freq,
                                                                          head_dim, cos_t, sin_t);
  return VIS_LAUNCHED();
}

/* One thread per (row, q|k|v, head, j < hd/2): it owns the pair (j, j + hd/2). */
static __global__ void qkv_rotary_kernel(const float *qkv, const __nv_bfloat16 *bias,
                                         const float *cos_t, const float *sin_t,
                                         __nv_bfloat16 *out, long long n, int heads,
                                         int head_dim) {
  int half = head_dim / 2;
  long long per_row = 3LL * heads * half, total = n * per_row;
  size_t stride = 3 * (size_t)heads * (size_t)head_dim;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < total;
       e += (long long)gridDim.x * blockDim.x) {
    long long r = e / per_row;
    int rem = (int)(e - r * per_row);
    int part = rem / (heads * half); /* 0 q, 1 k, 2 v */
    int col = rem % (heads * half), h = col / half, j = col % half;
    size_t c0 = (size_t)part * heads * head_dim + (size_t)h * head_dim + j, c1 = c0 + half;
    float a = qkv[r * stride + c0] + __bfloat162float(bias[c0]);
    float b = qkv[r * stride + c1] + __bfloat162float(bias[c1]);
    if (part < 2) {
      const float *c = cos_t + r * head_dim, *s = sin_t + r * head_dim;
      float lo = __fadd_rn(__fmul_rn(a, c[j]), __fmul_rn(-b, s[j]));
      float hi = __fadd_rn(__fmul_rn(b, c[j + half]), __fmul_rn(a, s[j + half]));
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
                                     int head_dim) {
  if (n < 0 || heads < 1 || head_dim < 4 || head_dim % 4 != 0)
    return -EINVAL;
  if (n == 0)
    return 0;
  long long total = n * 3LL * heads * (head_dim / 2);
  qkv_rotary_kernel<<<vis_blocks(total, 256), 256, 0, stream>>>(qkv, bias, cos_t, sin_t, out, n,
                                                                heads, head_dim);
  return VIS_LAUNCHED();
}
