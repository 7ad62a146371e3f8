/* Finish test of the JEMM family: for every case of tests/fixtures/jemm/finish.jsonl (written by
 * tests/oracle/jemm_finish.py with NumPy's logaddexp.reduce, the reference's own softmax) the body
 * is compiled, the fixture's BF16 label logits are finished, and the response must have the
 * oracle's bytes; where the last digit of a probability differs (NumPy's and glibc's exp/log1p may
 * differ by an ulp) the keys, order, strings and ties must still be identical and every number
 * within 1e-15. Usage comes from the render fixture, so input_tokens is set to the oracle's 0.
 * usage: test_jemm_finish FINISH.jsonl RENDER.jsonl TOKENIZER.json */
#include <math.h>
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

/* Same JSON shape, same keys in the same order, equal strings, numbers within 1e-15. */
static bool same(json_object *a, json_object *b) {
  json_type t = json_object_get_type(a);
  if (t == json_type_int || t == json_type_double) {
    json_type u = json_object_get_type(b);
    return (u == json_type_int || u == json_type_double) &&
           fabs(json_object_get_double(a) - json_object_get_double(b)) <= 1e-15;
  }
  if (t != json_object_get_type(b))
    return false;
  if (t == json_type_string)
    return strcmp(json_object_get_string(a), json_object_get_string(b)) == 0;
  if (t == json_type_array) {
    if (json_object_array_length(a) != json_object_array_length(b))
      return false;
    for (size_t i = 0; i < json_object_array_length(a); i++)
      if (!same(json_object_array_get_idx(a, i), json_object_array_get_idx(b, i)))
        return false;
    return true;
  }
  if (t == json_type_object) {
    struct json_object_iterator i = json_object_iter_begin(a), j = json_object_iter_begin(b),
                                ie = json_object_iter_end(a), je = json_object_iter_end(b);
    for (; !json_object_iter_equal(&i, &ie); json_object_iter_next(&i), json_object_iter_next(&j))
      if (json_object_iter_equal(&j, &je) ||
          strcmp(json_object_iter_peek_name(&i), json_object_iter_peek_name(&j)) != 0 ||
          !same(json_object_iter_peek_value(&i), json_object_iter_peek_value(&j)))
        return false;
    return json_object_iter_equal(&j, &je);
  }
  return json_object_get_boolean(a) == json_object_get_boolean(b);
}

/* Equal probabilities in the oracle stay equal here (BF16 ties). */
static bool ties_kept(json_object *got, json_object *want) {
  json_object *ga = get(got, "answers"), *wa = get(want, "answers");
  json_object_object_foreach(wa, qid, wq) {
    json_object *wp = get(wq, "probabilities"), *gp = get(get(ga, qid), "probabilities");
    json_object_object_foreach(wp, k1, v1) {
      json_object_object_foreach(wp, k2, v2) {
        bool weq = json_object_get_double(v1) == json_object_get_double(v2);
        bool geq = json_object_get_double(get(gp, k1)) == json_object_get_double(get(gp, k2));
        if (weq != geq)
          return false;
      }
    }
  }
  return true;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s FINISH.jsonl RENDER.jsonl TOKENIZER.json\n", argv[0]);
    return 2;
  }
  struct cm_diag d = {0};
  struct pp_tok *tok = NULL;
  if (pp_tok_load_file(argv[3], &tok, &d) != 0) {
    fprintf(stderr, "tokenizer: %s\n", d.msg);
    return 1;
  }
  FILE *rf = fopen(argv[2], "r"), *f = fopen(argv[1], "r");
  char *line = NULL;
  size_t cap = 0;
  if (!rf || !f || getline(&line, &cap, rf) <= 0)
    return 1;
  json_object *head = json_tokener_parse(line), *man = json_object_new_object(),
              *j = json_object_new_object(), *chat = json_object_new_object();
  fclose(rf);
  json_object_object_add(j, "model_id", json_object_new_string("JEMM"));
  json_object_object_add(j, "aliases", json_object_new_array());
  json_object_object_add(j, "temperature", json_object_new_double(1.3480874159655591));
  json_object_object_add(j, "mm_temperature", json_object_new_double(1.3954832341582943));
  json_object_object_add(j, "threshold", json_object_new_double(0.9872681877423998));
  json_object_object_add(j, "label_token_ids", json_object_get(get(head, "label_ids")));
  json_object_object_add(chat, "prefix", json_object_get(get(head, "prefix")));
  json_object_object_add(chat, "suffix", json_object_get(get(head, "suffix")));
  json_object_object_add(man, "jemm", j);
  json_object_object_add(man, "chat", chat);
  struct pp_jemm_model model = {0};
  if (pp_jemm_model_init(man, tok, &model, &d) != 0) {
    fprintf(stderr, "manifest: %s\n", d.msg);
    return 1;
  }
  int n_cases = 0, n_exact = 0, n_ok = 0;
  while (getline(&line, &cap, f) > 0) {
    json_object *c = json_tokener_parse(line), *root = NULL, *got = NULL, *want = NULL;
    struct pp_jemm_request *req = NULL;
    char *resp = NULL;
    size_t resp_n = 0;
    float *lg[64] = {0};
    cm_diag_fini(&d);
    n_cases++;
    const char *name = json_object_get_string(get(c, "name"));
    json_object *jb = get(c, "body"), *jl = get(c, "logits"), *jr = get(c, "response");
    int rc = pp_json_parse(json_object_get_string(jb), (size_t)json_object_get_string_len(jb),
                           &root, &d);
    if (!rc)
      rc = pp_jemm_compile(&model, root, &req, &d);
    CHECK(rc == 0, "%s: compile: %s", name, d.msg);
    CHECK(json_object_array_length(jl) == req->n_questions, "%s: logits per question", name);
    for (size_t q = 0; q < req->n_questions; q++) {
      json_object *s = json_object_array_get_idx(jl, q);
      lg[q] = calloc(json_object_array_length(s) + 1, sizeof(float));
      for (size_t i = 0; i < json_object_array_length(s); i++)
        lg[q][i] = (float)json_object_get_double(json_object_array_get_idx(s, i));
    }
    req->input_tokens = 0;
    rc = pp_jemm_finish(&model, req, (const float *const *)lg,
                        json_object_get_double(get(c, "latency_ms")), &resp, &resp_n, &d);
    CHECK(rc == 0, "%s: finish: %s", name, d.msg);
    if (resp_n == (size_t)json_object_get_string_len(jr) &&
        memcmp(resp, json_object_get_string(jr), resp_n) == 0) {
      n_exact++;
      n_ok++;
      goto next;
    }
    got = json_tokener_parse(resp);
    want = json_tokener_parse(json_object_get_string(jr));
    CHECK(got && same(got, want), "%s: response differs:\n got: %s\nwant: %s", name, resp,
          json_object_get_string(jr));
    CHECK(ties_kept(got, want), "%s: ties differ:\n got: %s\nwant: %s", name, resp,
          json_object_get_string(jr));
    n_ok++;
  next:
    for (size_t q = 0; q < 64; q++)
      free(lg[q]);
    free(resp);
    json_object_put(got);
    json_object_put(want);
    pp_jemm_request_free(req);
    json_object_put(root);
    json_object_put(c);
  }
  printf("%d/%d finish cases match (%d byte-exact)\n", n_ok, n_cases, n_exact);
  pp_jemm_model_fini(&model);
  json_object_put(man);
  json_object_put(head);
  pp_tok_free(tok);
  cm_diag_fini(&d);
  free(line);
  fclose(f);
  return fails || n_cases < 20 || n_exact < n_cases / 2 ? 1 : 0;
}
