/* GEMM timing at the 4B and 27B layer shapes (not a test): the reference algorithm alone (the
 * engine before per-bucket selection, exc_gemm.select = false) against the per-bucket selection of
 * exc_gemm_prepare, at n = 128, 512, 1024 and 3400 rows. CUDA events around each call, the L2
 * flushed before each, 3 warm-ups, median of 10, uniform random bf16 inputs. Also checks that both
 * give the same bits on the first 256 rows, and prints each shape's selection cost and the
 * per-model GEMM sums (shape time × layers using it). Usage: bench_gemm [4b|27b|all] [f32|bf16]
 * (the output type of every shape; default f32). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_safetensors.h"
#include "cuda_gemm.h"
#include "twin.h"

enum { WARM = 3, REPS = 10, N_NS = 4, CMP_ROWS = 256 };
static const size_t ns[N_NS] = {128, 512, 1024, 3400};
static const size_t flush_bytes = (size_t)128 << 20;

struct bshape {
  const char *model; /* "4b" or "27b" */
  const char *name;  /* projection(s) */
  size_t k, m;       /* reduction length, output features (multiples of 8) */
  int layers;        /* layers of the model that run it once per forward */
};

/* The engine's default (ref-bf16) projections: output projections write a scratch (no
 * accumulate). spec/qwen3_5.md shapes; 4B: 8 attention + 24 GDN layers, 27B: 16 + 48. */
static const struct bshape shapes[] = {
    {"4b", "attn qkv+gate", 2560, 10240, 8},   {"4b", "attn o / gdn out", 4096, 2560, 32},
    {"4b", "gdn qkv", 2560, 8192, 24},         {"4b", "gdn z,b,a", 2560, 4160, 24},
    {"4b", "mlp gate_up", 2560, 18432, 32},    {"4b", "mlp down", 9216, 2560, 32},
    {"27b", "attn qkv+gate", 5120, 14336, 16}, {"27b", "attn o / gdn out", 6144, 5120, 64},
    {"27b", "gdn qkv", 5120, 10240, 48},       {"27b", "gdn z,b,a", 5120, 6240, 48},
    {"27b", "mlp gate_up", 5120, 34816, 64},   {"27b", "mlp down", 17408, 5120, 64},
};

static int cmpf(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Median ms of one exc_gemm at n rows, cold L2. */
static float time_gemm(struct exc_gemm *g, const void *dx, const void *dw, void *dy, void *flush,
                       size_t n, size_t k, size_t m, enum exc_dtype y_dtype) {
  cudaEvent_t e0, e1;
  TW_CUDA(cudaEventCreate(&e0));
  TW_CUDA(cudaEventCreate(&e1));
  float t[REPS];
  for (int i = 0; i < WARM + REPS; i++) {
    TW_CUDA(cudaMemsetAsync(flush, i, flush_bytes, 0));
    TW_CUDA(cudaEventRecord(e0, 0));
    TW_OK(exc_gemm(g, 0, dx, k, dw, dy, m, y_dtype, false, n, k, m));
    TW_CUDA(cudaEventRecord(e1, 0));
    TW_CUDA(cudaEventSynchronize(e1));
    if (i >= WARM)
      TW_CUDA(cudaEventElapsedTime(&t[i - WARM], e0, e1));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  qsort(t, REPS, sizeof(float), cmpf);
  return t[REPS / 2];
}

static const struct exc_gemm_algo *entry(const struct exc_gemm *g, size_t k, size_t m,
                                         enum exc_dtype t) {
  for (int i = 0; i < g->n_algos; i++)
    if (g->algos[i].k == k && g->algos[i].m == m && g->algos[i].y_dtype == t &&
        !g->algos[i].accumulate)
      return &g->algos[i];
  return NULL;
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "all";
  enum exc_dtype t = argc > 2 && !strcmp(argv[2], "bf16") ? EXC_DTYPE_BF16 : EXC_DTYPE_F32;
  size_t es = t == EXC_DTYPE_BF16 ? 2 : 4;
  printf("output type %s\n", t == EXC_DTYPE_BF16 ? "bf16" : "f32");
  tw_require_gpu();
  struct exc_gemm *g_ref = NULL, *g_new = NULL;
  TW_OK(exc_gemm_new(32u << 20, &g_ref));
  TW_OK(exc_gemm_new(32u << 20, &g_new));
  g_ref->select = false;
  g_new->select = true;
  /* one host buffer of uniform bf16 values, large enough for the largest weight, reused (with an
   * offset per shape) for weights and inputs */
  size_t max_elems = 0;
  for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
    size_t a = shapes[i].k * shapes[i].m, b = ns[N_NS - 1] * shapes[i].k;
    max_elems = a > max_elems ? a : max_elems;
    max_elems = b > max_elems ? b : max_elems;
  }
  size_t pool_elems = max_elems + 1000003;
  uint16_t *pool = malloc(pool_elems * 2);
  struct tw_rng rng;
  tw_rng_seed(&rng, 20261130);
  for (size_t i = 0; i < pool_elems; i++)
    pool[i] = cm_f32_to_bf16(tw_uniform(&rng, -1.0f, 1.0f));
  void *flush = tw_dev(flush_bytes);
  double sum_ref[2][N_NS] = {{0}}, sum_new[2][N_NS] = {{0}}, sel_ms[2] = {0};
  int mismatches = 0;
  printf("%-4s %-17s %6s %6s %5s %9s %9s %7s %8s\n", "", "shape", "k", "m", "n", "ref ms", "new ms",
         "ref/new", "new GB/s");
  for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
    const struct bshape *s = &shapes[si];
    if (strcmp(which, "all") && strcmp(which, s->model))
      continue;
    int mi = !strcmp(s->model, "27b");
    size_t k = s->k, m = s->m, nmax = ns[N_NS - 1];
    void *dw = tw_dev(m * k * 2), *dx = tw_dev(nmax * k * 2);
    tw_up(dw, pool + (si * 7919) % 1000003, m * k * 2);
    tw_up(dx, pool + (si * 104729) % 1000003, nmax * k * 2);
    void *dy_ref = tw_dev(nmax * m * es), *dy_new = tw_dev(nmax * m * es);
    TW_OK(exc_gemm_prepare(g_ref, k, m, t, false));
    double t0 = now_ms();
    TW_OK(exc_gemm_prepare(g_new, k, m, t, false));
    double prep = now_ms() - t0;
    sel_ms[mi] += prep;
    const struct exc_gemm_algo *e = entry(g_new, k, m, t);
    int n_other = 0;
    for (int b = 0; b < EXC_GEMM_N_BUCKETS; b++)
      n_other += !!memcmp(&e->bucket_algo[b], &e->algo, sizeof(e->algo));
    for (int j = 0; j < N_NS; j++) {
      size_t n = ns[j];
      float tr = time_gemm(g_ref, dx, dw, dy_ref, flush, n, k, m, t);
      float tn = time_gemm(g_new, dx, dw, dy_new, flush, n, k, m, t);
      size_t rows = n < CMP_ROWS ? n : CMP_ROWS, bytes = rows * m * es;
      unsigned char *a = malloc(bytes), *b = malloc(bytes);
      tw_down(a, dy_ref, bytes);
      tw_down(b, dy_new, bytes);
      if (memcmp(a, b, bytes)) {
        printf("MISMATCH: %s %s n=%zu: selected algorithm's bits differ from the reference's\n",
               s->model, s->name, n);
        mismatches++;
      }
      free(a);
      free(b);
      double gbs = (double)(m * k * 2 + n * k * 2 + n * m * es) / (tn * 1e-3) / 1e9;
      printf("%-4s %-17s %6zu %6zu %5zu %9.4f %9.4f %7.2f %8.0f\n", s->model, s->name, k, m, n, tr,
             tn, tr / tn, gbs);
      sum_ref[mi][j] += tr * s->layers;
      sum_new[mi][j] += tn * s->layers;
    }
    printf(
        "     selection %.0f ms (%d candidates, %d rejected), %d of %d buckets not the reference\n",
        prep, e->n_candidates, e->n_rejected, n_other, EXC_GEMM_N_BUCKETS);
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dy_ref);
    cudaFree(dy_new);
  }
  printf("\nper model (sum of shape ms x layers; no LM head):\n");
  for (int mi = 0; mi < 2; mi++) {
    if (strcmp(which, "all") && strcmp(which, mi ? "27b" : "4b"))
      continue;
    for (int j = 0; j < N_NS; j++)
      printf("%-4s n=%-5zu ref %8.2f ms  new %8.2f ms  (%.2fx)\n", mi ? "27b" : "4b", ns[j],
             sum_ref[mi][j], sum_new[mi][j], sum_ref[mi][j] / sum_new[mi][j]);
    printf("%-4s selection at start-up: %.0f ms for these shapes\n", mi ? "27b" : "4b", sel_ms[mi]);
  }
  free(pool);
  cudaFree(flush);
  exc_gemm_free(g_ref);
  exc_gemm_free(g_new);
  if (mismatches)
    printf("%d mismatches\n", mismatches);
  return mismatches ? 1 : 0;
}
