/* Decodes PNG, JPEG and WebP with libvips into the 8-bit RGB that Pillow's convert("RGB") gives.
 * The format is sniffed from the magic bytes and only that loader runs (untrusted loaders are
 * blocked as well); limits are checked on the header, before pixels are decoded. The pixel
 * conversions are done here, from the loader's raw bands, because libvips' colour pipeline
 * (ICC, scaling 16-bit grey) is not what Pillow does. */
#include "pp_image.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <vips/vips.h>

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
  case FMT_JPEG:
    return vips_jpegload_buffer(buf, n, ret, "fail_on", VIPS_FAIL_ON_ERROR, "access",
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

/* Pillow's MULDIV255: round(a * b / 255) with its integer trick. */
static int muldiv255(int a, int b) {
  int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
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
  bool cmyk = bands == 4 && im->Type == VIPS_INTERPRETATION_CMYK;
  for (size_t i = 0; i < n_px; i++, s += bands, rgb += 3) {
    if (bands <= 2) {
      rgb[0] = rgb[1] = rgb[2] = s[0];
    } else if (cmyk) {
      int nk = 255 - s[3];
      for (int c = 0; c < 3; c++) {
        int v = nk - muldiv255(s[c], nk);
        rgb[c] = (uint8_t)(v < 0 ? 0 : v);
      }
    } else {
      rgb[0] = s[0];
      rgb[1] = s[1];
      rgb[2] = s[2];
    }
  }
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
  if (w == 0 || h == 0) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "image %u could not be decoded", index);
    goto fail_vips;
  }
  if (w > lim->max_side || h > lim->max_side) {
    rc = cm_diag_set(diag, -CM_ELIMIT, "image %u is %ux%u, a side exceeds %u pixels", index, w, h,
                     lim->max_side);
    goto fail_vips;
  }
  if ((uint64_t)w * h > lim->max_src_pixels) {
    rc = cm_diag_set(diag, -CM_ELIMIT, "image %u exceeds %llu pixels", index,
                     (unsigned long long)lim->max_src_pixels);
    goto fail_vips;
  }
  uint32_t lo = w < h ? w : h, hi = w < h ? h : w;
  if ((double)hi / (double)lo > (double)lim->max_aspect) {
    rc = cm_diag_set(diag, -CM_ELIMIT, "image %u is %ux%u, aspect ratio above %u", index, w, h,
                     lim->max_aspect);
    goto fail_vips;
  }
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
