/* Rendering test of the JEMM family: every case of tests/fixtures/jemm/render.jsonl (written by
 * tests/oracle/jemm_render.py from the reference rules, ids from the `tokenizers` library) goes
 * through the strict parser and compile; the user messages, prompt ids, usage, shared prefix and
 * image positions, the program built from them, or the error (422 and the reference's detail
 * text) must equal the fixture.
 * usage: test_jemm_render RENDER.jsonl TOKENIZER.json */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jemm.h"
#include "pp_json.h"

static int fails;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      fails++;                                                                                     \
      goto next;                                                                                   \
    }                                                                                              \
  } while (0)

static json_object *get(json_object *o, const char *k) {
  json_object *v = NULL;
  json_object_object_get_ex(o, k, &v);
  return v;
}

static int32_t at(json_object *a, size_t i) {
  return json_object_get_int(json_object_array_get_idx(a, i));
}

/* A manifest as s1-export writes it, from the fixture's first line. */
static json_object *manifest(json_object *head) {
  json_object *m = json_object_new_object(), *j = json_object_new_object(),
              *c = json_object_new_object(), *al = json_object_new_array();
  json_object_object_add(j, "model_id", json_object_new_string("JEMM"));
  json_object_array_add(al, json_object_new_string("jemm"));
  json_object_object_add(j, "aliases", al);
  json_object_object_add(j, "temperature", json_object_new_double(1.3480874159655591));
  json_object_object_add(j, "mm_temperature", json_object_new_double(1.3954832341582943));
  json_object_object_add(j, "threshold", json_object_new_double(0.9872681877423998));
  json_object_object_add(j, "label_token_ids", json_object_get(get(head, "label_ids")));
  json_object_object_add(c, "prefix", json_object_get(get(head, "prefix")));
  json_object_object_add(c, "suffix", json_object_get(get(head, "suffix")));
  json_object_object_add(m, "jemm", j);
  json_object_object_add(m, "chat", c);
  return m;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s RENDER.jsonl TOKENIZER.json\n", argv[0]);
    return 2;
  }
  struct cm_diag d = {0};
  struct pp_tok *tok = NULL;
  if (pp_tok_load_file(argv[2], &tok, &d) != 0) {
    fprintf(stderr, "tokenizer: %s\n", d.msg);
    return 1;
  }
  FILE *f = fopen(argv[1], "r");
  if (!f) {
    perror(argv[1]);
    return 1;
  }
  char *line = NULL;
  size_t cap = 0;
  struct pp_jemm_model model = {0};
  int n_cases = 0, n_ok = 0, n_images = 0, n_errors = 0;
  if (getline(&line, &cap, f) <= 0)
    return 1;
  json_object *head = json_tokener_parse(line), *man = manifest(head);
  if (pp_jemm_model_init(man, tok, &model, &d) != 0) {
    fprintf(stderr, "manifest: %s\n", d.msg);
    return 1;
  }
  while (getline(&line, &cap, f) > 0) {
    json_object *c = json_tokener_parse(line), *root = NULL;
    struct pp_jemm_request *req = NULL;
    struct proto_program prog = {0};
    cm_diag_fini(&d);
    const char *name = json_object_get_string(get(c, "name"));
    json_object *jbody = get(c, "body"), *jerr = get(c, "error");
    n_cases++;
    int rc = pp_json_parse(json_object_get_string(jbody), (size_t)json_object_get_string_len(jbody),
                           &root, &d);
    CHECK(rc == 0, "%s: strict parse: %s", name, d.msg);
    rc = pp_jemm_compile(&model, root, &req, &d);
    if (jerr) {
      const char *type = NULL;
      CHECK(rc != 0, "%s: compiled, want error \"%s\"", name, json_object_get_string(jerr));
      CHECK(cm_error_http(rc, &type) == 422, "%s: status %d for \"%s\"", name,
            cm_error_http(rc, NULL), d.msg);
      CHECK(d.msg && strstr(d.msg, json_object_get_string(jerr)),
            "%s: message \"%s\", want "
            "one containing \"%s\"",
            name, d.msg, json_object_get_string(jerr));
      n_errors++;
      n_ok++;
      goto next;
    }
    CHECK(rc == 0, "%s: %s", name, d.msg);
    json_object *jp = get(c, "prompts");
    CHECK(req->n_questions == json_object_array_length(jp), "%s: %zu questions", name,
          req->n_questions);
    CHECK(req->input_tokens == (uint64_t)json_object_get_int64(get(c, "input_tokens")),
          "%s: input_tokens %llu", name, (unsigned long long)req->input_tokens);
    CHECK(req->prefix_len == (size_t)json_object_get_int64(get(c, "prefix_len")),
          "%s: prefix_len %zu, want %d", name, req->prefix_len,
          json_object_get_int(get(c, "prefix_len")));
    json_object *jg = get(c, "grids");
    CHECK(req->n_images == json_object_array_length(jg), "%s: %zu images", name, req->n_images);
    for (size_t i = 0; i < req->n_images; i++)
      for (size_t a = 0; a < 3; a++)
        CHECK(req->images[i].grid_thw[a] == at(json_object_array_get_idx(jg, i), a),
              "%s: image %zu grid axis %zu: %d", name, i, a, req->images[i].grid_thw[a]);
    n_images += req->n_images > 0;
    for (size_t q = 0; q < req->n_questions; q++) {
      const struct pp_jemm_question *x = &req->questions[q];
      json_object *p = json_object_array_get_idx(jp, q), *ju = get(p, "user"), *ji = get(p, "ids");
      CHECK(strcmp(x->id, json_object_get_string(get(p, "id"))) == 0, "%s: question %zu id %s",
            name, q, x->id);
      CHECK(x->user_len == (size_t)json_object_get_string_len(ju) &&
                memcmp(x->user, json_object_get_string(ju), x->user_len) == 0,
            "%s: user text of %s differs:\n got: %s\nwant: %s", name, x->id, x->user,
            json_object_get_string(ju));
      CHECK(x->n_candidates == (size_t)json_object_get_int(get(p, "n_candidates")),
            "%s: %zu candidates", name, x->n_candidates);
      CHECK(x->n_ids == json_object_array_length(ji), "%s: %s has %zu ids, want %zu", name, x->id,
            x->n_ids, json_object_array_length(ji));
      for (size_t k = 0; k < x->n_ids; k++)
        CHECK(x->ids[k] == at(ji, k), "%s: %s id %zu: %d, want %d", name, x->id, k, x->ids[k],
              at(ji, k));
    }
    /* the program: images, one prefix, one row per question, its readout */
    CHECK(pp_jemm_program(&model, req, &prog) == 0, "%s: program", name);
    CHECK(proto_program_check(&prog, &d) == 0, "%s: program check: %s", name, d.msg);
    CHECK(prog.n_images == req->n_images && prog.n_prefixes == 1 &&
              prog.n_rows == req->n_questions && prog.n_readouts == req->n_questions,
          "%s: program shape", name);
    CHECK(prog.prefixes[0].n_tokens == req->prefix_len && prog.prefixes[0].parent == -1 &&
              prog.prefixes[0].n_images == req->n_images,
          "%s: prefix shape", name);
    for (size_t q = 0; q < req->n_questions; q++) {
      json_object *p = json_object_array_get_idx(jp, q), *ji = get(p, "ids"),
                  *jpos = get(p, "positions");
      const struct proto_row *row = &prog.rows[q];
      const struct proto_readout *ro = &prog.readouts[q];
      size_t n = json_object_array_length(ji), k = req->prefix_len;
      CHECK(row->prefix == 0 && row->n_tokens == n - k, "%s: row %zu shape", name, q);
      for (size_t t = 0; t < n; t++) {
        int32_t id = t < k ? prog.prefixes[0].ids[t] : row->ids[t - k];
        CHECK(id == at(ji, t), "%s: program id %zu of question %zu", name, t, q);
        for (size_t a = 0; a < 3; a++) {
          int32_t pos = t < k ? prog.prefixes[0].pos[a * k + t] : row->pos[a * (n - k) + t - k];
          int32_t want = jpos ? at(json_object_array_get_idx(jpos, a), t) : (int32_t)t;
          CHECK(pos == want, "%s: question %zu position %zu axis %zu: %d, want %d", name, q, t, a,
                pos, want);
        }
      }
      CHECK(ro->kind == PROTO_READOUT_LABEL_LOGITS && ro->row == q && ro->position == -1 &&
                ro->n_ids == req->questions[q].n_candidates,
            "%s: readout %zu", name, q);
      for (size_t j = 0; j < ro->n_ids; j++)
        CHECK(ro->ids[j] == at(get(head, "label_ids"), j), "%s: readout id %zu", name, j);
    }
    n_ok++;
  next:
    proto_program_fini(&prog);
    pp_jemm_request_free(req);
    json_object_put(root);
    json_object_put(c);
  }
  printf("%d/%d render cases match (%d errors, %d with images)\n", n_ok, n_cases, n_errors,
         n_images);
  cm_diag_fini(&d);
  pp_jemm_model_fini(&model);
  json_object_put(man);
  json_object_put(head);
  pp_tok_free(tok);
  free(line);
  fclose(f);
  return fails || n_cases < 30 || n_images < 4 ? 1 : 0;
}
