/* Exact image preparation for the Qwen3.5 vision tower: data URL / base64, limits, decode with
 * libvips into the 8-bit RGB that Pillow's `convert("RGB")` gives, smart_resize, torch's uint8
 * antialiased bicubic resize (bit-exact), normalise + patchify, and the 3-axis mRoPE positions.
 * Also OmniJev's multi-image panel (Pillow's thumbnail and JPEG encoder, pp_image_panel*).
 * Leaves out: mapping error codes to HTTP statuses (the service does that). */
#ifndef S1_PP_IMAGE_H
#define S1_PP_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"

/* Vision geometry of Qwen3.5 (spec/qwen3_5.md §1.4): 16-px patches, 2x2 merge, 2 time copies. */
enum {
  PP_IMAGE_PATCH = 16,                               /* patch side, pixels */
  PP_IMAGE_MERGE = 2,                                /* spatial merge */
  PP_IMAGE_TEMPORAL = 2,                             /* temporal patch (a still is repeated) */
  PP_IMAGE_FACTOR = PP_IMAGE_PATCH * PP_IMAGE_MERGE, /* smart_resize factor, 32 */
  PP_IMAGE_ROW = 3 * PP_IMAGE_TEMPORAL * PP_IMAGE_PATCH * PP_IMAGE_PATCH, /* 1536 values/row */
};

/* Limits, filled from the model directory (pp_image_limits_default gives the defaults below).
 * Every check runs before the allocation it protects. */
struct pp_image_limits {
  uint64_t max_bytes;      /* encoded image bytes after base64; default 16 MiB */
  uint32_t max_side;       /* source width and height, pixels; default 16384 */
  uint64_t max_src_pixels; /* source width x height; default 16,777,216 (JEMM: 3,145,728) */
  uint32_t max_aspect;     /* max(w, h) / min(w, h) must not exceed this; default 200 */
  uint64_t min_pixels;     /* smart_resize lower bound (processor shortest_edge); default 65,536 */
  uint64_t max_pixels;     /* smart_resize upper bound (processor longest_edge); default
                              16,777,216; OmniJev serves 602,112 */
};

/* An 8-bit interleaved RGB image, row-major [height][width][3]. */
struct pp_rgb {
  uint32_t width;  /* columns, pixels */
  uint32_t height; /* rows, pixels */
  uint8_t *data;   /* [height * width * 3], malloc'd; freed by pp_rgb_fini */
};

/* One prepared image: what the executor's vision tower consumes. */
struct pp_image {
  uint32_t src_width, src_height; /* decoded size, pixels */
  uint32_t width, height;         /* size after smart_resize, pixels (multiples of 32) */
  int32_t grid_thw[3];            /* (1, height/16, width/16) */
  uint32_t n_patches;             /* grid_t * grid_h * grid_w rows of pixel_values */
  uint32_t n_tokens;              /* <|image_pad|> tokens: n_patches / 4 */
  float *pixel_values;            /* [n_patches, 1536] fp32, merge-block order; malloc'd */
  struct pp_rgb resized;          /* the resized 8-bit image, [height][width][3] */
};

/* 3-axis grid of one image, in 16-px patches (image_grid_thw row). */
struct pp_grid {
  int32_t t, h, w; /* temporal (1 for stills), patch rows, patch columns */
};

/* Fills `lim` with the documented defaults above. */
void pp_image_limits_default(struct pp_image_limits *lim);

/* Frees the pixels of an RGB image or a prepared image; both accept NULL and zeroed structs. */
void pp_rgb_fini(struct pp_rgb *img);
void pp_image_fini(struct pp_image *img);

/* Starts libvips once per process (idempotent, thread-safe) with untrusted loaders blocked and
 * the operation cache off. pp_image_decode calls it; call it from main to fail early.
 * Returns: 0, -CM_EUNSUPPORTED when libvips cannot start. */
int pp_image_global_init(void);

/* Decodes an item of a request's `images` array: a `data:...;base64,` URL or bare base64, with the
 * reference's rules (jemm.md §5.2): whitespace (Python's str.split set, Unicode included) removed,
 * strict standard alphabet, '=' padding as Python's b64decode(validate=True) accepts it.
 * Shapes: `text` is UTF-8 of `n_text` bytes. Units: `index` only names the image in messages.
 * Ownership: *ret_bytes is malloc'd (caller frees), written only on success.
 * Returns: 0; -CM_EFORMAT "image {i} is not a base64 data URL" / "image {i} could not be decoded"
 * (bad base64, non-ASCII text); -CM_ELIMIT when the decoded size would exceed lim->max_bytes
 * (checked before allocating); -ENOMEM.
 * Source: jemm/systemone.py (reference), spec/jemm.md §5.2. */
int pp_image_b64_decode(const char *text, size_t n_text, uint32_t index,
                        const struct pp_image_limits *lim, uint8_t **ret_bytes, size_t *ret_n,
                        struct cm_diag *diag);

/* Decodes PNG, JPEG or WebP bytes (format sniffed from magic bytes, then that decoder only:
 * libjpeg-turbo for JPEG, libvips for PNG and WebP) into the RGB that Pillow's
 * `Image.open(...).convert("RGB")` returns: alpha dropped, palette expanded, grey replicated,
 * 16-bit grey clipped to 255, other 16-bit images reduced to their high byte, CMYK JPEGs inverted
 * (Adobe) then Pillow's formula, EXIF orientation not applied, the first frame of an animation; a
 * truncated JPEG, even one lacking only its EOI marker, is refused as Pillow refuses it.
 * Limits (bytes, side, pixels, aspect) are checked from the header, before pixels are decoded.
 * Ownership: ret_rgb->data is malloc'd; free with pp_rgb_fini. Written only on success.
 * Returns: 0; -CM_EFORMAT "image {i} could not be decoded" (truncated, corrupt, empty) or
 * "image {i} is not PNG, JPEG or WebP" (another known format); -CM_ELIMIT naming the limit;
 * -CM_EUNSUPPORTED (libvips failed to start); -ENOMEM.
 * Source: Pillow 12.3 PngImagePlugin / JpegImagePlugin / WebPImagePlugin + Convert.c. */
int pp_image_decode(const uint8_t *bytes, size_t n_bytes, uint32_t index,
                    const struct pp_image_limits *lim, struct pp_rgb *ret_rgb,
                    struct cm_diag *diag);

/* Qwen2-VL smart_resize: rounds H and W to multiples of `factor` (Python round, half to even),
 * then rescales to stay within [min_pixels, max_pixels] (spec/qwen3_5.md §7.2).
 * Units: pixels. Returns: 0; -EINVAL for a zero side or factor, or an aspect ratio above
 * `max_aspect`. Source: transformers 5.17 image_processing_qwen2_vl.py `smart_resize`. */
int pp_smart_resize(uint32_t height, uint32_t width, uint32_t factor, uint64_t min_pixels,
                    uint64_t max_pixels, uint32_t max_aspect, uint32_t *ret_height,
                    uint32_t *ret_width);

/* Resizes 8-bit RGB to out_width x out_height exactly as torch 2.11's CPU uint8 antialiased
 * bicubic (`interpolate(..., "bicubic", antialias=True)`, a = -0.5): width pass first with a
 * uint8 intermediate, then height; int16 weights at one precision per axis; an axis whose size
 * does not change is copied. Shapes: src [src->height][src->width][3] ->
 * [out_height][out_width][3]. Ownership: ret_dst->data malloc'd. Returns: 0; -EINVAL (zero size);
 * -ENOMEM. Source: pytorch aten/src/ATen/native/cpu/UpSampleKernel.cpp
 * (`_compute_index_ranges_int16_weights`, `basic_loop_aa_horizontal/vertical<uint8_t>`); checked
 * bit-exact on every CPU capability. */
int pp_image_resample(const struct pp_rgb *src, uint32_t out_width, uint32_t out_height,
                      struct pp_rgb *ret_dst);

/* pp_image_resample with the portable loops only. pp_image_resample runs AVX2 loops instead when
 * the CPU has AVX2 (same integer sums, same bytes); tests compare the two on many sizes. */
int pp_image_resample_generic(const struct pp_rgb *src, uint32_t out_width, uint32_t out_height,
                              struct pp_rgb *ret_dst);

/* Normalises (v - 127.5) / 127.5 in fp32 and patchifies an RGB image whose sides are multiples
 * of 32 into rows of 1536 values: rows in 2x2 merge-block order, columns (channel, temporal copy,
 * pixel row, pixel column). Shapes: img [H][W][3] -> out [(H/16)*(W/16), 1536]; `out` is the
 * caller's buffer. Returns: 0; -EINVAL when a side is not a positive multiple of 32.
 * Source: transformers 5.17 Qwen2VLImageProcessor.patchify + TorchvisionBackend.normalize. */
int pp_image_patchify(const struct pp_rgb *img, float *out);

/* Full preparation of decoded RGB: smart_resize with lim's pixel bounds, resample (skipped when
 * the size is unchanged), normalise + patchify. Ownership: fills *ret_img (pp_image_fini frees);
 * `rgb` is not modified. Returns: 0; -CM_ELIMIT "image {i}: aspect ratio ..."; -ENOMEM.
 * Source: transformers 5.17 Qwen2VLImageProcessor (torchvision backend, the default). */
int pp_image_prepare_rgb(const struct pp_rgb *rgb, uint32_t index,
                         const struct pp_image_limits *lim, struct pp_image *ret_img,
                         struct cm_diag *diag);

/* Data URL (or bare base64) -> prepared image: pp_image_b64_decode, pp_image_decode,
 * pp_image_prepare_rgb. Returns: their errors, the first one in `diag`. */
int pp_image_prepare_data_url(const char *text, size_t n_text, uint32_t index,
                              const struct pp_image_limits *lim, struct pp_image *ret_img,
                              struct cm_diag *diag);

/* Encoded bytes -> prepared image: pp_image_decode then pp_image_prepare_rgb. */
int pp_image_prepare_bytes(const uint8_t *bytes, size_t n_bytes, uint32_t index,
                           const struct pp_image_limits *lim, struct pp_image *ret_img,
                           struct cm_diag *diag);

/* 3-axis mRoPE positions of a token span (get_rope_index, spec/qwen3_5.md §8): a walk with a
 * running position P = start_pos; a text token gets (P, P, P) and P += 1; each maximal run of
 * `image_token_id` is one image with the next grid (t = 1): its merged-grid token (a, b) in raster
 * order gets (P, P + a, P + b), then P += max(h, w) / 2. Continuation after a prefix: pass the
 * prefix's *ret_next_pos as start_pos. rope_delta = *ret_next_pos - (span start + n_ids).
 * Shapes: ids [n_ids]; grids [n_grids] in image order; ret_pos [3][n_ids] (axis-major: T, H, W).
 * Returns: 0; -CM_EFORMAT "invalid image grid" (t != 1, h or w not a positive even number),
 * "image grid placeholder mismatch" (run length != h*w/4), "unexpected image placeholders"
 * (more runs than grids), "missing image placeholders" (grids left over); -CM_ELIMIT when a
 * position would pass INT32_MAX. ret_* written only on success.
 * Source: transformers 5.17 Qwen3_5Model.get_rope_index (mm_token_type_ids form). */
int pp_mrope_positions(const int32_t *ids, size_t n_ids, int32_t image_token_id,
                       const struct pp_grid *grids, size_t n_grids, int32_t start_pos,
                       int32_t *ret_pos, int32_t *ret_next_pos, struct cm_diag *diag);

/* ---- OmniJev multi-image panel (spec/omnijev.md §10.5; pp_image_pillow.c, pp_image_panel.c) */

enum {
  PP_IMAGE_PANEL_MAX_SIDE = 448,  /* stills whose longer side exceeds this are thumbnailed */
  PP_IMAGE_PANEL_QUALITY = 88,    /* JPEG quality of the panel's round trip */
  PP_IMAGE_PANEL_MAX_STILLS = 16, /* stills per panel (3 x 6 cells, canvas <= 1368 x 2862) */
};

/* The size Pillow 12.3's `thumbnail((max_side, max_side))` gives: unchanged when both sides fit,
 * else the longer side becomes max_side and the other the floor or ceil of the scaled side,
 * whichever keeps the aspect ratio closer (floor on a tie), at least 1. Units: pixels. */
void pp_image_thumbnail_size(uint32_t width, uint32_t height, uint32_t max_side,
                             uint32_t *ret_width, uint32_t *ret_height);

/* Pillow 12.3's `Image.thumbnail((max_side, max_side))` of an RGB image (resample BICUBIC,
 * reducing_gap 2.0; `draft` does nothing on converted RGB): pp_image_thumbnail_size, then, when
 * a side shrinks by 2 x reducing_gap or more, an integer box reduce by int(ratio / 2) per axis,
 * then the 22-bit fixed-point bicubic (horizontal pass, 8-bit intermediate, vertical pass; the
 * other order for an image over 100 times taller than wide) over the reduced box (as float32).
 * A copy when nothing shrinks. Shapes: src [h][w][3] -> [th][tw][3].
 * Ownership: ret_dst->data malloc'd (pp_rgb_fini). Returns: 0; -EINVAL (zero size); -ENOMEM.
 * Source: Pillow 12.3 Image.thumbnail / Image.resize, libImaging Reduce.c and Resample.c;
 * checked bit-exact by tests/omnijev/test_omnijev_panel.c on tests/oracle/omnijev_panels.py. */
int pp_image_thumbnail(const struct pp_rgb *src, uint32_t max_side, struct pp_rgb *ret_dst);

/* Encodes RGB as baseline JPEG with the settings Pillow 12.3's `save(f, "JPEG", quality=q)`
 * uses: libjpeg defaults (YCbCr 4:2:0, ISLOW DCT, standard Huffman tables, not optimized, not
 * progressive, JFIF 1.01 with density 1:1 and no unit), jpeg_set_quality(q, force_baseline).
 * Units: quality 1..100. Ownership: *ret_bytes malloc'd (caller frees), *ret_n bytes.
 * Returns: 0; -EINVAL (zero or > 65,500 px side, quality out of range); -ENOMEM.
 * Source: Pillow 12.3 JpegEncode.c defaults; byte-identical to Pillow's output (same test). */
int pp_image_jpeg_encode(const struct pp_rgb *img, int quality, uint8_t **ret_bytes, size_t *ret_n);

/* One panel numeral as Pillow 12.3 draws it (pp_image_numerals.c, generated by
 * tests/oracle/omnijev_numerals.py): the tight box of its coverage mask. */
struct pp_numeral_mask {
  int8_t dx, dy;         /* px from the text origin (the cell's x + 2, y + 4) to the box */
  uint8_t width, height; /* box size, px */
  uint16_t offset;       /* first coverage byte in the generated table */
};

/* The mask of numeral k (1 ≤ k ≤ PP_IMAGE_PANEL_MAX_STILLS): *ret_mask and its width·height
 * coverage values (0..255, row-major; static data). Returns 0 or -EINVAL (k out of range).
 * Source: ImageDraw.text with ImageFont.load_default() (Aileron Regular 10, FreeType), Pillow
 * 12.3.0, rendered by tests/oracle/omnijev_numerals.py. */
int pp_image_numeral_mask(uint32_t k, struct pp_numeral_mask *ret_mask,
                          const uint8_t **ret_coverage);

/* The panel grid (spec §10.5): n = 1 -> 1x1, 2 -> 2x1, <= 4 -> 2x2, else 3 x ceil(n / 3). */
void pp_image_panel_grid(uint32_t n, uint32_t *ret_cols, uint32_t *ret_rows);

/* The panel canvas before its JPEG round trip (spec §10.5): each still thumbnailed to 448 px,
 * cells cw x ch (the largest thumbnail width and height), border 6, label band 22, canvas
 * cols*cw + (cols+1)*6 by rows*(ch+22) + (rows+1)*6 filled with (32, 32, 32); still k pasted
 * centred ((cw - w) / 2, 22 + (ch - h) / 2) in its cell at (6 + c (cw + 6), 6 + r (ch + 28));
 * numeral k+1 in white, its text origin at (x + 2, y + 4): Pillow's own glyph masks
 * (pp_image_numeral_mask), so the canvas is Pillow's bit for bit.
 * Shapes: stills[n], each [h][w][3] RGB. Ownership: ret_canvas->data malloc'd.
 * Returns: 0; -EINVAL (n = 0 or above PP_IMAGE_PANEL_MAX_STILLS, an empty still);
 * -CM_EUNSUPPORTED (libvips cannot start); -ENOMEM.
 * Source: mso/panels.py `compose` as spec §10.5 describes it, with Pillow 12.3. */
int pp_image_panel_compose(const struct pp_rgb *stills, uint32_t n, struct pp_rgb *ret_canvas);

/* pp_image_panel_compose, then JPEG quality 88 (pp_image_jpeg_encode) and back through
 * pp_image_decode: the RGB the model sees. Ownership: ret_panel->data malloc'd.
 * Returns: their errors. Source: mso/panels.py `compose_path` (spec §2.3, §10.5). */
int pp_image_panel(const struct pp_rgb *stills, uint32_t n, struct pp_rgb *ret_panel);

#endif
