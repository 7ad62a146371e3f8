/* Twin test of the kept LoRA on CUDA (cuda_lora.h) against the float32 CPU branch
 * (ex_cpu_linear_lora_add, the PEFT formula): a small config, an adapter file written with the
 * safetensors writer (rank 16 q/k/v into the fused attention input, rank 8 z/b/a into the fused
 * [z|b|a] output at 8-byte-aligned column offsets, rank 16 down_proj, rank 32 gate/up of another
 * layer), applied through exc_lora_new / exc_lora_apply at 1, 65 and 3,000 rows (two 2,048-row
 * chunks), scale 2 (the power-of-two path, as OmniJev and JEMM) and 0.75 (the separate product and
 * add). Checks:
 *   - every adapted column within 2e-5 + 2e-5·|want| of the CPU: both sides are FP32 sums of at
 *     most 512 products of unit-scale terms in different orders (a few hundred FP32 ulps at most);
 *     a wrong rounding step (x rounded again, a bf16 product) or a lost term is ≥ 1e-3;
 *   - a row's bits do not depend on how many rows share the launch: rows of the 65-row run equal
 *     the first 65 of the 3,000-row run, row 0 alone and row 2,500 alone (second chunk) equal
 *     theirs, bit for bit;
 *   - a site without pairs in a layer leaves y bit-identical. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cm_error.h"
#include "cm_safetensors.h"
#include "cpu_matmul.h"
#include "cuda_lora.h"
#include "twin.h"

enum { H = 256, INTER = 512, NH = 4, HD = 32, NKV = 2, LK = 2, LV = 6, DK = 32, DV = 32 };
enum { QW = NH * 2 * HD, KW = NKV * HD, M_ATTN = QW + 2 * KW, VD = LV * DV, M_ZBA = VD + 2 * LV };
enum { MAX_ROWS = 3000 };

struct factor {
  const char *module;
  int layer;
  size_t rank, in, out, off; /* off: column in the site's fused output */
  enum exc_lora_site site;
  float *a, *b;              /* host [rank, in], [out, rank] */
};

static struct factor F[] = {
    {"self_attn.q_proj", 0, 16, H, QW, 0, EXC_LORA_ATTN_IN, NULL, NULL},
    {"self_attn.k_proj", 0, 16, H, KW, QW, EXC_LORA_ATTN_IN, NULL, NULL},
    {"self_attn.v_proj", 0, 16, H, KW, QW + KW, EXC_LORA_ATTN_IN, NULL, NULL},
    {"linear_attn.in_proj_z", 0, 8, H, VD, 0, EXC_LORA_GDN_ZBA, NULL, NULL},
    {"linear_attn.in_proj_b", 0, 8, H, LV, VD, EXC_LORA_GDN_ZBA, NULL, NULL},
    {"linear_attn.in_proj_a", 0, 8, H, LV, VD + LV, EXC_LORA_GDN_ZBA, NULL, NULL},
    {"mlp.down_proj", 0, 16, INTER, H, 0, EXC_LORA_MLP_DOWN, NULL, NULL},
    {"mlp.gate_proj", 1, 32, H, INTER, 0, EXC_LORA_MLP_IN, NULL, NULL},
    {"mlp.up_proj", 1, 32, H, INTER, INTER, EXC_LORA_MLP_IN, NULL, NULL},
};
#define N_F (sizeof(F) / sizeof(F[0]))

static float *hmalloc(size_t n) {
  float *p = malloc(n * sizeof(float));
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return p;
}

static void write_adapter(const char *path) {
  struct cm_safetensors_writer *w;
  TW_OK(cm_safetensors_writer_new(&w));
  char names[N_F][2][128];
  for (size_t i = 0; i < N_F; i++) {
    snprintf(names[i][0], 128, "model.language_model.layers.%d.%s.lora_A", F[i].layer, F[i].module);
    snprintf(names[i][1], 128, "model.language_model.layers.%d.%s.lora_B", F[i].layer, F[i].module);
    int64_t sa[2] = {(int64_t)F[i].rank, (int64_t)F[i].in}, sb[2] = {(int64_t)F[i].out, (int64_t)F[i].rank};
    TW_OK(cm_safetensors_writer_add(w, names[i][0], CM_DTYPE_F32, 2, sa, F[i].a));
    TW_OK(cm_safetensors_writer_add(w, names[i][1], CM_DTYPE_F32, 2, sb, F[i].b));
  }
  struct cm_diag d = {0};
  TW_OK(cm_safetensors_writer_finish(w, path, &d));
  cm_safetensors_writer_free(w);
}

/* The CPU twin of one site: every factor of (layer, site) applied to its column block of y. */
static void cpu_site(int layer, enum exc_lora_site site, const float *x, size_t in, float *y,
                     size_t ld_y, size_t t, float scale) {
  for (size_t i = 0; i < N_F; i++) {
    if (F[i].layer != layer || F[i].site != site)
      continue;
    float *blk = hmalloc(t * F[i].out), *tmp = hmalloc(t * F[i].rank);
    for (size_t row = 0; row < t; row++)
      memcpy(blk + row * F[i].out, y + row * ld_y + F[i].off, F[i].out * sizeof(float));
    ex_cpu_linear_lora_add(x, F[i].a, F[i].b, scale, blk, tmp, t, in, F[i].rank, F[i].out);
    for (size_t row = 0; row < t; row++)
      memcpy(y + row * ld_y + F[i].off, blk + row * F[i].out, F[i].out * sizeof(float));
    free(blk);
    free(tmp);
  }
}

/* exc_lora_apply on rows [r0, r0 + t) of x / y0; returns the t output rows (host, malloc). */
static float *gpu_site(struct exc_lora *l, int layer, enum exc_lora_site site, const float *x,
                       size_t in, const float *y0, size_t ld_y, size_t r0, size_t t) {
  void *dx = tw_dev_bf16(x + r0 * in, t * in); /* x holds bf16 values: exact */
  float *dy = tw_dev(t * ld_y * sizeof(float));
  tw_up(dy, y0 + r0 * ld_y, t * ld_y * sizeof(float));
  TW_OK(exc_lora_apply(l, 0, layer, site, dx, in, dy, ld_y, t));
  TW_CUDA(cudaDeviceSynchronize());
  float *got = hmalloc(t * ld_y);
  tw_down(got, dy, t * ld_y * sizeof(float));
  TW_CUDA(cudaFree(dx));
  TW_CUDA(cudaFree(dy));
  return got;
}

static void check_site(struct exc_lora *l, struct tw_rng *r, int layer, enum exc_lora_site site,
                       size_t in, size_t ld_y, float scale, const char *name) {
  float *x = hmalloc(MAX_ROWS * in), *y0 = hmalloc(MAX_ROWS * ld_y);
  tw_fill_bf16_normal(r, x, MAX_ROWS * in, 1.0f);
  tw_fill_normal(r, y0, MAX_ROWS * ld_y, 1.0f);
  const size_t rows[] = {1, 65, MAX_ROWS};
  float *got[3];
  for (int ri = 0; ri < 3; ri++) {
    size_t t = rows[ri];
    got[ri] = gpu_site(l, layer, site, x, in, y0, ld_y, 0, t);
    float *want = hmalloc(t * ld_y);
    memcpy(want, y0, t * ld_y * sizeof(float));
    cpu_site(layer, site, x, in, want, ld_y, t, scale);
    char what[160];
    snprintf(what, sizeof(what), "lora %s layer %d scale %g rows %zu vs CPU", name, layer, scale, t);
    tw_close(what, got[ri], want, t * ld_y, 2e-5, 2e-5);
    free(want);
  }
  /* batch invariance, bit for bit */
  if (memcmp(got[0], got[2], ld_y * sizeof(float)))
    tw_fail("lora %s scale %g: row 0 alone differs from row 0 of %d rows", name, scale, MAX_ROWS);
  if (memcmp(got[1], got[2], 65 * ld_y * sizeof(float)))
    tw_fail("lora %s scale %g: 65 rows differ from the first 65 of %d", name, scale, MAX_ROWS);
  float *alone = gpu_site(l, layer, site, x, in, y0, ld_y, 2500, 1);
  if (memcmp(alone, got[2] + 2500 * ld_y, ld_y * sizeof(float)))
    tw_fail("lora %s scale %g: row 2500 alone differs from row 2500 of %d rows", name, scale,
            MAX_ROWS);
  free(alone);
  for (int ri = 0; ri < 3; ri++)
    free(got[ri]);
  /* a site without pairs in this layer: y untouched */
  int other = 1 - layer;
  float *same = gpu_site(l, other, site, x, in, y0, ld_y, 0, 65);
  bool has = false;
  for (size_t i = 0; i < N_F; i++)
    has |= F[i].layer == other && F[i].site == site;
  if (!has && memcmp(same, y0, 65 * ld_y * sizeof(float)))
    tw_fail("lora %s: layer %d has no pairs at this site but y changed", name, other);
  free(same);
  free(x);
  free(y0);
}

int main(void) {
  tw_require_gpu();
  struct tw_rng r;
  tw_rng_seed(&r, 31);
  for (size_t i = 0; i < N_F; i++) {
    F[i].a = hmalloc(F[i].rank * F[i].in);
    F[i].b = hmalloc(F[i].out * F[i].rank);
    tw_fill_normal(&r, F[i].a, F[i].rank * F[i].in, 1.0f / sqrtf((float)F[i].in));
    tw_fill_normal(&r, F[i].b, F[i].out * F[i].rank, 1.0f / sqrtf((float)F[i].rank));
  }
  char path[] = "/tmp/s1-test-lora-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    perror("mkstemp");
    return 1;
  }
  close(fd);
  write_adapter(path);
  struct cm_safetensors *st;
  struct cm_diag d = {0};
  TW_OK(cm_safetensors_open(path, &st, &d));
  struct ex_qwen35_config cfg = {.hidden_size = H, .intermediate_size = INTER, .n_layers = 2,
                                 .n_heads = NH, .n_kv_heads = NKV, .head_dim = HD,
                                 .lin_k_heads = LK, .lin_v_heads = LV, .lin_dk = DK, .lin_dv = DV};
  const float scales[] = {2.0f, 0.75f};
  for (int si = 0; si < 2; si++) {
    struct exc_lora *l;
    TW_OK(exc_lora_new(&cfg, st, scales[si], MAX_ROWS, &l, &d));
    if (exc_lora_count(l) != N_F)
      tw_fail("lora: %zu pairs loaded, want %zu", exc_lora_count(l), N_F);
    check_site(l, &r, 0, EXC_LORA_ATTN_IN, H, M_ATTN, scales[si], "q|k|v");
    check_site(l, &r, 0, EXC_LORA_GDN_ZBA, H, M_ZBA, scales[si], "z|b|a");
    check_site(l, &r, 0, EXC_LORA_MLP_DOWN, INTER, H, scales[si], "down");
    check_site(l, &r, 1, EXC_LORA_MLP_IN, H, 2 * INTER, scales[si], "gate|up");
    exc_lora_free(l);
  }
  cm_safetensors_close(st);
  unlink(path);
  for (size_t i = 0; i < N_F; i++) {
    free(F[i].a);
    free(F[i].b);
  }
  return tw_finish("test_lora");
}
