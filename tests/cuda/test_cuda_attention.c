/* Twin test of exc_attention_gated against ex_cpu_attention_gated on fresh random bf16 inputs
 * (q, k unit-scale as after the q/k RMSNorm, gates N(0, 2)), at D 256 with Hq/Hkv 16/4 and 24/4,
 * D 128 (8/2) and the tiny D 64 (4/2): 1 token, chunk and tile boundaries, 3,400 tokens (CPU
 * reference on sampled rows), prefix K/V, several rows sharing one prefix in one launch (each equal
 * to its own launch), and a continuation equal to the one-pass run bit for bit (keys reduce in
 * tiles of absolute position, so the split point must not change any bit).
 * Tolerance: the CPU is float32 on the same bf16-rounded inputs; the kernel rounds P to bf16
 * before P·V (as sdpa's flash path), then o, sigmoid(gate) and the product to bf16, i.e. ~4
 * roundings of 2^-9 relative each: |d| ≤ 1.6e-2·|ref| + 4e-3·max|ref| per element and
 * ‖d‖/‖ref‖ ≤ 1e-2 over the tested rows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_attention.h"
#include "cuda_attention.h"
#include "twin.h"

static struct tw_rng rng; /* seeded in main (S1_TEST_SEED to replay) */

struct shape {
  const char *name;
  int hq, hkv, d;
};

/* One sequence's host data: the full cache [n_prefix + n_q, hkv, d] and q/gate [n_q, hq, d], as
 * floats holding bf16 values, plus the bf16 bits. */
struct seqdata {
  int n_prefix, n_q;
  float *q, *gate, *k, *v;
  uint16_t *qb, *gb, *kb, *vb;
};

static void fill(float *f, uint16_t *b, size_t n, float sd) {
  for (size_t i = 0; i < n; i++) {
    b[i] = tw_f2bf(sd * tw_normal(&rng));
    f[i] = tw_bf2f(b[i]);
  }
}
static void make_seq(struct seqdata *s, const struct shape *sh, int n_prefix, int n_q, float qsd) {
  size_t nq = (size_t)n_q * sh->hq * sh->d, nk = (size_t)(n_prefix + n_q) * sh->hkv * sh->d;
  s->n_prefix = n_prefix;
  s->n_q = n_q;
  s->q = malloc(nq * 4), s->gate = malloc(nq * 4), s->k = malloc(nk * 4), s->v = malloc(nk * 4);
  s->qb = malloc(nq * 2), s->gb = malloc(nq * 2), s->kb = malloc(nk * 2), s->vb = malloc(nk * 2);
  fill(s->q, s->qb, nq, qsd);
  fill(s->gate, s->gb, nq, 2.0f);
  fill(s->k, s->kb, nk, 1.0f);
  fill(s->v, s->vb, nk, 1.0f);
}
static void free_seq(struct seqdata *s) {
  free(s->q), free(s->gate), free(s->k), free(s->v), free(s->qb), free(s->gb), free(s->kb), free(s->vb);
}

/* CPU reference for rows [t0, t0+n) of a sequence into ref (row-major [n, hq·d]). */
static void cpu_rows(const struct seqdata *s, const struct shape *sh, int t0, int n, float *ref) {
  size_t row = (size_t)sh->hq * sh->d;
  float *scr = malloc((size_t)(s->n_prefix + s->n_q) * 4);
  ex_cpu_attention_gated(s->q + t0 * row, s->gate + t0 * row, s->k, s->v, ref, scr, (size_t)n,
                         (size_t)(s->n_prefix + t0), sh->hq, sh->hkv, sh->d,
                         1.0f / sqrtf((float)sh->d));
  free(scr);
}

/* Compares GPU rows (bf16 bits, [n_q, hq·d]) with the CPU on all rows, or on sampled runs when
 * the sequence is long. */
static void compare_seq(const char *what, const struct seqdata *s, const struct shape *sh,
                        const uint16_t *got_b) {
  size_t row = (size_t)sh->hq * sh->d;
  int runs[16][2], nr = 0;
  if (s->n_q <= 300) {
    runs[nr][0] = 0, runs[nr][1] = s->n_q, nr++;
  } else {
    int starts[] = {0, 60, 125, 1000, s->n_q / 2 + 3, s->n_q - 8};
    int lens_[] = {8, 10, 6, 4, 5, 8};
    for (int i = 0; i < 6; i++)
      runs[nr][0] = starts[i], runs[nr][1] = lens_[i], nr++;
    for (int i = 0; i < 6; i++) {
      runs[nr][0] = (int)(tw_next(&rng) % (uint64_t)(s->n_q - 1)), runs[nr][1] = 1;
      nr++;
    }
  }
  size_t tot = 0;
  for (int i = 0; i < nr; i++)
    tot += (size_t)runs[i][1];
  float *ref = malloc(tot * row * 4), *got = malloc(tot * row * 4);
  size_t off = 0;
  for (int i = 0; i < nr; i++) {
    cpu_rows(s, sh, runs[i][0], runs[i][1], ref + off * row);
    for (size_t j = 0; j < (size_t)runs[i][1] * row; j++)
      got[off * row + j] = tw_bf2f(got_b[(size_t)runs[i][0] * row + j]);
    off += (size_t)runs[i][1];
  }
  double scale = tw_max_abs(ref, tot * row);
  struct tw_err e = tw_compare(got, ref, tot * row, 4e-3 * scale, 1.6e-2);
  int bad = e.n_bad || e.n_over || !(e.rel_l2 <= 1e-2);
  printf("%-56s rows=%-5zu max|d|=%.3g max|ref|=%.3g rel=%.3g%s %s\n", what, tot, e.max_abs,
         e.ref_max, e.rel_l2, e.n_bad ? " NONFINITE" : "", bad ? "FAIL" : "ok");
  tw_expect(!bad);
  free(ref), free(got);
}

/* Device copies of one sequence: prefix K/V and new K/V in one buffer (k_new = k_prefix + n_prefix
 * rows) or in two (split). */
struct dseq {
  uint16_t *k, *v, *knew, *vnew;
};
static void upload_seq(struct dseq *d, const struct seqdata *s, const struct shape *sh, int split) {
  size_t rk = (size_t)sh->hkv * sh->d, nk = (size_t)(s->n_prefix + s->n_q) * rk;
  d->k = tw_dev(nk * 2), d->v = tw_dev(nk * 2);
  tw_up(d->k, s->kb, nk * 2);
  tw_up(d->v, s->vb, nk * 2);
  if (split) {
    size_t nn = (size_t)s->n_q * rk;
    d->knew = tw_dev(nn * 2), d->vnew = tw_dev(nn * 2);
    tw_up(d->knew, s->kb + (size_t)s->n_prefix * rk, nn * 2);
    tw_up(d->vnew, s->vb + (size_t)s->n_prefix * rk, nn * 2);
  } else {
    d->knew = d->k + (size_t)s->n_prefix * rk;
    d->vnew = d->v + (size_t)s->n_prefix * rk;
  }
}

/* A launch over ns sequences (their q/gate rows packed in order); compares each with the CPU and,
 * for ns > 1, each alone with the packed launch bitwise. */
static void run_packed(const char *name, const struct shape *sh, struct seqdata *ss, int ns,
                       struct dseq *ds) {
  size_t row = (size_t)sh->hq * sh->d, total = 0;
  for (int i = 0; i < ns; i++)
    total += (size_t)ss[i].n_q;
  uint16_t *dq = tw_dev(total * row * 2), *dg = tw_dev(total * row * 2);
  uint16_t *dout = tw_dev(total * row * 2);
  struct exc_attn_seq seqs[EXC_MAX_SEQS];
  size_t start = 0;
  for (int i = 0; i < ns; i++) {
    tw_up(dq + start * row, ss[i].qb, (size_t)ss[i].n_q * row * 2);
    tw_up(dg + start * row, ss[i].gb, (size_t)ss[i].n_q * row * 2);
    seqs[i] = (struct exc_attn_seq){(int32_t)start, ss[i].n_q, ss[i].n_prefix, 0,
                                    (const __nv_bfloat16 *)ds[i].k, (const __nv_bfloat16 *)ds[i].v,
                                    (const __nv_bfloat16 *)ds[i].knew, (const __nv_bfloat16 *)ds[i].vnew};
    start += (size_t)ss[i].n_q;
  }
  tw_poison(dout, total * row * 2); /* bf16 NaN poison */
  TW_ZERO(exc_attention_gated(0, (const __nv_bfloat16 *)dq, (const __nv_bfloat16 *)dg,
                            (__nv_bfloat16 *)dout, seqs, ns, sh->hq, sh->hkv, sh->d,
                            1.0f / sqrtf((float)sh->d)));
  TW_CUDA(cudaDeviceSynchronize());
  uint16_t *out = malloc(total * row * 2);
  TW_CUDA(cudaMemcpy(out, dout, total * row * 2, cudaMemcpyDeviceToHost));
  char what[128];
  start = 0;
  for (int i = 0; i < ns; i++) {
    snprintf(what, sizeof what, "%s %s seq %d (prefix %d, q %d)", name, sh->name, i,
             ss[i].n_prefix, ss[i].n_q);
    compare_seq(what, &ss[i], sh, out + start * row);
    start += (size_t)ss[i].n_q;
  }
  if (ns > 1) {
    int same = 1;
    uint16_t *o1 = malloc(total * row * 2);
    for (int i = 0; i < ns; i++) {
      struct exc_attn_seq one = seqs[i];
      tw_poison(dout, total * row * 2);
      TW_ZERO(exc_attention_gated(0, (const __nv_bfloat16 *)dq, (const __nv_bfloat16 *)dg,
                                (__nv_bfloat16 *)dout, &one, 1, sh->hq, sh->hkv, sh->d,
                                1.0f / sqrtf((float)sh->d)));
      TW_CUDA(cudaMemcpy(o1, dout, total * row * 2, cudaMemcpyDeviceToHost));
      same &= memcmp(o1 + (size_t)one.q_start * row, out + (size_t)one.q_start * row,
                     (size_t)one.n_q * row * 2) == 0;
    }
    printf("%-56s %s\n", "  each sequence alone == packed launch (bitwise)", same ? "ok" : "FAIL");
    tw_expect(same);
    free(o1);
  }
  free(out);
  cudaFree(dq), cudaFree(dg), cudaFree(dout);
}

static void free_dseq(struct dseq *d, int split) {
  cudaFree(d->k), cudaFree(d->v);
  if (split)
    cudaFree(d->knew), cudaFree(d->vnew);
}

static void run_single(const struct shape *sh, int n_prefix, int n_q, int split, float qsd) {
  struct seqdata s;
  struct dseq d;
  make_seq(&s, sh, n_prefix, n_q, qsd);
  upload_seq(&d, &s, sh, split);
  run_packed(qsd > 1.5f ? "peaky" : "single", sh, &s, 1, &d);
  free_dseq(&d, split);
  free_seq(&s);
}

/* Rows of one snapshot: nr sequences share one prefix's K/V (one device buffer). */
static void run_rows(const struct shape *sh, int n_prefix, const int *nq, int nr) {
  struct seqdata ss[8];
  struct dseq ds[8];
  size_t rk = (size_t)sh->hkv * sh->d;
  make_seq(&ss[0], sh, n_prefix, nq[0], 1.0f);
  upload_seq(&ds[0], &ss[0], sh, 1);
  for (int i = 1; i < nr; i++) {
    make_seq(&ss[i], sh, n_prefix, nq[i], 1.0f);
    memcpy(ss[i].k, ss[0].k, (size_t)n_prefix * rk * 4); /* the shared prefix */
    memcpy(ss[i].v, ss[0].v, (size_t)n_prefix * rk * 4);
    memcpy(ss[i].kb, ss[0].kb, (size_t)n_prefix * rk * 2);
    memcpy(ss[i].vb, ss[0].vb, (size_t)n_prefix * rk * 2);
    upload_seq(&ds[i], &ss[i], sh, 1);
    cudaFree(ds[i].k), cudaFree(ds[i].v);
    ds[i].k = ds[0].k, ds[i].v = ds[0].v;
  }
  run_packed("rows of one snapshot", sh, ss, nr, ds);
  for (int i = 0; i < nr; i++) {
    if (i == 0)
      free_dseq(&ds[0], 1);
    else
      cudaFree(ds[i].knew), cudaFree(ds[i].vnew);
    free_seq(&ss[i]);
  }
}

/* One pass over n tokens vs [0, p) then [p, n) with prefix K/V: identical bits. */
static void run_continuation(const struct shape *sh, int n, int p) {
  struct seqdata s;
  make_seq(&s, sh, 0, n, 1.0f);
  size_t row = (size_t)sh->hq * sh->d, rk = (size_t)sh->hkv * sh->d;
  uint16_t *dq = tw_dev((size_t)n * row * 2), *dg = tw_dev((size_t)n * row * 2);
  uint16_t *dk = tw_dev((size_t)n * rk * 2), *dv = tw_dev((size_t)n * rk * 2);
  uint16_t *o1 = tw_dev((size_t)n * row * 2), *o2 = tw_dev((size_t)n * row * 2);
  tw_up(dq, s.qb, (size_t)n * row * 2);
  tw_up(dg, s.gb, (size_t)n * row * 2);
  tw_up(dk, s.kb, (size_t)n * rk * 2);
  tw_up(dv, s.vb, (size_t)n * rk * 2);
  tw_poison(o1, (size_t)n * row * 2);
  tw_poison(o2, (size_t)n * row * 2);
  const __nv_bfloat16 *K = (const __nv_bfloat16 *)dk, *V = (const __nv_bfloat16 *)dv;
  float sc = 1.0f / sqrtf((float)sh->d);
  struct exc_attn_seq all = {0, n, 0, 0, NULL, NULL, K, V};
  TW_ZERO(exc_attention_gated(0, (const __nv_bfloat16 *)dq, (const __nv_bfloat16 *)dg,
                            (__nv_bfloat16 *)o1, &all, 1, sh->hq, sh->hkv, sh->d, sc));
  struct exc_attn_seq a = {0, p, 0, 0, NULL, NULL, K, V};
  struct exc_attn_seq b = {p, n - p, p, 0, K, V, K + (size_t)p * rk, V + (size_t)p * rk};
  TW_ZERO(exc_attention_gated(0, (const __nv_bfloat16 *)dq, (const __nv_bfloat16 *)dg,
                            (__nv_bfloat16 *)o2, &a, 1, sh->hq, sh->hkv, sh->d, sc));
  TW_ZERO(exc_attention_gated(0, (const __nv_bfloat16 *)dq, (const __nv_bfloat16 *)dg,
                            (__nv_bfloat16 *)o2, &b, 1, sh->hq, sh->hkv, sh->d, sc));
  TW_CUDA(cudaDeviceSynchronize());
  uint16_t *h1 = malloc((size_t)n * row * 2), *h2 = malloc((size_t)n * row * 2);
  TW_CUDA(cudaMemcpy(h1, o1, (size_t)n * row * 2, cudaMemcpyDeviceToHost));
  TW_CUDA(cudaMemcpy(h2, o2, (size_t)n * row * 2, cudaMemcpyDeviceToHost));
  char what[128];
  snprintf(what, sizeof what, "one pass %s T=%d", sh->name, n);
  compare_seq(what, &s, sh, h1);
  size_t diff = 0;
  for (size_t i = 0; i < (size_t)n * row; i++)
    diff += h1[i] != h2[i];
  printf("%-56s differing=%zu %s\n", "  continuation at p == one pass (bitwise)", diff,
         diff ? "FAIL" : "ok");
  (void)p;
  tw_expect(diff == 0);
  free(h1), free(h2);
  cudaFree(dq), cudaFree(dg), cudaFree(dk), cudaFree(dv), cudaFree(o1), cudaFree(o2);
  free_seq(&s);
}

int main(void) {
  tw_require_gpu();
  tw_rng_seed_env(&rng, "test_cuda_attention");
  const struct shape b4 = {"4B(16/4,D256)", 16, 4, 256};
  const struct shape b27 = {"27B(24/4,D256)", 24, 4, 256};
  const struct shape d128 = {"8/2,D128", 8, 2, 128};
  const struct shape tiny = {"tiny(4/2,D64)", 4, 2, 64};
  const struct shape *all[] = {&b4, &b27, &d128, &tiny};
  const int lens[] = {1, 2, 63, 64, 65, 127, 129};
  for (int i = 0; i < 4; i++)
    for (int l = 0; l < 7; l++)
      run_single(all[i], 0, lens[l], l % 2, 1.0f);
  run_single(&b4, 3400 - 3400, 3400, 0, 1.0f);
  run_single(&b27, 0, 3400, 1, 1.0f);
  run_single(&tiny, 0, 3400, 0, 1.0f);
  run_single(&b4, 0, 200, 0, 3.0f); /* peaky softmax: scores with sd 3 */
  run_single(&b4, 300, 65, 1, 1.0f);
  run_single(&b27, 77, 1, 0, 1.0f);
  run_single(&tiny, 129, 63, 1, 1.0f);
  const int nq[] = {1, 65, 3, 129, 64};
  run_rows(&b4, 300, nq, 5);
  run_rows(&b27, 64, nq, 5);
  run_rows(&tiny, 1, nq, 5);
  run_continuation(&b4, 200, 130);
  run_continuation(&b27, 129, 64);
  run_continuation(&tiny, 300, 1);
  return tw_finish("test_cuda_attention");
}
