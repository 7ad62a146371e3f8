/* OmniJev finishing (spec §9): per-type calibration, the float32 storage points of the reference's
 * _finish, first-maximum ties, Jev confidence, round(x, 4) and the answer JSON. Head outputs come
 * in as float32 μ; everything Python does in float64 stays float64 here, in the same order. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnijev.h"
#include "pp_pyjson.h"

double pp_omnijev_round4(double x) {
  /* glibc's %.4f rounds the exact binary value correctly, exact ties to even (the default
   * rounding mode): the same digits as CPython's round(x, 4), which reads them back with strtod */
  char buf[400];
  snprintf(buf, sizeof buf, "%.4f", x);
  double r = strtod(buf, NULL);
  return r == 0.0 ? copysign(0.0, x) : r;
}

void pp_omnijev_scale(const double *v, size_t n, double temperature, double *out) {
  if (fabs(temperature - 1.0) < 1e-6) {
    if (out != v)
      memmove(out, v, n * sizeof *out);
    return;
  }
  double inv = 1.0 / temperature, sum = 0.0;
  for (size_t i = 0; i < n; i++) {
    out[i] = pow(v[i] > 1e-9 ? v[i] : 1e-9, inv);
    sum += out[i];
  }
  for (size_t i = 0; i < n; i++)
    out[i] = out[i] / sum;
}

float pp_omnijev_jev(const float *p, size_t k) {
  if (k < 2)
    return 1.0f;
  float mx = p[0];
  for (size_t i = 1; i < k; i++)
    mx = p[i] > mx ? p[i] : mx;
  float kf = (float)k;
  float c = (kf * mx - 1.0f) / (kf - 1.0f);
  return c < 0.0f ? 0.0f : c > 1.0f ? 1.0f : c;
}

double pp_omnijev_finish_noul(const struct pp_omnijev_calib *calib, float mu) {
  double p = (double)mu;
  double b = calib->noul_bias;
  if (b != 0.0) {
    p = p < 1e-9 ? 1e-9 : p > 1.0 - 1e-9 ? 1.0 - 1e-9 : p;
    double z = log(p / (1.0 - p)) + b;
    z = z < -40.0 ? -40.0 : z > 40.0 ? 40.0 : z;
    p = 1.0 / (1.0 + exp(-z));
  }
  double v[2] = {p, 1.0 - p};
  pp_omnijev_scale(v, 2, calib->temperature[PP_OMNIJEV_NOUL], v);
  return v[0];
}

/* First maximum of x[n] (n ≥ 1). */
static size_t argmax_first(const double *x, size_t n) {
  size_t best = 0;
  for (size_t i = 1; i < n; i++)
    if (x[i] > x[best])
      best = i;
  return best;
}

void pp_omnijev_finish_choice(const struct pp_omnijev_calib *calib, const float *mu, size_t k,
                              double *ret_probs, double *ret_abstain, bool *ret_valid,
                              double *ret_confidence, size_t *ret_argmax) {
  float s = 0.0f;
  for (size_t i = 0; i < k; i++)
    s += mu[i];
  bool valid = s <= (float)(1.0 + 1e-5);
  double *full = ret_probs; /* k entries here, the abstain slot separately */
  float abstain = valid ? (1.0f - s > 0.0f ? 1.0f - s : 0.0f) : 0.0f;
  double w[PP_OMNIJEV_MAX_OPTIONS + 1];
  for (size_t i = 0; i < k; i++)
    w[i] = (double)(valid ? mu[i] : mu[i] / s);
  w[k] = (double)abstain;
  pp_omnijev_scale(w, k + 1, calib->temperature[PP_OMNIJEV_CHOICE], w);
  float f[PP_OMNIJEV_MAX_OPTIONS + 1];
  for (size_t i = 0; i <= k; i++)
    f[i] = (float)w[i]; /* stored back as float32 */
  for (size_t i = 0; i < k; i++)
    full[i] = (double)f[i];
  *ret_abstain = (double)f[k];
  *ret_valid = valid;
  *ret_confidence = (double)pp_omnijev_jev(f, k + 1);
  *ret_argmax = argmax_first(full, k);
}

void pp_omnijev_finish_score(const struct pp_omnijev_calib *calib, const float *mu, size_t k,
                             double *ret_probs, double *ret_confidence, size_t *ret_argmax) {
  float s = 0.0f;
  for (size_t i = 0; i < k; i++)
    s += mu[i];
  float den = s > 1e-6f ? s : 1e-6f;
  double w[PP_OMNIJEV_MAX_OPTIONS + 1];
  for (size_t i = 0; i < k; i++)
    w[i] = (double)(mu[i] / den);
  w[k] = 0.0;
  pp_omnijev_scale(w, k + 1, calib->temperature[PP_OMNIJEV_SCORE], w);
  double sum = 0.0;
  for (size_t i = 0; i < k; i++) {
    w[i] = (double)(float)w[i]; /* stored as float32 */
    sum += w[i];
  }
  float f[PP_OMNIJEV_MAX_OPTIONS];
  for (size_t i = 0; i < k; i++) {
    ret_probs[i] = w[i] / sum;
    f[i] = (float)ret_probs[i];
  }
  *ret_confidence = (double)pp_omnijev_jev(f, k);
  *ret_argmax = argmax_first(ret_probs, k);
}

/* ---- answer JSON --------------------------------------------------------------------------- */

static int put_float(struct pp_buf *b, double x) {
  char tmp[PP_PYJSON_FLOAT_MAX];
  size_t n = pp_pyjson_float(x, tmp);
  return pp_buf_put(b, tmp, n);
}

static int put_key(struct pp_buf *b, const char *key) {
  int rc = pp_pyjson_string(b, key, strlen(key));
  return rc ? rc : pp_buf_puts(b, ": ");
}

/* "probabilities": {key: p, ...} with the later of duplicate keys never possible (compile
 * refuses duplicates). */
static int put_probs(struct pp_buf *b, char *const *keys, const double *p, size_t k) {
  int rc = pp_buf_puts(b, "\"probabilities\": {");
  for (size_t i = 0; !rc && i < k; i++) {
    if (i)
      rc = pp_buf_puts(b, ", ");
    if (!rc)
      rc = put_key(b, keys[i]);
    if (!rc)
      rc = put_float(b, pp_omnijev_round4(p[i]));
  }
  return rc ? rc : pp_buf_puts(b, "}, ");
}

static int put_latency(struct pp_buf *b, double per_q, double total) {
  int rc = pp_buf_puts(b, "\"latency_s\": ");
  if (!rc)
    rc = put_float(b, pp_omnijev_round4(per_q));
  if (!rc)
    rc = pp_buf_puts(b, ", \"latency_total_s\": ");
  if (!rc)
    rc = put_float(b, pp_omnijev_round4(total));
  return rc ? rc : pp_buf_puts(b, "}");
}

static int put_answer(struct pp_buf *b, const struct pp_omnijev_calib *cal,
                      const struct pp_omnijev_question *q, const float *mu, double per_q,
                      double total) {
  double probs[PP_OMNIJEV_MAX_OPTIONS], abstain = 0.0, conf = 0.0;
  bool valid = false;
  size_t arg = 0;
  int rc = pp_buf_puts(b, "{");
  if (rc)
    return rc;
  switch (q->type) {
  case PP_OMNIJEV_NOUL:
    rc = pp_buf_puts(b, "\"noul\": ");
    if (!rc)
      rc = put_float(b, pp_omnijev_round4(pp_omnijev_finish_noul(cal, mu[0])));
    if (!rc)
      rc = pp_buf_puts(b, ", ");
    break;
  case PP_OMNIJEV_CHOICE:
    if (q->n_options == 0) {
      rc = pp_buf_puts(b, "\"choice\": null, \"score\": null, \"probabilities\": {}, "
                          "\"abstain\": 1.0, \"valid\": false, \"confidence\": 0.0, ");
      break;
    }
    pp_omnijev_finish_choice(cal, mu, q->n_options, probs, &abstain, &valid, &conf, &arg);
    rc = pp_buf_puts(b, "\"choice\": ");
    if (!rc)
      rc = pp_pyjson_string(b, q->keys[arg], strlen(q->keys[arg]));
    if (!rc)
      rc = pp_buf_puts(b, ", ");
    if (!rc)
      rc = put_probs(b, q->keys, probs, q->n_options);
    if (!rc)
      rc = pp_buf_puts(b, "\"abstain\": ");
    if (!rc)
      rc = put_float(b, pp_omnijev_round4(abstain));
    if (!rc)
      rc = pp_buf_puts(b, valid ? ", \"valid\": true, \"confidence\": "
                                : ", \"valid\": false, \"confidence\": ");
    if (!rc)
      rc = put_float(b, pp_omnijev_round4(conf));
    if (!rc)
      rc = pp_buf_puts(b, ", ");
    break;
  case PP_OMNIJEV_SCORE:
    pp_omnijev_finish_score(cal, mu, q->n_options, probs, &conf, &arg);
    rc = pp_buf_puts(b, "\"score\": ");
    if (!rc)
      rc = pp_pyjson_string(b, q->keys[arg], strlen(q->keys[arg]));
    if (!rc)
      rc = pp_buf_puts(b, ", ");
    if (!rc)
      rc = put_probs(b, q->keys, probs, q->n_options);
    if (!rc)
      rc = pp_buf_puts(b, "\"confidence\": ");
    if (!rc)
      rc = put_float(b, pp_omnijev_round4(conf));
    if (!rc)
      rc = pp_buf_puts(b, ", ");
    break;
  }
  return rc ? rc : put_latency(b, per_q, total);
}

int pp_omnijev_finish(const struct pp_omnijev_model *model, const struct pp_omnijev_request *req,
                      const float *const *mu, double latency_s, char **ret_json, size_t *ret_n,
                      struct cm_diag *diag) {
  for (size_t i = 0; i < req->n_questions; i++)
    for (size_t j = 0; j < req->questions[i].n_options; j++)
      if (!isfinite(mu[i][j]))
        return cm_diag_set(diag, -CM_EINTERNAL, "question %s: head output %zu is not finite",
                           req->questions[i].id, j);
  struct pp_buf b = {0};
  double per_q = req->n_questions ? latency_s / (double)req->n_questions : 0.0;
  int rc = pp_buf_puts(&b, "{\"model\": \"tinnel123/OmniJev\", \"answers\": {");
  for (size_t i = 0; !rc && i < req->n_questions; i++) {
    const struct pp_omnijev_question *q = &req->questions[i];
    if (i)
      rc = pp_buf_puts(&b, ", ");
    if (!rc)
      rc = put_key(&b, q->id);
    if (!rc)
      rc = put_answer(&b, &model->calib, q, mu[i], per_q, latency_s);
  }
  char tail[96];
  snprintf(tail, sizeof tail, "}, \"usage\": {\"input_tokens\": %llu, \"output_tokens\": 0}}",
           (unsigned long long)req->input_tokens);
  if (!rc)
    rc = pp_buf_puts(&b, tail);
  if (rc) {
    pp_buf_fini(&b);
    return rc;
  }
  *ret_json = b.bytes;
  *ret_n = b.n;
  return 0;
}
