/* engine_dir: the CUDA engine on an exported model directory without the image stack (so it runs
 * on the GPU machine from a static build): --check compares it, in the fp32-residual numerics,
 * with the float32 CPU forward on seeded text tokens at three positions: the relative L2 of each
 * hidden row must stay within max(2e-2, 1.5 × that of the CPU forward with --bf16-rounding, i.e.
 * what rounding as the bf16 reference does costs on this model), the same top-1 id; a
 * prefix/continuation split against the one pass; then, in the ref-bf16 numerics, with the
 * bf16-rounding CPU forward (its twin): each row within max(2e-2, the twin's own distance to the
 * float32 forward), every value a bf16 value. --repeat K prints s1-forward's timing JSON in the
 * --numerics mode (default ref-bf16); --profile then runs K more prefills with an event after
 * every op and prints the device ms per forward of each op kind.
 * Usage: engine_dir --model DIR --tokens N [--check] [--repeat K [--profile]]
 *                   [--numerics ref-bf16|fp32-residual] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_model_dir.h"
#include "exc_qwen35.h"
#include "twin.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void top5(const float *x, size_t n, int32_t *ids) {
  float vals[5];
  ex_top_k(x, n, 5, ids, vals);
}

int main(int argc, char **argv) {
  double t0 = now_ms();
  const char *model = NULL;
  long n = 0, repeat = 0;
  int check = 0, profile = 0;
  enum exc_qwen35_numerics numerics = EXC_NUMERICS_REF_BF16;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--model") && i + 1 < argc)
      model = argv[++i];
    else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
      n = strtol(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
      repeat = strtol(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--check"))
      check = 1;
    else if (!strcmp(argv[i], "--profile"))
      profile = 1;
    else if (!strcmp(argv[i], "--numerics") && i + 1 < argc &&
             !exc_qwen35_numerics_parse(argv[i + 1], &numerics))
      i++;
    else {
      fprintf(stderr, "usage: engine_dir --model DIR --tokens N [--check] [--repeat K]\n");
      return 2;
    }
  }
  if (!model || n < 2 || repeat < 0) {
    fprintf(stderr, "usage: engine_dir --model DIR --tokens N [--check] [--repeat K]\n");
    return 2;
  }
  tw_require_gpu();
  struct cm_diag d = {0};
  struct cm_model_dir *dir = NULL;
  struct ex_qwen35_config cfg;
  if (cm_model_dir_open(model, &dir, &d) || ex_qwen35_config_parse(dir->config, &cfg, &d)) {
    fprintf(stderr, "engine_dir: %s\n", d.msg ? d.msg : "cannot open the model");
    return 1;
  }
  size_t nt = (size_t)n, h = (size_t)cfg.hidden_size, v = (size_t)cfg.vocab_size;
  int32_t *tok = malloc(nt * sizeof(int32_t));
  size_t mod = v < 150000 ? v : 150000;
  for (size_t i = 0; i < nt; i++)
    tok[i] = (int32_t)((i * 7919 + 11) % mod);
  struct exc_qwen35_limits lim;
  exc_qwen35_limits_default(&lim);
  lim.max_tokens = nt;
  lim.max_ctx = nt;
  lim.max_seqs = 1;
  lim.n_snapshots = 2;
  lim.max_readouts = 3;
  lim.numerics = numerics;
  struct exc_qwen35 *e = NULL;
  if (exc_qwen35_new(&cfg, dir->weights, 0, &lim, &e, &d)) {
    fprintf(stderr, "engine_dir: %s\n", d.msg);
    return 1;
  }
  double ready_ms = now_ms() - t0;
  struct exc_qwen35_state *s0 = NULL, *s1 = NULL;
  TW_OK(exc_qwen35_state_acquire(e, &s0));
  TW_OK(exc_qwen35_state_acquire(e, &s1));
  if (check) {
    TW_OK(exc_qwen35_set_numerics(e, EXC_NUMERICS_FP32_RESIDUAL));
    size_t rows[3] = {0, nt / 2, nt - 1};
    float *gh = malloc(3 * h * sizeof(float)), *gl = malloc(3 * v * sizeof(float));
    TW_OK(exc_qwen35_forward(e, &(struct exc_qwen35_seq){.state = s0, .advance = true, .n = nt}, 1,
                             tok, NULL, 0, rows, 3, gh, gl, &d));
    /* continuation from a clone of the first half */
    size_t p = nt / 2;
    float *ch = malloc(h * sizeof(float));
    size_t last = nt - 1 - p;
    s0->n_tokens = 0;
    TW_OK(exc_qwen35_forward(e, &(struct exc_qwen35_seq){.state = s0, .advance = true, .n = p}, 1,
                             tok, NULL, 0, NULL, 0, NULL, NULL, &d));
    TW_OK(exc_qwen35_state_clone(e, s0, s1));
    TW_OK(exc_qwen35_forward(e, &(struct exc_qwen35_seq){.state = s1, .advance = true, .n = nt - p},
                             1, tok + p, NULL, 0, &last, 1, ch, NULL, &d));
    double ce = tw_rel_l2(ch, gh + 2 * h, h);
    printf("continuation %zu+%zu: last hidden rel L2 vs one pass %.3e (tol 1e-2)\n", p, nt - p, ce);
    if (!(ce <= 1e-2))
      tw_fail("continuation off the one pass");
    /* the float32 CPU forward */
    struct ex_qwen35_model *m = NULL;
    struct ex_qwen35_state *cs = NULL;
    TW_OK(ex_qwen35_model_load(&cfg, dir->weights, NULL, 0, &m, &d));
    TW_OK(ex_qwen35_state_new(m, &cs));
    float *emb = malloc(nt * h * sizeof(float)), *hid = malloc(nt * h * sizeof(float));
    float *hb = malloc(nt * h * sizeof(float)), *cl = malloc(v * sizeof(float));
    TW_OK(ex_qwen35_embed(m, tok, nt, emb, &d));
    TW_OK(ex_qwen35_forward(m, cs, emb, NULL, nt, hid, &d));
    /* the bf16-rounding CPU forward: the error scale a bf16 reference has on this model */
    struct ex_qwen35_state *cb = NULL;
    TW_OK(ex_qwen35_state_new(m, &cb));
    m->round_bf16 = true;
    TW_OK(ex_qwen35_forward(m, cb, emb, NULL, nt, hb, &d));
    m->round_bf16 = false;
    ex_qwen35_state_free(cb);
    for (int i = 0; i < 3; i++) {
      ex_qwen35_logits(m, hid + rows[i] * h, 1, cl);
      int32_t a[5], b[5];
      top5(cl, v, a);
      top5(gl + (size_t)i * v, v, b);
      int ov = 0;
      for (int x = 0; x < 5; x++)
        for (int y = 0; y < 5; y++)
          ov += a[x] == b[y];
      double e2 = tw_rel_l2(gh + (size_t)i * h, hid + rows[i] * h, h);
      double eb = tw_rel_l2(hb + rows[i] * h, hid + rows[i] * h, h);
      double tol = eb * 1.5 > 2e-2 ? eb * 1.5 : 2e-2;
      printf("row %5zu: hidden rel L2 %.3e (cpu bf16-rounding %.3e, tol %.3e), top-1 cpu %d gpu "
             "%d, top-5 overlap %d\n",
             rows[i], e2, eb, tol, a[0], b[0], ov);
      if (!(e2 <= tol))
        tw_fail("row %zu hidden off the CPU forward", rows[i]);
      if (a[0] != b[0])
        tw_fail("row %zu top-1 differs", rows[i]);
    }
    /* ref-bf16 against the bf16-rounding CPU forward */
    TW_OK(exc_qwen35_set_numerics(e, EXC_NUMERICS_REF_BF16));
    TW_OK(exc_qwen35_forward(e, &(struct exc_qwen35_seq){.n = nt}, 1, tok, NULL, 0, rows, 3, gh, gl,
                             &d));
    m->round_bf16 = true;
    for (int i = 0; i < 3; i++) {
      ex_qwen35_logits(m, hb + rows[i] * h, 1, cl);
      int32_t a[5], b[5];
      top5(cl, v, a);
      top5(gl + (size_t)i * v, v, b);
      int ov = 0;
      for (int x = 0; x < 5; x++)
        for (int y = 0; y < 5; y++)
          ov += a[x] == b[y];
      size_t nb = 0;
      for (size_t x = 0; x < h; x++)
        nb += !(cm_bf16_to_f32(cm_f32_to_bf16(gh[(size_t)i * h + x])) == gh[(size_t)i * h + x]);
      double er = tw_rel_l2(gh + (size_t)i * h, hb + rows[i] * h, h);
      double e32 = tw_rel_l2(gh + (size_t)i * h, hid + rows[i] * h, h);
      double eb = tw_rel_l2(hb + rows[i] * h, hid + rows[i] * h, h);
      double tol = eb > 2e-2 ? eb : 2e-2;
      printf("ref-bf16 row %5zu: hidden rel L2 vs cpu bf16-rounding %.3e (tol %.3e), vs cpu "
             "float32 %.3e, top-1 cpu-bf16 %d gpu %d, top-5 overlap %d\n",
             rows[i], er, tol, e32, a[0], b[0], ov);
      if (!(er <= tol))
        tw_fail("ref-bf16 row %zu hidden off the bf16-rounding CPU forward", rows[i]);
      if (nb)
        tw_fail("ref-bf16 row %zu: %zu hidden values are not bf16 values", rows[i], nb);
    }
    m->round_bf16 = false;
    TW_OK(exc_qwen35_set_numerics(e, numerics));
    free(hb);
    free(emb), free(hid), free(cl), free(gh), free(gl), free(ch);
    ex_qwen35_state_free(cs);
    ex_qwen35_model_free(m);
  }
  if (repeat > 0) {
    struct exc_qwen35_timing t;
    TW_OK(exc_qwen35_time_prefill(e, s0, tok, NULL, nt, NULL, 0, (int)repeat, &t, &d));
    struct exc_qwen35_memory mem;
    exc_qwen35_memory(e, &mem);
    printf("{\"device\": \"cuda\", \"n_tokens\": %zu, \"repeat\": %ld, \"first_ms\": %.3f, "
           "\"median_ms\": %.3f, \"min_ms\": %.3f, \"max_ms\": %.3f, \"ready_ms\": %.1f, "
           "\"device_used_bytes\": %zu, \"weights_bytes\": %zu, \"arena_bytes\": %zu, "
           "\"pool_bytes\": %zu}\n",
           nt, repeat, t.first_ms, t.median_ms, t.min_ms, t.max_ms, ready_ms, t.device_used_bytes,
           mem.weights_bytes, mem.arena_bytes, mem.pool_bytes);
    if (profile) {
      struct exc_qwen35_profile pr;
      TW_OK(exc_qwen35_profile_enable(e, true));
      TW_OK(exc_qwen35_time_prefill(e, s0, tok, NULL, nt, NULL, 0, (int)repeat, &t, &d));
      exc_qwen35_profile_read(e, &pr);
      double sum = 0;
      printf("{\"profile_ms_per_forward\": {");
      for (int k = 0; k < EXC_OP_COUNT; k++) {
        double per = pr.forwards ? pr.ms[k] / (double)pr.forwards : 0;
        sum += per;
        printf("%s\"%s\": %.4f", k ? ", " : "", exc_qwen35_op_name((enum exc_qwen35_op)k), per);
      }
      printf("}, \"sum_ms\": %.3f, \"median_ms_profiled\": %.3f, \"forwards\": %ld}\n", sum,
             t.median_ms, pr.forwards);
    }
  }
  exc_qwen35_state_release(e, s0);
  exc_qwen35_state_release(e, s1);
  exc_qwen35_free(e);
  cm_model_dir_free(dir);
  free(tok);
  cm_diag_fini(&d);
  return tw_finish("engine_dir");
}
