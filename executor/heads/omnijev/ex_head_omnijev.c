/* The OmniJev heads (see ex_head_omnijev.h) and the registry entry "omnijev", a group head over a
 * question's rows. fp32 storage between layers as the reference's fp32 modules; each dot product
 * accumulates in float64 and rounds once. A directory whose heads.safetensors has no "head.*"
 * tensors (or no such file) simply has no OmniJev head (-ENOENT). */
#include "ex_head_omnijev.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

enum {
  ROW_BLOCK = 8,          /* rows sharing one pass over a weight row */
  MAX_THREADS = 8,        /* threads of one large linear_rows call */
  THREAD_MIN_MACS = 1 << 22, /* n · n_in · n_out below which one thread does it all */
};

/* One thread's share of linear_rows: outputs [o0, o1) of every row block. */
struct lin_job {
  const struct ex_omnijev_linear *l;
  const double *xt; /* [n_blocks][n_in][ROW_BLOCK] the rows, widened, zero-padded */
  size_t n, o0, o1;
  float *y;
};

static void *lin_worker(void *arg) {
  const struct lin_job *j = arg;
  const struct ex_omnijev_linear *l = j->l;
  size_t ni = l->n_in;
  for (size_t r0 = 0; r0 < j->n; r0 += ROW_BLOCK) {
    size_t nb = j->n - r0 < ROW_BLOCK ? j->n - r0 : ROW_BLOCK;
    const double *xb = j->xt + (r0 / ROW_BLOCK) * ni * ROW_BLOCK;
    for (size_t o = j->o0; o < j->o1; o++) {
      const float *w = l->w + o * ni;
      double acc[ROW_BLOCK] = {0};
      for (size_t i = 0; i < ni; i++) {
        double wi = (double)w[i];
        const double *xi = xb + i * ROW_BLOCK;
        for (size_t r = 0; r < ROW_BLOCK; r++)
          acc[r] += wi * xi[r];
      }
      for (size_t r = 0; r < nb; r++)
        j->y[(r0 + r) * l->n_out + o] = (float)(acc[r] + (double)l->b[o]);
    }
  }
  return NULL;
}

/* y[n, n_out] = x[n, n_in]·Wᵀ + b: each output one float64 chain over the inputs in ascending order
 * (acc = 0; acc += w[i]·x[i]; then + b, one rounding to float32), rows in blocks of ROW_BLOCK
 * with independent chains that share each weight row, large calls split by output features over
 * up to MAX_THREADS threads (the same bits as one row at a time on one thread: no chain depends
 * on its neighbours). Returns 0 or -ENOMEM. */
static int linear_rows(const struct ex_omnijev_linear *l, const float *x, size_t n, float *y) {
  size_t ni = l->n_in, n_blocks = (n + ROW_BLOCK - 1) / ROW_BLOCK;
  double *xt = malloc((n_blocks * ni * ROW_BLOCK + 1) * sizeof *xt);
  if (!xt)
    return -ENOMEM;
  for (size_t b = 0; b < n_blocks; b++)
    for (size_t i = 0; i < ni; i++)
      for (size_t r = 0; r < ROW_BLOCK; r++) {
        size_t row = b * ROW_BLOCK + r;
        xt[(b * ni + i) * ROW_BLOCK + r] = row < n ? (double)x[row * ni + i] : 0.0;
      }
  size_t n_thr = 1;
  if ((double)n * (double)ni * (double)l->n_out >= THREAD_MIN_MACS) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    n_thr = cpus < 1 ? 1 : cpus > MAX_THREADS ? MAX_THREADS : (size_t)cpus;
    n_thr = n_thr > l->n_out ? l->n_out : n_thr;
  }
  struct lin_job jobs[MAX_THREADS];
  pthread_t tid[MAX_THREADS];
  bool started[MAX_THREADS] = {false};
  for (size_t t = 0; t < n_thr; t++) {
    jobs[t] = (struct lin_job){.l = l, .xt = xt, .n = n, .o0 = l->n_out * t / n_thr,
                               .o1 = l->n_out * (t + 1) / n_thr, .y = y};
    if (t > 0) /* a thread that cannot start is run here */
      started[t] = pthread_create(&tid[t], NULL, lin_worker, &jobs[t]) == 0;
  }
  lin_worker(&jobs[0]);
  for (size_t t = 1; t < n_thr; t++) {
    if (started[t])
      pthread_join(tid[t], NULL);
    else
      lin_worker(&jobs[t]);
  }
  free(xt);
  return 0;
}

/* exact GELU: x · Φ(x) = 0.5 x (1 + erf(x / √2)) */
static void gelu(float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    x[i] = (float)(0.5 * (double)x[i] * (1.0 + erf((double)x[i] * 0.70710678118654752440)));
}

/* Linear → GELU → Linear (the heads' MLPs) over n rows: x [n, a.n_in], y [n, b.n_out]. Returns 0
 * or -ENOMEM. */
static int mlp_rows(const struct ex_omnijev_linear *a, const struct ex_omnijev_linear *b,
                    const float *x, size_t n, float *y) {
  float *tmp = malloc((n * a->n_out + 1) * sizeof *tmp);
  int rc = tmp ? linear_rows(a, x, n, tmp) : -ENOMEM;
  if (!rc) {
    gelu(tmp, n * a->n_out);
    rc = linear_rows(b, tmp, n, y);
  }
  free(tmp);
  return rc;
}

static float sigmoidf_(float x) {
  return (float)(1.0 / (1.0 + exp(-(double)x)));
}

/* The question gates g [n, dh] = tanh(que MLP(zq)) of n questions (zq [n, H]). */
static int gates(const struct ex_omnijev_heads *h, const float *zq, size_t n, float *g) {
  int rc = mlp_rows(&h->que0, &h->que2, zq, n, g);
  for (size_t i = 0; !rc && i < n * h->d_hidden; i++)
    g[i] = tanhf(g[i]);
  return rc;
}

/* OptionScorer's end for one question from its gate g [dh] and option states hk [k, dh] (the opt
 * MLP of u; overwritten): as ex_omnijev_option_scorer. */
static int scorer_end(const struct ex_omnijev_heads *h, float *hk, size_t k, const float *g,
                      const float *feats, int type, float *mu) {
  size_t dh = h->d_hidden;
  float *fk = malloc((k * dh + 1) * sizeof *fk), *s = malloc((k + 1) * sizeof *s),
        *sc = malloc((k + 1) * sizeof *sc), *fl = malloc((k + 1) * sizeof *fl);
  int rc = fk && s && sc && fl ? 0 : -ENOMEM;
  if (!rc)
    rc = linear_rows(&h->feat, feats, k, fk);
  for (size_t i = 0; !rc && i < k * dh; i++)
    hk[i] = hk[i] * g[i % dh] + fk[i];
  if (!rc)
    rc = linear_rows(&h->score, hk, k, sc);
  if (!rc)
    rc = linear_rows(&h->feat_lin, feats, k, fl);
  float t = expf(h->log_tau[type]);
  for (size_t r = 0; !rc && r < k; r++)
    s[r] = (sc[r] + fl[r]) / t;
  if (!rc && type == 0) {
    mu[0] = sigmoidf_(s[0]); /* softmax over [s, 0] */
  } else if (!rc) {
    float a;
    rc = linear_rows(&h->abstain, g, 1, &a);
    s[k] = a / t;
    double m = s[0], z = 0.0;
    for (size_t r = 1; r <= k; r++)
      m = s[r] > m ? s[r] : m;
    for (size_t r = 0; r <= k; r++)
      z += exp((double)s[r] - m);
    for (size_t r = 0; r < k; r++)
      mu[r] = (float)(exp((double)s[r] - m) / z);
  }
  free(fk), free(s), free(sc), free(fl);
  return rc;
}

int ex_omnijev_option_scorer(const struct ex_omnijev_heads *h, const float *u, size_t k,
                             const float *zq, const float *feats, int type, float *mu) {
  if ((type != 0 && type != 1) || k == 0 || (type == 0 && k != 1))
    return -EINVAL;
  size_t dh = h->d_hidden;
  float *g = malloc(dh * sizeof *g), *hk = malloc(k * dh * sizeof *hk);
  int rc = g && hk ? 0 : -ENOMEM;
  if (!rc)
    rc = gates(h, zq, 1, g);
  if (!rc)
    rc = mlp_rows(&h->opt0, &h->opt2, u, k, hk);
  if (!rc)
    rc = scorer_end(h, hk, k, g, feats, type, mu);
  free(g), free(hk);
  return rc;
}

/* softplus with β = 1 and threshold 20 */
static float softplusf_(float x) {
  return x > 20.0f ? x : (float)log1p(exp((double)x));
}

/* OrdinalScoreHead's end from z (the z MLP of zq) and r [k] (the cut MLP of each u row). */
static void ordinal_end(float z, const float *r, size_t k, float *mu) {
  float r0 = r[0], acc = 0.0f; /* cumulative sum of the softplus gaps, float32 as torch.cumsum */
  float prev = 0.0f;
  for (size_t l = 0; l < k; l++) {
    if (l > 0)
      acc += softplusf_(r[l]);
    float theta = l == 0 ? r0 : r0 + acc;
    float c = l + 1 < k ? sigmoidf_(theta - z) : 1.0f;
    float p = l == 0 ? c : c - prev;
    mu[l] = p < 1e-8f ? 1e-8f : p;
    prev = c;
  }
}

int ex_omnijev_ordinal(const struct ex_omnijev_heads *h, const float *u, size_t k, const float *zq,
                       float *mu) {
  if (k == 0)
    return -EINVAL;
  float *r = malloc(k * sizeof *r), z;
  int rc = r ? mlp_rows(&h->z0, &h->z2, zq, 1, &z) : -ENOMEM;
  if (!rc)
    rc = mlp_rows(&h->cut0, &h->cut2, u, k, r);
  if (!rc)
    ordinal_end(z, r, k, mu);
  free(r);
  return rc;
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

/* The log-probabilities a row of `a` reads (positions o−1 … c−2 predict x_{o+1} (first, from
 * before the marker), then x_{o+1} … x_{c−1}): *ret_n = 0 for a score question, an empty option
 * text or a bad layout. */
static void lm_targets(const void *acc, int32_t position, const int32_t *ids, uint32_t n,
                       uint32_t *ret_first, int32_t *tg, size_t *ret_n) {
  const struct acc *a = acc;
  *ret_n = 0;
  *ret_first = 0;
  if (a->type == 2 || position < 1 || (uint32_t)position + 2 > n)
    return;
  uint32_t o = (uint32_t)position, c = n - 1, n_in = c - o - 1;
  if (n_in == 0)
    return;
  tg[0] = ids[o + 1];
  for (uint32_t i = 1; i <= n_in; i++)
    tg[i] = ids[o + i];
  *ret_first = o - 1;
  *ret_n = n_in + 1;
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
  int32_t *tg = malloc(n * sizeof *tg);
  float *lp = malloc(n * sizeof *lp);
  int rc = tg && lp ? 0 : -ENOMEM;
  uint32_t first = 0;
  size_t np = 0;
  if (!rc) {
    lm_targets(a, position, ids, n, &first, tg, &np);
    rc = lm->target_logprobs(lm, first, tg, np, lp, diag);
    if (rc == -EINVAL)
      rc = cm_diag_set(diag, -CM_EPROGRAM, "omnijev readout: option token outside the vocabulary");
  }
  if (!rc) {
    float s = 0.0f;
    for (size_t i = 1; i < np; i++)
      s += lp[i];
    a->sum_lp[k] = s;
    a->first[k] = lp[0];
  }
  free(tg), free(lp);
  return rc;
}

/* Every readout's rows in one batched pass per MLP (the opt and cut MLPs over all option rows,
 * the que and z MLPs over all questions), then each question's end: the same bits as one finish
 * per readout, since a row's chains do not depend on its neighbours (linear_rows). */
static int finish_all(const void *state, void *const *accs, size_t n, float *const *outs,
                      struct cm_diag *diag) {
  const struct ex_omnijev_heads *h = state;
  size_t H = h->hidden, dh = h->d_hidden, m_opt = 0, n_opt = 0, m_ord = 0, n_ord = 0;
  for (size_t i = 0; i < n; i++) {
    const struct acc *a = accs[i];
    if (a->type == 2)
      m_ord += a->k, n_ord++;
    else
      m_opt += a->k, n_opt++;
  }
  float *u_opt = malloc((m_opt * H + 1) * sizeof(float)), *z_opt = malloc((n_opt * H + 1) * sizeof(float));
  float *hk = malloc((m_opt * dh + 1) * sizeof(float)), *g = malloc((n_opt * dh + 1) * sizeof(float));
  float *u_ord = malloc((m_ord * H + 1) * sizeof(float)), *z_ord = malloc((n_ord * H + 1) * sizeof(float));
  float *r_ord = malloc((m_ord + 1) * sizeof(float)), *zz = malloc((n_ord + 1) * sizeof(float));
  int rc = u_opt && z_opt && hk && g && u_ord && z_ord && r_ord && zz ? 0 : -ENOMEM;
  size_t mo = 0, no = 0, mr = 0, nr = 0;
  for (size_t i = 0; !rc && i < n; i++) {
    const struct acc *a = accs[i];
    bool ord = a->type == 2;
    memcpy((ord ? u_ord + mr * H : u_opt + mo * H), a->u, (size_t)a->k * H * sizeof(float));
    memcpy((ord ? z_ord + nr * H : z_opt + no * H), a->zq, H * sizeof(float));
    if (ord)
      mr += a->k, nr++;
    else
      mo += a->k, no++;
  }
  if (!rc && n_opt && !(rc = mlp_rows(&h->opt0, &h->opt2, u_opt, m_opt, hk)))
    rc = gates(h, z_opt, n_opt, g);
  if (!rc && n_ord && !(rc = mlp_rows(&h->cut0, &h->cut2, u_ord, m_ord, r_ord)))
    rc = mlp_rows(&h->z0, &h->z2, z_ord, n_ord, zz);
  mo = no = mr = nr = 0;
  for (size_t i = 0; !rc && i < n; i++) {
    struct acc *a = accs[i];
    if (a->type == 2) {
      ordinal_end(zz[nr++], r_ord + mr, a->k, outs[i]);
      mr += a->k;
      continue;
    }
    float *feats = outs[i] + a->k;
    ex_lm_option_feats(a->sum_lp, a->n_in, a->first, a->k, feats);
    rc = scorer_end(h, hk + mo * dh, a->k, g + no * dh, feats, a->type, outs[i]);
    mo += a->k, no++;
  }
  free(u_opt), free(z_opt), free(hk), free(g), free(u_ord), free(z_ord), free(r_ord), free(zz);
  return rc ? cm_diag_set(diag, rc, "omnijev heads: %s", cm_strerror(rc)) : 0;
}

static int finish(const void *state, void *acc, float *out, struct cm_diag *diag) {
  return finish_all(state, &acc, 1, &out, diag);
}

static const struct ex_head_group group = {
    .shape = shape, .begin = begin, .row = row, .lm_targets = lm_targets, .finish = finish,
    .finish_all = finish_all,
    .free_acc = free_acc};

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
