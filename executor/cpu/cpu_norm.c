/* RMSNorm and gated RMSNorm in float32 (see cpu_norm.h). The sum of squares accumulates in
 * float32 in ascending order; rsqrt is 1/sqrtf as in PyTorch on CPU. */
#include "cpu_norm.h"

#include <math.h>
#include <stdbool.h>

#include "cpu_act.h"

static float inv_rms(const float *x, size_t d, float eps) {
  float ss = 0.0f;
  for (size_t i = 0; i < d; i++)
    ss += x[i] * x[i];
  return 1.0f / sqrtf(ss / (float)d + eps);
}

void ex_cpu_rms_norm(const float *x, const float *w, float eps, float *y, size_t n, size_t d) {
  for (size_t r = 0; r < n; r++) {
    const float *xr = x + r * d;
    float *yr = y + r * d;
    float inv = inv_rms(xr, d, eps);
    for (size_t i = 0; i < d; i++)
      yr[i] = (xr[i] * inv) * (1.0f + w[i]);
  }
}

/* The shared body; bf16 rounds after each of the bf16 reference's three ops: the normalised value,
 * its product with w, the product with silu(z). */
static void gated_rms_norm(const float *x, const float *z, const float *w, float eps, float *y,
                           size_t n, size_t d, bool bf16) {
  for (size_t r = 0; r < n; r++) {
    const float *xr = x + r * d;
    const float *zr = z + r * d;
    float *yr = y + r * d;
    float inv = inv_rms(xr, d, eps);
    for (size_t i = 0; i < d; i++) {
      float s = zr[i] / (1.0f + expf(-zr[i]));
      yr[i] = bf16 ? ex_cpu_bf16(ex_cpu_bf16(ex_cpu_bf16(xr[i] * inv) * w[i]) * s)
                   : (w[i] * (xr[i] * inv)) * s;
    }
  }
}

void ex_cpu_gated_rms_norm(const float *x, const float *z, const float *w, float eps, float *y,
                           size_t n, size_t d) {
  gated_rms_norm(x, z, w, eps, y, n, d, false);
}

void ex_cpu_gated_rms_norm_bf16(const float *x, const float *z, const float *w, float eps,
                                float *y, size_t n, size_t d) {
  gated_rms_norm(x, z, w, eps, y, n, d, true);
}
