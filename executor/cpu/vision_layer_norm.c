/* LayerNorm for the vision tower (see vision_layer_norm.h). Two passes per row (mean, then the
 * centred sum of squares) in double; the normalised value is formed in float32 as torch does. */
#include "vision_layer_norm.h"

#include <math.h>

void ex_cpu_layer_norm(const float *x, const float *w, const float *b, float *y, size_t n,
                       size_t dim, float eps) {
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
    for (size_t i = 0; i < dim; i++)
      yr[i] = (xr[i] - meanf) * rstd * w[i] + b[i];
  }
}
