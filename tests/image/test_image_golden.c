/* Golden test against transformers 5.17's Qwen2VLImageProcessor (torchvision backend) on the GPU
 * machine (tests/oracle/image_fixtures.py -> tests/fixtures/image/expected.json): decoded RGB,
 * grids, resized uint8 and pixel_values all bit-exact (SHA-256, sampled values, stats); the
 * resampler sweep; multi-image concatenation; get_rope_index positions. Also the decode-only
 * PNG variants (decode_expected.json, Pillow 12.3). Usage: test_image_golden FIXTURE_DIR. */
#include "image_test.h"
#include "pp_image.h"

#include <json-c/json.h>
#include <math.h>

static const char *dir;

static json_object *get(json_object *o, const char *k) {
  json_object *v = NULL;
  return json_object_object_get_ex(o, k, &v) ? v : NULL;
}

static int geti(json_object *o, const char *k) {
  return json_object_get_int(get(o, k));
}

static int idx(json_object *a, size_t i) {
  return json_object_get_int(json_object_array_get_idx(a, i));
}

static bool sha_eq(const void *p, size_t n, json_object *want) {
  char hex[65];
  test_sha256(p, n, hex);
  return want && strcmp(hex, json_object_get_string(want)) == 0;
}

static uint8_t *read_source(const char *name, size_t *n) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/sources/%s", dir, name);
  uint8_t *b = test_read(path, n);
  if (!b)
    fprintf(stderr, "cannot read %s\n", path);
  return b;
}

/* Decoded RGB of a case: from its source file or from synth(). */
static int case_rgb(json_object *c, struct pp_rgb *rgb) {
  json_object *src = get(c, "source"), *sy = get(c, "synth");
  if (src) {
    size_t n = 0;
    uint8_t *b = read_source(json_object_get_string(src), &n);
    if (!b)
      return -1;
    struct pp_image_limits lim;
    pp_image_limits_default(&lim);
    struct cm_diag d = {0};
    int rc = pp_image_decode(b, n, 0, &lim, rgb, &d);
    if (rc)
      fprintf(stderr, "%s: %s\n", json_object_get_string(src), d.msg);
    cm_diag_fini(&d);
    free(b);
    return rc;
  }
  rgb->height = (uint32_t)idx(sy, 0);
  rgb->width = (uint32_t)idx(sy, 1);
  rgb->data = synth(rgb->height, rgb->width, (uint32_t)idx(sy, 2), idx(sy, 3));
  return rgb->data ? 0 : -1;
}

static void check_case(json_object *c) {
  const char *name = json_object_get_string(get(c, "name"));
  int budget = geti(c, "max_pixels");
  struct pp_rgb rgb = {0};
  if (case_rgb(c, &rgb)) {
    CHECK(!"case input");
    return;
  }
  int bad0 = failures;
  CHECK(rgb.width == (uint32_t)idx(get(c, "wh"), 0) &&
        rgb.height == (uint32_t)idx(get(c, "wh"), 1));
  CHECK(sha_eq(rgb.data, (size_t)rgb.width * rgb.height * 3, get(c, "decoded_rgb_sha256")));
  struct pp_image_limits lim;
  pp_image_limits_default(&lim);
  lim.max_pixels = (uint64_t)budget;
  struct pp_image img = {0};
  struct cm_diag d = {0};
  int rc = pp_image_prepare_rgb(&rgb, 0, &lim, &img, &d);
  if (get(c, "error")) {
    /* transformers: "absolute aspect ratio must be smaller than 200" */
    CHECK(rc == -CM_ELIMIT && d.msg && strstr(d.msg, "aspect ratio above 200"));
  } else {
    CHECK(rc == 0);
    json_object *g = get(c, "grid_thw");
    CHECK(img.grid_thw[0] == idx(g, 0) && img.grid_thw[1] == idx(g, 1) &&
          img.grid_thw[2] == idx(g, 2));
    CHECK(img.n_tokens == (uint32_t)geti(c, "n_image_tokens"));
    CHECK(img.n_patches == (uint32_t)geti(c, "n_patches"));
    if (rc == 0) {
      size_t n_pv = (size_t)img.n_patches * PP_IMAGE_ROW;
      CHECK(sha_eq(img.resized.data, (size_t)img.width * img.height * 3,
                   get(c, "resized_rgb_sha256")));
      CHECK(sha_eq(img.pixel_values, n_pv * sizeof(float), get(c, "pixel_values_sha256")));
      json_object *smp = get(c, "pv_samples");
      for (size_t k = 0; k < json_object_array_length(smp); k++) {
        json_object *s = json_object_array_get_idx(smp, k);
        size_t r = (size_t)idx(s, 0), col = (size_t)idx(s, 1);
        double want = json_object_get_double(json_object_array_get_idx(s, 2));
        CHECK(r < img.n_patches && img.pixel_values[r * PP_IMAGE_ROW + col] == (float)want);
      }
      double mx = -2, sum = 0;
      for (size_t k = 0; k < n_pv; k++) {
        mx = img.pixel_values[k] > mx ? img.pixel_values[k] : mx;
        sum += img.pixel_values[k];
      }
      json_object *st = get(c, "pv_stats");
      CHECK(mx == json_object_get_double(get(st, "max")));
      CHECK(fabs(sum / (double)n_pv - json_object_get_double(get(st, "mean"))) < 1e-9);
    }
  }
  if (failures != bad0)
    fprintf(stderr, "  in case %s at max_pixels %d\n", name, budget);
  cm_diag_fini(&d);
  pp_image_fini(&img);
  pp_rgb_fini(&rgb);
}

static void check_resample(json_object *r) {
  json_object *in = get(r, "in_hw"), *out = get(r, "out_hw");
  struct pp_rgb src = {(uint32_t)idx(in, 1), (uint32_t)idx(in, 0), NULL}, dst = {0};
  src.data = synth(src.height, src.width, (uint32_t)geti(r, "seed"), geti(r, "kind"));
  int rc = pp_image_resample(&src, (uint32_t)idx(out, 1), (uint32_t)idx(out, 0), &dst);
  CHECK(rc == 0);
  if (rc == 0 && !sha_eq(dst.data, (size_t)dst.width * dst.height * 3, get(r, "sha256"))) {
    fprintf(stderr, "resample %ux%u -> %ux%u differs from torch\n", src.height, src.width,
            dst.height, dst.width);
    failures++;
  }
  pp_rgb_fini(&src);
  pp_rgb_fini(&dst);
}

/* Three images in one processor call: rows concatenated in input order. */
static void check_multi(json_object *m) {
  struct pp_image_limits lim;
  pp_image_limits_default(&lim);
  lim.max_pixels = 602112;
  uint32_t sz[3][3] = {{48, 64, 21}, {20, 2000, 23}, {48, 64, 21}};
  size_t total = 0;
  float *all = NULL;
  for (int i = 0; i < 3; i++) {
    struct pp_rgb rgb = {sz[i][1], sz[i][0], synth(sz[i][0], sz[i][1], sz[i][2], 1)};
    struct pp_image img = {0};
    CHECK(pp_image_prepare_rgb(&rgb, (uint32_t)i, &lim, &img, NULL) == 0);
    json_object *g = json_object_array_get_idx(get(m, "grids"), (size_t)i);
    CHECK(img.grid_thw[1] == idx(g, 1) && img.grid_thw[2] == idx(g, 2));
    size_t n = (size_t)img.n_patches * PP_IMAGE_ROW;
    float *na = realloc(all, sizeof(float) * (total + n));
    CHECK(na != NULL);
    if (na) {
      all = na;
      memcpy(all + total, img.pixel_values, sizeof(float) * n);
      total += n;
    }
    pp_image_fini(&img);
    pp_rgb_fini(&rgb);
  }
  CHECK(total / PP_IMAGE_ROW == (size_t)geti(m, "n_patches"));
  CHECK(sha_eq(all, total * sizeof(float), get(m, "pixel_values_sha256")));
  free(all);
}

static void check_rope(json_object *rope) {
  CHECK(json_object_get_boolean(get(rope, "ok")));
  const char *names[] = {"worked_example", "two_images", "tall_then_wide", "text_only",
                         "image_first"};
  for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
    json_object *c = get(rope, names[k]);
    CHECK(c != NULL);
    if (!c)
      continue;
    json_object *jids = get(c, "ids"), *jg = get(c, "grids"), *jp = get(c, "positions");
    size_t n = json_object_array_length(jids), ng = json_object_array_length(jg);
    int32_t *ids = malloc(sizeof(int32_t) * n), *pos = malloc(sizeof(int32_t) * 3 * n);
    struct pp_grid grids[8];
    for (size_t i = 0; i < n; i++)
      ids[i] = idx(jids, i);
    for (size_t i = 0; i < ng && i < 8; i++) {
      json_object *g = json_object_array_get_idx(jg, i);
      grids[i] = (struct pp_grid){idx(g, 0), idx(g, 1), idx(g, 2)};
    }
    int32_t next = -1;
    CHECK(pp_mrope_positions(ids, n, 248056, grids, ng, 0, pos, &next, NULL) == 0);
    int bad = 0;
    for (int a = 0; a < 3; a++)
      for (size_t i = 0; i < n; i++)
        bad += pos[(size_t)a * n + i] != idx(json_object_array_get_idx(jp, (size_t)a), i);
    CHECK(bad == 0);
    CHECK(next - (int32_t)n == geti(c, "rope_delta"));
    /* Continuation: the walk split anywhere outside an image gives the same positions. */
    size_t cut = n / 3;
    while (cut < n && ids[cut] == 248056)
      cut++;
    size_t g1 = 0;
    for (size_t i = 0; i < cut; i++)
      g1 += ids[i] == 248056 && (i == 0 || ids[i - 1] != 248056);
    int32_t mid = -1, end = -1;
    int32_t *p2 = malloc(sizeof(int32_t) * 3 * (n - cut)), *p1 = malloc(sizeof(int32_t) * 3 * cut);
    CHECK(pp_mrope_positions(ids, cut, 248056, grids, g1, 0, p1, &mid, NULL) == 0);
    CHECK(pp_mrope_positions(ids + cut, n - cut, 248056, grids + g1, ng - g1, mid, p2, &end,
                             NULL) == 0);
    CHECK(end == next);
    for (int a = 0; a < 3; a++)
      for (size_t i = cut; i < n; i++)
        bad += p2[(size_t)a * (n - cut) + (i - cut)] != pos[(size_t)a * n + i];
    CHECK(bad == 0);
    free(p1);
    free(p2);
    free(ids);
    free(pos);
  }
}

static void check_decode_only(void) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/decode_expected.json", dir);
  json_object *root = json_object_from_file(path);
  CHECK(root != NULL);
  json_object *cases = get(root, "cases");
  size_t nc = cases ? json_object_array_length(cases) : 0;
  CHECK(nc == 19);
  for (size_t i = 0; i < nc; i++) {
    json_object *c = json_object_array_get_idx(cases, i);
    struct pp_rgb rgb = {0};
    int bad0 = failures;
    CHECK(case_rgb(c, &rgb) == 0);
    CHECK(rgb.data &&
          sha_eq(rgb.data, (size_t)rgb.width * rgb.height * 3, get(c, "decoded_rgb_sha256")));
    if (failures != bad0)
      fprintf(stderr, "  in decode case %s\n", json_object_get_string(get(c, "source")));
    pp_rgb_fini(&rgb);
  }
  json_object_put(root);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_image_golden FIXTURE_DIR\n");
    return 2;
  }
  dir = argv[1];
  char path[4096];
  snprintf(path, sizeof(path), "%s/expected.json", dir);
  json_object *root = json_object_from_file(path);
  if (!root) {
    fprintf(stderr, "cannot read %s\n", path);
    return 1;
  }
  json_object *info = get(root, "info");
  CHECK(strcmp(json_object_get_string(get(info, "transformers")), "5.17.0") == 0);
  json_object *cases = get(root, "cases");
  size_t nc = json_object_array_length(cases);
  CHECK(nc == 54);
  for (size_t i = 0; i < nc; i++)
    check_case(json_object_array_get_idx(cases, i));
  json_object *rs = get(root, "resample");
  size_t nr = json_object_array_length(rs);
  CHECK(nr == 25);
  for (size_t i = 0; i < nr; i++)
    check_resample(json_object_array_get_idx(rs, i));
  check_multi(get(info, "multi_image"));
  check_rope(get(root, "rope"));
  check_decode_only();
  json_object_put(root);
  printf("%s: %zu processor cases, %zu resample cases\n", failures ? "FAIL" : "ok", nc, nr);
  return failures ? 1 : 0;
}
