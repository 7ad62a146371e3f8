/* The image step of s1-forward: merged vision-tower embeddings (ex_vision.h) for pixel inputs,
 * kept apart from the text path of the tool. */
#ifndef S1_FORWARD_IMAGES_H
#define S1_FORWARD_IMAGES_H

#include <stdint.h>

#include "cm_model_dir.h"

/* Runs the vision tower of the model directory over packed pixel rows.
 * Shapes: pixels [n_patches, 1536] float32; grid_thw [n_images][3]; ret_embeds
 * [n_patches/4, hidden] float32 (caller-allocated). Returns 0 or a negative code named in diag. */
int s1_forward_vision(const struct cm_model_dir *dir, const float *pixels, int64_t n_patches,
                      const int32_t *grid_thw, int n_images, float *ret_embeds,
                      struct cm_diag *diag);

#endif
