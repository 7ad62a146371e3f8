/* Twin test of the cuBLASLt GEMM (executor/cuda/cuda_gemm.h) against ex_cpu_linear, and the row
 * invariance the engine relies on: every row of a GEMM over n = 1 and n = 37 rows (other leading
 * dimensions) is bit-equal to the same row inside n = 3,400, for each output type and with the
 * residual accumulate (beta = 1), on tiny, 4B-shaped and LM-head (padded odd width) shapes. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_matmul.h"
#include "cuda_gemm.h"
#include "exc_test.h"

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
    xt_down_bf16(out, (const uint16_t *)dev + r * ld, m);
  else
    xt_down(out, (const float *)dev + r * ld, m * 4);
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
    xt_fail("%s: %zu of %zu columns off the CPU twin; worst col %zu got %.9g want %.9g", what,
            bad, m, worst, got[worst], (double)want[worst] + (y0 ? y0[worst] : 0.0));
  free(want);
}

static void run_shape(struct exc_gemm *g, const struct shape *s, struct xt_rng *rng) {
  size_t k = s->k, m = exc_gemm_pad(s->m_true), es = esize(s->y_dtype);
  printf("shape %s: k %zu m %zu (padded %zu) %s%s\n", s->name, k, s->m_true, m,
         s->y_dtype == EXC_DTYPE_BF16 ? "bf16" : "f32", s->accumulate ? " accumulate" : "");
  float *w = calloc(m * k, sizeof(float)); /* pad rows stay zero */
  float *x = malloc((size_t)N_BIG * k * sizeof(float));
  xt_fill_bf16_normal(rng, w, s->m_true * k, 0.02f);
  xt_fill_bf16_normal(rng, x, (size_t)N_BIG * k, 1.0f);
  void *dw = xt_dev_bf16(w, m * k), *dx = xt_dev_bf16(x, (size_t)N_BIG * k);
  /* the accumulated start value: random, rounded to the output type */
  void *dy0 = NULL;
  float *y0 = NULL;
  if (s->accumulate) {
    y0 = malloc((size_t)N_BIG * m * sizeof(float));
    if (s->y_dtype == EXC_DTYPE_BF16) {
      xt_fill_bf16_normal(rng, y0, (size_t)N_BIG * m, 1.0f);
      dy0 = xt_dev_bf16(y0, (size_t)N_BIG * m);
    } else {
      xt_fill_normal(rng, y0, (size_t)N_BIG * m, 1.0f);
      dy0 = xt_dev((size_t)N_BIG * m * 4);
      xt_up(dy0, y0, (size_t)N_BIG * m * 4);
    }
  }
  /* n = 3400, ld = m */
  void *dbig = xt_dev((size_t)N_BIG * m * es);
  if (dy0)
    XT_CUDA(cudaMemcpy(dbig, dy0, (size_t)N_BIG * m * es, cudaMemcpyDeviceToDevice));
  else
    xt_poison(dbig, (size_t)N_BIG * m * es);
  XT_OK(exc_gemm(g, 0, dx, k, dw, dbig, m, s->y_dtype, s->accumulate, N_BIG, k, m));
  XT_CUDA(cudaDeviceSynchronize());
  /* n = 1 at three rows */
  const size_t singles[3] = {0, 1777, N_BIG - 1};
  void *d1 = xt_dev(m * es);
  unsigned char *h1 = malloc(m * es), *hb = malloc(m * es);
  float *got = malloc(m * sizeof(float));
  char what[160];
  for (int i = 0; i < 3; i++) {
    size_t r = singles[i];
    if (dy0)
      XT_CUDA(cudaMemcpy(d1, (char *)dy0 + r * m * es, m * es, cudaMemcpyDeviceToDevice));
    else
      xt_poison(d1, m * es);
    XT_OK(exc_gemm(g, 0, (const __nv_bfloat16 *)dx + r * k, k, dw, d1, m, s->y_dtype,
                   s->accumulate, 1, k, m));
    xt_down(h1, d1, m * es);
    xt_down(hb, (char *)dbig + r * m * es, m * es);
    if (memcmp(h1, hb, m * es))
      xt_fail("%s: row %zu of n=1 differs from the same row of n=%d", s->name, r, N_BIG);
    if (m > 100000 && i > 0)
      continue; /* the LM head's CPU twin costs seconds per row: one row is checked */
    row_f32(d1, m, s->y_dtype, 0, m, got);
    snprintf(what, sizeof(what), "%s n=1 row %zu", s->name, r);
    check_row(what, got, x + r * k, w, y0 ? y0 + r * m : NULL, k, m, s->m_true, s->y_dtype);
  }
  /* n = 37 from row 1000, with wider leading dimensions (ld_x = k + 8, ld_y = m + 16) */
  size_t ldx = k + 8, ldy = m + 16;
  void *dx37 = xt_dev(N_MID * ldx * 2), *d37 = xt_dev(N_MID * ldy * es);
  xt_poison(dx37, N_MID * ldx * 2);
  XT_CUDA(cudaMemcpy2D(dx37, ldx * 2, (const char *)dx + (size_t)MID_AT * k * 2, k * 2, k * 2,
                       N_MID, cudaMemcpyDeviceToDevice));
  xt_poison(d37, N_MID * ldy * es);
  if (dy0)
    XT_CUDA(cudaMemcpy2D(d37, ldy * es, (char *)dy0 + (size_t)MID_AT * m * es, m * es, m * es,
                         N_MID, cudaMemcpyDeviceToDevice));
  XT_OK(exc_gemm(g, 0, dx37, ldx, dw, d37, ldy, s->y_dtype, s->accumulate, N_MID, k, m));
  for (size_t i = 0; i < N_MID; i++) {
    xt_down(h1, (char *)d37 + i * ldy * es, m * es);
    xt_down(hb, (char *)dbig + (MID_AT + i) * m * es, m * es);
    if (memcmp(h1, hb, m * es))
      xt_fail("%s: row %zu of n=%d differs from the same row of n=%d", s->name, MID_AT + i, N_MID,
              N_BIG);
  }
  /* the padding columns beyond ld_y's first m stay poisoned (not written) */
  if (ldy > m) {
    unsigned char *tail = malloc((ldy - m) * es);
    xt_down(tail, (char *)d37 + m * es, (ldy - m) * es);
    for (size_t i = 0; i < (ldy - m) * es; i++)
      if (tail[i] != 0xff) {
        xt_fail("%s: wrote beyond column m into the ld padding", s->name);
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

int main(void) {
  xt_require_gpu();
  struct exc_gemm *g = NULL;
  XT_OK(exc_gemm_new(32u << 20, &g));
  /* argument checks need no device work */
  if (exc_gemm(g, 0, NULL, 8, NULL, NULL, 8, EXC_DTYPE_F32, false, 1, 12, 8) != -EINVAL)
    xt_fail("k = 12 (not a multiple of 8) was accepted");
  if (exc_gemm_prepare(g, 1024, 1032, EXC_DTYPE_BF16, true) != -EINVAL)
    xt_fail("accumulate into bf16 output was accepted");
  if (exc_gemm_pad(248079) != 248080 || exc_gemm_pad(248320) != 248320)
    xt_fail("exc_gemm_pad");
  const struct shape shapes[] = {
      {"tiny q_proj", 64, 520, EXC_DTYPE_F32, false},
      {"tiny down acc", 96, 64, EXC_DTYPE_F32, true},
      {"bf16 out", 2560, 4104, EXC_DTYPE_BF16, false},
      {"4b gate_up", 2560, 18432, EXC_DTYPE_F32, false},
      {"4b down acc", 9216, 2560, EXC_DTYPE_F32, true},
      {"lm head odd", 2560, 248079, EXC_DTYPE_F32, false},
  };
  struct xt_rng rng;
  xt_rng_seed(&rng, 20261129);
  for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
    run_shape(g, &shapes[i], &rng);
  printf("algorithms cached: %d\n", g->n_algos);
  exc_gemm_free(g);
  return xt_finish("test_gemm");
}
