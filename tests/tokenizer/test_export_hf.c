/* s1-export's reading of release tokenizer and processor configs (tools/export/export_hf.h)
 * against transformers 5.17 (fixture tests/fixtures/tokenizer/transformers_classes.jsonl from
 * tests/oracle/tokenizer_transformers.py). Per tokenizer case: a directory with the Qwen3 or
 * Qwen3.5 tokenizer.json and the case's tokenizer_config.json / config.json; the exported
 * tokenizer.json must be what transformers' class makes of it (the class name, and the ids of
 * every fixture string, encoded by our tokenizer, equal transformers' ids), or the combination is
 * refused. Per processor case: the effective smart_resize bounds are transformers', or refused;
 * then a family's bounds (JEMM 65,536 .. 16,777,216) against a config with other ones.
 * usage: test_export_hf FIXTURE.jsonl QWEN3_TOKENIZER QWEN35_TOKENIZER */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cm_sha256.h"
#include "export_hf.h"
#include "pp_tok.h"

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

static json_object *get(json_object *o, const char *k) {
  json_object *v = NULL;
  json_object_object_get_ex(o, k, &v);
  return v;
}

static int copy(const char *from, const char *to) {
  FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
  char buf[1 << 16];
  size_t n;
  int rc = a && b ? 0 : -1;
  while (!rc && (n = fread(buf, 1, sizeof buf, a)) > 0)
    rc = fwrite(buf, 1, n, b) == n ? 0 : -1;
  if (a)
    fclose(a);
  if (b && fclose(b))
    rc = -1;
  return rc;
}

static void sha_file(const char *p, char hex[CM_SHA256_HEX]) {
  uint8_t d[CM_SHA256_BYTES];
  struct cm_diag dg = {0};
  hex[0] = 0;
  if (cm_sha256_file(p, d, NULL, &dg) == 0)
    cm_sha256_hex(d, hex);
  cm_diag_fini(&dg);
}

/* Loaded exported tokenizers by the SHA-256 of the file (several cases export the same bytes;
 * loading a 20 MB tokenizer.json is most of this test's time under ASan). */
#define CACHE_MAX 16
static struct {
  char sha[CM_SHA256_HEX];
  struct pp_tok *tok;
} cache[CACHE_MAX];

static struct pp_tok *load_cached(const char *path, struct cm_diag *d) {
  char hex[CM_SHA256_HEX];
  sha_file(path, hex);
  int free_slot = -1;
  for (int i = 0; i < CACHE_MAX; i++) {
    if (cache[i].tok && strcmp(cache[i].sha, hex) == 0)
      return cache[i].tok;
    if (!cache[i].tok && free_slot < 0)
      free_slot = i;
  }
  struct pp_tok *t = NULL;
  if (pp_tok_load_file(path, &t, d) != 0)
    return NULL;
  if (free_slot >= 0) {
    memcpy(cache[free_slot].sha, hex, sizeof hex);
    cache[free_slot].tok = t;
  }
  return t;
}

static void tokenizer_case(json_object *c, json_object *strings, const char *work,
                           const char *const tok_paths[2]) {
  const char *name = json_object_get_string(get(c, "name"));
  bool refuse = strcmp(json_object_get_string(get(c, "expect")), "refuse") == 0;
  char dir[4096], p[4200], out[4200];
  snprintf(dir, sizeof dir, "%s/%s", work, name);
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/tokenizer.json", dir);
  const char *src = strcmp(json_object_get_string(get(c, "tokenizer")), "qwen3") == 0
                        ? tok_paths[0]
                        : tok_paths[1];
  CHECK(copy(src, p) == 0, "cannot copy %s", src);
  static const char *const files[2][2] = {{"tokenizer_config", "tokenizer_config.json"},
                                          {"config", "config.json"}};
  for (int i = 0; i < 2; i++) {
    json_object *v = get(c, files[i][0]);
    if (v && !json_object_is_type(v, json_type_null)) {
      snprintf(p, sizeof p, "%s/%s", dir, files[i][1]);
      CHECK(json_object_to_file(p, v) == 0, "cannot write %s", p);
    }
  }
  snprintf(out, sizeof out, "%s/exported.json", dir);
  json_object *info = NULL;
  int rc = ex_hf_export_tokenizer(dir, out, &info);
  if (refuse) {
    CHECK(rc != 0, "accepted a combination transformers reads as %s",
          json_object_get_string(get(c, "transformers_class")));
    json_object_put(info);
    return;
  }
  CHECK(rc == 0, "refused (transformers: %s)",
        json_object_get_string(get(c, "transformers_class")));
  if (rc)
    return;
  const char *cls = json_object_get_string(get(info, "class"));
  CHECK(strcmp(cls, json_object_get_string(get(c, "transformers_class"))) == 0,
        "class %s, transformers %s", cls, json_object_get_string(get(c, "transformers_class")));
  struct cm_diag d = {0};
  struct pp_tok *tok = load_cached(out, &d);
  CHECK(tok, "exported tokenizer.json: %s", d.msg ? d.msg : "?");
  cm_diag_fini(&d);
  json_object *want = get(c, "ids");
  for (size_t i = 0; tok && i < json_object_array_length(strings); i++) {
    const char *s = json_object_get_string(json_object_array_get_idx(strings, i));
    struct pp_tok_ids ids = {0};
    CHECK(pp_tok_encode(tok, s, strlen(s), &ids, &d) == 0, "encode %zu", i);
    cm_diag_fini(&d);
    json_object *w = json_object_array_get_idx(want, i);
    bool same = ids.n == json_object_array_length(w);
    for (size_t k = 0; same && k < ids.n; k++)
      same = ids.ids[k] == json_object_get_int(json_object_array_get_idx(w, k));
    CHECK(same, "string %zu: %zu ids, transformers %zu", i, ids.n, json_object_array_length(w));
    pp_tok_ids_fini(&ids);
  }
  printf("%-42s %-18s rebuilt %-5s ids = transformers'\n", name, cls,
         json_object_get_boolean(get(info, "rebuilt")) ? "yes" : "no");
  json_object_put(info);
}

static void processor_case(json_object *c, const char *work) {
  const char *name = json_object_get_string(get(c, "name"));
  bool refuse = strcmp(json_object_get_string(get(c, "expect")), "refuse") == 0;
  char dir[4096], p[4200];
  snprintf(dir, sizeof dir, "%s/%s", work, name);
  mkdir(dir, 0755);
  snprintf(p, sizeof p, "%s/%s", dir, json_object_get_string(get(c, "file")));
  CHECK(json_object_to_file(p, get(c, "content")) == 0, "cannot write %s", p);
  int found = 0;
  json_object *eff = NULL;
  int rc = ex_hf_check_processor(dir, -1, -1, &found, &eff);
  CHECK(found, "no processor config found");
  if (refuse) {
    CHECK(rc != 0, "accepted");
  } else {
    CHECK(rc == 0 && eff, "refused");
    int64_t lo = eff ? json_object_get_int64(get(eff, "min_pixels")) : -1,
            hi = eff ? json_object_get_int64(get(eff, "max_pixels")) : -1;
    CHECK(lo == json_object_get_int64(get(c, "min_pixels")) &&
              hi == json_object_get_int64(get(c, "max_pixels")),
          "bounds %lld .. %lld, transformers %lld .. %lld", (long long)lo, (long long)hi,
          (long long)json_object_get_int64(get(c, "min_pixels")),
          (long long)json_object_get_int64(get(c, "max_pixels")));
    /* JEMM's bounds: only the release's 65,536 .. 16,777,216 */
    bool jemm_ok = lo == 65536 && hi == 16777216;
    int rj = ex_hf_check_processor(dir, 65536, 16777216, &found, NULL);
    CHECK((rj == 0) == jemm_ok, "JEMM bounds: rc %d for %lld .. %lld", rj, (long long)lo,
          (long long)hi);
    printf("%-42s %lld .. %lld (JEMM %s)\n", name, (long long)lo, (long long)hi,
           jemm_ok ? "accepts" : "refuses");
  }
  json_object_put(eff);
}

int main(int argc, char **argv) {
  const char *name = "setup";
  if (argc != 4) {
    fprintf(stderr, "usage: %s FIXTURE.jsonl QWEN3_TOKENIZER QWEN35_TOKENIZER\n", argv[0]);
    return 2;
  }
  const char *tok_paths[2] = {argv[2], argv[3]};
  FILE *f = fopen(argv[1], "r");
  if (!f) {
    fprintf(stderr, "cannot read %s\n", argv[1]);
    return 2;
  }
  char work[] = "/tmp/s1-export-hf-XXXXXX";
  if (!mkdtemp(work))
    return 2;
  char *line = NULL;
  size_t cap = 0;
  json_object *head = NULL, *strings = NULL;
  int n_tok = 0, n_proc = 0, n_refused = 0;
  while (getline(&line, &cap, f) > 0) {
    json_object *c = json_tokener_parse(line);
    if (!c)
      continue;
    if (!head) {
      head = c;
      strings = get(head, "strings");
      static const char *const keys[2] = {"qwen3", "qwen35"};
      for (int i = 0; i < 2; i++) {
        char hex[CM_SHA256_HEX];
        sha_file(tok_paths[i], hex);
        CHECK(strcmp(hex, json_object_get_string(get(get(head, "tokenizers"), keys[i]))) == 0,
              "%s is not the tokenizer the fixture was made with (%s)", tok_paths[i], hex);
      }
      continue;
    }
    const char *kind = json_object_get_string(get(c, "kind"));
    n_refused += strcmp(json_object_get_string(get(c, "expect")), "refuse") == 0;
    if (strcmp(kind, "tokenizer") == 0)
      tokenizer_case(c, strings, work, tok_paths), n_tok++;
    else
      processor_case(c, work), n_proc++;
    json_object_put(c);
  }
  free(line);
  fclose(f);
  json_object_put(head);
  for (int i = 0; i < CACHE_MAX; i++)
    pp_tok_free(cache[i].tok);
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
  if (system(cmd) != 0)
    fprintf(stderr, "could not remove %s\n", work);
  name = "all";
  CHECK(n_tok >= 20 && n_proc >= 9, "only %d tokenizer and %d processor cases", n_tok, n_proc);
  printf("%d tokenizer and %d processor cases (%d refusals)\n%s (%d failures)\n", n_tok, n_proc,
         n_refused, failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
