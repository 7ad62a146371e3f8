/* Helpers shared by the GPU twin tests (suite gpu): a seeded generator, bf16 rounding on the host,
 * device checks that fail loudly without a GPU, and the error summary every twin prints.
 * Header-only so each test stays one file. */
#ifndef S1_TESTS_GPU_TWIN_H
#define S1_TESTS_GPU_TWIN_H

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Aborts the test (exit 1) with the failing call: a GPU test must never pass silently. */
#define TW_CUDA(call)                                                                              \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));  \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)
#define TW_OK(expr)                                                                                \
  do {                                                                                             \
    int rc_ = (expr);                                                                              \
    if (rc_ != 0) {                                                                                \
      fprintf(stderr, "FAIL %s:%d: %s returned %d\n", __FILE__, __LINE__, #expr, rc_);             \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static uint64_t tw_state;

/* Seed from S1_TEST_SEED, else from the clock (fresh inputs each run); printed for replay. */
static inline void tw_seed(const char *name) {
  const char *env = getenv("S1_TEST_SEED");
  tw_state = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)clock();
  printf("%s: seed %llu (S1_TEST_SEED to replay)\n", name, (unsigned long long)tw_state);
}
static inline uint64_t tw_next(void) { /* splitmix64 */
  uint64_t z = (tw_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static inline float tw_uniform(float lo, float hi) {
  return lo + (hi - lo) * (float)((tw_next() >> 11) * (1.0 / 9007199254740992.0));
}
static inline float tw_normal(float sd) {
  float u1 = tw_uniform(1e-7f, 1.0f), u2 = tw_uniform(0.0f, 1.0f);
  return sd * sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

/* bf16 as raw bits, round to nearest even (no NaN inputs here) */
static inline uint16_t tw_f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline float tw_bf2f(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* Fails (exit 1) unless a CUDA device is present; prints which one. */
static inline void tw_require_gpu(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n < 1) {
    fprintf(stderr, "FAIL: no CUDA device (%s): gpu tests run on the GPU machine only\n",
            e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
    exit(1);
  }
  struct cudaDeviceProp pr;
  TW_CUDA(cudaGetDeviceProperties(&pr, 0));
  printf("device: %s sm_%d%d, %d SMs\n", pr.name, pr.major, pr.minor, pr.multiProcessorCount);
}

static inline void *tw_dmalloc(size_t n_bytes) {
  void *p = NULL;
  TW_CUDA(cudaMalloc(&p, n_bytes ? n_bytes : 16));
  return p;
}

/* Error of got against ref over n elements: max |d|, max |ref|, relative L2, non-finite count. */
struct tw_err {
  double max_abs;  /* max |got − ref| */
  double ref_max;  /* max |ref| */
  double rel_l2;   /* ‖got − ref‖ / ‖ref‖ */
  size_t n_bad;    /* non-finite got values (poison left, or NaN produced) */
  size_t n_over;   /* elements over the element-wise bound */
};
/* Element bound: |got − ref| ≤ atol + rtol·|ref|. */
static inline struct tw_err tw_compare(const float *got, const float *ref, size_t n, double atol,
                                       double rtol) {
  struct tw_err e = {0, 0, 0, 0, 0};
  double dd = 0, rr = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(got[i])) {
      e.n_bad++;
      continue;
    }
    double d = fabs((double)got[i] - ref[i]);
    if (d > e.max_abs)
      e.max_abs = d;
    if (fabs(ref[i]) > e.ref_max)
      e.ref_max = fabs(ref[i]);
    if (d > atol + rtol * fabs(ref[i]))
      e.n_over++;
    dd += d * d;
    rr += (double)ref[i] * ref[i];
  }
  e.rel_l2 = rr > 0 ? sqrt(dd / rr) : sqrt(dd);
  return e;
}
static inline double tw_max_abs(const float *x, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; i++)
    if (fabs(x[i]) > m)
      m = fabs(x[i]);
  return m;
}

#endif
