/* The CPU engine (ex_engine.h): the model code of ex_qwen35.h on host memory, the sequences of a
 * launch packed into one ex_qwen35_forward_packed call (bit-identical to one sequence at a time),
 * in either numerics: fp32 (nothing rounded; the float32 reference) or bf16 (the CPU emulation of
 * every rounding the bf16 reference makes). */
#include "ex_engine.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ex_lm_feats.h"
#include "ex_vision.h"
#include "proto.h"

struct cpu_engine {
  struct ex_engine base;         /* first: the runner's view */
  struct ex_qwen35_model *model; /* owned */
  struct ex_vision *vision;      /* owned, or NULL */
  float *emb;                    /* [cap, H] embedding scratch */
  float *hid;                    /* [cap, H] hidden rows of the last forward */
  size_t cap;                    /* rows of emb and hid */
  float *reads;                  /* [n_reads, H] readout rows of the last launch */
  size_t n_reads, reads_cap;     /* rows held / allocated */
  float *logits;                 /* [vocab] */
  struct ex_qwen35_seq *seqs;    /* [seqs_cap] the model's view of a launch */
  size_t seqs_cap;               /* entries allocated */
};

#define DEF_POOL_BYTES ((size_t)2 << 30) /* --snapshot-pool-bytes default on the CPU */

static int grow(struct cpu_engine *c, size_t n) {
  if (n <= c->cap)
    return 0;
  size_t h = (size_t)c->base.cfg.hidden_size;
  float *e = realloc(c->emb, n * h * sizeof(float));
  if (e)
    c->emb = e;
  float *d = realloc(c->hid, n * h * sizeof(float));
  if (d)
    c->hid = d;
  if (!e || !d)
    return -ENOMEM;
  c->cap = n;
  return 0;
}

static bool past(void *user) {
  return proto_now_us() > *(const int64_t *)user;
}

static int cpu_vision(struct ex_engine *e, const float *pixels, int64_t n_patches,
                      const int32_t *grid_thw, int64_t deadline_us, float *ret_rows,
                      struct cm_diag *diag) {
  struct cpu_engine *c = (struct cpu_engine *)e;
  struct ex_vision_trace stop = {.user = &deadline_us, .stop = past};
  return ex_vision_forward_trace(c->vision, pixels, n_patches, grid_thw, 1, ret_rows,
                                 deadline_us ? &stop : NULL, diag);
}

static int cpu_snap_new(struct ex_engine *e, void *parent, void **ret_snap, struct cm_diag *diag) {
  (void)diag;
  struct cpu_engine *c = (struct cpu_engine *)e;
  struct ex_qwen35_state *s = NULL;
  int r = parent ? ex_qwen35_state_clone(parent, c->model, &s) : ex_qwen35_state_new(c->model, &s);
  *ret_snap = s;
  return r;
}

static void cpu_snap_free(struct ex_engine *e, void *snap) {
  (void)e;
  ex_qwen35_state_free(snap);
}

/* Embeddings of n ids into emb; the image-token rows take image_rows in order (when given), the
 * count of rows used is added to *used. */
static int embed(struct cpu_engine *c, const int32_t *ids, uint32_t n, float *emb,
                 const float *image_rows, size_t n_image_rows, size_t *used, struct cm_diag *diag) {
  int r = ex_qwen35_embed(c->model, ids, n, emb, diag);
  if (r || !image_rows)
    return r;
  size_t h = (size_t)c->base.cfg.hidden_size;
  for (uint32_t t = 0; t < n; t++) {
    if (ids[t] != c->base.cfg.image_token_id)
      continue;
    if (*used == n_image_rows)
      return cm_diag_set(diag, -CM_EPROGRAM, "more image slots than image rows");
    memcpy(emb + (size_t)t * h, image_rows + (*used)++ * h, h * sizeof(float));
  }
  return 0;
}

static int cpu_forward(struct ex_engine *e, const struct ex_engine_seq *seqs, size_t n_seqs,
                       const float *image_rows, size_t n_image_rows, const size_t *readout,
                       size_t n_read, float *ret_hidden, struct cm_diag *diag) {
  struct cpu_engine *c = (struct cpu_engine *)e;
  size_t h = (size_t)c->base.cfg.hidden_size, total = 0, used = 0;
  c->n_reads = 0;
  for (size_t i = 0; i < n_seqs; i++)
    total += seqs[i].n;
  if (!n_seqs || n_seqs > e->lim.max_seqs || total > e->lim.max_tokens ||
      n_read > e->lim.max_readouts)
    return cm_diag_set(diag, n_seqs ? -CM_ELIMIT : -EINVAL,
                       "cpu engine: launch of %zu sequences, %zu tokens, %zu readouts over the "
                       "limits (%zu, %zu, %zu)", n_seqs, total, n_read, e->lim.max_seqs,
                       e->lim.max_tokens, e->lim.max_readouts);
  for (size_t j = 0; j < n_read; j++)
    if (readout[j] >= total)
      return cm_diag_set(diag, -EINVAL, "readout row %zu outside the launch", readout[j]);
  if (n_seqs > c->seqs_cap) {
    struct ex_qwen35_seq *q = realloc(c->seqs, n_seqs * sizeof(*q));
    if (!q)
      return -ENOMEM;
    c->seqs = q;
    c->seqs_cap = n_seqs;
  }
  if (n_read > c->reads_cap) {
    float *p = realloc(c->reads, n_read * h * sizeof(float));
    if (!p)
      return -ENOMEM;
    c->reads = p;
    c->reads_cap = n_read;
  }
  int r = grow(c, total);
  for (size_t i = 0, at = 0; !r && i < n_seqs; at += seqs[i].n, i++) {
    c->seqs[i] = (struct ex_qwen35_seq){.state = seqs[i].snap, .advance = seqs[i].advance,
                                        .chunked = seqs[i].chunked, .n = seqs[i].n,
                                        .pos = seqs[i].pos};
    r = embed(c, seqs[i].ids, seqs[i].n, c->emb + at * h, image_rows, n_image_rows, &used, diag);
  }
  if (!r && used != n_image_rows)
    r = cm_diag_set(diag, -CM_EPROGRAM, "%zu image rows for %zu image slots", n_image_rows, used);
  if (!r)
    r = ex_qwen35_forward_packed(c->model, c->seqs, n_seqs, c->emb, c->hid, diag);
  if (r)
    return r;
  for (size_t j = 0; j < n_read; j++)
    memcpy(c->reads + j * h, c->hid + readout[j] * h, h * sizeof(float));
  c->n_reads = n_read;
  if (n_read)
    memcpy(ret_hidden, c->reads, n_read * h * sizeof(float));
  return 0;
}

static size_t cpu_snap_bytes(const struct ex_engine *e, size_t n_tokens) {
  const struct ex_qwen35_config *c = &e->cfg;
  size_t attn = 0, gdn = 0;
  size_t cd = (size_t)(2 * c->lin_k_heads * c->lin_dk + c->lin_v_heads * c->lin_dv);
  for (int i = 0; i < c->n_layers; i++) {
    if (c->full_attn[i])
      attn += 2 * n_tokens * (size_t)c->n_kv_heads * (size_t)c->head_dim;
    else
      gdn += (size_t)(c->conv_kernel - 1) * cd +
             (size_t)c->lin_v_heads * (size_t)c->lin_dk * (size_t)c->lin_dv;
  }
  return (attn + gdn) * sizeof(float);
}

static int cpu_label_logits(struct ex_engine *e, size_t read, const int32_t *ids, size_t n_ids,
                            float *ret, struct cm_diag *diag) {
  struct cpu_engine *c = (struct cpu_engine *)e;
  if (read >= c->n_reads)
    return cm_diag_set(diag, -EINVAL, "readout %zu not in the last launch", read);
  ex_qwen35_logits(c->model, c->reads + read * (size_t)c->base.cfg.hidden_size, 1, c->logits);
  for (size_t j = 0; j < n_ids; j++)
    ret[j] = c->logits[ids[j]];
  return 0;
}

static int cpu_token_logprobs(struct ex_engine *e, size_t read, const int32_t *ids, size_t n_ids,
                              float *ret, struct cm_diag *diag) {
  struct cpu_engine *c = (struct cpu_engine *)e;
  if (read >= c->n_reads)
    return cm_diag_set(diag, -EINVAL, "readout %zu not in the last launch", read);
  const float *logits = c->logits;
  ex_qwen35_logits(c->model, c->reads + read * (size_t)c->base.cfg.hidden_size, 1, c->logits);
  double mx = -INFINITY, sum = 0.0;
  for (int v = 0; v < c->base.cfg.vocab_size; v++)
    mx = logits[v] > mx ? logits[v] : mx;
  for (int v = 0; v < c->base.cfg.vocab_size; v++)
    sum += exp((double)logits[v] - mx);
  double lse = mx + log(sum);
  for (size_t j = 0; j < n_ids; j++)
    ret[j] = (float)((double)logits[ids[j]] - lse);
  return 0;
}

static int cpu_target_logprobs(struct ex_engine *e, const size_t *reads, const int32_t *targets,
                               size_t n, float *ret, struct cm_diag *diag) {
  struct cpu_engine *c = (struct cpu_engine *)e;
  size_t h = (size_t)c->base.cfg.hidden_size;
  float *g = malloc((n + 1) * h * sizeof(float));
  if (!g)
    return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    if (reads[i] >= c->n_reads) {
      free(g);
      return cm_diag_set(diag, -EINVAL, "readout %zu not in the last launch", reads[i]);
    }
    memcpy(g + i * h, c->reads + reads[i] * h, h * sizeof(float));
  }
  int r = ex_lm_target_logprobs(c->model->be, c->model->lm_head, (size_t)c->base.cfg.vocab_size, h,
                                g, targets, n, c->model->round_bf16, ret);
  free(g);
  return r;
}

static bool cpu_healthy(const struct ex_engine *e) {
  (void)e;
  return true;
}

static void cpu_free(struct ex_engine *e) {
  struct cpu_engine *c = (struct cpu_engine *)e;
  if (!c)
    return;
  ex_vision_free(c->vision);
  ex_qwen35_model_free(c->model);
  free(c->emb), free(c->hid), free(c->reads), free(c->logits), free(c->seqs);
  free(c);
}

static const struct ex_engine_ops cpu_ops = {
    .name = "cpu",
    .vision = cpu_vision,
    .snap_new = cpu_snap_new,
    .snap_free = cpu_snap_free,
    .forward = cpu_forward,
    .snap_bytes = cpu_snap_bytes,
    .label_logits = cpu_label_logits,
    .token_logprobs = cpu_token_logprobs,
    .target_logprobs = cpu_target_logprobs,
    .healthy = cpu_healthy,
    .free = cpu_free,
};

int ex_engine_device(const char *device) {
  if (!device || strcmp(device, "cpu") == 0)
    return -1;
  if (strcmp(device, "cuda") == 0)
    return 0;
  if (strncmp(device, "cuda:", 5) != 0 || device[5] < '0' || device[5] > '9')
    return -2;
  char *end = NULL;
  long n = strtol(device + 5, &end, 10);
  return *end || n > 1024 ? -2 : (int)n;
}

int ex_engine_adapter_scale(const struct cm_model_dir *dir, float *ret_scale,
                            struct cm_diag *diag) {
  *ret_scale = 0.0f;
  if (!dir->adapter)
    return 0;
  json_object *sc = NULL;
  if (!dir->adapter_info || !json_object_object_get_ex(dir->adapter_info, "scale", &sc))
    return cm_diag_set(diag, -CM_EFORMAT, "%s: manifest adapter has no scale", dir->path);
  *ret_scale = (float)json_object_get_double(sc);
  return 0;
}

int ex_engine_cpu_new(const struct cm_model_dir *dir, const struct ex_engine_options *opt,
                      struct ex_engine **ret_engine, struct cm_diag *diag) {
  struct cpu_engine *c = calloc(1, sizeof(*c));
  if (!c)
    return -ENOMEM;
  c->base.ops = &cpu_ops;
  /* packing changes no value (ex_qwen35_forward_packed); the options narrow a launch as the CUDA
   * engine's limits do (tests use that to exercise the launch splitting) */
  c->base.lim = (struct ex_engine_limits){
      .max_tokens = opt && opt->max_tokens ? opt->max_tokens : SIZE_MAX,
      .max_seqs = opt && opt->max_seqs ? opt->max_seqs : 64,
      .max_readouts = opt && opt->max_readouts ? opt->max_readouts : SIZE_MAX,
      .max_ctx = SIZE_MAX,
      .pool_bytes = opt && opt->pool_bytes ? opt->pool_bytes : DEF_POOL_BYTES};
  float scale = 0.0f;
  int r = ex_qwen35_config_parse(dir->config, &c->base.cfg, diag);
  if (!r)
    r = ex_engine_adapter_scale(dir, &scale, diag);
  if (!r)
    r = ex_qwen35_model_load(&c->base.cfg, dir->weights, dir->adapter, scale, &c->model, diag);
  if (r)
    goto fail;
  c->base.numerics = opt ? opt->numerics : CM_NUMERICS_FP32;
  c->model->round_bf16 = c->base.numerics == CM_NUMERICS_BF16;
  if (c->model->round_bf16) /* A_log / dt_bias stored in F32: the bf16 model holds them rounded */
    ex_qwen35_round_wide_params(c->model);
  /* the release's float32 embedding rows: kept in fp32, rounded in bf16 (cm_model_dir.h) */
  if (dir->n_f32_rows &&
      (r = ex_qwen35_set_embed_rows(c->model, dir->f32_row_ids, &dir->f32_rows, dir->n_f32_rows,
                                    c->model->round_bf16, diag)))
    goto fail;
  if (dir->vision) {
    json_object *vc = NULL;
    struct ex_vision_config vcfg;
    if (!json_object_object_get_ex(dir->config, "vision_config", &vc)) {
      r = cm_diag_set(diag, -CM_EMISSING, "%s: config has no vision_config", dir->path);
      goto fail;
    }
    if ((r = ex_vision_config_parse(vc, &vcfg, diag)) ||
        (r = ex_vision_new(&vcfg, dir->weights, NULL, &c->vision, diag)))
      goto fail;
    c->vision->round_bf16 = c->model->round_bf16;
    c->base.has_vision = true;
  }
  if (!(c->logits = malloc((size_t)c->base.cfg.vocab_size * sizeof(float)))) {
    r = -ENOMEM;
    goto fail;
  }
  *ret_engine = &c->base;
  return 0;
fail:
  cpu_free(&c->base);
  return r;
}
