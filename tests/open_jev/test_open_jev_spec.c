/* The golden examples of spec/open_jev.md (§3.6, §4.3, §12.1-12.4, from the port's contract.json
 * and tokenization.json generated with the reference): exact prompts, the 38 ids, every sequence
 * length with the Qwen3.5 tokenizer, and the calibrated answers' digits. The spec values are
 * written here as the spec gives them; nothing is computed by this file's own rules.
 * usage: test_open_jev_spec QWEN35_TOKENIZER.json */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "open_jev.h"
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

static const char *fixture[4] = {
    "{\"state\": \"A customer says: I was charged twice for one order. The service is working "
    "normally. There is no sign of unauthorized access.\", \"questions\": {\"route\": {\"type\": "
    "\"choice\", \"instructions\": \"Which team should handle this issue?\", \"criteria\": "
    "{\"billing\": \"Problems with charges, invoices, refunds or payments.\", \"security\": "
    "\"Unauthorized access or account compromise.\", \"technical\": \"Service unavailable or a "
    "software malfunction.\"}}, \"refund_review\": {\"type\": \"noul\", \"instructions\": \"Does "
    "this message describe a duplicate charge?\"}, \"urgency\": {\"type\": \"score\", "
    "\"instructions\": \"Assess the urgency using only the given evidence.\", \"criteria\": "
    "[\"Routine: no service disruption or active security compromise is reported.\", \"Urgent: an "
    "ongoing service disruption is reported.\", \"Critical: active unauthorized access is "
    "reported.\"]}}}",
    "{\"state\": {\"z\":[1.0,1e16,-0.0,true,null,\"\xe7\x8c\xab\"],\"a\":{\"\xce\xb2\":\"z\","
    "\"a\":\"first\"}}, \"questions\": {\"kept-id\": {\"type\": \"choice\", \"instructions\": "
    "{\"z\":1,\"a\":\"choose\"}, \"criteria\": {\"z-last\":null,\"a-first\":[\"A\",{\"z\":2,"
    "\"a\":1}]}}}}",
    "{\"state\": [\"caf\xc3\xa9\",{\"b\":false,\"a\":1e-05}], \"questions\": {\"score\": "
    "{\"type\": \"score\", \"instructions\": \"Rate.\", \"criteria\": [\"low\", \"middle\", "
    "\"high\"]}, \"binary\": {\"type\": \"noul\", \"instructions\": [\"Ready?\",{\"b\":2,\"a\":1}], "
    "\"criteria\": {\"true\":{\"z\":1,\"a\":\"yes\"},\"false\":[\"no\",\"later\"]}}}}",
    "{\"model\": \"open-jev-27b-v1.1\", \"state\": \"Anything\", \"questions\": {\"one\": "
    "{\"type\": \"choice\", \"instructions\": \"Pick\", \"criteria\": {\"only\": null}}, \"tie\": "
    "{\"type\": \"choice\", \"instructions\": \"Pick\", \"criteria\": {\"first\": \"first\", "
    "\"second\": \"second\"}}}}",
};

/* §12.2 sequence lengths */
static const size_t lengths[4][8] = {
    {80, 76, 77, 66, 82, 80, 78}, {91, 107}, {57, 57, 57, 92}, {38, 40, 40}};
static const size_t n_lengths[4] = {7, 2, 4, 3};
static const unsigned totals[4] = {539, 198, 263, 118};

/* §4.3 */
static const int32_t ids38[38] = {248045, 846,   198,   1905,  25,    198,    74660, 271,
                                  14162,  25,    19123, 198,   1941,  18988,  4087,  25,
                                  1132,   198,   3742,  411,   10660, 4087,   4252,  30,
                                  21134,  7179,  466,   2233,  13,    248046, 198,   248045,
                                  74455,  198,   248068, 271,   248069, 271};

/* §12.1 prompts not already spelled out by fixture 1's plain text */
static const char *const prompts2[2] = {
    "Context:\n{\"a\": {\"a\": \"first\", \"\xce\xb2\": \"z\"}, \"z\": [1.0, 1e+16, -0.0, true, "
    "null, \"\xe7\x8c\xab\"]}\n\nQuestion: {\"a\": \"choose\", \"z\": 1}\nProposed answer: "
    "z-last\nIs this proposed answer correct? Answer Yes or No.",
    "Context:\n{\"a\": {\"a\": \"first\", \"\xce\xb2\": \"z\"}, \"z\": [1.0, 1e+16, -0.0, true, "
    "null, \"\xe7\x8c\xab\"]}\n\nQuestion: {\"a\": \"choose\", \"z\": 1}\nProposed answer: "
    "a-first: [\"A\", {\"a\": 1, \"z\": 2}]\nIs this proposed answer correct? Answer Yes or No."};
static const char *const prompt3_low =
    "Context:\n[\"caf\xc3\xa9\", {\"a\": 1e-05, \"b\": false}]\n\nQuestion: Rate.\nProposed "
    "answer: low\nIs this proposed answer correct? Answer Yes or No.";
static const char *const prompt3_noul =
    "Context:\n[\"caf\xc3\xa9\", {\"a\": 1e-05, \"b\": false}]\n\nQuestion: [\"Ready?\", {\"a\": "
    "1, \"b\": 2}]\nYes means: {\"a\": \"yes\", \"z\": 1}\nNo means: [\"no\", \"later\"]\nIs the "
    "answer to this question yes? Answer Yes or No.";
static const char *const prompt4 = "Context:\nAnything\n\nQuestion: Pick\nProposed answer: "
                                   "only\nIs this proposed answer correct? Answer Yes or No.";

/* §12.1 / §2.4 answers for the synthetic logits */
static const float logits[4][8] = {
    {-2, -1, 0, 1, -2, -1, 0}, {-2, -1}, {-2, -1, 0, 1}, {0, 0, 0}};
static const char *const answers[4] = {
    "{\"answers\": {\"route\": {\"type\": \"choice\", \"choice\": \"technical\", \"probabilities\": "
    "{\"billing\": 0.21343437444688138, \"security\": 0.3166841593736535, \"technical\": "
    "0.4698814661794651}, \"confidence\": 0.20482219926919762}, \"refund_review\": {\"type\": "
    "\"noul\", \"noul\": 0.5973836777434065}, \"urgency\": {\"type\": \"score\", \"score\": "
    "1.2564470917325836, \"probabilities\": {\"0\": 0.21343437444688138, \"1\": "
    "0.3166841593736535, \"2\": 0.4698814661794651}, \"confidence\": 0.0, \"legend\": {\"0\": "
    "\"Routine: no service disruption or active security compromise is reported.\", \"1\": "
    "\"Urgent: an ongoing service disruption is reported.\", \"2\": \"Critical: active "
    "unauthorized access is reported.\"}}}, \"model\": \"Qwen/Qwen3.8-27B\", \"usage\": "
    "{\"input_tokens\": 539, \"output_tokens\": 0}, ",
    "{\"answers\": {\"kept-id\": {\"type\": \"choice\", \"choice\": \"a-first\", "
    "\"probabilities\": {\"z-last\": 0.4026163222565936, \"a-first\": 0.5973836777434065}, "
    "\"confidence\": 0.194767355486813}}, ",
    "{\"answers\": {\"score\": {\"type\": \"score\", \"score\": 1.2564470917325836, "
    "\"probabilities\": {\"0\": 0.21343437444688138, \"1\": 0.3166841593736535, \"2\": "
    "0.4698814661794651}, \"confidence\": 0.0, \"legend\": {\"0\": \"low\", \"1\": \"middle\", "
    "\"2\": \"high\"}}, \"binary\": {\"type\": \"noul\", \"noul\": 0.5973836777434065}}, ",
    "{\"answers\": {\"one\": {\"type\": \"choice\", \"choice\": \"only\", \"probabilities\": "
    "{\"only\": 1.0}, \"confidence\": 1.0}, \"tie\": {\"type\": \"choice\", \"choice\": \"first\", "
    "\"probabilities\": {\"first\": 0.5, \"second\": 0.5}, \"confidence\": 0.0}}, "};

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s QWEN35_TOKENIZER.json\n", argv[0]);
    return 2;
  }
  struct cm_diag d = {0};
  struct pp_tok *tok = NULL;
  if (pp_tok_load_file(argv[1], &tok, &d) != 0) {
    fprintf(stderr, "tokenizer: %s\n", d.msg);
    return 1;
  }
  json_object *manifest = json_tokener_parse(
      "{\"chat\": {\"prefix\": \"<|im_start|>user\\n\", \"suffix\": "
      "\"<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n\"}, \"open_jev\": "
      "{\"model_id\": \"Qwen/Qwen3.8-27B\", \"aliases\": [\"open-jev\", \"jev-latest\", "
      "\"open-jev-27b-v1.1\"], \"temperature\": 2.5343690298472983, \"max_length\": 4096, "
      "\"metadata\": {}}}");
  struct pp_open_jev_model m;
  if (pp_open_jev_model_init(manifest, tok, &m, &d) != 0) {
    fprintf(stderr, "model: %s\n", d.msg);
    return 1;
  }
  for (int f = 0; f < 4; f++) {
    json_object *body = NULL;
    struct pp_open_jev_request *r = NULL;
    char *resp = NULL;
    size_t resp_n = 0;
    cm_diag_fini(&d);
    if (pp_json_parse(fixture[f], strlen(fixture[f]), &body, &d) != 0 ||
        pp_open_jev_compile(&m, body, true, &r, &d) != 0) {
      EXPECT(0, "fixture %d: %s", f + 1, d.msg);
      json_object_put(body);
      continue;
    }
    EXPECT(r->n_seqs == n_lengths[f], "fixture %d: %zu sequences", f + 1, r->n_seqs);
    for (size_t s = 0; s < r->n_seqs && s < n_lengths[f]; s++) {
      size_t n = r->seq_off[s + 1] - r->seq_off[s];
      EXPECT(n == lengths[f][s], "fixture %d seq %zu: %zu tokens, spec %zu", f + 1, s, n,
             lengths[f][s]);
      EXPECT(r->ids[r->seq_off[s + 1] - 1] == 271, "fixture %d seq %zu: last id %d", f + 1, s,
             r->ids[r->seq_off[s + 1] - 1]);
    }
    EXPECT(r->seq_off[r->n_seqs] == totals[f], "fixture %d: %zu tokens", f + 1,
           r->seq_off[r->n_seqs]);
    if (f == 1)
      for (int s = 0; s < 2; s++)
        EXPECT(strcmp(r->prompts[s], prompts2[s]) == 0, "fixture 2 prompt %d: %s", s,
               r->prompts[s]);
    if (f == 2) {
      EXPECT(strcmp(r->prompts[0], prompt3_low) == 0, "fixture 3 prompt 0: %s", r->prompts[0]);
      EXPECT(strcmp(r->prompts[3], prompt3_noul) == 0, "fixture 3 noul: %s", r->prompts[3]);
    }
    if (f == 3) {
      EXPECT(strcmp(r->prompts[0], prompt4) == 0, "fixture 4 prompt 0: %s", r->prompts[0]);
      EXPECT(r->seq_off[1] == 38 && memcmp(r->ids, ids38, sizeof ids38) == 0,
             "fixture 4: the 38 ids of spec §4.3 differ");
    }
    if (pp_open_jev_finish(&m, r, logits[f], 0.31, &resp, &resp_n, &d) != 0)
      EXPECT(0, "fixture %d finish: %s", f + 1, d.msg);
    else
      EXPECT(strncmp(resp, answers[f], strlen(answers[f])) == 0, "fixture %d answers:\n%s",
             f + 1, resp);
    free(resp);
    pp_open_jev_request_free(r);
    json_object_put(body);
  }
  /* §6.3 / O8: the noul row is [0, s]: s = 1 equals the fixture's [-2, -1] */
  double row[2] = {0.0, 1.0}, p[2];
  EXPECT(pp_open_jev_softmax(row, 2, m.temperature, p, &d) == 0 && p[1] == 0.5973836777434065,
         "noul p(true) %.17g", p[1]);
  /* §7 checks of the formatter */
  double bad[2] = {0.0, INFINITY};
  cm_diag_fini(&d);
  EXPECT(pp_open_jev_softmax(bad, 2, m.temperature, p, &d) != 0 &&
             strcmp(d.msg, "probabilities must be finite and in [0, 1]") == 0,
         "infinite logit accepted");
  cm_diag_fini(&d);
  pp_open_jev_model_fini(&m);
  json_object_put(manifest);
  pp_tok_free(tok);
  if (!fails)
    printf("spec goldens match\n");
  return fails ? 1 : 0;
}
