/* LayerNorm for the vision tower (see vision_layer_norm.h). Two passes per row (mean, then the
 * centred sum of squares) in double; the normalised value is formed in float32 as torch does. */
#include "vision_layer_norm.h"

#include <math.h>
#include <stdbool.h>

#include "cpu_act.h"

/* The shared body; bf16 rounds each output once. */
static void layer_norm(const float *x, const float *w, const float *b, float *y, size_t n,
                       size_t dim, float eps, bool bf16) {
  for (size_t r = 0; r < n; r++) {
    const float *xr = x + r * dim;
    float *yr = y + r * dim;
    double sum = 0.0;
    for (size_t i = 0; i < dim; i++)
      sum += xr[i];
    double mean = sum / (double)dim;
    double sq = 0.0;
    for (size_t i = 0; i < dim; i++) {
      double d = xr[i] - mean;
      sq += d * d;
    }
    float rstd = (float)(1.0 / sqrt(sq / (double)dim + (double)eps));
    float meanf = (float)mean;
    for (size_t i = 0; i < dim; i++) {
      float v = (xr[i] - meanf) * rstd * w[i] + b[i];
      yr[i] = bf16 ? ex_cpu_bf16(v) : v;
    }
  }
}

void ex_cpu_layer_norm(const float *x, const float *w, const float *b, float *y, size_t n,
                       size_t dim, float eps) {
  layer_norm(x, w, b, y, n, dim, eps, false);
}

void ex_cpu_layer_norm_bf16(const float *x, const float *w, const float *b, float *y, size_t n,
                            size_t dim, float eps) {
  layer_norm(x, w, b, y, n, dim, eps, true);
}
