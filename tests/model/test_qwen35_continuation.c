/* Continuation equals the full forward: for prefix lengths 1, 63, 64, 65 a snapshot is kept and
 * several rows of 1-70 tokens run from it (each on a clone); every row's final-norm hidden rows
 * and final GDN states must match a one-pass forward of prefix + row (≤ 1e-5 relative). Also the
 * whole model in chunked-only vs recurrent-only GDN mode, on tiny-A (ratio 2, untied) and the
 * ratio-3 tied variant, and a kept-LoRA model. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qwen35_testmodel.h"

static int failures;

static void check(const char *what, double err, double tol) {
  if (!(err <= tol)) {
    printf("FAIL %s: rel err %.3e > %.1e\n", what, err, tol);
    failures++;
  }
}

static float *run_full(struct ex_qwen35_model *m, const int32_t *tok, size_t n,
                       struct ex_qwen35_state **ret_state) {
  size_t h = (size_t)m->cfg.hidden_size;
  float *emb = malloc(n * h * 4), *hid = malloc(n * h * 4);
  struct ex_qwen35_state *st = NULL;
  struct cm_diag diag = {0};
  if (ex_qwen35_state_new(m, &st) || ex_qwen35_embed(m, tok, n, emb, &diag) ||
      ex_qwen35_forward(m, st, emb, NULL, n, hid, &diag)) {
    printf("FAIL forward: %s\n", diag.msg ? diag.msg : "?");
    exit(1);
  }
  free(emb);
  if (ret_state)
    *ret_state = st;
  else
    ex_qwen35_state_free(st);
  return hid;
}

static double state_err(const struct ex_qwen35_model *m, const struct ex_qwen35_state *a,
                        const struct ex_qwen35_state *b) {
  const struct ex_qwen35_config *c = &m->cfg;
  double worst = 0;
  for (int i = 0; i < c->n_layers; i++) {
    double e;
    if (c->full_attn[i]) {
      size_t n = a->n_tokens * (size_t)(c->n_kv_heads * c->head_dim);
      e = test_rel_err(a->layers[i].k, b->layers[i].k, n);
      double e2 = test_rel_err(a->layers[i].v, b->layers[i].v, n);
      e = e > e2 ? e : e2;
    } else {
      size_t ns = (size_t)(c->lin_v_heads * c->lin_dk * c->lin_dv);
      size_t nc = (size_t)(c->conv_kernel - 1) *
                  (size_t)(2 * c->lin_k_heads * c->lin_dk + c->lin_v_heads * c->lin_dv);
      e = test_rel_err(a->layers[i].s, b->layers[i].s, ns);
      double e2 = test_rel_err(a->layers[i].conv, b->layers[i].conv, nc);
      e = e > e2 ? e : e2;
    }
    if (e > worst)
      worst = e;
  }
  return worst;
}

static void continuation(struct ex_qwen35_model *m, const char *name, uint64_t seed) {
  static const size_t prefixes[] = {1, 63, 64, 65};
  static const size_t rows[] = {1, 2, 17, 64, 70};
  size_t h = (size_t)m->cfg.hidden_size;
  uint64_t s = seed;
  double worst = 0, worst_state = 0;
  for (size_t pi = 0; pi < 4; pi++) {
    size_t p = prefixes[pi];
    int32_t tok[200];
    for (size_t i = 0; i < p; i++)
      tok[i] = (int32_t)((test_urand(&s) + 1.0f) * 0.5f * (float)(m->cfg.vocab_size - 1));
    struct ex_qwen35_state *snap = NULL;
    free(run_full(m, tok, p, &snap));
    float *first = NULL;
    int32_t row0_tok = 0;
    for (size_t ri = 0; ri < 5; ri++) {
      size_t r = rows[ri];
      for (size_t i = 0; i < r; i++)
        tok[p + i] = (int32_t)((test_urand(&s) + 1.0f) * 0.5f * (float)(m->cfg.vocab_size - 1));
      struct ex_qwen35_state *full_state = NULL;
      float *full = run_full(m, tok, p + r, &full_state);
      struct ex_qwen35_state *st = NULL;
      struct cm_diag diag = {0};
      float *emb = malloc(r * h * 4), *hid = malloc(r * h * 4);
      if (ex_qwen35_state_clone(snap, m, &st) || ex_qwen35_embed(m, tok + p, r, emb, &diag) ||
          ex_qwen35_forward(m, st, emb, NULL, r, hid, &diag)) {
        printf("FAIL continuation forward\n");
        exit(1);
      }
      double e = test_rel_err(hid, full + p * h, r * h);
      double es = state_err(m, st, full_state);
      char what[96];
      snprintf(what, sizeof(what), "%s prefix %zu row %zu hidden", name, p, r);
      check(what, e, 1e-5);
      snprintf(what, sizeof(what), "%s prefix %zu row %zu state", name, p, r);
      check(what, es, 1e-5);
      if (st->n_tokens != p + r) {
        printf("FAIL %s n_tokens %zu\n", what, st->n_tokens);
        failures++;
      }
      worst = e > worst ? e : worst;
      worst_state = es > worst_state ? es : worst_state;
      if (ri == 0) {
        row0_tok = tok[p];
        first = malloc(h * 4);
        memcpy(first, hid, h * 4);
      }
      free(emb), free(hid), free(full);
      ex_qwen35_state_free(st);
      ex_qwen35_state_free(full_state);
    }
    /* the snapshot is untouched by its rows: row 0 again gives the same bits */
    struct ex_qwen35_state *st = NULL;
    struct cm_diag diag = {0};
    float emb[64], hid[64];
    if (ex_qwen35_state_clone(snap, m, &st) || ex_qwen35_embed(m, &row0_tok, 1, emb, &diag) ||
        ex_qwen35_forward(m, st, emb, NULL, 1, hid, &diag) || memcmp(hid, first, h * 4) != 0) {
      printf("FAIL %s prefix %zu: snapshot changed by a row\n", name, p);
      failures++;
    }
    ex_qwen35_state_free(st);
    free(first);
    ex_qwen35_state_free(snap);
  }
  printf("%s: continuation worst rel err hidden %.3e, state %.3e\n", name, worst, worst_state);
}

static void forms(struct ex_qwen35_model *m, const char *name) {
  int32_t tok[130];
  uint64_t s = 77;
  for (size_t i = 0; i < 130; i++)
    tok[i] = (int32_t)((test_urand(&s) + 1.0f) * 0.5f * (float)(m->cfg.vocab_size - 1));
  m->gdn_mode = EX_GDN_CHUNKED;
  float *a = run_full(m, tok, 130, NULL);
  m->gdn_mode = EX_GDN_RECURRENT;
  float *b = run_full(m, tok, 130, NULL);
  m->gdn_mode = EX_GDN_AUTO;
  double e = test_rel_err(a, b, 130 * (size_t)m->cfg.hidden_size);
  char what[64];
  snprintf(what, sizeof(what), "%s chunked vs recurrent model", name);
  check(what, e, 1e-5);
  printf("%s: chunked vs recurrent whole model rel err %.3e\n", name, e);
  free(a), free(b);
}

/* The optional bf16 rounding points: outputs are bf16 values and stay near the fp32 forward. */
static void bf16_points(struct ex_qwen35_model *m) {
  int32_t tok[70];
  uint64_t s = 99;
  for (size_t i = 0; i < 70; i++)
    tok[i] = (int32_t)((test_urand(&s) + 1.0f) * 0.5f * (float)(m->cfg.vocab_size - 1));
  float *a = run_full(m, tok, 70, NULL);
  m->round_bf16 = true;
  float *b = run_full(m, tok, 70, NULL);
  size_t n = 70 * (size_t)m->cfg.hidden_size, not_bf16 = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &b[i], 4);
    not_bf16 += (u & 0xffffu) != 0;
  }
  float *lg = malloc((size_t)m->cfg.vocab_size * 4);
  ex_qwen35_logits(m, b, 1, lg);
  for (int i = 0; i < m->cfg.vocab_size; i++) {
    uint32_t u;
    memcpy(&u, &lg[i], 4);
    not_bf16 += (u & 0xffffu) != 0;
  }
  m->round_bf16 = false;
  double e = test_rel_err(b, a, n);
  printf("bf16 rounding points: rel diff to fp32 %.3e, %zu non-bf16 outputs\n", e, not_bf16);
  if (not_bf16 || !(e > 1e-4 && e < 5e-2)) {
    printf("FAIL bf16 rounding points\n");
    failures++;
  }
  free(a), free(b), free(lg);
}

int main(void) {
  struct ex_qwen35_config cfg;
  struct ex_qwen35_model *m = NULL;
  test_qwen35_tiny_config(&cfg, 300, 4, false);
  if (test_qwen35_random_model(&cfg, 1, 0, &m))
    return 1;
  continuation(m, "tinyA", 11);
  forms(m, "tinyA");
  bf16_points(m);
  ex_qwen35_model_free(m);
  test_qwen35_tiny_config(&cfg, 300, 6, true);
  if (test_qwen35_random_model(&cfg, 2, 0, &m))
    return 1;
  continuation(m, "ratio3-tied", 12);
  forms(m, "ratio3-tied");
  ex_qwen35_model_free(m);
  test_qwen35_tiny_config(&cfg, 300, 4, false);
  if (test_qwen35_random_model(&cfg, 3, 4, &m))
    return 1;
  continuation(m, "lora-kept", 13);
  ex_qwen35_model_free(m);
  if (failures) {
    printf("%d failures\n", failures);
    return 1;
  }
  return 0;
}
