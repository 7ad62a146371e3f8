/* 3-axis mRoPE positions of a token span with image runs (transformers' get_rope_index walk).
 * Pure and allocation-free, so prompt compilation, continuation rows and tests share it.
 * Video (t > 1, time intervals) is left out: OmniJev splits video into single-frame images. */
#include "pp_image.h"

#include <stdint.h>

int pp_mrope_positions(const int32_t *ids, size_t n_ids, int32_t image_token_id,
                       const struct pp_grid *grids, size_t n_grids, int32_t start_pos,
                       int32_t *ret_pos, int32_t *ret_next_pos, struct cm_diag *diag) {
  /* Validate first so that ret_pos is written only on success. */
  size_t g = 0;
  int64_t P = start_pos;
  for (size_t i = 0; i < n_ids;) {
    if (ids[i] != image_token_id) {
      P++;
      i++;
      continue;
    }
    size_t run = 0;
    while (i + run < n_ids && ids[i + run] == image_token_id)
      run++;
    if (g == n_grids)
      return cm_diag_set(diag, -CM_EFORMAT, "unexpected image placeholders at token %zu", i);
    const struct pp_grid *gr = &grids[g];
    if (gr->t != 1 || gr->h <= 0 || gr->w <= 0 || gr->h % 2 || gr->w % 2)
      return cm_diag_set(diag, -CM_EFORMAT, "invalid image grid (%d, %d, %d) of image %zu", gr->t,
                         gr->h, gr->w, g);
    if ((uint64_t)run != (uint64_t)(gr->h / 2) * (uint64_t)(gr->w / 2))
      return cm_diag_set(diag, -CM_EFORMAT,
                         "image grid placeholder mismatch: image %zu has %zu placeholders, its "
                         "grid (1, %d, %d) needs %d",
                         g, run, gr->h, gr->w, (gr->h / 2) * (gr->w / 2));
    P += (gr->h > gr->w ? gr->h : gr->w) / 2;
    g++;
    i += run;
  }
  if (g != n_grids)
    return cm_diag_set(diag, -CM_EFORMAT, "missing image placeholders: %zu grids, %zu images",
                       n_grids, g);
  if (P > INT32_MAX)
    return cm_diag_set(diag, -CM_ELIMIT, "mRoPE position %lld exceeds INT32_MAX", (long long)P);

  int32_t *pt = ret_pos, *ph = ret_pos + n_ids, *pw = ret_pos + 2 * n_ids;
  int32_t p = start_pos;
  g = 0;
  for (size_t i = 0; i < n_ids;) {
    if (ids[i] != image_token_id) {
      pt[i] = ph[i] = pw[i] = p++;
      i++;
      continue;
    }
    int32_t lh = grids[g].h / 2, lw = grids[g].w / 2;
    for (int32_t a = 0; a < lh; a++)
      for (int32_t b = 0; b < lw; b++, i++) {
        pt[i] = p;
        ph[i] = p + a;
        pw[i] = p + b;
      }
    p += lh > lw ? lh : lw;
    g++;
  }
  *ret_next_pos = p;
  return 0;
}
