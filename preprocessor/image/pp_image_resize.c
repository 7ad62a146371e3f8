/* smart_resize and the exact resampler: torch's CPU uint8 antialiased bicubic, in our own C.
 * Weights are computed in double exactly as ATen does (same expressions, same order; this file
 * is compiled with -ffp-contract=off so no FMA changes a bit), quantised to int16 at one
 * precision per axis, and applied with int32 accumulation. Pillow's own bicubic (22-bit int32
 * weights) differs from this by ±1 on some pixels, so it is not what is implemented here. */
#include "pp_image.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int pp_smart_resize(uint32_t height, uint32_t width, uint32_t factor, uint64_t min_pixels,
                    uint64_t max_pixels, uint32_t max_aspect, uint32_t *ret_height,
                    uint32_t *ret_width) {
  if (height == 0 || width == 0 || factor == 0)
    return -EINVAL;
  double hi = height > width ? height : width, lo = height > width ? width : height;
  if (hi / lo > (double)max_aspect)
    return -EINVAL;
  double f = factor;
  /* Python round(): half to even, which rint does in the default rounding mode. */
  double h_bar = rint(height / f) * f, w_bar = rint(width / f) * f;
  double hw = (double)((uint64_t)height * width); /* exact: < 2^53 */
  if (h_bar * w_bar > (double)max_pixels) {
    double beta = sqrt(hw / (double)max_pixels);
    h_bar = fmax(f, floor(height / beta / f) * f);
    w_bar = fmax(f, floor(width / beta / f) * f);
  } else if (h_bar * w_bar < (double)min_pixels) {
    double beta = sqrt((double)min_pixels / hw);
    h_bar = ceil(height * beta / f) * f;
    w_bar = ceil(width * beta / f) * f;
  }
  if (h_bar < 1 || w_bar < 1 || h_bar > UINT32_MAX / 2 || w_bar > UINT32_MAX / 2)
    return -EINVAL;
  *ret_height = (uint32_t)h_bar;
  *ret_width = (uint32_t)w_bar;
  return 0;
}

/* Keys cubic with a = -0.5 (the antialiased path), written as ATen writes it. */
static double aa_cubic(double x) {
  const double a = -0.5;
  x = fabs(x);
  if (x < 1.0)
    return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0)
    return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

/* Per-axis taps: output i reads `size[i]` inputs from `min[i]` with int16 weights
 * w[i * ksize + j], fixed point with `precision` fractional bits. */
struct axis {
  int ksize;     /* taps per output (max_interp_size) */
  int precision; /* fractional bits of the int16 weights */
  int32_t *min;  /* [out] first input index */
  int32_t *size; /* [out] number of taps used */
  int16_t *w;    /* [out * ksize] weights */
};

static void axis_fini(struct axis *ax) {
  free(ax->min);
  free(ax->size);
  free(ax->w);
}

static int axis_init(struct axis *ax, int64_t in, int64_t out) {
  memset(ax, 0, sizeof(*ax));
  double scale = (double)in / (double)out;
  double support = scale >= 1.0 ? (4 * 0.5) * scale : 4 * 0.5;
  int ksize = (int)ceil(support) * 2 + 1;
  double *wd = malloc(sizeof(double) * (size_t)out * (size_t)ksize);
  ax->min = malloc(sizeof(int32_t) * (size_t)out);
  ax->size = malloc(sizeof(int32_t) * (size_t)out);
  ax->w = malloc(sizeof(int16_t) * (size_t)out * (size_t)ksize);
  if (!wd || !ax->min || !ax->size || !ax->w) {
    free(wd);
    axis_fini(ax);
    return -ENOMEM;
  }
  ax->ksize = ksize;
  double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  double wt_max = 0.0;
  for (int64_t i = 0; i < out; i++) {
    double center = scale * (i + 0.5);
    int64_t xmin = (int64_t)(center - support + 0.5);
    if (xmin < 0)
      xmin = 0;
    int64_t xend = (int64_t)(center + support + 0.5);
    int64_t xsize = (xend < in ? xend : in) - xmin;
    if (xsize < 0)
      xsize = 0;
    if (xsize > ksize)
      xsize = ksize;
    double *wt = wd + i * ksize;
    double total = 0.0;
    int64_t j = 0;
    for (; j < xsize; j++) {
      double w = aa_cubic((j + xmin - center + 0.5) * invscale);
      wt[j] = w;
      total += w;
    }
    if (total != 0.0) {
      for (j = 0; j < xsize; j++) {
        wt[j] /= total;
        wt_max = wt_max > wt[j] ? wt_max : wt[j];
      }
    }
    for (; j < ksize; j++)
      wt[j] = 0.0;
    ax->min[i] = (int32_t)xmin;
    ax->size[i] = (int32_t)xsize;
  }
  int p;
  for (p = 0; p < 22; p++) {
    int next = (int)(0.5 + wt_max * (1 << (p + 1)));
    if (next >= (1 << 15))
      break;
  }
  ax->precision = p;
  for (int64_t k = 0; k < out * ksize; k++) {
    double v = wd[k] * (1 << p);
    ax->w[k] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
  }
  free(wd);
  return 0;
}

/* uint8 result of one accumulator: ATen's (acc >> precision) clamped to [0, 255]. The sum stays
 * within int32: 255 * sum|w| < 255 * 1.3 * 2^22. */
static inline uint8_t clamp_shift(int32_t acc, int p) {
  int32_t v = acc >> p;
  return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

enum { HROWS = 8, HLANES = HROWS * 3 }; /* rows per block of the width pass, and its sums */

/* Width pass: every row, in_w -> out_w, 3 channels interleaved. Blocks of 8 rows are first
 * regrouped column-major ([in_w][8 rows][3]) in `tmp`, so each tap is one 24-lane multiply-add
 * that the compiler vectorises. Integer sums are exact: the order does not change a bit. */
static void pass_h(const uint8_t *restrict src, uint32_t rows, uint32_t in_w, uint32_t out_w,
                   const struct axis *ax, uint8_t *restrict tmp, uint8_t *restrict dst) {
  const int32_t half = 1 << (ax->precision - 1);
  for (uint32_t y0 = 0; y0 < rows; y0 += HROWS) {
    uint32_t nr = rows - y0 < HROWS ? rows - y0 : HROWS;
    memset(tmp, 0, (size_t)in_w * HLANES);
    for (uint32_t r = 0; r < nr; r++) {
      const uint8_t *s = src + (size_t)(y0 + r) * in_w * 3;
      for (uint32_t x = 0; x < in_w; x++)
        memcpy(tmp + (size_t)x * HLANES + r * 3, s + (size_t)x * 3, 3);
    }
    for (uint32_t x = 0; x < out_w; x++) {
      const int16_t *w = ax->w + (size_t)x * ax->ksize;
      const uint8_t *t = tmp + (size_t)ax->min[x] * HLANES;
      int32_t acc[HLANES];
      for (int e = 0; e < HLANES; e++)
        acc[e] = half;
      for (int32_t j = 0; j < ax->size[x]; j++, t += HLANES) {
        const int32_t wj = w[j];
        for (int e = 0; e < HLANES; e++)
          acc[e] += t[e] * wj;
      }
      for (uint32_t r = 0; r < nr; r++) {
        uint8_t *d = dst + ((size_t)(y0 + r) * out_w + x) * 3;
        d[0] = clamp_shift(acc[r * 3], ax->precision);
        d[1] = clamp_shift(acc[r * 3 + 1], ax->precision);
        d[2] = clamp_shift(acc[r * 3 + 2], ax->precision);
      }
    }
  }
}

/* Height pass: in_h -> out_h rows of `row` bytes, accumulated a whole row at a time. */
static int pass_v(const uint8_t *restrict src, size_t row, uint32_t out_h, const struct axis *ax,
                  uint8_t *restrict dst) {
  int32_t *restrict acc = malloc(sizeof(int32_t) * row);
  if (!acc)
    return -ENOMEM;
  const int32_t half = 1 << (ax->precision - 1);
  for (uint32_t y = 0; y < out_h; y++) {
    const int16_t *w = ax->w + (size_t)y * ax->ksize;
    for (size_t e = 0; e < row; e++)
      acc[e] = half;
    for (int32_t j = 0; j < ax->size[y]; j++) {
      const uint8_t *restrict s = src + (size_t)(ax->min[y] + j) * row;
      const int32_t wj = w[j];
      for (size_t e = 0; e < row; e++)
        acc[e] += s[e] * wj;
    }
    uint8_t *d = dst + (size_t)y * row;
    for (size_t e = 0; e < row; e++)
      d[e] = clamp_shift(acc[e], ax->precision);
  }
  free(acc);
  return 0;
}

int pp_image_resample(const struct pp_rgb *src, uint32_t out_width, uint32_t out_height,
                      struct pp_rgb *ret_dst) {
  uint32_t in_w = src->width, in_h = src->height;
  if (!in_w || !in_h || !out_width || !out_height)
    return -EINVAL;
  int rc = 0;
  struct axis ah = {0}, av = {0};
  uint8_t *mid = NULL, *out = malloc((size_t)out_width * out_height * 3);
  if (!out)
    return -ENOMEM;
  bool do_h = out_width != in_w, do_v = out_height != in_h;
  if (!do_h && !do_v) {
    memcpy(out, src->data, (size_t)in_w * in_h * 3);
    goto done;
  }
  const uint8_t *cur = src->data;
  if (do_h) {
    rc = axis_init(&ah, in_w, out_width);
    if (rc)
      goto fail;
    mid = do_v ? malloc((size_t)out_width * in_h * 3) : out;
    uint8_t *tmp = malloc((size_t)in_w * HLANES);
    if (!mid || !tmp) {
      free(tmp);
      rc = -ENOMEM;
      goto fail;
    }
    pass_h(src->data, in_h, in_w, out_width, &ah, tmp, mid);
    free(tmp);
    cur = mid;
  }
  if (do_v) {
    rc = axis_init(&av, in_h, out_height);
    if (rc)
      goto fail;
    rc = pass_v(cur, (size_t)out_width * 3, out_height, &av, out);
    if (rc)
      goto fail;
  }
done:
  if (mid != out)
    free(mid);
  axis_fini(&ah);
  axis_fini(&av);
  ret_dst->width = out_width;
  ret_dst->height = out_height;
  ret_dst->data = out;
  return 0;
fail:
  if (mid != out)
    free(mid);
  free(out);
  axis_fini(&ah);
  axis_fini(&av);
  return rc;
}
