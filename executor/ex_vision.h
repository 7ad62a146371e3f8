/* The Qwen3.5 vision tower and 2×2 merger, float32 CPU reference (spec/qwen3_5.md §6): patch
 * embedding, bilinearly resampled learned position embedding, 2-D rotary, `depth` pre-norm blocks
 * with per-image (per-frame) attention, LayerNorm + spatial-merge shuffle + MLP merger. Its output
 * rows replace the `<|image_pad|>` embeddings in order. It equals transformers 5.17 in float32
 * (tests/vision/); with round_bf16 it rounds to bf16 at every step where transformers' bf16 run
 * does (spec §6.1-6.6). Left out: deepstack (Qwen3.5 has none), the image processor
 * (preprocessor/image). */
#ifndef S1_EX_VISION_H
#define S1_EX_VISION_H

#include <stdbool.h>
#include <stdint.h>

#include "cm_error.h"
#include "cm_safetensors.h"
#include "ex_backend.h" /* enum ex_gelu_kind */

struct json_object;

/* Hard limits checked before any work (every size here can come from a client's image). */
#define EX_VISION_MAX_IMAGES 256            /* grid_thw entries per call */
#define EX_VISION_MAX_FRAME_PATCHES 65536   /* h·w per frame: 4096² px at patch 16 (processor max) */
#define EX_VISION_MAX_PATCHES (1 << 18)     /* Σ t·h·w per call */

/* Sizes of the tower, from the Hugging Face `vision_config` object. */
struct ex_vision_config {
  int depth;                   /* number of blocks */
  int hidden_size;             /* V */
  int num_heads;               /* attention heads */
  int head_dim;                /* V / num_heads, a multiple of 4 */
  int intermediate_size;       /* F, block MLP width */
  int out_hidden_size;         /* O, merger output width (= text hidden size) */
  int in_channels;             /* 3 */
  int patch_size;              /* 16 (pixels per patch side) */
  int temporal_patch_size;     /* 2 (frames per patch) */
  int spatial_merge_size;      /* m = 2: m×m patches become one output row */
  int patch_dim;               /* in_channels·temporal_patch_size·patch_size² (1536) */
  int num_position_embeddings; /* side², rows of pos_embed */
  int pos_side;                /* side of the learned position grid (48 real, 4 tiny-A) */
  enum ex_gelu_kind block_act; /* hidden_act of the block MLP (the merger is always exact erf) */
  float rope_theta;            /* vision rotary base, 10000 */
  float norm_eps;              /* LayerNorm eps, 1e-6 (fixed in transformers, not in the config) */
};

/* Parses a `vision_config` JSON object with the one config reader, cm_qwen35_vision_read
 * (common/cm_qwen35.h: the keys, defaults and refusals are listed there), into the tower's types;
 * norm_eps is 1e-6 (fixed in transformers). Returns 0 or cm_qwen35_vision_read's error; `diag`
 * names the key. *ret_cfg is written only on success. Source: configuration_qwen3_5.py (5.17). */
int ex_vision_config_parse(struct json_object *obj, struct ex_vision_config *ret_cfg,
                           struct cm_diag *diag);

/* One block's weights, float32 copies (nn.Linear layout [out, in]). */
struct ex_vision_block {
  const float *norm1_w, *norm1_b; /* [V] LayerNorm before attention */
  const float *qkv_w;             /* [3V, V]: rows q (all heads) | k | v, head-major */
  const float *qkv_b;             /* [3V] */
  const float *proj_w;            /* [V, V] attention output projection */
  const float *proj_b;            /* [V] */
  const float *norm2_w, *norm2_b; /* [V] LayerNorm before the MLP */
  const float *fc1_w;             /* [F, V] */
  const float *fc1_b;             /* [F] */
  const float *fc2_w;             /* [V, F] */
  const float *fc2_b;             /* [V] */
};

/* A loaded vision tower. Immutable after ex_vision_new (and the owner's choice of round_bf16, made
 * before the first forward): concurrent forwards are safe. */
struct ex_vision {
  struct ex_vision_config cfg;    /* sizes */
  const float *patch_w;           /* [V, patch_dim], Conv3d weight in C order (c, t, y, x) */
  const float *patch_b;           /* [V] */
  const float *pos_embed;         /* [side·side, V], row-major grid (row·side + col) */
  struct ex_vision_block *blocks; /* [depth], heap */
  const float *merger_norm_w;     /* [V] LayerNorm before the m×m shuffle */
  const float *merger_norm_b;     /* [V] */
  const float *merger_fc1_w;      /* [m²V, m²V] */
  const float *merger_fc1_b;      /* [m²V] */
  const float *merger_fc2_w;      /* [O, m²V] */
  const float *merger_fc2_b;      /* [O] */
  float *arena;                   /* heap block holding every weight above */
  bool round_bf16;                /* round as the bf16 reference (spec §6); false: float32 */
};

/* Loads the tower's 9 + 12·depth tensors named `prefix` + key (prefix NULL: "model.visual."),
 * converting BF16/F16/F32 to float32 exactly, and checks the tensor count under the prefix and
 * every shape against `cfg`.
 * Ownership: *ret_v is heap-owned by the caller (ex_vision_free); it keeps no reference to `st`.
 * Returns: 0; -CM_EMISSING (a tensor is absent), -CM_ESHAPE (wrong rank or size), -CM_EFORMAT (an
 * unexpected tensor under the prefix), -ENOMEM. `diag` names the tensor. */
int ex_vision_new(const struct ex_vision_config *cfg, const struct cm_safetensors *st,
                  const char *prefix, struct ex_vision **ret_v, struct cm_diag *diag);

/* Frees a tower; accepts NULL. */
void ex_vision_free(struct ex_vision *v);

/* Validates grid_thw and counts its patches and merged output rows.
 * Shapes: grid_thw [n_images][3] int32 (t, h, w in patches; t = temporal patches, 1 for an image).
 * Returns: 0; -EINVAL (NULL grid or n_images < 1); -CM_ELIMIT (n_images > EX_VISION_MAX_IMAGES,
 * h·w > EX_VISION_MAX_FRAME_PATCHES, total > EX_VISION_MAX_PATCHES); -CM_ESHAPE (t, h or w < 1, h or
 * w not a multiple of spatial_merge_size). `diag` names the image. Outputs written on success. */
int ex_vision_count(const struct ex_vision *v, const int32_t *grid_thw, int n_images,
                    int64_t *ret_n_patches, int64_t *ret_n_merged, struct cm_diag *diag);

/* Observer of intermediate results (tests, debugging, CUDA twin tests). stage 0: after the patch
 * and position embedding; stage i + 1: after block i. x [rows, cols] is valid during the call.
 * stop, when set, is asked before every block and the merger: true ends the forward with
 * -CM_ETIMEOUT (the executor drops an image whose request's deadline passed mid-tower). */
struct ex_vision_trace {
  void (*fn)(void *user, int stage, const float *x, int64_t rows, int cols); /* the observer */
  void *user;                                                                /* passed back */
  bool (*stop)(void *user); /* or NULL */
};

/* Runs the tower and merger over packed images: the rows of image i follow those of image i − 1,
 * and no image (no frame of a video) attends to another.
 * Shapes: pixel_values [n_patches, patch_dim] float32, rows in the processor's m×m block order
 *         (spec §7.5), n_patches = Σ t·h·w; grid_thw [n_images][3] int32;
 *         ret_embeds [n_patches / m², out_hidden_size] float32, rows in input order.
 * Units: pixels normalised as the processor does ((u8 − 127.5) / 127.5).
 * Ownership: caller's host buffers; scratch of about n_patches·(6V + F + 2·head_dim + 8) +
 * n_merged·(m²V + O) floats (plus n_patches·patch_dim with round_bf16) is malloc'd and freed
 * inside the call. ret_embeds written on success.
 * Returns: 0; the errors of ex_vision_count; -CM_ESHAPE (n_patches disagrees with grid_thw);
 * -EINVAL (NULL argument); -ENOMEM. `diag` says which.
 * Source: Qwen3_5VisionModel.forward (transformers 5.17, float32 eager; with v->round_bf16 the
 * bf16 run with sdpa, spec §6); CUDA twin: exc_vision_forward (cuda/cuda_vision.h). */
int ex_vision_forward(const struct ex_vision *v, const float *pixel_values, int64_t n_patches,
                      const int32_t *grid_thw, int n_images, float *ret_embeds,
                      struct cm_diag *diag);

/* ex_vision_forward with an observer (trace may be NULL). Returns also -CM_ETIMEOUT when
 * trace->stop said so. */
int ex_vision_forward_trace(const struct ex_vision *v, const float *pixel_values,
                            int64_t n_patches, const int32_t *grid_thw, int n_images,
                            float *ret_embeds, const struct ex_vision_trace *trace,
                            struct cm_diag *diag);

#endif
