/* The request-size limits of the Open-Jev compile on generated bodies too large for fixtures:
 * exactly 65,536 candidate sequences pass and 65,537 fail with the reference message; the prompt
 * bytes and total tokens bounds of s1serve refuse before work they could not afford.
 * usage: test_open_jev_limits TOKENIZER.json */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "open_jev.h"
#include "pp_json.h"
#include "pp_pyjson.h"

static int fails;

#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                              \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      fails++;                                                                                     \
    }                                                                                              \
  } while (0)

/* {"state": STATE, "questions": {q0: choice of n_opts options, ...} + n_noul noul questions} */
static char *body(const char *state_word, size_t state_reps, size_t n_choice, size_t n_opts,
                  size_t n_noul) {
  struct pp_buf b = {0};
  pp_buf_puts(&b, "{\"state\": \"");
  for (size_t i = 0; i < state_reps; i++)
    pp_buf_puts(&b, state_word);
  pp_buf_puts(&b, "\", \"questions\": {");
  char tmp[64];
  for (size_t q = 0; q < n_choice + n_noul; q++) {
    snprintf(tmp, sizeof tmp, "%s\"q%zu\": ", q ? ", " : "", q);
    pp_buf_puts(&b, tmp);
    if (q >= n_choice) {
      pp_buf_puts(&b, "{\"type\": \"noul\", \"instructions\": \"ok?\"}");
      continue;
    }
    pp_buf_puts(&b, "{\"type\": \"choice\", \"instructions\": \"Pick\", \"criteria\": {");
    for (size_t o = 0; o < n_opts; o++) {
      snprintf(tmp, sizeof tmp, "%s\"o%zu\": null", o ? ", " : "", o);
      pp_buf_puts(&b, tmp);
    }
    pp_buf_puts(&b, "}}");
  }
  pp_buf_puts(&b, "}}");
  return b.bytes;
}

static int compile(struct pp_open_jev_model *m, char *text, struct pp_open_jev_request **req,
                   struct cm_diag *d) {
  json_object *root = NULL;
  cm_diag_fini(d);
  int rc = pp_json_parse(text, strlen(text), &root, d);
  if (!rc)
    rc = pp_open_jev_compile(m, root, false, req, d);
  json_object_put(root);
  free(text);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 2)
    return 2;
  struct cm_diag d = {0};
  struct pp_tok *tok = NULL;
  if (pp_tok_load_file(argv[1], &tok, &d) != 0)
    return 1;
  json_object *man = json_tokener_parse(
      "{\"chat\": {\"prefix\": \"<|im_start|>user\\n\", \"suffix\": "
      "\"<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n\"}, \"open_jev\": "
      "{\"model_id\": \"m\", \"aliases\": [], \"temperature\": 2.0, \"max_length\": 16384, "
      "\"metadata\": {}}}");
  struct pp_open_jev_model m;
  if (pp_open_jev_model_init(man, tok, &m, &d) != 0)
    return 1;
  struct pp_open_jev_request *req = NULL;
  /* 257 x 255 + 1 = 65,536 sequences: accepted */
  int rc = compile(&m, body("s", 1, 257, 255, 1), &req, &d);
  EXPECT(rc == 0 && req->n_seqs == 65536, "65,536 sequences: rc %d %s", rc, d.msg ? d.msg : "");
  pp_open_jev_request_free(req);
  req = NULL;
  rc = compile(&m, body("s", 1, 257, 255, 2), &req, &d);
  EXPECT(rc == -CM_ELIMIT && strcmp(d.msg, "questions: request exceeds the candidate limit") == 0,
         "65,537 sequences: rc %d %s", rc, d.msg ? d.msg : "");
  /* 9 prompts of a 3.9 MB state: over the 32 MiB of prompt text, refused before tokenizing */
  rc = compile(&m, body("abcdefghijklm ", 280000, 1, 9, 0), &req, &d);
  EXPECT(rc == -CM_ELIMIT && strncmp(d.msg, "questions: request prompts exceed", 33) == 0, "prompt bytes: rc %d %s", rc,
         d.msg ? d.msg : "");
  /* 264 sequences of about 16,000 tokens: each within max_length, together over 4,194,304 */
  rc = compile(&m, body(" word", 16000, 1, 255, 9), &req, &d);
  EXPECT(rc == -CM_ELIMIT && strncmp(d.msg, "questions: request has ", 23) == 0 &&
             strstr(d.msg, "tokens over all sequences"), "total tokens: rc %d %s",
         rc, d.msg ? d.msg : "");
  pp_open_jev_request_free(req);
  pp_open_jev_model_fini(&m);
  json_object_put(man);
  pp_tok_free(tok);
  cm_diag_fini(&d);
  if (!fails)
    printf("open_jev limits hold\n");
  return fails ? 1 : 0;
}
