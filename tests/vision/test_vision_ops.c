/* Unit tests of the vision-only CPU ops against hand-derived values: LayerNorm, both GELU forms,
 * the align-corners interpolation taps, the 2-D rotary tables and rotation, and segment isolation
 * in varlen attention. The golden test covers them end to end; these pin each op down alone. */
#include "vision_attention.h"
#include "vision_gelu.h"
#include "vision_layer_norm.h"
#include "vision_pos_interp.h"
#include "vision_rotary.h"
#include "vision_test_util.h"

static int close_to(double a, double b, double tol) {
  return fabs(a - b) <= tol * (fabs(b) > 1.0 ? fabs(b) : 1.0);
}

static void test_layer_norm(void) {
  float x[8] = {1, 2, 3, 4, -1, -1, -1, -1}, w[4] = {1, 2, 1, 0.5f}, b[4] = {0, 0, 1, -1}, y[8];
  ex_cpu_layer_norm(x, w, b, y, 2, 4, 1e-6f);
  double rs = 1.0 / sqrt(1.25 + 1e-6); /* mean 2.5, biased variance 1.25 */
  double want[4] = {-1.5 * rs, -0.5 * rs * 2, 0.5 * rs + 1, 1.5 * rs * 0.5 - 1};
  for (int i = 0; i < 4; i++)
    CHECK(close_to(y[i], want[i], 1e-6), "layer_norm[%d] = %.9g, want %.9g", i, y[i], want[i]);
  /* A constant row normalises to 0, leaving the bias. */
  for (int i = 0; i < 4; i++)
    CHECK(y[4 + i] == b[i], "layer_norm of a constant row [%d] = %g", i, y[4 + i]);
}

static void test_gelu(void) {
  float x[5] = {-3.0f, -0.5f, 0.0f, 1.0f, 2.5f}, ye[5], yt[5];
  ex_cpu_gelu(x, ye, 5, EX_GELU_ERF);
  ex_cpu_gelu(x, yt, 5, EX_GELU_TANH);
  for (int i = 0; i < 5; i++) {
    double v = x[i];
    double e = 0.5 * v * (1.0 + erf(v / sqrt(2.0)));
    double t = 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    CHECK(close_to(ye[i], e, 2e-7), "gelu erf(%g) = %.9g, want %.9g", v, ye[i], e);
    CHECK(close_to(yt[i], t, 2e-7), "gelu tanh(%g) = %.9g, want %.9g", v, yt[i], t);
  }
  /* The two forms differ (0.841345 vs 0.841192 at 1): a swapped kind would show. */
  CHECK(fabs(ye[3] - yt[3]) > 1e-4, "gelu erf and tanh agree at 1: %g %g", ye[3], yt[3]);
  ex_cpu_gelu(x, x, 5, EX_GELU_ERF); /* in place */
  CHECK(memcmp(x, ye, sizeof ye) == 0, "gelu in place differs");
}

static void test_pos_interp(void) {
  int32_t t[4];
  float w[4];
  /* Grid == table: every patch takes its own cell with weight 1. */
  ex_vision_pos_interp_taps(2, 1, 4, 4, 4, t, w);
  CHECK(t[0] == 2 * 4 + 1 && w[0] == 1.0f && w[1] == 0.0f && w[2] == 0.0f && w[3] == 0.0f,
        "identity taps %d %d %d %d weights %g %g %g %g", t[0], t[1], t[2], t[3], w[0], w[1], w[2],
        w[3]);
  /* h = 3 on a side-4 table: row 1 maps to 1.5; w = 6: col 2 maps to 2·3/5 = 1.2. */
  ex_vision_pos_interp_taps(1, 2, 3, 6, 4, t, w);
  float fr = 0.5f, fc = (float)2 * 3.0f / 5.0f - 1.0f;
  CHECK(t[0] == 1 * 4 + 1 && t[1] == 1 * 4 + 2 && t[2] == 2 * 4 + 1 && t[3] == 2 * 4 + 2,
        "taps %d %d %d %d", t[0], t[1], t[2], t[3]);
  CHECK(close_to(w[0], (1 - fr) * (1 - fc), 1e-7) && close_to(w[1], (1 - fr) * fc, 1e-7) &&
            close_to(w[2], fr * (1 - fc), 1e-7) && close_to(w[3], fr * fc, 1e-7),
        "weights %g %g %g %g", w[0], w[1], w[2], w[3]);
  /* The last row and column map to side − 1: the +1 taps clamp and get weight 0. */
  ex_vision_pos_interp_taps(19, 13, 20, 14, 4, t, w);
  CHECK(t[0] == 15 && t[1] == 15 && t[2] == 15 && t[3] == 15 && w[0] == 1.0f && w[3] == 0.0f,
        "corner taps %d %d %d %d weights %g %g %g %g", t[0], t[1], t[2], t[3], w[0], w[1], w[2],
        w[3]);
  /* The gather-add adds Σ w·E to x. */
  float table[16 * 2], x[2] = {10.0f, 20.0f};
  for (int i = 0; i < 32; i++)
    table[i] = (float)i;
  int32_t taps[4] = {5, 6, 9, 10};
  float wt[4] = {0.25f, 0.25f, 0.25f, 0.25f};
  ex_cpu_vision_pos_embed_add(table, taps, wt, x, 1, 2);
  CHECK(x[0] == 10.0f + (10 + 12 + 18 + 20) / 4.0f && x[1] == 20.0f + (11 + 13 + 19 + 21) / 4.0f,
        "pos_embed_add %g %g", x[0], x[1]);
}

static void test_rotary(void) {
  enum { HD = 8 };
  float inv[HD / 4];
  ex_vision_rotary_inv_freq(HD, 10000.0f, inv);
  CHECK(inv[0] == 1.0f && close_to(inv[1], 0.01, 1e-7), "inv_freq %g %g", inv[0], inv[1]);
  int32_t pos[4] = {0, 0, 3, 5};
  float c[2 * HD], s[2 * HD];
  ex_cpu_vision_rotary_tables(pos, 2, inv, HD, c, s);
  /* Row 1: angles [3·f0, 3·f1, 5·f0, 5·f1] duplicated. */
  float ang[4] = {3 * inv[0], 3 * inv[1], 5 * inv[0], 5 * inv[1]};
  for (int j = 0; j < HD; j++) {
    CHECK(c[j] == 1.0f && s[j] == 0.0f, "position (0, 0) is not the identity at %d", j);
    CHECK(close_to(c[HD + j], cos(ang[j % 4]), 1e-7) && close_to(s[HD + j], sin(ang[j % 4]), 1e-7),
          "table row 1 dim %d", j);
  }
  /* Two rows of two heads: rotate_half pairs j with j + hd/2; norms per pair are preserved. */
  float q[2 * 2 * HD], q0[2 * 2 * HD];
  for (int i = 0; i < 2 * 2 * HD; i++)
    q[i] = q0[i] = (float)(i % 7) - 3.0f;
  ex_cpu_vision_rotary_apply(q, 2, 2 * HD, 2, HD, c, s);
  CHECK(memcmp(q, q0, 2 * HD * sizeof(float)) == 0, "row 0 (position 0) changed");
  for (int h = 0; h < 2; h++) {
    const float *a = q0 + 2 * HD + h * HD, *b = q + 2 * HD + h * HD;
    for (int j = 0; j < HD / 2; j++) {
      float cj = c[HD + j], sj = s[HD + j];
      double lo = a[j] * cj - a[j + HD / 2] * sj, hi = a[j + HD / 2] * cj + a[j] * sj;
      CHECK(close_to(b[j], lo, 1e-6) && close_to(b[j + HD / 2], hi, 1e-6),
            "head %d pair %d: (%g, %g), want (%g, %g)", h, j, b[j], b[j + HD / 2], lo, hi);
    }
  }
}

static void test_attention(void) {
  /* 5 rows, 1 head of dim 2, segments [0, 2) and [2, 5). */
  enum { N = 5, HD = 2 };
  float qkv[N * 3 * HD], out[N * HD], out2[N * HD], scratch[N];
  for (int i = 0; i < N * 3 * HD; i++)
    qkv[i] = (float)((i * 37) % 11) / 5.0f - 1.0f;
  int32_t cu[3] = {0, 2, 5};
  ex_cpu_vision_attention(qkv, N, 1, HD, cu, 2, 0.5f, out, scratch);
  /* Row 0 by hand: softmax over keys 0 and 1 of its own segment only. */
  const float *q = qkv, *k0 = qkv + HD, *k1 = qkv + 3 * HD + HD;
  const float *v0 = qkv + 2 * HD, *v1 = qkv + 3 * HD + 2 * HD;
  double s0 = 0.5 * (q[0] * k0[0] + q[1] * k0[1]), s1 = 0.5 * (q[0] * k1[0] + q[1] * k1[1]);
  double p0 = 1.0 / (1.0 + exp(s1 - s0)), p1 = 1.0 - p0;
  for (int d = 0; d < HD; d++)
    CHECK(close_to(out[d], p0 * v0[d] + p1 * v1[d], 1e-6), "row 0 dim %d: %g, want %g", d, out[d],
          p0 * v0[d] + p1 * v1[d]);
  /* Changing the second segment's rows leaves the first segment's output bit-identical. */
  for (int i = 2 * 3 * HD; i < N * 3 * HD; i++)
    qkv[i] += 0.75f;
  ex_cpu_vision_attention(qkv, N, 1, HD, cu, 2, 0.5f, out2, scratch);
  CHECK(memcmp(out, out2, 2 * HD * sizeof(float)) == 0, "segment 0 saw segment 1");
  CHECK(memcmp(out + 2 * HD, out2 + 2 * HD, 3 * HD * sizeof(float)) != 0,
        "segment 1 did not change");
}

int main(void) {
  test_layer_norm();
  test_gelu();
  test_pos_interp();
  test_rotary();
  test_attention();
  printf("%s\n", g_fail ? "FAILED" : "ok");
  return g_fail ? 1 : 0;
}
