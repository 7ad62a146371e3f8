/* Unit tests of the float32 CPU ops with hand-checkable values: norms, SwiGLU, bf16 rounding,
 * mRoPE tables and axis interleaving, gated attention, causal conv1d with carried window, the
 * Gated DeltaNet gates and one recurrent step, LoRA, embedding and top-k. Chunked-vs-recurrent
 * agreement on random data is test_gdn_forms. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_act.h"
#include "cpu_attention.h"
#include "cpu_conv1d.h"
#include "cpu_embed.h"
#include "cpu_gdn.h"
#include "cpu_matmul.h"
#include "cpu_norm.h"
#include "cpu_rope.h"
#include "ex_qwen35.h"

static int failures;

static void near(const char *what, double got, double want, double tol) {
  if (!(fabs(got - want) <= tol)) {
    printf("FAIL %s: got %.9g want %.9g\n", what, got, want);
    failures++;
  }
}

static void test_rms_norm(void) {
  /* x = [3, 4]: mean square 12.5, rms 3.5355; w = [0, 1] → multipliers 1 and 2 */
  float x[2] = {3, 4}, w[2] = {0, 1}, y[2];
  ex_cpu_rms_norm(x, w, 0.0f, y, 1, 2);
  near("rms_norm[0]", y[0], 3 / sqrt(12.5), 1e-6);
  near("rms_norm[1]", y[1], 2 * 4 / sqrt(12.5), 1e-6);
  /* gated: plain w, times silu(z); z = 0 gives 0, z large gives z */
  float z[2] = {0, 30}, gw[2] = {2, 0.5f};
  ex_cpu_gated_rms_norm(x, z, gw, 0.0f, y, 1, 2);
  near("gated_norm[0]", y[0], 0.0, 1e-7);
  near("gated_norm[1]", y[1], 0.5 * 4 / sqrt(12.5) * 30, 1e-4);
  /* eps enters inside the root: zeros stay zeros */
  float zx[2] = {0, 0};
  ex_cpu_rms_norm(zx, w, 1e-6f, y, 1, 2);
  near("rms_norm zero", y[1], 0.0, 0.0);
}

static void test_act(void) {
  float g[3] = {0, 1, -2}, u[3] = {5, 2, 3}, o[3];
  ex_cpu_swiglu(g, u, o, 3);
  near("swiglu 0", o[0], 0.0, 0.0);
  near("swiglu 1", o[1], 2.0 / (1.0 + exp(-1.0)), 1e-6);
  near("swiglu 2", o[2], 3.0 * -2.0 / (1.0 + exp(2.0)), 1e-6);
  /* bf16: 8 significant bits. 1 + 2^-8 is a tie → even (1); 1 + 3·2^-8 → 1 + 2^-6 (ties up to
   * even mantissa); 1 + 2^-7 is exact; 1/3 → 0.333984375 */
  float r[4] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 1.0f + 1.0f / 128, 1.0f / 3.0f};
  ex_cpu_round_bf16(r, 4);
  near("bf16 tie even", r[0], 1.0, 0.0);
  near("bf16 tie up", r[1], 1.0 + 1.0 / 64, 0.0);
  near("bf16 exact", r[2], 1.0 + 1.0 / 128, 0.0);
  near("bf16 third", r[3], 0.333984375, 0.0);
}

static void test_rope(void) {
  /* rot_dims 12 → F = 6 frequencies; section [2, 2, 2]: j=1,4 from H; j=2,5 from W; 0,3 from T */
  int32_t pos[3] = {7, 11, 13}; /* one token, T=7 H=11 W=13 */
  int sec[3] = {2, 2, 2};
  float c[6], s[6];
  if (ex_cpu_mrope_tables(pos, 1, 12, 10000.0, sec, c, s) != 0) {
    printf("FAIL mrope tables rc\n");
    failures++;
  }
  int axis_pos[6] = {7, 11, 13, 7, 11, 13};
  for (int j = 0; j < 6; j++) {
    double inv = 1.0 / pow(10000.0, 2.0 * j / 12.0);
    char what[32];
    snprintf(what, sizeof(what), "mrope cos j=%d", j);
    near(what, c[j], cos(axis_pos[j] * inv), 2e-6);
    snprintf(what, sizeof(what), "mrope sin j=%d", j);
    near(what, s[j], sin(axis_pos[j] * inv), 2e-6);
  }
  /* section [6, 1, 1], F = 8: only j = 1 (< 3·1) takes H and only j = 2 takes W; j = 4 and 5
   * fall back to T although j % 3 would pick H and W */
  int sec2[3] = {6, 1, 1};
  float c2[8], s2[8];
  ex_cpu_mrope_tables(pos, 1, 16, 10000.0, sec2, c2, s2);
  near("mrope j=1 H", c2[1], cos(11 * (1.0 / pow(10000.0, 2.0 / 16))), 2e-6);
  near("mrope j=4 T", c2[4], cos(7 * (1.0 / pow(10000.0, 8.0 / 16))), 2e-6);
  near("mrope j=5 T", c2[5], cos(7 * (1.0 / pow(10000.0, 10.0 / 16))), 2e-6);
  /* rotation: one head of 6 dims, rot 4 (F=2), pass-through of dims 4,5 */
  float x[6] = {1, 2, 3, 4, 5, 6};
  float cc[2] = {0, 1}, ss[2] = {1, 0}; /* freq 0 by 90°, freq 1 by 0° */
  ex_cpu_rope_apply(x, 1, 1, 6, 4, cc, ss);
  near("rope x0", x[0], -3, 0);
  near("rope x2", x[2], 1, 0);
  near("rope x1", x[1], 2, 0);
  near("rope x3", x[3], 4, 0);
  near("rope pass", x[5], 6, 0);
}

static void test_attention(void) {
  /* 2 query heads, 1 kv head, head_dim 2, 2 tokens, no past. Token 0 sees itself only:
   * o = v0 · sigmoid(gate). Token 1: q·k equal for both keys → uniform → (v0+v1)/2. */
  float q[2 * 2 * 2] = {1, 0, 1, 0, 0, 1, 0, 1};
  float k[2 * 2] = {1, 1, 1, 1};
  float v[2 * 2] = {2, 4, 6, 8};
  float gate[8] = {0, 0, 0, 0, 0, 0, 100, -100};
  float out[8], sc[2];
  ex_cpu_attention_gated(q, gate, k, v, out, sc, 2, 0, 2, 1, 2, 0.5f);
  near("attn t0", out[0], 1.0, 1e-6);
  near("attn t0b", out[1], 2.0, 1e-6);
  near("attn t1 h0", out[4], 2.0, 1e-6);
  near("attn t1 h1 gate open", out[6], 4.0, 1e-5);
  near("attn t1 h1 gate shut", out[7], 0.0, 1e-6);
  /* with a past: one new token at position 1 reading the cache gives the same row */
  float out2[4];
  ex_cpu_attention_gated(q + 4, gate + 4, k, v, out2, sc, 1, 1, 2, 1, 2, 0.5f);
  near("attn past", out2[2], out[6], 0.0);
  /* non-uniform: scores s0 = 0, s1 = ln 3 → P = 1/4, 3/4 */
  float q3[1] = {(float)log(3.0)}, k3[2] = {0, 1}, v3[2] = {4, 8}, g3[1] = {50}, o3[1], sc3[2];
  ex_cpu_attention_gated(q3, g3, k3, v3, o3, sc3, 1, 1, 1, 1, 1, 1.0f);
  near("attn weights", o3[0], 4 * 0.25 + 8 * 0.75, 1e-5);
}

static void test_conv1d(void) {
  /* one channel, K = 3, w = [1, 10, 100]: y_t = silu(x_{t-2} + 10 x_{t-1} + 100 x_t) */
  float w[3] = {1, 10, 100}, win[2] = {0, 0};
  float x[4] = {0.01f, 0.02f, 0.03f, 0.04f}, y[4];
  ex_cpu_causal_conv1d_silu(x, w, win, y, 4, 1, 3);
  near("conv t0", y[0], ex_cpu_silu(1.0f), 1e-6);
  near("conv t2", y[2], ex_cpu_silu(0.01f + 0.2f + 3.0f), 1e-6);
  near("conv window0", win[0], 0.03, 1e-8);
  near("conv window1", win[1], 0.04, 1e-8);
  /* continuation: one more row reads the window */
  float x2[1] = {0.05f}, y2[1];
  ex_cpu_causal_conv1d_silu(x2, w, win, y2, 1, 1, 3);
  near("conv cont", y2[0], ex_cpu_silu(0.03f + 0.4f + 5.0f), 1e-6);
  near("conv window after 1", win[0], 0.04, 1e-8);
  near("conv window after 1b", win[1], 0.05, 1e-8);
}

static void test_gdn_step(void) {
  /* Hk = Hv = 1, dk = 2, dv = 1. q = [3, 4] → normalised [0.6, 0.8] / √2; k = [1, 0].
   * b = 0 → β = 0.5; a + dt_bias = 0 → softplus = ln 2; A_log = 0 → g = −ln 2, decay 0.5. */
  struct ex_gdn_dims d = {1, 1, 2, 1};
  float q[2] = {3, 4}, k[2] = {2, 0}, b[1] = {0}, a[1] = {-1}, alog[1] = {0}, dtb[1] = {1};
  float beta[1], g[1];
  ex_cpu_gdn_prepare(q, k, b, a, alog, dtb, beta, g, 1, &d);
  near("gdn q0", q[0], 0.6 / sqrt(2.0), 1e-6);
  near("gdn k0", k[0], 1.0, 1e-6);
  near("gdn beta", beta[0], 0.5, 0);
  near("gdn g", g[0], -log(2.0), 1e-6);
  /* state S = [[2], [1]]: decay → [[1], [0.5]]; m = Sᵀk = 1; v = 3 → δ = 0.5·2 = 1;
   * S = [[2], [0.5]]; o = Sᵀq = 2·0.6/√2 + 0.5·0.8/√2 */
  float v[1] = {3}, s[2] = {2, 1}, o[1];
  ex_cpu_gdn_recurrent(q, k, v, beta, g, s, o, 1, &d);
  near("gdn S0", s[0], 2.0, 1e-6);
  near("gdn S1", s[1], 0.5, 1e-6);
  near("gdn o", o[0], (2 * 0.6 + 0.5 * 0.8) / sqrt(2.0), 1e-6);
  /* the chunked form of the same single step from the same state */
  float s2[2] = {2, 1}, o2[1], scratch[64];
  if (ex_cpu_gdn_chunked_scratch(4, &d) > 64)
    failures++;
  ex_cpu_gdn_chunked(q, k, v, beta, g, s2, o2, 1, 4, &d, scratch);
  near("gdn chunked o", o2[0], o[0], 1e-6);
  near("gdn chunked S1", s2[1], 0.5, 1e-6);
  /* softplus threshold: a + dt_bias > 20 returns the argument itself */
  float a2[1] = {24}, g2[1], beta2[1];
  ex_cpu_gdn_prepare(q, k, b, a2, alog, dtb, beta2, g2, 1, &d);
  near("gdn softplus threshold", g2[0], -25.0, 0);
}

static void test_linear_lora_embed_topk(void) {
  /* x = [1, 2]; W = [[1, 0], [0, 1], [1, 1]]; A = [[1, 1]] (r = 1); B = [[1], [0], [2]] */
  float x[2] = {1, 2}, w[6] = {1, 0, 0, 1, 1, 1}, y[3], tmp[1];
  float a[2] = {1, 1}, b[3] = {1, 0, 2};
  ex_cpu_linear(x, w, NULL, y, 1, 2, 3);
  ex_cpu_linear_lora_add(x, a, b, 0.5f, y, tmp, 1, 2, 1, 3);
  near("lora y0", y[0], 1 + 0.5 * 3, 0);
  near("lora y1", y[1], 2, 0);
  near("lora y2", y[2], 3 + 0.5 * 6, 0);
  float table[6] = {0, 1, 10, 11, 20, 21}, out[4];
  int32_t ids[2] = {2, 0};
  if (ex_cpu_embed(table, 3, ids, out, 2, 2) != 0 || out[0] != 20 || out[3] != 1) {
    printf("FAIL embed\n");
    failures++;
  }
  int32_t bad[1] = {3};
  if (ex_cpu_embed(table, 3, bad, out, 1, 2) == 0) {
    printf("FAIL embed bounds\n");
    failures++;
  }
  float vals[7] = {0.5f, 3, -1, 3, 7, 2, 0};
  int32_t ti[3];
  float tv[3];
  ex_top_k(vals, 7, 3, ti, tv);
  if (ti[0] != 4 || ti[1] != 1 || ti[2] != 3 || tv[0] != 7) {
    printf("FAIL top_k %d %d %d\n", ti[0], ti[1], ti[2]);
    failures++;
  }
}

int main(void) {
  test_rms_norm();
  test_act();
  test_rope();
  test_attention();
  test_conv1d();
  test_gdn_step();
  test_linear_lora_embed_topk();
  if (failures) {
    printf("%d failures\n", failures);
    return 1;
  }
  printf("ok\n");
  return 0;
}
