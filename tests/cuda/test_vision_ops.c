/* Twin tests of the vision tower's CUDA ops (cuda_vision_ops.h) against their float32 CPU twins
 * (cpu/vision_*.c) on fresh random inputs: odd row counts, head dims 24/64/72, one and several
 * segments of different lengths (64-row tile boundaries included). Every output is NaN-poisoned
 * before the launch, so an unwritten element fails. Tolerances are next to each check: an op that
 * writes bf16 is held to half a bf16 ulp of the fp32 twin (2^-8 relative) plus fp32 noise; fp32
 * outputs to 1e-6; attention (bf16 operands, bf16 probabilities) to 1e-2. The round_bf16 variants
 * (ref-bf16 numerics) are held to their CPU bf16 forms (the _bf16 ops): every element within one
 * bf16 ulp and at least 99 % bit-equal (tw_bf16_twin; a missing rounding step leaves ~70 %).
 * Suite gpu. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_safetensors.h"
#include "cuda_vision_ops.h"
#include "twin.h"
#include "vision_attention.h"
#include "vision_gelu.h"
#include "vision_layer_norm.h"
#include "vision_pos_interp.h"
#include "vision_rotary.h"

#define BF16_REL 4.0e-3     /* half a bf16 ulp is at most 2^-8 of the value */
#define ULP_REL (1.0 / 128) /* one bf16 ulp is at most 2^-7 of the value */
#define ULP_ABS 1e-6        /* fp32 noise near zero */
#define BF16_EXACT 0.99     /* bit-equal fraction required of a ref-bf16 variant */

/* R(x) elementwise, in place (the CPU side of a ref-bf16 twin). */
static void round_all(float *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    x[i] = cm_bf16_to_f32(cm_f32_to_bf16(x[i]));
}

static float *hbuf(size_t n) {
  float *p = malloc(n * sizeof(float) + 1);
  if (!p) {
    fprintf(stderr, "FATAL: out of host memory\n");
    exit(1);
  }
  return p;
}

static void test_layer_norm(struct tw_rng *g, int64_t n, int dim) {
  size_t N = (size_t)n * (size_t)dim;
  float *x = hbuf(N), *y = hbuf(N), *yb = hbuf((size_t)dim), *w = hbuf((size_t)dim);
  float *b = hbuf((size_t)dim), *ref = hbuf(N), *got = hbuf(N), *xgot = hbuf(N);
  tw_fill_normal(g, x, N, 2.0f);
  for (size_t i = 0; i < N; i++)
    x[i] += 0.7f;
  tw_fill_normal(g, y, N, 1.0f);
  tw_fill_bf16_normal(g, yb, (size_t)dim, 0.3f);
  tw_fill_normal(g, w, (size_t)dim, 0.5f);
  for (int i = 0; i < dim; i++) /* 1 + N(0, 0.25), rounded to bf16 as the device holds it */
    w[i] = cm_bf16_to_f32(cm_f32_to_bf16(w[i] + 1.0f));
  tw_fill_bf16_normal(g, b, (size_t)dim, 0.2f);
  float *d_x = tw_dev(N * 4), *d_y = tw_dev(N * 4);
  void *d_out = tw_dev(N * 2), *d_yb = tw_dev_bf16(yb, (size_t)dim);
  void *d_w = tw_dev_bf16(w, (size_t)dim), *d_b = tw_dev_bf16(b, (size_t)dim);
  char what[96];

  /* Without the residual add. */
  tw_up(d_x, x, N * 4);
  tw_poison(d_out, N * 2);
  TW_OK(exc_vision_add_layer_norm(0, d_x, NULL, NULL, d_w, d_b, d_out, n, dim, 1e-6f, false));
  TW_CUDA(cudaDeviceSynchronize());
  tw_down_bf16(got, d_out, N);
  ex_cpu_layer_norm(x, w, b, ref, (size_t)n, (size_t)dim, 1e-6f);
  snprintf(what, sizeof what, "layer_norm n %lld dim %d", (long long)n, dim);
  tw_close(what, got, ref, N, 1e-5, BF16_REL);

  /* With x += y + y_bias first (x written back in fp32). */
  tw_up(d_x, x, N * 4);
  tw_up(d_y, y, N * 4);
  tw_poison(d_out, N * 2);
  TW_OK(exc_vision_add_layer_norm(0, d_x, d_y, d_yb, d_w, d_b, d_out, n, dim, 1e-6f, false));
  TW_CUDA(cudaDeviceSynchronize());
  tw_down_bf16(got, d_out, N);
  tw_down(xgot, d_x, N * 4);
  for (int64_t r = 0; r < n; r++)
    for (int i = 0; i < dim; i++)
      x[r * dim + i] += y[r * dim + i] + yb[i];
  ex_cpu_layer_norm(x, w, b, ref, (size_t)n, (size_t)dim, 1e-6f);
  snprintf(what, sizeof what, "add_layer_norm x n %lld dim %d", (long long)n, dim);
  tw_close(what, xgot, x, N, 1e-6, 1e-6);
  snprintf(what, sizeof what, "add_layer_norm out n %lld dim %d", (long long)n, dim);
  tw_close(what, got, ref, N, 1e-5, BF16_REL);
  cudaFree(d_x), cudaFree(d_y), cudaFree(d_out), cudaFree(d_yb), cudaFree(d_w), cudaFree(d_b);
  free(x), free(y), free(yb), free(w), free(b), free(ref), free(got), free(xgot);
}

/* Block-order (row, col) of an h×w grid with merge 2, as ex_vision_forward builds them. */
static void block_positions(int h, int w, int32_t *pos) {
  int bw = w / 2;
  for (int k = 0; k < h * w; k++) {
    int in_col = k % 2, in_row = (k / 2) % 2, blk_col = (k / 4) % bw, blk_row = k / (4 * bw);
    pos[2 * k] = blk_row * 2 + in_row;
    pos[2 * k + 1] = blk_col * 2 + in_col;
  }
}

/* x += bias + pe against ex_cpu_vision_pos_embed_add; bf16: x = R(R(x + bias) + R(pe)) against
 * R(gemm + bias) then ex_cpu_vision_pos_embed_add_bf16. */
static void test_pos_embed(struct tw_rng *g, int h, int w, int side, int dim, bool bf16) {
  size_t n = (size_t)h * (size_t)w, N = n * (size_t)dim, T = (size_t)side * side * dim;
  int32_t *pos = malloc(n * 2 * sizeof(int32_t)), *taps = malloc(n * 4 * sizeof(int32_t));
  float *wts = hbuf(n * 4), *table = hbuf(T), *bias = hbuf((size_t)dim), *x = hbuf(N);
  float *got = hbuf(N);
  block_positions(h, w, pos);
  for (size_t r = 0; r < n; r++)
    ex_vision_pos_interp_taps(pos[2 * r], pos[2 * r + 1], h, w, side, taps + 4 * r, wts + 4 * r);
  tw_fill_bf16_normal(g, table, T, 0.5f);
  tw_fill_bf16_normal(g, bias, (size_t)dim, 0.1f);
  tw_fill_normal(g, x, N, 1.0f);
  void *d_table = tw_dev_bf16(table, T), *d_bias = tw_dev_bf16(bias, (size_t)dim);
  int32_t *d_taps = tw_dev(n * 16);
  float *d_wts = tw_dev(n * 16), *d_x = tw_dev(N * 4);
  tw_up(d_taps, taps, n * 16);
  tw_up(d_wts, wts, n * 16);
  tw_up(d_x, x, N * 4);
  TW_OK(exc_vision_pos_embed_add(0, d_table, d_taps, d_wts, d_bias, d_x, (int64_t)n, dim, bf16));
  TW_CUDA(cudaDeviceSynchronize());
  tw_down(got, d_x, N * 4);
  for (size_t r = 0; r < n; r++)
    for (int i = 0; i < dim; i++)
      x[r * dim + i] += bias[i];
  char what[96];
  snprintf(what, sizeof what, "pos_embed_add%s %dx%d side %d dim %d", bf16 ? " bf16" : "", h, w,
           side, dim);
  if (bf16) {
    round_all(x, N);
    ex_cpu_vision_pos_embed_add_bf16(table, taps, wts, x, n, (size_t)dim);
    tw_bf16_twin(what, got, x, N, ULP_ABS, ULP_REL, BF16_EXACT);
  } else {
    ex_cpu_vision_pos_embed_add(table, taps, wts, x, n, (size_t)dim);
    tw_close(what, got, x, N, 1e-6, 1e-6);
  }
  cudaFree(d_table), cudaFree(d_bias), cudaFree(d_taps), cudaFree(d_wts), cudaFree(d_x);
  free(pos), free(taps), free(wts), free(table), free(bias), free(x), free(got);
}

static void test_rotary(struct tw_rng *g, int64_t n, int heads, int hd) {
  size_t V = (size_t)heads * hd, W = 3 * V, N = (size_t)n * W, C = (size_t)n * hd;
  int32_t *pos = malloc((size_t)n * 2 * sizeof(int32_t));
  for (int64_t r = 0; r < 2 * n; r++)
    pos[r] = (int32_t)(tw_next(g) % 256);
  float inv[32], *ct = hbuf(C), *st = hbuf(C), *gc = hbuf(C), *gs = hbuf(C);
  ex_vision_rotary_inv_freq(hd, 10000.0f, inv);
  ex_cpu_vision_rotary_tables(pos, (size_t)n, inv, hd, ct, st);
  int32_t *d_pos = tw_dev((size_t)n * 8);
  float *d_inv = tw_dev(32 * 4), *d_c = tw_dev(C * 4), *d_s = tw_dev(C * 4);
  tw_up(d_pos, pos, (size_t)n * 8);
  tw_up(d_inv, inv, (size_t)hd / 4 * 4);
  tw_poison(d_c, C * 4);
  tw_poison(d_s, C * 4);
  TW_OK(exc_vision_rotary_tables(0, d_pos, n, d_inv, hd, d_c, d_s));
  TW_CUDA(cudaDeviceSynchronize());
  tw_down(gc, d_c, C * 4);
  tw_down(gs, d_s, C * 4);
  char what[96];
  snprintf(what, sizeof what, "rotary_tables cos n %lld hd %d", (long long)n, hd);
  tw_close(what, gc, ct, C, 1e-6, 0.0); /* CUDA cosf/sinf: ≤ 2 ulp of values ≤ 1 */
  snprintf(what, sizeof what, "rotary_tables sin n %lld hd %d", (long long)n, hd);
  tw_close(what, gs, st, C, 1e-6, 0.0);

  /* qkv epilogue: bias + rotation of q and k, bf16 out; both sides use the CPU tables. */
  float *qkv = hbuf(N), *bias = hbuf(W), *got = hbuf(N);
  tw_fill_normal(g, qkv, N, 1.5f);
  tw_fill_bf16_normal(g, bias, W, 0.2f);
  float *d_qkv = tw_dev(N * 4);
  void *d_bias = tw_dev_bf16(bias, W), *d_out = tw_dev(N * 2);
  tw_up(d_qkv, qkv, N * 4);
  tw_up(d_c, ct, C * 4);
  tw_up(d_s, st, C * 4);
  tw_poison(d_out, N * 2);
  TW_OK(exc_vision_qkv_rotary(0, d_qkv, d_bias, d_c, d_s, d_out, n, heads, hd, false));
  TW_CUDA(cudaDeviceSynchronize());
  tw_down_bf16(got, d_out, N);
  for (int64_t r = 0; r < n; r++)
    for (size_t i = 0; i < W; i++)
      qkv[r * W + i] += bias[i];
  ex_cpu_vision_rotary_apply(qkv, (size_t)n, W, heads, hd, ct, st);
  ex_cpu_vision_rotary_apply(qkv + V, (size_t)n, W, heads, hd, ct, st);
  snprintf(what, sizeof what, "qkv_rotary n %lld heads %d hd %d", (long long)n, heads, hd);
  tw_close(what, got, qkv, N, 1e-6, BF16_REL);
  cudaFree(d_pos), cudaFree(d_inv), cudaFree(d_c), cudaFree(d_s), cudaFree(d_qkv);
  cudaFree(d_bias), cudaFree(d_out);
  free(pos), free(ct), free(st), free(gc), free(gs), free(qkv), free(bias), free(got);
}

static void test_attention(struct tw_rng *g, int heads, int hd, const int32_t *lens, int n_segs) {
  int32_t cu[64];
  cu[0] = 0;
  for (int s = 0; s < n_segs; s++)
    cu[s + 1] = cu[s] + lens[s];
  size_t n = (size_t)cu[n_segs], V = (size_t)heads * hd, N = n * 3 * V;
  float *qkv = hbuf(N), *ref = hbuf(n * V), *got = hbuf(n * V), *scr = hbuf(n);
  tw_fill_bf16_normal(g, qkv, N, 1.5f);
  struct exc_vision_tile tiles[512];
  int nt = exc_vision_attention_tiles(cu, n_segs, tiles, 512);
  if (nt < 0) {
    tw_fail("attention_tiles returned %d", nt);
    return;
  }
  void *d_qkv = tw_dev_bf16(qkv, N), *d_out = tw_dev(n * V * 2);
  struct exc_vision_tile *d_tiles = tw_dev(sizeof tiles);
  tw_up(d_tiles, tiles, (size_t)nt * sizeof *tiles);
  tw_poison(d_out, n * V * 2);
  float scale = (float)pow((double)hd, -0.5);
  TW_OK(exc_vision_attention(0, d_qkv, d_tiles, nt, heads, hd, scale, d_out));
  TW_CUDA(cudaDeviceSynchronize());
  tw_down_bf16(got, d_out, n * V);
  ex_cpu_vision_attention(qkv, n, heads, hd, cu, n_segs, scale, ref, scr);
  char what[128];
  snprintf(what, sizeof what, "attention heads %d hd %d, %d segments, %zu rows, %d tiles", heads,
           hd, n_segs, n, nt);
  /* bf16 q, k, v (exact on both sides); probabilities and output rounded to bf16 on the GPU. */
  tw_close(what, got, ref, n * V, 1.5e-2, 1e-2);
  double e = tw_rel_l2(got, ref, n * V);
  printf("%s: rel L2 %.3g\n", what, e);
  if (!(e <= 8e-3))
    tw_fail("%s: rel L2 %.3g > 8e-3", what, e);
  cudaFree(d_qkv), cudaFree(d_out), cudaFree(d_tiles);
  free(qkv), free(ref), free(got), free(scr);
}

static void test_gelu(struct tw_rng *g, int64_t n, int dim, enum ex_gelu_kind kind) {
  size_t N = (size_t)n * dim;
  float *x = hbuf(N), *bias = hbuf((size_t)dim), *got = hbuf(N), *ref = hbuf(N);
  tw_fill_normal(g, x, N, 3.0f);
  tw_fill_bf16_normal(g, bias, (size_t)dim, 0.5f);
  float *d_x = tw_dev(N * 4);
  void *d_bias = tw_dev_bf16(bias, (size_t)dim), *d_out = tw_dev(N * 2);
  tw_up(d_x, x, N * 4);
  tw_poison(d_out, N * 2);
  TW_OK(exc_vision_gelu(0, d_x, d_bias, d_out, n, dim, kind, false));
  TW_CUDA(cudaDeviceSynchronize());
  tw_down_bf16(got, d_out, N);
  for (int64_t r = 0; r < n; r++)
    for (int i = 0; i < dim; i++)
      x[r * dim + i] += bias[i];
  ex_cpu_gelu(x, ref, N, kind);
  char what[96];
  snprintf(what, sizeof what, "gelu %s n %lld dim %d", kind == EX_GELU_TANH ? "tanh" : "erf",
           (long long)n, dim);
  tw_close(what, got, ref, N, 1e-6, BF16_REL);

  /* bias add (fp32) and the bf16 cast (exact round to nearest even). */
  float *d_y = tw_dev(N * 4);
  tw_up(d_y, x, N * 4); /* x already holds x + bias */
  TW_OK(exc_vision_add_bias(0, d_y, d_bias, n, dim, false));
  TW_OK(exc_vision_to_bf16(0, d_y, d_out, (int64_t)N));
  TW_CUDA(cudaDeviceSynchronize());
  tw_down(got, d_y, N * 4);
  for (int64_t r = 0; r < n; r++)
    for (int i = 0; i < dim; i++)
      ref[r * dim + i] = x[r * dim + i] + bias[i];
  tw_close("add_bias", got, ref, N, 0.0, 0.0);
  uint16_t *hb = malloc(N * 2), *gb = malloc(N * 2);
  tw_to_bf16(ref, hb, N);
  tw_down(gb, d_out, N * 2);
  if (memcmp(hb, gb, N * 2) != 0)
    tw_fail("to_bf16: differs from the host round-to-nearest-even cast");
  cudaFree(d_x), cudaFree(d_bias), cudaFree(d_out), cudaFree(d_y);
  free(x), free(bias), free(got), free(ref), free(hb), free(gb);
}

/* ref-bf16 twins: the round_bf16 path of each op against the CPU bf16 forms (spec §6). */

/* x = R(x + R(y + y_bias)) written back, then R(LN(x)); x holds bf16 values (the residual). */
static void test_layer_norm_bf16(struct tw_rng *g, int64_t n, int dim) {
  size_t N = (size_t)n * (size_t)dim;
  float *x = hbuf(N), *y = hbuf(N), *yb = hbuf((size_t)dim), *w = hbuf((size_t)dim);
  float *b = hbuf((size_t)dim), *ref = hbuf(N), *got = hbuf(N), *xgot = hbuf(N);
  tw_fill_bf16_normal(g, x, N, 2.0f);
  tw_fill_normal(g, y, N, 1.0f); /* a GEMM's fp32 output */
  tw_fill_bf16_normal(g, yb, (size_t)dim, 0.3f);
  tw_fill_normal(g, w, (size_t)dim, 0.5f);
  for (int i = 0; i < dim; i++)
    w[i] = cm_bf16_to_f32(cm_f32_to_bf16(w[i] + 1.0f));
  tw_fill_bf16_normal(g, b, (size_t)dim, 0.2f);
  float *d_x = tw_dev(N * 4), *d_y = tw_dev(N * 4);
  void *d_out = tw_dev(N * 2), *d_yb = tw_dev_bf16(yb, (size_t)dim);
  void *d_w = tw_dev_bf16(w, (size_t)dim), *d_b = tw_dev_bf16(b, (size_t)dim);
  tw_up(d_x, x, N * 4);
  tw_up(d_y, y, N * 4);
  tw_poison(d_out, N * 2);
  TW_OK(exc_vision_add_layer_norm(0, d_x, d_y, d_yb, d_w, d_b, d_out, n, dim, 1e-6f, true));
  TW_CUDA(cudaDeviceSynchronize());
  tw_down_bf16(got, d_out, N);
  tw_down(xgot, d_x, N * 4);
  for (int64_t r = 0; r < n; r++)
    for (int i = 0; i < dim; i++) {
      size_t e = (size_t)r * (size_t)dim + (size_t)i;
      float p = cm_bf16_to_f32(cm_f32_to_bf16(y[e] + yb[i]));
      x[e] = cm_bf16_to_f32(cm_f32_to_bf16(x[e] + p));
    }
  ex_cpu_layer_norm_bf16(x, w, b, ref, (size_t)n, (size_t)dim, 1e-6f);
  char what[96];
  snprintf(what, sizeof what, "add_layer_norm bf16 x n %lld dim %d", (long long)n, dim);
  tw_bf16_twin(what, xgot, x, N, 0.0, 0.0, 1.0); /* the same fp32 sums, rounded: exact */
  snprintf(what, sizeof what, "add_layer_norm bf16 out n %lld dim %d", (long long)n, dim);
  tw_bf16_twin(what, got, ref, N, ULP_ABS, ULP_REL, BF16_EXACT);
  cudaFree(d_x), cudaFree(d_y), cudaFree(d_out), cudaFree(d_yb), cudaFree(d_w), cudaFree(d_b);
  free(x), free(y), free(yb), free(w), free(b), free(ref), free(got), free(xgot);
}

/* qkv = R(gemm + bias), then q, k = R(rotary_fp32), against ex_cpu_vision_rotary_apply_bf16. */
static void test_rotary_bf16(struct tw_rng *g, int64_t n, int heads, int hd) {
  size_t V = (size_t)heads * hd, W = 3 * V, N = (size_t)n * W, C = (size_t)n * hd;
  int32_t *pos = malloc((size_t)n * 2 * sizeof(int32_t));
  for (int64_t r = 0; r < 2 * n; r++)
    pos[r] = (int32_t)(tw_next(g) % 256);
  float inv[32], *ct = hbuf(C), *st = hbuf(C);
  ex_vision_rotary_inv_freq(hd, 10000.0f, inv);
  ex_cpu_vision_rotary_tables(pos, (size_t)n, inv, hd, ct, st);
  float *qkv = hbuf(N), *bias = hbuf(W), *got = hbuf(N);
  tw_fill_normal(g, qkv, N, 1.5f);
  tw_fill_bf16_normal(g, bias, W, 0.2f);
  float *d_qkv = tw_dev(N * 4), *d_c = tw_dev(C * 4), *d_s = tw_dev(C * 4);
  void *d_bias = tw_dev_bf16(bias, W), *d_out = tw_dev(N * 2);
  tw_up(d_qkv, qkv, N * 4);
  tw_up(d_c, ct, C * 4);
  tw_up(d_s, st, C * 4);
  tw_poison(d_out, N * 2);
  TW_OK(exc_vision_qkv_rotary(0, d_qkv, d_bias, d_c, d_s, d_out, n, heads, hd, true));
  TW_CUDA(cudaDeviceSynchronize());
  tw_down_bf16(got, d_out, N);
  for (int64_t r = 0; r < n; r++)
    for (size_t i = 0; i < W; i++)
      qkv[r * W + i] += bias[i];
  round_all(qkv, N);
  ex_cpu_vision_rotary_apply_bf16(qkv, (size_t)n, W, heads, hd, ct, st);
  ex_cpu_vision_rotary_apply_bf16(qkv + V, (size_t)n, W, heads, hd, ct, st);
  char what[96];
  snprintf(what, sizeof what, "qkv_rotary bf16 n %lld heads %d hd %d", (long long)n, heads, hd);
  tw_bf16_twin(what, got, qkv, N, ULP_ABS, ULP_REL, BF16_EXACT);
  cudaFree(d_c), cudaFree(d_s), cudaFree(d_qkv), cudaFree(d_bias), cudaFree(d_out);
  free(pos), free(ct), free(st), free(qkv), free(bias), free(got);
}

/* The attention kernel (the same in both numerics) against ex_cpu_vision_attention_bf16, sdpa's
 * form: R(e^(s − max)) before P·V, R(o). Within one 64-key tile the kernel's running maximum is the
 * row maximum, so the forms agree up to exp2f vs expf and the order of the fp32 sums: min_exact
 * 0.99 there. Across tiles an earlier tile's weights are rounded against a smaller running maximum
 * and rescaled in fp32, which rounds differently (as in the text attention's CUDA kernel): the
 * caller's lower min_exact then. */
static void test_attention_bf16(struct tw_rng *g, int heads, int hd, const int32_t *lens,
                                int n_segs, double min_exact) {
  int32_t cu[64];
  cu[0] = 0;
  for (int s = 0; s < n_segs; s++)
    cu[s + 1] = cu[s] + lens[s];
  size_t n = (size_t)cu[n_segs], V = (size_t)heads * hd, N = n * 3 * V;
  float *qkv = hbuf(N), *ref = hbuf(n * V), *got = hbuf(n * V), *scr = hbuf(n);
  tw_fill_bf16_normal(g, qkv, N, 1.5f);
  struct exc_vision_tile tiles[512];
  int nt = exc_vision_attention_tiles(cu, n_segs, tiles, 512);
  if (nt < 0) {
    tw_fail("attention_tiles returned %d", nt);
    return;
  }
  void *d_qkv = tw_dev_bf16(qkv, N), *d_out = tw_dev(n * V * 2);
  struct exc_vision_tile *d_tiles = tw_dev(sizeof tiles);
  tw_up(d_tiles, tiles, (size_t)nt * sizeof *tiles);
  tw_poison(d_out, n * V * 2);
  float scale = (float)pow((double)hd, -0.5);
  TW_OK(exc_vision_attention(0, d_qkv, d_tiles, nt, heads, hd, scale, d_out));
  TW_CUDA(cudaDeviceSynchronize());
  tw_down_bf16(got, d_out, n * V);
  ex_cpu_vision_attention_bf16(qkv, n, heads, hd, cu, n_segs, scale, ref, scr);
  char what[128];
  snprintf(what, sizeof what, "attention bf16 heads %d hd %d, %d segments, %zu rows", heads, hd,
           n_segs, n);
  /* outputs near zero come from cancelling sums: one ulp of the largest term, not of the value */
  tw_bf16_twin(what, got, ref, n * V, min_exact < BF16_EXACT ? 4e-3 : 2e-3, ULP_REL, min_exact);
  cudaFree(d_qkv), cudaFree(d_out), cudaFree(d_tiles);
  free(qkv), free(ref), free(got), free(scr);
}

/* bf16(gelu(R(x + bias))) against ex_cpu_gelu_bf16; the merger's R(x + bias) of add_bias. */
static void test_gelu_bf16(struct tw_rng *g, int64_t n, int dim, enum ex_gelu_kind kind) {
  size_t N = (size_t)n * dim;
  float *x = hbuf(N), *bias = hbuf((size_t)dim), *got = hbuf(N), *ref = hbuf(N);
  tw_fill_normal(g, x, N, 3.0f);
  tw_fill_bf16_normal(g, bias, (size_t)dim, 0.5f);
  float *d_x = tw_dev(N * 4), *d_y = tw_dev(N * 4);
  void *d_bias = tw_dev_bf16(bias, (size_t)dim), *d_out = tw_dev(N * 2);
  tw_up(d_x, x, N * 4);
  tw_up(d_y, x, N * 4);
  tw_poison(d_out, N * 2);
  TW_OK(exc_vision_gelu(0, d_x, d_bias, d_out, n, dim, kind, true));
  TW_OK(exc_vision_add_bias(0, d_y, d_bias, n, dim, true));
  TW_CUDA(cudaDeviceSynchronize());
  tw_down_bf16(got, d_out, N);
  for (int64_t r = 0; r < n; r++)
    for (int i = 0; i < dim; i++)
      x[r * dim + i] += bias[i];
  round_all(x, N);
  ex_cpu_gelu_bf16(x, ref, N, kind);
  char what[96];
  snprintf(what, sizeof what, "gelu bf16 %s n %lld dim %d", kind == EX_GELU_TANH ? "tanh" : "erf",
           (long long)n, dim);
  /* erf: 1 + erf(z) cancels for z < 0, so the few-ulp difference between CUDA's erff and glibc's
   * shows in the rounded output more often (H200, 2026-11-30: 0.986 bit-equal) */
  tw_bf16_twin(what, got, ref, N, ULP_ABS, ULP_REL, kind == EX_GELU_ERF ? 0.97 : BF16_EXACT);
  tw_down(got, d_y, N * 4);
  snprintf(what, sizeof what, "add_bias bf16 n %lld dim %d", (long long)n, dim);
  tw_bf16_twin(what, got, x, N, 0.0, 0.0, 1.0); /* the same fp32 sum, rounded once: exact */
  cudaFree(d_x), cudaFree(d_y), cudaFree(d_bias), cudaFree(d_out);
  free(x), free(bias), free(got), free(ref);
}

int main(void) {
  tw_require_gpu();
  struct tw_rng g;
  tw_rng_seed(&g, 0x5eed0f15u);
  test_layer_norm(&g, 37, 48);
  test_layer_norm(&g, 5, 1152);
  test_layer_norm(&g, 1, 1024);
  test_pos_embed(&g, 20, 14, 4, 48, false);
  test_pos_embed(&g, 36, 64, 48, 64, false);
  test_pos_embed(&g, 2, 2, 48, 72, false);
  test_rotary(&g, 37, 2, 24);
  test_rotary(&g, 100, 16, 64);
  test_rotary(&g, 1, 16, 72);
  static const int32_t one[] = {280}, many[] = {4, 96, 130, 64, 65, 200, 128, 129},
                       mixed[] = {24, 280}, big[] = {2304}, tiny1[] = {1};
  test_attention(&g, 3, 64, one, 1);
  test_attention(&g, 2, 72, many, 8);
  test_attention(&g, 2, 24, mixed, 2);
  test_attention(&g, 1, 64, tiny1, 1);
  test_attention(&g, 2, 64, big, 1);
  test_attention(&g, 1, 128, many, 8);
  test_gelu(&g, 33, 96, EX_GELU_TANH);
  test_gelu(&g, 33, 96, EX_GELU_ERF);
  test_gelu(&g, 7, 4096, EX_GELU_ERF);
  test_layer_norm_bf16(&g, 37, 48);
  test_layer_norm_bf16(&g, 5, 1152);
  test_pos_embed(&g, 20, 14, 4, 48, true);
  test_pos_embed(&g, 36, 64, 48, 64, true);
  test_rotary_bf16(&g, 37, 2, 24);
  test_rotary_bf16(&g, 100, 16, 64);
  test_rotary_bf16(&g, 1, 16, 72);
  static const int32_t short_segs[] = {4, 64, 33, 1, 60};
  test_attention_bf16(&g, 2, 64, short_segs, 5, BF16_EXACT);
  test_attention_bf16(&g, 3, 72, short_segs, 5, BF16_EXACT);
  /* segments longer than one 64-key tile: the kernel rounds e^(s − running max) tile by tile, the
   * CPU form against the segment's maximum, so more outputs differ by an ulp or two (measured on
   * the H200, 2026-11-30: 0.819 and 0.887 bit-equal, largest 2.7e-3 at |ref| 0.06) */
  test_attention_bf16(&g, 2, 24, mixed, 2, 0.75);
  test_attention_bf16(&g, 2, 72, many, 8, 0.8);
  test_gelu_bf16(&g, 33, 96, EX_GELU_TANH);
  test_gelu_bf16(&g, 7, 4096, EX_GELU_ERF);
  return tw_finish("vision_ops");
}
