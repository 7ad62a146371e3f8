/* OmniJev's multi-image panel (spec/omnijev.md §10.5, `panels.compose`): several stills tiled
 * into one canvas with a numeral above each, then a JPEG quality-88 round trip. The geometry,
 * thumbnails and JPEG encoder match Pillow 12.3 exactly; the numerals cannot (Pillow draws them
 * with its embedded default font, Aileron Regular 10 px, which is not copied here): they are
 * rendered by libvips' text operation with DejaVu Sans Condensed 10 px (Debian
 * fonts-dejavu-extra), the closest glyph box found. The measured difference is in
 * recipe/omnijev/README.md. */
#include "pp_image.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vips/vips.h>

enum {
  BORDER = 6,  /* px around and between cells */
  BAND = 22,   /* px label band above each image */
  FILL = 32,   /* canvas grey level */
  TEXT_DX = 2, /* the numeral's origin in the cell (Pillow's text anchor "la") */
  INK_DY = 6,  /* px from the cell top to the top of Pillow's digits (origin y + 4 + 2) */
};

#define NUMERAL_FONT                                                                               \
  "DejaVu Sans Condensed 10" /* pt at dpi 72 = px; the closest to Pillow's glyphs */

void pp_image_panel_grid(uint32_t n, uint32_t *ret_cols, uint32_t *ret_rows) {
  if (n <= 1)
    *ret_cols = 1, *ret_rows = 1;
  else if (n == 2)
    *ret_cols = 2, *ret_rows = 1;
  else if (n <= 4)
    *ret_cols = 2, *ret_rows = 2;
  else
    *ret_cols = 3, *ret_rows = (n + 2) / 3;
}

/* Pillow's ImageDraw.text fill through a coverage mask: DIV255(bg (255 - a) + ink a). */
static uint8_t blend(uint8_t bg, uint8_t ink, uint8_t a) {
  unsigned t = (unsigned)bg * (255u - a) + (unsigned)ink * a + 128u;
  return (uint8_t)(((t >> 8) + t) >> 8);
}

/* Draws the numeral `k` in white with its ink's top-left at (x, y), clipped to the canvas.
 * Returns 0, or -CM_EUNSUPPORTED when libvips cannot render text. */
static int draw_numeral(struct pp_rgb *canvas, uint32_t k, uint32_t x, uint32_t y) {
  char text[16];
  snprintf(text, sizeof text, "%u", k);
  VipsImage *t = NULL;
  if (vips_text(&t, text, "font", NUMERAL_FONT, "dpi", 72, NULL)) {
    vips_error_clear();
    return -CM_EUNSUPPORTED;
  }
  size_t n = 0;
  uint8_t *m = vips_image_write_to_memory(t, &n);
  int w = t->Xsize, h = t->Ysize;
  g_object_unref(t);
  if (!m || n != (size_t)w * h) {
    g_free(m);
    return -CM_EUNSUPPORTED;
  }
  int x0 = w, y0 = h; /* the ink's top-left inside the mask */
  for (int j = 0; j < h; j++)
    for (int i = 0; i < w; i++)
      if (m[(size_t)j * w + i]) {
        x0 = i < x0 ? i : x0;
        y0 = j < y0 ? j : y0;
      }
  for (int j = y0; j < h; j++)
    for (int i = x0; i < w; i++) {
      uint8_t a = m[(size_t)j * w + i];
      size_t cx = x + (size_t)(i - x0), cy = y + (size_t)(j - y0);
      if (!a || cx >= canvas->width || cy >= canvas->height)
        continue;
      uint8_t *p = canvas->data + (cy * canvas->width + cx) * 3;
      for (int c = 0; c < 3; c++)
        p[c] = blend(p[c], 255, a);
    }
  g_free(m);
  return 0;
}

int pp_image_panel_compose(const struct pp_rgb *stills, uint32_t n, struct pp_rgb *ret_canvas) {
  if (n == 0 || n > PP_IMAGE_PANEL_MAX_STILLS)
    return -EINVAL;
  int rc = pp_image_global_init();
  if (rc)
    return rc;
  struct pp_rgb *th = calloc(n, sizeof *th);
  uint8_t *d = NULL;
  if (!th)
    return -ENOMEM;
  uint32_t cols, rows, cw = 0, ch = 0;
  pp_image_panel_grid(n, &cols, &rows);
  for (uint32_t k = 0; !rc && k < n; k++) {
    rc = pp_image_thumbnail(&stills[k], PP_IMAGE_PANEL_MAX_SIDE, &th[k]);
    if (!rc) {
      cw = th[k].width > cw ? th[k].width : cw;
      ch = th[k].height > ch ? th[k].height : ch;
    }
  }
  if (rc)
    goto done;
  /* cells are at most 448 px and n at most PP_IMAGE_PANEL_MAX_STILLS: at most 1368 x 2862 */
  uint64_t W = (uint64_t)cols * cw + (uint64_t)(cols + 1) * BORDER;
  uint64_t H = (uint64_t)rows * (ch + BAND) + (uint64_t)(rows + 1) * BORDER;
  if (!(d = malloc((size_t)(W * H * 3)))) {
    rc = -ENOMEM;
    goto done;
  }
  memset(d, FILL, (size_t)(W * H * 3));
  struct pp_rgb cv = {(uint32_t)W, (uint32_t)H, d};
  for (uint32_t k = 0; k < n; k++) {
    uint32_t r = k / cols, c = k % cols;
    uint32_t x = BORDER + c * (cw + BORDER), y = BORDER + r * (ch + BAND + BORDER);
    if ((rc = draw_numeral(&cv, k + 1, x + TEXT_DX, y + INK_DY)))
      goto done;
    const struct pp_rgb *s = &th[k];
    uint32_t px = x + (cw - s->width) / 2, py = y + BAND + (ch - s->height) / 2;
    for (uint32_t j = 0; j < s->height; j++)
      memcpy(d + ((size_t)(py + j) * W + px) * 3, s->data + (size_t)j * s->width * 3,
             (size_t)s->width * 3);
  }
  *ret_canvas = cv;
  d = NULL;
done:
  for (uint32_t k = 0; k < n; k++)
    pp_rgb_fini(&th[k]);
  free(th);
  free(d);
  return rc;
}

int pp_image_panel(const struct pp_rgb *stills, uint32_t n, struct pp_rgb *ret_panel) {
  struct pp_rgb canvas = {0};
  uint8_t *jpeg = NULL;
  size_t n_jpeg = 0;
  int rc = pp_image_panel_compose(stills, n, &canvas);
  if (!rc)
    rc = pp_image_jpeg_encode(&canvas, PP_IMAGE_PANEL_QUALITY, &jpeg, &n_jpeg);
  pp_rgb_fini(&canvas);
  if (rc)
    return rc;
  struct pp_image_limits lim;
  pp_image_limits_default(&lim);
  lim.max_bytes = n_jpeg;
  struct cm_diag diag = {0};
  rc = pp_image_decode(jpeg, n_jpeg, 0, &lim, ret_panel, &diag);
  cm_diag_fini(&diag);
  free(jpeg);
  return rc;
}
