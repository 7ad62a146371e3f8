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
 * w[i * kstride + j], fixed point with `precision` fractional bits; w is zero for j >= size[i]. */
struct axis {
  int ksize;     /* taps per output (max_interp_size) */
  int kstride;   /* weights per output in `w`: ksize rounded up to 4, the extra ones zero */
  int precision; /* fractional bits of the int16 weights */
  int32_t *min;  /* [out] first input index */
  int32_t *size; /* [out] number of taps used */
  int16_t *w;    /* [out * kstride] weights */
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
  int kstride = (ksize + 3) & ~3;
  ax->w = calloc((size_t)out * (size_t)kstride, sizeof(int16_t));
  if (!wd || !ax->min || !ax->size || !ax->w) {
    free(wd);
    axis_fini(ax);
    return -ENOMEM;
  }
  ax->ksize = ksize;
  ax->kstride = kstride;
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
  for (int64_t i = 0; i < out; i++)
    for (int j = 0; j < ksize; j++) {
      double v = wd[i * ksize + j] * (1 << p);
      ax->w[i * kstride + j] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
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
      const int16_t *w = ax->w + (size_t)x * ax->kstride;
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
    const int16_t *w = ax->w + (size_t)y * ax->kstride;
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

/* The same two passes with AVX2 (x86-64-v3), chosen at run time. Integer sums are exact in any
 * order, so these give the bytes of the loops above; they only change how memory is walked:
 * pairs of taps go through one 16-bit multiply-add (vpmaddwd, 255 * |w| < 2^23 per product). */
#if defined(__x86_64__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))

static bool have_avx2(void) {
  return __builtin_cpu_supports("avx2");
}

/* One output pixel of the width pass without vector loads (the right edge, where a 16-byte load
 * would pass the end of the row). */
static void tap_scalar(const uint8_t *s, const struct axis *ax, uint32_t x, uint8_t *d) {
  const int16_t *w = ax->w + (size_t)x * ax->kstride;
  const uint8_t *p = s + (size_t)ax->min[x] * 3;
  int32_t half = 1 << (ax->precision - 1), acc[3] = {half, half, half};
  for (int32_t j = 0; j < ax->size[x]; j++)
    for (int c = 0; c < 3; c++)
      acc[c] += p[(size_t)j * 3 + c] * w[j];
  for (int c = 0; c < 3; c++)
    d[c] = clamp_shift(acc[c], ax->precision);
}

/* int32 sums [R, G, B, -] of output x in rows `s` and `t`, less the rounding half: the taps
 * four at a time, one 16-byte load broadcast to both 128-bit lanes, a byte shuffle that makes
 * (pixel j, pixel j+1) 16-bit pairs per channel (lane 0: taps 4g, 4g+1; lane 1: 4g+2, 4g+3), one
 * multiply-add with the weight pairs `wx` [groups]. */
AVX2 static inline void tap_sums2(const uint8_t *s, const uint8_t *t, const struct axis *ax,
                                  uint32_t x, const __m256i *wx, __m256i pairs, __m128i *ret_s,
                                  __m128i *ret_t) {
  size_t off = (size_t)ax->min[x] * 3;
  const uint8_t *p = s + off, *q = t + off;
  int32_t ng = (ax->size[x] + 3) / 4;
  __m256i as = _mm256_setzero_si256(), at = _mm256_setzero_si256();
  for (int32_t g = 0; g < ng; g++, p += 12, q += 12) {
    __m256i w = _mm256_load_si256(wx + g);
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    __m256i u = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q));
    as = _mm256_add_epi32(as, _mm256_madd_epi16(_mm256_shuffle_epi8(v, pairs), w));
    at = _mm256_add_epi32(at, _mm256_madd_epi16(_mm256_shuffle_epi8(u, pairs), w));
  }
  *ret_s = _mm_add_epi32(_mm256_castsi256_si128(as), _mm256_extracti128_si256(as, 1));
  *ret_t = _mm_add_epi32(_mm256_castsi256_si128(at), _mm256_extracti128_si256(at, 1));
}

/* Four outputs' sums -> 12 bytes at d: shift, then saturating packs clamp to [0, 255] as
 * clamp_shift does. */
AVX2 static inline void store4(__m128i s0, __m128i s1, __m128i s2, __m128i s3, __m128i vhalf,
                               __m128i shift, __m128i compact, uint8_t *d) {
  s0 = _mm_sra_epi32(_mm_add_epi32(s0, vhalf), shift);
  s1 = _mm_sra_epi32(_mm_add_epi32(s1, vhalf), shift);
  s2 = _mm_sra_epi32(_mm_add_epi32(s2, vhalf), shift);
  s3 = _mm_sra_epi32(_mm_add_epi32(s3, vhalf), shift);
  __m128i b =
      _mm_shuffle_epi8(_mm_packus_epi16(_mm_packs_epi32(s0, s1), _mm_packs_epi32(s2, s3)), compact);
  _mm_storel_epi64((__m128i *)d, b);
  uint32_t tail = (uint32_t)_mm_extract_epi32(b, 2);
  memcpy(d + 8, &tail, 4);
}

/* Width pass, two rows and four outputs per step (an odd last row is paired with itself);
 * outputs from `x_safe` on (whose last 16-byte load would pass the end of the row) go through
 * tap_scalar. `wq`: [out_w][groups]. */
AVX2 static void pass_h_avx2(const uint8_t *restrict src, uint32_t rows, uint32_t in_w,
                             uint32_t out_w, const struct axis *ax, const __m256i *wq, int groups,
                             uint32_t x_safe, uint8_t *restrict dst) {
  const __m128i shift = _mm_cvtsi32_si128(ax->precision);
  const __m128i vhalf = _mm_set1_epi32(1 << (ax->precision - 1));
  const __m256i pairs =
      _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1, 6, -1, 9, -1, 7,
                       -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
  const __m128i compact = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const uint32_t x_vec = x_safe & ~3u;
  for (uint32_t y = 0; y < rows; y += 2) {
    uint32_t y1 = y + 1 < rows ? y + 1 : y;
    const uint8_t *s = src + (size_t)y * in_w * 3, *t = src + (size_t)y1 * in_w * 3;
    uint8_t *d = dst + (size_t)y * out_w * 3, *e = dst + (size_t)y1 * out_w * 3;
    for (uint32_t x = 0; x < x_vec; x += 4) {
      const __m256i *wx = wq + (size_t)x * groups;
      __m128i s0, s1, s2, s3, t0, t1, t2, t3;
      tap_sums2(s, t, ax, x, wx, pairs, &s0, &t0);
      tap_sums2(s, t, ax, x + 1, wx + groups, pairs, &s1, &t1);
      tap_sums2(s, t, ax, x + 2, wx + 2 * groups, pairs, &s2, &t2);
      tap_sums2(s, t, ax, x + 3, wx + 3 * groups, pairs, &s3, &t3);
      store4(s0, s1, s2, s3, vhalf, shift, compact, d + (size_t)x * 3);
      store4(t0, t1, t2, t3, vhalf, shift, compact, e + (size_t)x * 3);
    }
    for (uint32_t x = x_vec; x < out_w; x++) {
      tap_scalar(s, ax, x, d + (size_t)x * 3);
      tap_scalar(t, ax, x, e + (size_t)x * 3);
    }
  }
}

/* Height pass: each output row is a weighted sum of whole input rows; 32 bytes at a time, two
 * input rows per multiply-add (their bytes interleaved into 16-bit pairs). */
AVX2 static void pass_v_avx2(const uint8_t *restrict src, size_t row, uint32_t out_h,
                             const struct axis *ax, uint8_t *restrict dst) {
  const int32_t half = 1 << (ax->precision - 1);
  const __m128i shift = _mm_cvtsi32_si128(ax->precision);
  const __m256i zero = _mm256_setzero_si256(), vhalf = _mm256_set1_epi32(half);
  const size_t row_vec = row & ~(size_t)31;
  for (uint32_t y = 0; y < out_h; y++) {
    const int16_t *w = ax->w + (size_t)y * ax->kstride;
    const uint8_t *s0 = src + (size_t)ax->min[y] * row;
    int32_t n = ax->size[y];
    uint8_t *d = dst + (size_t)y * row;
    for (size_t e = 0; e < row_vec; e += 32) {
      __m256i a0 = vhalf, a1 = vhalf, a2 = vhalf, a3 = vhalf;
      for (int32_t j = 0; j < n; j += 2) {
        /* an odd last tap pairs with itself under weight w[n] = 0 */
        const uint8_t *pa = s0 + (size_t)j * row, *pb = j + 1 < n ? pa + row : pa;
        __m256i wp = _mm256_set1_epi32(
            (int32_t)((uint32_t)(uint16_t)w[j] | ((uint32_t)(uint16_t)w[j + 1] << 16)));
        __m256i A = _mm256_loadu_si256((const __m256i *)(pa + e));
        __m256i B = _mm256_loadu_si256((const __m256i *)(pb + e));
        __m256i lo = _mm256_unpacklo_epi8(A, B), hi = _mm256_unpackhi_epi8(A, B);
        a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_unpacklo_epi8(lo, zero), wp));
        a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_unpackhi_epi8(lo, zero), wp));
        a2 = _mm256_add_epi32(a2, _mm256_madd_epi16(_mm256_unpacklo_epi8(hi, zero), wp));
        a3 = _mm256_add_epi32(a3, _mm256_madd_epi16(_mm256_unpackhi_epi8(hi, zero), wp));
      }
      /* a0..a3 hold bytes [0-3|16-19], [4-7|20-23], [8-11|24-27], [12-15|28-31]; the in-lane
       * packs put them back in order */
      a0 = _mm256_sra_epi32(a0, shift);
      a1 = _mm256_sra_epi32(a1, shift);
      a2 = _mm256_sra_epi32(a2, shift);
      a3 = _mm256_sra_epi32(a3, shift);
      __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(a0, a1), _mm256_packs_epi32(a2, a3));
      _mm256_storeu_si256((__m256i *)(d + e), b);
    }
    for (size_t e = row_vec; e < row; e++) {
      int32_t acc = half;
      for (int32_t j = 0; j < n; j++)
        acc += s0[(size_t)j * row + e] * w[j];
      d[e] = clamp_shift(acc, ax->precision);
    }
  }
}

/* Width pass through pass_h_avx2: builds its weight vectors, [out_w][groups] x 32 bytes. */
static int resample_h_avx2(const uint8_t *src, uint32_t rows, uint32_t in_w, uint32_t out_w,
                           const struct axis *ax, uint8_t *dst) {
  int groups = ax->kstride / 4;
  int32_t *wq = aligned_alloc(32, (size_t)out_w * groups * 32);
  if (!wq)
    return -ENOMEM;
  for (uint32_t x = 0; x < out_w; x++)
    for (int g = 0; g < groups; g++) {
      const uint16_t *w = (const uint16_t *)ax->w + (size_t)x * ax->kstride + 4 * g;
      int32_t *q = wq + ((size_t)x * groups + g) * 8;
      for (int k = 0; k < 4; k++) {
        q[k] = (int32_t)((uint32_t)w[0] | ((uint32_t)w[1] << 16));
        q[4 + k] = (int32_t)((uint32_t)w[2] | ((uint32_t)w[3] << 16));
      }
    }
  uint32_t x_safe = 0;
  while (x_safe < out_w) {
    int32_t ng = (ax->size[x_safe] + 3) / 4;
    if (ng > 0 && (size_t)(ax->min[x_safe] + 4 * (ng - 1)) * 3 + 16 > (size_t)in_w * 3)
      break;
    x_safe++;
  }
  pass_h_avx2(src, rows, in_w, out_w, ax, (const __m256i *)wq, groups, x_safe, dst);
  free(wq);
  return 0;
}
#else
static bool have_avx2(void) {
  return false;
}
static int resample_h_avx2(const uint8_t *src, uint32_t rows, uint32_t in_w, uint32_t out_w,
                           const struct axis *ax, uint8_t *dst) {
  (void)src, (void)rows, (void)in_w, (void)out_w, (void)ax, (void)dst;
  return -ENOTSUP;
}
static void pass_v_avx2(const uint8_t *src, size_t row, uint32_t out_h, const struct axis *ax,
                        uint8_t *dst) {
  (void)src, (void)row, (void)out_h, (void)ax, (void)dst;
}
#endif

static int resample(const struct pp_rgb *src, uint32_t out_width, uint32_t out_height, bool avx2,
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
    if (!mid) {
      rc = -ENOMEM;
      goto fail;
    }
    if (avx2) {
      rc = resample_h_avx2(src->data, in_h, in_w, out_width, &ah, mid);
    } else {
      uint8_t *tmp = malloc((size_t)in_w * HLANES);
      if (tmp)
        pass_h(src->data, in_h, in_w, out_width, &ah, tmp, mid);
      rc = tmp ? 0 : -ENOMEM;
      free(tmp);
    }
    if (rc)
      goto fail;
    cur = mid;
  }
  if (do_v) {
    rc = axis_init(&av, in_h, out_height);
    if (rc)
      goto fail;
    if (avx2)
      pass_v_avx2(cur, (size_t)out_width * 3, out_height, &av, out);
    else
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

int pp_image_resample(const struct pp_rgb *src, uint32_t out_width, uint32_t out_height,
                      struct pp_rgb *ret_dst) {
  return resample(src, out_width, out_height, have_avx2(), ret_dst);
}

int pp_image_resample_generic(const struct pp_rgb *src, uint32_t out_width, uint32_t out_height,
                              struct pp_rgb *ret_dst) {
  return resample(src, out_width, out_height, false, ret_dst);
}
