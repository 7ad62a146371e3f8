/* The CUDA path of s1-forward (s1_forward_cuda.h): one engine with limits sized for the input, the
 * one-pass or prefix + continuation forward, and the --repeat timing of the whole one-pass prefill
 * to the last position's logits with CUDA events on the engine's stream (first run excluded). */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exc_bf16.h"

#include "cuda_check.h"
#include "s1_forward_images.h"
#include "cuda_vision.h"
#include "exc_qwen35.h"
#include "s1_forward_cuda.h"

int s1_forward_cuda_device(const char *device) {
  if (strcmp(device, "cuda") == 0)
    return 0;
  if (strncmp(device, "cuda:", 5) != 0 || !device[5])
    return -1;
  char *end = NULL;
  long v = strtol(device + 5, &end, 10);
  return (*end || v < 0 || v > 1024) ? -1 : (int)v;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Times job->repeat fresh one-pass prefills and prints the timing JSON line (README). */
static int time_prefill(struct exc_qwen35 *e, struct exc_qwen35_state *st,
                        const struct s1_forward_job *job, double ready_ms, struct cm_diag *diag) {
  struct exc_qwen35_timing t;
  int r = exc_qwen35_time_prefill(e, st, job->tokens, job->pos, job->n, job->image_rows,
                                  job->n_image_rows, job->repeat, &t, diag);
  if (r)
    return r;
  struct exc_qwen35_memory mem;
  exc_qwen35_memory(e, &mem);
  printf("{\"device\": \"cuda\", \"n_tokens\": %zu, \"repeat\": %d, \"first_ms\": %.3f, "
         "\"median_ms\": %.3f, \"min_ms\": %.3f, \"max_ms\": %.3f, \"ready_ms\": %.1f, "
         "\"device_used_bytes\": %zu, \"weights_bytes\": %zu, \"arena_bytes\": %zu, "
         "\"pool_bytes\": %zu}\n",
         job->n, job->repeat, t.first_ms, t.median_ms, t.min_ms, t.max_ms, ready_ms,
         t.device_used_bytes, mem.weights_bytes, mem.arena_bytes, mem.pool_bytes);
  fflush(stdout);
  return 0;
}

/* The engine kept between the jobs of one s1-forward run (one model directory, one device). */
static struct {
  struct exc_qwen35 *e;          /* NULL when none */
  char *path;                    /* its model directory */
  int device;                    /* its device */
  struct exc_qwen35_limits lim;  /* its reservation */
} kept;

void s1_forward_cuda_release(void) {
  exc_qwen35_free(kept.e);
  free(kept.path);
  memset(&kept, 0, sizeof(kept));
}

/* The engine for a job needing `lim`: the kept one when it is of this directory and device and
 * its reservation covers lim, else a new one (replacing it). */
static int engine_for(const struct cm_model_dir *dir, const struct ex_qwen35_config *cfg,
                      int device, const struct exc_qwen35_limits *lim, struct exc_qwen35 **ret,
                      struct cm_diag *diag) {
  if (kept.e && kept.device == device && strcmp(kept.path, dir->path) == 0 &&
      kept.lim.max_tokens >= lim->max_tokens && kept.lim.max_ctx >= lim->max_ctx &&
      kept.lim.max_readouts >= lim->max_readouts && exc_qwen35_healthy(kept.e)) {
    *ret = kept.e;
    return exc_qwen35_set_numerics(kept.e, lim->numerics);
  }
  s1_forward_cuda_release();
  struct exc_qwen35 *e = NULL;
  int r = exc_qwen35_new(cfg, dir->weights, device, lim, &e, diag);
  if (r)
    return r;
  if (!(kept.path = strdup(dir->path))) {
    exc_qwen35_free(e);
    return -ENOMEM;
  }
  kept.e = e;
  kept.device = device;
  kept.lim = *lim;
  *ret = e;
  return 0;
}

int s1_forward_cuda(const struct cm_model_dir *dir, const struct ex_qwen35_config *cfg, int device,
                    const struct s1_forward_job *job, float *ret_hidden, float *ret_logits,
                    struct cm_diag *diag) {
  if (dir->adapter)
    return cm_diag_set(diag, -CM_EUNSUPPORTED,
                       "device cuda: a kept (unmerged) LoRA adapter is not supported yet; "
                       "export with --lora merge");
  struct exc_qwen35_limits lim;
  exc_qwen35_limits_default(&lim);
  lim.max_tokens = job->n > 64 ? job->n : 64;
  lim.max_ctx = lim.max_tokens;
  lim.max_seqs = 1;
  lim.n_snapshots = 2;
  lim.max_readouts = job->n_read > 1 ? job->n_read : 1;
  lim.numerics = job->fp32_residual ? EXC_NUMERICS_FP32_RESIDUAL : EXC_NUMERICS_REF_BF16;
  /* One forward (no --repeat): the per-bucket GEMM algorithm choice (about 1-3 s at start-up,
   * cuda_gemm.h) would cost more than it saves, and its algorithms give bit-identical rows anyway;
   * an explicit S1_GEMM_SELECT still decides. */
  if (job->repeat <= 0)
    setenv("S1_GEMM_SELECT", "0", 0);
  struct exc_qwen35 *e = NULL;
  struct exc_qwen35_state *st = NULL, *cont = NULL;
  int r = engine_for(dir, cfg, device, &lim, &e, diag);
  if (r)
    return r;
  double ready_ms = now_ms() - job->t0_ms;
  size_t p = job->prefix_len, h = (size_t)cfg->hidden_size, v = (size_t)cfg->vocab_size;
  if (job->layer_in) { /* layer mode */
    for (size_t k = 0; k < job->n_layers && !r; k++)
      r = exc_qwen35_layer_forward(e, job->layers[k], job->layer_in + k * job->n * h, job->pos,
                                   job->n, job->ret_layer_out + k * job->n * h, diag);
    return r;
  }
  if ((r = exc_qwen35_state_acquire(e, &st)) || (r = exc_qwen35_state_acquire(e, &cont)))
    goto out;
  if (!p) {
    struct exc_qwen35_seq seq = {.state = st, .advance = true, .n = job->n, .pos = job->pos};
    r = exc_qwen35_forward_residual(e, &seq, 1, job->tokens, job->image_rows, job->n_image_rows,
                                    job->readout, job->n_read, ret_hidden, ret_logits,
                                    job->ret_residual, diag);
  } else {
    /* prefix into st, clone into cont, continue cont with the rest; readouts of prefix rows come
     * from the first launch, the others from the continuation */
    int32_t *pp = malloc(3 * p * sizeof(int32_t)), *pc = malloc(3 * (job->n - p) * sizeof(int32_t));
    size_t *ra = malloc((job->n_read + 1) * sizeof(size_t)),
           *rb = malloc((job->n_read + 1) * sizeof(size_t));
    size_t *ia = malloc((job->n_read + 1) * sizeof(size_t)),
           *ib = malloc((job->n_read + 1) * sizeof(size_t));
    float *hh = malloc((job->n_read + 1) * h * sizeof(float));
    float *ll = malloc((job->n_read + 1) * v * sizeof(float));
    if (!pp || !pc || !ra || !rb || !ia || !ib || !hh || !ll) {
      r = -ENOMEM;
    } else {
      size_t na = 0, nb = 0, img_a = 0;
      for (int a = 0; a < 3; a++) {
        memcpy(pp + a * p, job->pos + a * job->n, p * sizeof(int32_t));
        memcpy(pc + a * (job->n - p), job->pos + a * job->n + p, (job->n - p) * sizeof(int32_t));
      }
      for (size_t i = 0; i < p; i++)
        img_a += job->tokens[i] == cfg->image_token_id;
      for (size_t i = 0; i < job->n_read; i++) {
        if (job->readout[i] < p) {
          ra[na] = job->readout[i];
          ia[na++] = i;
        } else {
          rb[nb] = job->readout[i] - p;
          ib[nb++] = i;
        }
      }
      struct exc_qwen35_seq sa = {.state = st, .advance = true, .n = p, .pos = pp};
      r = exc_qwen35_forward(e, &sa, 1, job->tokens, job->image_rows ? job->image_rows : NULL,
                             job->image_rows ? img_a : 0, ra, na, hh, ll, diag);
      for (size_t i = 0; !r && i < na; i++) {
        memcpy(ret_hidden + ia[i] * h, hh + i * h, h * sizeof(float));
        memcpy(ret_logits + ia[i] * v, ll + i * v, v * sizeof(float));
      }
      if (!r && (r = exc_qwen35_state_clone(e, st, cont)))
        cm_diag_set(diag, r, "cuda engine: snapshot clone failed");
      struct exc_qwen35_seq sb = {.state = cont, .advance = true, .n = job->n - p, .pos = pc};
      if (!r)
        r = exc_qwen35_forward(
            e, &sb, 1, job->tokens + p, job->image_rows ? job->image_rows + img_a * h : NULL,
            job->image_rows ? job->n_image_rows - img_a : 0, rb, nb, hh, ll, diag);
      for (size_t i = 0; !r && i < nb; i++) {
        memcpy(ret_hidden + ib[i] * h, hh + i * h, h * sizeof(float));
        memcpy(ret_logits + ib[i] * v, ll + i * v, v * sizeof(float));
      }
    }
    free(pp), free(pc), free(ra), free(rb), free(ia), free(ib), free(hh), free(ll);
  }
  if (!r && job->repeat > 0)
    r = time_prefill(e, st, job, ready_ms, diag);
out:
  exc_qwen35_state_release(e, st);
  exc_qwen35_state_release(e, cont);
  return r;
}

int s1_forward_vision_cuda(const struct cm_model_dir *dir, int device, const float *pixels,
                           int64_t n_patches, const int32_t *grid_thw, int n_images,
                           bool round_bf16, float *ret_embeds, struct cm_diag *diag) {
  struct ex_vision_config cfg;
  struct ex_vision *host = NULL;
  struct exc_gemm *gemm = NULL;
  struct exc_vision *v = NULL;
  float *d_out = NULL;
  int64_t n_merged = 0;
  int segs = 0, r;
  for (int i = 0; i < n_images; i++)
    segs += grid_thw[3 * i];
  if ((r = s1_forward_vision_load(dir, &cfg, &host, diag)) ||
      (r = ex_vision_count(host, grid_thw, n_images, NULL, &n_merged, diag)))
    goto out;
  if ((r = EXC_CUDA(cudaSetDevice(device))) || (r = exc_gemm_new(32u << 20, &gemm))) {
    cm_diag_set(diag, r, "cuda:%d: device or cuBLASLt handle unavailable", device);
    goto out;
  }
  if ((r = exc_vision_new(&cfg, host, n_patches, segs, gemm, &v, diag)))
    goto out;
  v->round_bf16 = EXC_VISION_ROUND_BF16 && round_bf16; /* see cuda_vision.h */
  ex_vision_free(host);
  host = NULL;
  size_t n_out = (size_t)n_merged * (size_t)cfg.out_hidden_size;
  if ((r = EXC_CUDA(cudaMalloc((void **)&d_out, n_out * sizeof(float)))) ||
      (r = exc_vision_forward(v, 0, pixels, n_patches, grid_thw, n_images, d_out, diag)) ||
      (r = EXC_CUDA(
           cudaMemcpy(ret_embeds, d_out, n_out * sizeof(float), cudaMemcpyDeviceToHost)))) {
    cm_diag_set(diag, r, "cuda:%d: the vision tower failed (see stderr)", device);
    goto out;
  }
out:
  cudaFree(d_out);
  exc_vision_free(v);
  exc_gemm_free(gemm);
  ex_vision_free(host);
  return r;
}
