/* Unit tests of the vision ops' bf16 variants (the _bf16 forms behind ex_vision.round_bf16): on
 * seeded random bf16 inputs each is compared with a direct scalar evaluation of its spec step
 * (spec/qwen3_5.md §6.3-6.6), written here with its own rounding (cm_f32_to_bf16), and shown to
 * differ from the float32 op (a rounding step that is skipped or misplaced fails). */
#include "cm_safetensors.h"
#include "vision_attention.h"
#include "vision_gelu.h"
#include "vision_layer_norm.h"
#include "vision_pos_interp.h"
#include "vision_rotary.h"
#include "vision_test_util.h"

/* R(x): round to bf16 (nearest even) and back. */
static float rb(float x) {
  return cm_bf16_to_f32(cm_f32_to_bf16(x));
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* A uniform float in [-1, 1) from a 64-bit LCG. */
static float uni(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(rng >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* n bf16 values, uniform in [-scale, scale) before rounding. */
static void fill_bf16(float *x, size_t n, float scale) {
  for (size_t i = 0; i < n; i++)
    x[i] = rb(uni() * scale);
}

static int is_bf16(float x) {
  return rb(x) == x;
}

/* Bit-equal count of a and b over n, and whether every value of a is a bf16 value. */
static size_t n_equal(const float *a, const float *b, size_t n, int *all_bf16) {
  size_t e = 0;
  *all_bf16 = 1;
  for (size_t i = 0; i < n; i++) {
    e += a[i] == b[i];
    *all_bf16 &= is_bf16(a[i]);
  }
  return e;
}

/* §6.3: x = R(x + R(Σ f32(E)·w)), the sum TL, TR, BL, BR in float32. */
static void test_pos_embed(void) {
  enum { SIDE = 4, H = 6, W = 10, D = 40 };
  size_t n = H * W;
  float table[SIDE * SIDE * D], wts[H * W * 4], x[H * W * D], x32[H * W * D], want[H * W * D];
  int32_t taps[H * W * 4];
  fill_bf16(table, SIDE * SIDE * D, 1.0f);
  fill_bf16(x, n * D, 2.0f);
  memcpy(x32, x, sizeof x);
  for (int r = 0; r < H; r++)
    for (int c = 0; c < W; c++)
      ex_vision_pos_interp_taps(r, c, H, W, SIDE, taps + 4 * (r * W + c), wts + 4 * (r * W + c));
  for (size_t r = 0; r < n; r++)
    for (int i = 0; i < D; i++) {
      float pe = table[taps[4 * r] * D + i] * wts[4 * r];
      for (int k = 1; k < 4; k++)
        pe = pe + table[taps[4 * r + k] * D + i] * wts[4 * r + k];
      want[r * D + i] = rb(x[r * D + i] + rb(pe));
    }
  ex_cpu_vision_pos_embed_add_bf16(table, taps, wts, x, n, D);
  ex_cpu_vision_pos_embed_add(table, taps, wts, x32, n, D);
  int all;
  size_t eq = n_equal(x, want, n * D, &all), eq32 = n_equal(x32, want, n * D, &all);
  CHECK(eq == n * D, "pos_embed_add_bf16: %zu of %zu equal the scalar form", eq, n * D);
  CHECK(eq32 < n * D / 2, "pos_embed_add (float32) equals the bf16 form on %zu of %zu", eq32,
        n * D);
}

/* §6.4: q, k = R(x·cos + rotate_half(x)·sin), products and the sum in float32. */
static void test_rotary(void) {
  enum { N = 9, HEADS = 3, HD = 16, STRIDE = 3 * HEADS * HD };
  int32_t pos[2 * N];
  float inv[HD / 4], ct[N * HD], st[N * HD], x[N * STRIDE], x32[N * STRIDE], want[N * STRIDE];
  for (int i = 0; i < 2 * N; i++)
    pos[i] = (int32_t)((uni() + 1.0f) * 25.0f); /* 0 .. 49 */
  ex_vision_rotary_inv_freq(HD, 10000.0f, inv);
  ex_cpu_vision_rotary_tables(pos, N, inv, HD, ct, st);
  fill_bf16(x, N * STRIDE, 3.0f);
  memcpy(x32, x, sizeof x);
  memcpy(want, x, sizeof x);
  for (int r = 0; r < N; r++)
    for (int h = 0; h < HEADS; h++)
      for (int j = 0; j < HD / 2; j++) {
        const float *c = ct + r * HD, *s = st + r * HD;
        float *w = want + r * STRIDE + h * HD;
        float a = x[r * STRIDE + h * HD + j], b = x[r * STRIDE + h * HD + j + HD / 2];
        float p0 = a * c[j], p1 = -b * s[j], p2 = b * c[j + HD / 2], p3 = a * s[j + HD / 2];
        w[j] = rb(p0 + p1);
        w[j + HD / 2] = rb(p2 + p3);
      }
  ex_cpu_vision_rotary_apply_bf16(x, N, STRIDE, HEADS, HD, ct, st);
  ex_cpu_vision_rotary_apply(x32, N, STRIDE, HEADS, HD, ct, st);
  int all;
  size_t eq = n_equal(x, want, N * STRIDE, &all);
  CHECK(eq == N * STRIDE && all, "rotary_apply_bf16: %zu of %d equal the scalar form (bf16 %d)", eq,
        N * STRIDE, all);
  /* only the q part was rotated: k and v are untouched */
  size_t eq32 = n_equal(x32, want, N * STRIDE, &all);
  CHECK(eq32 < N * STRIDE - N * HEADS * HD / 2,
        "rotary_apply (float32) equals the bf16 form on "
        "%zu of %d",
        eq32, N * STRIDE);
}

/* §6.5 / 6.6: R(LN(x)) with float32 statistics of bf16 inputs; R(gelu(x)) for both kinds. */
static void test_layer_norm_gelu(void) {
  enum { N = 7, D = 96 };
  float x[N * D], w[D], b[D], y[N * D], y32[N * D], want[N * D];
  fill_bf16(x, N * D, 4.0f);
  fill_bf16(w, D, 1.5f);
  fill_bf16(b, D, 0.5f);
  for (int r = 0; r < N; r++) {
    double mean = 0, var = 0;
    for (int i = 0; i < D; i++)
      mean += x[r * D + i];
    mean /= D;
    for (int i = 0; i < D; i++)
      var += (x[r * D + i] - mean) * (x[r * D + i] - mean);
    var /= D;
    float rstd = (float)(1.0 / sqrt(var + 1e-6)), m = (float)mean;
    for (int i = 0; i < D; i++)
      want[r * D + i] = rb((x[r * D + i] - m) * rstd * w[i] + b[i]);
  }
  ex_cpu_layer_norm_bf16(x, w, b, y, N, D, 1e-6f);
  ex_cpu_layer_norm(x, w, b, y32, N, D, 1e-6f);
  int all;
  size_t eq = n_equal(y, want, N * D, &all), eq32 = n_equal(y32, want, N * D, &all);
  CHECK(eq == N * D, "layer_norm_bf16: %zu of %d equal the scalar form", eq, N * D);
  CHECK(eq32 < N * D / 2, "layer_norm (float32) equals the bf16 form on %zu of %d", eq32, N * D);

  for (int kind = 0; kind < EX_GELU_COUNT; kind++) {
    for (int i = 0; i < N * D; i++) {
      double v = x[i];
      double g = kind == EX_GELU_TANH
                     ? 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)))
                     : 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
      want[i] = (float)g;
    }
    ex_cpu_gelu_bf16(x, y, N * D, (enum ex_gelu_kind)kind);
    /* the float32 gelu is within 2e-7 of the double one: its rounding to bf16 differs only where
     * the value lies within that of a rounding boundary */
    size_t near = 0, eqk = 0;
    for (int i = 0; i < N * D; i++) {
      eqk += y[i] == rb(want[i]);
      near += fabs(y[i] - want[i]) <= fabs(want[i]) / 256.0 + 1e-30;
    }
    CHECK(eqk >= (size_t)(N * D) * 99 / 100 && near == N * D,
          "gelu_bf16 kind %d: %zu of %d equal R(gelu), %zu within half an ulp", kind, eqk, N * D,
          near);
    n_equal(y, y, N * D, &all);
    CHECK(all, "gelu_bf16 kind %d: an output is not a bf16 value", kind);
  }
}

/* §6.5 attention (sdpa in bf16): o = R(Σ_j R(e_j)·v_j / Σ_j e_j), e_j = exp(s_j − max s). */
static void test_attention(void) {
  /* Hand case: one head, head_dim 4, two keys with scores 0 and s = −0.099609375, v = 0 and 1:
   * o = R(R(e^s) / (1 + e^s)) = R(0.90625 / 1.905191) = R(0.475674) = 0.4765625, where the
   * unrounded weights give R(0.905191 / 1.905191) = R(0.475118) = 0.474609375. */
  float scale = 1.0f;
  float qkv[2 * 12] = {0}, out[2 * 4], scr[2];
  qkv[0] = 1.0f;               /* q row 0 = (1, 0, 0, 0) */
  qkv[4] = 0.0f;               /* k row 0 = 0: score 0 */
  qkv[12 + 4] = -0.099609375f; /* k row 1 = (−0.0996, 0, 0, 0), a bf16 value */
  qkv[12 + 8] = 1.0f;          /* v row 1 = (1, 0, 0, 0); v row 0 = 0 */
  int32_t cu[2] = {0, 2};
  ex_cpu_vision_attention_bf16(qkv, 2, 1, 4, cu, 1, scale, out, scr);
  double e = exp(-0.099609375), want = rb(rb((float)e) / (float)(1.0 + e));
  CHECK(out[0] == (float)want && out[0] == 0.4765625f, "attention_bf16 hand case %.9g, want %.9g",
        out[0], want);
  ex_cpu_vision_attention(qkv, 2, 1, 4, cu, 1, scale, out, scr);
  CHECK(rb(out[0]) == 0.474609375f, "attention (float32) hand case %.9g", out[0]);

  /* Random: 2 heads of 8, segments 5 and 11 (attention stays inside each). */
  enum { HEADS = 2, HD = 8, DIM = HEADS * HD, N = 16 };
  float big[N * 3 * DIM], o[N * DIM], wantv[N * DIM], s[N];
  int32_t cu2[3] = {0, 5, 16};
  fill_bf16(big, N * 3 * DIM, 2.0f);
  float sc = (float)pow(HD, -0.5);
  ex_cpu_vision_attention_bf16(big, N, HEADS, HD, cu2, 2, sc, o, s);
  for (int g = 0; g < 2; g++)
    for (int h = 0; h < HEADS; h++)
      for (int i = cu2[g]; i < cu2[g + 1]; i++) {
        double mx = -INFINITY, sum = 0, sj[N];
        for (int j = cu2[g]; j < cu2[g + 1]; j++) {
          double d = 0;
          for (int t = 0; t < HD; t++)
            d += (double)big[i * 3 * DIM + h * HD + t] * big[j * 3 * DIM + DIM + h * HD + t];
          sj[j] = d * sc;
          mx = sj[j] > mx ? sj[j] : mx;
        }
        double acc[HD] = {0};
        for (int j = cu2[g]; j < cu2[g + 1]; j++) {
          double ej = exp(sj[j] - mx);
          sum += ej;
          for (int t = 0; t < HD; t++)
            acc[t] += (double)rb((float)ej) * big[j * 3 * DIM + 2 * DIM + h * HD + t];
        }
        for (int t = 0; t < HD; t++)
          wantv[i * DIM + h * HD + t] = (float)(acc[t] / sum);
      }
  /* The double form rounded agrees except where it lies within float32 noise of a boundary. */
  size_t eq = 0, within = 0;
  int all;
  for (int i = 0; i < N * DIM; i++) {
    eq += o[i] == rb(wantv[i]);
    within += fabs(o[i] - wantv[i]) <= fabs(wantv[i]) / 256.0 * 1.01 + 1e-6;
  }
  n_equal(o, o, N * DIM, &all);
  CHECK(all && within == N * DIM && eq >= N * DIM * 95 / 100,
        "attention_bf16 random: %zu of %d equal, %zu within half an ulp, bf16 %d", eq, N * DIM,
        within, all);
}

int main(void) {
  test_pos_embed();
  test_rotary();
  test_layer_norm_gelu();
  test_attention();
  printf("%s\n", g_fail ? "FAILED" : "ok");
  return g_fail ? 1 : 0;
}
