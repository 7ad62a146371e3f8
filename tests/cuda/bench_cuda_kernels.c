/* Microbenchmark of the attention, Gated DeltaNet and conv kernels at the 4B and 27B shapes for
 * 128, 1,024 and 3,400 tokens (one fresh sequence): CUDA events around each launch, 5 warm-ups,
 * median of 25, random inputs (never zeros). Prints per-launch time, the FLOP and byte counts of
 * the work and the achieved rates, then the per-model totals (layers × time). Not a test. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_attention.h"
#include "cuda_conv1d.h"
#include "cuda_gdn.h"
#include "gdn_variants.h"
#include "twin.h"

static struct tw_rng rng; /* seeded in main */

#define WARM 5
#define REPS 25

static int cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

typedef int (*launch_fn)(void *ctx);

static float time_ms(launch_fn f, void *ctx) {
  cudaEvent_t e0, e1;
  TW_CUDA(cudaEventCreate(&e0));
  TW_CUDA(cudaEventCreate(&e1));
  for (int i = 0; i < WARM; i++)
    TW_ZERO(f(ctx));
  float t[REPS];
  for (int i = 0; i < REPS; i++) {
    TW_CUDA(cudaEventRecord(e0, 0));
    TW_ZERO(f(ctx));
    TW_CUDA(cudaEventRecord(e1, 0));
    TW_CUDA(cudaEventSynchronize(e1));
    TW_CUDA(cudaEventElapsedTime(&t[i], e0, e1));
  }
  qsort(t, REPS, sizeof(float), cmpf);
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  return t[REPS / 2];
}

/* whether the comma-separated `list` holds `name` */
static int list_has(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
    if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0'))
      return 1;
  return 0;
}

static void *dev_random_f32(size_t n, float sd) {
  float *h = malloc(n * 4);
  for (size_t i = 0; i < n; i++)
    h[i] = sd * tw_normal(&rng);
  void *d = tw_dev(n * 4);
  tw_up(d, h, n * 4);
  free(h);
  return d;
}
static void *dev_random_bf16(size_t n, float sd) {
  uint16_t *h = malloc(n * 2);
  for (size_t i = 0; i < n; i++)
    h[i] = tw_f2bf(sd * tw_normal(&rng));
  void *d = tw_dev(n * 2);
  tw_up(d, h, n * 2);
  free(h);
  return d;
}

struct attn_ctx {
  void *q, *g, *k, *v, *o;
  struct exc_attn_seq seq;
  int hq, hkv;
};
static int attn_run(void *c) {
  struct attn_ctx *a = c;
  return exc_attention_gated(0, a->q, a->g, a->o, &a->seq, 1, a->hq, a->hkv, 256, 1.0f / 16.0f);
}
typedef int (*gdn_chunked_fn)(cudaStream_t, const float *, size_t, const float *, const float *,
                              float *, const struct exc_gdn_seq *, int, const struct ex_gdn_dims *,
                              void *);
struct gdn_ctx {
  gdn_chunked_fn chunked; /* exc_gdn_chunked (the engine's) or a variant of gdn_variants.h */
  float *qkv, *beta, *g, *out, *state, *b, *a, *alog, *dt;
  void *scratch;
  size_t ld, n;
  struct ex_gdn_dims d;
  struct exc_gdn_seq seq;
};
static int gdn_run(void *c) {
  struct gdn_ctx *x = c;
  return x->chunked(0, x->qkv, x->ld, x->beta, x->g, x->out, &x->seq, 1, &x->d, x->scratch);
}
static int prep_run(void *c) {
  struct gdn_ctx *x = c;
  return exc_gdn_prepare(0, x->qkv, x->ld, x->b, x->a, x->d.n_v_heads, x->alog, x->dt, x->beta,
                         x->g, x->n, &x->d);
}
struct conv_ctx {
  float *x, *w, *y, *win, *wout;
  struct exc_conv_seq seq;
  size_t c;
};
static int conv_run(void *c) {
  struct conv_ctx *x = c;
  return exc_causal_conv1d_silu(0, x->x, x->w, x->y, &x->seq, 1, x->c, 4);
}

int main(void) {
  tw_require_gpu();
  tw_rng_seed_env(&rng, "bench_cuda_kernels");
  struct model {
    const char *name;
    int hq, hkv, n_attn;
    struct ex_gdn_dims d;
    int n_gdn;
  } models[] = {{"4B", 16, 4, 8, {16, 32, 128, 128}, 24}, {"27B", 24, 4, 16, {16, 48, 128, 128}, 48}};
  const int toks[] = {128, 1024, 3400};
  printf("%-5s %-6s %-14s %10s %10s %10s %12s\n", "model", "T", "kernel", "ms/launch", "TFLOP/s",
         "GB/s", "ms/model");
  /* S1_BENCH_ONLY=MODEL:T (e.g. 4B:3400) runs that one case, for profiling a few launches */
  const char *only = getenv("S1_BENCH_ONLY");
  for (int mi = 0; mi < 2; mi++) {
    struct model *m = &models[mi];
    for (int ti = 0; ti < 3; ti++) {
      int T = toks[ti];
      char tag[32];
      snprintf(tag, sizeof tag, "%s:%d", m->name, T);
      if (only && strcmp(only, tag) != 0)
        continue;
      double model_ms = 0;
      /* attention */
      struct attn_ctx a;
      size_t nq = (size_t)T * m->hq * 256, nk = (size_t)T * m->hkv * 256;
      a.q = dev_random_bf16(nq, 1.0f), a.g = dev_random_bf16(nq, 2.0f);
      a.k = dev_random_bf16(nk, 1.0f), a.v = dev_random_bf16(nk, 1.0f), a.o = tw_dev(nq * 2);
      a.seq = (struct exc_attn_seq){0, T, 0, 0, NULL, NULL, a.k, a.v};
      a.hq = m->hq, a.hkv = m->hkv;
      double fl = 4.0 * m->hq * 256.0 * ((double)T * (T + 1) / 2.0);
      double by = 3.0 * nq * 2 + 2.0 * nk * 2;
      float t = 0;
      const char *variants[] = {"64", "128", NULL}; /* S1_ATTN_BM; NULL: the kernel's choice */
      for (int vi = 0; vi < 3; vi++) {
        if (variants[vi])
          setenv("S1_ATTN_BM", variants[vi], 1);
        else
          unsetenv("S1_ATTN_BM");
        t = time_ms(attn_run, &a);
        char label[32];
        snprintf(label, sizeof label, "attention%s%s", variants[vi] ? "/bm" : "",
                 variants[vi] ? variants[vi] : "");
        printf("%-5s %-6d %-14s %10.4f %10.2f %10.1f %12.3f\n", m->name, T, label, t,
               fl / t / 1e9, by / t / 1e6, t * m->n_attn);
      }
      model_ms += t * m->n_attn;
      cudaFree(a.q), cudaFree(a.g), cudaFree(a.k), cudaFree(a.v), cudaFree(a.o);
      /* conv */
      struct conv_ctx c;
      c.c = 2 * m->d.n_k_heads * m->d.dk + m->d.n_v_heads * m->d.dv;
      c.x = dev_random_f32((size_t)T * c.c, 1.0f), c.w = dev_random_f32(c.c * 4, 0.3f);
      c.y = tw_dev((size_t)T * c.c * 4), c.win = dev_random_f32(3 * c.c, 1.0f);
      c.wout = tw_dev(3 * c.c * 4);
      c.seq = (struct exc_conv_seq){0, T, c.win, c.wout};
      t = time_ms(conv_run, &c);
      by = 2.0 * T * c.c * 4;
      printf("%-5s %-6d %-14s %10.4f %10s %10.1f %12.3f\n", m->name, T, "conv1d+silu", t, "-",
             by / t / 1e6, t * m->n_gdn);
      model_ms += t * m->n_gdn;
      /* GDN prepare (in place on a copy that is re-normalised each time: harmless) */
      struct gdn_ctx g;
      g.chunked = exc_gdn_chunked;
      g.d = m->d;
      g.n = (size_t)T;
      g.ld = c.c;
      g.qkv = dev_random_f32((size_t)T * g.ld, 1.0f);
      g.b = dev_random_f32((size_t)T * m->d.n_v_heads, 2.0f);
      g.a = dev_random_f32((size_t)T * m->d.n_v_heads, 3.0f);
      g.alog = dev_random_f32(m->d.n_v_heads, 1.0f), g.dt = dev_random_f32(m->d.n_v_heads, 1.0f);
      g.beta = tw_dev((size_t)T * m->d.n_v_heads * 4), g.g = tw_dev((size_t)T * m->d.n_v_heads * 4);
      t = time_ms(prep_run, &g);
      by = 2.0 * T * 2 * m->d.n_k_heads * m->d.dk * 4 + 4.0 * T * m->d.n_v_heads * 4;
      printf("%-5s %-6d %-14s %10.4f %10s %10.1f %12.3f\n", m->name, T, "gdn_prepare", t, "-",
             by / t / 1e6, t * m->n_gdn);
      model_ms += t * m->n_gdn;
      /* GDN chunked on the prepared rows */
      g.out = tw_dev((size_t)T * m->d.n_v_heads * m->d.dv * 4);
      g.state = dev_random_f32(m->d.n_v_heads * m->d.dk * m->d.dv, 0.5f);
      g.scratch = tw_dev(exc_gdn_chunked_scratch_bytes((size_t)T, 1, &m->d));
      g.seq = (struct exc_gdn_seq){0, T, g.state, NULL};
      /* every implementation named in S1_GDN_BENCH_KINDS (default all: "simt,invf,invt"; simt,
       * the reference for max|d|, and invf, the engine's exc_gdn_chunked, always run); the model
       * sum takes the engine's */
      enum { K_SIMT, K_INVF, K_INVT, K_COUNT };
      const char *kind_label[K_COUNT] = {"gdn_chunked", "gdn_chunked/invf", "gdn_chunked/invt"};
      const char *kind_name[K_COUNT] = {"simt", "invf", "invt"};
      const gdn_chunked_fn kind_fn[K_COUNT] = {gdn_simt_chunked, exc_gdn_chunked,
                                               gdn_invt_chunked};
      const char *kinds_env = getenv("S1_GDN_BENCH_KINDS");
      float t_kind[K_COUNT];
      double d_kind[K_COUNT]; /* max|out − out_simt| / max|out_simt| */
      size_t n_out = (size_t)T * m->d.n_v_heads * m->d.dv;
      float *o_simt = malloc(n_out * 4), *o_k = malloc(n_out * 4);
      for (int kv = 0; kv < K_COUNT; kv++) {
        t_kind[kv] = -1.0f;
        if (kv != K_SIMT && kv != K_INVF && kinds_env && !list_has(kinds_env, kind_name[kv]))
          continue;
        g.chunked = kind_fn[kv];
        t_kind[kv] = time_ms(gdn_run, &g);
        TW_CUDA(cudaMemcpy(kv ? o_k : o_simt, g.out, n_out * 4, cudaMemcpyDeviceToHost));
        double dmax = 0, rmax = 0;
        for (size_t i = 0; kv && i < n_out; i++) {
          double d = fabs((double)o_k[i] - o_simt[i]), r = fabs((double)o_simt[i]);
          dmax = d > dmax || d != d ? d : dmax;
          rmax = r > rmax ? r : rmax;
        }
        d_kind[kv] = kv ? dmax / rmax : 0.0;
      }
      free(o_simt), free(o_k);
      double nch = (T + 63) / 64, hv = m->d.n_v_heads, dk = 128, dv = 128;
      /* useful FLOPs per chunk and head: KKᵀ, QKᵀ (2·64·64·dk each), solves (64·63·(dk+dv)),
       * W·S and Q·S (2·2·64·dk·dv), state update (2·64·dk·dv), A·V' (64·65·dv) */
      fl = nch * hv * (4.0 * 64 * 64 * dk + 64.0 * 63 * (dk + dv) + 6.0 * 64 * dk * dv + 64.0 * 65 * dv);
      by = (double)T * (2 * m->d.n_k_heads * dk + hv * dv + 2 * hv) * 4 + (double)T * hv * dv * 4 +
           2.0 * hv * dk * dv * 4;
      for (int kv = 0; kv < K_COUNT; kv++) {
        t = t_kind[kv];
        if (t < 0.0f) {
          printf("%-5s %-6d %-14s %10s (not in S1_GDN_BENCH_KINDS)\n", m->name, T, kind_label[kv],
                 "-");
          continue;
        }
        printf("%-5s %-6d %-14s %10.4f %10.2f %10.1f %12.3f", m->name, T, kind_label[kv], t,
               fl / t / 1e9, by / t / 1e6, t * m->n_gdn);
        if (kv)
          printf("  max|d| vs simt %.2g of max|out|", d_kind[kv]);
        printf("\n");
      }
      model_ms += t_kind[K_INVF] * m->n_gdn;
      printf("%-5s %-6d %-14s %10s %10s %10s %12.3f\n", m->name, T, "sum(model)", "", "", "",
             model_ms);
      cudaFree(c.x), cudaFree(c.w), cudaFree(c.y), cudaFree(c.win), cudaFree(c.wout);
      cudaFree(g.qkv), cudaFree(g.b), cudaFree(g.a), cudaFree(g.alog), cudaFree(g.dt);
      cudaFree(g.beta), cudaFree(g.g), cudaFree(g.out), cudaFree(g.state), cudaFree(g.scratch);
    }
  }
  return 0;
}
