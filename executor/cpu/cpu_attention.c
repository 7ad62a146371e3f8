/* Gated causal GQA attention in float32 (see cpu_attention.h): one query row at a time, scores
 * over the visible keys, max-subtracted softmax, weighted sum of values, sigmoid gate. */
#include "cpu_attention.h"

#include <math.h>
#include <stdbool.h>

#include "cpu_act.h"
#include "cpu_matmul.h"

/* The shared body; bf16 evaluates it as the bf16 reference's sdpa flash path and gate product do:
 * the unnormalised weights e^(s − max) rounded to bf16 before P·V (the sum of weights stays
 * float32), o rounded, then R(o · R(sigmoid(gate))). */
static void attention_gated(const float *q, const float *gate, const float *k, const float *v,
                            float *out, float *scratch, size_t n, size_t n_past, size_t n_heads,
                            size_t n_kv, size_t head_dim, float scale, bool bf16) {
  size_t group = n_heads / n_kv;
  for (size_t t = 0; t < n; t++) {
    size_t n_vis = n_past + t + 1;
    for (size_t h = 0; h < n_heads; h++) {
      const float *qh = q + (t * n_heads + h) * head_dim;
      const float *gh = gate + (t * n_heads + h) * head_dim;
      size_t kvh = h / group;
      float mx = -INFINITY;
      for (size_t j = 0; j < n_vis; j++) {
        float s = ex_cpu_dot(qh, k + (j * n_kv + kvh) * head_dim, head_dim) * scale;
        scratch[j] = s;
        if (s > mx)
          mx = s;
      }
      float sum = 0.0f;
      for (size_t j = 0; j < n_vis; j++) {
        scratch[j] = expf(scratch[j] - mx);
        sum += scratch[j];
      }
      float inv = 1.0f / sum;
      float *oh = out + (t * n_heads + h) * head_dim;
      for (size_t d = 0; d < head_dim; d++)
        oh[d] = 0.0f;
      for (size_t j = 0; j < n_vis; j++) {
        float p = bf16 ? ex_cpu_bf16(scratch[j]) : scratch[j] * inv;
        const float *vj = v + (j * n_kv + kvh) * head_dim;
        for (size_t d = 0; d < head_dim; d++)
          oh[d] += p * vj[d];
      }
      for (size_t d = 0; d < head_dim; d++) {
        float sg = 1.0f / (1.0f + expf(-gh[d]));
        oh[d] = bf16 ? ex_cpu_bf16(ex_cpu_bf16(oh[d] * inv) * ex_cpu_bf16(sg)) : oh[d] * sg;
      }
    }
  }
}

void ex_cpu_attention_gated(const float *q, const float *gate, const float *k, const float *v,
                            float *out, float *scratch, size_t n, size_t n_past, size_t n_heads,
                            size_t n_kv, size_t head_dim, float scale) {
  attention_gated(q, gate, k, v, out, scratch, n, n_past, n_heads, n_kv, head_dim, scale, false);
}

void ex_cpu_attention_gated_bf16(const float *q, const float *gate, const float *k,
                                 const float *v, float *out, float *scratch, size_t n,
                                 size_t n_past, size_t n_heads, size_t n_kv, size_t head_dim,
                                 float scale) {
  attention_gated(q, gate, k, v, out, scratch, n, n_past, n_heads, n_kv, head_dim, scale, true);
}
