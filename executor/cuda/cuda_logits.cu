/* Selected-row logits and the chunked full-vocabulary log-prob (cuda_logits.h). The log-prob keeps
 * a running (max, sum) per position across chunks; each chunk's logits come from one exc_gemm with
 * bf16 output into the scratch, so the per-chunk GEMM shape is fixed and rows stay independent. */
#include <errno.h>
#include <math.h>

#include "cm_error.h"
#include "cuda_check.h"
#include "cuda_logits.h"
#include "exc_kernel.cuh"

static __global__ void lm_rows_kernel(const __nv_bfloat16 *x, size_t ld_x,
                                      const __nv_bfloat16 *w, const int32_t *rows, float *out,
                                      size_t n, size_t m, size_t h, bool round_bf16) {
  size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x & 31;
  if (warp >= n * m)
    return;
  size_t i = warp / m, j = warp % m;
  const __nv_bfloat16 *xr = x + i * ld_x, *wr = w + (size_t)rows[j] * h;
  float s = 0.0f;
  for (size_t c = lane; c < h; c += 32)
    s += __bfloat162float(xr[c]) * __bfloat162float(wr[c]);
  for (int o = 16; o > 0; o >>= 1)
    s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0)
    out[warp] = round_bf16 ? __bfloat162float(__float2bfloat16_rn(s)) : s;
}

int exc_lm_rows(cudaStream_t stream, const __nv_bfloat16 *x, size_t ld_x, const __nv_bfloat16 *w,
                const int32_t *rows, float *out, size_t n, size_t m, size_t h, bool round_bf16) {
  if (!n || !m || !h || ld_x < h)
    return -EINVAL;
  lm_rows_kernel<<<exc_blocks(n * m * 32, 256), 256, 0, stream>>>(x, ld_x, w, rows, out, n, m, h,
                                                                  round_bf16);
  return EXC_CUDA(cudaGetLastError());
}

static size_t align256(size_t b) {
  return (b + 255) / 256 * 256;
}

size_t exc_lm_logprob_scratch_bytes(size_t n, size_t chunk) {
  return align256(n * chunk * 2) + 3 * align256(n * sizeof(float));
}

enum { LSE_THREADS = 256 };

/* One block per position: the chunk's max and Σ exp, merged into the running (mx, sum); the
 * target's logit kept when it falls in this chunk. first: the state is uninitialised. */
static __global__ void lse_chunk_kernel(const __nv_bfloat16 *l, size_t ld, size_t c0, size_t cw,
                                        const int32_t *targets, float *mx, float *sum,
                                        float *tgt, bool first) {
  __shared__ float red[33];
  size_t i = blockIdx.x;
  const __nv_bfloat16 *row = l + i * ld;
  float cm = -INFINITY;
  for (size_t c = threadIdx.x; c < cw; c += blockDim.x)
    cm = fmaxf(cm, __bfloat162float(row[c]));
  cm = exc_block_max(cm, red);
  float cs = 0.0f;
  for (size_t c = threadIdx.x; c < cw; c += blockDim.x)
    cs += expf(__bfloat162float(row[c]) - cm);
  cs = exc_block_sum(cs, red);
  if (threadIdx.x == 0) {
    if (first) {
      mx[i] = cm;
      sum[i] = cs;
      tgt[i] = NAN;
    } else {
      float m0 = mx[i], nm = fmaxf(m0, cm);
      sum[i] = sum[i] * expf(m0 - nm) + cs * expf(cm - nm);
      mx[i] = nm;
    }
    size_t t = (size_t)targets[i];
    if (t >= c0 && t < c0 + cw)
      tgt[i] = __bfloat162float(row[t - c0]);
  }
}

static __global__ void lse_final_kernel(const float *mx, const float *sum, const float *tgt,
                                        float *out, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = tgt[i] - (mx[i] + logf(sum[i]));
}

int exc_lm_logprob(struct exc_gemm *g, cudaStream_t stream, const __nv_bfloat16 *x, size_t ld_x,
                   const __nv_bfloat16 *w, size_t vocab, const int32_t *targets, float *out,
                   void *scratch, size_t n, size_t h, size_t chunk) {
  if (!n || !vocab || !chunk || chunk % EXC_GEMM_ALIGN_ELEMS || n > 0x7fffffffu)
    return -EINVAL;
  size_t vocab_pad = exc_gemm_pad(vocab);
  char *p = (char *)scratch;
  __nv_bfloat16 *l = (__nv_bfloat16 *)p;
  p += align256(n * chunk * 2);
  float *mx = (float *)p;
  p += align256(n * sizeof(float));
  float *sum = (float *)p;
  p += align256(n * sizeof(float));
  float *tgt = (float *)p;
  for (size_t c0 = 0; c0 < vocab; c0 += chunk) {
    size_t rows = c0 + chunk <= vocab_pad ? chunk : vocab_pad - c0; /* GEMM width, multiple of 8 */
    size_t valid = c0 + rows <= vocab ? rows : vocab - c0;           /* logits in the normaliser */
    int r = exc_gemm(g, stream, x, ld_x, w + c0 * h, l, chunk, EXC_DTYPE_BF16, false, n, h, rows);
    if (r < 0)
      return r;
    lse_chunk_kernel<<<(unsigned)n, LSE_THREADS, 0, stream>>>(l, chunk, c0, valid, targets, mx, sum,
                                                              tgt, c0 == 0);
    r = EXC_CUDA(cudaGetLastError());
    if (r < 0)
      return r;
  }
  lse_final_kernel<<<exc_blocks(n, 256), 256, 0, stream>>>(mx, sum, tgt, out, n);
  return EXC_CUDA(cudaGetLastError());
}
