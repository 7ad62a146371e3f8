/* The packed CPU forward and prefix pieces on the 64-token grid, bit for bit (memcmp, no
 * tolerance: the scheduler's invariance rests on these being exact):
 *  1. several sequences in one ex_qwen35_forward_packed call (fresh, reading one shared snapshot,
 *     advancing their own states, one-token rows) give each sequence exactly the hidden rows and
 *     states it gets alone, in any order and packing;
 *  2. a prefix cut into pieces at multiples of 64 from its own start (pieces after the first
 *     flagged `chunked`), after a parent of 0 or 37 tokens, gives exactly the hidden rows and the
 *     final state of one pass, for lengths 1, 63, 64, 65, 128, 129, 200;
 *  3. the same cut without the flag runs a one-token tail recurrently: it is reported (it may or
 *     may not round alike; only 1. and 2. are asserted).
 * Both numerics (float32, round_bf16). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qwen35_testmodel.h"

static int failures;

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    printf("FAIL " __VA_ARGS__);                                                                   \
    printf("\n");                                                                                  \
    failures++;                                                                                    \
  } while (0)

static size_t kv_row(const struct ex_qwen35_config *c) {
  return (size_t)c->n_kv_heads * (size_t)c->head_dim;
}

/* Bitwise equality of two states (tokens, K/V rows held, conv windows, GDN states). */
static bool same_state(const struct ex_qwen35_model *m, const struct ex_qwen35_state *a,
                       const struct ex_qwen35_state *b) {
  const struct ex_qwen35_config *c = &m->cfg;
  if (a->n_tokens != b->n_tokens)
    return false;
  size_t cd = (size_t)(2 * c->lin_k_heads * c->lin_dk + c->lin_v_heads * c->lin_dv);
  size_t sn = (size_t)c->lin_v_heads * (size_t)c->lin_dk * (size_t)c->lin_dv;
  for (int i = 0; i < c->n_layers; i++) {
    const struct ex_qwen35_layer_state *x = &a->layers[i], *y = &b->layers[i];
    size_t kv = a->n_tokens * kv_row(c) * sizeof(float);
    if (c->full_attn[i] ? (kv && (memcmp(x->k, y->k, kv) || memcmp(x->v, y->v, kv)))
                        : (memcmp(x->conv, y->conv, (size_t)(c->conv_kernel - 1) * cd * 4) ||
                           memcmp(x->s, y->s, sn * 4)))
      return false;
  }
  return true;
}

static void tokens(uint64_t *rng, int vocab, int32_t *ids, size_t n) {
  for (size_t t = 0; t < n; t++)
    ids[t] = (int32_t)((test_urand(rng) * 0.5f + 0.5f) * (float)(vocab - 1));
}

/* Alone: a clone of `snap` (or a fresh state) advanced by ids; hidden rows out. */
static struct ex_qwen35_state *alone(struct ex_qwen35_model *m, const struct ex_qwen35_state *snap,
                                     const int32_t *ids, size_t n, float *hid) {
  size_t h = (size_t)m->cfg.hidden_size;
  float *emb = malloc(n * h * 4);
  struct ex_qwen35_state *st = NULL;
  struct cm_diag d = {0};
  if ((snap ? ex_qwen35_state_clone(snap, m, &st) : ex_qwen35_state_new(m, &st)) ||
      ex_qwen35_embed(m, ids, n, emb, &d) || ex_qwen35_forward(m, st, emb, NULL, n, hid, &d)) {
    printf("FAIL forward: %s\n", d.msg ? d.msg : "?");
    exit(1);
  }
  free(emb);
  return st;
}

static void test_packed(struct ex_qwen35_model *m, const char *mode) {
  const struct ex_qwen35_config *c = &m->cfg;
  size_t h = (size_t)c->hidden_size;
  uint64_t rng = 99;
  int32_t pre[70];
  tokens(&rng, c->vocab_size, pre, 70);
  float *scratch = malloc(200 * h * 4);
  struct ex_qwen35_state *snap = alone(m, NULL, pre, 70, scratch);
  /* sequences: lengths, continuing the snapshot (read), fresh, advancing an own copy */
  enum { NS = 7 };
  const size_t len[NS] = {1, 5, 64, 1, 17, 3, 66};
  const int kind[NS] = {0, 0, 1, 2, 2, 0, 2}; /* 0 read snap, 1 fresh, 2 advance a copy */
  int32_t ids[NS][66];
  float *want[NS];
  struct ex_qwen35_state *want_st[NS] = {0}, *own[NS] = {0};
  size_t total = 0;
  for (int i = 0; i < NS; i++) {
    tokens(&rng, c->vocab_size, ids[i], len[i]);
    want[i] = malloc(len[i] * h * 4);
    want_st[i] = alone(m, kind[i] == 1 ? NULL : snap, ids[i], len[i], want[i]);
    total += len[i];
  }
  /* two packings: all in order, then reversed */
  for (int order = 0; order < 2; order++) {
    struct ex_qwen35_seq seqs[NS];
    float *emb = malloc(total * h * 4), *hid = malloc(total * h * 4);
    size_t at = 0, start[NS];
    struct cm_diag d = {0};
    for (int k = 0; k < NS; k++) {
      int i = order ? NS - 1 - k : k;
      if (kind[i] == 2 && ex_qwen35_state_clone(snap, m, &own[i]))
        exit(1);
      seqs[k] = (struct ex_qwen35_seq){.state = kind[i] == 1 ? NULL : kind[i] == 2 ? own[i] : snap,
                                       .advance = kind[i] == 2, .n = len[i]};
      if (ex_qwen35_embed(m, ids[i], len[i], emb + at * h, &d))
        exit(1);
      start[i] = at;
      at += len[i];
    }
    if (ex_qwen35_forward_packed(m, seqs, NS, emb, hid, &d)) {
      FAIL("%s packed forward: %s", mode, d.msg ? d.msg : "?");
      return;
    }
    for (int i = 0; i < NS; i++) {
      if (memcmp(hid + start[i] * h, want[i], len[i] * h * 4))
        FAIL("%s order %d: sequence %d (%zu rows) differs from its forward alone", mode, order, i,
             len[i]);
      if (kind[i] == 2 && !same_state(m, own[i], want_st[i]))
        FAIL("%s order %d: sequence %d's advanced state differs", mode, order, i);
      ex_qwen35_state_free(own[i]);
      own[i] = NULL;
    }
    if (snap->n_tokens != 70)
      FAIL("%s: a read-only sequence advanced the snapshot", mode);
    free(emb), free(hid);
  }
  /* refusals: a state advanced by one sequence and read by another; an empty sequence */
  struct ex_qwen35_seq bad[2] = {{.state = snap, .advance = true, .n = 1},
                                 {.state = snap, .n = 1}};
  struct cm_diag d = {0};
  if (ex_qwen35_forward_packed(m, bad, 2, scratch, scratch, &d) != -EINVAL)
    FAIL("%s: a state advanced and read in one call was accepted", mode);
  cm_diag_fini(&d);
  bad[1] = (struct ex_qwen35_seq){.state = NULL, .n = 0};
  if (ex_qwen35_forward_packed(m, bad + 1, 1, scratch, scratch, &d) != -EINVAL)
    FAIL("%s: an empty sequence was accepted", mode);
  cm_diag_fini(&d);
  for (int i = 0; i < NS; i++) {
    free(want[i]);
    ex_qwen35_state_free(want_st[i]);
  }
  ex_qwen35_state_free(snap);
  free(scratch);
}

/* A prefix of n tokens after a parent of n_parent, in pieces cut every 64 from the prefix start. */
static void test_grid(struct ex_qwen35_model *m, const char *mode, size_t n_parent, size_t n,
                      bool flag) {
  const struct ex_qwen35_config *c = &m->cfg;
  size_t h = (size_t)c->hidden_size;
  uint64_t rng = 7 + n + n_parent;
  int32_t par[64], ids[256];
  tokens(&rng, c->vocab_size, par, n_parent);
  tokens(&rng, c->vocab_size, ids, n);
  float *want = malloc((n + 64) * h * 4), *got = malloc((n + 64) * h * 4);
  struct ex_qwen35_state *parent = NULL;
  if (n_parent)
    parent = alone(m, NULL, par, n_parent, want);
  struct ex_qwen35_state *one = alone(m, parent, ids, n, want), *cut = NULL;
  if ((parent ? ex_qwen35_state_clone(parent, m, &cut) : ex_qwen35_state_new(m, &cut)))
    exit(1);
  float *emb = malloc(64 * h * 4);
  struct cm_diag d = {0};
  for (size_t a = 0; a < n; a += 64) {
    size_t k = n - a < 64 ? n - a : 64;
    struct ex_qwen35_seq s = {.state = cut, .advance = true, .chunked = flag && a > 0, .n = k};
    if (ex_qwen35_embed(m, ids + a, k, emb, &d) ||
        ex_qwen35_forward_packed(m, &s, 1, emb, got + a * h, &d))
      exit(1);
  }
  bool same = !memcmp(got, want, n * h * 4) && same_state(m, cut, one);
  if (flag && !same)
    FAIL("%s: a %zu-token prefix after %zu tokens cut on the grid differs from one pass", mode, n,
         n_parent);
  if (!flag && n % 64 == 1 && n > 64)
    printf("%s: %zu after %zu cut on the grid without the chunked flag: %s\n", mode, n, n_parent,
           same ? "same bits" : "differs (the one-token tail runs recurrently)");
  free(emb), free(want), free(got);
  ex_qwen35_state_free(parent);
  ex_qwen35_state_free(one);
  ex_qwen35_state_free(cut);
}

int main(void) {
  struct ex_qwen35_config cfg;
  test_qwen35_tiny_config(&cfg, 512, 4, false);
  for (int bf = 0; bf < 2; bf++) {
    struct ex_qwen35_model *m = NULL;
    if (test_qwen35_random_model(&cfg, 4242, bf ? 0 : 4, &m))
      return 1;
    m->round_bf16 = bf;
    const char *mode = bf ? "bf16-rounding" : "float32+lora";
    test_packed(m, mode);
    const size_t lens[] = {1, 63, 64, 65, 128, 129, 200};
    for (size_t p = 0; p < 2; p++)
      for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        test_grid(m, mode, p ? 37 : 0, lens[i], true);
        test_grid(m, mode, p ? 37 : 0, lens[i], false);
      }
    ex_qwen35_model_free(m);
  }
  if (failures)
    printf("%d failures\n", failures);
  else
    printf("PASS\n");
  return failures ? 1 : 0;
}
