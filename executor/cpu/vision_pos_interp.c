/* Bilinear position-embedding resampling (see vision_pos_interp.h). Every float32 operation follows
 * the order of the transformers code: src = idx·(side−1) / max(size−1, 1); distance = |(src − ⌊src⌋)
 * − offset|; weight = max(1 − distance, 0); 2-D weight = row weight · column weight. */
#include "vision_pos_interp.h"

#include <math.h>
#include <stdbool.h>

#include "cpu_act.h"

static void axis_taps(int idx, int size, int side, int32_t *taps, float *weights) {
  float src = (float)idx * (float)(side - 1) / (float)(size - 1 > 1 ? size - 1 : 1);
  float fl = floorf(src);
  for (int o = 0; o < 2; o++) {
    int raw = (int)fl + o;
    taps[o] = raw < 0 ? 0 : raw > side - 1 ? side - 1 : raw;
    float d = fabsf((src - fl) - (float)o);
    float wgt = 1.0f - d;
    weights[o] = wgt > 0.0f ? wgt : 0.0f;
  }
}

void ex_vision_pos_interp_taps(int row, int col, int h, int w, int side, int32_t *taps,
                               float *weights) {
  int32_t rt[2], ct[2];
  float rw[2], cw[2];
  axis_taps(row, h, side, rt, rw);
  axis_taps(col, w, side, ct, cw);
  for (int i = 0; i < 2; i++) {
    for (int j = 0; j < 2; j++) {
      taps[2 * i + j] = rt[i] * side + ct[j];
      weights[2 * i + j] = rw[i] * cw[j];
    }
  }
}

/* The shared body; bf16 stores x = R(x + R(pe)). */
static void pos_embed_add(const float *table, const int32_t *taps, const float *weights, float *x,
                          size_t n, size_t dim, bool bf16) {
  for (size_t r = 0; r < n; r++) {
    const int32_t *t = taps + 4 * r;
    const float *wt = weights + 4 * r;
    float *xr = x + r * dim;
    for (size_t i = 0; i < dim; i++) {
      float pe = 0.0f;
      for (int k = 0; k < 4; k++)
        pe += table[(size_t)t[k] * dim + i] * wt[k];
      xr[i] = bf16 ? ex_cpu_bf16(xr[i] + ex_cpu_bf16(pe)) : xr[i] + pe;
    }
  }
}

void ex_cpu_vision_pos_embed_add(const float *table, const int32_t *taps, const float *weights,
                                 float *x, size_t n, size_t dim) {
  pos_embed_add(table, taps, weights, x, n, dim, false);
}

void ex_cpu_vision_pos_embed_add_bf16(const float *table, const int32_t *taps, const float *weights,
                                      float *x, size_t n, size_t dim) {
  pos_embed_add(table, taps, weights, x, n, dim, true);
}
