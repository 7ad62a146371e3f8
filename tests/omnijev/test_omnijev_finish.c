/* OmniJev finishing against the spec's test vectors (spec/omnijev.md §9.9) and the full response
 * of §2.6, byte for byte: bias before temperature, float32 storage points, first-maximum ties,
 * Jev confidence with k = K + 1, rounding to 4 places, the empty-choice answer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnijev.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static const struct pp_omnijev_calib CAL = {{1.1991, 1.1199, 1.1909}, 0.05310856608843584};

static void noul(float mu, double want, double want_nobias) {
  double got = pp_omnijev_round4(pp_omnijev_finish_noul(&CAL, mu));
  CHECK(got == want, "noul(%g) = %.17g, want %g", (double)mu, got, want);
  struct pp_omnijev_calib nb = CAL;
  nb.noul_bias = 0.0;
  got = pp_omnijev_round4(pp_omnijev_finish_noul(&nb, mu));
  CHECK(got == want_nobias, "noul without bias (%g) = %.17g, want %g", (double)mu, got,
        want_nobias);
}

static void choice(const float *mu, size_t k, const double *want, double abstain, int valid,
                   double conf, size_t arg) {
  double p[8], a, c;
  bool v;
  size_t am;
  pp_omnijev_finish_choice(&CAL, mu, k, p, &a, &v, &c, &am);
  for (size_t i = 0; i < k; i++)
    CHECK(pp_omnijev_round4(p[i]) == want[i], "choice k=%zu p[%zu] = %.17g, want %g", k, i, p[i],
          want[i]);
  CHECK(pp_omnijev_round4(a) == abstain, "choice k=%zu abstain %.17g, want %g", k, a, abstain);
  CHECK(v == (valid != 0), "choice k=%zu valid %d", k, v);
  CHECK(pp_omnijev_round4(c) == conf, "choice k=%zu confidence %.17g, want %g", k, c, conf);
  CHECK(am == arg, "choice k=%zu argmax %zu, want %zu", k, am, arg);
}

static void score(const float *mu, size_t k, const double *want, double conf, size_t arg) {
  double p[8], c;
  size_t am;
  pp_omnijev_finish_score(&CAL, mu, k, p, &c, &am);
  for (size_t i = 0; i < k; i++)
    CHECK(pp_omnijev_round4(p[i]) == want[i], "score k=%zu p[%zu] = %.17g, want %g", k, i, p[i],
          want[i]);
  CHECK(pp_omnijev_round4(c) == conf, "score k=%zu confidence %.17g, want %g", k, c, conf);
  CHECK(am == arg, "score k=%zu argmax %zu, want %zu", k, am, arg);
}

static char *dup(const char *s) {
  char *d = malloc(strlen(s) + 1);
  strcpy(d, s);
  return d;
}

/* A compiled request holding only what finishing reads (ids, types, keys). */
static void set_question(struct pp_omnijev_question *q, const char *id, enum pp_omnijev_type t,
                         const char *const *keys, size_t k) {
  memset(q, 0, sizeof *q);
  q->id = id;
  q->type = t;
  q->n_options = k;
  q->keys = calloc(k + 1, sizeof *q->keys);
  q->texts = calloc(k + 1, sizeof *q->texts);
  for (size_t i = 0; i < k; i++) {
    q->keys[i] = dup(keys[i]);
    q->texts[i] = dup(keys[i]);
  }
}

static void full_example(void) {
  /* spec §2.6: visible μ 0.9; action [0.45, 0.45]; target [0.2, 0.3, 0.1]; risk [0.2, 0.5, 0.3];
   * 0.24 s over 4 questions; 721 input tokens */
  static const char *const yes[] = {"yes"}, *const action[] = {"click", "type"},
                           *const target[] = {"ok", "cancel", "box"},
                           *const risk[] = {"safe", "check first", "dangerous"};
  struct pp_omnijev_request *r = calloc(1, sizeof *r);
  r->questions = calloc(5, sizeof *r->questions);
  r->n_questions = 4;
  set_question(&r->questions[0], "visible", PP_OMNIJEV_NOUL, yes, 1);
  set_question(&r->questions[1], "action", PP_OMNIJEV_CHOICE, action, 2);
  set_question(&r->questions[2], "target", PP_OMNIJEV_CHOICE, target, 3);
  set_question(&r->questions[3], "risk", PP_OMNIJEV_SCORE, risk, 3);
  r->input_tokens = 721;
  static const float m0[] = {0.9f}, m1[] = {0.45f, 0.45f}, m2[] = {0.2f, 0.3f, 0.1f},
                     m3[] = {0.2f, 0.5f, 0.3f};
  const float *mu[] = {m0, m1, m2, m3};
  struct pp_omnijev_model model = {.calib = CAL};
  char *json = NULL;
  size_t n = 0;
  struct cm_diag d = {0};
  int rc = pp_omnijev_finish(&model, r, mu, 0.24, &json, &n, &d);
  const char *want =
      "{\"model\": \"tinnel123/OmniJev\", \"answers\": {"
      "\"visible\": {\"noul\": 0.8672, \"latency_s\": 0.06, \"latency_total_s\": 0.24}, "
      "\"action\": {\"choice\": \"click\", \"probabilities\": {\"click\": 0.4423, \"type\": 0.4423}, "
      "\"abstain\": 0.1155, \"valid\": true, \"confidence\": 0.1634, \"latency_s\": 0.06, "
      "\"latency_total_s\": 0.24}, "
      "\"target\": {\"choice\": \"cancel\", \"probabilities\": {\"ok\": 0.207, \"cancel\": 0.2973, "
      "\"box\": 0.1115}, \"abstain\": 0.3843, \"valid\": true, \"confidence\": 0.1791, "
      "\"latency_s\": 0.06, \"latency_total_s\": 0.24}, "
      "\"risk\": {\"score\": \"check first\", \"probabilities\": {\"safe\": 0.2191, \"check first\": "
      "0.4729, \"dangerous\": 0.308}, \"confidence\": 0.2094, \"latency_s\": 0.06, "
      "\"latency_total_s\": 0.24}}, "
      "\"usage\": {\"input_tokens\": 721, \"output_tokens\": 0}}";
  CHECK(rc == 0 && json && strcmp(json, want) == 0 && n == strlen(want),
        "full example:\n got %s\nwant %s", json ? json : "(null)", want);
  free(json);
  /* the empty choice (spec §9.6): the reference's special answer */
  r->questions[1].n_options = 0;
  r->n_questions = 2;
  rc = pp_omnijev_finish(&model, r, mu, 0.5, &json, &n, &d);
  const char *want2 =
      "{\"model\": \"tinnel123/OmniJev\", \"answers\": {"
      "\"visible\": {\"noul\": 0.8672, \"latency_s\": 0.25, \"latency_total_s\": 0.5}, "
      "\"action\": {\"choice\": null, \"score\": null, \"probabilities\": {}, \"abstain\": 1.0, "
      "\"valid\": false, \"confidence\": 0.0, \"latency_s\": 0.25, \"latency_total_s\": 0.5}}, "
      "\"usage\": {\"input_tokens\": 721, \"output_tokens\": 0}}";
  CHECK(rc == 0 && json && strcmp(json, want2) == 0, "empty choice:\n got %s\nwant %s",
        json ? json : "(null)", want2);
  free(json);
  r->questions[1].n_options = 2;
  /* a non-finite head output is an internal error, never an answer */
  static const float bad[] = {0.5f, 0.0f / 0.0f};
  mu[1] = bad;
  r->n_questions = 4;
  json = NULL;
  rc = pp_omnijev_finish(&model, r, mu, 0.5, &json, &n, &d);
  CHECK(rc == -CM_EINTERNAL && !json, "NaN head output: rc %d", rc);
  cm_diag_fini(&d);
  r->n_questions = 4;
  pp_omnijev_request_free(r);
}

int main(void) {
  /* Noul (μ → noul, and what a port without the bias gives) */
  noul(0.5f, 0.5111, 0.5);
  noul(0.4867f, 0.5, 0.4889);
  noul(0.9f, 0.8672, 0.862);
  noul(0.1f, 0.1433, 0.138);
  noul(1e-12f, 0.0, 0.0);
  noul(0.999999f, 1.0, 1.0);
  /* Choice */
  static const float c1[] = {0.2f, 0.3f, 0.1f}, c2[] = {0.45f, 0.45f}, c3[] = {0.7f},
                     c4[] = {0.3f, 0.3f, 0.2f, 0.15f, 0.1f};
  static const double w1[] = {0.207, 0.2973, 0.1115}, w2[] = {0.4423, 0.4423}, w3[] = {0.6806},
                      w4[] = {0.277, 0.277, 0.1929, 0.1492, 0.1039};
  choice(c1, 3, w1, 0.3843, 1, 0.1791, 1);
  choice(c2, 2, w2, 0.1155, 1, 0.1634, 0);
  choice(c3, 1, w3, 0.3194, 1, 0.3612, 0);
  choice(c4, 5, w4, 0.0, 0, 0.1324, 0);
  /* Score */
  static const float s1[] = {0.2f, 0.5f, 0.3f}, s2[] = {0.25f, 0.25f, 0.25f, 0.25f},
                     s3[] = {1e-8f, 1.0f};
  static const double v1[] = {0.2191, 0.4729, 0.308}, v2[] = {0.25, 0.25, 0.25, 0.25},
                      v3[] = {0.0, 1.0};
  score(s1, 3, v1, 0.2094, 1);
  score(s2, 4, v2, 0.0, 0);
  score(s3, 2, v3, 1.0, 1);
  /* rounding by the exact binary value (Python round(x, 4)) */
  CHECK(pp_omnijev_round4(0.00005) == 0.0001, "round4(0.00005)"); /* binary value above the tie */
  CHECK(pp_omnijev_round4(0.12345) == 0.1235, "round4(0.12345)");
  CHECK(pp_omnijev_round4(1.00005) == 1.0001, "round4(1.00005)"); /* above the tie */
  CHECK(pp_omnijev_round4(0.00015) == 0.0001, "round4(0.00015)"); /* binary value below the tie */
  CHECK(pp_omnijev_round4(0.5) == 0.5 && pp_omnijev_round4(2.0) == 2.0, "round4 exact");
  /* Jev confidence */
  static const float u4[] = {0.25f, 0.25f, 0.25f, 0.25f}, one[] = {0.0f, 1.0f, 0.0f};
  CHECK(pp_omnijev_jev(u4, 4) == 0.0f, "jev uniform");
  CHECK(pp_omnijev_jev(one, 3) == 1.0f, "jev one-hot");
  CHECK(pp_omnijev_jev(one, 1) == 1.0f, "jev k < 2");
  /* _scale: T = 1 (within 1e-6) leaves the vector unchanged */
  double v[2] = {0.3, 0.9}, o[2];
  pp_omnijev_scale(v, 2, 1.0000005, o);
  CHECK(o[0] == 0.3 && o[1] == 0.9, "scale T=1");
  pp_omnijev_scale(v, 2, 2.0, o);
  CHECK(o[0] + o[1] > 0.9999999 && o[0] < 0.4 && o[0] > 0.36, "scale T=2: %.17g", o[0]);
  full_example();
  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("omnijev finish: all spec vectors pass\n");
  return 0;
}
