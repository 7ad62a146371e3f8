/* From decoded RGB to what the vision tower reads: smart_resize, the exact resample, then
 * normalisation and the merge-block patch layout of transformers' Qwen2VLImageProcessor.
 * The data-URL and bytes entry points chain decode and preparation and keep one diagnostic. */
#include "pp_image.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Copies one finished row of pixel_values (1536 floats, 6 KiB) out of the cache-resident
 * buffer. On x86-64 with non-temporal stores: the 14 MB of a 1024x576 image is then written once
 * instead of first being read into the cache (patchify about 2x faster, measured); `dst` must be
 * 16-byte aligned, which malloc guarantees there. */
#if defined(__x86_64__)
#include <immintrin.h>

static void row_out(float *dst, const float *buf) {
  for (uint32_t k = 0; k < PP_IMAGE_ROW; k += 4)
    _mm_stream_ps(dst + k, _mm_load_ps(buf + k));
}

static void rows_done(void) {
  _mm_sfence(); /* order the streamed stores before anything the caller does next */
}
#else
static void row_out(float *dst, const float *buf) {
  memcpy(dst, buf, sizeof(float) * PP_IMAGE_ROW);
}

static void rows_done(void) {}
#endif

void pp_image_fini(struct pp_image *img) {
  if (!img)
    return;
  free(img->pixel_values);
  img->pixel_values = NULL;
  pp_rgb_fini(&img->resized);
}

int pp_image_patchify(const struct pp_rgb *img, float *out) {
  uint32_t H = img->height, W = img->width;
  if (!H || !W || H % PP_IMAGE_FACTOR || W % PP_IMAGE_FACTOR)
    return -EINVAL;
  /* torchvision normalize in fp32: (v - 127.5) / 127.5, a subtraction then a true division. */
  float lut[256];
  for (int v = 0; v < 256; v++)
    lut[v] = ((float)v - 127.5f) / 127.5f;
  const uint32_t P = PP_IMAGE_PATCH, bh_n = H / PP_IMAGE_FACTOR, bw_n = W / PP_IMAGE_FACTOR;
  _Alignas(64) float buf[PP_IMAGE_ROW]; /* the row being built, then row_out */
  bool aligned = ((uintptr_t)out & 15) == 0;
  float *row = out;
  for (uint32_t bh = 0; bh < bh_n; bh++)
    for (uint32_t bw = 0; bw < bw_n; bw++)
      for (uint32_t ih = 0; ih < PP_IMAGE_MERGE; ih++)
        for (uint32_t iw = 0; iw < PP_IMAGE_MERGE; iw++, row += PP_IMAGE_ROW) {
          uint32_t y0 = (bh * PP_IMAGE_MERGE + ih) * P, x0 = (bw * PP_IMAGE_MERGE + iw) * P;
          for (uint32_t c = 0; c < 3; c++) {
            float *dst = buf + c * PP_IMAGE_TEMPORAL * P * P;
            for (uint32_t py = 0; py < P; py++) {
              const uint8_t *s = img->data + ((size_t)(y0 + py) * W + x0) * 3 + c;
              for (uint32_t px = 0; px < P; px++)
                dst[py * P + px] = lut[s[3 * px]];
            }
            /* the temporal copy: a still image is repeated to fill temporal_patch_size = 2 */
            memcpy(dst + P * P, dst, sizeof(float) * P * P);
          }
          if (aligned)
            row_out(row, buf);
          else
            memcpy(row, buf, sizeof(buf));
        }
  rows_done();
  return 0;
}

int pp_image_prepare_rgb(const struct pp_rgb *rgb, uint32_t index,
                         const struct pp_image_limits *lim, struct pp_image *ret_img,
                         struct cm_diag *diag) {
  uint32_t H, W;
  if (pp_smart_resize(rgb->height, rgb->width, PP_IMAGE_FACTOR, lim->min_pixels, lim->max_pixels,
                      lim->max_aspect, &H, &W))
    return cm_diag_set(diag, -CM_ELIMIT, "image %u is %ux%u, aspect ratio above %u", index,
                       rgb->width, rgb->height, lim->max_aspect);
  struct pp_image img = {0};
  int rc = pp_image_resample(rgb, W, H, &img.resized);
  if (rc)
    return rc == -ENOMEM ? rc : cm_diag_set(diag, rc, "image %u: resize failed", index);
  img.src_width = rgb->width;
  img.src_height = rgb->height;
  img.width = W;
  img.height = H;
  img.grid_thw[0] = 1;
  img.grid_thw[1] = (int32_t)(H / PP_IMAGE_PATCH);
  img.grid_thw[2] = (int32_t)(W / PP_IMAGE_PATCH);
  img.n_patches = (H / PP_IMAGE_PATCH) * (W / PP_IMAGE_PATCH);
  img.n_tokens = img.n_patches / (PP_IMAGE_MERGE * PP_IMAGE_MERGE);
  img.pixel_values = malloc(sizeof(float) * (size_t)img.n_patches * PP_IMAGE_ROW);
  if (!img.pixel_values) {
    pp_image_fini(&img);
    return -ENOMEM;
  }
  pp_image_patchify(&img.resized, img.pixel_values);
  *ret_img = img;
  return 0;
}

int pp_image_prepare_bytes(const uint8_t *bytes, size_t n_bytes, uint32_t index,
                           const struct pp_image_limits *lim, struct pp_image *ret_img,
                           struct cm_diag *diag) {
  struct pp_rgb rgb = {0};
  int rc = pp_image_decode(bytes, n_bytes, index, lim, &rgb, diag);
  if (rc)
    return rc;
  rc = pp_image_prepare_rgb(&rgb, index, lim, ret_img, diag);
  pp_rgb_fini(&rgb);
  return rc;
}

int pp_image_prepare_data_url(const char *text, size_t n_text, uint32_t index,
                              const struct pp_image_limits *lim, struct pp_image *ret_img,
                              struct cm_diag *diag) {
  uint8_t *bytes = NULL;
  size_t n = 0;
  int rc = pp_image_b64_decode(text, n_text, index, lim, &bytes, &n, diag);
  if (rc)
    return rc;
  rc = pp_image_prepare_bytes(bytes, n, index, lim, ret_img, diag);
  free(bytes);
  return rc;
}
