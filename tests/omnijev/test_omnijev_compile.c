/* OmniJev compile against the fixtures of tests/oracle/omnijev_compile.py: for every accepted
 * request the prompts, keys, option texts, grid, shared prefix (ids and 3-axis positions), p0,
 * rows, marker offsets and usage, exactly; for every refused one the 422 class and the message.
 * Also the family adapter's program (prefix, rows continuing it, one readout per question).
 * usage: test_omnijev_compile compile.jsonl omnijev_tokenizer.json */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnijev.h"
#include "pp_json.h"
#include "pp_family.h"
#include "proto_program.h"

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

static bool ints_equal(json_object *arr, const int32_t *v, size_t n) {
  if (!json_object_is_type(arr, json_type_array) || json_object_array_length(arr) != n)
    return false;
  for (size_t i = 0; i < n; i++)
    if (json_object_get_int(json_object_array_get_idx(arr, i)) != v[i])
      return false;
  return true;
}

static json_object *get(json_object *o, const char *k) {
  json_object *v = NULL;
  json_object_object_get_ex(o, k, &v);
  return v;
}

static void check_ok(const char *name, const struct pp_omnijev_request *r, json_object *e) {
  json_object *grid = get(e, "grid");
  CHECK(r->n_images == (size_t)json_object_get_int(get(e, "n_images")), "%zu images, want %d",
        r->n_images, json_object_get_int(get(e, "n_images")));
  for (size_t k = 0; k < r->n_images; k++)
    CHECK(ints_equal(grid, r->images[k].grid_thw, 3), "grid %d %d %d", r->images[k].grid_thw[0],
          r->images[k].grid_thw[1], r->images[k].grid_thw[2]);
  CHECK((size_t)json_object_get_int(get(e, "L")) == r->n_prefix, "L %zu, want %d", r->n_prefix,
        json_object_get_int(get(e, "L")));
  CHECK(ints_equal(get(e, "prefix_ids"), r->prefix_ids, r->n_prefix), "prefix ids differ");
  json_object *pos = get(e, "prefix_pos");
  for (int a = 0; a < 3; a++)
    CHECK(ints_equal(json_object_array_get_idx(pos, (size_t)a), r->prefix_pos + a * r->n_prefix,
                     r->n_prefix), "prefix positions, axis %d", a);
  CHECK(json_object_get_int(get(e, "p0")) == r->p0, "p0 %d", r->p0);
  CHECK((uint64_t)json_object_get_int64(get(e, "input_tokens")) == r->input_tokens,
        "input_tokens %llu, want %lld", (unsigned long long)r->input_tokens,
        (long long)json_object_get_int64(get(e, "input_tokens")));
  json_object *rows = get(e, "rows");
  CHECK(json_object_array_length(rows) == r->n_rows, "%zu rows, want %zu", r->n_rows,
        json_object_array_length(rows));
  for (size_t i = 0; i < r->n_rows && i < json_object_array_length(rows); i++)
    CHECK(ints_equal(json_object_array_get_idx(rows, i), r->row_ids + r->row_off[i],
                     r->row_off[i + 1] - r->row_off[i]), "row %zu differs", i);
  json_object *qs = get(e, "questions");
  CHECK(json_object_array_length(qs) == r->n_questions, "question count");
  static const char *const types[] = {"noul", "choice", "score"};
  for (size_t i = 0; i < r->n_questions && i < json_object_array_length(qs); i++) {
    const struct pp_omnijev_question *q = &r->questions[i];
    json_object *w = json_object_array_get_idx(qs, i);
    CHECK(strcmp(q->id, json_object_get_string(get(w, "id"))) == 0, "q%zu id", i);
    CHECK(strcmp(types[q->type], json_object_get_string(get(w, "type"))) == 0, "q%zu type", i);
    CHECK(strcmp(q->prompt, json_object_get_string(get(w, "prompt"))) == 0,
          "q%zu prompt:\n got %s\nwant %s", i, q->prompt, json_object_get_string(get(w, "prompt")));
    json_object *keys = get(w, "keys"), *texts = get(w, "texts");
    CHECK(json_object_array_length(keys) == q->n_options, "q%zu has %zu options", i, q->n_options);
    for (size_t k = 0; k < q->n_options && k < json_object_array_length(keys); k++) {
      CHECK(strcmp(q->keys[k], json_object_get_string(json_object_array_get_idx(keys, k))) == 0,
            "q%zu key %zu: %s", i, k, q->keys[k]);
      CHECK(strcmp(q->texts[k], json_object_get_string(json_object_array_get_idx(texts, k))) == 0,
            "q%zu text %zu: %s", i, k, q->texts[k]);
    }
    CHECK(q->first_row == (size_t)json_object_get_int(get(w, "first_row")), "q%zu first_row", i);
    CHECK(q->n_rows == (size_t)json_object_get_int(get(w, "n_rows")), "q%zu n_rows", i);
    CHECK(q->open_offset == (uint32_t)json_object_get_int(get(w, "open_offset")),
          "q%zu open_offset %u", i, q->open_offset);
    CHECK(q->n_seq == (size_t)json_object_get_int(get(w, "n_seq")), "q%zu n_seq", i);
    /* readout offsets: <|opt|> at o, <|/opt|> last, zq's token before it (spec §6) */
    for (size_t k = 0; q->n_options && k < q->n_rows; k++) {
      const int32_t *row = r->row_ids + r->row_off[q->first_row + k];
      size_t n = r->row_off[q->first_row + k + 1] - r->row_off[q->first_row + k];
      CHECK(q->open_offset >= 1 && row[q->open_offset] == 248077 && row[n - 1] == 248078,
            "q%zu row %zu markers", i, k);
    }
  }
}

/* The adapter's program for an accepted request: prefix with the image, rows continuing it at
 * p0 + t on all axes, one HEAD readout per answered question with [type, K]. */
static void check_program(const char *name, const struct pp_family *fam, const void *state,
                          json_object *req, json_object *e) {
  struct proto_program p = {0};
  void *ctx = NULL;
  struct cm_diag d = {0};
  struct pp_request_info info = {0};
  int rc = fam->compile(state, req, &info, &p, &ctx, &d);
  CHECK(rc == 0, "adapter compile: %s", d.msg ? d.msg : "");
  size_t answered = 0;
  json_object *qs = get(e, "questions");
  for (size_t i = 0; i < json_object_array_length(qs); i++)
    answered += json_object_array_length(get(json_object_array_get_idx(qs, i), "keys")) > 0;
  if (!rc && !answered) { /* only empty choices: a one-token program, nothing read from it */
    CHECK(p.n_images == 0 && p.n_prefixes == 0 && p.n_rows == 1 && p.n_readouts == 1 &&
              p.readouts[0].kind == PROTO_READOUT_HIDDEN && proto_program_check(&p, &d) == 0,
          "program of a request without options");
  } else if (!rc) {
    size_t n_img = (size_t)json_object_get_int(get(e, "n_images"));
    CHECK(p.n_images == n_img && p.n_prefixes == 1 && p.prefixes[0].parent == -1 &&
              p.prefixes[0].n_images == n_img, "program shape");
    CHECK(proto_program_check(&p, &d) == 0, "program check: %s", d.msg ? d.msg : "");
    int32_t p0 = json_object_get_int(get(e, "p0"));
    CHECK(p.n_readouts == answered, "%u readouts for %zu questions", p.n_readouts, answered);
    for (uint32_t i = 0; i < p.n_rows; i++) {
      CHECK(p.rows[i].prefix == 0, "row %u continues prefix %d", i, p.rows[i].prefix);
      for (uint32_t t = 0; t < p.rows[i].n_tokens; t++)
        for (int a = 0; a < 3; a++)
          if (p.rows[i].pos[a * p.rows[i].n_tokens + t] != p0 + (int32_t)t) {
            CHECK(0, "row %u position %u axis %d", i, t, a);
            t = p.rows[i].n_tokens;
            break;
          }
    }
    for (uint32_t i = 0; i < p.n_readouts; i++)
      CHECK(p.readouts[i].kind == PROTO_READOUT_HEAD && strcmp(p.readouts[i].head, "omnijev") == 0 &&
                p.readouts[i].n_ids == 2, "readout %u", i);
  }
  fam->ctx_free(ctx);
  proto_program_fini(&p);
  cm_diag_fini(&d);
}

int main(int argc, char **argv) {
  const char *name = "setup";
  if (argc != 3) {
    fprintf(stderr, "usage: %s compile.jsonl omnijev_tokenizer.json\n", argv[0]);
    return 2;
  }
  struct cm_diag d = {0};
  struct pp_tok *tok = NULL;
  if (pp_tok_load_file(argv[2], &tok, &d)) {
    fprintf(stderr, "tokenizer: %s\n", d.msg);
    return 1;
  }
  json_object *manifest = json_tokener_parse(
      "{\"omnijev\": {\"temperatures\": {\"noul\": 1.1991, \"choice\": 1.1199, \"score\": 1.1909},"
      " \"temperature\": 1.0, \"biases\": {\"noul\": 0.05310856608843584}, \"norm\": \"softmax\","
      " \"lm_feats\": true, \"ordinal\": true, \"branch\": true}}");
  struct pp_omnijev_model model;
  if (pp_omnijev_model_init(manifest, tok, &model, &d)) {
    fprintf(stderr, "model: %s\n", d.msg);
    return 1;
  }
  CHECK(model.ids.opt == 248077 && model.ids.opt_end == 248078 && model.ids.image_pad == 248056,
        "special ids %d %d %d", model.ids.opt, model.ids.opt_end, model.ids.image_pad);
  /* the adapter, on its state: the model load() builds (a struct pp_omnijev_model) */
  const struct pp_family *fam = pp_family_find("omnijev");
  CHECK(fam != NULL, "family omnijev not registered");
  FILE *f = fopen(argv[1], "r");
  if (!f) {
    perror(argv[1]);
    return 1;
  }
  char *line = NULL;
  size_t cap = 0, n_ok = 0, n_bad = 0;
  while (getline(&line, &cap, f) > 0) {
    json_object *c = json_tokener_parse(line);
    name = json_object_get_string(get(c, "name"));
    json_object *req = get(c, "request"), *err = get(c, "error");
    struct pp_omnijev_request *r = NULL;
    /* the strict parse the service runs first (integers outside 64 bits are refused there) */
    int rc = pp_json_check(line, strlen(line), &d);
    if (!rc)
      rc = pp_omnijev_compile(&model, req, &r, &d);
    if (err) {
      /* the strict parse saw the whole fixture line, whose body is its "request" */
      const char *msg = d.msg && strncmp(d.msg, "request.", 8) == 0 ? d.msg + 8 : d.msg;
      CHECK((rc == -CM_EREQUEST || rc == -CM_ELIMIT) && msg &&
                strncmp(msg, json_object_get_string(err),
                        (size_t)json_object_get_string_len(err)) == 0 &&
                strstr(msg, ": "), /* the message starts with its field's path */
            "want refusal \"%s\", got rc %d \"%s\"", json_object_get_string(err), rc,
            d.msg ? d.msg : "");
      n_bad++;
    } else {
      CHECK(rc == 0, "compile failed: %d %s", rc, d.msg ? d.msg : "");
      if (!rc) {
        check_ok(name, r, get(c, "expect"));
        if (fam)
          check_program(name, fam, &model, req, get(c, "expect"));
      }
      n_ok++;
    }
    cm_diag_fini(&d);
    pp_omnijev_request_free(r);
    json_object_put(c);
  }
  free(line);
  fclose(f);
  name = "summary";
  CHECK(n_ok >= 20 && n_bad >= 10, "only %zu accepted and %zu refused cases", n_ok, n_bad);
  json_object_put(manifest);
  pp_tok_free(tok);
  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("omnijev compile: %zu accepted and %zu refused requests match the oracle\n", n_ok, n_bad);
  return 0;
}
