/* Chunked full-vocabulary log-probs and the OmniJev LM features (see ex_lm_feats.h). Each logit is
 * the backend's linear over one LM-head row, so chunking never changes a value; the running
 * maximum and sum are float64. */
#include "ex_lm_feats.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

int ex_lm_target_logprobs(const struct ex_backend *be, const float *lm_head, size_t vocab,
                          size_t hidden_size, const float *hidden, const int32_t *targets, size_t n,
                          bool round_bf16, float *lp) {
  for (size_t i = 0; i < n; i++)
    if (targets[i] < 0 || (size_t)targets[i] >= vocab)
      return -EINVAL;
  size_t chunk = vocab < EX_LM_FEATS_VOCAB_CHUNK ? vocab : EX_LM_FEATS_VOCAB_CHUNK;
  float *logits = malloc(EX_LM_FEATS_POS_BLOCK * chunk * sizeof *logits);
  double *mx = malloc(EX_LM_FEATS_POS_BLOCK * sizeof *mx);
  double *sum = malloc(EX_LM_FEATS_POS_BLOCK * sizeof *sum);
  float *target = malloc(EX_LM_FEATS_POS_BLOCK * sizeof *target);
  if (!logits || !mx || !sum || !target) {
    free(logits), free(mx), free(sum), free(target);
    return -ENOMEM;
  }
  for (size_t p0 = 0; p0 < n; p0 += EX_LM_FEATS_POS_BLOCK) {
    size_t np = n - p0 < EX_LM_FEATS_POS_BLOCK ? n - p0 : EX_LM_FEATS_POS_BLOCK;
    for (size_t i = 0; i < np; i++) {
      mx[i] = -INFINITY;
      sum[i] = 0.0;
    }
    for (size_t v0 = 0; v0 < vocab; v0 += chunk) {
      size_t nv = vocab - v0 < chunk ? vocab - v0 : chunk;
      be->linear(hidden + p0 * hidden_size, lm_head + v0 * hidden_size, NULL, logits, np,
                 hidden_size, nv);
      if (round_bf16) /* the bf16 numerics only (ex_lm_feats.h) */
        be->round_bf16(logits, np * nv);
      for (size_t i = 0; i < np; i++) {
        const float *x = logits + i * nv;
        double m = mx[i];
        for (size_t v = 0; v < nv; v++)
          m = x[v] > m ? x[v] : m;
        double s = sum[i] * exp(mx[i] - m); /* rescale the running sum to the new maximum */
        for (size_t v = 0; v < nv; v++)
          s += exp((double)x[v] - m);
        mx[i] = m;
        sum[i] = s;
        size_t t = (size_t)targets[p0 + i];
        if (t >= v0 && t < v0 + nv)
          target[i] = x[t - v0];
      }
    }
    for (size_t i = 0; i < np; i++)
      lp[p0 + i] = (float)((double)target[i] - (mx[i] + log(sum[i])));
  }
  free(logits), free(mx), free(sum), free(target);
  return 0;
}

void ex_lm_option_feats(const float *sum_lp, const uint32_t *n_inner, const float *first,
                        size_t k, float *feats) {
  /* dist: log-softmax over the question's options of m_g (float64 inside, float32 out) */
  double mmax = -INFINITY, se = 0.0;
  for (size_t g = 0; g < k; g++) {
    double m = n_inner[g] ? (double)sum_lp[g] : (double)EX_LM_FEATS_EMPTY;
    mmax = m > mmax ? m : mmax;
  }
  for (size_t g = 0; g < k; g++)
    se += exp((n_inner[g] ? (double)sum_lp[g] : (double)EX_LM_FEATS_EMPTY) - mmax);
  double lse = mmax + log(se);
  for (size_t r = 0; r < k; r++) {
    float *f = feats + r * EX_LM_FEATS_N;
    bool valid = n_inner[r] > 0;
    float s = valid ? sum_lp[r] : 0.0f;
    f[0] = s / 10.0f;
    f[1] = valid ? s / (float)n_inner[r] : 0.0f;
    f[2] = (float)n_inner[r] / 10.0f;
    f[3] = (float)((valid ? (double)s : (double)EX_LM_FEATS_EMPTY) - lse);
    f[4] = valid ? first[r] : 0.0f;
    f[5] = valid ? 1.0f : 0.0f;
  }
}
