/* Pillow 12.3's `Image.thumbnail` (default BICUBIC, reducing_gap 2.0) and its JPEG encoder's
 * default settings, for OmniJev's panels (spec/omnijev.md §10.5). The thumbnail runs on an image
 * already converted to RGB, where Pillow's `draft` (JPEG DCT scaling) does nothing, so it is the
 * same for every input format: the aspect-preserving size, an integer box reduce when the shrink
 * is at least 2 x reducing_gap, then Pillow's 8-bit fixed-point bicubic over the (fractional,
 * single-precision) reduced box, horizontal pass first except for images over 100 times taller
 * than wide. Written from Pillow's documented behaviour and checked bit for bit against it
 * (tests/omnijev/test_omnijev_panel.c); libvips' cubic reduce is not bit-exact (notes/toolchain.md
 * §6.3), so this is own code like the torch resampler. Leaves out other filters and modes. */
#include "pp_image.h"

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

enum { PREC_BITS = 22 }; /* Pillow's 8-bit resample precision: 32 - 8 - 2 */

/* Python: max(min(floor(v), ceil(v), key=err), 1); min keeps the first (floor) on a tie. */
static uint32_t round_aspect(double v, double aspect, double other, bool other_is_y) {
  double lo = floor(v), hi = ceil(v);
  double e_lo, e_hi;
  if (other_is_y) { /* n is a width: |aspect - n / y| */
    e_lo = fabs(aspect - lo / other);
    e_hi = fabs(aspect - hi / other);
  } else { /* n is a height: 0 if n == 0 else |aspect - x / n| */
    e_lo = lo == 0 ? 0 : fabs(aspect - other / lo);
    e_hi = hi == 0 ? 0 : fabs(aspect - other / hi);
  }
  double r = e_hi < e_lo ? hi : lo;
  return r < 1 ? 1 : (uint32_t)r;
}

void pp_image_thumbnail_size(uint32_t width, uint32_t height, uint32_t max_side,
                             uint32_t *ret_width, uint32_t *ret_height) {
  if (max_side >= width && max_side >= height) {
    *ret_width = width;
    *ret_height = height;
    return;
  }
  double aspect = (double)width / (double)height, x = max_side, y = max_side;
  if (x / y >= aspect) {
    *ret_width = round_aspect(y * aspect, aspect, y, true);
    *ret_height = max_side;
  } else {
    *ret_width = max_side;
    *ret_height = round_aspect(x / aspect, aspect, x, false);
  }
}

/* Pillow's bicubic, a = -0.5. */
static double bicubic(double x) {
  const double a = -0.5;
  if (x < 0.0)
    x = -x;
  if (x < 1.0)
    return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0)
    return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

/* Fixed-point weights of one axis: `in_size` source pixels, the box [in0, in1), `out_size`
 * outputs. bounds[2i] = first source pixel, bounds[2i+1] = count; kk [out_size][ksize]. */
static int coeffs(uint32_t in_size, double in0, double in1, uint32_t out_size, int **ret_bounds,
                  int32_t **ret_kk, int *ret_ksize) {
  double scale = (in1 - in0) / out_size, fscale = scale < 1.0 ? 1.0 : scale;
  double support = 2.0 * fscale;
  int ksize = (int)ceil(support) * 2 + 1;
  int *bounds = malloc(sizeof *bounds * 2 * out_size);
  int32_t *kk = calloc((size_t)out_size * ksize, sizeof *kk);
  double *k = malloc(sizeof *k * ksize);
  if (!bounds || !kk || !k) {
    free(bounds), free(kk), free(k);
    return -ENOMEM;
  }
  for (uint32_t xx = 0; xx < out_size; xx++) {
    double center = in0 + (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / fscale;
    int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
    if (xmin < 0)
      xmin = 0;
    if (xmax > (int)in_size)
      xmax = (int)in_size;
    xmax -= xmin;
    for (int x = 0; x < xmax; x++) {
      k[x] = bicubic((x + xmin - center + 0.5) * ss);
      ww += k[x];
    }
    for (int x = 0; x < xmax; x++) {
      double w = ww != 0.0 ? k[x] / ww : k[x];
      kk[(size_t)xx * ksize + x] =
          w < 0 ? (int32_t)(-0.5 + w * (1 << PREC_BITS)) : (int32_t)(0.5 + w * (1 << PREC_BITS));
    }
    bounds[2 * xx] = xmin;
    bounds[2 * xx + 1] = xmax;
  }
  free(k);
  *ret_bounds = bounds;
  *ret_kk = kk;
  *ret_ksize = ksize;
  return 0;
}

/* Pillow hands the resize box to C as single-precision floats. Through a volatile: at -O2 and
 * above gcc turned the double division + float rounding into a float division, which rounds
 * differently in rare cases (one pixel off in the fixtures). */
static double to_float(double v) {
  volatile float f = (float)v;
  return f;
}

static uint8_t clip8(int32_t ss) {
  ss >>= PREC_BITS;
  return ss < 0 ? 0 : ss > 255 ? 255 : (uint8_t)ss;
}

/* Pillow's ImagingReduce for 8-bit RGB: each output is the rounded mean of its fx x fy block of
 * `box` (partial blocks at the right and bottom edges average what they hold), computed as
 * ((sum + n/2) * m) >> 24 with m = (uint32)(2^32 / (256 n)) in single precision. */
static int box_reduce(const struct pp_rgb *src, uint32_t fx, uint32_t fy, struct pp_rgb *ret) {
  uint32_t ow = (src->width + fx - 1) / fx, oh = (src->height + fy - 1) / fy;
  uint8_t *out = malloc((size_t)ow * oh * 3);
  if (!out)
    return -ENOMEM;
  for (uint32_t oy = 0; oy < oh; oy++) {
    uint32_t y0 = oy * fy, y1 = y0 + fy > src->height ? src->height : y0 + fy;
    for (uint32_t ox = 0; ox < ow; ox++) {
      uint32_t x0 = ox * fx, x1 = x0 + fx > src->width ? src->width : x0 + fx;
      uint32_t n = (x1 - x0) * (y1 - y0);
      uint32_t m = (uint32_t)(4294967296.0f / (float)(256u * n));
      uint32_t s[3] = {n / 2, n / 2, n / 2};
      for (uint32_t y = y0; y < y1; y++)
        for (uint32_t x = x0; x < x1; x++)
          for (int c = 0; c < 3; c++)
            s[c] += src->data[((size_t)y * src->width + x) * 3 + c];
      for (int c = 0; c < 3; c++)
        out[((size_t)oy * ow + ox) * 3 + c] = (uint8_t)((s[c] * m) >> 24);
    }
  }
  ret->width = ow;
  ret->height = oh;
  ret->data = out;
  return 0;
}

/* Pillow's ImagingResample (8-bit, BICUBIC) of `src` over the box [x0, x1) x [y0, y1) to
 * ow x oh: a horizontal pass over the rows the vertical pass needs, then the vertical pass;
 * a pass is skipped when its axis neither changes size nor has a box other than the whole. */
static int resample_box(const struct pp_rgb *src, const double box[4], uint32_t ow, uint32_t oh,
                        struct pp_rgb *ret) {
  int *bh = NULL, *bv = NULL, kh = 0, kv = 0;
  int32_t *kkh = NULL, *kkv = NULL;
  uint8_t *tmp = NULL, *out = NULL;
  int rc = coeffs(src->width, box[0], box[2], ow, &bh, &kkh, &kh);
  if (!rc)
    rc = coeffs(src->height, box[1], box[3], oh, &bv, &kkv, &kv);
  if (rc)
    goto done;
  bool need_h = ow != src->width || box[0] != 0 || box[2] != ow;
  bool need_v = oh != src->height || box[1] != 0 || box[3] != oh;
  int yfirst = bv[0], ylast = bv[2 * oh - 2] + bv[2 * oh - 1];
  const uint8_t *in = src->data;
  uint32_t in_w = src->width, in_h = src->height;
  rc = -ENOMEM;
  if (need_h) {
    uint32_t th = (uint32_t)(ylast - yfirst);
    if (!(tmp = malloc((size_t)ow * th * 3)))
      goto done;
    for (uint32_t y = 0; y < th; y++) {
      const uint8_t *row = src->data + (size_t)(y + yfirst) * src->width * 3;
      for (uint32_t xx = 0; xx < ow; xx++) {
        const int32_t *k = kkh + (size_t)xx * kh;
        int xmin = bh[2 * xx], xn = bh[2 * xx + 1];
        int32_t s[3] = {1 << (PREC_BITS - 1), 1 << (PREC_BITS - 1), 1 << (PREC_BITS - 1)};
        for (int x = 0; x < xn; x++)
          for (int c = 0; c < 3; c++)
            s[c] += row[(size_t)(x + xmin) * 3 + c] * k[x];
        for (int c = 0; c < 3; c++)
          tmp[((size_t)y * ow + xx) * 3 + c] = clip8(s[c]);
      }
    }
    for (uint32_t i = 0; i < oh; i++)
      bv[2 * i] -= yfirst;
    in = tmp;
    in_w = ow;
    in_h = th;
  }
  if (!need_v) {
    if (!(out = malloc((size_t)in_w * in_h * 3)))
      goto done;
    memcpy(out, in, (size_t)in_w * in_h * 3);
  } else {
    if (!(out = malloc((size_t)in_w * oh * 3)))
      goto done;
    for (uint32_t yy = 0; yy < oh; yy++) {
      const int32_t *k = kkv + (size_t)yy * kv;
      int ymin = bv[2 * yy], yn = bv[2 * yy + 1];
      for (uint32_t x = 0; x < in_w * 3; x++) {
        int32_t s = 1 << (PREC_BITS - 1);
        for (int y = 0; y < yn; y++)
          s += in[(size_t)(y + ymin) * in_w * 3 + x] * k[y];
        out[(size_t)yy * in_w * 3 + x] = clip8(s);
      }
    }
    in_h = oh;
  }
  ret->width = in_w;
  ret->height = in_h;
  ret->data = out;
  out = NULL;
  rc = 0;
done:
  free(bh), free(bv), free(kkh), free(kkv), free(tmp), free(out);
  return rc;
}

int pp_image_thumbnail(const struct pp_rgb *src, uint32_t max_side, struct pp_rgb *ret_dst) {
  if (!src->width || !src->height || !max_side)
    return -EINVAL;
  uint32_t fw, fh;
  pp_image_thumbnail_size(src->width, src->height, max_side, &fw, &fh);
  struct pp_rgb red = {0};
  const struct pp_rgb *from = src;
  double box[4] = {0, 0, src->width, src->height};
  if (fw == src->width && fh == src->height) {
    uint8_t *d = malloc((size_t)fw * fh * 3);
    if (!d)
      return -ENOMEM;
    memcpy(d, src->data, (size_t)fw * fh * 3);
    *ret_dst = (struct pp_rgb){fw, fh, d};
    return 0;
  }
  /* Image.resize(reducing_gap=2.0): factor = int(box side / out side / 2) or 1; the safe reduce
   * box of a whole-image box is the whole image. */
  uint32_t fx = (uint32_t)((double)src->width / fw / 2.0),
           fy = (uint32_t)((double)src->height / fh / 2.0);
  fx = fx ? fx : 1;
  fy = fy ? fy : 1;
  if (fx > 1 || fy > 1) {
    int rc = box_reduce(src, fx, fy, &red);
    if (rc)
      return rc;
    from = &red;
    box[2] = to_float((double)src->width / fx);
    box[3] = to_float((double)src->height / fy);
  }
  int rc;
  if (from->height > (uint64_t)from->width * 100 && fh < from->height) {
    /* Image.resize on a very tall image: the vertical pass first (to width x fh over the box's
     * rows), then the horizontal one over the box's columns */
    struct pp_rgb mid = {0};
    double vbox[4] = {0, box[1], from->width, box[3]}, hbox[4] = {box[0], 0, box[2], fh};
    rc = resample_box(from, vbox, from->width, fh, &mid);
    if (!rc)
      rc = resample_box(&mid, hbox, fw, fh, ret_dst);
    pp_rgb_fini(&mid);
  } else {
    rc = resample_box(from, box, fw, fh, ret_dst);
  }
  pp_rgb_fini(&red);
  return rc;
}

/* ---- JPEG encode (Pillow's `save(..., "JPEG", quality=q)` defaults) ----------------------- */

struct jpeg_fail {
  struct jpeg_error_mgr pub; /* libjpeg's error manager; first, so the pointers convert */
  jmp_buf jmp;               /* where the encoder resumes on failure */
};

static void fail_exit(j_common_ptr cinfo) {
  longjmp(((struct jpeg_fail *)cinfo->err)->jmp, 1);
}

static void quiet(j_common_ptr cinfo) {
  (void)cinfo;
}

int pp_image_jpeg_encode(const struct pp_rgb *img, int quality, uint8_t **ret_bytes,
                         size_t *ret_n) {
  if (!img->width || !img->height || img->width > 65500 || img->height > 65500 || quality < 1 ||
      quality > 100)
    return -EINVAL;
  struct jpeg_compress_struct cinfo;
  struct jpeg_fail fail;
  unsigned char *volatile buf = NULL;
  unsigned long n = 0;
  cinfo.err = jpeg_std_error(&fail.pub);
  fail.pub.error_exit = fail_exit;
  fail.pub.output_message = quiet;
  jpeg_create_compress(&cinfo);
  if (setjmp(fail.jmp)) {
    jpeg_destroy_compress(&cinfo);
    free(buf);
    return -ENOMEM; /* the memory destination's only failure */
  }
  unsigned char *b = NULL;
  jpeg_mem_dest(&cinfo, &b, &n);
  cinfo.image_width = img->width;
  cinfo.image_height = img->height;
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo); /* YCbCr 4:2:0, ISLOW DCT, standard Huffman tables, JFIF 1.01 */
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = img->data + (size_t)cinfo.next_scanline * img->width * 3;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  buf = b;
  jpeg_destroy_compress(&cinfo);
  *ret_bytes = buf;
  *ret_n = n;
  return 0;
}
