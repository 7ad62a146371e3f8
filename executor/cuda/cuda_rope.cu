/* mRoPE tables and the fused q/k norm + rotary + split of cuda_rope.h: one block per (token, head)
 * vector, the head kept in shared memory between the norm and the rotation. */
#include <errno.h>
#include <math.h>

#include "cm_error.h"
#include "cuda_check.h"
#include "cuda_rope.h"
#include "exc_kernel.cuh"

enum { MAX_D = 512, PREP_THREADS = 128 };

void exc_rope_inv_freq(int rot_dims, double theta, float *inv_freq) {
  for (int j = 0; j < rot_dims / 2; j++) {
    float expo = (float)(2 * j) / (float)rot_dims;
    inv_freq[j] = 1.0f / powf((float)theta, expo);
  }
}

static __global__ void mrope_kernel(const int32_t *pos, size_t n, const float *inv_freq, int n_freq,
                                    int s1, int s2, float *cos_t, float *sin_t) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * (size_t)n_freq)
    return;
  size_t t = i / (size_t)n_freq;
  int j = (int)(i % (size_t)n_freq);
  int axis = (j % 3 == 1 && j < 3 * s1) ? 1 : (j % 3 == 2 && j < 3 * s2) ? 2 : 0;
  float ang = (float)pos[(size_t)axis * n + t] * inv_freq[j];
  cos_t[i] = cosf(ang);
  sin_t[i] = sinf(ang);
}

int exc_mrope_tables(cudaStream_t stream, const int32_t *pos, size_t n, const float *inv_freq,
                     int n_freq, const int section[3], float *cos_t, float *sin_t) {
  if (!n || n_freq <= 0)
    return -EINVAL;
  mrope_kernel<<<exc_blocks(n * (size_t)n_freq, 256), 256, 0, stream>>>(
      pos, n, inv_freq, n_freq, section[1], section[2], cos_t, sin_t);
  return EXC_CUDA(cudaGetLastError());
}

static __global__ void attn_prep_kernel(const float *qg, const float *k, const float *v, size_t ld,
                                        const float *q_norm, const float *k_norm, float eps,
                                        const float *cos_t, const float *sin_t, int rot_dims,
                                        __nv_bfloat16 *q, __nv_bfloat16 *gate, __nv_bfloat16 *k_out,
                                        __nv_bfloat16 *v_out, int n_heads, int n_kv, int d,
                                        bool round_norm) {
  __shared__ float vec[MAX_D];
  __shared__ float red[33];
  size_t t = blockIdx.x;
  int h = (int)blockIdx.y;
  const float *src;
  const float *w;
  __nv_bfloat16 *dst;
  if (h < n_heads) { /* query head: norm + rope; its gate copied */
    src = qg + t * ld + (size_t)h * 2 * d;
    w = q_norm;
    dst = q + (t * n_heads + h) * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
      gate[(t * n_heads + h) * d + i] = __float2bfloat16_rn(src[d + i]);
  } else if (h < n_heads + n_kv) { /* key head: norm + rope */
    int g = h - n_heads;
    src = k + t * ld + (size_t)g * d;
    w = k_norm;
    dst = k_out + (t * n_kv + g) * d;
  } else { /* value head: cast only */
    int g = h - n_heads - n_kv;
    const float *vs = v + t * ld + (size_t)g * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x)
      v_out[(t * n_kv + g) * d + i] = __float2bfloat16_rn(vs[i]);
    return;
  }
  /* round_norm: the projection is read as R(x) (the reference's bf16 q_proj / k_proj output; no
   * separate rounding pass before this kernel) */
  float ss = 0.0f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    float x = round_norm ? exc_r16(src[i]) : src[i];
    ss += x * x;
  }
  ss = exc_block_sum(ss, red);
  float inv = 1.0f / sqrtf(ss / (float)d + eps);
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    float x = round_norm ? exc_r16(src[i]) : src[i];
    float o = (x * inv) * (1.0f + w[i]);
    vec[i] = round_norm ? __bfloat162float(__float2bfloat16_rn(o)) : o;
  }
  __syncthreads();
  int f = rot_dims / 2;
  const float *c = cos_t + t * f, *s = sin_t + t * f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    float o;
    if (round_norm) { /* the bf16 reference: R(R(x·c) ∓ R(x'·s)), spec §5.1 step 4 */
      if (i < f)
        o = exc_r16(exc_r16(vec[i] * c[i]) - exc_r16(vec[i + f] * s[i]));
      else if (i < rot_dims)
        o = exc_r16(exc_r16(vec[i] * c[i - f]) + exc_r16(vec[i - f] * s[i - f]));
      else
        o = vec[i];
    } else if (i < f) {
      o = vec[i] * c[i] - vec[i + f] * s[i];
    } else if (i < rot_dims) {
      o = vec[i] * c[i - f] + vec[i - f] * s[i - f];
    } else {
      o = vec[i];
    }
    dst[i] = __float2bfloat16_rn(o);
  }
}

static int attn_prep(cudaStream_t stream, const float *qg, const float *k, const float *v,
                     size_t ld, const float *q_norm, const float *k_norm, float eps,
                     const float *cos_t, const float *sin_t, int rot_dims, __nv_bfloat16 *q,
                     __nv_bfloat16 *gate, __nv_bfloat16 *k_out, __nv_bfloat16 *v_out, size_t n,
                     int n_heads, int n_kv, int head_dim, bool round_norm) {
  if (!n || n > 0x7fffffffu || n_heads <= 0 || n_kv <= 0 || head_dim <= 0 || head_dim > MAX_D ||
      rot_dims < 0 || rot_dims > head_dim || rot_dims % 2)
    return -EINVAL;
  dim3 grid((unsigned)n, (unsigned)(n_heads + 2 * n_kv));
  attn_prep_kernel<<<grid, PREP_THREADS, 0, stream>>>(qg, k, v, ld, q_norm, k_norm, eps, cos_t,
                                                      sin_t, rot_dims, q, gate, k_out, v_out,
                                                      n_heads, n_kv, head_dim, round_norm);
  return EXC_CUDA(cudaGetLastError());
}

int exc_attn_prep(cudaStream_t stream, const float *qg, const float *k, const float *v, size_t ld,
                  const float *q_norm, const float *k_norm, float eps, const float *cos_t,
                  const float *sin_t, int rot_dims, __nv_bfloat16 *q, __nv_bfloat16 *gate,
                  __nv_bfloat16 *k_out, __nv_bfloat16 *v_out, size_t n, int n_heads, int n_kv,
                  int head_dim) {
  return attn_prep(stream, qg, k, v, ld, q_norm, k_norm, eps, cos_t, sin_t, rot_dims, q, gate,
                   k_out, v_out, n, n_heads, n_kv, head_dim, false);
}

int exc_attn_prep_rounded(cudaStream_t stream, const float *qg, const float *k, const float *v,
                          size_t ld, const float *q_norm, const float *k_norm, float eps,
                          const float *cos_t, const float *sin_t, int rot_dims, __nv_bfloat16 *q,
                          __nv_bfloat16 *gate, __nv_bfloat16 *k_out, __nv_bfloat16 *v_out, size_t n,
                          int n_heads, int n_kv, int head_dim) {
  return attn_prep(stream, qg, k, v, ld, q_norm, k_norm, eps, cos_t, sin_t, rot_dims, q, gate,
                   k_out, v_out, n, n_heads, n_kv, head_dim, true);
}
