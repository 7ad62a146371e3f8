/* OmniJev multi-image panels against Pillow 12.3 (fixtures of tests/oracle/omnijev_panels.py):
 * per case the canvas size, grid and cells; our composed canvas (thumbnails, layout and the
 * numerals, every one of 1..16 in the 16-still case) is Pillow's bit for bit: the SHA-256 of its
 * RGB bytes equals that of Pillow's canvas (canvas_sha256) and every pixel equals canvas.png; the
 * JPEG of our canvas is Pillow's file byte for byte (panel_sha256), and so is the JPEG of
 * Pillow's canvas; the panel read back equals Pillow's panel.jpg read back; its processor grid and
 * image tokens are Pillow's. The cases must include 2, 5 and 16 stills.
 * usage: test_omnijev_panel FIXTURE_DIR */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_sha256.h"
#include "pp_image.h"

static int failures;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s: ", name);                                                          \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static int load(const char *dir, const char *name, const char *file, struct pp_rgb *ret,
                uint8_t **ret_bytes, size_t *ret_n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s/%s", dir, name, file);
  FILE *f = fopen(path, "rb");
  if (!f)
    return -1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)n);
  if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
    fclose(f);
    free(b);
    return -1;
  }
  fclose(f);
  struct pp_image_limits lim;
  pp_image_limits_default(&lim);
  int rc = ret ? pp_image_decode(b, (size_t)n, 0, &lim, ret, NULL) : 0;
  if (ret_bytes && !rc) {
    *ret_bytes = b;
    *ret_n = (size_t)n;
  } else {
    free(b);
  }
  return rc;
}

static int geti(json_object *o, const char *k) {
  json_object *v = NULL;
  json_object_object_get_ex(o, k, &v);
  return json_object_get_int(v);
}

static json_object *get(json_object *o, const char *k) {
  json_object *v = NULL;
  json_object_object_get_ex(o, k, &v);
  return v;
}

static void sha_hex(const uint8_t *p, size_t n, char hex[CM_SHA256_HEX]) {
  uint8_t digest[CM_SHA256_BYTES];
  cm_sha256_buf(p, n, digest);
  cm_sha256_hex(digest, hex);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s FIXTURE_DIR\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1];
  char path[4096];
  snprintf(path, sizeof path, "%s/panels.json", dir);
  json_object *meta = json_object_from_file(path);
  if (!meta) {
    fprintf(stderr, "cannot read %s\n", path);
    return 2;
  }
  json_object *cases = get(meta, "cases");
  bool seen_n[PP_IMAGE_PANEL_MAX_STILLS + 1] = {0};
  int n_exact = 0;
  for (size_t ci = 0; ci < json_object_array_length(cases); ci++) {
    json_object *cs = json_object_array_get_idx(cases, ci);
    const char *name = json_object_get_string(get(cs, "name"));
    json_object *inputs = get(cs, "inputs"), *cells = get(cs, "cells");
    uint32_t n = (uint32_t)json_object_array_length(inputs);
    if (n <= PP_IMAGE_PANEL_MAX_STILLS)
      seen_n[n] = true;
    struct pp_rgb *stills = calloc(n, sizeof *stills);
    for (uint32_t k = 0; k < n; k++)
      CHECK(load(dir, name, json_object_get_string(json_object_array_get_idx(inputs, k)),
                 &stills[k], NULL, NULL) == 0,
            "input %u does not decode", k);
    /* layout */
    uint32_t cols, rows;
    pp_image_panel_grid(n, &cols, &rows);
    CHECK((int)cols == geti(cs, "cols") && (int)rows == geti(cs, "rows"), "grid %ux%u", cols, rows);
    for (uint32_t k = 0; k < n; k++) {
      uint32_t tw, th;
      pp_image_thumbnail_size(stills[k].width, stills[k].height, PP_IMAGE_PANEL_MAX_SIDE, &tw, &th);
      json_object *sz = get(json_object_array_get_idx(cells, k), "size");
      CHECK((int)tw == json_object_get_int(json_object_array_get_idx(sz, 0)) &&
                (int)th == json_object_get_int(json_object_array_get_idx(sz, 1)),
            "still %u: thumbnail %ux%u", k, tw, th);
    }
    /* canvas before JPEG */
    struct pp_rgb ours = {0}, pil = {0}, pil_panel = {0}, our_panel = {0};
    uint8_t *pil_jpeg = NULL;
    size_t n_pil_jpeg = 0;
    CHECK(pp_image_panel_compose(stills, n, &ours) == 0, "compose failed");
    CHECK(load(dir, name, "canvas.png", &pil, NULL, NULL) == 0, "canvas.png");
    CHECK(ours.width == (uint32_t)geti(cs, "width") &&
              ours.height == (uint32_t)geti(cs, "height") && ours.width == pil.width &&
              ours.height == pil.height,
          "canvas %ux%u, Pillow %ux%u", ours.width, ours.height, pil.width, pil.height);
    if (ours.data && pil.data && ours.width == pil.width && ours.height == pil.height) {
      char hex[CM_SHA256_HEX];
      size_t nb = (size_t)ours.width * ours.height * 3;
      sha_hex(ours.data, nb, hex);
      CHECK(strcmp(hex, json_object_get_string(get(cs, "canvas_sha256"))) == 0,
            "canvas sha256 %s, Pillow's %s", hex, json_object_get_string(get(cs, "canvas_sha256")));
      uint64_t ndiff = 0;
      for (size_t i = 0; i < nb; i++)
        if (ours.data[i] != pil.data[i] && !ndiff++)
          fprintf(stderr, "%s: first difference at (%zu, %zu) channel %zu: %d vs Pillow %d\n", name,
                  i / 3 % ours.width, i / 3 / ours.width, i % 3, ours.data[i], pil.data[i]);
      CHECK(ndiff == 0, "%llu canvas values differ from Pillow's", (unsigned long long)ndiff);
      /* the whole pipeline: our JPEG of our canvas is Pillow's file */
      uint8_t *jpeg = NULL;
      size_t nj = 0;
      CHECK(pp_image_jpeg_encode(&ours, PP_IMAGE_PANEL_QUALITY, &jpeg, &nj) == 0, "encode ours");
      sha_hex(jpeg, nj, hex);
      CHECK(strcmp(hex, json_object_get_string(get(cs, "panel_sha256"))) == 0,
            "JPEG of our canvas: sha256 %s, %zu bytes; Pillow's differs", hex, nj);
      free(jpeg);
      n_exact += ndiff == 0;
      printf("%-14s %4ux%-4u %2u stills: canvas and JPEG bytes equal Pillow's (sha256 %.16s...)\n",
             name, ours.width, ours.height, n, hex);
    }
    /* our encoder on Pillow's canvas gives Pillow's bytes */
    if (pil.data) {
      uint8_t *jpeg = NULL, digest[CM_SHA256_BYTES];
      size_t nj = 0;
      char hex[CM_SHA256_HEX];
      CHECK(pp_image_jpeg_encode(&pil, PP_IMAGE_PANEL_QUALITY, &jpeg, &nj) == 0, "encode");
      cm_sha256_buf(jpeg, nj, digest);
      cm_sha256_hex(digest, hex);
      CHECK(strcmp(hex, json_object_get_string(get(cs, "panel_sha256"))) == 0,
            "JPEG of Pillow's canvas: sha256 %s, %zu bytes; Pillow's differs", hex, nj);
      free(jpeg);
    }
    /* the model's view: our panel after the round trip vs Pillow's panel.jpg, and its grid */
    CHECK(pp_image_panel(stills, n, &our_panel) == 0, "pp_image_panel failed");
    uint32_t rh = 0, rw = 0;
    if (our_panel.data) {
      CHECK(pp_smart_resize(our_panel.height, our_panel.width, 32, 65536, 602112, 200, &rh, &rw) ==
                0,
            "smart_resize");
      json_object *g = get(cs, "grid");
      CHECK((int)rh / 16 == json_object_get_int(json_object_array_get_idx(g, 1)) &&
                (int)rw / 16 == json_object_get_int(json_object_array_get_idx(g, 2)) &&
                (int)(rh * rw / 1024) == geti(cs, "image_tokens"),
            "grid (1, %u, %u), %u tokens", rh / 16, rw / 16, rh * rw / 1024);
    }
    if (strcmp(name, "two_32") == 0 && our_panel.data) {
      /* the reference's tests/test_panels.py on the read-back panel: red at (20, 44), blue at
       * (58, 44); spec §10.5: 82 x 66, grid (1, 16, 18), 72 tokens */
      const uint8_t *r = our_panel.data + ((size_t)44 * our_panel.width + 20) * 3;
      const uint8_t *b = our_panel.data + ((size_t)44 * our_panel.width + 58) * 3;
      CHECK(our_panel.width == 82 && our_panel.height == 66 && rh / 16 == 16 && rw / 16 == 18 &&
                rh * rw / 1024 == 72,
            "spec facts: %ux%u, grid (1, %u, %u)", our_panel.width, our_panel.height, rh / 16,
            rw / 16);
      CHECK(r[0] > 200 && r[1] < 60 && r[2] < 60 && b[0] < 60 && b[1] < 60 && b[2] > 200,
            "(20, 44) = %d,%d,%d, (58, 44) = %d,%d,%d", r[0], r[1], r[2], b[0], b[1], b[2]);
    }
    if (load(dir, name, "panel.jpg", &pil_panel, &pil_jpeg, &n_pil_jpeg) == 0 && our_panel.data) {
      CHECK(our_panel.width == pil_panel.width && our_panel.height == pil_panel.height &&
                memcmp(our_panel.data, pil_panel.data,
                       (size_t)pil_panel.width * pil_panel.height * 3) == 0,
            "the panel read back differs from Pillow's panel.jpg read back");
    }
    free(pil_jpeg);
    pp_rgb_fini(&ours), pp_rgb_fini(&pil), pp_rgb_fini(&pil_panel), pp_rgb_fini(&our_panel);
    for (uint32_t k = 0; k < n; k++)
      pp_rgb_fini(&stills[k]);
    free(stills);
  }
  const char *name = "all";
  /* limits: no stills, more than PP_IMAGE_PANEL_MAX_STILLS, an empty still */
  struct pp_rgb tiny[PP_IMAGE_PANEL_MAX_STILLS + 1], out = {0};
  uint8_t px[3] = {1, 2, 3};
  for (int k = 0; k <= PP_IMAGE_PANEL_MAX_STILLS; k++)
    tiny[k] = (struct pp_rgb){1, 1, px};
  CHECK(pp_image_panel_compose(tiny, 0, &out) == -EINVAL, "0 stills accepted");
  CHECK(pp_image_panel_compose(tiny, PP_IMAGE_PANEL_MAX_STILLS + 1, &out) == -EINVAL,
        "%d stills accepted", PP_IMAGE_PANEL_MAX_STILLS + 1);
  tiny[1].width = 0;
  CHECK(pp_image_panel_compose(tiny, 2, &out) == -EINVAL, "an empty still accepted");
  tiny[1].width = 1;
  CHECK(pp_image_panel_compose(tiny, PP_IMAGE_PANEL_MAX_STILLS, &out) == 0 &&
            out.width == 3 * 1 + 4 * 6 && out.height == 6 * (1 + 22) + 7 * 6,
        "16 1x1 stills: canvas %ux%u", out.width, out.height);
  pp_rgb_fini(&out);
  CHECK(json_object_array_length(cases) >= 7, "only %zu cases", json_object_array_length(cases));
  CHECK(seen_n[2] && seen_n[5] && seen_n[PP_IMAGE_PANEL_MAX_STILLS],
        "the cases lack 2, 5 or %d stills", PP_IMAGE_PANEL_MAX_STILLS);
  printf("%d of %zu panels bit-identical to Pillow 12.3 (canvas and JPEG)\n", n_exact,
         json_object_array_length(cases));
  json_object_put(meta);
  printf("%s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
