/* libFuzzer target: request bodies through strict JSON, the Open-Jev compile (real Qwen3 tokenizer
 * from $S1_SHARED) and, when compiled, finish with deterministic scores. Nothing may crash or leak;
 * a compiled request must finish or fail with a code. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "open_jev.h"
#include "pp_json.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct pp_tok *tok;
static struct pp_open_jev_model model;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  const char *shared = getenv("S1_SHARED");
  char p[4096];
  snprintf(p, sizeof p, "%s/tokenizers/qwen3/tokenizer.json", shared ? shared : "../shared");
  struct cm_diag d = {0};
  json_object *m = json_tokener_parse(
      "{\"chat\": {\"prefix\": \"<|im_start|>user\\n\", \"suffix\": "
      "\"<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n\"}, \"open_jev\": "
      "{\"model_id\": \"m\", \"aliases\": [\"open-jev\"], \"temperature\": 2.5, "
      "\"max_length\": 512, \"metadata\": {\"checkpoint_sha256\": \"x\"}}}");
  if (pp_tok_load_file(p, &tok, &d) != 0 || pp_open_jev_model_init(m, tok, &model, &d) != 0) {
    fprintf(stderr, "fuzz init: %s (set S1_SHARED)\n", d.msg ? d.msg : "");
    abort();
  }
  json_object_put(m);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct cm_diag d = {0};
  json_object *body = NULL;
  struct pp_open_jev_request *req = NULL;
  if (size > 65536)
    return 0;
  if (pp_json_parse((const char *)data, size, &body, &d) == 0 &&
      pp_open_jev_compile(&model, body, true, &req, &d) == 0) {
    float *scores = malloc((req->n_seqs + 1) * sizeof *scores);
    for (size_t i = 0; i < req->n_seqs; i++)
      scores[i] = (float)((int)(i * 2654435761u % 17) - 8) * 0.75f;
    char *out = NULL;
    size_t n = 0;
    if (pp_open_jev_finish(&model, req, scores, 0.5, &out, &n, &d) == 0) {
      if (strlen(out) != n)
        abort();
      free(out);
    }
    free(scores);
  }
  pp_open_jev_request_free(req);
  json_object_put(body);
  cm_diag_fini(&d);
  return 0;
}
