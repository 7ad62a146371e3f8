/* The twin-test harness (twin.h): one failure counter per test process, the comparisons every CUDA
 * twin test and GPU benchmark uses. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_safetensors.h"
#include "twin.h"

static int n_failures;

void tw_cuda_ok(cudaError_t e, const char *call, const char *file, int line) {
  if (e == cudaSuccess)
    return;
  fprintf(stderr, "FATAL %s:%d: %s: %s\n", file, line, call, cudaGetErrorString(e));
  exit(1);
}

void tw_rc_ok(int rc, const char *call, const char *file, int line) {
  if (rc >= 0)
    return;
  fprintf(stderr, "FATAL %s:%d: %s returned %d\n", file, line, call, rc);
  exit(1);
}

void tw_rc_zero(int rc, const char *call, const char *file, int line) {
  if (rc == 0)
    return;
  fprintf(stderr, "FATAL %s:%d: %s returned %d\n", file, line, call, rc);
  exit(1);
}

void tw_require_gpu(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1) {
    fprintf(stderr, "FAIL: this gpu-suite test needs a CUDA device (%s)\n",
            e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    exit(1);
  }
  TW_CUDA(cudaSetDevice(0));
  struct cudaDeviceProp pr;
  TW_CUDA(cudaGetDeviceProperties(&pr, 0));
  printf("device: %s sm_%d%d, %d SMs\n", pr.name, pr.major, pr.minor, pr.multiProcessorCount);
}

void tw_rng_seed(struct tw_rng *r, uint64_t seed) {
  r->s = seed;
}

void tw_rng_seed_env(struct tw_rng *r, const char *name) {
  const char *env = getenv("S1_TEST_SEED");
  r->s = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)clock();
  printf("%s: seed %llu (S1_TEST_SEED to replay)\n", name, (unsigned long long)r->s);
}

uint64_t tw_next(struct tw_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

float tw_uniform(struct tw_rng *r, float lo, float hi) {
  double u = (double)(tw_next(r) >> 11) / 9007199254740992.0;
  return (float)(lo + (hi - lo) * u);
}

float tw_normal(struct tw_rng *r) {
  double u1 = ((double)(tw_next(r) >> 11) + 0.5) / 9007199254740992.0;
  double u2 = (double)(tw_next(r) >> 11) / 9007199254740992.0;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void tw_fill_normal(struct tw_rng *r, float *x, size_t n, float sd) {
  for (size_t i = 0; i < n; i++)
    x[i] = sd * tw_normal(r);
}

void tw_fill_bf16_normal(struct tw_rng *r, float *x, size_t n, float sd) {
  for (size_t i = 0; i < n; i++)
    x[i] = cm_bf16_to_f32(cm_f32_to_bf16(sd * tw_normal(r)));
}

uint16_t tw_f2bf(float x) {
  return cm_f32_to_bf16(x);
}

float tw_bf2f(uint16_t x) {
  return cm_bf16_to_f32(x);
}

void tw_to_bf16(const float *x, uint16_t *out, size_t n) {
  for (size_t i = 0; i < n; i++)
    out[i] = cm_f32_to_bf16(x[i]);
}

void tw_from_bf16(const uint16_t *x, float *out, size_t n) {
  for (size_t i = 0; i < n; i++)
    out[i] = cm_bf16_to_f32(x[i]);
}

void *tw_dev(size_t n_bytes) {
  void *p = NULL;
  TW_CUDA(cudaMalloc(&p, n_bytes ? n_bytes : 1));
  return p;
}

void tw_up(void *dst, const void *src, size_t n_bytes) {
  TW_CUDA(cudaMemcpy(dst, src, n_bytes, cudaMemcpyHostToDevice));
}

void tw_down(void *dst, const void *src, size_t n_bytes) {
  TW_CUDA(cudaDeviceSynchronize());
  TW_CUDA(cudaMemcpy(dst, src, n_bytes, cudaMemcpyDeviceToHost));
}

void tw_poison(void *dev, size_t n_bytes) {
  TW_CUDA(cudaMemset(dev, 0xff, n_bytes));
}

void *tw_dev_bf16(const float *x, size_t n) {
  uint16_t *h = malloc(n * 2 + 2);
  if (!h)
    abort();
  tw_to_bf16(x, h, n);
  void *d = tw_dev(n * 2);
  tw_up(d, h, n * 2);
  free(h);
  return d;
}

void tw_down_bf16(float *dst, const void *dev, size_t n) {
  uint16_t *h = malloc(n * 2 + 2);
  if (!h)
    abort();
  tw_down(h, dev, n * 2);
  tw_from_bf16(h, dst, n);
  free(h);
}

struct tw_err tw_compare(const float *got, const float *ref, size_t n, double atol, double rtol) {
  struct tw_err e = {0, 0, 0, 0, 0, 0};
  double dd = 0, rr = 0, worst_excess = -1;
  for (size_t i = 0; i < n; i++) {
    double lim = atol + rtol * fabs((double)ref[i]);
    if (!isfinite(got[i])) {
      e.n_bad++;
      if (worst_excess < INFINITY)
        worst_excess = INFINITY, e.worst = i;
      continue;
    }
    double d = fabs((double)got[i] - (double)ref[i]);
    if (d > e.max_abs)
      e.max_abs = d;
    if (fabs((double)ref[i]) > e.ref_max)
      e.ref_max = fabs((double)ref[i]);
    if (!(d <= lim)) { /* a NaN reference fails too */
      e.n_over++;
      double ex = isfinite(d) ? d / (lim > 0 ? lim : 1e-30) : INFINITY;
      if (ex > worst_excess)
        worst_excess = ex, e.worst = i;
    }
    dd += d * d;
    rr += (double)ref[i] * ref[i];
  }
  e.rel_l2 = rr > 0 ? sqrt(dd / rr) : sqrt(dd);
  return e;
}

double tw_max_abs(const float *x, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++)
    if (fabs((double)x[i]) > m)
      m = fabs((double)x[i]);
  return m;
}

double tw_rel_l2(const float *got, const float *want, size_t n) {
  struct tw_err e = tw_compare(got, want, n, INFINITY, 0.0);
  return e.n_bad ? NAN : e.rel_l2;
}

void tw_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("FAIL ", stdout);
  vprintf(fmt, ap);
  fputc('\n', stdout);
  va_end(ap);
  n_failures++;
}

bool tw_expect(bool ok) {
  if (!ok)
    n_failures++;
  return ok;
}

bool tw_close(const char *what, const float *got, const float *want, size_t n, double abs_tol,
              double rel_tol) {
  struct tw_err e = tw_compare(got, want, n, abs_tol, rel_tol);
  size_t bad = e.n_bad + e.n_over;
  if (bad) {
    tw_fail(
        "%s: %zu of %zu outside tolerance (abs %.3g + rel %.3g); worst [%zu] got %.9g want %.9g",
        what, bad, n, abs_tol, rel_tol, e.worst, got[e.worst], want[e.worst]);
    return false;
  }
  return true;
}

bool tw_check(const char *what, const float *got, const float *want, size_t n, double abs_tol,
              double rel_tol) {
  struct tw_err e = tw_compare(got, want, n, abs_tol, rel_tol);
  bool ok = e.n_bad == 0 && e.n_over == 0;
  printf("%-58s n=%-9zu max|d|=%.3g max|ref|=%.3g rel=%.3g%s %s\n", what, n, e.max_abs, e.ref_max,
         e.rel_l2, e.n_bad ? " NONFINITE" : "", ok ? "ok" : "FAIL");
  return tw_expect(ok);
}

bool tw_bf16_twin(const char *what, const float *got, const float *want, size_t n, double abs_tol,
                  double rel_tol, double min_exact) {
  bool ok = tw_close(what, got, want, n, abs_tol, rel_tol);
  size_t exact = 0;
  for (size_t i = 0; i < n; i++)
    exact += got[i] == want[i] || (got[i] == 0.0f && want[i] == 0.0f);
  double frac = n ? (double)exact / (double)n : 1.0;
  printf("%s: %zu of %zu bit-equal (%.4f)\n", what, exact, n, frac);
  if (frac < min_exact) {
    tw_fail("%s: only %.4f of the outputs bit-equal (need %.4f): a rounding step differs", what,
            frac, min_exact);
    ok = false;
  }
  return ok;
}

int tw_failures(void) {
  return n_failures;
}

int tw_finish(const char *name) {
  printf("%s: %d failures\n", name, n_failures);
  return n_failures ? 1 : 0;
}
