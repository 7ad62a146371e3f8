/* Twin test of exc_causal_conv1d_silu against ex_cpu_causal_conv1d_silu on fresh random inputs:
 * odd and chunk-boundary lengths, several packed sequences with and without carried windows, rows
 * sharing one window (each equal to its own launch), a continuation equal to the one-pass run, and
 * the ref-bf16 variant (exc_causal_conv1d_silu_rounded) against ex_cpu_causal_conv1d_silu_bf16.
 * Tolerance (fp32 both sides, taps in the same order): |d| ≤ 1e-5·(1 + |ref|); the only
 * differences are CUDA's expf (≤ 2 ulp) and fused multiply-adds, ~1e-7 relative. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_conv1d.h"
#include "cuda_attention.h" /* EXC_MAX_SEQS */
#include "cuda_conv1d.h"
#include "twin.h"

#define K 4
static struct tw_rng rng; /* seeded in main (S1_TEST_SEED to replay) */

/* |d| ≤ 1e-5 + 1e-5·|ref|, one printed line per tensor */
static void check(const char *what, const float *got, const float *ref, size_t n) {
  tw_check(what, got, ref, n, 1e-5, 1e-5);
}

/* One launch over `ns` packed sequences of lengths lens[], channels c; windows: 0 none, 1 own
 * random, 2 shared random (one snapshot). Compares y and window_out with the CPU per sequence. */
static void run_case(const char *name, const int *lens, int ns, size_t c, int windows) {
  size_t total = 0;
  for (int i = 0; i < ns; i++)
    total += (size_t)lens[i];
  float *x = malloc(total * c * sizeof(float)), *w = malloc(c * K * sizeof(float));
  float *win = malloc((size_t)ns * (K - 1) * c * sizeof(float));
  for (size_t i = 0; i < total * c; i++)
    x[i] = tw_normal(&rng);
  for (size_t i = 0; i < c * K; i++)
    w[i] = tw_uniform(&rng, -0.5f, 0.5f);
  for (size_t i = 0; i < (size_t)ns * (K - 1) * c; i++)
    win[i] = tw_normal(&rng);
  if (windows == 2)
    for (int s = 1; s < ns; s++)
      memcpy(win + (size_t)s * (K - 1) * c, win, (K - 1) * c * sizeof(float));
  float *dx = tw_dev(total * c * 4), *dw = tw_dev(c * K * 4), *dy = tw_dev(total * c * 4);
  float *dwin = tw_dev((size_t)ns * (K - 1) * c * 4), *dwo = tw_dev((size_t)ns * (K - 1) * c * 4);
  tw_up(dx, x, total * c * 4);
  tw_up(dw, w, c * K * 4);
  tw_up(dwin, win, (size_t)ns * (K - 1) * c * 4);
  tw_poison(dy, total * c * 4); /* NaN poison */
  tw_poison(dwo, (size_t)ns * (K - 1) * c * 4);
  struct exc_conv_seq seqs[EXC_MAX_SEQS];
  size_t start = 0;
  for (int s = 0; s < ns; s++) {
    seqs[s].start = (int32_t)start;
    seqs[s].n = lens[s];
    seqs[s].window_in = windows ? (windows == 2 ? dwin : dwin + (size_t)s * (K - 1) * c) : NULL;
    seqs[s].window_out = dwo + (size_t)s * (K - 1) * c;
    start += (size_t)lens[s];
  }
  TW_ZERO(exc_causal_conv1d_silu(0, dx, dw, dy, seqs, ns, c, K));
  TW_CUDA(cudaDeviceSynchronize());
  float *y = malloc(total * c * 4), *wo = malloc((size_t)ns * (K - 1) * c * 4);
  TW_CUDA(cudaMemcpy(y, dy, total * c * 4, cudaMemcpyDeviceToHost));
  TW_CUDA(cudaMemcpy(wo, dwo, (size_t)ns * (K - 1) * c * 4, cudaMemcpyDeviceToHost));
  float *yr = malloc(total * c * 4), *wr = malloc((K - 1) * c * 4);
  char what[96];
  start = 0;
  for (int s = 0; s < ns; s++) {
    if (windows)
      memcpy(wr, win + (size_t)(windows == 2 ? 0 : s) * (K - 1) * c, (K - 1) * c * 4);
    else
      memset(wr, 0, (K - 1) * c * 4);
    ex_cpu_causal_conv1d_silu(x + start * c, w, wr, yr + start * c, (size_t)lens[s], c, K);
    snprintf(what, sizeof what, "%s seq %d y", name, s);
    check(what, y + start * c, yr + start * c, (size_t)lens[s] * c);
    snprintf(what, sizeof what, "%s seq %d window_out", name, s);
    check(what, wo + (size_t)s * (K - 1) * c, wr, (K - 1) * c);
    start += (size_t)lens[s];
  }
  /* each row alone must equal the packed launch bit for bit */
  if (ns > 1) {
    int same = 1;
    float *y1 = malloc(total * c * 4);
    for (int s = 0; s < ns; s++) {
      struct exc_conv_seq one = seqs[s];
      tw_poison(dy, total * c * 4);
      TW_ZERO(exc_causal_conv1d_silu(0, dx, dw, dy, &one, 1, c, K));
      TW_CUDA(cudaMemcpy(y1, dy, total * c * 4, cudaMemcpyDeviceToHost));
      same &= memcmp(y1 + (size_t)one.start * c, y + (size_t)one.start * c, (size_t)one.n * c * 4) == 0;
    }
    printf("%-44s %s\n", "  rows alone == packed launch (bitwise)", same ? "ok" : "FAIL");
    tw_expect(same);
    free(y1);
  }
  free(x), free(w), free(win), free(y), free(wo), free(yr), free(wr);
  cudaFree(dx), cudaFree(dw), cudaFree(dy), cudaFree(dwin), cudaFree(dwo);
}

/* [0, n1) in one launch, then [n1, n1+n2) from its window, against the CPU over n1+n2 at once. */
static void run_continuation(size_t c, int n1, int n2) {
  int n = n1 + n2;
  float *x = malloc((size_t)n * c * 4), *w = malloc(c * K * 4);
  for (size_t i = 0; i < (size_t)n * c; i++)
    x[i] = tw_normal(&rng);
  for (size_t i = 0; i < c * K; i++)
    w[i] = tw_uniform(&rng, -0.5f, 0.5f);
  float *dx = tw_dev((size_t)n * c * 4), *dw = tw_dev(c * K * 4);
  float *dy = tw_dev((size_t)n * c * 4), *dwin = tw_dev(2 * (K - 1) * c * 4);
  tw_up(dx, x, (size_t)n * c * 4);
  tw_up(dw, w, c * K * 4);
  tw_poison(dy, (size_t)n * c * 4);
  struct exc_conv_seq a = {0, n1, NULL, dwin};
  struct exc_conv_seq b = {n1, n2, dwin, dwin + (K - 1) * c};
  TW_ZERO(exc_causal_conv1d_silu(0, dx, dw, dy, &a, 1, c, K));
  TW_ZERO(exc_causal_conv1d_silu(0, dx, dw, dy, &b, 1, c, K));
  float *y = malloc((size_t)n * c * 4), *yr = malloc((size_t)n * c * 4), *wr = calloc((K - 1) * c, 4);
  float *wo = malloc((K - 1) * c * 4);
  TW_CUDA(cudaMemcpy(y, dy, (size_t)n * c * 4, cudaMemcpyDeviceToHost));
  TW_CUDA(cudaMemcpy(wo, dwin + (K - 1) * c, (K - 1) * c * 4, cudaMemcpyDeviceToHost));
  ex_cpu_causal_conv1d_silu(x, w, wr, yr, (size_t)n, c, K);
  char what[96];
  snprintf(what, sizeof what, "continuation c=%zu %d+%d y", c, n1, n2);
  check(what, y, yr, (size_t)n * c);
  snprintf(what, sizeof what, "continuation c=%zu %d+%d window", c, n1, n2);
  check(what, wo, wr, (K - 1) * c);
  free(x), free(w), free(y), free(yr), free(wr), free(wo);
  cudaFree(dx), cudaFree(dw), cudaFree(dy), cudaFree(dwin);
}

/* The ref-bf16 variant on bf16-valued inputs, weights and window: y = R(silu(R(Σ taps))) against
 * ex_cpu_causal_conv1d_silu_bf16. Within one bf16 ulp everywhere, and bit-equal on at least 99 %
 * of the outputs (the taps differ from the CPU's only by fused multiply-adds, so a rounding
 * boundary is rarely straddled; a missing rounding step would leave ~70 % equal). */
static void run_rounded(size_t c, int n) {
  float *x = malloc((size_t)n * c * 4), *w = malloc(c * K * 4), *win = malloc((K - 1) * c * 4);
  for (size_t i = 0; i < (size_t)n * c; i++)
    x[i] = tw_bf2f(tw_f2bf(tw_normal(&rng)));
  for (size_t i = 0; i < c * K; i++)
    w[i] = tw_bf2f(tw_f2bf(tw_uniform(&rng, -0.5f, 0.5f)));
  for (size_t i = 0; i < (K - 1) * c; i++)
    win[i] = tw_bf2f(tw_f2bf(tw_normal(&rng)));
  float *dx = tw_dev((size_t)n * c * 4), *dw = tw_dev(c * K * 4);
  float *dy = tw_dev((size_t)n * c * 4), *dwin = tw_dev((K - 1) * c * 4);
  tw_up(dx, x, (size_t)n * c * 4);
  tw_up(dw, w, c * K * 4);
  tw_up(dwin, win, (K - 1) * c * 4);
  tw_poison(dy, (size_t)n * c * 4);
  struct exc_conv_seq a = {0, n, dwin, NULL};
  TW_ZERO(exc_causal_conv1d_silu_rounded(0, dx, dw, dy, &a, 1, c, K));
  float *y = malloc((size_t)n * c * 4), *yr = malloc((size_t)n * c * 4);
  TW_CUDA(cudaMemcpy(y, dy, (size_t)n * c * 4, cudaMemcpyDeviceToHost));
  ex_cpu_causal_conv1d_silu_bf16(x, w, win, yr, (size_t)n, c, K);
  size_t exact = 0, total = (size_t)n * c;
  for (size_t i = 0; i < total; i++)
    exact += y[i] == yr[i];
  struct tw_err e = tw_compare(y, yr, total, 1e-6, 1.0 / 128);
  double frac = (double)exact / (double)total;
  int bad = e.n_bad || e.n_over || frac < 0.99;
  printf("rounded c=%-6zu T=%-5d bit-equal %.4f max|d|=%.3g %s\n", c, n, frac, e.max_abs,
         bad ? "FAIL" : "ok");
  tw_expect(!bad);
  /* the bf16-input form (x as a GEMM's bf16 output): y and the carried window bit-identical to
   * the float32-input form on the same values */
  uint16_t *x16 = malloc((size_t)n * c * 2);
  for (size_t i = 0; i < total; i++)
    x16[i] = tw_f2bf(x[i]);
  void *dx16 = tw_dev((size_t)n * c * 2);
  float *dy16 = tw_dev((size_t)n * c * 4), *dwo = tw_dev(2 * (K - 1) * c * 4);
  tw_up(dx16, x16, (size_t)n * c * 2);
  tw_poison(dy16, (size_t)n * c * 4);
  tw_poison(dwo, 2 * (K - 1) * c * 4);
  struct exc_conv_seq a32 = {0, n, dwin, dwo}, a16 = {0, n, dwin, dwo + (K - 1) * c};
  TW_ZERO(exc_causal_conv1d_silu_rounded(0, dx, dw, dy, &a32, 1, c, K));
  TW_ZERO(exc_causal_conv1d_silu_bf16(0, dx16, dw, dy16, &a16, 1, c, K));
  float *y16 = malloc((size_t)n * c * 4), *wo = malloc(2 * (K - 1) * c * 4);
  TW_CUDA(cudaMemcpy(y, dy, (size_t)n * c * 4, cudaMemcpyDeviceToHost));
  TW_CUDA(cudaMemcpy(y16, dy16, (size_t)n * c * 4, cudaMemcpyDeviceToHost));
  TW_CUDA(cudaMemcpy(wo, dwo, 2 * (K - 1) * c * 4, cudaMemcpyDeviceToHost));
  size_t diff = 0;
  for (size_t i = 0; i < total; i++)
    diff += memcmp(&y[i], &y16[i], 4) != 0;
  for (size_t i = 0; i < (K - 1) * c; i++)
    diff += memcmp(&wo[i], &wo[(K - 1) * c + i], 4) != 0;
  printf("bf16 input c=%-6zu T=%-5d differing from the float32 input: %zu %s\n", c, n, diff,
         diff ? "FAIL" : "ok");
  tw_expect(diff == 0);
  free(x16), free(y16), free(wo);
  cudaFree(dx16), cudaFree(dy16), cudaFree(dwo);
  free(x), free(w), free(win), free(y), free(yr);
  cudaFree(dx), cudaFree(dw), cudaFree(dy), cudaFree(dwin);
}

int main(void) {
  tw_require_gpu();
  tw_rng_seed_env(&rng, "test_cuda_conv1d");
  const size_t chans[] = {160, 8192, 10240}; /* tiny, 4B, 27B conv_dim */
  const int lens[] = {1, 2, 3, 63, 64, 65, 127, 129, 3400};
  char name[64];
  for (size_t ci = 0; ci < 3; ci++)
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
      if (chans[ci] != 160 && lens[li] == 3400 && ci == 1)
        continue; /* 3,400 rows: tiny and 27B widths */
      snprintf(name, sizeof name, "c=%zu T=%d", chans[ci], lens[li]);
      run_case(name, &lens[li], 1, chans[ci], li % 2 ? 1 : 0);
    }
  const int packed[] = {5, 1, 129, 64, 2, 300};
  run_case("packed 6 seqs own windows c=8192", packed, 6, 8192, 1);
  run_case("packed 6 seqs no windows c=1000", packed, 6, 1000, 0);
  const int rows[] = {1, 17, 64, 65, 3};
  run_case("5 rows of one snapshot c=10240", rows, 5, 10240, 2);
  run_continuation(8192, 1, 5);
  run_continuation(8192, 2, 1);
  run_continuation(160, 100, 77);
  run_continuation(10240, 64, 129);
  run_rounded(160, 65);
  run_rounded(8192, 129);
  run_rounded(10240, 3400);
  return tw_finish("test_cuda_conv1d");
}
