/* Unit test of the safetensors reader and writer on hand-made files: a good file, a sharded set,
 * every malformed case with its exact message, bf16/f16 conversion, and a writer round trip.
 * Files are written to a fresh temporary directory and removed afterwards. */
#include "cm_safetensors.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int failures;
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static char dir[] = "/tmp/s1-st-XXXXXX";
static char path_buf[512];

static const char *at(const char *name) {
  snprintf(path_buf, sizeof path_buf, "%s/%s", dir, name);
  return path_buf;
}

/* Writes 8-byte length + header (+ pad spaces) + n_data bytes of pattern to dir/name. */
static void put_file(const char *name, const char *header, size_t n_data, long header_len_override) {
  FILE *f = fopen(at(name), "wb");
  size_t hl = strlen(header);
  uint64_t L = header_len_override >= 0 ? (uint64_t)header_len_override : hl;
  for (int i = 0; i < 8; i++)
    fputc((int)((L >> (8 * i)) & 0xff), f);
  fwrite(header, 1, hl, f);
  for (size_t i = 0; i < n_data; i++)
    fputc((int)(i * 7 + 1) & 0xff, f);
  fclose(f);
}

static void put_text(const char *name, const char *text) {
  FILE *f = fopen(at(name), "wb");
  fputs(text, f);
  fclose(f);
}

/* Opens dir/name, expects code `want` and message `msg` (with "%s" replaced by dir). */
static void expect_fail(const char *name, int want, const char *msg_fmt) {
  struct cm_safetensors *st = NULL;
  struct cm_diag d = {0};
  char p[512], msg[1024];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  snprintf(msg, sizeof msg, msg_fmt, dir, dir, dir);
  int rc = cm_safetensors_open(p, &st, &d);
  if (rc != want || !d.msg || strcmp(d.msg, msg) != 0) {
    fprintf(stderr, "case %s: rc %d (want %d)\n  got:  %s\n  want: %s\n", name, rc, want,
            d.msg ? d.msg : "(null)", msg);
    failures++;
  }
  CHECK(st == NULL);
  cm_diag_fini(&d);
}

static void test_good(void) {
  /* a: F32 [2,3] = 24 bytes at 0; b: BF16 [4] = 8 bytes at 24; c: F16 scalar at 32 */
  put_file("good.safetensors",
           "{\"__metadata__\":{\"format\":\"pt\"},"
           "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
           "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
           "\"c\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[32,34]}}   ",
           34, -1);
  struct cm_safetensors *st = NULL;
  struct cm_diag d = {0};
  CHECK(cm_safetensors_open(at("good.safetensors"), &st, &d) == 0);
  if (!st)
    return;
  CHECK(cm_safetensors_count(st) == 3);
  struct cm_tensor_view v;
  CHECK(cm_safetensors_at(st, 0, &v) == 0 && strcmp(v.name, "a") == 0);
  CHECK(v.dtype == CM_DTYPE_F32 && v.n_dims == 2 && v.shape[0] == 2 && v.shape[1] == 3);
  CHECK(v.n_elems == 6 && v.n_bytes == 24 && ((const unsigned char *)v.data)[0] == 1);
  CHECK(cm_safetensors_find(st, "b", &v) == 0 && v.n_bytes == 8);
  CHECK(((const unsigned char *)v.data)[0] == (24 * 7 + 1));
  CHECK(cm_safetensors_find(st, "c", &v) == 0 && v.n_dims == 0 && v.n_elems == 1);
  CHECK(cm_safetensors_find(st, "zz", &v) == -CM_EMISSING);
  CHECK(cm_safetensors_at(st, 3, &v) == -EINVAL);
  cm_safetensors_close(st);
}

static void test_bad(void) {
  put_file("short.safetensors", "", 0, -1); /* 8 bytes: length 0 */
  expect_fail("short.safetensors", -CM_EFORMAT, "%s/short.safetensors: header is not a JSON object");
  put_file("hlen.safetensors", "{}", 0, 1000);
  expect_fail("hlen.safetensors", -CM_EFORMAT,
              "%s/hlen.safetensors: header length 1000 runs past the end of the file (10 bytes)");
  put_file("json.safetensors", "{\"a\":{\"dtype\":\"F32\",", 4, -1);
  expect_fail("json.safetensors", -CM_EFORMAT,
              "%s/json.safetensors: header is not valid JSON (unexpected end of header)");
  put_file("trail.safetensors", "{} x", 0, -1);
  expect_fail("trail.safetensors", -CM_EFORMAT,
              "%s/trail.safetensors: bytes after the header's JSON object");
  put_file("dtype.safetensors", "{\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
           4, -1);
  expect_fail("dtype.safetensors", -CM_EDTYPE,
              "%s/dtype.safetensors: tensor 'a': unsupported dtype I32 (F32, F16, BF16 only)");
  put_file("dtype2.safetensors", "{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]}}",
           4, -1);
  expect_fail("dtype2.safetensors", -CM_EFORMAT,
              "%s/dtype2.safetensors: tensor 'a': unknown dtype \"Q4\"");
  put_file("shape.safetensors",
           "{\"a\":{\"dtype\":\"BF16\",\"shape\":[3,2],\"data_offsets\":[0,10]}}", 10, -1);
  expect_fail("shape.safetensors", -CM_ESHAPE,
              "%s/shape.safetensors: tensor 'a': shape needs 12 bytes of BF16 but data_offsets "
              "span 10");
  put_file("oob.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
           12, -1);
  expect_fail("oob.safetensors", -CM_EFORMAT,
              "%s/oob.safetensors: tensor 'a': data_offsets [0, 16] out of bounds (data section "
              "has 12 bytes)");
  put_file("overlap.safetensors",
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
           12, -1);
  expect_fail("overlap.safetensors", -CM_EFORMAT,
              "%s/overlap.safetensors: tensor 'b': data_offsets [4, 12] overlap tensor 'a'");
  put_file("gap.safetensors",
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
           12, -1);
  expect_fail("gap.safetensors", -CM_EFORMAT,
              "%s/gap.safetensors: tensor 'b': gap of 4 unindexed bytes before its data");
  put_file("tail.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
           6, -1);
  expect_fail("tail.safetensors", -CM_EFORMAT,
              "%s/tail.safetensors: 2 bytes after the last tensor are not indexed");
  /* the good file of test_good cut 4 bytes short: its last tensor runs past the end */
  put_file("trunc.safetensors",
           "{\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[24,32]},"
           "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
           "\"c\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[32,34]}}",
           30, -1);
  expect_fail("trunc.safetensors", -CM_EFORMAT,
              "%s/trunc.safetensors: tensor 'b': data_offsets [24, 32] out of bounds (data section "
              "has 30 bytes)");
  put_file("neg.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
           4, -1);
  expect_fail("neg.safetensors", -CM_EFORMAT,
              "%s/neg.safetensors: tensor 'a': shape[0] is not an integer >= 0");
  put_file("meta.safetensors", "{\"__metadata__\":[1]}", 0, -1);
  expect_fail("meta.safetensors", -CM_EFORMAT, "%s/meta.safetensors: \"__metadata__\" is not an object");
  expect_fail("absent.safetensors", -ENOENT,
              "%s/absent.safetensors: cannot open: No such file or directory");
}

/* Sharded set: two shards, an index; then the index-level failures. */
static void test_sharded(void) {
  mkdir(at("sh"), 0700);
  put_file("sh/m-1.safetensors", "{\"x\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}",
           4, -1);
  put_file("sh/m-2.safetensors",
           "{\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
           8, -1);
  put_text("sh/model.safetensors.index.json",
           "{\"metadata\":{\"total_size\":12},\"weight_map\":{\"x\":\"m-1.safetensors\","
           "\"y\":\"m-2.safetensors\",\"w\":\"m-2.safetensors\"}}");
  struct cm_safetensors *st = NULL;
  struct cm_diag d = {0};
  CHECK(cm_safetensors_open(at("sh"), &st, &d) == 0); /* directory: index preferred */
  if (st) {
    struct cm_tensor_view v;
    CHECK(cm_safetensors_count(st) == 3);
    CHECK(cm_safetensors_at(st, 0, &v) == 0 && strcmp(v.name, "w") == 0);
    CHECK(strstr(v.file, "m-2.safetensors") != NULL);
    CHECK(cm_safetensors_find(st, "x", &v) == 0 && strstr(v.file, "m-1.safetensors") != NULL);
    cm_safetensors_close(st);
  }
  cm_diag_fini(&d);

  /* the same name in both shards */
  put_file("sh/m-3.safetensors", "{\"x\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]}}",
           4, -1);
  put_text("sh/dup.index.json",
           "{\"weight_map\":{\"x\":\"m-1.safetensors\",\"y\":\"m-3.safetensors\"}}");
  expect_fail("sh/dup.index.json", -CM_EFORMAT,
              "%s/sh/dup.index.json: tensor 'x' is stored twice (%s/sh/m-1.safetensors and "
              "%s/sh/m-3.safetensors)");
  put_text("sh/miss.index.json",
           "{\"weight_map\":{\"x\":\"m-1.safetensors\",\"q\":\"m-1.safetensors\"}}");
  expect_fail("sh/miss.index.json", -CM_EMISSING,
              "%s/sh/miss.index.json: tensor 'q' is mapped to m-1.safetensors but not stored there");
  put_text("sh/wrong.index.json",
           "{\"weight_map\":{\"y\":\"m-1.safetensors\",\"w\":\"m-2.safetensors\"}}");
  expect_fail("sh/wrong.index.json", -CM_EFORMAT,
              "%s/sh/wrong.index.json: tensor 'x' is stored in m-1.safetensors but the index does "
              "not map it there");
  put_text("sh/badjson.index.json", "{\"weight_map\":");
  struct cm_diag d2 = {0};
  CHECK(cm_safetensors_open(at("sh/badjson.index.json"), &st, &d2) == -CM_EFORMAT);
  CHECK(d2.msg && strstr(d2.msg, "badjson.index.json: not valid JSON") != NULL);
  cm_diag_fini(&d2);
  put_text("sh/trav.index.json", "{\"weight_map\":{\"x\":\"../good.safetensors\"}}");
  expect_fail("sh/trav.index.json", -CM_EFORMAT,
              "%s/sh/trav.index.json: weight_map[\"x\"] is not a plain file name");
  put_text("sh/gone.index.json", "{\"weight_map\":{\"x\":\"m-9.safetensors\"}}");
  expect_fail("sh/gone.index.json", -ENOENT,
              "%s/sh/m-9.safetensors: cannot open: No such file or directory");
}

static void test_convert(void) {
  CHECK(cm_f32_to_bf16(1.0f) == 0x3f80);
  CHECK(cm_f32_to_bf16(-2.0f) == 0xc000);
  /* ties to even: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7; even is 1 */
  CHECK(cm_f32_to_bf16(1.00390625f) == 0x3f80);
  CHECK(cm_f32_to_bf16(1.01171875f) == 0x3f82); /* 1 + 3*2^-8 -> 1 + 2^-6 (even) */
  CHECK(cm_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81); /* above half: up */
  CHECK(isnan(cm_bf16_to_f32(cm_f32_to_bf16(NAN))));
  CHECK(cm_f32_to_bf16(INFINITY) == 0x7f80);
  CHECK(cm_f32_to_bf16(3.4e38f) == 0x7f80); /* rounds up to infinity, as torch does */
  CHECK(cm_bf16_to_f32(0x4049) == 3.140625f);
  /* F16 widening: 1.0, -2.0, smallest subnormal 2^-24, 65504, inf */
  unsigned char h[10] = {0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00, 0xff, 0x7b, 0x00, 0x7c};
  struct cm_tensor_view v = {.dtype = CM_DTYPE_F16, .n_elems = 5, .data = h};
  float o[5];
  CHECK(cm_tensor_to_f32(&v, o) == 0);
  CHECK(o[0] == 1.0f && o[1] == -2.0f && o[2] == 0x1p-24f && o[3] == 65504.0f && isinf(o[4]));
  unsigned char b[4] = {0x80, 0x3f, 0x49, 0x40};
  v = (struct cm_tensor_view){.dtype = CM_DTYPE_BF16, .n_elems = 2, .data = b};
  CHECK(cm_tensor_to_f32(&v, o) == 0 && o[0] == 1.0f && o[1] == 3.140625f);
  CHECK(cm_dtype_size(CM_DTYPE_BF16) == 2 && strcmp(cm_dtype_name(CM_DTYPE_F16), "F16") == 0);
}

static int fill_ramp(void *ctx, const char *name, void *buf, size_t n) {
  (void)name;
  for (size_t i = 0; i < n; i++)
    ((unsigned char *)buf)[i] = (unsigned char)(i + *(int *)ctx);
  return 0;
}

static void test_writer(void) {
  struct cm_safetensors_writer *w = NULL;
  CHECK(cm_safetensors_writer_new(&w) == 0);
  float f[3] = {1.5f, -2.0f, 3.25f};
  uint16_t bf[2] = {0x3f80, 0x4049};
  int base = 5;
  int64_t s3[] = {3}, s2[] = {2}, s12[] = {1, 2};
  CHECK(cm_safetensors_writer_add(w, "z.bf", CM_DTYPE_BF16, 1, s2, bf) == 0);
  CHECK(cm_safetensors_writer_add(w, "m.f32", CM_DTYPE_F32, 1, s3, f) == 0);
  CHECK(cm_safetensors_writer_add_fill(w, "a.fill", CM_DTYPE_F16, 2, s12, fill_ramp, &base) == 0);
  CHECK(cm_safetensors_writer_add(w, "m.f32", CM_DTYPE_F32, 1, s3, f) == -EEXIST);
  CHECK(cm_safetensors_writer_set_metadata(w, "format", "pt") == 0);
  struct cm_diag d = {0};
  CHECK(cm_safetensors_writer_finish(w, at("w.safetensors"), &d) == 0);
  cm_safetensors_writer_free(w);
  FILE *fp = fopen(at("w.safetensors"), "rb");
  unsigned char raw[512];
  size_t n = fread(raw, 1, sizeof raw, fp);
  fclose(fp);
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--)
    hl = (hl << 8) | raw[i];
  CHECK((8 + hl) % 8 == 0);
  CHECK(n == 8 + hl + 12 + 4 + 4);
  /* header: sorted keys; data: F32 first */
  const char *want = "{\"__metadata__\":{\"format\":\"pt\"},\"a.fill\":{\"dtype\":\"F16\",\"shape\":"
                     "[1,2],\"data_offsets\":[12,16]},\"m.f32\":{\"dtype\":\"F32\",\"shape\":[3],"
                     "\"data_offsets\":[0,12]},\"z.bf\":{\"dtype\":\"BF16\",\"shape\":[2],"
                     "\"data_offsets\":[16,20]}}";
  CHECK(hl >= strlen(want) && memcmp(raw + 8, want, strlen(want)) == 0);
  struct cm_safetensors *st = NULL;
  CHECK(cm_safetensors_open(at("w.safetensors"), &st, &d) == 0);
  if (st) {
    struct cm_tensor_view v;
    float o[3];
    CHECK(cm_safetensors_find(st, "m.f32", &v) == 0 && cm_tensor_to_f32(&v, o) == 0);
    CHECK(o[0] == 1.5f && o[1] == -2.0f && o[2] == 3.25f);
    CHECK(cm_safetensors_find(st, "z.bf", &v) == 0 && cm_tensor_to_f32(&v, o) == 0);
    CHECK(o[0] == 1.0f && o[1] == 3.140625f);
    CHECK(cm_safetensors_find(st, "a.fill", &v) == 0);
    CHECK(((const unsigned char *)v.data)[0] == 5 && ((const unsigned char *)v.data)[3] == 8);
    cm_safetensors_close(st);
  }
  cm_diag_fini(&d);
}

int main(void) {
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  test_good();
  test_bad();
  test_sharded();
  test_convert();
  test_writer();
  if (failures == 0) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
      fprintf(stderr, "could not remove %s\n", dir);
  }
  if (failures)
    fprintf(stderr, "%d failures\n", failures);
  return failures ? 1 : 0;
}
