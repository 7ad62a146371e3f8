/* Varlen vision attention (see vision_attention.h). One query row at a time: scores over its
 * segment (dot products in ascending order), max-subtracted softmax, then the weighted sum of v rows
 * in ascending order; everything in float32, like torch's eager CPU path. */
#include "vision_attention.h"

#include <math.h>

#include <stdbool.h>

#include "cpu_act.h"
#include "cpu_matmul.h"

/* The shared body; bf16 evaluates it as sdpa's flash path in a bf16 run: the unnormalised weights
 * e^(s − max) are rounded to bf16 before P·V (their float32 sum normalises) and o is rounded. */
static void attention(const float *qkv, int heads, int head_dim, const int32_t *cu_seqlens,
                      int n_segs, float scale, float *out, float *scratch, bool bf16) {
  size_t hd = (size_t)head_dim, dim = (size_t)heads * hd, stride = 3 * dim;
  for (int s = 0; s < n_segs; s++) {
    size_t s0 = (size_t)cu_seqlens[s], s1 = (size_t)cu_seqlens[s + 1];
    for (int h = 0; h < heads; h++) {
      size_t qo = (size_t)h * hd, ko = dim + qo, vo = 2 * dim + qo;
      for (size_t i = s0; i < s1; i++) {
        const float *q = qkv + i * stride + qo;
        float mx = -INFINITY;
        for (size_t j = s0; j < s1; j++) {
          float sc = ex_cpu_dot(q, qkv + j * stride + ko, hd) * scale;
          scratch[j - s0] = sc;
          if (sc > mx)
            mx = sc;
        }
        float sum = 0.0f;
        for (size_t j = s0; j < s1; j++) {
          float e = expf(scratch[j - s0] - mx);
          scratch[j - s0] = e;
          sum += e;
        }
        float *o = out + i * dim + qo;
        for (size_t d = 0; d < hd; d++)
          o[d] = 0.0f;
        float inv = 1.0f / sum;
        for (size_t j = s0; j < s1; j++) {
          float p = bf16 ? ex_cpu_bf16(scratch[j - s0]) : scratch[j - s0] / sum;
          const float *v = qkv + j * stride + vo;
          for (size_t d = 0; d < hd; d++)
            o[d] += p * v[d];
        }
        if (bf16)
          for (size_t d = 0; d < hd; d++)
            o[d] = ex_cpu_bf16(o[d] * inv);
      }
    }
  }
}

void ex_cpu_vision_attention(const float *qkv, size_t n, int heads, int head_dim,
                             const int32_t *cu_seqlens, int n_segs, float scale, float *out,
                             float *scratch) {
  (void)n;
  attention(qkv, heads, head_dim, cu_seqlens, n_segs, scale, out, scratch, false);
}

void ex_cpu_vision_attention_bf16(const float *qkv, size_t n, int heads, int head_dim,
                                  const int32_t *cu_seqlens, int n_segs, float scale, float *out,
                                  float *scratch) {
  (void)n;
  attention(qkv, heads, head_dim, cu_seqlens, n_segs, scale, out, scratch, true);
}
