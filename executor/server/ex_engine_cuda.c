/* The bf16 CUDA engine behind ex_engine.h: exc_qwen35 (snapshots from its pool, the prefix pieces
 * and rows of a launch packed into one exc_qwen35_forward, readouts and LM features of the last launch on the device) and
 * exc_vision for images. Every device buffer is reserved in ex_engine_cuda_new; a sticky CUDA
 * error makes healthy() false and every later call fail, so the executor retires. Heads run on
 * the host over the readout rows copied back. A kept LoRA adapter is loaded onto the engine
 * (exc_qwen35_set_lora) unless the options refuse it (s1-executor --cuda-lora off). */
#include "ex_engine.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "cuda_gemm.h"
#include "cuda_vision.h"
#include "exc_qwen35.h"

#define DEF_SNAPSHOTS 8
#define DEF_READOUTS 256
#define DEF_PATCHES 16384
#define VISION_SEGS 64 /* frames of one image */

struct cuda_engine {
  struct ex_engine base; /* first: the runner's view */
  struct exc_qwen35 *e;  /* text engine, owned */
  struct exc_qwen35_limits lim;
  struct exc_gemm *vgemm;      /* the tower's cuBLASLt handle, owned, or NULL */
  struct exc_vision *vision;   /* owned, or NULL */
  float *d_vis;                /* [max_patches/4, H] device, merged rows of one image */
  int64_t max_patches;         /* patches of one image */
  bool broken;                 /* a CUDA call of this file failed */
  int32_t *tokens;             /* [max_tokens] packed ids of one launch */
  struct exc_qwen35_seq *seqs; /* [max_seqs] */
  size_t *reads;               /* [max_readouts] packed rows of the last launch's readouts */
  size_t n_reads;              /* held */
  size_t *rows_tmp;            /* [max_readouts] */
  int32_t *ids_tmp;            /* [max_readouts] */
};

static bool cu_healthy(const struct ex_engine *be) {
  const struct cuda_engine *c = (const struct cuda_engine *)be;
  return !c->broken && exc_qwen35_healthy(c->e);
}

/* Any failure code other than the program's own limits marks the engine broken. */
static int fail_code(struct cuda_engine *c, int r) {
  if (r && r != -CM_ELIMIT && r != -CM_ESHAPE && r != -CM_EPROGRAM)
    c->broken = true;
  return r;
}

static int unhealthy(struct cuda_engine *c, struct cm_diag *diag) {
  return cu_healthy(&c->base) ? 0
                              : cm_diag_set(diag, -CM_ECUDA,
                                            "cuda engine: an earlier CUDA error "
                                            "left the device unusable");
}

static int cu_vision(struct ex_engine *be, const float *pixels, int64_t n_patches,
                     const int32_t *grid_thw, int64_t deadline_us, float *ret_rows,
                     struct cm_diag *diag) {
  (void)deadline_us; /* the tower's launches are queued at once and take milliseconds */
  struct cuda_engine *c = (struct cuda_engine *)be;
  int r = unhealthy(c, diag);
  if (r)
    return r;
  if (n_patches > c->max_patches)
    return cm_diag_set(diag, -CM_ELIMIT,
                       "image of %lld patches over the engine's %lld "
                       "(--max-patches)",
                       (long long)n_patches, (long long)c->max_patches);
  cudaStream_t s = exc_qwen35_stream(c->e);
  size_t n_out = (size_t)(n_patches / 4) * (size_t)be->cfg.hidden_size;
  r = exc_vision_forward(c->vision, s, pixels, n_patches, grid_thw, 1, c->d_vis, diag);
  if (!r)
    r = EXC_CUDA(
        cudaMemcpyAsync(ret_rows, c->d_vis, n_out * sizeof(float), cudaMemcpyDeviceToHost, s));
  if (!r)
    r = EXC_CUDA(cudaStreamSynchronize(s));
  if (r == -CM_ECUDA)
    cm_diag_set(diag, r, "cuda engine: the vision tower failed (see stderr)");
  return fail_code(c, r);
}

static int cu_snap_new(struct ex_engine *be, void *parent, void **ret_snap, struct cm_diag *diag) {
  struct cuda_engine *c = (struct cuda_engine *)be;
  struct exc_qwen35_state *s = NULL;
  *ret_snap = NULL;
  int r = unhealthy(c, diag);
  if (r)
    return r;
  if ((r = exc_qwen35_state_acquire(c->e, &s)))
    return cm_diag_set(diag, r, "cuda engine: snapshot pool of %zu exhausted (--snapshots)",
                       c->lim.n_snapshots);
  if (parent && (r = exc_qwen35_state_clone(c->e, parent, s))) {
    exc_qwen35_state_release(c->e, s);
    return fail_code(c, cm_diag_set(diag, r, "cuda engine: snapshot copy failed"));
  }
  *ret_snap = s;
  return 0;
}

static void cu_snap_free(struct ex_engine *be, void *snap) {
  struct cuda_engine *c = (struct cuda_engine *)be;
  exc_qwen35_state_release(c->e, snap);
}

static int cu_forward(struct ex_engine *be, const struct ex_engine_seq *seqs, size_t n_seqs,
                      const float *image_rows, size_t n_image_rows, const size_t *readout,
                      size_t n_read, float *ret_hidden, struct cm_diag *diag) {
  struct cuda_engine *c = (struct cuda_engine *)be;
  int r = unhealthy(c, diag);
  if (r)
    return r;
  c->n_reads = 0;
  size_t total = 0;
  for (size_t i = 0; i < n_seqs; i++)
    total += seqs[i].n;
  if (n_seqs > c->lim.max_seqs || total > c->lim.max_tokens || n_read > c->lim.max_readouts)
    return cm_diag_set(diag, -CM_ELIMIT,
                       "cuda engine: launch of %zu sequences, %zu tokens, %zu "
                       "readouts over the limits (%zu, %zu, %zu)",
                       n_seqs, total, n_read, c->lim.max_seqs, c->lim.max_tokens,
                       c->lim.max_readouts);
  size_t at = 0;
  for (size_t i = 0; i < n_seqs; i++) {
    memcpy(c->tokens + at, seqs[i].ids, seqs[i].n * sizeof(int32_t));
    at += seqs[i].n;
    /* the CUDA GDN always runs chunked from the start of each sequence: `chunked` holds */
    c->seqs[i] = (struct exc_qwen35_seq){.state = seqs[i].snap,
                                         .advance = seqs[i].advance,
                                         .n = seqs[i].n,
                                         .pos = seqs[i].pos};
  }
  r = exc_qwen35_forward(c->e, c->seqs, (int)n_seqs, c->tokens, image_rows,
                         image_rows ? n_image_rows : 0, readout, n_read, ret_hidden, NULL, diag);
  if (r)
    return fail_code(c, r);
  memcpy(c->reads, readout, n_read * sizeof(size_t));
  c->n_reads = n_read;
  return 0;
}

static size_t cu_snap_bytes(const struct ex_engine *be, size_t n_tokens) {
  (void)n_tokens;
  const struct cuda_engine *c = (const struct cuda_engine *)be;
  struct exc_qwen35_memory mem;
  exc_qwen35_memory(c->e, &mem);
  return mem.snapshot_bytes; /* one pool slot, whatever it holds */
}

static int check_read(struct cuda_engine *c, size_t read, struct cm_diag *diag) {
  int r = unhealthy(c, diag);
  if (!r && read >= c->n_reads)
    r = cm_diag_set(diag, -EINVAL, "readout %zu not in the last launch", read);
  return r;
}

static int cu_label_logits(struct ex_engine *be, size_t read, const int32_t *ids, size_t n_ids,
                           float *ret, struct cm_diag *diag) {
  struct cuda_engine *c = (struct cuda_engine *)be;
  int r = check_read(c, read, diag);
  for (size_t j = 0; !r && j < n_ids; j += c->lim.max_label_ids) {
    size_t m = n_ids - j < c->lim.max_label_ids ? n_ids - j : c->lim.max_label_ids;
    r = fail_code(c, exc_qwen35_label_logits(c->e, &c->reads[read], 1, ids + j, m, ret + j, diag));
  }
  return r;
}

static int cu_token_logprobs(struct ex_engine *be, size_t read, const int32_t *ids, size_t n_ids,
                             float *ret, struct cm_diag *diag) {
  struct cuda_engine *c = (struct cuda_engine *)be;
  int r = check_read(c, read, diag);
  for (size_t j = 0; !r && j < n_ids; j += c->lim.max_readouts) {
    size_t m = n_ids - j < c->lim.max_readouts ? n_ids - j : c->lim.max_readouts;
    for (size_t i = 0; i < m; i++)
      c->rows_tmp[i] = c->reads[read];
    r = fail_code(c, exc_qwen35_token_logprob(c->e, c->rows_tmp, ids + j, m, ret + j, diag));
  }
  return r;
}

static int cu_target_logprobs(struct ex_engine *be, const size_t *reads, const int32_t *targets,
                              size_t n, float *ret, struct cm_diag *diag) {
  struct cuda_engine *c = (struct cuda_engine *)be;
  int r = unhealthy(c, diag);
  for (size_t i = 0; !r && i < n; i++) {
    if (reads[i] >= c->n_reads)
      r = cm_diag_set(diag, -EINVAL, "readout %zu not in the last launch", reads[i]);
    else if (targets[i] < 0 || targets[i] >= be->cfg.vocab_size)
      r = -EINVAL;
  }
  for (size_t j = 0; !r && j < n; j += c->lim.max_readouts) {
    size_t m = n - j < c->lim.max_readouts ? n - j : c->lim.max_readouts;
    for (size_t i = 0; i < m; i++)
      c->rows_tmp[i] = c->reads[reads[j + i]];
    r = fail_code(c, exc_qwen35_token_logprob(c->e, c->rows_tmp, targets + j, m, ret + j, diag));
  }
  return r;
}

static void cu_free(struct ex_engine *be) {
  struct cuda_engine *c = (struct cuda_engine *)be;
  if (!c)
    return;
  exc_vision_free(c->vision);
  exc_gemm_free(c->vgemm);
  cudaFree(c->d_vis);
  exc_qwen35_free(c->e);
  free(c->tokens), free(c->seqs), free(c->reads), free(c->rows_tmp), free(c->ids_tmp);
  free(c);
}

static const struct ex_engine_ops cuda_ops = {
    .name = "cuda",
    .vision = cu_vision,
    .snap_new = cu_snap_new,
    .snap_free = cu_snap_free,
    .forward = cu_forward,
    .snap_bytes = cu_snap_bytes,
    .label_logits = cu_label_logits,
    .token_logprobs = cu_token_logprobs,
    .target_logprobs = cu_target_logprobs,
    .healthy = cu_healthy,
    .free = cu_free,
};

/* The vision tower: the float32 host tower uploaded as bf16, scratch for one image of
 * max_patches, the merged-row buffer. */
static int load_vision(struct cuda_engine *c, const struct cm_model_dir *dir, int device,
                       struct cm_diag *diag) {
  json_object *vc = NULL;
  struct ex_vision_config vcfg;
  struct ex_vision *host = NULL;
  if (!json_object_object_get_ex(dir->config, "vision_config", &vc))
    return cm_diag_set(diag, -CM_EMISSING, "%s: config has no vision_config", dir->path);
  int r = ex_vision_config_parse(vc, &vcfg, diag);
  if (!r)
    r = ex_vision_new(&vcfg, dir->weights, NULL, &host, diag);
  if (r)
    return r;
  if ((r = EXC_CUDA(cudaSetDevice(device))) || (r = exc_gemm_new(32u << 20, &c->vgemm)))
    r = cm_diag_set(diag, r, "cuda:%d: device or cuBLASLt handle unavailable", device);
  if (!r)
    r = exc_vision_new(&vcfg, host, c->max_patches, VISION_SEGS, c->vgemm, &c->vision, diag);
  if (!r) /* see EXC_VISION_ROUND_BF16 */
    c->vision->round_bf16 = EXC_VISION_ROUND_BF16 && c->lim.numerics == EXC_NUMERICS_REF_BF16;
  ex_vision_free(host);
  if (!r && (r = EXC_CUDA(cudaMalloc((void **)&c->d_vis, (size_t)(c->max_patches / 4) *
                                                             (size_t)c->base.cfg.hidden_size *
                                                             sizeof(float)))))
    r = cm_diag_set(diag, r, "cuda:%d: no device memory for the merged vision rows", device);
  return r;
}

int ex_engine_cuda_new(const struct cm_model_dir *dir, int device,
                       const struct ex_engine_options *opt, struct ex_engine **ret_engine,
                       struct cm_diag *diag) {
  static const struct ex_engine_options none = {0};
  if (!opt)
    opt = &none;
  if (opt != &none && opt->numerics != CM_NUMERICS_BF16)
    return cm_diag_set(diag, -CM_EUNSUPPORTED,
                       "the CUDA engine serves the bf16 numerics only (--numerics bf16); fp32 "
                       "runs with --device cpu");
  if (dir->adapter && opt->refuse_lora)
    return cm_diag_set(diag, -CM_EUNSUPPORTED,
                       "%s: a kept LoRA adapter and --cuda-lora off "
                       "(run with --device cpu)",
                       dir->path);
  struct cuda_engine *c = calloc(1, sizeof(*c));
  if (!c)
    return -ENOMEM;
  c->base.ops = &cuda_ops;
  c->base.numerics = CM_NUMERICS_BF16;
  exc_qwen35_limits_default(&c->lim); /* numerics EXC_NUMERICS_REF_BF16: the bf16 mode */
  c->lim.n_snapshots = DEF_SNAPSHOTS;
  c->lim.max_readouts = DEF_READOUTS;
  if (opt->max_tokens)
    c->lim.max_tokens = opt->max_tokens;
  if (opt->max_seqs)
    c->lim.max_seqs = opt->max_seqs;
  if (opt->max_ctx)
    c->lim.max_ctx = opt->max_ctx;
  if (opt->n_snapshots)
    c->lim.n_snapshots = opt->n_snapshots;
  if (opt->max_readouts)
    c->lim.max_readouts = opt->max_readouts;
  c->max_patches = opt->max_patches ? opt->max_patches : DEF_PATCHES;
  c->base.lim = (struct ex_engine_limits){.max_tokens = c->lim.max_tokens,
                                          .max_seqs = c->lim.max_seqs,
                                          .max_readouts = c->lim.max_readouts,
                                          .max_ctx = c->lim.max_ctx};
  int r = ex_qwen35_config_parse(dir->config, &c->base.cfg, diag);
  if (r)
    goto fail;
  if (c->max_patches < 4 || c->max_patches % 4 || c->max_patches > EX_VISION_MAX_PATCHES) {
    r = cm_diag_set(diag, -EINVAL, "--max-patches %lld: a multiple of 4 within 4 .. %d",
                    (long long)c->max_patches, EX_VISION_MAX_PATCHES);
    goto fail;
  }
  c->tokens = malloc(c->lim.max_tokens * sizeof(*c->tokens));
  c->seqs = calloc(c->lim.max_seqs, sizeof(*c->seqs));
  c->reads = malloc(c->lim.max_readouts * sizeof(*c->reads));
  c->rows_tmp = malloc(c->lim.max_readouts * sizeof(*c->rows_tmp));
  c->ids_tmp = malloc(c->lim.max_readouts * sizeof(*c->ids_tmp));
  if (!c->tokens || !c->seqs || !c->reads || !c->rows_tmp || !c->ids_tmp) {
    r = -ENOMEM;
    goto fail;
  }
  if ((r = exc_qwen35_new(&c->base.cfg, dir->weights, device, &c->lim, &c->e, diag)))
    goto fail;
  /* the scheduler's snapshot pool: the engine's slots, counted in bytes */
  c->base.lim.pool_bytes = c->lim.n_snapshots * cu_snap_bytes(&c->base, 0);
  if (dir->adapter) {
    float scale = 0.0f;
    if ((r = ex_engine_adapter_scale(dir, &scale, diag)) ||
        (r = exc_qwen35_set_lora(c->e, dir->adapter, scale, diag)))
      goto fail;
  }
  if (dir->vision) {
    if ((r = load_vision(c, dir, device, diag)))
      goto fail;
    c->base.has_vision = true;
  }
  *ret_engine = &c->base;
  return 0;
fail:
  cu_free(&c->base);
  return r;
}
