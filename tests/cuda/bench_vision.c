/* Times the CUDA vision tower at real shapes with random bf16 weights (N(0, 0.02), norm weights
 * 1 + N(0, 0.02): never zeros): the 4B tower (depth 24, V 1024, 16 heads of 64) and the 27B tower
 * (depth 27, V 1152, 16 heads of 72) on one 1600×900 image, grid (1, 36, 64) by the OmniJev
 * processor rule = 2304 patches, 576 merged rows (spec/benchmark.md). CUDA events around each
 * forward (pixels already on the device, and with the host upload), 5 warm-up runs excluded,
 * median / min / max of the repeats; also the attention kernel alone (24 or 27 launches' worth).
 * Usage: bench_vision [REPEATS]. Prints one table; exits 1 on any CUDA error or a non-finite
 * output. Not a test (no reference): the twin tests are test_vision_ops / test_vision_tower. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_safetensors.h"
#include "cuda_vision.h"
#include "twin.h"

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

struct stats {
  float med, lo, hi; /* ms */
};

static struct stats summarize(float *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp_float);
  return (struct stats){t[n / 2], t[0], t[n - 1]};
}

/* Fills the weight arena with bf16 N(0, sd) values drawn once (a 1 Mi-element pattern, repeated)
 * and the norm weights with 1 + N(0, sd). */
static void fill_weights(struct exc_vision *v, struct tw_rng *g) {
  size_t pat = 1u << 20;
  float *f = malloc(pat * 4);
  uint16_t *h = malloc(pat * 2);
  tw_fill_normal(g, f, pat, 0.02f);
  tw_to_bf16(f, h, pat);
  for (size_t off = 0; off < v->n_weights; off += pat) {
    size_t n = v->n_weights - off < pat ? v->n_weights - off : pat;
    tw_up(v->weights + off, h, n * 2);
  }
  size_t V = (size_t)v->cfg.hidden_size;
  for (size_t i = 0; i < V; i++)
    h[i] = cm_f32_to_bf16(1.0f + f[i]);
  for (int b = 0; b < v->cfg.depth; b++) {
    tw_up((void *)v->blocks[b].norm1_w, h, V * 2);
    tw_up((void *)v->blocks[b].norm2_w, h, V * 2);
  }
  tw_up((void *)v->merger_norm_w, h, V * 2);
  free(f);
  free(h);
}

static void bench(const char *name, int depth, int V, int heads, int F, int O, int reps) {
  struct ex_vision_config cfg = {
      .depth = depth, .hidden_size = V, .num_heads = heads, .head_dim = V / heads,
      .intermediate_size = F, .out_hidden_size = O, .in_channels = 3, .patch_size = 16,
      .temporal_patch_size = 2, .spatial_merge_size = 2, .patch_dim = 1536,
      .num_position_embeddings = 2304, .pos_side = 48, .block_act = EX_GELU_TANH,
      .rope_theta = 10000.0f, .norm_eps = 1e-6f};
  const int32_t grid[3] = {1, 36, 64};
  const int64_t n = 2304, nm = 576;
  struct tw_rng g;
  tw_rng_seed(&g, 0xbe4c4u + (uint64_t)V);
  struct exc_gemm *gemm = NULL;
  struct exc_vision *v = NULL;
  struct cm_diag d = {0};
  TW_OK(exc_gemm_new(32u << 20, &gemm));
  if (exc_vision_new(&cfg, NULL, n, 4, gemm, &v, &d) != 0) {
    fprintf(stderr, "FAIL: exc_vision_new: %s\n", d.msg);
    exit(1);
  }
  fill_weights(v, &g);
  float *pix = malloc((size_t)n * 1536 * 4);
  for (size_t i = 0; i < (size_t)n * 1536; i++)
    pix[i] = tw_uniform(&g, -1.0f, 1.0f);
  float *d_pix = tw_dev((size_t)n * 1536 * 4), *d_out = tw_dev((size_t)nm * O * 4);
  tw_up(d_pix, pix, (size_t)n * 1536 * 4);
  cudaStream_t st;
  TW_CUDA(cudaStreamCreate(&st));
  cudaEvent_t e0, e1;
  TW_CUDA(cudaEventCreate(&e0));
  TW_CUDA(cudaEventCreate(&e1));
  float *t = malloc((size_t)reps * sizeof(float));

  for (int i = 0; i < 5; i++)
    TW_OK(exc_vision_forward_device(v, st, d_pix, n, grid, 1, d_out, &d));
  TW_CUDA(cudaStreamSynchronize(st));
  for (int i = 0; i < reps; i++) {
    TW_CUDA(cudaEventRecord(e0, st));
    TW_OK(exc_vision_forward_device(v, st, d_pix, n, grid, 1, d_out, &d));
    TW_CUDA(cudaEventRecord(e1, st));
    TW_CUDA(cudaEventSynchronize(e1));
    TW_CUDA(cudaEventElapsedTime(&t[i], e0, e1));
  }
  struct stats s_dev = summarize(t, reps);

  for (int i = 0; i < reps; i++) {
    TW_CUDA(cudaEventRecord(e0, st));
    TW_OK(exc_vision_forward(v, st, pix, n, grid, 1, d_out, &d));
    TW_CUDA(cudaEventRecord(e1, st));
    TW_CUDA(cudaEventSynchronize(e1));
    TW_CUDA(cudaEventElapsedTime(&t[i], e0, e1));
  }
  struct stats s_host = summarize(t, reps);

  /* Output sanity: finite and not all zero. */
  float *out = malloc((size_t)nm * O * 4);
  tw_down(out, d_out, (size_t)nm * O * 4);
  double sum2 = 0;
  size_t bad = 0;
  for (size_t i = 0; i < (size_t)nm * O; i++) {
    if (!isfinite(out[i]))
      bad++;
    sum2 += (double)out[i] * out[i];
  }
  if (bad || sum2 == 0.0) {
    fprintf(stderr, "FAIL: %s: %zu non-finite outputs, sum of squares %g\n", name, bad, sum2);
    exit(1);
  }

  /* The attention kernel alone, `depth` launches on the tower's own q/k/v and tiles. */
  const struct exc_vision_tile *tiles =
      (const struct exc_vision_tile *)((char *)v->geo + ((size_t)n * 40 + 15) / 16 * 16);
  int n_tiles = (int)((n + 63) / 64);
  float scale = (float)pow((double)cfg.head_dim, -0.5);
  for (int i = 0; i < reps; i++) {
    TW_CUDA(cudaEventRecord(e0, st));
    for (int b = 0; b < depth; b++)
      TW_OK(exc_vision_attention(st, v->qkv, tiles, n_tiles, heads, cfg.head_dim, scale, v->a));
    TW_CUDA(cudaEventRecord(e1, st));
    TW_CUDA(cudaEventSynchronize(e1));
    TW_CUDA(cudaEventElapsedTime(&t[i], e0, e1));
  }
  struct stats s_att = summarize(t, reps);
  /* The GEMMs alone: the tower's 4 per block, the patch embedding and the merger's 2, on the
   * tower's own (non-zero) scratch. */
  const size_t uV = (size_t)V, uF = (size_t)F, uO = (size_t)O, un = (size_t)n, unm = (size_t)nm;
  for (int i = 0; i < reps; i++) {
    TW_CUDA(cudaEventRecord(e0, st));
    TW_OK(exc_gemm(gemm, st, v->f, 1536, v->patch_w, v->x, uV, EXC_DTYPE_F32, false, un, 1536, uV));
    for (int b = 0; b < depth; b++) {
      const struct exc_vision_block *bl = &v->blocks[b];
      TW_OK(exc_gemm(gemm, st, v->a, uV, bl->qkv_w, v->y, 3 * uV, EXC_DTYPE_F32, false, un, uV,
                     3 * uV));
      TW_OK(exc_gemm(gemm, st, v->a, uV, bl->proj_w, v->y, uV, EXC_DTYPE_F32, false, un, uV, uV));
      TW_OK(exc_gemm(gemm, st, v->a, uV, bl->fc1_w, v->y, uF, EXC_DTYPE_F32, false, un, uV, uF));
      TW_OK(exc_gemm(gemm, st, v->f, uF, bl->fc2_w, v->y, uV, EXC_DTYPE_F32, false, un, uF, uV));
    }
    TW_OK(exc_gemm(gemm, st, v->a, 4 * uV, v->merger_fc1_w, v->y, 4 * uV, EXC_DTYPE_F32, false,
                   unm, 4 * uV, 4 * uV));
    TW_OK(exc_gemm(gemm, st, v->f, 4 * uV, v->merger_fc2_w, d_out, uO, EXC_DTYPE_F32, false, unm,
                   4 * uV, uO));
    TW_CUDA(cudaEventRecord(e1, st));
    TW_CUDA(cudaEventSynchronize(e1));
    TW_CUDA(cudaEventElapsedTime(&t[i], e0, e1));
  }
  struct stats s_gemm = summarize(t, reps);
  double att_flop = 4.0 * (double)n * n * cfg.head_dim * heads * depth;
  double gemm_flop = 2.0 * n * ((double)1536 * V + depth * (4.0 * V * V + 2.0 * V * F)) +
                     2.0 * nm * (16.0 * V * V + 4.0 * V * O);
  printf("%-4s tower (depth %d, V %d, hd %d), 1 image 36x64 = %lld patches -> %lld rows, %d reps\n",
         name, depth, V, cfg.head_dim, (long long)n, (long long)nm, reps);
  printf("  forward, pixels on device : median %7.3f ms (min %.3f, max %.3f)\n", s_dev.med,
         s_dev.lo, s_dev.hi);
  printf("  forward, pixels from host : median %7.3f ms (min %.3f, max %.3f)\n", s_host.med,
         s_host.lo, s_host.hi);
  printf("  attention x%d alone       : median %7.3f ms (min %.3f, max %.3f) = %.0f TFLOP/s\n",
         depth, s_att.med, s_att.lo, s_att.hi, att_flop / (s_att.med * 1e-3) / 1e12);
  printf("  GEMMs alone (%d)          : median %7.3f ms (min %.3f, max %.3f) = %.0f TFLOP/s\n",
         4 * depth + 3, s_gemm.med, s_gemm.lo, s_gemm.hi, gemm_flop / (s_gemm.med * 1e-3) / 1e12);
  printf("  the rest (forward - both) : %7.3f ms (norms, rotary, GELU, casts, launch gaps)\n",
         s_dev.med - s_att.med - s_gemm.med);
  printf("  work: attention %.0f GFLOP, GEMMs %.0f GFLOP; floor at 790 TFLOP/s %.2f ms\n",
         att_flop / 1e9, gemm_flop / 1e9, (att_flop + gemm_flop) / 790e12 * 1e3);
  free(t);
  free(out);
  free(pix);
  cudaFree(d_pix);
  cudaFree(d_out);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(st);
  exc_vision_free(v);
  exc_gemm_free(gemm);
  cm_diag_fini(&d);
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? (int)strtol(argv[1], NULL, 10) : 30;
  if (reps < 3 || reps > 10000)
    reps = 30;
  tw_require_gpu();
  bench("4B", 24, 1024, 16, 4096, 2560, reps);
  bench("27B", 27, 1152, 16, 4304, 5120, reps);
  return 0;
}
