/* Vision 2-D rotary (see vision_rotary.h). Each product and sum is a separate float32 operation,
 * in the order torch evaluates `q * cos + rotate_half(q) * sin`. */
#include "vision_rotary.h"

#include <math.h>
#include <stdbool.h>

#include "cpu_act.h"

void ex_vision_rotary_inv_freq(int head_dim, float theta, float *inv_freq) {
  int spatial = head_dim / 2;
  for (int j = 0; j < head_dim / 4; j++) {
    float e = (float)(2 * j) / (float)spatial;
    inv_freq[j] = 1.0f / powf(theta, e);
  }
}

void ex_cpu_vision_rotary_tables(const int32_t *pos, size_t n, const float *inv_freq, int head_dim,
                                 float *cos_t, float *sin_t) {
  int q = head_dim / 4;
  for (size_t r = 0; r < n; r++) {
    float *c = cos_t + r * (size_t)head_dim;
    float *s = sin_t + r * (size_t)head_dim;
    for (int axis = 0; axis < 2; axis++) {
      float p = (float)pos[2 * r + (size_t)axis];
      for (int j = 0; j < q; j++) {
        float a = p * inv_freq[j];
        int k = axis * q + j;
        c[k] = c[k + 2 * q] = cosf(a);
        s[k] = s[k + 2 * q] = sinf(a);
      }
    }
  }
}

/* The shared body; bf16 rounds each rotated value once. */
static void rotary_apply(float *x, size_t n, size_t row_stride, int heads, int head_dim,
                         const float *cos_t, const float *sin_t, bool bf16) {
  int half = head_dim / 2;
  for (size_t r = 0; r < n; r++) {
    const float *c = cos_t + r * (size_t)head_dim;
    const float *s = sin_t + r * (size_t)head_dim;
    for (int h = 0; h < heads; h++) {
      float *v = x + r * row_stride + (size_t)h * (size_t)head_dim;
      for (int j = 0; j < half; j++) {
        float a = v[j], b = v[j + half];
        float lo = a * c[j] + (-b) * s[j];
        float hi = b * c[j + half] + a * s[j + half];
        v[j] = bf16 ? ex_cpu_bf16(lo) : lo;
        v[j + half] = bf16 ? ex_cpu_bf16(hi) : hi;
      }
    }
  }
}

void ex_cpu_vision_rotary_apply(float *x, size_t n, size_t row_stride, int heads, int head_dim,
                                const float *cos_t, const float *sin_t) {
  rotary_apply(x, n, row_stride, heads, head_dim, cos_t, sin_t, false);
}

void ex_cpu_vision_rotary_apply_bf16(float *x, size_t n, size_t row_stride, int heads, int head_dim,
                                     const float *cos_t, const float *sin_t) {
  rotary_apply(x, n, row_stride, heads, head_dim, cos_t, sin_t, true);
}
