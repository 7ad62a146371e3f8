/* The image step of s1-forward: merged vision-tower embeddings (ex_vision.h) for pixel inputs,
 * kept apart from the text path of the tool. */
#ifndef S1_FORWARD_IMAGES_H
#define S1_FORWARD_IMAGES_H

#include <stdbool.h>
#include <stdint.h>

#include "cm_model_dir.h"
#include "ex_vision.h"

/* The model directory's vision tower on the host: vision_config parsed into *ret_cfg, weights
 * under model.visual. loaded into *ret_vision (heap, ex_vision_free). Returns 0; -CM_EUNSUPPORTED
 * (exported without vision weights), -CM_EMISSING (no vision_config), or the parser's/loader's
 * code, named in diag. Shared by the CPU and CUDA image steps. */
int s1_forward_vision_load(const struct cm_model_dir *dir, struct ex_vision_config *ret_cfg,
                           struct ex_vision **ret_vision, struct cm_diag *diag);

/* Runs the vision tower of the model directory over packed pixel rows, in float32 or, with
 * round_bf16, rounding where the bf16 reference does (ex_vision.round_bf16).
 * Shapes: pixels [n_patches, 1536] float32; grid_thw [n_images][3]; ret_embeds
 * [n_patches/4, hidden] float32 (caller-allocated). Returns 0 or a negative code named in diag. */
int s1_forward_vision(const struct cm_model_dir *dir, const float *pixels, int64_t n_patches,
                      const int32_t *grid_thw, int n_images, bool round_bf16, float *ret_embeds,
                      struct cm_diag *diag);

#endif
