/* The Qwen3.5 text forward over struct ex_backend (see ex_qwen35.h): decoder layers with gated
 * full attention or Gated DeltaNet mixers, SwiGLU MLPs, the final norm, LM-head logits, and the
 * per-sequence state (KV cache, conv windows, recurrent states) that snapshots copy. Scratch is
 * allocated per call: this is the reference, not the hot path. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gdn.h" /* ex_cpu_gdn_chunked_scratch: the scratch of gdn_chunked */
#include "ex_qwen35.h"

/* ---- state ---- */

void ex_qwen35_state_free(struct ex_qwen35_state *state) {
  if (!state)
    return;
  for (size_t i = 0; i < state->n_layers; i++) {
    free(state->layers[i].k);
    free(state->layers[i].v);
    free(state->layers[i].conv);
    free(state->layers[i].s);
  }
  free(state->layers);
  free(state);
}

static size_t conv_dim(const struct ex_qwen35_config *c) {
  return (size_t)(2 * c->lin_k_heads * c->lin_dk + c->lin_v_heads * c->lin_dv);
}

static size_t kv_row(const struct ex_qwen35_config *c) {
  return (size_t)c->n_kv_heads * (size_t)c->head_dim;
}

int ex_qwen35_state_new(const struct ex_qwen35_model *model, struct ex_qwen35_state **ret_state) {
  const struct ex_qwen35_config *c = &model->cfg;
  struct ex_qwen35_state *s = calloc(1, sizeof(*s));
  if (!s)
    return -ENOMEM;
  s->layers = calloc((size_t)c->n_layers, sizeof(*s->layers));
  if (!s->layers)
    goto fail;
  s->n_layers = (size_t)c->n_layers;
  for (int i = 0; i < c->n_layers; i++) {
    if (c->full_attn[i])
      continue;
    s->layers[i].conv = calloc((size_t)(c->conv_kernel - 1) * conv_dim(c) + 1, sizeof(float));
    s->layers[i].s =
        calloc((size_t)c->lin_v_heads * (size_t)c->lin_dk * (size_t)c->lin_dv, sizeof(float));
    if (!s->layers[i].conv || !s->layers[i].s)
      goto fail;
  }
  *ret_state = s;
  return 0;
fail:
  ex_qwen35_state_free(s);
  return -ENOMEM;
}

static float *dup_floats(const float *src, size_t n) {
  float *p = malloc((n ? n : 1) * sizeof(float));
  if (p && n)
    memcpy(p, src, n * sizeof(float));
  return p;
}

int ex_qwen35_state_clone(const struct ex_qwen35_state *src, const struct ex_qwen35_model *model,
                          struct ex_qwen35_state **ret_state) {
  const struct ex_qwen35_config *c = &model->cfg;
  struct ex_qwen35_state *s = calloc(1, sizeof(*s));
  if (!s)
    return -ENOMEM;
  s->n_tokens = src->n_tokens;
  s->rope_delta = src->rope_delta;
  s->cap = src->n_tokens;
  s->layers = calloc(src->n_layers, sizeof(*s->layers));
  if (!s->layers)
    goto fail;
  s->n_layers = src->n_layers;
  for (size_t i = 0; i < src->n_layers; i++) {
    const struct ex_qwen35_layer_state *a = &src->layers[i];
    struct ex_qwen35_layer_state *b = &s->layers[i];
    if (c->full_attn[i]) {
      b->k = dup_floats(a->k, src->n_tokens * kv_row(c));
      b->v = dup_floats(a->v, src->n_tokens * kv_row(c));
      if (!b->k || !b->v)
        goto fail;
    } else {
      b->conv = dup_floats(a->conv, (size_t)(c->conv_kernel - 1) * conv_dim(c));
      b->s = dup_floats(a->s, (size_t)c->lin_v_heads * (size_t)c->lin_dk * (size_t)c->lin_dv);
      if (!b->conv || !b->s)
        goto fail;
    }
  }
  *ret_state = s;
  return 0;
fail:
  ex_qwen35_state_free(s);
  return -ENOMEM;
}

static int state_reserve(const struct ex_qwen35_config *c, struct ex_qwen35_state *s, size_t need) {
  if (need <= s->cap)
    return 0;
  size_t cap = s->cap ? s->cap : 64;
  while (cap < need)
    cap *= 2;
  for (size_t i = 0; i < s->n_layers; i++) {
    if (!c->full_attn[i])
      continue;
    float *k = realloc(s->layers[i].k, cap * kv_row(c) * sizeof(float));
    if (!k)
      return -ENOMEM;
    s->layers[i].k = k;
    float *v = realloc(s->layers[i].v, cap * kv_row(c) * sizeof(float));
    if (!v)
      return -ENOMEM;
    s->layers[i].v = v;
  }
  s->cap = cap;
  return 0;
}

/* ---- forward ---- */

/* Scratch for one call of n rows. */
struct work {
  float *h;       /* [n, H] residual stream */
  float *a;       /* [n, H] normed input of a sublayer */
  float *mix;     /* [n, max(H, ...)] sublayer output */
  float *big;     /* [n, big_w] projection outputs */
  float *big2;    /* [n, big_w] second projection / conv output */
  float *q;       /* [n, max heads·dims] */
  float *k;       /* [n, ...] */
  float *gate;    /* [n, Hq·D] or z [n, Hv·dv] */
  float *o;       /* [n, max(Hq·D, Hv·dv)] */
  float *beta;    /* [n, Hv] */
  float *g;       /* [n, Hv] */
  float *cos_t;   /* [n, rot/2] */
  float *sin_t;   /* [n, rot/2] */
  float *scratch; /* attention scores / GDN chunk scratch */
  float *lora;    /* [n, max rank] */
  float *kv;      /* [2, n, Hkv·D] new K then V rows of a full-attention layer */
  int32_t *pos;   /* [3, n] default text positions of one sequence */
};

static void rnd(const struct ex_qwen35_model *m, float *x, size_t n) {
  if (m->round_bf16)
    m->be->round_bf16(x, n);
}

static void lin(const struct ex_qwen35_model *m, const struct ex_linear *l, const float *x,
                size_t n, float *y, float *tmp) {
  m->be->linear(x, l->w, NULL, y, n, l->n_in, l->n_out);
  if (l->rank)
    rnd(m, y, n * l->n_out); /* PEFT: the bf16 base output, plus the fp32 branch, rounded again */
  if (l->rank)
    m->be->linear_lora_add(x, l->lora_a, l->lora_b, m->lora_scale, y, tmp, n, l->n_in, l->rank,
                           l->n_out);
  rnd(m, y, n * l->n_out);
}

static size_t max_rank(const struct ex_qwen35_model *m) {
  size_t r = 0;
  for (int i = 0; i < m->cfg.n_layers; i++) {
    const struct ex_qwen35_layer *l = &m->layers[i];
    const struct ex_linear *ls[] = {&l->gate, &l->up,  &l->down, &l->q, &l->k, &l->v,
                                    &l->o,    &l->qkv, &l->z,    &l->b, &l->a, &l->out};
    for (size_t j = 0; j < sizeof(ls) / sizeof(ls[0]); j++)
      if (ls[j]->rank > r)
        r = ls[j]->rank;
  }
  return r;
}

/* One sequence of a packed call as the layers see it. */
struct pseq {
  struct ex_qwen35_state *st; /* the state this call advances (the caller's or a working copy) */
  size_t start;               /* first packed row */
  size_t n;                   /* rows */
  size_t n_past;              /* tokens the state held before the call */
  bool chunked;               /* GDN chunked even for one token on a populated state */
};

static void attn_layer(const struct ex_qwen35_model *m, const struct ex_qwen35_layer *l, int li,
                       const struct pseq *sq, size_t ns, size_t n, struct work *w) {
  const struct ex_qwen35_config *c = &m->cfg;
  size_t hq = (size_t)c->n_heads, hkv = (size_t)c->n_kv_heads, d = (size_t)c->head_dim;
  lin(m, &l->q, w->a, n, w->big, w->lora);
  /* per head: rows [2hD, 2hD+D) query, [2hD+D, 2hD+2D) gate */
  for (size_t t = 0; t < n; t++)
    for (size_t h = 0; h < hq; h++) {
      const float *src = w->big + (t * hq + h) * 2 * d;
      memcpy(w->q + (t * hq + h) * d, src, d * sizeof(float));
      memcpy(w->gate + (t * hq + h) * d, src + d, d * sizeof(float));
    }
  /* new K/V rows of every sequence, normed and rotated row by row, then appended to each cache */
  float *kc = w->kv, *vc = w->kv + n * hkv * d;
  lin(m, &l->k, w->a, n, kc, w->lora);
  lin(m, &l->v, w->a, n, vc, w->lora);
  m->be->rms_norm(w->q, l->q_norm, c->rms_eps, w->q, n * hq, d);
  rnd(m, w->q, n * hq * d);
  m->be->rms_norm(kc, l->k_norm, c->rms_eps, kc, n * hkv, d);
  rnd(m, kc, n * hkv * d);
  /* bf16: R(R(x·c) ∓ R(x'·s)) per element (spec §5.1 step 4) */
  (m->round_bf16 ? m->be->rope_apply_bf16 : m->be->rope_apply)(w->q, n, hq, d,
                                                               (size_t)c->rot_dims, w->cos_t,
                                                               w->sin_t);
  (m->round_bf16 ? m->be->rope_apply_bf16 : m->be->rope_apply)(kc, n, hkv, d, (size_t)c->rot_dims,
                                                               w->cos_t, w->sin_t);
  for (size_t i = 0; i < ns; i++) {
    struct ex_qwen35_layer_state *ls = &sq[i].st->layers[li];
    size_t row = hkv * d, off = sq[i].start * row;
    memcpy(ls->k + sq[i].n_past * row, kc + off, sq[i].n * row * sizeof(float));
    memcpy(ls->v + sq[i].n_past * row, vc + off, sq[i].n * row * sizeof(float));
    /* bf16: sdpa's rounded weights, R(o), R(R(o)·R(sigmoid(gate))) (spec §5.1 steps 6-7) */
    (m->round_bf16 ? m->be->attention_gated_bf16 : m->be->attention_gated)(
        w->q + sq[i].start * hq * d, w->gate + sq[i].start * hq * d, ls->k, ls->v,
        w->o + sq[i].start * hq * d, w->scratch, sq[i].n, sq[i].n_past, hq, hkv, d,
        (float)(1.0 / sqrt((double)d)));
  }
  lin(m, &l->o, w->o, n, w->mix, w->lora);
}

static void gdn_layer(const struct ex_qwen35_model *m, const struct ex_qwen35_layer *l, int li,
                      const struct pseq *sq, size_t ns, size_t n, struct work *w) {
  const struct ex_qwen35_config *c = &m->cfg;
  struct ex_gdn_dims dims = {(size_t)c->lin_k_heads, (size_t)c->lin_v_heads, (size_t)c->lin_dk,
                             (size_t)c->lin_dv};
  size_t kd = dims.n_k_heads * dims.dk, vd = dims.n_v_heads * dims.dv, cd = conv_dim(c);
  size_t hv = dims.n_v_heads;
  lin(m, &l->qkv, w->a, n, w->big, w->lora);
  lin(m, &l->z, w->a, n, w->gate, w->lora);
  lin(m, &l->b, w->a, n, w->beta, w->lora);
  lin(m, &l->a, w->a, n, w->g, w->lora);
  /* bf16: the convolution and the SiLU each round (spec §4.2) */
  for (size_t i = 0; i < ns; i++)
    (m->round_bf16 ? m->be->causal_conv1d_silu_bf16 : m->be->causal_conv1d_silu)(
        w->big + sq[i].start * cd, l->conv, sq[i].st->layers[li].conv, w->big2 + sq[i].start * cd,
        sq[i].n, cd, (size_t)c->conv_kernel);
  /* split the conv output into contiguous q [n,Hk,dk], k [n,Hk,dk], v [n,Hv,dv] */
  float *v = w->mix; /* reused: mix is free until out_proj */
  for (size_t t = 0; t < n; t++) {
    const float *row = w->big2 + t * cd;
    memcpy(w->q + t * kd, row, kd * sizeof(float));
    memcpy(w->k + t * kd, row + kd, kd * sizeof(float));
    memcpy(v + t * vd, row + 2 * kd, vd * sizeof(float));
  }
  m->be->gdn_prepare(w->q, w->k, w->beta, w->g, l->a_log, l->dt_bias, w->beta, w->g, n, &dims);
  rnd(m, w->beta, n * hv);
  for (size_t i = 0; i < ns; i++) {
    size_t t0 = sq[i].start;
    float *state = sq[i].st->layers[li].s;
    bool recurrent = m->gdn_mode == EX_GDN_RECURRENT ||
                     (m->gdn_mode == EX_GDN_AUTO && !sq[i].chunked && sq[i].n == 1 &&
                      sq[i].n_past > 0);
    if (recurrent)
      m->be->gdn_recurrent(w->q + t0 * kd, w->k + t0 * kd, v + t0 * vd, w->beta + t0 * hv,
                           w->g + t0 * hv, state, w->o + t0 * vd, sq[i].n, &dims);
    else
      m->be->gdn_chunked(w->q + t0 * kd, w->k + t0 * kd, v + t0 * vd, w->beta + t0 * hv,
                         w->g + t0 * hv, state, w->o + t0 * vd, sq[i].n, EX_QWEN35_GDN_CHUNK,
                         &dims, w->scratch);
  }
  rnd(m, w->o, n * vd);
  /* bf16: three roundings (spec §4.8) */
  (m->round_bf16 ? m->be->gated_rms_norm_bf16 : m->be->gated_rms_norm)(
      w->o, w->gate, l->gdn_norm, c->rms_eps, w->o, n * hv, dims.dv);
  lin(m, &l->out, w->o, n, w->mix, w->lora);
}

static void mlp(const struct ex_qwen35_model *m, const struct ex_qwen35_layer *l, size_t n,
                struct work *w) {
  size_t in = (size_t)m->cfg.intermediate_size;
  lin(m, &l->gate, w->a, n, w->big, w->lora);
  lin(m, &l->up, w->a, n, w->big2, w->lora);
  /* bf16: p = R(R(silu(g))·u) (spec §3.4) */
  (m->round_bf16 ? m->be->swiglu_bf16 : m->be->swiglu)(w->big, w->big2, w->big, n * in);
  lin(m, &l->down, w->big, n, w->mix, w->lora);
}

static void work_free(struct work *w) {
  free(w->h);
  free(w->a);
  free(w->mix);
  free(w->big);
  free(w->big2);
  free(w->q);
  free(w->k);
  free(w->gate);
  free(w->o);
  free(w->beta);
  free(w->g);
  free(w->cos_t);
  free(w->sin_t);
  free(w->scratch);
  free(w->lora);
  free(w->kv);
  free(w->pos);
}

static size_t zmax(size_t a, size_t b) {
  return a > b ? a : b;
}

static int work_alloc(const struct ex_qwen35_model *m, size_t n, size_t n_ctx, struct work *w) {
  const struct ex_qwen35_config *c = &m->cfg;
  size_t h = (size_t)c->hidden_size, d = (size_t)c->head_dim, hq = (size_t)c->n_heads;
  size_t vd = (size_t)(c->lin_v_heads * c->lin_dv), kd = (size_t)(c->lin_k_heads * c->lin_dk);
  size_t big = zmax(zmax(hq * 2 * d, conv_dim(c)), (size_t)c->intermediate_size);
  size_t qw = zmax(hq * d, kd), ow = zmax(hq * d, vd);
  struct ex_gdn_dims dims = {(size_t)c->lin_k_heads, (size_t)c->lin_v_heads, (size_t)c->lin_dk,
                             (size_t)c->lin_dv};
  size_t sc = zmax(n_ctx, ex_cpu_gdn_chunked_scratch(EX_QWEN35_GDN_CHUNK, &dims));
  size_t f = (size_t)c->rot_dims / 2;
  memset(w, 0, sizeof(*w));
  w->h = malloc(n * h * sizeof(float));
  w->a = malloc(n * h * sizeof(float));
  w->mix = malloc(n * zmax(h, vd) * sizeof(float));
  w->big = malloc(n * big * sizeof(float));
  w->big2 = malloc(n * big * sizeof(float));
  w->q = malloc(n * qw * sizeof(float));
  w->k = malloc(n * kd * sizeof(float));
  w->gate = malloc(n * ow * sizeof(float));
  w->o = malloc(n * ow * sizeof(float));
  w->beta = malloc(n * (size_t)c->lin_v_heads * sizeof(float));
  w->g = malloc(n * (size_t)c->lin_v_heads * sizeof(float));
  w->cos_t = malloc(n * f * sizeof(float));
  w->sin_t = malloc(n * f * sizeof(float));
  w->scratch = malloc(sc * sizeof(float));
  w->lora = malloc(n * zmax(max_rank(m), 1) * sizeof(float));
  w->kv = malloc(2 * n * (size_t)c->n_kv_heads * d * sizeof(float));
  w->pos = malloc(3 * n * sizeof(int32_t));
  if (!w->h || !w->a || !w->mix || !w->big || !w->big2 || !w->q || !w->k || !w->gate || !w->o ||
      !w->beta || !w->g || !w->cos_t || !w->sin_t || !w->scratch || !w->lora || !w->kv ||
      !w->pos) {
    work_free(w);
    memset(w, 0, sizeof(*w));
    return -ENOMEM;
  }
  return 0;
}

int ex_qwen35_embed(const struct ex_qwen35_model *model, const int32_t *tokens, size_t n,
                    float *out, struct cm_diag *diag) {
  const struct ex_qwen35_config *c = &model->cfg;
  for (size_t t = 0; t < n; t++)
    if (tokens[t] < 0 || tokens[t] >= c->vocab_size)
      return cm_diag_set(diag, -EINVAL, "token %d at index %zu outside the vocabulary [0, %d)",
                         tokens[t], t, c->vocab_size);
  return model->be->embed(model->embed, (size_t)c->vocab_size, tokens, out, n,
                          (size_t)c->hidden_size);
}

/* The packed forward over layers [l0, l1) from `in` (embeddings when l0 = 0, else the residual
 * rows entering layer l0, packed in seqs order). ret_resid [l1 − l0 + 1, Σn, H] or NULL: the
 * input, then the residual stream after each layer; ret_hidden [Σn, H] or NULL: the final-norm
 * rows (l1 = L only). */
static int forward_packed_layers(const struct ex_qwen35_model *m,
                                 const struct ex_qwen35_seq *seqs, size_t n_seqs, const float *in,
                                 int l0, int l1, float *ret_resid, float *ret_hidden,
                                 struct cm_diag *diag) {
  const struct ex_qwen35_config *c = &m->cfg;
  if (n_seqs == 0)
    return cm_diag_set(diag, -EINVAL, "forward: no sequences");
  size_t h = (size_t)c->hidden_size, n = 0, n_ctx = 0, f = (size_t)c->rot_dims / 2;
  struct pseq *sq = calloc(n_seqs, sizeof(*sq));
  if (!sq)
    return cm_diag_set(diag, -ENOMEM, "forward: out of memory for %zu sequences", n_seqs);
  struct work w = {0};
  int r = 0;
  for (size_t i = 0; i < n_seqs && !r; i++) {
    const struct ex_qwen35_seq *q = &seqs[i];
    if (q->n == 0 || (q->advance && !q->state))
      r = cm_diag_set(diag, -EINVAL, "forward: sequence %zu has no rows or advances no state", i);
    for (size_t j = 0; !r && q->advance && j < n_seqs; j++)
      if (j != i && seqs[j].state == q->state)
        r = cm_diag_set(diag, -EINVAL, "forward: sequence %zu advances a state %zu uses", i, j);
    if (r)
      break;
    /* a sequence that only reads its state runs on a working copy (a fresh state for none) */
    if (q->advance)
      sq[i].st = q->state;
    else if ((r = q->state ? ex_qwen35_state_clone(q->state, m, &sq[i].st)
                           : ex_qwen35_state_new(m, &sq[i].st)))
      break;
    sq[i].start = n;
    sq[i].n = q->n;
    sq[i].n_past = sq[i].st->n_tokens;
    sq[i].chunked = q->chunked;
    n += q->n;
    n_ctx = sq[i].n_past + q->n > n_ctx ? sq[i].n_past + q->n : n_ctx;
    r = state_reserve(c, sq[i].st, sq[i].n_past + q->n);
  }
  if (r || (r = work_alloc(m, n, n_ctx, &w))) {
    r = cm_diag_set(diag, r, "forward: out of memory for %zu rows", n);
    goto out;
  }
  for (size_t i = 0; i < n_seqs; i++) {
    const int32_t *pos = seqs[i].pos;
    if (!pos) {
      for (size_t t = 0; t < sq[i].n; t++) {
        int32_t p = (int32_t)((int64_t)(sq[i].n_past + t) + sq[i].st->rope_delta);
        w.pos[t] = w.pos[sq[i].n + t] = w.pos[2 * sq[i].n + t] = p;
      }
      pos = w.pos;
    }
    r = m->be->mrope_tables(pos, sq[i].n, c->rot_dims, c->rope_theta, c->mrope_section,
                            w.cos_t + sq[i].start * f, w.sin_t + sq[i].start * f);
    if (r) {
      r = cm_diag_set(diag, r, "forward: bad rotary dims %d", c->rot_dims);
      goto out;
    }
  }
  rnd(m, w.cos_t, n * f);
  rnd(m, w.sin_t, n * f);
  memcpy(w.h, in, n * h * sizeof(float));
  if (ret_resid)
    memcpy(ret_resid, w.h, n * h * sizeof(float));
  for (int i = l0; i < l1; i++) {
    const struct ex_qwen35_layer *l = &m->layers[i];
    m->be->rms_norm(w.h, l->input_norm, c->rms_eps, w.a, n, h);
    rnd(m, w.a, n * h);
    if (l->full_attn)
      attn_layer(m, l, i, sq, n_seqs, n, &w);
    else
      gdn_layer(m, l, i, sq, n_seqs, n, &w);
    for (size_t x = 0; x < n * h; x++)
      w.h[x] += w.mix[x];
    rnd(m, w.h, n * h);
    m->be->rms_norm(w.h, l->post_norm, c->rms_eps, w.a, n, h);
    rnd(m, w.a, n * h);
    mlp(m, l, n, &w);
    for (size_t x = 0; x < n * h; x++)
      w.h[x] += w.mix[x];
    rnd(m, w.h, n * h);
    if (ret_resid)
      memcpy(ret_resid + (size_t)(i - l0 + 1) * n * h, w.h, n * h * sizeof(float));
  }
  if (ret_hidden) {
    m->be->rms_norm(w.h, m->final_norm, c->rms_eps, ret_hidden, n, h);
    rnd(m, ret_hidden, n * h);
  }
  for (size_t i = 0; i < n_seqs; i++)
    sq[i].st->n_tokens = sq[i].n_past + sq[i].n;
out:
  for (size_t i = 0; i < n_seqs; i++)
    if (!seqs[i].advance)
      ex_qwen35_state_free(sq[i].st);
  free(sq);
  work_free(&w);
  return r;
}

int ex_qwen35_forward_packed(const struct ex_qwen35_model *model,
                             const struct ex_qwen35_seq *seqs, size_t n_seqs, const float *embeds,
                             float *ret_hidden, struct cm_diag *diag) {
  return forward_packed_layers(model, seqs, n_seqs, embeds, 0, model->cfg.n_layers, NULL,
                               ret_hidden, diag);
}

int ex_qwen35_forward(const struct ex_qwen35_model *model, struct ex_qwen35_state *state,
                      const float *embeds, const int32_t *pos, size_t n, float *ret_hidden,
                      struct cm_diag *diag) {
  if (n == 0)
    return cm_diag_set(diag, -EINVAL, "forward: no rows");
  struct ex_qwen35_seq seq = {.state = state, .advance = true, .n = n, .pos = pos};
  return ex_qwen35_forward_packed(model, &seq, 1, embeds, ret_hidden, diag);
}

int ex_qwen35_forward_residual(const struct ex_qwen35_model *model, struct ex_qwen35_state *state,
                               const float *embeds, const int32_t *pos, size_t n,
                               float *ret_hidden, float *ret_residual, struct cm_diag *diag) {
  if (n == 0)
    return cm_diag_set(diag, -EINVAL, "forward: no rows");
  struct ex_qwen35_seq seq = {.state = state, .advance = true, .n = n, .pos = pos};
  return forward_packed_layers(model, &seq, 1, embeds, 0, model->cfg.n_layers, ret_residual,
                               ret_hidden, diag);
}

int ex_qwen35_layer_forward(const struct ex_qwen35_model *model, int layer, const float *in,
                            const int32_t *pos, size_t n, float *ret_out, struct cm_diag *diag) {
  if (layer < 0 || layer >= model->cfg.n_layers)
    return cm_diag_set(diag, -EINVAL, "layer %d outside the model's %d layers", layer,
                       model->cfg.n_layers);
  size_t nh = n * (size_t)model->cfg.hidden_size;
  struct ex_qwen35_state *st = NULL;
  float *resid = malloc((2 * nh + 1) * sizeof(float));
  int r = resid ? ex_qwen35_state_new(model, &st) : -ENOMEM;
  struct ex_qwen35_seq seq = {.state = st, .advance = true, .n = n, .pos = pos};
  if (!r)
    r = forward_packed_layers(model, &seq, 1, in, layer, layer + 1, resid, NULL, diag);
  if (!r)
    memcpy(ret_out, resid + nh, nh * sizeof(float));
  else if (!resid || !st)
    cm_diag_set(diag, r, "layer forward: out of memory for %zu rows", n);
  ex_qwen35_state_free(st);
  free(resid);
  return r;
}

void ex_qwen35_logits(const struct ex_qwen35_model *model, const float *hidden, size_t n,
                      float *logits) {
  const struct ex_qwen35_config *c = &model->cfg;
  model->be->linear(hidden, model->lm_head, NULL, logits, n, (size_t)c->hidden_size,
                    (size_t)c->vocab_size);
  rnd(model, logits, n * (size_t)c->vocab_size);
}

void ex_top_k(const float *x, size_t n, size_t k, int32_t *ret_idx, float *ret_val) {
  size_t filled = 0;
  for (size_t i = 0; i < n; i++) {
    float v = x[i];
    if (filled == k && !(v > ret_val[k - 1]))
      continue;
    size_t j = filled < k ? filled++ : k - 1;
    while (j > 0 && v > ret_val[j - 1]) {
      ret_val[j] = ret_val[j - 1];
      ret_idx[j] = ret_idx[j - 1];
      j--;
    }
    ret_val[j] = v;
    ret_idx[j] = (int32_t)i;
  }
}
