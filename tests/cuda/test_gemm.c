/* Twin test of the cuBLASLt GEMM (executor/cuda/cuda_gemm.h) against ex_cpu_linear, and the row
 * invariance the engine relies on: every row of a GEMM over n = 1 and n = 37 rows (other leading
 * dimensions) is bit-equal to the same row inside n = 3,400, for each output type and with the
 * residual accumulate (beta = 1), on tiny, 4B-shaped and LM-head (padded odd width) shapes. Then,
 * with the per-bucket algorithms of exc_gemm_prepare, at the 4B and 27B layer shapes (float32 and
 * bf16 outputs): rows of a GEMM at both ends of every row-count bucket (1, 32, 33, 64, …, 2048,
 * 2049, 3400) equal the same rows at n = 1024 and computed alone, bit for bit, and the CPU twin. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_safetensors.h"
#include "cpu_matmul.h"
#include "cuda_gemm.h"
#include "twin.h"

enum { N_BIG = 3400, N_MID = 37, MID_AT = 1000 };

struct shape {
  const char *name;
  size_t k, m_true;       /* reduction length, output features before padding */
  enum exc_dtype y_dtype; /* output type */
  bool accumulate;        /* y += x·wᵀ */
};

static size_t esize(enum exc_dtype t) {
  return t == EXC_DTYPE_BF16 ? 2 : 4;
}

/* Row r of a device output (ld elements) as float32. */
static void row_f32(const void *dev, size_t ld, enum exc_dtype t, size_t r, size_t m, float *out) {
  if (t == EXC_DTYPE_BF16)
    tw_down_bf16(out, (const uint16_t *)dev + r * ld, m);
  else
    tw_down(out, (const float *)dev + r * ld, m * 4);
}

/* Tolerance of one element against the float32 CPU twin: both sides accumulate in float32 in
 * different orders, so |Δ| ≤ 1e-5 · Σ|x_j w_j| (about 170 float32 ulps of the absolute sum; one
 * missing product of a 9,216-long row is ≈ 1.6e-4 of it, so a dropped term fails), plus half a bf16
 * ulp of the value (2^-8 relative) when the output is bf16, and the accumulated input rounded. */
static void check_row(const char *what, const float *got, const float *x, const float *w,
                      const float *y0, size_t k, size_t m, size_t m_true, enum exc_dtype t) {
  float *want = malloc(m * sizeof(float));
  ex_cpu_linear(x, w, NULL, want, 1, k, m);
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t j = 0; j < m; j++) {
    double s = 0;
    for (size_t i = 0; i < k; i++)
      s += fabs((double)x[i] * w[j * k + i]);
    double ref = (double)want[j] + (y0 ? y0[j] : 0.0);
    double lim = 1e-5 * s + (t == EXC_DTYPE_BF16 ? ldexp(fabs(ref), -8) : 0.0) + 1e-30;
    if (j >= m_true)
      lim = 0; /* padding rows of w are zero: their columns are exactly y0 (or 0) */
    double d = fabs((double)got[j] - ref);
    if (!isfinite(got[j]) || d > lim) {
      if (!bad || d / (lim + 1e-30) > worst_ratio) {
        worst_ratio = d / (lim + 1e-30);
        worst = j;
      }
      bad++;
    }
  }
  if (bad)
    tw_fail("%s: %zu of %zu columns off the CPU twin; worst col %zu got %.9g want %.9g", what, bad,
            m, worst, got[worst], (double)want[worst] + (y0 ? y0[worst] : 0.0));
  free(want);
}

static void run_shape(struct exc_gemm *g, const struct shape *s, struct tw_rng *rng) {
  size_t k = s->k, m = exc_gemm_pad(s->m_true), es = esize(s->y_dtype);
  printf("shape %s: k %zu m %zu (padded %zu) %s%s\n", s->name, k, s->m_true, m,
         s->y_dtype == EXC_DTYPE_BF16 ? "bf16" : "f32", s->accumulate ? " accumulate" : "");
  float *w = calloc(m * k, sizeof(float)); /* pad rows stay zero */
  float *x = malloc((size_t)N_BIG * k * sizeof(float));
  tw_fill_bf16_normal(rng, w, s->m_true * k, 0.02f);
  tw_fill_bf16_normal(rng, x, (size_t)N_BIG * k, 1.0f);
  void *dw = tw_dev_bf16(w, m * k), *dx = tw_dev_bf16(x, (size_t)N_BIG * k);
  /* the accumulated start value: random, rounded to the output type */
  void *dy0 = NULL;
  float *y0 = NULL;
  if (s->accumulate) {
    y0 = malloc((size_t)N_BIG * m * sizeof(float));
    if (s->y_dtype == EXC_DTYPE_BF16) {
      tw_fill_bf16_normal(rng, y0, (size_t)N_BIG * m, 1.0f);
      dy0 = tw_dev_bf16(y0, (size_t)N_BIG * m);
    } else {
      tw_fill_normal(rng, y0, (size_t)N_BIG * m, 1.0f);
      dy0 = tw_dev((size_t)N_BIG * m * 4);
      tw_up(dy0, y0, (size_t)N_BIG * m * 4);
    }
  }
  /* n = 3400, ld = m */
  void *dbig = tw_dev((size_t)N_BIG * m * es);
  if (dy0)
    TW_CUDA(cudaMemcpy(dbig, dy0, (size_t)N_BIG * m * es, cudaMemcpyDeviceToDevice));
  else
    tw_poison(dbig, (size_t)N_BIG * m * es);
  TW_OK(exc_gemm(g, 0, dx, k, dw, dbig, m, s->y_dtype, s->accumulate, N_BIG, k, m));
  TW_CUDA(cudaDeviceSynchronize());
  /* n = 1 at three rows */
  const size_t singles[3] = {0, 1777, N_BIG - 1};
  void *d1 = tw_dev(m * es);
  unsigned char *h1 = malloc(m * es), *hb = malloc(m * es);
  float *got = malloc(m * sizeof(float));
  char what[160];
  for (int i = 0; i < 3; i++) {
    size_t r = singles[i];
    if (dy0)
      TW_CUDA(cudaMemcpy(d1, (char *)dy0 + r * m * es, m * es, cudaMemcpyDeviceToDevice));
    else
      tw_poison(d1, m * es);
    TW_OK(exc_gemm(g, 0, (const __nv_bfloat16 *)dx + r * k, k, dw, d1, m, s->y_dtype, s->accumulate,
                   1, k, m));
    tw_down(h1, d1, m * es);
    tw_down(hb, (char *)dbig + r * m * es, m * es);
    if (memcmp(h1, hb, m * es))
      tw_fail("%s: row %zu of n=1 differs from the same row of n=%d", s->name, r, N_BIG);
    if (m > 100000 && i > 0)
      continue; /* the LM head's CPU twin costs seconds per row: one row is checked */
    row_f32(d1, m, s->y_dtype, 0, m, got);
    snprintf(what, sizeof(what), "%s n=1 row %zu", s->name, r);
    check_row(what, got, x + r * k, w, y0 ? y0 + r * m : NULL, k, m, s->m_true, s->y_dtype);
  }
  /* n = 37 from row 1000, with wider leading dimensions (ld_x = k + 8, ld_y = m + 16) */
  size_t ldx = k + 8, ldy = m + 16;
  void *dx37 = tw_dev(N_MID * ldx * 2), *d37 = tw_dev(N_MID * ldy * es);
  tw_poison(dx37, N_MID * ldx * 2);
  TW_CUDA(cudaMemcpy2D(dx37, ldx * 2, (const char *)dx + (size_t)MID_AT * k * 2, k * 2, k * 2,
                       N_MID, cudaMemcpyDeviceToDevice));
  tw_poison(d37, N_MID * ldy * es);
  if (dy0)
    TW_CUDA(cudaMemcpy2D(d37, ldy * es, (char *)dy0 + (size_t)MID_AT * m * es, m * es, m * es,
                         N_MID, cudaMemcpyDeviceToDevice));
  TW_OK(exc_gemm(g, 0, dx37, ldx, dw, d37, ldy, s->y_dtype, s->accumulate, N_MID, k, m));
  for (size_t i = 0; i < N_MID; i++) {
    tw_down(h1, (char *)d37 + i * ldy * es, m * es);
    tw_down(hb, (char *)dbig + (MID_AT + i) * m * es, m * es);
    if (memcmp(h1, hb, m * es))
      tw_fail("%s: row %zu of n=%d differs from the same row of n=%d", s->name, MID_AT + i, N_MID,
              N_BIG);
  }
  /* the padding columns beyond ld_y's first m stay poisoned (not written) */
  if (ldy > m) {
    unsigned char *tail = malloc((ldy - m) * es);
    tw_down(tail, (char *)d37 + m * es, (ldy - m) * es);
    for (size_t i = 0; i < (ldy - m) * es; i++)
      if (tail[i] != 0xff) {
        tw_fail("%s: wrote beyond column m into the ld padding", s->name);
        break;
      }
    free(tail);
  }
  if (m > 100000)
    goto done;
  row_f32(d37, ldy, s->y_dtype, N_MID - 1, m, got);
  snprintf(what, sizeof(what), "%s n=37 row %d", s->name, MID_AT + N_MID - 1);
  check_row(what, got, x + (size_t)(MID_AT + N_MID - 1) * k, w,
            y0 ? y0 + (size_t)(MID_AT + N_MID - 1) * m : NULL, k, m, s->m_true, s->y_dtype);
done:
  cudaFree(dw);
  cudaFree(dx);
  cudaFree(dy0);
  cudaFree(dbig);
  cudaFree(d1);
  cudaFree(dx37);
  cudaFree(d37);
  free(w);
  free(x);
  free(y0);
  free(h1);
  free(hb);
  free(got);
}


/* Uniform values in [-a, a) rounded to bf16 (the float copy is what the GPU sees); cheaper than
 * normal draws for the 27B weights. */
static void fill_bf16_uniform(struct tw_rng *rng, float *x, size_t n, float a) {
  for (size_t i = 0; i < n; i++)
    x[i] = cm_bf16_to_f32(cm_f32_to_bf16(tw_uniform(rng, -a, a)));
}

static const char *sel_name(enum exc_gemm_sel s) {
  switch (s) {
  case EXC_GEMM_SEL_REF: return "reference";
  case EXC_GEMM_SEL_BUCKETS: return "buckets";
  case EXC_GEMM_SEL_SKIP_SIZE: return "skip-size";
  case EXC_GEMM_SEL_SKIP_MEMORY: return "skip-memory";
  case EXC_GEMM_SEL_UNSTABLE: return "UNSTABLE";
  }
  return "?";
}

static const struct exc_gemm_algo *entry(const struct exc_gemm *g, size_t k, size_t m,
                                         enum exc_dtype t, bool acc) {
  for (int i = 0; i < g->n_algos; i++)
    if (g->algos[i].k == k && g->algos[i].m == m && g->algos[i].y_dtype == t &&
        g->algos[i].accumulate == acc)
      return &g->algos[i];
  return NULL;
}

/* Prints a shape's selection: per bucket whether it runs the reference, its timed n and µs. */
static void print_selection(const char *name, const struct exc_gemm_algo *e) {
  printf("  %s: selection %s, %d candidates, %d rejected (differing bits or failed launch), "
         "%.0f ms\n",
         name, sel_name(e->sel), e->n_candidates, e->n_rejected, e->select_ms);
  if (e->sel != EXC_GEMM_SEL_BUCKETS)
    return;
  for (int b = 0; b < EXC_GEMM_N_BUCKETS; b++) {
    int32_t id = -1;
    uint32_t tile = 0;
    size_t got;
    cublasLtMatmulAlgoConfigGetAttribute(&e->bucket_algo[b], CUBLASLT_ALGO_CONFIG_ID, &id,
                                         sizeof(id), &got);
    cublasLtMatmulAlgoConfigGetAttribute(&e->bucket_algo[b], CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                         sizeof(tile), &got);
    bool same = !memcmp(&e->bucket_algo[b], &e->algo, sizeof(e->algo));
    char range[32];
    if (b < EXC_GEMM_N_BUCKETS - 1)
      snprintf(range, sizeof(range), "n <= %zu", exc_gemm_bucket_rows(b));
    else
      snprintf(range, sizeof(range), "n > %zu", exc_gemm_bucket_rows(b - 1));
    printf("    bucket %d (%s, timed at %zu): %s algo %d tile %u, %.1f us (reference %.1f)\n", b,
           range, e->bucket_rows[b], same ? "reference" : "other", id, tile, e->bucket_us[b],
           e->ref_us[b]);
  }
}

/* One GEMM over rows [0, n) of dx into dy (ld m, the shape's output type), the start values
 * copied first when accumulating, the output poisoned otherwise; synchronized. */
static void run_rows(struct exc_gemm *g, const struct shape *s, const void *dx, const void *dw,
                     void *dy, const void *dy0, size_t n) {
  size_t row_bytes = s->m_true * esize(s->y_dtype);
  if (dy0)
    TW_CUDA(cudaMemcpy(dy, dy0, n * row_bytes, cudaMemcpyDeviceToDevice));
  else
    tw_poison(dy, n * row_bytes);
  TW_OK(exc_gemm(g, 0, dx, s->k, dw, dy, s->m_true, s->y_dtype, s->accumulate, n, s->k,
                 s->m_true));
  TW_CUDA(cudaDeviceSynchronize());
}

/* The bucket test of one layer shape (float32 output, or bf16 without accumulate): see the file
 * comment. */
static void run_buckets(struct exc_gemm *g, const struct shape *s, struct tw_rng *rng) {
  enum { N_ALL = 3400, N_REF = EXC_GEMM_REF_ROWS };
  size_t k = s->k, m = s->m_true;
  printf("buckets %s: k %zu m %zu %s%s\n", s->name, k, m,
         s->y_dtype == EXC_DTYPE_BF16 ? "bf16" : "f32", s->accumulate ? " accumulate" : "");
  TW_OK(exc_gemm_prepare(g, k, m, s->y_dtype, s->accumulate));
  const struct exc_gemm_algo *e = entry(g, k, m, s->y_dtype, s->accumulate);
  if (!e)
    tw_fail("%s: no cache entry after exc_gemm_prepare", s->name);
  else {
    print_selection(s->name, e);
    if (e->sel != EXC_GEMM_SEL_BUCKETS)
      tw_fail("%s: per-bucket selection did not run (%s)", s->name, sel_name(e->sel));
  }
  float *w = malloc(m * k * sizeof(float)), *x = malloc((size_t)N_ALL * k * sizeof(float));
  fill_bf16_uniform(rng, w, m * k, 0.05f);
  fill_bf16_uniform(rng, x, (size_t)N_ALL * k, 1.0f);
  void *dw = tw_dev_bf16(w, m * k), *dx = tw_dev_bf16(x, (size_t)N_ALL * k);
  size_t row_bytes = m * esize(s->y_dtype);
  float *y0 = NULL;
  void *dy0 = NULL;
  if (s->accumulate) {
    y0 = malloc((size_t)N_ALL * row_bytes);
    for (size_t i = 0; i < (size_t)N_ALL * m; i++)
      y0[i] = tw_uniform(rng, -1.0f, 1.0f);
    dy0 = tw_dev((size_t)N_ALL * row_bytes);
    tw_up(dy0, y0, (size_t)N_ALL * row_bytes);
  }
  void *dy = tw_dev((size_t)N_ALL * row_bytes), *d1 = tw_dev(row_bytes);
  unsigned char *href = malloc((size_t)N_REF * row_bytes), *hy = malloc((size_t)N_ALL * row_bytes);
  unsigned char *h1 = malloc(row_bytes);
  run_rows(g, s, dx, dw, dy, dy0, N_REF);
  tw_down(href, dy, (size_t)N_REF * row_bytes);
  /* both ends of every bucket, and 3400 */
  size_t ns[2 * EXC_GEMM_N_BUCKETS + 1];
  int n_ns = 0;
  for (int b = 0; b < EXC_GEMM_N_BUCKETS; b++) {
    ns[n_ns++] = b ? exc_gemm_bucket_rows(b - 1) + 1 : 1;
    if (b < EXC_GEMM_N_BUCKETS - 1)
      ns[n_ns++] = exc_gemm_bucket_rows(b);
  }
  ns[n_ns++] = N_ALL;
  size_t n_rows_checked = 0;
  for (int t = 0; t < n_ns; t++) {
    size_t n = ns[t];
    run_rows(g, s, dx, dw, dy, dy0, n);
    tw_down(hy, dy, n * row_bytes);
    size_t upto = n < (size_t)N_REF ? n : (size_t)N_REF;
    for (size_t r = 0; r < upto; r++)
      if (memcmp(hy + r * row_bytes, href + r * row_bytes, row_bytes)) {
        tw_fail("%s: row %zu of n=%zu (bucket %d) differs from the same row of n=%d", s->name, r,
                n, exc_gemm_bucket(n), N_REF);
        break;
      }
    n_rows_checked += upto;
    /* rows computed alone (n = 1): the first, the middle and the last of this call */
    const size_t alone[3] = {0, n / 2, n - 1};
    for (int i = 0; i < 3; i++) {
      size_t r = alone[i];
      if (dy0)
        TW_CUDA(cudaMemcpy(d1, (char *)dy0 + r * row_bytes, row_bytes, cudaMemcpyDeviceToDevice));
      else
        tw_poison(d1, row_bytes);
      TW_OK(exc_gemm(g, 0, (const __nv_bfloat16 *)dx + r * k, k, dw, d1, m, s->y_dtype,
                     s->accumulate, 1, k, m));
      tw_down(h1, d1, row_bytes);
      if (memcmp(h1, hy + r * row_bytes, row_bytes))
        tw_fail("%s: row %zu of n=%zu (bucket %d) differs from the row computed alone", s->name, r,
                n, exc_gemm_bucket(n));
    }
  }
  printf("  %d row counts, %zu rows bit-equal to n=%d, 3 rows each bit-equal to n=1\n", n_ns,
         n_rows_checked, N_REF);
  /* the CPU twin on the first and the last row of n = 3400 (hy still holds it) */
  char what[160];
  float *got = malloc(m * sizeof(float));
  const size_t twin_rows[2] = {0, N_ALL - 1};
  for (int i = 0; i < 2; i++) {
    size_t r = twin_rows[i];
    if (s->y_dtype == EXC_DTYPE_BF16)
      tw_from_bf16((const uint16_t *)(hy + r * row_bytes), got, m);
    else
      memcpy(got, hy + r * row_bytes, row_bytes);
    snprintf(what, sizeof(what), "%s n=3400 row %zu", s->name, r);
    check_row(what, got, x + r * k, w, y0 ? y0 + r * m : NULL, k, m, m, s->y_dtype);
  }
  free(got);
  cudaFree(dw);
  cudaFree(dx);
  cudaFree(dy0);
  cudaFree(dy);
  cudaFree(d1);
  free(w);
  free(x);
  free(y0);
  free(href);
  free(hy);
  free(h1);
}

int main(void) {
  tw_require_gpu();
  struct exc_gemm *g = NULL;
  TW_OK(exc_gemm_new(32u << 20, &g));
  /* argument checks need no device work */
  if (exc_gemm(g, 0, NULL, 8, NULL, NULL, 8, EXC_DTYPE_F32, false, 1, 12, 8) != -EINVAL)
    tw_fail("k = 12 (not a multiple of 8) was accepted");
  if (exc_gemm_prepare(g, 1024, 1032, EXC_DTYPE_BF16, true) != -EINVAL)
    tw_fail("accumulate into bf16 output was accepted");
  if (exc_gemm_pad(248079) != 248080 || exc_gemm_pad(248320) != 248320)
    tw_fail("exc_gemm_pad");
  const struct shape shapes[] = {
      {"tiny q_proj", 64, 520, EXC_DTYPE_F32, false},
      {"tiny down acc", 96, 64, EXC_DTYPE_F32, true},
      {"bf16 out", 2560, 4104, EXC_DTYPE_BF16, false},
      {"4b gate_up", 2560, 18432, EXC_DTYPE_F32, false},
      {"4b down acc", 9216, 2560, EXC_DTYPE_F32, true},
      {"lm head odd", 2560, 248079, EXC_DTYPE_F32, false},
  };
  struct tw_rng rng;
  tw_rng_seed(&rng, 20261129);
  if (exc_gemm_bucket(1) != 0 || exc_gemm_bucket(32) != 0 || exc_gemm_bucket(33) != 1 ||
      exc_gemm_bucket(2048) != 6 || exc_gemm_bucket(2049) != 7 || exc_gemm_bucket(1u << 30) != 7 ||
      exc_gemm_bucket_rows(5) != 1024 || exc_gemm_bucket_rows(EXC_GEMM_N_BUCKETS) != 0)
    tw_fail("exc_gemm_bucket / exc_gemm_bucket_rows");
  if (!g->select)
    tw_fail("per-bucket selection is off (S1_GEMM_SELECT=0 in the environment?)");
  /* prepared first, so that the n = 1, 37 and 3400 calls below run three buckets' algorithms */
  for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
    size_t m = exc_gemm_pad(shapes[i].m_true);
    TW_OK(exc_gemm_prepare(g, shapes[i].k, m, shapes[i].y_dtype, shapes[i].accumulate));
    const struct exc_gemm_algo *e = entry(g, shapes[i].k, m, shapes[i].y_dtype,
                                          shapes[i].accumulate);
    print_selection(shapes[i].name, e);
    enum exc_gemm_sel want =
        m * shapes[i].k * 2 > (512u << 20) ? EXC_GEMM_SEL_SKIP_SIZE : EXC_GEMM_SEL_BUCKETS;
    if (e->sel != want)
      tw_fail("%s: selection %s, expected %s", shapes[i].name, sel_name(e->sel), sel_name(want));
  }
  for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
    run_shape(g, &shapes[i], &rng);
  /* the layer shapes of the 4B and 27B models (spec/qwen3_5.md; m_zba = vd + 2·Hv, padded) */
  const struct shape layers[] = {
      {"4b qkv+gate", 2560, 10240, EXC_DTYPE_F32, false},
      {"4b gate_up", 2560, 18432, EXC_DTYPE_F32, false},
      {"4b down acc", 9216, 2560, EXC_DTYPE_F32, true},
      {"27b zba", 5120, 6240, EXC_DTYPE_F32, false},
      {"27b out acc", 6144, 5120, EXC_DTYPE_F32, true},
      {"27b gate_up", 5120, 34816, EXC_DTYPE_F32, false},
      {"27b down acc", 17408, 5120, EXC_DTYPE_F32, true},
      /* ref-bf16 writes these projections in bf16 */
      {"4b down bf16", 9216, 2560, EXC_DTYPE_BF16, false},
      {"27b gate_up bf16", 5120, 34816, EXC_DTYPE_BF16, false},
      {"27b down bf16", 17408, 5120, EXC_DTYPE_BF16, false},
  };
  for (size_t i = 0; i < sizeof(layers) / sizeof(layers[0]); i++)
    run_buckets(g, &layers[i], &rng);
  printf("algorithms cached: %d\n", g->n_algos);
  exc_gemm_free(g);
  return tw_finish("test_gemm");
}
