/* SwiGLU, SiLU and bf16 rounding in float32 (see cpu_act.h). */
#include "cpu_act.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

float ex_cpu_silu(float x) {
  return x / (1.0f + expf(-x));
}

void ex_cpu_swiglu(const float *gate, const float *up, float *out, size_t n) {
  for (size_t i = 0; i < n; i++)
    out[i] = ex_cpu_silu(gate[i]) * up[i];
}

void ex_cpu_swiglu_bf16(const float *gate, const float *up, float *out, size_t n) {
  for (size_t i = 0; i < n; i++)
    out[i] = ex_cpu_bf16(ex_cpu_bf16(ex_cpu_silu(gate[i])) * up[i]);
}

float ex_cpu_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    u |= 0x00400000u; /* quiet NaN, keep it NaN after truncation */
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
  }
  u &= 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

void ex_cpu_round_bf16(float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    x[i] = ex_cpu_bf16(x[i]);
}
