/* Qwen3.5 vision tower, float32 CPU reference (see ex_vision.h): config parsing, the checked
 * weight loader and the forward. The ops live in cpu/vision_*.c and cpu/cpu_matmul.c; this file
 * holds the geometry (block-order positions, interpolation taps, cu_seqlens) and the layer loop,
 * in float32 or, with round_bf16, rounding to bf16 at every step where the bf16 reference does. */
#include "ex_vision.h"

#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_qwen35.h"
#include "cpu/cpu_act.h"
#include "cpu/cpu_matmul.h"
#include "cpu/vision_attention.h"
#include "cpu/vision_gelu.h"
#include "cpu/vision_layer_norm.h"
#include "cpu/vision_pos_interp.h"
#include "cpu/vision_rotary.h"

/* ---------- config ---------- */

/* The tower's view of a vision_config object: read by the one config reader,
 * cm_qwen35_vision_read (common/cm_qwen35.h), copied here with the forward's types. */
int ex_vision_config_parse(struct json_object *obj, struct ex_vision_config *ret_cfg,
                           struct cm_diag *diag) {
  struct cm_qwen35_dims d = {0};
  int r = cm_qwen35_vision_read(obj, &d, diag);
  if (r)
    return r;
  struct ex_vision_config c = {0};
  /* every value is within int: cm_qwen35_vision_read bounds each key */
  c.depth = (int)d.v_depth;
  c.hidden_size = (int)d.v_hidden;
  c.num_heads = (int)d.v_num_heads;
  c.head_dim = (int)d.v_head_dim;
  c.intermediate_size = (int)d.v_intermediate;
  c.out_hidden_size = (int)d.v_out_hidden;
  c.in_channels = (int)d.v_in_channels;
  c.patch_size = (int)d.v_patch;
  c.temporal_patch_size = (int)d.v_temporal;
  c.spatial_merge_size = (int)d.v_merge;
  c.patch_dim = (int)d.v_patch_dim;
  c.num_position_embeddings = (int)d.v_n_pos;
  c.pos_side = (int)d.v_pos_side;
  c.block_act = d.v_gelu_erf ? EX_GELU_ERF : EX_GELU_TANH;
  c.rope_theta = (float)d.v_rope_theta;
  c.norm_eps = 1e-6f;
  *ret_cfg = c;
  return 0;
}

/* ---------- weights ---------- */

struct wentry {
  char *name;         /* full key, heap */
  const float **slot; /* where the converted pointer goes */
  int n_dims;         /* expected rank */
  int64_t shape[5];   /* expected sizes */
  struct cm_tensor_view view;
};

static int add_entry(struct wentry *e, size_t *n, const char *prefix, const char *key,
                     const float **slot, int n_dims, int64_t d0, int64_t d1, int64_t d2,
                     int64_t d3, int64_t d4) {
  size_t len = strlen(prefix) + strlen(key) + 1;
  struct wentry *w = &e[*n];
  w->name = malloc(len);
  if (!w->name)
    return -ENOMEM;
  snprintf(w->name, len, "%s%s", prefix, key);
  w->slot = slot;
  w->n_dims = n_dims;
  int64_t d[5] = {d0, d1, d2, d3, d4};
  memcpy(w->shape, d, sizeof d);
  (*n)++;
  return 0;
}

static void shape_str(char *buf, size_t cap, int n_dims, const int64_t *shape) {
  size_t o = 0;
  o += (size_t)snprintf(buf + o, cap - o, "[");
  for (int i = 0; i < n_dims && o < cap; i++)
    o += (size_t)snprintf(buf + o, cap - o, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (o < cap)
    snprintf(buf + o, cap - o, "]");
}

void ex_vision_free(struct ex_vision *v) {
  if (!v)
    return;
  free(v->blocks);
  free(v->arena);
  free(v);
}

int ex_vision_new(const struct ex_vision_config *cfg, const struct cm_safetensors *st,
                  const char *prefix, struct ex_vision **ret_v, struct cm_diag *diag) {
  if (!cfg || !st || !ret_v)
    return cm_diag_set(diag, -EINVAL, "ex_vision_new: NULL argument");
  if (!prefix)
    prefix = "model.visual.";
  int64_t V = cfg->hidden_size, F = cfg->intermediate_size, O = cfg->out_hidden_size;
  int64_t M = (int64_t)cfg->spatial_merge_size * cfg->spatial_merge_size * V;
  size_t n_expected = 9 + 12 * (size_t)cfg->depth, n = 0;
  struct wentry *e = calloc(n_expected, sizeof *e);
  struct ex_vision *v = calloc(1, sizeof *v);
  int r = -ENOMEM;
  if (!e || !v)
    goto fail;
  v->cfg = *cfg;
  v->blocks = calloc(cfg->depth ? (size_t)cfg->depth : 1, sizeof *v->blocks);
  if (!v->blocks)
    goto fail;
  if ((r = add_entry(e, &n, prefix, "patch_embed.proj.weight", &v->patch_w, 5, V,
                     cfg->in_channels, cfg->temporal_patch_size, cfg->patch_size,
                     cfg->patch_size)) ||
      (r = add_entry(e, &n, prefix, "patch_embed.proj.bias", &v->patch_b, 1, V, 0, 0, 0, 0)) ||
      (r = add_entry(e, &n, prefix, "pos_embed.weight", &v->pos_embed, 2,
                     cfg->num_position_embeddings, V, 0, 0, 0)))
    goto fail;
  for (int b = 0; b < cfg->depth; b++) {
    struct ex_vision_block *bl = &v->blocks[b];
    struct {
      const char *key;
      const float **slot;
      int n_dims;
      int64_t d0, d1;
    } bk[12] = {
        {"norm1.weight", &bl->norm1_w, 1, V, 0},
        {"norm1.bias", &bl->norm1_b, 1, V, 0},
        {"norm2.weight", &bl->norm2_w, 1, V, 0},
        {"norm2.bias", &bl->norm2_b, 1, V, 0},
        {"attn.qkv.weight", &bl->qkv_w, 2, 3 * V, V},
        {"attn.qkv.bias", &bl->qkv_b, 1, 3 * V, 0},
        {"attn.proj.weight", &bl->proj_w, 2, V, V},
        {"attn.proj.bias", &bl->proj_b, 1, V, 0},
        {"mlp.linear_fc1.weight", &bl->fc1_w, 2, F, V},
        {"mlp.linear_fc1.bias", &bl->fc1_b, 1, F, 0},
        {"mlp.linear_fc2.weight", &bl->fc2_w, 2, V, F},
        {"mlp.linear_fc2.bias", &bl->fc2_b, 1, V, 0},
    };
    for (int k = 0; k < 12; k++) {
      char key[96];
      snprintf(key, sizeof key, "blocks.%d.%s", b, bk[k].key);
      if ((r = add_entry(e, &n, prefix, key, bk[k].slot, bk[k].n_dims, bk[k].d0, bk[k].d1, 0, 0,
                         0)))
        goto fail;
    }
  }
  if ((r = add_entry(e, &n, prefix, "merger.norm.weight", &v->merger_norm_w, 1, V, 0, 0, 0, 0)) ||
      (r = add_entry(e, &n, prefix, "merger.norm.bias", &v->merger_norm_b, 1, V, 0, 0, 0, 0)) ||
      (r = add_entry(e, &n, prefix, "merger.linear_fc1.weight", &v->merger_fc1_w, 2, M, M, 0, 0,
                     0)) ||
      (r = add_entry(e, &n, prefix, "merger.linear_fc1.bias", &v->merger_fc1_b, 1, M, 0, 0, 0,
                     0)) ||
      (r = add_entry(e, &n, prefix, "merger.linear_fc2.weight", &v->merger_fc2_w, 2, O, M, 0, 0,
                     0)) ||
      (r = add_entry(e, &n, prefix, "merger.linear_fc2.bias", &v->merger_fc2_b, 1, O, 0, 0, 0,
                     0)))
    goto fail;

  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    struct wentry *w = &e[i];
    if (cm_safetensors_find(st, w->name, &w->view) != 0) {
      r = cm_diag_set(diag, -CM_EMISSING, "vision weights: missing tensor %s", w->name);
      goto fail;
    }
    bool ok = w->view.n_dims == w->n_dims;
    for (int d = 0; ok && d < w->n_dims; d++)
      ok = w->view.shape[d] == w->shape[d];
    if (!ok) {
      char got[160], want[160];
      shape_str(got, sizeof got, w->view.n_dims, w->view.shape);
      shape_str(want, sizeof want, w->n_dims, w->shape);
      r = cm_diag_set(diag, -CM_ESHAPE, "vision weights: tensor %s has shape %s, the config needs %s",
                      w->name, got, want);
      goto fail;
    }
    total += (size_t)w->view.n_elems;
  }
  /* Every expected tensor is present; any further one under the prefix is unexpected. */
  size_t plen = strlen(prefix), n_under = 0, n_all = cm_safetensors_count(st);
  const char *extra = NULL;
  for (size_t i = 0; i < n_all; i++) {
    struct cm_tensor_view tv;
    if (cm_safetensors_at(st, i, &tv) != 0 || strncmp(tv.name, prefix, plen) != 0)
      continue;
    n_under++;
    bool known = false;
    for (size_t j = 0; j < n && !known; j++)
      known = strcmp(e[j].name, tv.name) == 0;
    if (!known && !extra)
      extra = tv.name;
  }
  if (extra || n_under != n) {
    r = cm_diag_set(diag, -CM_EFORMAT, "vision weights: %zu tensors under \"%s\", expected %zu "
                    "(3 + 12 x depth %d + 6)%s%s", n_under, prefix, n, cfg->depth,
                    extra ? "; unexpected: " : "", extra ? extra : "");
    goto fail;
  }
  v->arena = malloc(total ? total * sizeof(float) : 1);
  if (!v->arena) {
    r = cm_diag_set(diag, -ENOMEM, "vision weights: cannot allocate %zu floats", total);
    goto fail;
  }
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    float *dst = v->arena + off;
    if ((r = cm_tensor_to_f32(&e[i].view, dst))) {
      cm_diag_set(diag, r, "vision weights: cannot convert tensor %s", e[i].name);
      goto fail;
    }
    *e[i].slot = dst;
    off += (size_t)e[i].view.n_elems;
  }
  for (size_t i = 0; i < n; i++)
    free(e[i].name);
  free(e);
  *ret_v = v;
  return 0;
fail:
  if (r == -ENOMEM)
    cm_diag_set(diag, r, "ex_vision_new: out of memory");
  if (e)
    for (size_t i = 0; i < n; i++)
      free(e[i].name);
  free(e);
  ex_vision_free(v);
  return r;
}

/* ---------- forward ---------- */

int ex_vision_count(const struct ex_vision *v, const int32_t *grid_thw, int n_images,
                    int64_t *ret_n_patches, int64_t *ret_n_merged, struct cm_diag *diag) {
  if (!v || !grid_thw)
    return cm_diag_set(diag, -EINVAL, "vision: NULL tower or grid_thw");
  if (n_images < 1)
    return cm_diag_set(diag, -EINVAL, "vision: n_images %d, need at least 1", n_images);
  if (n_images > EX_VISION_MAX_IMAGES)
    return cm_diag_set(diag, -CM_ELIMIT, "vision: %d images in one call, the limit is %d",
                       n_images, EX_VISION_MAX_IMAGES);
  int m = v->cfg.spatial_merge_size;
  int64_t total = 0;
  for (int i = 0; i < n_images; i++) {
    int32_t t = grid_thw[3 * i], h = grid_thw[3 * i + 1], w = grid_thw[3 * i + 2];
    if (t < 1 || h < 1 || w < 1)
      return cm_diag_set(diag, -CM_ESHAPE, "vision: image %d has grid_thw (%d, %d, %d); each must "
                         "be >= 1", i, t, h, w);
    if (h % m != 0 || w % m != 0)
      return cm_diag_set(diag, -CM_ESHAPE, "vision: image %d has grid_thw (%d, %d, %d); h and w "
                         "must be multiples of spatial_merge_size %d", i, t, h, w, m);
    if ((int64_t)h * w > EX_VISION_MAX_FRAME_PATCHES)
      return cm_diag_set(diag, -CM_ELIMIT, "vision: image %d has %lld patches per frame, the "
                         "limit is %d", i, (long long)h * w, EX_VISION_MAX_FRAME_PATCHES);
    total += (int64_t)t * h * w;
    if (total > EX_VISION_MAX_PATCHES)
      return cm_diag_set(diag, -CM_ELIMIT, "vision: more than %d patches in one call (at image "
                         "%d)", EX_VISION_MAX_PATCHES, i);
  }
  if (ret_n_patches)
    *ret_n_patches = total;
  if (ret_n_merged)
    *ret_n_merged = total / ((int64_t)m * m);
  return 0;
}

/* Scratch of one forward call, one allocation each (n patches, nm merged rows, S segments). */
struct scratch {
  float *x;       /* [n, V] residual stream */
  float *a;       /* [n, V] norm output / projection output */
  float *qkv;     /* [n, 3V] q | k | v, rotated in place */
  float *o;       /* [n, V] attention output */
  float *f;       /* [n, F] block MLP hidden */
  float *cos_t;   /* [n, head_dim] rotary cos */
  float *sin_t;   /* [n, head_dim] rotary sin */
  float *wts;     /* [n, 4] position interpolation weights */
  float *scores;  /* [longest segment] attention row */
  float *mrg;     /* [nm, m²V] merger hidden */
  float *out;     /* [nm, O] result, copied to ret_embeds on success */
  float *pix;     /* [n, patch_dim] R(pixel_values), bf16 mode only */
  int32_t *pos;   /* [n, 2] (row, col) of each patch */
  int32_t *taps;  /* [n, 4] position table rows */
  int32_t *cu;    /* [S + 1] cu_seqlens, one segment per frame */
};

static void scratch_free(struct scratch *s) {
  float *fl[] = {s->x, s->a, s->qkv, s->o, s->f, s->cos_t, s->sin_t, s->wts, s->scores, s->mrg,
                 s->out, s->pix};
  for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++)
    free(fl[i]);
  free(s->pos);
  free(s->taps);
  free(s->cu);
}

/* The residual add: x += y, or x = R(x + y) in bf16 mode (spec §6.5). */
static void add_inplace(float *x, const float *y, size_t n, bool bf16) {
  for (size_t i = 0; i < n; i++)
    x[i] = bf16 ? ex_cpu_bf16(x[i] + y[i]) : x[i] + y[i];
}

/* y = x·Wᵀ + b (nn.Linear), rounded once in bf16 mode: R(x·Wᵀ + b) of spec §6.2, 6.5, 6.6. */
static void linear(const float *x, const float *w, const float *b, float *y, size_t n, size_t k,
                   size_t m, bool bf16) {
  ex_cpu_linear(x, w, b, y, n, k, m);
  if (bf16)
    ex_cpu_round_bf16(y, n * m);
}

int ex_vision_forward_trace(const struct ex_vision *v, const float *pixel_values,
                            int64_t n_patches, const int32_t *grid_thw, int n_images,
                            float *ret_embeds, const struct ex_vision_trace *trace,
                            struct cm_diag *diag) {
  int64_t n64, nm64;
  int r = ex_vision_count(v, grid_thw, n_images, &n64, &nm64, diag);
  if (r)
    return r;
  if (!pixel_values || !ret_embeds)
    return cm_diag_set(diag, -EINVAL, "vision: NULL pixel_values or ret_embeds");
  if (n64 != n_patches)
    return cm_diag_set(diag, -CM_ESHAPE, "vision: pixel_values has %lld rows but grid_thw "
                       "describes %lld patches", (long long)n_patches, (long long)n64);
  const struct ex_vision_config *c = &v->cfg;
  size_t n = (size_t)n64, nm = (size_t)nm64, V = (size_t)c->hidden_size;
  size_t F = (size_t)c->intermediate_size, hd = (size_t)c->head_dim, O = (size_t)c->out_hidden_size;
  size_t m = (size_t)c->spatial_merge_size, MV = m * m * V;
  size_t n_segs = 0, max_seg = 1;
  for (int i = 0; i < n_images; i++) {
    n_segs += (size_t)grid_thw[3 * i];
    size_t hw = (size_t)grid_thw[3 * i + 1] * (size_t)grid_thw[3 * i + 2];
    if (hw > max_seg)
      max_seg = hw;
  }

  struct scratch s = {0};
  s.x = malloc(n * V * sizeof(float));
  s.a = malloc(n * V * sizeof(float));
  s.qkv = malloc(n * 3 * V * sizeof(float));
  s.o = malloc(n * V * sizeof(float));
  s.f = malloc(n * F * sizeof(float));
  s.cos_t = malloc(n * hd * sizeof(float));
  s.sin_t = malloc(n * hd * sizeof(float));
  s.wts = malloc(n * 4 * sizeof(float));
  s.scores = malloc(max_seg * sizeof(float));
  s.mrg = malloc(nm * MV * sizeof(float));
  s.out = malloc(nm * O * sizeof(float));
  s.pos = malloc(n * 2 * sizeof(int32_t));
  s.taps = malloc(n * 4 * sizeof(int32_t));
  s.cu = malloc((n_segs + 1) * sizeof(int32_t));
  float *inv_freq = malloc(hd / 4 * sizeof(float) + 1);
  if (!s.x || !s.a || !s.qkv || !s.o || !s.f || !s.cos_t || !s.sin_t || !s.wts || !s.scores ||
      !s.mrg || !s.out || !s.pos || !s.taps || !s.cu || !inv_freq) {
    r = cm_diag_set(diag, -ENOMEM, "vision: cannot allocate scratch for %zu patches", n);
    goto out;
  }

  /* Geometry: (row, col) of every row in m×m block order, its position taps, the segments. */
  size_t row_i = 0, seg_i = 0;
  s.cu[0] = 0;
  for (int i = 0; i < n_images; i++) {
    int t = grid_thw[3 * i], h = grid_thw[3 * i + 1], w = grid_thw[3 * i + 2];
    int mi = (int)m, bw = w / mi;
    for (int f = 0; f < t; f++) {
      for (int k = 0; k < h * w; k++, row_i++) {
        int in_col = k % mi, in_row = (k / mi) % mi;
        int blk_col = (k / (mi * mi)) % bw, blk_row = k / (mi * mi * bw);
        int row = blk_row * mi + in_row, col = blk_col * mi + in_col;
        s.pos[2 * row_i] = row;
        s.pos[2 * row_i + 1] = col;
        ex_vision_pos_interp_taps(row, col, h, w, c->pos_side, s.taps + 4 * row_i,
                                  s.wts + 4 * row_i);
      }
      s.cu[seg_i + 1] = s.cu[seg_i] + h * w;
      seg_i++;
    }
  }

  /* Patch embedding (Conv3d with stride = kernel is one dot product per row) + positions. In bf16
   * mode every step below rounds where the bf16 reference does (spec §6.1-6.6). */
  bool bf16 = v->round_bf16;
  const float *pix = pixel_values;
  if (bf16) {
    size_t n_pix = n * (size_t)c->patch_dim;
    if (!(s.pix = malloc(n_pix * sizeof(float)))) {
      r = cm_diag_set(diag, -ENOMEM, "vision: cannot allocate scratch for %zu patches", n);
      goto out;
    }
    memcpy(s.pix, pixel_values, n_pix * sizeof(float));
    ex_cpu_round_bf16(s.pix, n_pix); /* x = R(pixel) */
    pix = s.pix;
  }
  linear(pix, v->patch_w, v->patch_b, s.x, n, (size_t)c->patch_dim, V, bf16);
  if (bf16)
    ex_cpu_vision_pos_embed_add_bf16(v->pos_embed, s.taps, s.wts, s.x, n, V);
  else
    ex_cpu_vision_pos_embed_add(v->pos_embed, s.taps, s.wts, s.x, n, V);
  if (trace && trace->fn)
    trace->fn(trace->user, 0, s.x, (int64_t)n, (int)V);
  ex_vision_rotary_inv_freq(c->head_dim, c->rope_theta, inv_freq);
  ex_cpu_vision_rotary_tables(s.pos, n, inv_freq, c->head_dim, s.cos_t, s.sin_t);
  float scale = (float)pow((double)hd, -0.5);
  void (*layer_norm)(const float *, const float *, const float *, float *, size_t, size_t,
                     float) = bf16 ? ex_cpu_layer_norm_bf16 : ex_cpu_layer_norm;
  void (*rotary)(float *, size_t, size_t, int, int, const float *, const float *) =
      bf16 ? ex_cpu_vision_rotary_apply_bf16 : ex_cpu_vision_rotary_apply;
  void (*attention)(const float *, size_t, int, int, const int32_t *, int, float, float *,
                    float *) = bf16 ? ex_cpu_vision_attention_bf16 : ex_cpu_vision_attention;
  void (*gelu)(const float *, float *, size_t, enum ex_gelu_kind) =
      bf16 ? ex_cpu_gelu_bf16 : ex_cpu_gelu;

  for (int b = 0; b <= c->depth; b++) {
    if (trace && trace->stop && trace->stop(trace->user)) {
      r = cm_diag_set(diag, -CM_ETIMEOUT, "vision: stopped after %d of %d blocks", b, c->depth);
      goto out;
    }
    if (b == c->depth)
      break;
    const struct ex_vision_block *bl = &v->blocks[b];
    layer_norm(s.x, bl->norm1_w, bl->norm1_b, s.a, n, V, c->norm_eps);
    linear(s.a, bl->qkv_w, bl->qkv_b, s.qkv, n, V, 3 * V, bf16);
    rotary(s.qkv, n, 3 * V, c->num_heads, c->head_dim, s.cos_t, s.sin_t);
    rotary(s.qkv + V, n, 3 * V, c->num_heads, c->head_dim, s.cos_t, s.sin_t);
    attention(s.qkv, n, c->num_heads, c->head_dim, s.cu, (int)n_segs, scale, s.o, s.scores);
    linear(s.o, bl->proj_w, bl->proj_b, s.a, n, V, V, bf16);
    add_inplace(s.x, s.a, n * V, bf16);
    layer_norm(s.x, bl->norm2_w, bl->norm2_b, s.a, n, V, c->norm_eps);
    linear(s.a, bl->fc1_w, bl->fc1_b, s.f, n, V, F, bf16);
    gelu(s.f, s.f, n * F, c->block_act);
    linear(s.f, bl->fc2_w, bl->fc2_b, s.a, n, F, V, bf16);
    add_inplace(s.x, s.a, n * V, bf16);
    if (trace && trace->fn)
      trace->fn(trace->user, b + 1, s.x, (int64_t)n, (int)V);
  }

  /* Merger: LayerNorm over V, then m² consecutive rows (one m×m block) form one row of m²V. */
  layer_norm(s.x, v->merger_norm_w, v->merger_norm_b, s.a, n, V, c->norm_eps);
  linear(s.a, v->merger_fc1_w, v->merger_fc1_b, s.mrg, nm, MV, MV, bf16);
  gelu(s.mrg, s.mrg, nm * MV, EX_GELU_ERF);
  linear(s.mrg, v->merger_fc2_w, v->merger_fc2_b, s.out, nm, MV, O, bf16);
  memcpy(ret_embeds, s.out, nm * O * sizeof(float));
  r = 0;
out:
  free(inv_freq);
  scratch_free(&s);
  return r;
}

int ex_vision_forward(const struct ex_vision *v, const float *pixel_values, int64_t n_patches,
                      const int32_t *grid_thw, int n_images, float *ret_embeds,
                      struct cm_diag *diag) {
  return ex_vision_forward_trace(v, pixel_values, n_patches, grid_thw, n_images, ret_embeds, NULL,
                                 diag);
}
