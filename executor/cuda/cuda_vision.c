/* The vision tower on CUDA (see cuda_vision.h): the bf16 upload of a loaded tower, the scratch
 * reservation, and the layer loop over cuda_gemm and the vision ops. The geometry (block-order
 * positions, interpolation taps, segments) is computed on the host with the CPU twin's helpers and
 * uploaded once per pass. Each GEMM's bias is added by the op that follows it; the residual add of
 * a block's MLP is fused into the next LayerNorm. */
#include "cuda_vision.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cm_safetensors.h"
#include "cuda_check.h"
#include "vision_pos_interp.h"
#include "vision_rotary.h"

static size_t round_up(size_t x, size_t a) {
  return (x + a - 1) / a * a;
}

static size_t max3(size_t a, size_t b, size_t c) {
  size_t m = a > b ? a : b;
  return m > c ? m : c;
}

void exc_vision_free(struct exc_vision *v) {
  if (!v)
    return;
  cudaDeviceSynchronize();
  cudaFree(v->weights);
  cudaFree(v->inv_freq);
  cudaFree(v->scratch);
  cudaFree(v->geo);
  cudaFreeHost(v->geo_host);
  if (v->geo_done)
    cudaEventDestroy(v->geo_done);
  free(v->blocks);
  free(v->cu_host);
  free(v);
}

/* Checks the sizes the kernels and the GEMM wrapper need. */
static int check_cfg(const struct ex_vision_config *c, struct cm_diag *diag) {
  size_t m2 = (size_t)c->spatial_merge_size * (size_t)c->spatial_merge_size;
  size_t widths[] = {(size_t)c->hidden_size, 3 * (size_t)c->hidden_size,
                     (size_t)c->intermediate_size, (size_t)c->patch_dim,
                     m2 * (size_t)c->hidden_size, (size_t)c->out_hidden_size};
  if (c->head_dim % 8 != 0 || c->head_dim > 128)
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "exc_vision: head_dim %d; the CUDA attention "
                       "needs a multiple of 8 up to 128", c->head_dim);
  if (c->hidden_size > 8192)
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "exc_vision: hidden_size %d > 8192",
                       c->hidden_size);
  for (size_t i = 0; i < sizeof widths / sizeof *widths; i++)
    if (widths[i] % EXC_GEMM_ALIGN_ELEMS != 0)
      return cm_diag_set(diag, -CM_EUNSUPPORTED, "exc_vision: GEMM width %zu is not a multiple of "
                         "%d", widths[i], EXC_GEMM_ALIGN_ELEMS);
  return 0;
}

/* Where each weight goes in the arena, in the order of the host tower's fields. */
struct wslot {
  const float *src;          /* host float32 tensor (NULL when no host tower) */
  const __nv_bfloat16 **dst; /* device pointer to set */
  size_t n;                  /* elements */
};

int exc_vision_new(const struct ex_vision_config *cfg, const struct ex_vision *host,
                   int64_t max_patches, int max_segs, struct exc_gemm *gemm,
                   struct exc_vision **ret_v, struct cm_diag *diag) {
  if (!cfg || !gemm || !ret_v)
    return cm_diag_set(diag, -EINVAL, "exc_vision_new: NULL argument");
  int m2 = cfg->spatial_merge_size * cfg->spatial_merge_size;
  if (max_patches < m2 || max_patches > EX_VISION_MAX_PATCHES || max_patches % m2 != 0 ||
      max_segs < 1 || max_segs > 65536)
    return cm_diag_set(diag, -EINVAL, "exc_vision_new: max_patches %lld (a multiple of %d up to "
                       "%d) or max_segs %d (1..65536) out of range", (long long)max_patches, m2,
                       EX_VISION_MAX_PATCHES, max_segs);
  int r = check_cfg(cfg, diag);
  if (r)
    return r;
  const size_t V = (size_t)cfg->hidden_size, F = (size_t)cfg->intermediate_size;
  const size_t O = (size_t)cfg->out_hidden_size, pd = (size_t)cfg->patch_dim;
  const size_t hd = (size_t)cfg->head_dim, MV = (size_t)m2 * V, P = (size_t)max_patches;
  const size_t depth = (size_t)cfg->depth;
  uint16_t *staging = NULL;
  struct wslot *ws = NULL;
  struct exc_vision *v = calloc(1, sizeof *v);
  if (!v)
    return cm_diag_set(diag, -ENOMEM, "exc_vision_new: out of memory");
  v->cfg = *cfg;
  v->max_patches = max_patches;
  v->max_segs = max_segs;
  v->gemm = gemm;
  v->blocks = calloc(depth ? depth : 1, sizeof *v->blocks);
  v->cu_host = malloc(((size_t)max_segs + 1) * sizeof *v->cu_host);
  size_t n_slots = 9 + 12 * depth, k = 0;
  ws = calloc(n_slots, sizeof *ws);
  if (!v->blocks || !v->cu_host || !ws) {
    r = cm_diag_set(diag, -ENOMEM, "exc_vision_new: out of memory");
    goto fail;
  }
#define SLOT(field, hsrc, count)                                                                   \
  ws[k++] = (struct wslot){host ? (hsrc) : NULL, &(field), (count)}
  SLOT(v->patch_w, host ? host->patch_w : NULL, V * pd);
  SLOT(v->patch_b, host ? host->patch_b : NULL, V);
  SLOT(v->pos_embed, host ? host->pos_embed : NULL, (size_t)cfg->num_position_embeddings * V);
  for (size_t b = 0; b < depth; b++) {
    struct exc_vision_block *d = &v->blocks[b];
    const struct ex_vision_block *h = host ? &host->blocks[b] : NULL;
    SLOT(d->norm1_w, h ? h->norm1_w : NULL, V);
    SLOT(d->norm1_b, h ? h->norm1_b : NULL, V);
    SLOT(d->qkv_w, h ? h->qkv_w : NULL, 3 * V * V);
    SLOT(d->qkv_b, h ? h->qkv_b : NULL, 3 * V);
    SLOT(d->proj_w, h ? h->proj_w : NULL, V * V);
    SLOT(d->proj_b, h ? h->proj_b : NULL, V);
    SLOT(d->norm2_w, h ? h->norm2_w : NULL, V);
    SLOT(d->norm2_b, h ? h->norm2_b : NULL, V);
    SLOT(d->fc1_w, h ? h->fc1_w : NULL, F * V);
    SLOT(d->fc1_b, h ? h->fc1_b : NULL, F);
    SLOT(d->fc2_w, h ? h->fc2_w : NULL, V * F);
    SLOT(d->fc2_b, h ? h->fc2_b : NULL, V);
  }
  SLOT(v->merger_norm_w, host ? host->merger_norm_w : NULL, V);
  SLOT(v->merger_norm_b, host ? host->merger_norm_b : NULL, V);
  SLOT(v->merger_fc1_w, host ? host->merger_fc1_w : NULL, MV * MV);
  SLOT(v->merger_fc1_b, host ? host->merger_fc1_b : NULL, MV);
  SLOT(v->merger_fc2_w, host ? host->merger_fc2_w : NULL, O * MV);
  SLOT(v->merger_fc2_b, host ? host->merger_fc2_b : NULL, O);
#undef SLOT
  /* Each tensor starts on a 16-byte boundary (GEMM operands need it). */
  size_t total = 0;
  for (size_t i = 0; i < k; i++)
    total += round_up(ws[i].n, 8);
  v->n_weights = total;
  if ((r = EXC_CUDA(cudaMalloc((void **)&v->weights, total * sizeof(uint16_t)))))
    goto fail_cuda;
  if (host) {
    staging = malloc(total * sizeof(uint16_t));
    if (!staging) {
      r = cm_diag_set(diag, -ENOMEM, "exc_vision_new: cannot stage %zu bf16 weights", total);
      goto fail;
    }
    memset(staging, 0, total * sizeof(uint16_t));
  }
  size_t off = 0;
  for (size_t i = 0; i < k; i++) {
    *ws[i].dst = v->weights + off;
    if (staging)
      for (size_t e = 0; e < ws[i].n; e++)
        staging[off + e] = cm_f32_to_bf16(ws[i].src[e]);
    off += round_up(ws[i].n, 8);
  }
  if (staging &&
      (r = EXC_CUDA(cudaMemcpy(v->weights, staging, total * sizeof(uint16_t),
                               cudaMemcpyHostToDevice))))
    goto fail_cuda;

  float inv[32];
  ex_vision_rotary_inv_freq(cfg->head_dim, cfg->rope_theta, inv);
  if ((r = EXC_CUDA(cudaMalloc((void **)&v->inv_freq, hd / 4 * sizeof(float)))) ||
      (r = EXC_CUDA(cudaMemcpy(v->inv_freq, inv, hd / 4 * sizeof(float),
                               cudaMemcpyHostToDevice))))
    goto fail_cuda;

  /* Scratch, one block: every piece a multiple of 16 bytes (P is a multiple of 4). */
  size_t fw = max3(F, pd, V), yw = 3 * V > F ? 3 * V : F;
  size_t sz_pix = P * pd * 4, sz_x = P * V * 4, sz_y = P * yw * 4, sz_a = P * V * 2;
  size_t sz_qkv = P * 3 * V * 2, sz_f = P * fw * 2, sz_cs = P * hd * 4;
  size_t bytes = sz_pix + sz_x + sz_y + sz_a + sz_qkv + sz_f + 2 * sz_cs;
  char *s;
  if ((r = EXC_CUDA(cudaMalloc(&v->scratch, bytes))))
    goto fail_cuda;
  s = v->scratch;
  v->pix = (float *)s, s += sz_pix;
  v->x = (float *)s, s += sz_x;
  v->y = (float *)s, s += sz_y;
  v->a = (__nv_bfloat16 *)s, s += sz_a;
  v->qkv = (__nv_bfloat16 *)s, s += sz_qkv;
  v->f = (__nv_bfloat16 *)s, s += sz_f;
  v->pix_bf16 = v->f;
  v->cos_t = (float *)s, s += sz_cs;
  v->sin_t = (float *)s;
  size_t max_tiles = P / EXC_VISION_ATTN_TILE + (size_t)max_segs + 1;
  v->geo_bytes = round_up(P * 40, 16) + max_tiles * sizeof(struct exc_vision_tile);
  if ((r = EXC_CUDA(cudaMalloc(&v->geo, v->geo_bytes))) ||
      (r = EXC_CUDA(cudaMallocHost(&v->geo_host, v->geo_bytes))) ||
      (r = EXC_CUDA(cudaEventCreateWithFlags(&v->geo_done, cudaEventDisableTiming))))
    goto fail_cuda;
  /* Choose every GEMM algorithm now, before the first request. */
  size_t shapes[][2] = {{pd, V}, {V, 3 * V}, {V, V}, {V, F}, {F, V}, {MV, MV}, {MV, O}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
    if ((r = exc_gemm_prepare(gemm, shapes[i][0], shapes[i][1], EXC_DTYPE_F32, false))) {
      cm_diag_set(diag, r, "exc_vision_new: no GEMM algorithm for k %zu, m %zu", shapes[i][0],
                  shapes[i][1]);
      goto fail;
    }
  free(staging);
  free(ws);
  *ret_v = v;
  return 0;
fail_cuda:
  cm_diag_set(diag, r, "exc_vision_new: a CUDA call failed (see stderr)");
fail:
  free(staging);
  free(ws);
  exc_vision_free(v);
  return r;
}

/* Host geometry of images [i0, i1): positions, taps, weights, cu_seqlens and attention tiles,
 * written to the pinned buffer; returns the bytes to upload and the tile count. */
static size_t build_geometry(struct exc_vision *v, const int32_t *grid, int i0, int i1,
                             int64_t n, int *ret_tiles, int *ret_segs) {
  const struct ex_vision_config *c = &v->cfg;
  char *g = v->geo_host;
  int32_t *pos = (int32_t *)g, *taps = (int32_t *)(g + n * 8);
  float *wts = (float *)(g + n * 24);
  size_t tiles_off = round_up((size_t)n * 40, 16);
  struct exc_vision_tile *tiles = (struct exc_vision_tile *)(g + tiles_off);
  int mi = c->spatial_merge_size, seg = 0;
  int64_t row_i = 0;
  v->cu_host[0] = 0;
  for (int i = i0; i < i1; i++) {
    int t = grid[3 * i], h = grid[3 * i + 1], w = grid[3 * i + 2], bw = w / mi;
    for (int f = 0; f < t; f++) {
      for (int kk = 0; kk < h * w; kk++, row_i++) {
        int in_col = kk % mi, in_row = (kk / mi) % mi;
        int blk_col = (kk / (mi * mi)) % bw, blk_row = kk / (mi * mi * bw);
        int row = blk_row * mi + in_row, col = blk_col * mi + in_col;
        pos[2 * row_i] = row;
        pos[2 * row_i + 1] = col;
        ex_vision_pos_interp_taps(row, col, h, w, c->pos_side, taps + 4 * row_i,
                                  wts + 4 * row_i);
      }
      v->cu_host[seg + 1] = v->cu_host[seg] + h * w;
      seg++;
    }
  }
  int cap = (int)((v->geo_bytes - tiles_off) / sizeof(struct exc_vision_tile));
  int nt = exc_vision_attention_tiles(v->cu_host, seg, tiles, cap);
  *ret_tiles = nt;
  *ret_segs = seg;
  return tiles_off + (size_t)(nt > 0 ? nt : 0) * sizeof(struct exc_vision_tile);
}

/* One pass over images [i0, i1) holding n patches; pixels on the device. */
static int run_pass(struct exc_vision *v, cudaStream_t st, const float *d_pix, const int32_t *grid,
                    int i0, int i1, int64_t n, float *out) {
  const struct ex_vision_config *c = &v->cfg;
  const size_t V = (size_t)c->hidden_size, F = (size_t)c->intermediate_size;
  const size_t pd = (size_t)c->patch_dim, O = (size_t)c->out_hidden_size;
  const size_t m2 = (size_t)c->spatial_merge_size * (size_t)c->spatial_merge_size;
  const size_t MV = m2 * V, nm = (size_t)n / m2, un = (size_t)n;
  const float eps = c->norm_eps;
  const bool rb = v->round_bf16; /* ref-bf16: round where the bf16 reference does (spec §6) */
  int r, n_tiles, n_segs;
  if ((r = EXC_CUDA(cudaEventSynchronize(v->geo_done))))
    return r;
  size_t geo_used = build_geometry(v, grid, i0, i1, n, &n_tiles, &n_segs);
  if (n_tiles < 0)
    return -EINVAL;
  char *g = v->geo;
  const int32_t *pos = (const int32_t *)g, *taps = (const int32_t *)(g + n * 8);
  const float *wts = (const float *)(g + n * 24);
  const struct exc_vision_tile *tiles =
      (const struct exc_vision_tile *)(g + round_up((size_t)n * 40, 16));
  if ((r = EXC_CUDA(cudaMemcpyAsync(v->geo, v->geo_host, geo_used, cudaMemcpyHostToDevice, st))) ||
      (r = EXC_CUDA(cudaEventRecord(v->geo_done, st))))
    return r;
  struct exc_gemm *gm = v->gemm;
  const float scale = (float)pow((double)c->head_dim, -0.5);

  /* Patch embedding (the Conv3d is one GEMM over R(pixels)) + bias + interpolated positions. */
  if ((r = exc_vision_to_bf16(st, d_pix, v->pix_bf16, n * (int64_t)pd)) ||
      (r = exc_gemm(gm, st, v->pix_bf16, pd, v->patch_w, v->x, V, EXC_DTYPE_F32, false, un, pd,
                    V)) ||
      (r = exc_vision_pos_embed_add(st, v->pos_embed, taps, wts, v->patch_b, v->x, n, (int)V,
                                    rb)) ||
      (r = exc_vision_rotary_tables(st, pos, n, v->inv_freq, c->head_dim, v->cos_t, v->sin_t)))
    return r;

  for (int b = 0; b < c->depth; b++) {
    const struct exc_vision_block *bl = &v->blocks[b];
    /* x += previous block's MLP output (+ bias), then norm1. */
    const float *res = b > 0 ? v->y : NULL;
    const __nv_bfloat16 *res_b = b > 0 ? v->blocks[b - 1].fc2_b : NULL;
    if ((r = exc_vision_add_layer_norm(st, v->x, res, res_b, bl->norm1_w, bl->norm1_b, v->a, n,
                                       (int)V, eps, rb)) ||
        (r = exc_gemm(gm, st, v->a, V, bl->qkv_w, v->y, 3 * V, EXC_DTYPE_F32, false, un, V,
                      3 * V)) ||
        (r = exc_vision_qkv_rotary(st, v->y, bl->qkv_b, v->cos_t, v->sin_t, v->qkv, n,
                                   c->num_heads, c->head_dim, rb)) ||
        (r = exc_vision_attention(st, v->qkv, tiles, n_tiles, c->num_heads, c->head_dim, scale,
                                  v->a)) ||
        (r = exc_gemm(gm, st, v->a, V, bl->proj_w, v->y, V, EXC_DTYPE_F32, false, un, V, V)) ||
        (r = exc_vision_add_layer_norm(st, v->x, v->y, bl->proj_b, bl->norm2_w, bl->norm2_b, v->a,
                                       n, (int)V, eps, rb)) ||
        (r = exc_gemm(gm, st, v->a, V, bl->fc1_w, v->y, F, EXC_DTYPE_F32, false, un, V, F)) ||
        (r = exc_vision_gelu(st, v->y, bl->fc1_b, v->f, n, (int)F, c->block_act, rb)) ||
        (r = exc_gemm(gm, st, v->f, F, bl->fc2_w, v->y, V, EXC_DTYPE_F32, false, un, F, V)))
      return r;
  }

  /* Merger: last residual add + LayerNorm over V; m² consecutive rows are one row of m²V. */
  const float *res = c->depth > 0 ? v->y : NULL;
  const __nv_bfloat16 *res_b = c->depth > 0 ? v->blocks[c->depth - 1].fc2_b : NULL;
  if ((r = exc_vision_add_layer_norm(st, v->x, res, res_b, v->merger_norm_w, v->merger_norm_b,
                                     v->a, n, (int)V, eps, rb)) ||
      (r = exc_gemm(gm, st, v->a, MV, v->merger_fc1_w, v->y, MV, EXC_DTYPE_F32, false, nm, MV,
                    MV)) ||
      (r = exc_vision_gelu(st, v->y, v->merger_fc1_b, v->f, (int64_t)nm, (int)MV, EX_GELU_ERF,
                           rb)) ||
      (r = exc_gemm(gm, st, v->f, MV, v->merger_fc2_w, out, O, EXC_DTYPE_F32, false, nm, MV, O)) ||
      (r = exc_vision_add_bias(st, out, v->merger_fc2_b, (int64_t)nm, (int)O, rb)))
    return r;
  return 0;
}

static int forward(struct exc_vision *v, cudaStream_t st, const float *pix, bool on_device,
                   int64_t n_patches, const int32_t *grid, int n_images, float *out,
                   struct cm_diag *diag) {
  if (!v)
    return cm_diag_set(diag, -EINVAL, "exc_vision: NULL tower");
  int64_t total, n_merged;
  /* ex_vision_count reads only the config of its tower argument. */
  struct ex_vision shape = {.cfg = v->cfg};
  int r = ex_vision_count(&shape, grid, n_images, &total, &n_merged, diag);
  if (r)
    return r;
  if (!pix || !out)
    return cm_diag_set(diag, -EINVAL, "exc_vision: NULL pixel_values or ret_embeds");
  if (total != n_patches)
    return cm_diag_set(diag, -CM_ESHAPE, "exc_vision: pixel_values has %lld rows but grid_thw "
                       "describes %lld patches", (long long)n_patches, (long long)total);
  const size_t pd = (size_t)v->cfg.patch_dim, O = (size_t)v->cfg.out_hidden_size;
  const int64_t m2 = (int64_t)v->cfg.spatial_merge_size * v->cfg.spatial_merge_size;
  int64_t row0 = 0;
  for (int i0 = 0; i0 < n_images;) {
    int64_t n = 0;
    int segs = 0, i1 = i0;
    while (i1 < n_images) {
      int64_t p = (int64_t)grid[3 * i1] * grid[3 * i1 + 1] * grid[3 * i1 + 2];
      if (n + p > v->max_patches || segs + grid[3 * i1] > v->max_segs)
        break;
      n += p;
      segs += grid[3 * i1];
      i1++;
    }
    if (i1 == i0)
      return cm_diag_set(diag, -CM_ELIMIT, "exc_vision: image %d has %lld patches in %d frames; "
                         "this tower was reserved for %lld patches and %d frames per pass", i0,
                         (long long)grid[3 * i0] * grid[3 * i0 + 1] * grid[3 * i0 + 2],
                         grid[3 * i0], (long long)v->max_patches, v->max_segs);
    const float *d_pix = pix + (size_t)row0 * pd;
    if (!on_device) {
      if ((r = EXC_CUDA(cudaMemcpyAsync(v->pix, d_pix, (size_t)n * pd * sizeof(float),
                                        cudaMemcpyHostToDevice, st))))
        return cm_diag_set(diag, r, "exc_vision: pixel upload failed");
      d_pix = v->pix;
    }
    if ((r = run_pass(v, st, d_pix, grid, i0, i1, n, out + (size_t)(row0 / m2) * O)))
      return cm_diag_set(diag, r, "exc_vision: a launch failed on images %d..%d (see stderr)", i0,
                         i1 - 1);
    row0 += n;
    i0 = i1;
  }
  return 0;
}

int exc_vision_forward(struct exc_vision *v, cudaStream_t stream, const float *pixel_values,
                       int64_t n_patches, const int32_t *grid_thw, int n_images,
                       float *ret_embeds, struct cm_diag *diag) {
  return forward(v, stream, pixel_values, false, n_patches, grid_thw, n_images, ret_embeds, diag);
}

int exc_vision_forward_device(struct exc_vision *v, cudaStream_t stream,
                              const float *d_pixel_values, int64_t n_patches,
                              const int32_t *grid_thw, int n_images, float *ret_embeds,
                              struct cm_diag *diag) {
  return forward(v, stream, d_pixel_values, true, n_patches, grid_thw, n_images, ret_embeds,
                 diag);
}
