/* Unit tests of the JEMM family against the spec's own vectors (spec/jemm.md §12): softmax and
 * temperature arithmetic (J4, J5, J7), label ids and the readout token (J8), the question cap
 * (J12), the whitespace and printable sets (§3.6-3.7), integer and tool-spec edge cases (J11,
 * §11 item 3: what this implementation refuses), and manifest checks.
 * usage: test_jemm_unit TOKENIZER.json (the Qwen3 tokenizer: byte-level labels, "\n\n" = 271) */
#include <math.h>
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

#define T_TEXT 1.3480874159655591
#define T_IMAGE 1.3954832341582943
#define PREFIX "<|im_start|>system\n" PP_JEMM_SYSTEM "<|im_end|>\n<|im_start|>user\n"
#define SUFFIX "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"

static const int32_t spec_labels[32] = {32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42,
                                        43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53,
                                        54, 55, 56, 57, 15, 16, 17, 18, 19, 20};

static json_object *manifest(const int32_t *labels, const char *suffix) {
  json_object *m = json_object_new_object(), *j = json_object_new_object(),
              *c = json_object_new_object(), *l = json_object_new_array();
  for (int i = 0; i < 32; i++)
    json_object_array_add(l, json_object_new_int(labels[i]));
  json_object_object_add(j, "model_id", json_object_new_string("JEMM"));
  json_object_object_add(j, "aliases", json_object_new_array());
  json_object_object_add(j, "temperature", json_object_new_double(T_TEXT));
  json_object_object_add(j, "mm_temperature", json_object_new_double(T_IMAGE));
  json_object_object_add(j, "threshold", json_object_new_double(0.9872681877423998));
  json_object_object_add(j, "label_token_ids", l);
  json_object_object_add(c, "prefix", json_object_new_string(PREFIX));
  json_object_object_add(c, "suffix", json_object_new_string(suffix));
  json_object_object_add(m, "jemm", j);
  json_object_object_add(m, "chat", c);
  return m;
}

static void softmax_vectors(void) {
  double s1[2] = {20.0, 19.875}, p[3];
  pp_jemm_softmax(s1, 2, T_TEXT, p);
  EXPECT(fabs(p[0] - 0.52316439493162) < 1e-12 && fabs(p[1] - 0.47683560506838) < 1e-12,
         "J7 text: %.17g %.17g", p[0], p[1]);
  pp_jemm_softmax(s1, 2, T_IMAGE, p);
  EXPECT(fabs(p[0] - 0.52237871521701) < 1e-12 && fabs(p[1] - 0.47762128478299) < 1e-12,
         "J7 image: %.17g %.17g", p[0], p[1]);
  double s2[3] = {10, 12, 11.5};
  pp_jemm_softmax(s2, 3, T_TEXT, p);
  EXPECT(fabs(p[0] - 0.1183258399187617) < 1e-12 && fabs(p[1] - 0.5216649330299962) < 1e-12 &&
             fabs(p[2] - 0.3600092270512416) < 1e-12,
         "J7 three: %.17g %.17g %.17g", p[0], p[1], p[2]);
  double s3[3] = {0, 0, 0};
  pp_jemm_softmax(s3, 3, T_TEXT, p);
  EXPECT(fabs(p[0] - 1.0 / 3) < 1e-12 && p[0] == p[1] && p[1] == p[2], "J4: %.17g", p[0]);
  EXPECT(fabs(0 * p[0] + 1 * p[1] + 2 * p[2] - 1.0) < 1e-12, "J4 expected value");
  double s4[2] = {0, 0};
  pp_jemm_softmax(s4, 2, T_TEXT, p);
  EXPECT(p[0] == 0.5 && p[1] == 0.5, "J5: %.17g %.17g", p[0], p[1]);
}

/* Compiles `body` and finishes it with `logits` (question-major, each question's candidates). */
static char *run(const struct pp_jemm_model *m, const char *body, const float *logits,
                 struct pp_jemm_request **ret_req, int *ret_rc, struct cm_diag *d) {
  json_object *root = NULL;
  struct pp_jemm_request *r = NULL;
  char *out = NULL;
  size_t n = 0;
  cm_diag_fini(d);
  int rc = pp_json_parse(body, strlen(body), &root, d);
  if (!rc)
    rc = pp_jemm_compile(m, root, &r, d);
  if (!rc && logits) {
    const float *lg[PP_JEMM_MAX_QUESTIONS];
    size_t off = 0;
    for (size_t q = 0; q < r->n_questions; q++) {
      lg[q] = logits + off;
      off += r->questions[q].n_candidates;
    }
    rc = pp_jemm_finish(m, r, lg, 1.0, &out, &n, d);
  }
  json_object_put(root);
  *ret_rc = rc;
  if (ret_req)
    *ret_req = r;
  else
    pp_jemm_request_free(r);
  return out;
}

static void answers(const struct pp_jemm_model *m) {
  struct cm_diag d = {0};
  int rc;
  struct pp_jemm_request *r = NULL;
  /* J4: score fallbacks, uniform logits, no "score" key */
  float z3[3] = {0, 0, 0};
  char *out = run(m,
                  "{\"questions\":{\"s\":{\"type\":\"score\",\"criteria\":[null,\"mid\","
                  "\"hi\"]}}}",
                  z3, &r, &rc, &d);
  EXPECT(rc == 0 && out && strstr(out, "\"expected_value\": 1.0") && !strstr(out, "\"score\":"),
         "J4 answer: %s", out ? out : d.msg);
  EXPECT(r && strstr(r->questions[0].user, "A) level 0\nB) mid\nC) hi\n"), "J4 text");
  free(out);
  pp_jemm_request_free(r);
  /* J5: noul order and baseline */
  float z2[2] = {0, 0};
  out = run(m, "{\"questions\":{\"n\":{\"type\":\"noul\"}}}", z2, NULL, &rc, &d);
  EXPECT(rc == 0 && out &&
             strstr(out, "{\"n\": {\"type\": \"noul\", \"noul\": 0.5, "
                         "\"probabilities\": {\"yes\": 0.5, \"no\": 0.5}, "
                         "\"confidence\": 0.5}}"),
         "J5 answer: %s", out ? out : d.msg);
  free(out);
  /* J7: a tie goes to the first key */
  float tie[2] = {1, 1};
  out = run(m, "{\"questions\":{\"q\":{\"criteria\":{\"zz\":\"x\",\"aa\":\"y\"}}}}", tie, NULL, &rc,
            &d);
  EXPECT(rc == 0 && out && strstr(out, "\"choice\": \"zz\""), "J7 tie: %s", out ? out : d.msg);
  free(out);
  /* finish takes the logits as the executor's numerics left them and rounds nothing (in bf16
   * the executor has rounded 19.99 and 20.01 to 20.0, a tie; in fp32 they stay apart): numpy's
   * softmax of float32(19.99), float32(20.01) at the text temperature */
  float near[2] = {19.99f, 20.01f};
  out = run(m, "{\"questions\":{\"q\":{\"criteria\":{\"zz\":\"x\",\"aa\":\"y\"}}}}", near, NULL,
            &rc, &d);
  EXPECT(rc == 0 && out &&
             strstr(out, "\"choice\": \"aa\", \"probabilities\": {\"zz\": "
                         "0.4962910248487748, \"aa\": 0.5037089751512249}"),
         "float32 logits not rounded: %s", out ? out : d.msg);
  free(out);
  float rounded[2] = {20.0f, 20.0f}; /* the same logits from the bf16 numerics: a tie */
  out = run(m, "{\"questions\":{\"q\":{\"criteria\":{\"zz\":\"x\",\"aa\":\"y\"}}}}", rounded, NULL,
            &rc, &d);
  EXPECT(rc == 0 && out &&
             strstr(out, "\"choice\": \"zz\", \"probabilities\": {\"zz\": "
                         "0.49999999999999994, \"aa\": 0.49999999999999994}"),
         "bf16 tie: %s", out ? out : d.msg);
  free(out);
  /* non-finite logits are an execution error, never an answer */
  float bad[2] = {1, NAN};
  out = run(m, "{\"questions\":{\"q\":{\"criteria\":{\"a\":\"x\",\"b\":\"y\"}}}}", bad, NULL, &rc,
            &d);
  EXPECT(rc == -CM_EINTERNAL && !out, "non-finite logit: rc %d", rc);
  /* J8: the readout row is the last prompt token, "\n\n" */
  run(m, "{\"questions\":{\"q\":{\"type\":\"noul\"}}}", NULL, &r, &rc, &d);
  EXPECT(rc == 0 && r->questions[0].ids[r->questions[0].n_ids - 1] == 271, "J8 last token");
  pp_jemm_request_free(r);
  /* J12: 64 questions compile in order, 65 are refused */
  char body[8192];
  for (int n = 64; n <= 65; n++) {
    size_t k = (size_t)snprintf(body, sizeof body, "{\"questions\":{");
    for (int i = 0; i < n; i++)
      k += (size_t)snprintf(body + k, sizeof body - k, "%s\"q%d\":{\"type\":\"noul\"}",
                            i ? "," : "", i);
    snprintf(body + k, sizeof body - k, "}}");
    run(m, body, NULL, &r, &rc, &d);
    if (n == 64)
      EXPECT(rc == 0 && r->n_questions == 64 && !strcmp(r->questions[63].id, "q63") &&
                 r->prefix_len > 0,
             "J12 64: %s", d.msg);
    else
      EXPECT(rc == -CM_ELIMIT && d.msg && strstr(d.msg, "1 to 64"), "J12 65: %s", d.msg);
    pp_jemm_request_free(r);
    r = NULL;
  }
  /* what this implementation refuses where the reference renders (spec §11 item 3) */
  const char *refused[] = {
      "{\"state\":18446744073709551616,\"questions\":{\"q\":{\"type\":\"noul\"}}}",
      "{\"state\":-9223372036854775809,\"questions\":{\"q\":{\"type\":\"noul\"}}}",
      "{\"questions\":{\"q\":{\"criteria\":{\"t\":{\"description\":\"{\\\"name\\\":\\\"r\\\","
      "\\\"parameters\\\":{\\\"x\\\":{\\\"default\\\":18446744073709551616}}}\",\"action\":"
      "{\"tool_name\":1}},\"b\":\"x\"}}}}",
  };
  for (size_t i = 0; i < 3; i++) {
    run(m, refused[i], NULL, NULL, &rc, &d);
    EXPECT(rc == -CM_EREQUEST && cm_error_http(rc, NULL) == 422, "refused %zu: rc %d", i, rc);
  }
  /* issue 16 F4: the 64-bit bounds themselves are values (json-c clamps only wider ones, which
   * pp_json_check refuses naming the field): ../shared/findings/2026-12-01-attack/
   * jemm_int64_min.json and jemm_u64_max_in_instructions_wrong_field_named.json */
  run(m, "{\"state\": {\"a\": -9223372036854775808}, \"questions\": {\"q\": {\"type\": "
         "\"choice\", \"instructions\": \"Pick\", \"criteria\": {\"x\": \"a\", \"y\": \"b\"}}}}",
      NULL, &r, &rc, &d);
  EXPECT(rc == 0 && strstr(r->questions[0].user, "{\"a\":-9223372036854775808}"),
         "int64 min state: %s", rc ? d.msg : r->questions[0].user);
  pp_jemm_request_free(r);
  run(m, "{\"state\": \"s\", \"questions\": {\"q\": {\"type\": \"choice\", \"instructions\": "
         "[18446744073709551615], \"criteria\": {\"x\": \"a\", \"y\": \"b\"}}}}",
      NULL, &r, &rc, &d);
  EXPECT(rc == 0 && strstr(r->questions[0].user, "[18446744073709551615]"),
         "uint64 max instructions: %s", rc ? d.msg : r->questions[0].user);
  pp_jemm_request_free(r);
  cm_diag_fini(&d);
  run(m, "{\"state\": \"s\", \"questions\": {\"q\": {\"type\": \"choice\", \"instructions\": "
         "[18446744073709551616], \"criteria\": {\"x\": \"a\", \"y\": \"b\"}}}}",
      NULL, NULL, &rc, &d);
  EXPECT(rc == -CM_EREQUEST && d.msg &&
         !strncmp(d.msg, "questions.q.instructions[0]: integer 18446744073709551616", 57),
         "wider in instructions: %s", d.msg);
  cm_diag_fini(&d);
  /* exact 64-bit extremes inside a tool spec render (J11) */
  run(m,
      "{\"questions\":{\"q\":{\"criteria\":{\"t\":{\"description\":\"{\\\"name\\\":\\\"r\\\","
      "\\\"parameters\\\":{\\\"x\\\":{\\\"default\\\":-9223372036854775808}}}\",\"action\":"
      "{\"tool_name\":1}},\"b\":\"x\"}}}}",
      NULL, &r, &rc, &d);
  EXPECT(rc == 0 && strstr(r->questions[0].user, "A) r | params: x=-9223372036854775808\n"),
         "int64 min default: %s", rc ? d.msg : r->questions[0].user);
  pp_jemm_request_free(r);
  /* a tool spec with NaN / Infinity (Python's json.loads accepts them) is a tool spec */
  run(m,
      "{\"questions\":{\"q\":{\"criteria\":{\"t\":{\"description\":\"{\\\"name\\\":\\\"r\\\","
      "\\\"x\\\":[NaN,-Infinity],\\\"parameters\\\":{\\\"p\\\":{\\\"default\\\":Infinity}}}\","
      "\"action\":{\"tool_name\":1}},\"b\":\"x\"}}}}",
      NULL, &r, &rc, &d);
  EXPECT(rc == 0 && strstr(r->questions[0].user, "A) r | params: p=inf\n"), "NaN tool: %s",
         rc ? d.msg : r->questions[0].user);
  pp_jemm_request_free(r);
  /* json.loads refuses single quotes, trailing data, raw TAB in a string and trailing commas:
   * plain text, as the reference */
  run(m,
      "{\"questions\":{\"q\":{\"criteria\":{\"t\":{\"description\":\"{'name':'r'}\","
      "\"action\":{\"tool_name\":1}},\"u\":{\"description\":\"{\\\"name\\\":\\\"r\\\"} x\","
      "\"action\":{\"tool_name\":1}},\"v\":{\"description\":\"{\\\"name\\\":\\\"a\\tb\\\"}\","
      "\"action\":{\"tool_name\":1}},\"w\":{\"description\":\"{\\\"name\\\":\\\"r\\\",}\","
      "\"action\":{\"tool_name\":1}},\"x\":{\"description\":\" "
      "{\\\"name\\\":\\\"\\\\u00e9\\\"}\\n\","
      "\"action\":{\"tool_name\":1}}}}}}",
      NULL, &r, &rc, &d);
  EXPECT(rc == 0 && strstr(r->questions[0].user, "A) {'name':'r'}\nB) {\"name\":\"r\"} x\n"
                                                 "C) {\"name\":\"a b\"}\nD) {\"name\":\"r\",}\n"
                                                 "E) \xc3\xa9\n"),
         "non-JSON tools: %s", rc ? d.msg : r->questions[0].user);
  pp_jemm_request_free(r);
  cm_diag_fini(&d);
}

static void text_sets(void) {
  const uint32_t space[] = {0x9,    0xA,    0xB,    0xC,    0xD,    0x1C,   0x1D,
                            0x1E,   0x1F,   0x20,   0x85,   0xA0,   0x1680, 0x2000,
                            0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000};
  const uint32_t not_space[] = {0x0, 0x8, 0xE, 0x1B, 0x21, 0x84, 0x200B, 0xFEFF, 0x180E, 0x2060};
  for (size_t i = 0; i < sizeof space / sizeof *space; i++)
    EXPECT(pp_jemm_is_space(space[i]), "U+%04X should be whitespace", space[i]);
  for (size_t i = 0; i < sizeof not_space / sizeof *not_space; i++)
    EXPECT(!pp_jemm_is_space(not_space[i]), "U+%04X should not be whitespace", not_space[i]);
  const uint32_t printable[] = {0x20, 0x7E, 0xE9, 0x300, 0x7FD, 0x8D3, 0x4E00, 0x1F600};
  const uint32_t unprintable[] = {0x7F,   0xA0,  0xAD,   0x200B,  0x2028,
                                  0xE000, 0x378, 0xD800, 0xE0001, 0x10FFFF};
  for (size_t i = 0; i < sizeof printable / sizeof *printable; i++)
    EXPECT(pp_jemm_is_printable(printable[i]), "U+%04X should be printable", printable[i]);
  for (size_t i = 0; i < sizeof unprintable / sizeof *unprintable; i++)
    EXPECT(!pp_jemm_is_printable(unprintable[i]), "U+%04X should not be printable", unprintable[i]);
  struct pp_buf b = {0};
  EXPECT(pp_jemm_flat(&b, "\x1c a \xe3\x80\x80\n b\xc2\x85", 12) == 0 && b.n == 3 &&
             !memcmp(b.bytes, "a b", 3),
         "flat: '%s'", b.bytes);
  pp_buf_fini(&b);
  EXPECT(pp_jemm_flat(&b, " \t ", 3) == 0 && b.n == 0, "flat of spaces");
  pp_buf_fini(&b);
}

static void manifests(const struct pp_tok *tok) {
  struct cm_diag d = {0};
  struct pp_jemm_model m = {0};
  json_object *man = manifest(spec_labels, SUFFIX);
  EXPECT(pp_jemm_model_init(man, tok, &m, &d) == 0, "J8 labels: %s", d.msg);
  for (int i = 0; i < 32; i++)
    EXPECT(m.label_ids[i] == spec_labels[i], "J8 label %d: %d", i, m.label_ids[i]);
  pp_jemm_model_fini(&m);
  json_object_put(man);
  int32_t swapped[32];
  memcpy(swapped, spec_labels, sizeof swapped);
  swapped[0] = 33, swapped[1] = 32;
  man = manifest(swapped, SUFFIX);
  cm_diag_fini(&d);
  EXPECT(pp_jemm_model_init(man, tok, &m, &d) == -CM_EFORMAT, "swapped labels accepted");
  json_object_put(man);
  man = manifest(spec_labels, "<|im_end|>\n<|im_start|>assistant\n");
  cm_diag_fini(&d);
  EXPECT(pp_jemm_model_init(man, tok, &m, &d) == -CM_EFORMAT, "suffix without </think> accepted");
  json_object_put(man);
  cm_diag_fini(&d);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s TOKENIZER.json\n", argv[0]);
    return 2;
  }
  struct cm_diag d = {0};
  struct pp_tok *tok = NULL;
  if (pp_tok_load_file(argv[1], &tok, &d) != 0) {
    fprintf(stderr, "tokenizer: %s\n", d.msg);
    return 1;
  }
  struct pp_jemm_model m = {0};
  json_object *man = manifest(spec_labels, SUFFIX);
  if (pp_jemm_model_init(man, tok, &m, &d) != 0) {
    fprintf(stderr, "manifest: %s\n", d.msg);
    return 1;
  }
  softmax_vectors();
  answers(&m);
  text_sets();
  manifests(tok);
  pp_jemm_model_fini(&m);
  json_object_put(man);
  pp_tok_free(tok);
  cm_diag_fini(&d);
  if (fails)
    fprintf(stderr, "%d failures\n", fails);
  else
    printf("jemm unit: all checks pass\n");
  return fails ? 1 : 0;
}
