/* The executor's OmniJev heads and LM features on the inputs of tests/oracle/omnijev_heads.py:
 * loads DIR/heads.safetensors with ex_omnijev_heads_init, runs OptionScorer / OrdinalScoreHead,
 * the chunked full-vocabulary log-probs and the six features on DIR/cases.safetensors, writes
 * DIR/out.safetensors for the numpy check, and asserts the head algebra of spec §15 C.9-C.10. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_backend.h"
#include "ex_head_omnijev.h"
#include "ex_lm_feats.h"

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

static float *f32(const struct cm_safetensors *st, const char *name, int64_t *ret_n) {
  struct cm_tensor_view v;
  if (cm_safetensors_find(st, name, &v) != 0) {
    fprintf(stderr, "missing %s\n", name);
    exit(1);
  }
  float *x = malloc((size_t)v.n_elems * sizeof *x + 1);
  cm_tensor_to_f32(&v, x); /* integer inputs are stored as exact F32 (the reader takes floats) */
  if (ret_n)
    *ret_n = v.n_elems;
  return x;
}

#define MAX_OUT 64
static float *outs[MAX_OUT];
static int n_outs;

static void add_out(struct cm_safetensors_writer *w, const char *name, float *x, int64_t d0,
                    int64_t d1) {
  int64_t shape[2] = {d0, d1};
  outs[n_outs++] = x;
  if (cm_safetensors_writer_add(w, name, CM_DTYPE_F32, d1 ? 2 : 1, shape, x) != 0) {
    fprintf(stderr, "writer: %s\n", name);
    exit(1);
  }
}

/* Rows of a batch do not see each other: OrdinalScoreHead over 64 levels at width 512 (its cut MLP
 * runs batched and split over threads: 64·512·512 multiply-adds, over the threading threshold)
 * gives, for every level l < k − 1 of a call over only the first k levels, the same bits (μ_l
 * depends on levels 0 … l alone, and on z). Random weights; shapes independent of the oracle's. */
static void check_rows_independent(void) {
  enum { HID = 512, DO = 512, K = 64 };
  struct ex_omnijev_heads h = {.hidden = HID, .d_ord = DO};
  struct ex_omnijev_linear *ls[4] = {&h.z0, &h.z2, &h.cut0, &h.cut2};
  size_t outs[4] = {DO, 1, DO, 1}, ins[4] = {HID, DO, HID, DO};
  uint64_t st = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 4; i++) {
    ls[i]->n_out = outs[i], ls[i]->n_in = ins[i];
    ls[i]->w = malloc(outs[i] * ins[i] * sizeof(float));
    ls[i]->b = malloc(outs[i] * sizeof(float));
    for (size_t j = 0; j < outs[i] * ins[i]; j++) {
      st = st * 6364136223846793005ull + 1442695040888963407ull;
      ls[i]->w[j] = ((float)(st >> 40) / 16777216.0f - 0.5f) * 0.1f;
    }
    for (size_t j = 0; j < outs[i]; j++)
      ls[i]->b[j] = 0.01f * (float)(j % 7);
  }
  float *u = malloc((size_t)K * HID * sizeof(float)), zq[HID], all[K], part[K];
  for (size_t j = 0; j < (size_t)K * HID; j++) {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    u[j] = (float)(st >> 40) / 16777216.0f - 0.5f;
  }
  for (size_t j = 0; j < HID; j++)
    zq[j] = u[j] * 0.5f;
  CHECK(ex_omnijev_ordinal(&h, u, K, zq, all) == 0, "ordinal over %d levels", K);
  const size_t ks[] = {2, 3, 9, 17, 40, K};
  for (size_t c = 0; c < sizeof ks / sizeof *ks; c++) {
    CHECK(ex_omnijev_ordinal(&h, u, ks[c], zq, part) == 0, "ordinal over %zu levels", ks[c]);
    CHECK(memcmp(part, all, (ks[c] - 1) * sizeof(float)) == 0,
          "ordinal: the first %zu levels alone differ from the same levels among %d", ks[c] - 1, K);
  }
  for (int i = 0; i < 4; i++)
    free(ls[i]->w), free(ls[i]->b);
  free(u);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  char path[4096];
  struct cm_diag d = {0};
  struct cm_safetensors *hs = NULL, *cs = NULL;
  snprintf(path, sizeof path, "%s/heads.safetensors", argv[1]);
  struct ex_omnijev_heads h;
  if (cm_safetensors_open(path, &hs, &d) || ex_omnijev_heads_init(hs, path, 48, &h, &d)) {
    fprintf(stderr, "heads: %s\n", d.msg);
    return 1;
  }
  CHECK(h.d_hidden == 40 && h.d_ord == 24, "widths %zu %zu", h.d_hidden, h.d_ord);
  /* a wrong hidden size is refused, naming the tensor */
  struct ex_omnijev_heads bad;
  CHECK(ex_omnijev_heads_init(hs, path, 64, &bad, &d) == -CM_ESHAPE && strstr(d.msg, "head.opt.0"),
        "hidden 64 accepted");
  cm_diag_fini(&d);
  snprintf(path, sizeof path, "%s/cases.safetensors", argv[1]);
  if (cm_safetensors_open(path, &cs, &d)) {
    fprintf(stderr, "cases: %s\n", d.msg);
    return 1;
  }
  struct cm_safetensors_writer *w = NULL;
  cm_safetensors_writer_new(&w);
  static const char *const cases[] = {"noul",  "noul_b",    "choice",    "choice_one",
                                      "choice_many", "score", "score_one", "score_two"};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    char name[64];
    snprintf(name, sizeof name, "%s.meta", cases[c]);
    float *meta = f32(cs, name, NULL);
    int type = (int)meta[0];
    size_t k = (size_t)meta[1];
    snprintf(name, sizeof name, "%s.u", cases[c]);
    float *u = f32(cs, name, NULL);
    snprintf(name, sizeof name, "%s.zq", cases[c]);
    float *zq = f32(cs, name, NULL);
    snprintf(name, sizeof name, "%s.feats", cases[c]);
    float *fe = f32(cs, name, NULL);
    float *mu = calloc(k, sizeof *mu);
    int rc = type == 2 ? ex_omnijev_ordinal(&h, u, k, zq, mu)
                       : ex_omnijev_option_scorer(&h, u, k, zq, fe, type, mu);
    CHECK(rc == 0, "%s: rc %d", cases[c], rc);
    double sum = 0.0;
    for (size_t i = 0; i < k; i++) {
      CHECK(mu[i] > 0.0f && mu[i] <= 1.0f, "%s: mu[%zu] = %g", cases[c], i, (double)mu[i]);
      sum += mu[i];
    }
    if (type == 1)
      CHECK(sum < 1.0, "%s: Σμ = %.9g leaves no abstain mass", cases[c], sum);
    if (type == 2) {
      CHECK(sum > 0.999 && sum < 1.0 + 1e-6 * (double)k, "%s: Σp = %.9g", cases[c], sum);
      for (size_t i = 0; i < k; i++)
        CHECK(mu[i] >= 1e-8f, "%s: p[%zu] below 1e-8", cases[c], i);
      if (k == 1)
        CHECK(mu[0] == 1.0f, "score with one level: %g", (double)mu[0]);
    }
    snprintf(name, sizeof name, "%s.mu", cases[c]);
    add_out(w, name, mu, (int64_t)k, 0);
    free(meta), free(u), free(zq), free(fe);
  }
  /* level order matters (spec §15 C.10): reversing four levels changes the distribution */
  {
    float *u = f32(cs, "score.u", NULL), *zq = f32(cs, "score.zq", NULL), rev[4 * 48], a[4], b[4];
    for (size_t l = 0; l < 4; l++)
      memcpy(rev + l * 48, u + (3 - l) * 48, 48 * sizeof(float));
    ex_omnijev_ordinal(&h, u, 4, zq, a);
    ex_omnijev_ordinal(&h, rev, 4, zq, b);
    CHECK(a[0] != b[3] || a[1] != b[2], "ordinal head is permutation-invariant");
    free(u), free(zq);
  }
  /* bad arguments */
  float one = 0.0f;
  CHECK(ex_omnijev_option_scorer(&h, &one, 2, &one, &one, 0, &one) == -EINVAL, "noul with 2");
  CHECK(ex_omnijev_option_scorer(&h, &one, 1, &one, &one, 2, &one) == -EINVAL, "scorer type 2");
  CHECK(ex_omnijev_ordinal(&h, &one, 0, &one, &one) == -EINVAL, "ordinal k = 0");
  /* chunked log-probs over V = 20000 (two full chunks and a partial one) */
  int64_t nv, nt;
  float *lm = f32(cs, "lm.head", &nv), *hid = f32(cs, "lm.hidden", NULL),
        *tgf = f32(cs, "lm.targets", &nt);
  int32_t *tg = malloc((size_t)nt * sizeof *tg);
  for (int64_t i = 0; i < nt; i++)
    tg[i] = (int32_t)tgf[i];
  float *lp = calloc((size_t)nt, sizeof *lp);
  /* both numerics: fp32 (nothing rounded) and bf16 (the logits rounded) */
  int rc = ex_lm_target_logprobs(&ex_backend_cpu, lm, (size_t)(nv / 48), 48, hid, tg, (size_t)nt,
                                 false, lp);
  CHECK(rc == 0, "logprobs rc %d", rc);
  add_out(w, "lm.lp", lp, nt, 0);
  float *lpb = calloc((size_t)nt, sizeof *lpb);
  rc = ex_lm_target_logprobs(&ex_backend_cpu, lm, (size_t)(nv / 48), 48, hid, tg, (size_t)nt, true,
                             lpb);
  CHECK(rc == 0, "bf16 logprobs rc %d", rc);
  add_out(w, "lm.lp_bf16", lpb, nt, 0);
  int32_t outside = (int32_t)(nv / 48);
  CHECK(ex_lm_target_logprobs(&ex_backend_cpu, lm, (size_t)(nv / 48), 48, hid, &outside, 1, false,
                              &one) == -EINVAL,
        "target outside the vocabulary");
  free(lm), free(hid), free(tgf), free(tg);
  static const char *const groups[] = {"texted", "with_empty", "single", "single_empty",
                                       "all_empty"};
  for (size_t g = 0; g < sizeof groups / sizeof *groups; g++) {
    char name[64];
    int64_t k;
    snprintf(name, sizeof name, "feat.%s.n", groups[g]);
    float *nf = f32(cs, name, &k);
    snprintf(name, sizeof name, "feat.%s.sum", groups[g]);
    float *s = f32(cs, name, NULL);
    snprintf(name, sizeof name, "feat.%s.first", groups[g]);
    float *first = f32(cs, name, NULL);
    uint32_t n_in[16];
    for (int64_t i = 0; i < k; i++)
      n_in[i] = (uint32_t)nf[i];
    float *out = calloc((size_t)k * 6, sizeof *out);
    ex_lm_option_feats(s, n_in, first, (size_t)k, out);
    snprintf(name, sizeof name, "feat.%s.out", groups[g]);
    add_out(w, name, out, k, 6);
    free(nf), free(s), free(first);
  }
  snprintf(path, sizeof path, "%s/out.safetensors", argv[1]);
  if (cm_safetensors_writer_finish(w, path, &d)) {
    fprintf(stderr, "write: %s\n", d.msg);
    return 1;
  }
  cm_safetensors_writer_free(w);
  for (int i = 0; i < n_outs; i++)
    free(outs[i]);
  ex_omnijev_heads_fini(&h);
  check_rows_independent();
  cm_safetensors_close(hs);
  cm_safetensors_close(cs);
  cm_diag_fini(&d);
  if (failures) {
    fprintf(stderr, "%d failures\n", failures);
    return 1;
  }
  printf("omnijev heads: C side done, outputs in %s\n", path);
  return 0;
}
