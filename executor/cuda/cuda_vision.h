/* The Qwen3.5 vision tower and 2×2 merger on CUDA (spec/qwen3_5.md §6): weights bf16 on the device,
 * fp32 activations between ops, GEMMs through cuda_gemm (bf16 in, fp32 out), the ops of
 * cuda_vision_ops.h between them; with round_bf16 (the ref-bf16 numerics) every op rounds where the
 * transformers bf16 run does (spec §6), otherwise the residual stream stays fp32. All device
 * memory (weights and scratch for a documented maximum patch count) is reserved by exc_vision_new;
 * a forward allocates nothing. Its output rows replace the `<|image_pad|>` embeddings in order.
 * Twin: ex_vision.c (float32 CPU), compared in tests/cuda/test_vision_tower.c. Left out:
 * video-specific batching (frames are segments like images). */
#ifndef S1_EX_CUDA_VISION_H
#define S1_EX_CUDA_VISION_H

#include <stdbool.h>
#include <stdint.h>

#include "cm_error.h"
#include "cuda_gemm.h"
#include "cuda_vision_ops.h"
#include "ex_vision.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One block's weights on the device (nn.Linear layout [out, in]), bf16. */
struct exc_vision_block {
  const __nv_bfloat16 *norm1_w, *norm1_b; /* [V] */
  const __nv_bfloat16 *qkv_w;             /* [3V, V] */
  const __nv_bfloat16 *qkv_b;             /* [3V] */
  const __nv_bfloat16 *proj_w;            /* [V, V] */
  const __nv_bfloat16 *proj_b;            /* [V] */
  const __nv_bfloat16 *norm2_w, *norm2_b; /* [V] */
  const __nv_bfloat16 *fc1_w;             /* [F, V] */
  const __nv_bfloat16 *fc1_b;             /* [F] */
  const __nv_bfloat16 *fc2_w;             /* [V, F] */
  const __nv_bfloat16 *fc2_b;             /* [V] */
};

/* A tower on one device, with its scratch. Not thread-safe: one forward at a time (one stream). */
/* Whether the engine's ref-bf16 numerics turn on round_bf16 in the tower (s1-forward --device
 * cuda and s1-executor): off. The rounded kernels match the CPU twin's bf16 forms bit for bit
 * (tests/cuda/test_vision_ops), and on the CPU they bring the tiny image prompt nearer transformers
 * bf16 on the CPU (1.66e-2 → 1.38e-2), but on the H200 (2026-11-30, notes/gpu-runs/) they moved it
 * away from transformers bf16 on CUDA: 1.75e-2 without, 4.30e-2 with. Which CUDA step of the
 * reference differs (its sdpa path for these head sizes, its GELU) is not found yet. */
#define EXC_VISION_ROUND_BF16 false

struct exc_vision {
  struct ex_vision_config cfg;     /* sizes */
  int64_t max_patches;             /* patches of one pass (scratch rows); larger calls run in passes */
  int max_segs;                    /* segments (frames) of one pass */
  __nv_bfloat16 *weights;          /* device arena holding every weight below */
  size_t n_weights;                /* its element count */
  const __nv_bfloat16 *patch_w;    /* [V, patch_dim] */
  const __nv_bfloat16 *patch_b;    /* [V] */
  const __nv_bfloat16 *pos_embed;  /* [side², V] */
  struct exc_vision_block *blocks; /* [depth], host array of device pointers */
  const __nv_bfloat16 *merger_norm_w, *merger_norm_b; /* [V] */
  const __nv_bfloat16 *merger_fc1_w; /* [m²V, m²V] */
  const __nv_bfloat16 *merger_fc1_b; /* [m²V] */
  const __nv_bfloat16 *merger_fc2_w; /* [O, m²V] */
  const __nv_bfloat16 *merger_fc2_b; /* [O] */
  float *inv_freq;                 /* [head_dim/4] device, rotary frequencies */
  void *scratch;                   /* device block holding the scratch below */
  float *pix;                      /* [P, patch_dim] fp32 pixels of one pass */
  __nv_bfloat16 *pix_bf16;         /* [P, patch_dim] their bf16 cast (shares f's memory) */
  float *x;                        /* [P, V] residual stream */
  float *y;                        /* [P, max(3V, F)] fp32 GEMM outputs */
  __nv_bfloat16 *a;                /* [P, V] norm output / attention output (GEMM inputs) */
  __nv_bfloat16 *qkv;              /* [P, 3V] rotated q | k | v */
  __nv_bfloat16 *f;                /* [P, max(F, patch_dim, V)] MLP / merger hidden (GEMM input) */
  float *cos_t, *sin_t;            /* [P, head_dim] rotary tables */
  void *geo;                       /* device copy of the host geometry below */
  void *geo_host;                  /* pinned host: pos [P,2] | taps [P,4] | wts [P,4] | tiles */
  size_t geo_bytes;                /* size of geo and geo_host */
  cudaEvent_t geo_done;            /* recorded after the geometry upload (host buffer reusable) */
  int32_t *cu_host;                /* [max_segs + 1] host heap, cu_seqlens of one pass */
  struct exc_gemm *gemm;           /* cuBLASLt handle (borrowed, not freed here) */
  bool round_bf16;                 /* ref-bf16: round as the bf16 reference (set before forwards) */
};

/* Uploads a loaded float32 tower as bf16 (exact for BF16 checkpoints: ex_vision_new converted
 * them exactly) and reserves scratch for passes of up to max_patches patches and max_segs frames.
 * host may be NULL: the arena is then left unwritten (benchmarks fill v->weights themselves).
 * Sizes: max_patches a multiple of m² within 1 .. EX_VISION_MAX_PATCHES, at least one frame of the
 * largest image the caller will send (≤ EX_VISION_MAX_FRAME_PATCHES); max_segs 1 .. 65536. Device
 * bytes ≈ weights·2 + max_patches·(4·(patch_dim + V + max(3V, F) + 2·hd + 10) + 2·(4V +
 * max(F, patch_dim, V))): the 4B shape needs about 41 KB per patch, 0.75 GiB weights.
 * Ownership: *ret_v is the caller's (exc_vision_free); `gemm` is borrowed and must outlive it;
 * `host` may be freed after return. Returns 0; -EINVAL (NULL cfg/gemm, sizes); -CM_EUNSUPPORTED
 * (head_dim not a multiple of 8 or > 128, a width not a multiple of 8, V > 8192); -ENOMEM;
 * -CM_ECUDA. `diag` names the cause. */
int exc_vision_new(const struct ex_vision_config *cfg, const struct ex_vision *host,
                   int64_t max_patches, int max_segs, struct exc_gemm *gemm,
                   struct exc_vision **ret_v, struct cm_diag *diag);

/* Frees the device memory and the handle; accepts NULL and a half-built tower. Synchronises. */
void exc_vision_free(struct exc_vision *v);

/* Runs the tower and merger over packed images (each frame its own attention segment), in passes
 * of whole images of at most max_patches patches and max_segs frames.
 * Shapes: pixel_values [n_patches, patch_dim] fp32 HOST memory, rows in the processor's m×m block
 *         order; grid_thw [n_images][3] host int32; ret_embeds [n_patches / m², O] fp32 DEVICE.
 * Units: pixels normalised as the processor does. Ownership: caller's buffers; work is enqueued on
 * `stream` and the function returns without waiting for it (it waits only for the previous pass's
 * geometry upload); ret_embeds is ready when the stream is. pixel_values must stay valid until then.
 * Returns: 0; the errors of ex_vision_count; -CM_ESHAPE (n_patches disagrees with grid_thw);
 * -CM_ELIMIT (one image larger than max_patches or max_segs); -EINVAL; -CM_ECUDA.
 * Source: Qwen3_5VisionModel.forward (transformers 5.17, bf16 weights); twin ex_vision_forward
 * (with the same round_bf16). */
int exc_vision_forward(struct exc_vision *v, cudaStream_t stream, const float *pixel_values,
                       int64_t n_patches, const int32_t *grid_thw, int n_images,
                       float *ret_embeds, struct cm_diag *diag);

/* exc_vision_forward with the pixels already on the device (d_pixel_values [n_patches, patch_dim]
 * fp32 device memory); same rules otherwise. */
int exc_vision_forward_device(struct exc_vision *v, cudaStream_t stream,
                              const float *d_pixel_values, int64_t n_patches,
                              const int32_t *grid_thw, int n_images, float *ret_embeds,
                              struct cm_diag *diag);

#ifdef __cplusplus
}
#endif

#endif
