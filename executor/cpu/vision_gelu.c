/* GELU variants (see vision_gelu.h), evaluated in float32 with the constants torch uses
 * (M_SQRT1_2 for erf; √2·(2/√π)·0.5 = √(2/π) and 0.044715 for tanh). */
#include "vision_gelu.h"

#include <math.h>

#include "cpu_act.h"

void ex_cpu_gelu(const float *x, float *y, size_t n, enum ex_gelu_kind kind) {
  const float inv_sqrt2 = 0.70710678118654752440f;
  const float beta = 0.79788456080286535588f; /* √(2/π) */
  const float kappa = 0.044715f;
  if (kind == EX_GELU_TANH) {
    for (size_t i = 0; i < n; i++) {
      float v = x[i];
      float inner = beta * (v + kappa * v * v * v);
      y[i] = 0.5f * v * (1.0f + tanhf(inner));
    }
    return;
  }
  for (size_t i = 0; i < n; i++) {
    float v = x[i];
    y[i] = 0.5f * v * (1.0f + erff(v * inv_sqrt2));
  }
}

void ex_cpu_gelu_bf16(const float *x, float *y, size_t n, enum ex_gelu_kind kind) {
  ex_cpu_gelu(x, y, n, kind);
  ex_cpu_round_bf16(y, n);
}
