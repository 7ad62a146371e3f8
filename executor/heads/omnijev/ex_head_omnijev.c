/* The OmniJev heads (see ex_head_omnijev.h) and the registry entry "omnijev", a group head over a
 * question's rows. fp32 storage between layers as the reference's fp32 modules; each dot product
 * accumulates in float64 and rounds once. A directory whose heads.safetensors has no "head.*"
 * tensors (or no such file) simply has no OmniJev head (-ENOENT). */
#include "ex_head_omnijev.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_head.h"
#include "ex_lm_feats.h"
#include "ex_qwen35.h"

/* ---- loading ---------------------------------------------------------------------------------- */

static int take(const struct cm_safetensors *st, const char *path, const char *name,
                int64_t d0, int64_t d1, float **ret, struct cm_diag *diag) {
  struct cm_tensor_view v;
  if (cm_safetensors_find(st, name, &v) != 0)
    return cm_diag_set(diag, -CM_EMISSING, "%s: tensor '%s' missing", path, name);
  if (v.dtype != CM_DTYPE_F32)
    return cm_diag_set(diag, -CM_EDTYPE, "%s: tensor '%s' must be F32", path, name);
  bool ok = d1 < 0 ? v.n_dims == 1 && v.shape[0] == d0
                   : v.n_dims == 2 && v.shape[0] == d0 && v.shape[1] == d1;
  if (!ok)
    return cm_diag_set(diag, -CM_ESHAPE, "%s: tensor '%s' must be [%lld%s%lld]", path, name,
                       (long long)d0, d1 < 0 ? "" : ", ", d1 < 0 ? 0LL : (long long)d1);
  float *x = malloc((size_t)v.n_elems * sizeof *x);
  if (!x)
    return -ENOMEM;
  cm_tensor_to_f32(&v, x);
  for (int64_t i = 0; i < v.n_elems; i++)
    if (!isfinite(x[i])) {
      free(x);
      return cm_diag_set(diag, -CM_EFORMAT, "%s: tensor '%s' holds a non-finite value", path,
                         name);
    }
  *ret = x;
  return 0;
}

static int take_linear(const struct cm_safetensors *st, const char *path, const char *prefix,
                       size_t n_out, size_t n_in, struct ex_omnijev_linear *l,
                       struct cm_diag *diag) {
  char name[96];
  snprintf(name, sizeof name, "%s.weight", prefix);
  int rc = take(st, path, name, (int64_t)n_out, (int64_t)n_in, &l->w, diag);
  snprintf(name, sizeof name, "%s.bias", prefix);
  if (!rc)
    rc = take(st, path, name, (int64_t)n_out, -1, &l->b, diag);
  l->n_in = n_in;
  l->n_out = n_out;
  return rc;
}

/* Width of a hidden layer, from the shape of its first weight. */
static int width_of(const struct cm_safetensors *st, const char *path, const char *name,
                    size_t hidden, size_t *ret, struct cm_diag *diag) {
  struct cm_tensor_view v;
  if (cm_safetensors_find(st, name, &v) != 0)
    return cm_diag_set(diag, -CM_EMISSING, "%s: tensor '%s' missing", path, name);
  if (v.n_dims != 2 || v.shape[1] != (int64_t)hidden || v.shape[0] < 1 || v.shape[0] > 65536)
    return cm_diag_set(diag, -CM_ESHAPE, "%s: tensor '%s' must be [width, %zu]", path, name,
                       hidden);
  *ret = (size_t)v.shape[0];
  return 0;
}

int ex_omnijev_heads_init(const struct cm_safetensors *st, const char *path, size_t hidden,
                          struct ex_omnijev_heads *ret, struct cm_diag *diag) {
  struct ex_omnijev_heads h = {.hidden = hidden};
  float *tau = NULL;
  int rc = width_of(st, path, "head.opt.0.weight", hidden, &h.d_hidden, diag);
  if (!rc)
    rc = width_of(st, path, "ord.z.0.weight", hidden, &h.d_ord, diag);
  size_t dh = h.d_hidden, dd = h.d_ord;
  if (!rc)
    rc = take_linear(st, path, "head.opt.0", dh, hidden, &h.opt0, diag);
  if (!rc)
    rc = take_linear(st, path, "head.opt.2", dh, dh, &h.opt2, diag);
  if (!rc)
    rc = take_linear(st, path, "head.que.0", dh, hidden, &h.que0, diag);
  if (!rc)
    rc = take_linear(st, path, "head.que.2", dh, dh, &h.que2, diag);
  if (!rc)
    rc = take_linear(st, path, "head.score", 1, dh, &h.score, diag);
  if (!rc)
    rc = take_linear(st, path, "head.abstain", 1, dh, &h.abstain, diag);
  if (!rc)
    rc = take_linear(st, path, "head.feat", dh, EX_LM_FEATS_N, &h.feat, diag);
  if (!rc)
    rc = take_linear(st, path, "head.feat_lin", 1, EX_LM_FEATS_N, &h.feat_lin, diag);
  if (!rc)
    rc = take(st, path, "head.log_tau", 3, -1, &tau, diag);
  if (!rc)
    memcpy(h.log_tau, tau, sizeof h.log_tau);
  free(tau);
  if (!rc)
    rc = take_linear(st, path, "ord.z.0", dd, hidden, &h.z0, diag);
  if (!rc)
    rc = take_linear(st, path, "ord.z.2", 1, dd, &h.z2, diag);
  if (!rc)
    rc = take_linear(st, path, "ord.cut.0", dd, hidden, &h.cut0, diag);
  if (!rc)
    rc = take_linear(st, path, "ord.cut.2", 1, dd, &h.cut2, diag);
  if (rc) {
    ex_omnijev_heads_fini(&h);
    return rc;
  }
  *ret = h;
  return 0;
}

void ex_omnijev_heads_fini(struct ex_omnijev_heads *h) {
  if (!h)
    return;
  struct ex_omnijev_linear *all[] = {&h->opt0, &h->opt2, &h->que0,  &h->que2,  &h->score,
                                     &h->abstain, &h->feat, &h->feat_lin, &h->z0, &h->z2,
                                     &h->cut0, &h->cut2};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
    free(all[i]->w);
    free(all[i]->b);
    all[i]->w = all[i]->b = NULL;
  }
}

/* ---- maths ---------------------------------------------------------------------------------- */

/* y = W x + b for one vector, float64 accumulation, one rounding. */
static void linear(const struct ex_omnijev_linear *l, const float *x, float *y) {
  for (size_t o = 0; o < l->n_out; o++) {
    const float *w = l->w + o * l->n_in;
    double acc = 0.0;
    for (size_t i = 0; i < l->n_in; i++)
      acc += (double)w[i] * (double)x[i];
    y[o] = (float)(acc + (double)l->b[o]);
  }
}

/* exact GELU: x · Φ(x) = 0.5 x (1 + erf(x / √2)) */
static void gelu(float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(0.5 * (double)x[i] * (1.0 + erf((double)x[i] * 0.70710678118654752440)));
}

/* Linear → GELU → Linear (the heads' MLPs); tmp [first.n_out]. */
static void mlp(const struct ex_omnijev_linear *a, const struct ex_omnijev_linear *b,
                const float *x, float *tmp, float *y) {
  linear(a, x, tmp);
  gelu(tmp, a->n_out);
  linear(b, tmp, y);
}

static float sigmoidf_(float x) {
  return (float)(1.0 / (1.0 + exp(-(double)x)));
}

int ex_omnijev_option_scorer(const struct ex_omnijev_heads *h, const float *u, size_t k,
                             const float *zq, const float *feats, int type, float *mu) {
  if ((type != 0 && type != 1) || k == 0 || (type == 0 && k != 1))
    return -EINVAL;
  size_t dh = h->d_hidden;
  float *g = malloc(dh * sizeof *g), *tmp = malloc(dh * sizeof *tmp), *hk = malloc(dh * sizeof *hk),
        *fk = malloc(dh * sizeof *fk), *s = malloc((k + 1) * sizeof *s);
  if (!g || !tmp || !hk || !fk || !s) {
    free(g), free(tmp), free(hk), free(fk), free(s);
    return -ENOMEM;
  }
  mlp(&h->que0, &h->que2, zq, tmp, g);
  for (size_t i = 0; i < dh; i++)
    g[i] = tanhf(g[i]);
  float t = expf(h->log_tau[type]);
  for (size_t r = 0; r < k; r++) {
    mlp(&h->opt0, &h->opt2, u + r * h->hidden, tmp, hk);
    linear(&h->feat, feats + r * EX_LM_FEATS_N, fk);
    for (size_t i = 0; i < dh; i++)
      hk[i] = hk[i] * g[i] + fk[i];
    float sc, fl;
    linear(&h->score, hk, &sc);
    linear(&h->feat_lin, feats + r * EX_LM_FEATS_N, &fl);
    s[r] = (sc + fl) / t;
  }
  if (type == 0) {
    mu[0] = sigmoidf_(s[0]); /* softmax over [s, 0] */
  } else {
    float a;
    linear(&h->abstain, g, &a);
    s[k] = a / t;
    double m = s[0], z = 0.0;
    for (size_t r = 1; r <= k; r++)
      m = s[r] > m ? s[r] : m;
    for (size_t r = 0; r <= k; r++)
      z += exp((double)s[r] - m);
    for (size_t r = 0; r < k; r++)
      mu[r] = (float)(exp((double)s[r] - m) / z);
  }
  free(g), free(tmp), free(hk), free(fk), free(s);
  return 0;
}

/* softplus with β = 1 and threshold 20 */
static float softplusf_(float x) {
  return x > 20.0f ? x : (float)log1p(exp((double)x));
}

int ex_omnijev_ordinal(const struct ex_omnijev_heads *h, const float *u, size_t k, const float *zq,
                       float *mu) {
  if (k == 0)
    return -EINVAL;
  float *tmp = malloc(h->d_ord * sizeof *tmp), *theta = malloc(k * sizeof *theta);
  if (!tmp || !theta) {
    free(tmp), free(theta);
    return -ENOMEM;
  }
  float z, r0;
  mlp(&h->z0, &h->z2, zq, tmp, &z);
  mlp(&h->cut0, &h->cut2, u, tmp, &r0);
  theta[0] = r0;
  float acc = 0.0f; /* cumulative sum of the softplus gaps, float32 as torch.cumsum */
  for (size_t l = 1; l < k; l++) {
    float r;
    mlp(&h->cut0, &h->cut2, u + l * h->hidden, tmp, &r);
    acc += softplusf_(r);
    theta[l] = r0 + acc;
  }
  float prev = 0.0f;
  for (size_t l = 0; l < k; l++) {
    float c = l + 1 < k ? sigmoidf_(theta[l] - z) : 1.0f;
    float p = l == 0 ? c : c - prev;
    mu[l] = p < 1e-8f ? 1e-8f : p;
    prev = c;
  }
  free(tmp), free(theta);
  return 0;
}

/* ---- the group readout ------------------------------------------------------------------------ */

struct acc {
  int type;        /* 0 noul, 1 choice, 2 score */
  uint32_t k;      /* options */
  float *u;        /* [k, H] closing-marker states */
  float *zq;       /* [H] the first row's state before <|opt|> */
  float *sum_lp;   /* [k] Σ log-probs of the option text */
  float *first;    /* [k] log-prob of the first text token from the token before <|opt|> */
  uint32_t *n_in;  /* [k] text tokens */
};

static int shape(const int32_t *args, uint32_t n_args, uint32_t *ret_rows, uint32_t *ret_width) {
  if (n_args != 2 || args[0] < 0 || args[0] > 2 || args[1] < 1 || args[1] > 4096 ||
      (args[0] == 0 && args[1] != 1))
    return -EINVAL;
  *ret_rows = (uint32_t)args[1];
  *ret_width = (uint32_t)args[1] * (args[0] == 2 ? 1 : 1 + EX_LM_FEATS_N);
  return 0;
}

static void free_acc(void *p) {
  struct acc *a = p;
  if (!a)
    return;
  free(a->u), free(a->zq), free(a->sum_lp), free(a->first), free(a->n_in);
  free(a);
}

static int begin(const void *state, const int32_t *args, uint32_t n_args, void **ret_acc) {
  const struct ex_omnijev_heads *h = state;
  uint32_t rows, width;
  if (shape(args, n_args, &rows, &width))
    return -EINVAL;
  struct acc *a = calloc(1, sizeof *a);
  if (!a)
    return -ENOMEM;
  a->type = args[0];
  a->k = rows;
  a->u = malloc((size_t)rows * h->hidden * sizeof *a->u);
  a->zq = malloc(h->hidden * sizeof *a->zq);
  a->sum_lp = calloc(rows, sizeof *a->sum_lp);
  a->first = calloc(rows, sizeof *a->first);
  a->n_in = calloc(rows, sizeof *a->n_in);
  if (!a->u || !a->zq || !a->sum_lp || !a->first || !a->n_in) {
    free_acc(a);
    return -ENOMEM;
  }
  *ret_acc = a;
  return 0;
}

static int row(const void *state, const struct ex_head_lm *lm, void *acc, uint32_t k,
               int32_t position, const int32_t *ids, uint32_t n, const float *hidden,
               struct cm_diag *diag) {
  const struct ex_omnijev_heads *h = state;
  struct acc *a = acc;
  size_t H = h->hidden;
  if (position < 1 || (uint32_t)position + 2 > n || k >= a->k)
    return cm_diag_set(diag, -CM_EPROGRAM, "omnijev readout: <|opt|> offset %d does not fit a "
                       "row of %u tokens", position, n);
  uint32_t o = (uint32_t)position, c = n - 1;
  memcpy(a->u + (size_t)k * H, hidden + (size_t)c * H, H * sizeof *a->u);
  if (k == 0)
    memcpy(a->zq, hidden + (size_t)(o - 1) * H, H * sizeof *a->zq);
  a->n_in[k] = c - o - 1;
  if (a->type == 2 || a->n_in[k] == 0)
    return 0; /* score ignores the features; an empty text has S = first = 0 */
  /* positions o−1 … c−2 predict x_{o+1} (first, from before the marker), then x_{o+1} … x_{c−1} */
  uint32_t np = a->n_in[k] + 1;
  int32_t *tg = malloc(np * sizeof *tg);
  float *lp = malloc(np * sizeof *lp);
  int rc = tg && lp ? 0 : -ENOMEM;
  if (!rc) {
    tg[0] = ids[o + 1];
    for (uint32_t i = 1; i < np; i++)
      tg[i] = ids[o + i];
    rc = lm->target_logprobs(lm, o - 1, tg, np, lp, diag);
    if (rc == -EINVAL)
      rc = cm_diag_set(diag, -CM_EPROGRAM, "omnijev readout: option token outside the vocabulary");
  }
  if (!rc) {
    float s = 0.0f;
    for (uint32_t i = 1; i < np; i++)
      s += lp[i];
    a->sum_lp[k] = s;
    a->first[k] = lp[0];
  }
  free(tg), free(lp);
  return rc;
}

static int finish(const void *state, void *acc, float *out, struct cm_diag *diag) {
  const struct ex_omnijev_heads *h = state;
  struct acc *a = acc;
  int rc;
  if (a->type == 2) {
    rc = ex_omnijev_ordinal(h, a->u, a->k, a->zq, out);
  } else {
    float *feats = out + a->k;
    ex_lm_option_feats(a->sum_lp, a->n_in, a->first, a->k, feats);
    rc = ex_omnijev_option_scorer(h, a->u, a->k, a->zq, feats, a->type, out);
  }
  return rc ? cm_diag_set(diag, rc, "omnijev heads: %s", cm_strerror(rc)) : 0;
}

static const struct ex_head_group group = {
    .shape = shape, .begin = begin, .row = row, .finish = finish, .free_acc = free_acc};

static int load(const struct cm_model_dir *dir, size_t hidden, void **ret_state, size_t *ret_n_out,
                struct cm_diag *diag) {
  struct cm_safetensors *st = NULL;
  struct ex_omnijev_heads *h = NULL;
  struct cm_tensor_view v;
  char *path = NULL;
  int rc = ex_head_file_open(dir, &st, &path, diag); /* -ENOENT: no heads file */
  if (!rc && cm_safetensors_find(st, "head.opt.0.weight", &v) != 0)
    rc = -ENOENT; /* another family's heads */
  if (!rc && !(h = calloc(1, sizeof *h)))
    rc = -ENOMEM;
  if (!rc)
    rc = ex_omnijev_heads_init(st, path, hidden, h, diag);
  if (!rc) {
    *ret_state = h;
    *ret_n_out = 0; /* a group head: widths come from each readout */
    h = NULL;
  }
  free(h);
  cm_safetensors_close(st);
  free(path);
  return rc;
}

static void free_state(void *state) {
  ex_omnijev_heads_fini(state);
  free(state);
}

const struct ex_head_kind ex_head_omnijev = {
    .name = EX_HEAD_OMNIJEV_NAME,
    .load = load,
    .free_state = free_state,
    .group = &group,
};
