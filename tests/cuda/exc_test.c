/* Helpers of the CUDA twin tests (exc_test.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_safetensors.h"
#include "exc_test.h"

static int n_failures;

void xt_cuda_ok(cudaError_t e, const char *call, const char *file, int line) {
  if (e == cudaSuccess)
    return;
  fprintf(stderr, "FATAL %s:%d: %s: %s\n", file, line, call, cudaGetErrorString(e));
  exit(1);
}

void xt_rc_ok(int rc, const char *call, const char *file, int line) {
  if (rc >= 0)
    return;
  fprintf(stderr, "FATAL %s:%d: %s returned %d\n", file, line, call, rc);
  exit(1);
}

void xt_require_gpu(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1) {
    fprintf(stderr, "FAIL: this gpu-suite test needs a CUDA device (%s)\n",
            e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    exit(1);
  }
  XT_CUDA(cudaSetDevice(0));
}

void xt_rng_seed(struct xt_rng *r, uint64_t seed) {
  r->s = seed;
}

uint64_t xt_next(struct xt_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

float xt_uniform(struct xt_rng *r, float lo, float hi) {
  double u = (double)(xt_next(r) >> 11) / 9007199254740992.0;
  return (float)(lo + (hi - lo) * u);
}

float xt_normal(struct xt_rng *r) {
  double u1 = ((double)(xt_next(r) >> 11) + 0.5) / 9007199254740992.0;
  double u2 = (double)(xt_next(r) >> 11) / 9007199254740992.0;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void xt_fill_normal(struct xt_rng *r, float *x, size_t n, float sd) {
  for (size_t i = 0; i < n; i++)
    x[i] = sd * xt_normal(r);
}

void xt_fill_bf16_normal(struct xt_rng *r, float *x, size_t n, float sd) {
  for (size_t i = 0; i < n; i++)
    x[i] = cm_bf16_to_f32(cm_f32_to_bf16(sd * xt_normal(r)));
}

void xt_to_bf16(const float *x, uint16_t *out, size_t n) {
  for (size_t i = 0; i < n; i++)
    out[i] = cm_f32_to_bf16(x[i]);
}

void xt_from_bf16(const uint16_t *x, float *out, size_t n) {
  for (size_t i = 0; i < n; i++)
    out[i] = cm_bf16_to_f32(x[i]);
}

void *xt_dev(size_t n_bytes) {
  void *p = NULL;
  XT_CUDA(cudaMalloc(&p, n_bytes ? n_bytes : 1));
  return p;
}

void xt_up(void *dst, const void *src, size_t n_bytes) {
  XT_CUDA(cudaMemcpy(dst, src, n_bytes, cudaMemcpyHostToDevice));
}

void xt_down(void *dst, const void *src, size_t n_bytes) {
  XT_CUDA(cudaDeviceSynchronize());
  XT_CUDA(cudaMemcpy(dst, src, n_bytes, cudaMemcpyDeviceToHost));
}

void xt_poison(void *dev, size_t n_bytes) {
  XT_CUDA(cudaMemset(dev, 0xff, n_bytes));
}

void *xt_dev_bf16(const float *x, size_t n) {
  uint16_t *h = malloc(n * 2 + 2);
  if (!h)
    abort();
  xt_to_bf16(x, h, n);
  void *d = xt_dev(n * 2);
  xt_up(d, h, n * 2);
  free(h);
  return d;
}

void xt_down_bf16(float *dst, const void *dev, size_t n) {
  uint16_t *h = malloc(n * 2 + 2);
  if (!h)
    abort();
  xt_down(h, dev, n * 2);
  xt_from_bf16(h, dst, n);
  free(h);
}

void xt_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("FAIL ", stdout);
  vprintf(fmt, ap);
  fputc('\n', stdout);
  va_end(ap);
  n_failures++;
}

bool xt_close(const char *what, const float *got, const float *want, size_t n, double abs_tol,
              double rel_tol) {
  size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)got[i] - (double)want[i]);
    double lim = abs_tol + rel_tol * fabs((double)want[i]);
    bool ok = isfinite(got[i]) && d <= lim;
    if (!ok) {
      bad++;
      double ex = isfinite(d) ? d / (lim > 0 ? lim : 1e-30) : INFINITY;
      if (ex > worst_excess) {
        worst_excess = ex;
        worst = i;
      }
    }
  }
  if (bad) {
    xt_fail(
        "%s: %zu of %zu outside tolerance (abs %.3g + rel %.3g); worst [%zu] got %.9g want %.9g",
        what, bad, n, abs_tol, rel_tol, worst, got[worst], want[worst]);
    return false;
  }
  return true;
}

bool xt_bf16_twin(const char *what, const float *got, const float *want, size_t n, double abs_tol,
                  double rel_tol, double min_exact) {
  bool ok = xt_close(what, got, want, n, abs_tol, rel_tol);
  size_t exact = 0;
  for (size_t i = 0; i < n; i++)
    exact += got[i] == want[i] || (got[i] == 0.0f && want[i] == 0.0f);
  double frac = n ? (double)exact / (double)n : 1.0;
  printf("%s: %zu of %zu bit-equal (%.4f)\n", what, exact, n, frac);
  if (frac < min_exact) {
    xt_fail("%s: only %.4f of the outputs bit-equal (need %.4f): a rounding step differs", what,
            frac, min_exact);
    ok = false;
  }
  return ok;
}

double xt_rel_l2(const float *got, const float *want, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(got[i]))
      return NAN;
    double d = (double)got[i] - (double)want[i];
    num += d * d;
    den += (double)want[i] * want[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

int xt_finish(const char *name) {
  printf("%s: %d failures\n", name, n_failures);
  return n_failures ? 1 : 0;
}
