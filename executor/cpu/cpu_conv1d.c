/* Causal depthwise conv1d + SiLU in float32 (see cpu_conv1d.h). Taps accumulate in ascending j. */
#include "cpu_conv1d.h"

#include <stdbool.h>
#include <string.h>

#include "cpu_act.h"

/* The shared body: bf16 rounds the convolution sum and the SiLU output (the bf16 reference's two
 * ops) when set. */
static void conv1d_silu(const float *x, const float *w, float *window, float *y, size_t n, size_t c,
                        size_t kernel, bool bf16) {
  size_t hist = kernel - 1;
  for (size_t t = 0; t < n; t++) {
    for (size_t ch = 0; ch < c; ch++) {
      float s = 0.0f;
      for (size_t j = 0; j < kernel; j++) {
        /* input index t - hist + j; negative indices read the window */
        size_t back = hist - j; /* how far before t */
        float xv = back <= t ? x[(t - back) * c + ch] : window[(hist - (back - t)) * c + ch];
        s += w[ch * kernel + j] * xv;
      }
      y[t * c + ch] = bf16 ? ex_cpu_bf16(ex_cpu_silu(ex_cpu_bf16(s))) : ex_cpu_silu(s);
    }
  }
  /* new window = last hist rows of (window ++ x) */
  if (n >= hist) {
    memcpy(window, x + (n - hist) * c, hist * c * sizeof(float));
  } else {
    memmove(window, window + n * c, (hist - n) * c * sizeof(float));
    memcpy(window + (hist - n) * c, x, n * c * sizeof(float));
  }
}

void ex_cpu_causal_conv1d_silu(const float *x, const float *w, float *window, float *y, size_t n,
                               size_t c, size_t kernel) {
  conv1d_silu(x, w, window, y, n, c, kernel, false);
}

void ex_cpu_causal_conv1d_silu_bf16(const float *x, const float *w, float *window, float *y,
                                    size_t n, size_t c, size_t kernel) {
  conv1d_silu(x, w, window, y, n, c, kernel, true);
}
