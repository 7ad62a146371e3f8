/* Golden test: ids and decoded text of hand-made strings against the Python `tokenizers` library
 * (fixtures from tests/oracle/tokenizer_golden.py), for one tokenizer file and key ("qwen3" or
 * "qwen35"); with a variants file, also Qwen3's vocabulary under other components. The golden
 * strings are encoded from several threads at once to check that a loaded tokenizer is shareable.
 * Every file (and variant) must load by the loader's fast path (vocab and merges in pieces) and
 * give the same tables as a parse of the whole document (tok_compare.h).
 * usage: test_tok_golden GOLDEN.jsonl TOKENIZER.json KEY [VARIANTS.jsonl] */
#include "pp_tok.h"
#include "tok_compare.h"

#include <json-c/json.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_THREADS 4

struct row {
  char *text;    /* input */
  size_t n;      /* its length */
  int32_t *ids;  /* expected ids */
  size_t n_ids;  /* their count */
  char *dec;     /* expected decode (NULL when not given) */
  size_t n_dec;  /* its length */
};

static int failures;

static char *dup_str(json_object *o, size_t *ret_n) {
  size_t n = (size_t)json_object_get_string_len(o);
  char *s = malloc(n + 1);
  memcpy(s, json_object_get_string(o), n);
  s[n] = 0;
  *ret_n = n;
  return s;
}

static void row_from(struct row *r, json_object *text, json_object *ids, json_object *dec) {
  r->text = dup_str(text, &r->n);
  r->n_ids = json_object_array_length(ids);
  r->ids = malloc(sizeof(int32_t) * (r->n_ids + 1));
  for (size_t i = 0; i < r->n_ids; i++)
    r->ids[i] = (int32_t)json_object_get_int(json_object_array_get_idx(ids, i));
  r->dec = dec ? dup_str(dec, &r->n_dec) : NULL;
}

static void print_ids(const char *label, const int32_t *v, size_t n) {
  fprintf(stderr, "  %s [", label);
  for (size_t i = 0; i < n; i++)
    fprintf(stderr, i ? ",%d" : "%d", (int)v[i]);
  fprintf(stderr, "]\n");
}

/* Encodes every row; returns the number of mismatches (printing the first few when verbose). */
static int check_rows(const struct pp_tok *tok, const struct row *rows, size_t n, bool verbose,
                      const char *what) {
  struct pp_tok_ids ids = {0};
  struct pp_tok_text text = {0};
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    struct cm_diag d = {0};
    ids.n = 0;
    int rc = pp_tok_encode(tok, rows[i].text, rows[i].n, &ids, &d);
    bool ok = rc == 0 && ids.n == rows[i].n_ids &&
              (ids.n == 0 || memcmp(ids.ids, rows[i].ids, ids.n * sizeof(int32_t)) == 0);
    if (ok && rows[i].dec) {
      text.n = 0;
      rc = pp_tok_decode(tok, ids.ids, ids.n, false, &text, &d);
      ok = rc == 0 && text.n == rows[i].n_dec && memcmp(text.bytes, rows[i].dec, text.n) == 0;
      if (!ok && verbose && bad < 5)
        fprintf(stderr, "%s: decode mismatch for row %zu\n", what, i);
    } else if (!ok && verbose && bad < 5) {
      fprintf(stderr, "%s: row %zu %s\n", what, i, d.msg ? d.msg : "ids differ");
      fwrite(rows[i].text, 1, rows[i].n < 200 ? rows[i].n : 200, stderr);
      fputc('\n', stderr);
      print_ids("want", rows[i].ids, rows[i].n_ids);
      print_ids("got ", ids.ids, ids.n);
    }
    bad += !ok;
    cm_diag_fini(&d);
  }
  pp_tok_ids_fini(&ids);
  pp_tok_text_fini(&text);
  return bad;
}

struct job {
  const struct pp_tok *tok; /* shared tokenizer */
  const struct row *rows;   /* shared inputs */
  size_t n;                 /* rows */
  int bad;                  /* mismatches seen by this thread */
};

static void *thread_main(void *p) {
  struct job *j = p;
  for (int rep = 0; rep < 3; rep++)
    j->bad += check_rows(j->tok, j->rows, j->n, false, "thread");
  return NULL;
}

static json_object *read_json_lines(const char *path, size_t *ret_n, json_object ***ret_v) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "%s: cannot open\n", path);
    exit(1);
  }
  char *line = NULL;
  size_t cap = 0, n = 0, vcap = 0;
  json_object **v = NULL;
  ssize_t got;
  while ((got = getline(&line, &cap, f)) > 0) {
    json_object *o = json_tokener_parse(line);
    if (!o) {
      fprintf(stderr, "%s: bad line %zu\n", path, n + 1);
      exit(1);
    }
    if (n == vcap) {
      vcap = vcap ? vcap * 2 : 64;
      v = realloc(v, vcap * sizeof(*v));
    }
    v[n++] = o;
  }
  free(line);
  fclose(f);
  *ret_n = n;
  *ret_v = v;
  return NULL;
}

static char *slurp(const char *path, size_t *ret_n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (fread(b, 1, (size_t)n, f) != (size_t)n) {
    fclose(f);
    free(b);
    return NULL;
  }
  fclose(f);
  b[n] = 0;
  *ret_n = (size_t)n;
  return b;
}

/* tok (loaded from json[n]) came from the fast path and equals the plain path's tokenizer. */
static void check_fast_path(const struct pp_tok *tok, const char *json, size_t n,
                            const char *what) {
  struct pp_tok *plain = NULL;
  struct cm_diag d = {0};
  if (!tok->in_pieces) {
    fprintf(stderr, "%s: not loaded by the fast path\n", what);
    failures++;
  }
  if (tok_load_buffer(json, n, 0, 0, &plain, &d)) {
    fprintf(stderr, "%s: plain load failed: %s\n", what, d.msg);
    failures++;
  } else if (plain->in_pieces) {
    fprintf(stderr, "%s: plain load took the fast path\n", what);
    failures++;
  } else {
    const char *diff = tok_tables_differ(tok, plain);
    if (diff) {
      fprintf(stderr, "%s: fast and plain loads differ in %s\n", what, diff);
      failures++;
    }
  }
  pp_tok_free(plain);
  cm_diag_fini(&d);
}

static void run_variants(const char *variants_path, const char *tok_path) {
  size_t n_lines, n_json;
  json_object **lines;
  read_json_lines(variants_path, &n_lines, &lines);
  char *buf = slurp(tok_path, &n_json);
  json_object *doc = buf ? json_tokener_parse(buf) : NULL;
  free(buf);
  if (!doc) {
    fprintf(stderr, "%s: cannot parse\n", tok_path);
    failures++;
    return;
  }
  for (size_t li = 0; li < n_lines; li++) {
    json_object *name, *patch, *cases;
    json_object_object_get_ex(lines[li], "variant", &name);
    json_object_object_get_ex(lines[li], "patch", &patch);
    json_object_object_get_ex(lines[li], "cases", &cases);
    /* apply the patch to a deep copy of the document's top level */
    json_object *saved[8] = {0};
    const char *keys[8];
    int nk = 0;
    json_object *model = json_object_object_get(doc, "model");
    json_object_object_foreach(patch, key, val) {
      if (strcmp(key, "model.ignore_merges") == 0) {
        json_object_object_add(model, "ignore_merges", json_object_get(val));
        keys[nk] = key;
        saved[nk++] = NULL;
        continue;
      }
      keys[nk] = key;
      saved[nk] = json_object_get(json_object_object_get(doc, key));
      json_object_object_add(doc, key, json_object_get(val));
      nk++;
    }
    size_t len;
    const char *s = json_object_to_json_string_length(doc, JSON_C_TO_STRING_PLAIN, &len);
    struct pp_tok *tok = NULL;
    struct cm_diag d = {0};
    if (pp_tok_load_buffer(s, len, &tok, &d)) {
      fprintf(stderr, "variant %s: load failed: %s\n", json_object_get_string(name), d.msg);
      failures++;
    } else {
      check_fast_path(tok, s, len, json_object_get_string(name));
      size_t n = json_object_array_length(cases);
      struct row *rows = calloc(n, sizeof(*rows));
      for (size_t i = 0; i < n; i++) {
        json_object *c = json_object_array_get_idx(cases, i);
        row_from(&rows[i], json_object_object_get(c, "text"), json_object_object_get(c, "ids"),
                 NULL);
      }
      int bad = check_rows(tok, rows, n, true, json_object_get_string(name));
      printf("variant %-26s %zu cases, %d mismatches\n", json_object_get_string(name), n, bad);
      failures += bad;
      for (size_t i = 0; i < n; i++) {
        free(rows[i].text);
        free(rows[i].ids);
      }
      free(rows);
    }
    cm_diag_fini(&d);
    pp_tok_free(tok);
    for (int k = 0; k < nk; k++) {
      if (strcmp(keys[k], "model.ignore_merges") == 0)
        json_object_object_add(model, "ignore_merges", json_object_new_boolean(0));
      else
        json_object_object_add(doc, keys[k], saved[k]);
    }
    json_object_put(lines[li]);
  }
  free(lines);
  json_object_put(doc);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s GOLDEN.jsonl TOKENIZER.json KEY [VARIANTS.jsonl]\n", argv[0]);
    return 2;
  }
  const char *key = argv[3];
  char dec_key[64];
  snprintf(dec_key, sizeof(dec_key), "%s_dec", key);
  size_t n;
  json_object **lines;
  read_json_lines(argv[1], &n, &lines);
  struct row *rows = calloc(n, sizeof(*rows));
  for (size_t i = 0; i < n; i++) {
    json_object *t, *ids, *dec;
    if (!json_object_object_get_ex(lines[i], "text", &t) ||
        !json_object_object_get_ex(lines[i], key, &ids) ||
        !json_object_object_get_ex(lines[i], dec_key, &dec)) {
      fprintf(stderr, "golden line %zu lacks %s\n", i + 1, key);
      return 1;
    }
    row_from(&rows[i], t, ids, dec);
    json_object_put(lines[i]);
  }
  free(lines);
  struct pp_tok *tok = NULL;
  struct cm_diag d = {0};
  if (pp_tok_load_file(argv[2], &tok, &d)) {
    fprintf(stderr, "load %s: %s\n", argv[2], d.msg);
    return 1;
  }
  size_t n_json;
  char *json = slurp(argv[2], &n_json);
  if (!json) {
    fprintf(stderr, "%s: cannot read\n", argv[2]);
    return 1;
  }
  check_fast_path(tok, json, n_json, argv[2]);
  free(json);
  int bad = check_rows(tok, rows, n, true, key);
  printf("%s golden: %zu strings, %d mismatches\n", key, n, bad);
  failures += bad;

  pthread_t th[N_THREADS];
  struct job jobs[N_THREADS];
  for (int i = 0; i < N_THREADS; i++) {
    jobs[i] = (struct job){tok, rows, n, 0};
    pthread_create(&th[i], NULL, thread_main, &jobs[i]);
  }
  for (int i = 0; i < N_THREADS; i++) {
    pthread_join(th[i], NULL);
    if (jobs[i].bad)
      fprintf(stderr, "thread %d: %d mismatches\n", i, jobs[i].bad);
    failures += jobs[i].bad;
  }
  printf("%d threads x 3 passes: %s\n", N_THREADS, failures ? "mismatches" : "identical");
  pp_tok_free(tok);
  if (argc > 4)
    run_variants(argv[4], argv[2]);
  for (size_t i = 0; i < n; i++) {
    free(rows[i].text);
    free(rows[i].ids);
    free(rows[i].dec);
  }
  free(rows);
  return failures ? 1 : 0;
}
