/* Whole-model twin test of the CUDA engine (exc_qwen35) on seeded tiny-A models written as BF16
 * safetensors. In the fp32-residual numerics, against the float32 CPU forward on the same
 * (bf16-valued) weights:
 *  - one pass of 1, 65 and 200 tokens: every final-norm hidden row and the logits within bf16
 *    tolerance (relative L2 ≤ 2e-2), the same top-1 id at the last position;
 *  - continuation: prefix 70 (and 64) into a snapshot, clone, 130 (136) more rows = the one pass
 *    within bf16 rounding (relative L2 ≤ 1e-2);
 *  - packed rows: 5 rows of 1..65 tokens continuing one snapshot in one launch are bit-identical
 *    to each row run alone (GEMM algorithms fixed per shape), and match the CPU continuation;
 *  - label logits and token log-probs of the last forward agree with its full logits;
 *  - limits and bad ids are refused; the per-op profile counts every op of one forward.
 * In the ref-bf16 numerics (the default), against the CPU forward with round_bf16 (its twin: the
 * same rounding points): one pass of 1, 65 and 200 tokens within REF_TOL, closer to it than to the
 * float32 forward, every hidden value and logit a bf16 value, the same top-1 id; continuation at
 * 64 bit-identical; packed rows bit-identical to single rows. In both numerics, layer by layer
 * (s1-forward's layer tools): the residual stream of a 130-token forward against its CPU twin's,
 * each layer run alone on the dumped input rows bit-identical to the dumped output, and within the
 * twin tolerance of the CPU layer run alone on the same input. Models:
 * ratio 2 untied vocab 1000, ratio 3 tied vocab 1001 (padded LM head, padded [z|b|a] projection).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cm_safetensors.h"
#include "exc_qwen35.h"
#include "twin.h"
#include "qwen35_testmodel.h"

#define HID_TOL 2e-2 /* bf16 activations and GEMM inputs vs float32: relative L2 of hidden rows */
#define CONT_TOL                                                                                   \
  1e-2 /* continuation vs one pass, both on the GPU: chunk grid and key order only                 \
        */
/* ref-bf16 engine vs the round_bf16 CPU forward: both round at the same points, so they differ
 * only by accumulation order (GEMM, norms, GDN) and the bf16 P of the attention kernel. In bf16
 * one such difference flips a rounding, and the flip spreads. Measured on the CPU by
 * tests/model/test_bf16_noise.c (suite unit, 2026-11-29): the round_bf16 forward of these two
 * models with relative noise 2^-20 on every GEMM and norm output and 2^-10 on the attention
 * output, 5 noise seeds at 1, 65 and 200 tokens, moves 0.9e-3 to 4.4e-3 (hidden rows, rel L2) and
 * 1.3e-3 to 6.6e-3 (last logits) from the clean one, while the clean forward is 7.1e-3 to 8.9e-3
 * from the float32 one. REF_TOL is more than twice that spread; REF_RATIO bounds
 * d(ref, round) / d(ref, float32) on the 200-token pass (noise: 0.35 to 0.52; an engine not
 * rounding like its twin sits near 1). */
#define REF_TOL 1.5e-2
#define REF_RATIO 0.8

struct wr {
  struct cm_safetensors_writer *w;
  uint16_t **bufs; /* owned bf16 copies */
  size_t n_bufs;
};

static void add(struct wr *w, const char *name, const float *x, int nd, const int64_t *shape) {
  size_t n = 1;
  for (int i = 0; i < nd; i++)
    n *= (size_t)shape[i];
  uint16_t *b = malloc(n * 2 + 2);
  tw_to_bf16(x, b, n);
  w->bufs = realloc(w->bufs, (w->n_bufs + 1) * sizeof(*w->bufs));
  w->bufs[w->n_bufs++] = b;
  TW_OK(cm_safetensors_writer_add(w->w, name, CM_DTYPE_BF16, nd, shape, b));
}

static void add_lin(struct wr *w, int layer, const char *rel, const struct ex_linear *l) {
  char name[160];
  snprintf(name, sizeof(name), "model.language_model.layers.%d.%s.weight", layer, rel);
  int64_t shape[2] = {(int64_t)l->n_out, (int64_t)l->n_in};
  add(w, name, l->w, 2, shape);
}

static void add_vec(struct wr *w, int layer, const char *rel, const float *x, int64_t n) {
  char name[160];
  if (layer >= 0)
    snprintf(name, sizeof(name), "model.language_model.layers.%d.%s", layer, rel);
  else
    snprintf(name, sizeof(name), "model.language_model.%s", rel);
  add(w, name, x, 1, &n);
}

/* Writes the random model as BF16 safetensors at path. */
static void write_model(const struct ex_qwen35_model *m, const char *path) {
  const struct ex_qwen35_config *c = &m->cfg;
  struct wr w = {0};
  TW_OK(cm_safetensors_writer_new(&w.w));
  int64_t vh[2] = {c->vocab_size, c->hidden_size};
  add(&w, "model.language_model.embed_tokens.weight", m->embed, 2, vh);
  if (!c->tied)
    add(&w, "lm_head.weight", m->lm_head, 2, vh);
  add_vec(&w, -1, "norm.weight", m->final_norm, c->hidden_size);
  for (int i = 0; i < c->n_layers; i++) {
    const struct ex_qwen35_layer *l = &m->layers[i];
    add_vec(&w, i, "input_layernorm.weight", l->input_norm, c->hidden_size);
    add_vec(&w, i, "post_attention_layernorm.weight", l->post_norm, c->hidden_size);
    add_lin(&w, i, "mlp.gate_proj", &l->gate);
    add_lin(&w, i, "mlp.up_proj", &l->up);
    add_lin(&w, i, "mlp.down_proj", &l->down);
    if (l->full_attn) {
      add_lin(&w, i, "self_attn.q_proj", &l->q);
      add_lin(&w, i, "self_attn.k_proj", &l->k);
      add_lin(&w, i, "self_attn.v_proj", &l->v);
      add_lin(&w, i, "self_attn.o_proj", &l->o);
      add_vec(&w, i, "self_attn.q_norm.weight", l->q_norm, c->head_dim);
      add_vec(&w, i, "self_attn.k_norm.weight", l->k_norm, c->head_dim);
    } else {
      add_lin(&w, i, "linear_attn.in_proj_qkv", &l->qkv);
      add_lin(&w, i, "linear_attn.in_proj_z", &l->z);
      add_lin(&w, i, "linear_attn.in_proj_b", &l->b);
      add_lin(&w, i, "linear_attn.in_proj_a", &l->a);
      add_lin(&w, i, "linear_attn.out_proj", &l->out);
      char name[160];
      snprintf(name, sizeof(name), "model.language_model.layers.%d.linear_attn.conv1d.weight", i);
      int64_t cs[3] = {(int64_t)l->qkv.n_out, 1, c->conv_kernel};
      add(&w, name, l->conv, 3, cs);
      add_vec(&w, i, "linear_attn.A_log", l->a_log, c->lin_v_heads);
      add_vec(&w, i, "linear_attn.dt_bias", l->dt_bias, c->lin_v_heads);
      add_vec(&w, i, "linear_attn.norm.weight", l->gdn_norm, c->lin_dv);
    }
  }
  struct cm_diag d = {0};
  TW_OK(cm_safetensors_writer_finish(w.w, path, &d));
  cm_safetensors_writer_free(w.w);
  for (size_t i = 0; i < w.n_bufs; i++)
    free(w.bufs[i]);
  free(w.bufs);
}

static float *nan_buf(size_t n) {
  float *p = malloc(n * sizeof(float) + 4);
  for (size_t i = 0; i < n; i++)
    p[i] = NAN;
  return p;
}

/* CPU forward of tokens continuing `st` (NULL: fresh); hidden [n, H]; logits of the last row. */
static void cpu_run(const struct ex_qwen35_model *m, struct ex_qwen35_state *st, const int32_t *tok,
                    size_t n, float *hid, float *last_logits) {
  size_t h = (size_t)m->cfg.hidden_size;
  float *emb = malloc(n * h * sizeof(float));
  struct cm_diag d = {0};
  TW_OK(ex_qwen35_embed(m, tok, n, emb, &d));
  TW_OK(ex_qwen35_forward(m, st, emb, NULL, n, hid, &d));
  if (last_logits)
    ex_qwen35_logits(m, hid + (n - 1) * h, 1, last_logits);
  free(emb);
}

static size_t argmax(const float *x, size_t n) {
  size_t b = 0;
  for (size_t i = 1; i < n; i++)
    if (x[i] > x[b])
      b = i;
  return b;
}

static void check_rel(const char *what, const float *got, const float *want, size_t n, double tol) {
  double e = tw_rel_l2(got, want, n);
  printf("  %-48s rel L2 %.3e (tol %.0e)\n", what, e, tol);
  if (!(e <= tol))
    tw_fail("%s: relative L2 %.3e over %.0e", what, e, tol);
}

/* Count of values that are not bf16 values (x ≠ bf16(x)), NaN counted. */
static size_t not_bf16(const float *x, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++)
    c += !(cm_bf16_to_f32(cm_f32_to_bf16(x[i])) == x[i]);
  return c;
}

/* The ref-bf16 numerics against the round_bf16 CPU forward (REF_TOL above). tok: N ids; rt: tot
 * ids of the packed rows (the lengths of run_model). Leaves the engine in ref-bf16. */
static void ref_checks(struct exc_qwen35 *e, struct ex_qwen35_model *m, const int32_t *tok,
                       const int32_t *rt, size_t tot) {
  enum { N = 200 };
  struct cm_diag d = {0};
  size_t h = (size_t)m->cfg.hidden_size, v = (size_t)m->cfg.vocab_size;
  size_t rows[N];
  for (size_t i = 0; i < N; i++)
    rows[i] = i;
  if (exc_qwen35_set_numerics(e, (enum exc_qwen35_numerics)7) != -EINVAL)
    tw_fail("an unknown numerics mode was accepted");
  TW_OK(exc_qwen35_set_numerics(e, EXC_NUMERICS_REF_BF16));
  printf(" numerics %s vs the round_bf16 CPU forward\n",
         exc_qwen35_numerics_name(EXC_NUMERICS_REF_BF16));
  struct exc_qwen35_state *s0 = NULL, *s1 = NULL;
  TW_OK(exc_qwen35_state_acquire(e, &s0));
  TW_OK(exc_qwen35_state_acquire(e, &s1));
  float *full = nan_buf((size_t)N * h), *cpu = nan_buf((size_t)N * h),
        *c32 = nan_buf((size_t)N * h);
  float *cl = nan_buf(v), *gl = nan_buf(v);
  char what[96];
  const size_t lens[3] = {1, 65, N};
  for (int li = 0; li < 3; li++) {
    size_t n = lens[li], last = n - 1;
    struct ex_qwen35_state *cs = NULL;
    TW_OK(ex_qwen35_state_new(m, &cs));
    m->round_bf16 = true;
    cpu_run(m, cs, tok, n, cpu, cl);
    m->round_bf16 = false;
    ex_qwen35_state_free(cs);
    TW_OK(ex_qwen35_state_new(m, &cs));
    cpu_run(m, cs, tok, n, c32, NULL);
    ex_qwen35_state_free(cs);
    float *gh = nan_buf(n * h);
    s0->n_tokens = 0;
    TW_OK(exc_qwen35_forward(e, &(struct exc_qwen35_seq){.state = s0, .advance = true, .n = n}, 1,
                             tok, NULL, 0, rows, n, gh, NULL, &d));
    TW_OK(exc_qwen35_forward(e, &(struct exc_qwen35_seq){.n = n}, 1, tok, NULL, 0, &last, 1, NULL,
                             gl, &d));
    size_t nb = not_bf16(gh, n * h) + not_bf16(gl, v);
    if (nb)
      tw_fail("ref-bf16 n=%zu: %zu hidden values or logits are not bf16 values", n, nb);
    snprintf(what, sizeof(what), "ref-bf16 n=%zu hidden vs round_bf16 CPU", n);
    check_rel(what, gh, cpu, n * h, REF_TOL);
    snprintf(what, sizeof(what), "ref-bf16 n=%zu last logits vs round_bf16 CPU", n);
    check_rel(what, gl, cl, v, REF_TOL);
    double er = tw_rel_l2(gh, cpu, n * h), e32 = tw_rel_l2(gh, c32, n * h);
    printf("  ref-bf16 n=%zu hidden vs float32 CPU rel L2 %.3e (ratio %.2f)\n", n, e32,
           e32 > 0 ? er / e32 : 0.0);
    if (n == N && !(er <= REF_RATIO * e32))
      tw_fail("ref-bf16 n=%zu: %.3e from the round_bf16 forward, %.3e from the float32 one", n, er,
              e32);
    /* top-1: the same id, or one whose CPU logit is within two bf16 ulps of the CPU maximum (a
     * near-tie that one flipped rounding can reorder) */
    size_t ag = argmax(gl, v), ac = argmax(cl, v);
    if (ag != ac && !(cl[ac] - cl[ag] <= 2.0 * fabs(cl[ac]) / 128))
      tw_fail("ref-bf16 n=%zu: top-1 id %zu on the GPU (CPU logit %.4f), %zu on the CPU (%.4f)", n,
              ag, cl[ag], ac, cl[ac]);
    if (n == N)
      memcpy(full, gh, n * h * sizeof(float));
    free(gh);
  }
  /* continuation at a chunk edge: bit-identical to the one pass */
  size_t p = 64;
  float *gh = nan_buf((size_t)N * h);
  s0->n_tokens = 0;
  TW_OK(exc_qwen35_forward(e, &(struct exc_qwen35_seq){.state = s0, .advance = true, .n = p}, 1,
                           tok, NULL, 0, NULL, 0, NULL, NULL, &d));
  TW_OK(exc_qwen35_state_clone(e, s0, s1));
  TW_OK(exc_qwen35_forward(e, &(struct exc_qwen35_seq){.state = s1, .advance = true, .n = N - p}, 1,
                           tok + p, NULL, 0, rows, N - p, gh, NULL, &d));
  if (memcmp(gh, full + p * h, (N - p) * h * sizeof(float)))
    tw_fail("ref-bf16 continuation 64+136 differs from the one pass (rel L2 %.3e)",
            tw_rel_l2(gh, full + p * h, (N - p) * h));
  else
    printf("  ref-bf16 continuation 64+136 bit-identical to the one pass\n");
  /* packed rows continuing s0 (64 tokens) vs one by one */
  const size_t rl[5] = {1, 7, 33, 64, 65};
  struct exc_qwen35_seq rs[5];
  size_t starts[5], sum = 0;
  for (int i = 0; i < 5; i++) {
    starts[i] = sum;
    sum += rl[i];
    rs[i] = (struct exc_qwen35_seq){.state = s0, .advance = false, .n = rl[i]};
  }
  if (sum != tot)
    tw_fail("packed rows: %zu tokens, expected %zu", sum, tot);
  float *packed = nan_buf(tot * h), *single = nan_buf(tot * h);
  TW_OK(exc_qwen35_forward(e, rs, 5, rt, NULL, 0, rows, tot, packed, NULL, &d));
  for (int i = 0; i < 5; i++)
    TW_OK(exc_qwen35_forward(e, &rs[i], 1, rt + starts[i], NULL, 0, rows, rl[i],
                             single + starts[i] * h, NULL, &d));
  if (memcmp(packed, single, tot * h * sizeof(float)))
    tw_fail("ref-bf16: packed rows differ from the same rows run one by one");
  else
    printf("  ref-bf16 packed rows bit-identical to single rows\n");
  free(packed), free(single), free(gh), free(full), free(cpu), free(c32), free(cl), free(gl);
  exc_qwen35_state_release(e, s0);
  exc_qwen35_state_release(e, s1);
  cm_diag_fini(&d);
}

/* Layer tools in both numerics: the residual stream dump against the twin's, each layer alone on
 * the dump's input rows (bit-identical to the dump; within tol of the CPU layer on the same
 * rows). Leaves the engine in ref-bf16. */
static void layer_checks(struct exc_qwen35 *e, struct ex_qwen35_model *m, const int32_t *tok) {
  enum { N = 130 };
  struct cm_diag d = {0};
  size_t h = (size_t)m->cfg.hidden_size, L = (size_t)m->cfg.n_layers, sl = (size_t)N * h;
  float *gr = nan_buf((L + 1) * sl), *cr = nan_buf((L + 1) * sl), *emb = nan_buf(sl);
  float *hid = nan_buf(sl), *one = nan_buf(sl), *cone = nan_buf(sl);
  char what[96];
  for (int mode = 0; mode < 2; mode++) {
    bool ref = mode == 1;
    double tol = ref ? REF_TOL : HID_TOL;
    TW_OK(exc_qwen35_set_numerics(e, ref ? EXC_NUMERICS_REF_BF16 : EXC_NUMERICS_FP32_RESIDUAL));
    m->round_bf16 = ref;
    const char *name = exc_qwen35_numerics_name(ref ? EXC_NUMERICS_REF_BF16
                                                    : EXC_NUMERICS_FP32_RESIDUAL);
    TW_OK(exc_qwen35_forward_residual(e, &(struct exc_qwen35_seq){.n = N}, 1, tok, NULL, 0, NULL,
                                      0, NULL, NULL, gr, &d));
    struct ex_qwen35_state *cs = NULL;
    TW_OK(ex_qwen35_state_new(m, &cs));
    TW_OK(ex_qwen35_embed(m, tok, N, emb, &d));
    TW_OK(ex_qwen35_forward_residual(m, cs, emb, NULL, N, hid, cr, &d));
    ex_qwen35_state_free(cs);
    if (memcmp(gr, cr, sl * sizeof(float)))
      tw_fail("%s: the residual dump's layer-0 input differs from the embeddings", name);
    for (size_t i = 0; i < L; i++) {
      snprintf(what, sizeof(what), "%s residual after layer %zu vs CPU", name, i);
      check_rel(what, gr + (i + 1) * sl, cr + (i + 1) * sl, sl, tol);
      TW_OK(exc_qwen35_layer_forward(e, (int)i, gr + i * sl, NULL, N, one, &d));
      if (memcmp(one, gr + (i + 1) * sl, sl * sizeof(float)))
        tw_fail("%s layer %zu alone on the dumped input differs from the dump (rel L2 %.3e)", name,
                i, tw_rel_l2(one, gr + (i + 1) * sl, sl));
      TW_OK(ex_qwen35_layer_forward(m, (int)i, gr + i * sl, NULL, N, cone, &d));
      snprintf(what, sizeof(what), "%s layer %zu alone vs CPU layer alone", name, i);
      check_rel(what, one, cone, sl, tol);
    }
    printf("  %s: every layer alone on the dumped input is bit-identical to the dump\n", name);
  }
  if (exc_qwen35_layer_forward(e, (int)L, gr, NULL, N, one, &d) != -EINVAL)
    tw_fail("layer %zu of %zu layers was accepted", L, L);
  m->round_bf16 = false;
  free(gr), free(cr), free(emb), free(hid), free(one), free(cone);
  cm_diag_fini(&d);
}

static void run_model(int hv, int vocab, bool tied, uint64_t seed) {
  struct ex_qwen35_config cfg;
  test_qwen35_tiny_config(&cfg, vocab, hv, tied);
  struct ex_qwen35_model *rm = NULL, *m = NULL;
  TW_OK(test_qwen35_random_model(&cfg, seed, 0, &rm));
  char path[] = "/tmp/s1-test-engine-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0)
    abort();
  close(fd);
  write_model(rm, path);
  struct cm_safetensors *st = NULL;
  struct cm_diag d = {0};
  TW_OK(cm_safetensors_open(path, &st, &d));
  TW_OK(ex_qwen35_model_load(&cfg, st, NULL, 0, &m, &d)); /* the CPU twin on the bf16 values */
  printf("model hv=%d vocab=%d tied=%d\n", hv, vocab, tied);
  struct exc_qwen35_limits lim;
  exc_qwen35_limits_default(&lim);
  lim.max_tokens = 512;
  lim.max_ctx = 512;
  lim.max_readouts = 256;
  lim.n_snapshots = 3;
  lim.max_seqs = 8;
  struct exc_qwen35 *e = NULL;
  lim.numerics = EXC_NUMERICS_FP32_RESIDUAL; /* the checks against the float32 forward first */
  TW_OK(exc_qwen35_new(&cfg, st, 0, &lim, &e, &d));
  size_t h = (size_t)cfg.hidden_size, v = (size_t)vocab;
  struct tw_rng rng;
  tw_rng_seed(&rng, seed + 99);
  enum { N = 200 };
  int32_t tok[N];
  for (int i = 0; i < N; i++)
    tok[i] = (int32_t)(tw_next(&rng) % (uint64_t)vocab);
  size_t rows[N];
  for (size_t i = 0; i < N; i++)
    rows[i] = i;
  struct exc_qwen35_state *s0 = NULL, *s1 = NULL, *s2 = NULL;
  TW_OK(exc_qwen35_state_acquire(e, &s0));
  TW_OK(exc_qwen35_state_acquire(e, &s1));
  TW_OK(exc_qwen35_state_acquire(e, &s2));
  float *full = nan_buf((size_t)N * h), *cpu = nan_buf((size_t)N * h);
  float *lg = nan_buf(v), *cl = nan_buf(v);
  char what[96];
  /* one pass at 1, 65, 200 tokens */
  const size_t lens[3] = {1, 65, N};
  for (int li = 0; li < 3; li++) {
    size_t n = lens[li];
    struct ex_qwen35_state *cs = NULL;
    TW_OK(ex_qwen35_state_new(m, &cs));
    cpu_run(m, cs, tok, n, cpu, cl);
    ex_qwen35_state_free(cs);
    s0->n_tokens = 0;
    struct exc_qwen35_seq seq = {.state = s0, .advance = true, .n = n};
    float *gh = nan_buf(n * h), *gl = nan_buf(v);
    size_t last = n - 1;
    TW_OK(exc_qwen35_forward(e, &seq, 1, tok, NULL, 0, rows, n, gh, NULL, &d));
    TW_OK(exc_qwen35_forward(e, &(struct exc_qwen35_seq){.state = NULL, .n = n}, 1, tok, NULL, 0,
                             &last, 1, NULL, gl, &d));
    snprintf(what, sizeof(what), "one pass n=%zu hidden (all rows)", n);
    check_rel(what, gh, cpu, n * h, HID_TOL);
    snprintf(what, sizeof(what), "one pass n=%zu last logits", n);
    check_rel(what, gl, cl, v, HID_TOL);
    if (argmax(gl, v) != argmax(cl, v))
      tw_fail("one pass n=%zu: top-1 id %zu on the GPU, %zu on the CPU", n, argmax(gl, v),
              argmax(cl, v));
    if (n == N) {
      memcpy(full, gh, n * h * sizeof(float));
      /* LM readouts of the last forward's last row against its full logits (GEMM, float32):
       * label logits are those logits rounded to bf16 (one bf16 ulp apart at most: the two sum in
       * different orders); the log-prob is the float32 log-softmax of the bf16-rounded logits */
      int32_t ids[4] = {0, 5, vocab - 1, 17};
      float lab[4], lp[4], want[4];
      size_t lrows[4] = {last, last, last, last};
      TW_OK(exc_qwen35_label_logits(e, &last, 1, ids, 4, lab, &d));
      for (int k = 0; k < 4; k++)
        want[k] = cm_bf16_to_f32(cm_f32_to_bf16(gl[ids[k]]));
      tw_close("label logits vs bf16(full logits)", lab, want, 4, 1e-6, 1.0 / 128);
      TW_OK(exc_qwen35_token_logprob(e, lrows, ids, 4, lp, &d));
      double mx = -INFINITY, sum = 0;
      for (size_t k = 0; k < v; k++)
        mx = fmax(mx, cm_bf16_to_f32(cm_f32_to_bf16(gl[k])));
      for (size_t k = 0; k < v; k++)
        sum += exp(cm_bf16_to_f32(cm_f32_to_bf16(gl[k])) - mx);
      for (int k = 0; k < 4; k++)
        want[k] = (float)(want[k] - (mx + log(sum)));
      /* one bf16 ulp of a logit (|l| < 8: 2^-5) on the target, the normaliser within 1e-3 */
      tw_close("token log-prob vs log-softmax of bf16(full logits)", lp, want, 4, 1e-3 + 1.0 / 32,
               0);
      if (exc_qwen35_label_logits(e, &(size_t){n}, 1, ids, 4, lab, &d) != -EINVAL)
        tw_fail("a label-logit row outside the last forward was accepted");
    }
    free(gh);
    free(gl);
  }
  /* continuation: prefix p into s0, clone into s1, the rest from s1 */
  const size_t splits[2] = {70, 64};
  for (int si = 0; si < 2; si++) {
    size_t p = splits[si];
    s0->n_tokens = 0;
    float *gh = nan_buf((size_t)N * h);
    TW_OK(exc_qwen35_forward(e, &(struct exc_qwen35_seq){.state = s0, .advance = true, .n = p}, 1,
                             tok, NULL, 0, rows, p, gh, NULL, &d));
    TW_OK(exc_qwen35_state_clone(e, s0, s1));
    TW_OK(exc_qwen35_forward(e, &(struct exc_qwen35_seq){.state = s1, .advance = true, .n = N - p},
                             1, tok + p, NULL, 0, rows, N - p, gh + p * h, NULL, &d));
    snprintf(what, sizeof(what), "continuation %zu+%zu vs one pass", p, N - p);
    check_rel(what, gh + p * h, full + p * h, (N - p) * h, CONT_TOL);
    if (s1->n_tokens != N || s0->n_tokens != p)
      tw_fail("continuation: states hold %zu and %zu tokens", s0->n_tokens, s1->n_tokens);
    free(gh);
  }
  /* packed rows continuing s0 (prefix 64 tokens) in one launch vs one by one, and vs the CPU */
  const size_t rl[5] = {1, 7, 33, 64, 65};
  size_t tot = 0, starts[5];
  for (int i = 0; i < 5; i++) {
    starts[i] = tot;
    tot += rl[i];
  }
  int32_t *rt = malloc(tot * sizeof(int32_t));
  for (size_t i = 0; i < tot; i++)
    rt[i] = (int32_t)(tw_next(&rng) % (uint64_t)vocab);
  struct exc_qwen35_seq rs[5];
  for (int i = 0; i < 5; i++)
    rs[i] = (struct exc_qwen35_seq){.state = s0, .advance = false, .n = rl[i]};
  float *packed = nan_buf(tot * h), *single = nan_buf(tot * h), *cpur = nan_buf(tot * h);
  TW_OK(exc_qwen35_forward(e, rs, 5, rt, NULL, 0, rows, tot, packed, NULL, &d));
  struct ex_qwen35_state *cp = NULL;
  TW_OK(ex_qwen35_state_new(m, &cp));
  float *tmp = nan_buf(64 * h);
  cpu_run(m, cp, tok, 64, tmp, NULL);
  for (int i = 0; i < 5; i++) {
    TW_OK(exc_qwen35_forward(e, &rs[i], 1, rt + starts[i], NULL, 0, rows, rl[i],
                             single + starts[i] * h, NULL, &d));
    struct ex_qwen35_state *cc = NULL;
    TW_OK(ex_qwen35_state_clone(cp, m, &cc));
    cpu_run(m, cc, rt + starts[i], rl[i], cpur + starts[i] * h, NULL);
    ex_qwen35_state_free(cc);
  }
  if (memcmp(packed, single, tot * h * sizeof(float)))
    tw_fail("packed rows differ from the same rows run one by one");
  else
    printf("  packed rows (5 rows, %zu tokens) bit-identical to single rows\n", tot);
  check_rel("packed rows vs CPU continuation", packed, cpur, tot * h, HID_TOL);
  if (s0->n_tokens != 64)
    tw_fail("rows without advance changed the snapshot (%zu tokens)", s0->n_tokens);
  /* refusals */
  int32_t bad = (int32_t)vocab;
  if (exc_qwen35_forward(e, &(struct exc_qwen35_seq){.n = 1}, 1, &bad, NULL, 0, NULL, 0, NULL, NULL,
                         &d) != -EINVAL)
    tw_fail("an id outside the vocabulary was accepted");
  int32_t *many = calloc(lim.max_tokens + 1, sizeof(int32_t));
  if (exc_qwen35_forward(e, &(struct exc_qwen35_seq){.n = lim.max_tokens + 1}, 1, many, NULL, 0,
                         NULL, 0, NULL, NULL, &d) != -CM_ELIMIT)
    tw_fail("more than max_tokens was accepted");
  struct exc_qwen35_seq two[2] = {{.state = s0, .advance = true, .n = 1}, {.state = s0, .n = 1}};
  if (exc_qwen35_forward(e, two, 2, many, NULL, 0, NULL, 0, NULL, NULL, &d) != -EINVAL)
    tw_fail("a state both advanced and read in one launch was accepted");
  if (!exc_qwen35_healthy(e))
    tw_fail("engine unhealthy after refusals");
  /* profiling: one forward, every op kind of the tiny model counted */
  TW_OK(exc_qwen35_profile_enable(e, true));
  TW_OK(exc_qwen35_forward(e, &(struct exc_qwen35_seq){.n = 65}, 1, tok, NULL, 0, NULL, 0, NULL,
                           NULL, &d));
  struct exc_qwen35_profile pr;
  exc_qwen35_profile_read(e, &pr);
  if (pr.forwards != 1 || pr.n[EXC_OP_ATTENTION] != 1 || pr.n[EXC_OP_GDN] != 3 ||
      pr.n[EXC_OP_GEMM_OUT] != 8 || !(pr.ms[EXC_OP_GEMM_IN] > 0))
    tw_fail("profile: %ld forwards, %ld attention, %ld gdn, %ld gemm_out launches", pr.forwards,
            pr.n[EXC_OP_ATTENTION], pr.n[EXC_OP_GDN], pr.n[EXC_OP_GEMM_OUT]);
  TW_OK(exc_qwen35_profile_enable(e, false));
  exc_qwen35_state_release(e, s0);
  exc_qwen35_state_release(e, s1);
  exc_qwen35_state_release(e, s2);
  ref_checks(e, m, tok, rt, tot);
  layer_checks(e, m, tok);
  cm_diag_fini(&d);
  free(many);
  free(rt);
  free(packed);
  free(single);
  free(cpur);
  free(tmp);
  ex_qwen35_state_free(cp);
  free(full);
  free(cpu);
  free(lg);
  free(cl);
  exc_qwen35_free(e);
  ex_qwen35_model_free(m);
  ex_qwen35_model_free(rm);
  cm_safetensors_close(st);
  unlink(path);
}

int main(void) {
  tw_require_gpu();
  run_model(4, 1000, false, 1);
  run_model(6, 1001, true, 2);
  return tw_finish("test_engine");
}
