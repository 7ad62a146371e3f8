/* s1-pixels: prepares images as the serving path does and writes what the vision tower would
 * read, for checks against the Python reference and for debugging requests.
 *   s1-pixels [--min-pixels N] [--max-pixels N] IMAGE_OR_DATA_URL_FILE... --out DIR [--rgb]
 * Per input i: DIR/<i>.json (sizes, grid_thw, tokens), DIR/<i>.f32 (pixel_values, little-endian
 * fp32 [n_patches, 1536]), with --rgb DIR/<i>.rgb (resized 8-bit RGB); or one error line. */
#include "cm_version.h"
#include "pp_image.h"

#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int read_file(const char *path, uint8_t **ret, size_t *ret_n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return -errno;
  size_t cap = 1 << 16, n = 0;
  uint8_t *buf = malloc(cap);
  while (buf) {
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (n < cap)
      break;
    uint8_t *nb = realloc(buf, cap * 2);
    if (!nb) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = nb;
    cap *= 2;
  }
  int err = ferror(f);
  fclose(f);
  if (!buf)
    return -ENOMEM;
  if (err) {
    free(buf);
    return -EIO;
  }
  *ret = buf;
  *ret_n = n;
  return 0;
}

static int write_file(const char *dir, unsigned i, const char *ext, const void *p, size_t n) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%u.%s", dir, i, ext);
  FILE *f = fopen(path, "wb");
  if (!f)
    return -errno;
  size_t put = fwrite(p, 1, n, f);
  int rc = fclose(f);
  return put == n && rc == 0 ? 0 : -EIO;
}

static int parse_u64(const char *s, uint64_t *ret) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || !end || *end || end == s || s[0] == '-')
    return -EINVAL;
  *ret = v;
  return 0;
}

static int usage(FILE *f) {
  fprintf(f,
          "usage: s1-pixels [--min-pixels N] [--max-pixels N] IMAGE_OR_DATA_URL_FILE... --out DIR"
          " [--rgb]\n"
          "  Prepares images exactly as transformers' Qwen2VLImageProcessor (after Pillow's\n"
          "  convert(\"RGB\")) and writes, per input i: DIR/<i>.json (grid, sizes, token count),\n"
          "  DIR/<i>.f32 (float32 patches [n_patches, 1536]) and with --rgb DIR/<i>.rgb (resized\n"
          "  uint8 RGB). An input is an image file (PNG, JPEG, WebP) or a file holding a data URL.\n"
          "  --min-pixels N  smart_resize lower bound (default 65536)\n"
          "  --max-pixels N  smart_resize upper bound (default 16777216)\n"
          "  --help, --version\n");
  return f == stdout ? 0 : 2;
}

static int one(const char *path, unsigned i, const struct pp_image_limits *lim, const char *out,
               int want_rgb) {
  uint8_t *bytes = NULL;
  size_t n = 0;
  int rc = read_file(path, &bytes, &n);
  if (rc) {
    printf("image %u: %s: %s\n", i, path, strerror(-rc));
    return rc;
  }
  struct cm_diag diag = {0};
  struct pp_image img = {0};
  if (n >= 5 && memcmp(bytes, "data:", 5) == 0)
    rc = pp_image_prepare_data_url((const char *)bytes, n, i, lim, &img, &diag);
  else
    rc = pp_image_prepare_bytes(bytes, n, i, lim, &img, &diag);
  free(bytes);
  if (rc) {
    printf("%s (%s)\n", diag.msg ? diag.msg : cm_strerror(rc), path);
    cm_diag_fini(&diag);
    return rc;
  }
  json_object *o = json_object_new_object();
  json_object_object_add(o, "index", json_object_new_int64(i));
  json_object_object_add(o, "source", json_object_new_string(path));
  json_object_object_add(o, "width", json_object_new_int64(img.src_width));
  json_object_object_add(o, "height", json_object_new_int64(img.src_height));
  json_object_object_add(o, "resized_width", json_object_new_int64(img.width));
  json_object_object_add(o, "resized_height", json_object_new_int64(img.height));
  json_object *g = json_object_new_array();
  for (int k = 0; k < 3; k++)
    json_object_array_add(g, json_object_new_int64(img.grid_thw[k]));
  json_object_object_add(o, "grid_thw", g);
  json_object_object_add(o, "n_patches", json_object_new_int64(img.n_patches));
  json_object_object_add(o, "n_image_tokens", json_object_new_int64(img.n_tokens));
  json_object_object_add(o, "min_pixels", json_object_new_int64((int64_t)lim->min_pixels));
  json_object_object_add(o, "max_pixels", json_object_new_int64((int64_t)lim->max_pixels));
  const char *js =
      json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
  rc = write_file(out, i, "json", js, strlen(js));
  json_object_put(o);
  /* x86-64 and aarch64 are little-endian: the fp32 rows are written as they are in memory. */
  if (!rc)
    rc = write_file(out, i, "f32", img.pixel_values,
                    sizeof(float) * (size_t)img.n_patches * PP_IMAGE_ROW);
  if (!rc && want_rgb)
    rc = write_file(out, i, "rgb", img.resized.data, (size_t)img.width * img.height * 3);
  if (rc)
    printf("image %u: writing to %s: %s\n", i, out, strerror(-rc));
  pp_image_fini(&img);
  return rc;
}

int main(int argc, char **argv) {
  struct pp_image_limits lim;
  pp_image_limits_default(&lim);
  const char *out = NULL;
  int want_rgb = 0, n_in = 0, rc = 2;
  if (cm_version_requested(argc, argv, "s1-pixels"))
    return 0;
  for (int a = 1; a < argc; a++)
    if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h"))
      return usage(stdout);
  const char **in = calloc((size_t)argc, sizeof(*in));
  if (!in)
    return 1;
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "--out") && a + 1 < argc) {
      out = argv[++a];
    } else if (!strcmp(argv[a], "--rgb")) {
      want_rgb = 1;
    } else if (!strcmp(argv[a], "--min-pixels") && a + 1 < argc) {
      if (parse_u64(argv[++a], &lim.min_pixels))
        goto usage;
    } else if (!strcmp(argv[a], "--max-pixels") && a + 1 < argc) {
      if (parse_u64(argv[++a], &lim.max_pixels))
        goto usage;
    } else if (argv[a][0] == '-' && argv[a][1] == '-') {
      goto usage;
    } else {
      in[n_in++] = argv[a];
    }
  }
  if (!out || n_in == 0 || lim.min_pixels == 0 || lim.max_pixels < lim.min_pixels)
    goto usage;
  rc = 1;
  if (mkdir(out, 0777) && errno != EEXIST) {
    fprintf(stderr, "s1-pixels: %s: %s\n", out, strerror(errno));
    goto done;
  }
  if (pp_image_global_init()) {
    fprintf(stderr, "s1-pixels: libvips could not start\n");
    goto done;
  }
  int failed = 0;
  for (int i = 0; i < n_in; i++)
    failed |= one(in[i], (unsigned)i, &lim, out, want_rgb) != 0;
  rc = failed ? 1 : 0;
  goto done;
usage:
  rc = usage(stderr);
done:
  free(in);
  return rc;
}
