/* mRoPE tables and application in float32 (see cpu_rope.h). The inverse frequencies follow the
 * reference's float32 recipe (exponent in fp32, powf, reciprocal), so angles agree to the ulp. */
#include "cpu_rope.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>

#include "cpu_act.h"

int ex_cpu_mrope_tables(const int32_t *pos, size_t n, int rot_dims, double theta,
                        const int section[3], float *cos_t, float *sin_t) {
  if (rot_dims <= 0 || rot_dims % 2)
    return -EINVAL;
  int f = rot_dims / 2;
  for (int j = 0; j < f; j++) {
    float expo = (float)(2 * j) / (float)rot_dims;
    float inv = 1.0f / powf((float)theta, expo);
    int axis = 0;
    if (j % 3 == 1 && j < 3 * section[1])
      axis = 1;
    else if (j % 3 == 2 && j < 3 * section[2])
      axis = 2;
    for (size_t t = 0; t < n; t++) {
      float ang = (float)pos[(size_t)axis * n + t] * inv;
      cos_t[t * (size_t)f + (size_t)j] = cosf(ang);
      sin_t[t * (size_t)f + (size_t)j] = sinf(ang);
    }
  }
  return 0;
}

/* The shared body; bf16 rounds each product and the sum as the bf16 reference (one op each). */
static void rope_apply(float *x, size_t n, size_t n_heads, size_t head_dim, size_t rot_dims,
                       const float *cos_t, const float *sin_t, bool bf16) {
  size_t f = rot_dims / 2;
  for (size_t t = 0; t < n; t++) {
    const float *c = cos_t + t * f;
    const float *s = sin_t + t * f;
    for (size_t h = 0; h < n_heads; h++) {
      float *v = x + (t * n_heads + h) * head_dim;
      for (size_t j = 0; j < f; j++) {
        float a = v[j], b = v[j + f];
        if (bf16) {
          v[j] = ex_cpu_bf16(ex_cpu_bf16(a * c[j]) - ex_cpu_bf16(b * s[j]));
          v[j + f] = ex_cpu_bf16(ex_cpu_bf16(b * c[j]) + ex_cpu_bf16(a * s[j]));
        } else {
          v[j] = a * c[j] - b * s[j];
          v[j + f] = b * c[j] + a * s[j];
        }
      }
    }
  }
}

void ex_cpu_rope_apply(float *x, size_t n, size_t n_heads, size_t head_dim, size_t rot_dims,
                       const float *cos_t, const float *sin_t) {
  rope_apply(x, n, n_heads, head_dim, rot_dims, cos_t, sin_t, false);
}

void ex_cpu_rope_apply_bf16(float *x, size_t n, size_t n_heads, size_t head_dim, size_t rot_dims,
                            const float *cos_t, const float *sin_t) {
  rope_apply(x, n, n_heads, head_dim, rot_dims, cos_t, sin_t, true);
}
