/* Decodes PNG, JPEG and WebP into the 8-bit RGB that Pillow's convert("RGB") gives. The format is
 * sniffed from the magic bytes and only that decoder runs (libvips' untrusted loaders are blocked
 * as well); limits are checked on the header, before pixels are decoded. JPEG goes straight
 * through libjpeg-turbo (the library under both libvips and Pillow, with Pillow's settings: the
 * defaults, ISLOW DCT and fancy upsampling) into the RGB buffer; PNG and WebP go through libvips,
 * whose raw bands are converted here because its colour pipeline (ICC, scaling 16-bit grey) is
 * not what Pillow does. */
#include "pp_image.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vips/vips.h>

#include <jerror.h>
#include <jpeglib.h>

enum fmt { FMT_UNKNOWN, FMT_PNG, FMT_JPEG, FMT_WEBP, FMT_OTHER };

static pthread_once_t vips_once = PTHREAD_ONCE_INIT;
static int vips_status;

/* libvips reports loader warnings (truncated data, bad chunks) with g_warning; a library does not
 * log, and the caller gets the failure as a diagnostic, so they are dropped. */
static void quiet(const gchar *domain, GLogLevelFlags level, const gchar *msg, gpointer user) {
  (void)domain, (void)level, (void)msg, (void)user;
}

static void vips_start(void) {
  if (VIPS_INIT("s1serve")) {
    vips_status = -CM_EUNSUPPORTED;
    return;
  }
  g_log_set_handler("VIPS", G_LOG_LEVEL_WARNING | G_LOG_LEVEL_MESSAGE | G_LOG_LEVEL_INFO, quiet,
                    NULL);
  vips_block_untrusted_set(TRUE);
  vips_cache_set_max(0);
  vips_concurrency_set(1); /* parallelism is across images, one per caller thread */
}

int pp_image_global_init(void) {
  pthread_once(&vips_once, vips_start);
  return vips_status;
}

void pp_image_limits_default(struct pp_image_limits *lim) {
  lim->max_bytes = 16u << 20;
  lim->max_side = 16384;
  lim->max_src_pixels = 16777216;
  lim->max_aspect = 200;
  lim->min_pixels = 65536;
  lim->max_pixels = 16777216;
}

void pp_rgb_fini(struct pp_rgb *img) {
  if (!img)
    return;
  free(img->data);
  img->data = NULL;
}

/* Formats Pillow identifies but the references refuse ("is not PNG, JPEG or WebP"). */
static enum fmt sniff(const uint8_t *b, size_t n) {
  static const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (n >= 8 && memcmp(b, png, 8) == 0)
    return FMT_PNG;
  if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
    return FMT_JPEG;
  if (n >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WEBP", 4) == 0)
    return FMT_WEBP;
  if ((n >= 6 && (memcmp(b, "GIF87a", 6) == 0 || memcmp(b, "GIF89a", 6) == 0)) ||
      (n >= 2 && memcmp(b, "BM", 2) == 0) ||
      (n >= 4 && (memcmp(b, "II*\0", 4) == 0 || memcmp(b, "MM\0*", 4) == 0)) ||
      (n >= 4 && memcmp(b, "\0\0\1\0", 4) == 0) || (n >= 4 && memcmp(b, "8BPS", 4) == 0) ||
      (n >= 4 && memcmp(b, "qoif", 4) == 0) || (n >= 12 && memcmp(b + 4, "ftyp", 4) == 0) ||
      (n >= 12 && memcmp(b, "\0\0\0\x0cjP  ", 8) == 0) ||
      (n >= 3 && b[0] == 'P' && b[1] >= '1' && b[1] <= '6' &&
       (b[2] == ' ' || b[2] == '\n' || b[2] == '\r' || b[2] == '\t')))
    return FMT_OTHER;
  return FMT_UNKNOWN;
}

static int load_header(enum fmt f, const uint8_t *bytes, size_t n, VipsImage **ret) {
  /* libvips does not copy the buffer: `bytes` outlives the image (unref'd before return).
   * Sequential access streams the rows once into our buffer (about 5-10 % less CPU than the
   * default random access, which first decodes into a cache image). */
  void *buf = (void *)bytes;
  switch (f) {
  case FMT_PNG:
    return vips_pngload_buffer(buf, n, ret, "fail_on", VIPS_FAIL_ON_ERROR, "access",
                               VIPS_ACCESS_SEQUENTIAL, NULL);
  case FMT_WEBP:
    return vips_webpload_buffer(buf, n, ret, "fail_on", VIPS_FAIL_ON_ERROR, "access",
                                VIPS_ACCESS_SEQUENTIAL, NULL);
  default:
    return -1;
  }
}

static uint8_t clip255(unsigned v) {
  return v > 255 ? 255 : (uint8_t)v;
}

/* Raw loader bands -> RGB, Pillow's rules. `grey16_clip`: a 16-bit PNG of colour type 0, which
 * Pillow opens as I;16 and clips; every other 16-bit image is reduced to its high byte. */
static void to_rgb(const VipsImage *im, const void *raw, bool grey16_clip, uint8_t *rgb) {
  size_t n_px = (size_t)im->Xsize * (size_t)im->Ysize;
  int bands = im->Bands;
  if (im->BandFmt == VIPS_FORMAT_USHORT) {
    const uint16_t *s = raw;
    for (size_t i = 0; i < n_px; i++, s += bands, rgb += 3) {
      if (bands <= 2) {
        uint8_t g = grey16_clip ? clip255(s[0]) : (uint8_t)(s[0] >> 8);
        rgb[0] = rgb[1] = rgb[2] = g;
      } else {
        rgb[0] = (uint8_t)(s[0] >> 8);
        rgb[1] = (uint8_t)(s[1] >> 8);
        rgb[2] = (uint8_t)(s[2] >> 8);
      }
    }
    return;
  }
  const uint8_t *s = raw;
  for (size_t i = 0; i < n_px; i++, s += bands, rgb += 3) {
    if (bands <= 2) {
      rgb[0] = rgb[1] = rgb[2] = s[0];
    } else {
      rgb[0] = s[0];
      rgb[1] = s[1];
      rgb[2] = s[2];
    }
  }
}

/* The header checks shared by both decoders, in the order the messages are documented. */
static int check_size(uint32_t w, uint32_t h, uint32_t index, const struct pp_image_limits *lim,
                      struct cm_diag *diag) {
  if (w == 0 || h == 0)
    return cm_diag_set(diag, -CM_EFORMAT, "image %u could not be decoded", index);
  if (w > lim->max_side || h > lim->max_side)
    return cm_diag_set(diag, -CM_ELIMIT, "image %u is %ux%u, a side exceeds %u pixels", index, w, h,
                       lim->max_side);
  if ((uint64_t)w * h > lim->max_src_pixels)
    return cm_diag_set(diag, -CM_ELIMIT, "image %u exceeds %llu pixels", index,
                       (unsigned long long)lim->max_src_pixels);
  uint32_t lo = w < h ? w : h, hi = w < h ? h : w;
  if ((double)hi / (double)lo > (double)lim->max_aspect)
    return cm_diag_set(diag, -CM_ELIMIT, "image %u is %ux%u, aspect ratio above %u", index, w, h,
                       lim->max_aspect);
  return 0;
}

/* libjpeg reports errors through error_exit (which must not return) and warnings through
 * emit_message; both end the decode here except warnings other than a premature end of data:
 * Pillow ignores libjpeg's warnings but refuses a truncated file ("image file is truncated"),
 * even one that lacks only its EOI marker. */
struct jpeg_fail {
  struct jpeg_error_mgr pub; /* libjpeg's error manager; first, so the pointers convert */
  jmp_buf jmp;               /* where decode_jpeg resumes on failure */
};

static void jpeg_fail_exit(j_common_ptr cinfo) {
  longjmp(((struct jpeg_fail *)cinfo->err)->jmp, 1);
}

static void jpeg_fail_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF)
    longjmp(((struct jpeg_fail *)cinfo->err)->jmp, 1);
}

static void jpeg_quiet(j_common_ptr cinfo) {
  (void)cinfo;
}

/* Pillow's MULDIV255: round(a * b / 255) with its integer trick. */
static int muldiv255(int a, int b) {
  int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

/* One row of libjpeg's CMYK output to RGB as Pillow does it: its "CMYK;I" unpacker inverts every
 * byte (Adobe's convention, assumed for every CMYK JPEG), then convert("RGB") runs cmyk2rgb. */
static void cmyk_row_to_rgb(const uint8_t *s, uint32_t w, uint8_t *rgb) {
  for (uint32_t x = 0; x < w; x++, s += 4, rgb += 3) {
    int nk = s[3]; /* 255 - (255 - k) */
    for (int c = 0; c < 3; c++) {
      int v = nk - muldiv255(255 - s[c], nk);
      rgb[c] = (uint8_t)(v < 0 ? 0 : v);
    }
  }
}

/* A JPEG straight to RGB with libjpeg-turbo, as Pillow's JpegImagePlugin + convert("RGB"): 8-bit
 * samples only; 1 component is grey (libjpeg's grey -> RGB replicates it, as convert does), 3 are
 * YCbCr or RGB, 4 are CMYK or YCCK (libjpeg gives CMYK); other counts are refused. */
static int decode_jpeg(const uint8_t *bytes, size_t n_bytes, uint32_t index,
                       const struct pp_image_limits *lim, struct pp_rgb *ret_rgb,
                       struct cm_diag *diag) {
  struct jpeg_decompress_struct cinfo;
  struct jpeg_fail fail;
  uint8_t *volatile rgb = NULL, *volatile cmyk = NULL;
  volatile int rc = 0;
  cinfo.err = jpeg_std_error(&fail.pub);
  fail.pub.error_exit = jpeg_fail_exit;
  fail.pub.emit_message = jpeg_fail_message;
  fail.pub.output_message = jpeg_quiet;
  jpeg_create_decompress(&cinfo);
  if (setjmp(fail.jmp)) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "image %u could not be decoded", index);
    goto done;
  }
  jpeg_mem_src(&cinfo, bytes, (unsigned long)n_bytes);
  jpeg_read_header(&cinfo, TRUE);
  int comps = cinfo.num_components;
  if (cinfo.data_precision != 8 || (comps != 1 && comps != 3 && comps != 4)) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "image %u could not be decoded", index);
    goto done;
  }
  uint32_t w = cinfo.image_width, h = cinfo.image_height;
  rc = check_size(w, h, index, lim, diag);
  if (rc)
    goto done;
  cinfo.out_color_space = comps == 4 ? JCS_CMYK : JCS_RGB;
  jpeg_start_decompress(&cinfo);
  if (cinfo.output_width != w || cinfo.output_height != h ||
      cinfo.output_components != (comps == 4 ? 4 : 3)) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "image %u could not be decoded", index);
    goto done;
  }
  rgb = malloc((size_t)w * h * 3);
  cmyk = comps == 4 ? malloc((size_t)w * 4) : NULL;
  if (!rgb || (comps == 4 && !cmyk)) {
    rc = -ENOMEM;
    goto done;
  }
  while (cinfo.output_scanline < h) {
    uint8_t *out = rgb + (size_t)cinfo.output_scanline * w * 3;
    JSAMPROW row = comps == 4 ? cmyk : out;
    if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) {
      rc = cm_diag_set(diag, -CM_EFORMAT, "image %u could not be decoded", index);
      goto done;
    }
    if (comps == 4)
      cmyk_row_to_rgb(cmyk, w, out);
  }
  jpeg_finish_decompress(&cinfo);
  ret_rgb->width = w;
  ret_rgb->height = h;
  ret_rgb->data = rgb;
  rgb = NULL;
done:
  jpeg_destroy_decompress(&cinfo);
  free(rgb);
  free(cmyk);
  return rc;
}

int pp_image_decode(const uint8_t *bytes, size_t n_bytes, uint32_t index,
                    const struct pp_image_limits *lim, struct pp_rgb *ret_rgb,
                    struct cm_diag *diag) {
  int rc = pp_image_global_init();
  if (rc)
    return cm_diag_set(diag, rc, "image %u: libvips could not start", index);
  if (n_bytes > lim->max_bytes)
    return cm_diag_set(diag, -CM_ELIMIT, "image %u exceeds %llu bytes", index,
                       (unsigned long long)lim->max_bytes);
  enum fmt f = sniff(bytes, n_bytes);
  if (f == FMT_OTHER)
    return cm_diag_set(diag, -CM_EFORMAT, "image %u is not PNG, JPEG or WebP", index);
  if (f == FMT_UNKNOWN)
    return cm_diag_set(diag, -CM_EFORMAT, "image %u could not be decoded", index);
  if (f == FMT_JPEG)
    return decode_jpeg(bytes, n_bytes, index, lim, ret_rgb, diag);
  /* PNG IHDR (always the first chunk): bit depth at byte 24, colour type at byte 25. */
  bool grey16_clip = f == FMT_PNG && n_bytes >= 26 && bytes[24] == 16 && bytes[25] == 0;

  VipsImage *im = NULL;
  void *raw = NULL;
  uint8_t *rgb = NULL;
  if (load_header(f, bytes, n_bytes, &im)) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "image %u could not be decoded", index);
    goto fail_vips;
  }
  uint32_t w = (uint32_t)im->Xsize, h = (uint32_t)im->Ysize;
  rc = check_size(w, h, index, lim, diag);
  if (rc)
    goto fail_vips;
  bool fmt_ok = (im->BandFmt == VIPS_FORMAT_UCHAR || im->BandFmt == VIPS_FORMAT_USHORT) &&
                im->Bands >= 1 && im->Bands <= 4;
  if (!fmt_ok) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "image %u could not be decoded", index);
    goto fail_vips;
  }
  size_t n_raw = 0;
  raw = vips_image_write_to_memory(im, &n_raw);
  if (!raw || n_raw != (size_t)w * h * (size_t)im->Bands * VIPS_IMAGE_SIZEOF_ELEMENT(im)) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "image %u could not be decoded", index);
    goto fail_vips;
  }
  rgb = malloc((size_t)w * h * 3);
  if (!rgb) {
    rc = -ENOMEM;
    goto fail;
  }
  to_rgb(im, raw, grey16_clip, rgb);
  g_free(raw);
  g_object_unref(im);
  ret_rgb->width = w;
  ret_rgb->height = h;
  ret_rgb->data = rgb;
  return 0;

fail_vips:
  vips_error_clear();
fail:
  g_free(raw);
  if (im)
    g_object_unref(im);
  return rc;
}
