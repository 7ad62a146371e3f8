/* Float32 nn.Linear for the CPU backend (see cpu_matmul.h). Blocked over rows of w so that a
 * block of weights stays in cache while several input rows use it; the per-element summation
 * order is fixed (ascending k), which keeps results independent of n. */
#include "cpu_matmul.h"

float ex_cpu_dot(const float *a, const float *b, size_t k) {
  float s = 0.0f;
  for (size_t i = 0; i < k; i++)
    s += a[i] * b[i];
  return s;
}

void ex_cpu_linear(const float *x, const float *w, const float *bias, float *y, size_t n, size_t k,
                   size_t m) {
  enum { BLOCK_M = 64 };
  for (size_t m0 = 0; m0 < m; m0 += BLOCK_M) {
    size_t m1 = m0 + BLOCK_M < m ? m0 + BLOCK_M : m;
    for (size_t r = 0; r < n; r++) {
      const float *xr = x + r * k;
      float *yr = y + r * m;
      for (size_t j = m0; j < m1; j++)
        yr[j] = ex_cpu_dot(xr, w + j * k, k) + (bias ? bias[j] : 0.0f);
    }
  }
}

void ex_cpu_linear_lora_add(const float *x, const float *a, const float *b, float scale, float *y,
                            float *tmp, size_t n, size_t k, size_t r, size_t m) {
  ex_cpu_linear(x, a, NULL, tmp, n, k, r);
  for (size_t i = 0; i < n; i++) {
    const float *ti = tmp + i * r;
    float *yi = y + i * m;
    for (size_t j = 0; j < m; j++)
      yi[j] += ex_cpu_dot(ti, b + j * r, r) * scale;
  }
}
