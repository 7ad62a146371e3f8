/* Contract test of the Open-Jev family: for every case of tests/fixtures/open_jev/contract.jsonl
 * (written by tests/oracle/open_jev_contract.py from the reference rules) the raw body goes through
 * the strict parser, compile and finish, and the prompts, token ids, response bytes, or the error
 * status, type and message must equal the fixture exactly (a 422's message is the fixture's
 * "field", ": ", then its "message", the reference's wording).
 * usage: test_open_jev_contract CONTRACT.jsonl TOKENIZER.json */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "open_jev.h"
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

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s CONTRACT.jsonl TOKENIZER.json\n", argv[0]);
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
  ssize_t len;
  struct pp_open_jev_model model = {0};
  int n_cases = 0, n_ok = 0;
  if ((len = getline(&line, &cap, f)) <= 0)
    return 1;
  json_object *head = json_tokener_parse(line);
  if (pp_open_jev_model_init(get(head, "manifest"), tok, &model, &d) != 0) {
    fprintf(stderr, "manifest: %s\n", d.msg);
    return 1;
  }
  int64_t default_max = model.max_length;
  while ((len = getline(&line, &cap, f)) > 0) {
    json_object *c = json_tokener_parse(line), *root = NULL;
    struct pp_open_jev_request *req = NULL;
    char *resp = NULL;
    float *scores = NULL;
    size_t resp_n = 0;
    cm_diag_fini(&d);
    const char *name = json_object_get_string(get(c, "name"));
    int want_status = json_object_get_int(get(c, "status"));
    json_object *jml = get(c, "max_length");
    model.max_length = jml ? json_object_get_int64(jml) : default_max;
    n_cases++;
    json_object *jbody = get(c, "body");
    int rc = pp_json_parse(json_object_get_string(jbody),
                                  (size_t)json_object_get_string_len(jbody), &root, &d);
    if (!rc)
      rc = pp_open_jev_compile(&model, root, true, &req, &d);
    if (!rc && want_status == 200) {
      json_object *jp = get(c, "prompts"), *ji = get(c, "ids");
      CHECK(req->n_seqs == json_object_array_length(jp), "%s: %zu sequences, want %zu", name,
            req->n_seqs, json_object_array_length(jp));
      for (size_t s = 0; s < req->n_seqs; s++) {
        json_object *p = json_object_array_get_idx(jp, s);
        CHECK(strlen(req->prompts[s]) == (size_t)json_object_get_string_len(p) &&
                  strcmp(req->prompts[s], json_object_get_string(p)) == 0,
              "%s: prompt %zu differs:\n got: %s\nwant: %s", name, s, req->prompts[s],
              json_object_get_string(p));
        json_object *want = json_object_array_get_idx(ji, s);
        size_t n = req->seq_off[s + 1] - req->seq_off[s];
        CHECK(n == json_object_array_length(want), "%s: sequence %zu has %zu ids, want %zu", name,
              s, n, json_object_array_length(want));
        for (size_t k = 0; k < n; k++)
          CHECK(req->ids[req->seq_off[s] + k] ==
                    json_object_get_int(json_object_array_get_idx(want, k)),
                "%s: sequence %zu id %zu: %d, want %d", name, s, k, req->ids[req->seq_off[s] + k],
                json_object_get_int(json_object_array_get_idx(want, k)));
      }
    }
    if (!rc) {
      json_object *js = get(c, "scores");
      size_t ns = js ? json_object_array_length(js) : 0;
      CHECK(ns == req->n_seqs, "%s: fixture has %zu scores for %zu sequences", name, ns,
            req->n_seqs);
      scores = calloc(ns + 1, sizeof *scores);
      for (size_t s = 0; s < ns; s++) {
        json_object *v = json_object_array_get_idx(js, s);
        scores[s] = json_object_is_type(v, json_type_string) ? NAN : (float)json_object_get_double(v);
      }
      rc = pp_open_jev_finish(&model, req, scores, 0.125, &resp, &resp_n, &d);
    }
    if (rc) {
      const char *type = NULL;
      int st = cm_error_http(rc, &type);
      json_object *jm = get(c, "message");
      CHECK(st == want_status, "%s: status %d (%s), want %d", name, st, d.msg ? d.msg : "",
            want_status);
      CHECK(type && strcmp(type, json_object_get_string(get(c, "error_type"))) == 0,
            "%s: type %s", name, type ? type : "(none)");
      /* a 422 names its field, then the reference's words: "FIELD: MESSAGE", exactly */
      json_object *jf = get(c, "field");
      CHECK(want_status != 422 || (jm && jf), "%s: a 422 case without message and field", name);
      char want[4096] = "";
      if (jm)
        snprintf(want, sizeof want, "%s%s%s", jf ? json_object_get_string(jf) : "", jf ? ": " : "",
                 json_object_get_string(jm));
      CHECK(!jm || (d.msg && strcmp(d.msg, want) == 0), "%s: message \"%s\", want \"%s\"", name,
            d.msg ? d.msg : "", want);
    } else {
      json_object *jr = get(c, "response");
      CHECK(want_status == 200, "%s: answered, want status %d", name, want_status);
      CHECK(resp_n == (size_t)json_object_get_string_len(jr) &&
                memcmp(resp, json_object_get_string(jr), resp_n) == 0,
            "%s: response differs:\n got: %s\nwant: %s", name, resp, json_object_get_string(jr));
    }
    n_ok++;
  next:
    free(resp);
    free(scores);
    pp_open_jev_request_free(req);
    json_object_put(root);
    json_object_put(c);
  }
  printf("%d/%d contract cases match\n", n_ok, n_cases);
  cm_diag_fini(&d);
  pp_open_jev_model_fini(&model);
  json_object_put(head);
  pp_tok_free(tok);
  free(line);
  fclose(f);
  return fails || n_cases < 25 ? 1 : 0;
}
