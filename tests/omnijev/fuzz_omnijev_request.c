/* libFuzzer target: request bodies through strict JSON, the OmniJev compile (the real Qwen3
 * tokenizer from $S1_SHARED with <|opt|> / <|/opt|> added in memory, as the export adds them),
 * the adapter's program check, and finish with deterministic head outputs. Nothing may crash or
 * leak; a compiled request must give a structurally valid program and finish. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnijev.h"
#include "pp_json.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct pp_tok *tok;
static struct pp_omnijev_model model;

static json_object *added(int64_t id, const char *content) {
  json_object *t = json_object_new_object();
  json_object_object_add(t, "id", json_object_new_int64(id));
  json_object_object_add(t, "content", json_object_new_string(content));
  json_object_object_add(t, "single_word", json_object_new_boolean(0));
  json_object_object_add(t, "lstrip", json_object_new_boolean(0));
  json_object_object_add(t, "rstrip", json_object_new_boolean(0));
  json_object_object_add(t, "normalized", json_object_new_boolean(0));
  json_object_object_add(t, "special", json_object_new_boolean(1));
  return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *shared = getenv("S1_SHARED");
  char p[4096];
  snprintf(p, sizeof p, "%s/tokenizers/qwen3/tokenizer.json", shared ? shared : "../shared");
  struct cm_diag d = {0};
  struct pp_tok *base = NULL;
  json_object *j = json_object_from_file(p), *arr = NULL;
  if (!j || pp_tok_load_file(p, &base, &d) || !json_object_object_get_ex(j, "added_tokens", &arr)) {
    fprintf(stderr, "fuzz init: %s (set S1_SHARED)\n", d.msg ? d.msg : p);
    abort();
  }
  int64_t n = (int64_t)pp_tok_vocab_size(base, true);
  pp_tok_free(base);
  json_object_array_add(arr, added(n, "<|opt|>"));
  json_object_array_add(arr, added(n + 1, "<|/opt|>"));
  const char *s = json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN);
  json_object *m = json_tokener_parse(
      "{\"omnijev\": {\"temperatures\": {\"noul\": 1.1991, \"choice\": 1.1199, \"score\": 1.1909},"
      " \"biases\": {\"noul\": 0.05310856608843584}, \"norm\": \"softmax\", \"lm_feats\": true,"
      " \"ordinal\": true, \"branch\": true}}");
  if (pp_tok_load_buffer(s, strlen(s), &tok, &d) || pp_omnijev_model_init(m, tok, &model, &d)) {
    fprintf(stderr, "fuzz init: %s\n", d.msg ? d.msg : "");
    abort();
  }
  json_object_put(j);
  json_object_put(m);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct cm_diag d = {0};
  json_object *body = NULL;
  struct pp_omnijev_request *req = NULL;
  if (size > 65536)
    return 0;
  if (pp_json_parse((const char *)data, size, &body, &d) == 0 &&
      pp_omnijev_compile(&model, body, &req, &d) == 0) {
    const float **mu = calloc(req->n_questions + 1, sizeof *mu);
    float *vals = malloc((PP_OMNIJEV_MAX_ROWS + 1) * sizeof *vals);
    for (size_t i = 0; i <= PP_OMNIJEV_MAX_ROWS; i++)
      vals[i] = (float)((i * 2654435761u) % 1000) / 4000.0f;
    for (size_t i = 0; i < req->n_questions; i++)
      mu[i] = vals;
    if (req->input_tokens != req->n_prefix + req->row_off[req->n_rows])
      abort();
    char *out = NULL;
    size_t n = 0;
    if (pp_omnijev_finish(&model, req, mu, 0.5, &out, &n, &d) == 0) {
      if (strlen(out) != n)
        abort();
      free(out);
    }
    free(mu);
    free(vals);
  }
  pp_omnijev_request_free(req);
  json_object_put(body);
  cm_diag_fini(&d);
  return 0;
}
