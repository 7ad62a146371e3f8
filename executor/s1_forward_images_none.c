/* s1-forward's image step while the vision tower is not built in: pixel inputs are refused. */
#include "s1_forward_images.h"

int s1_forward_vision(const struct cm_model_dir *dir, const float *pixels, int64_t n_patches,
                      const int32_t *grid_thw, int n_images, float *ret_embeds,
                      struct cm_diag *diag) {
  (void)dir, (void)pixels, (void)n_patches, (void)grid_thw, (void)n_images, (void)ret_embeds;
  return cm_diag_set(diag, -CM_EUNSUPPORTED, "this build has no vision tower (executor/"
                     "ex_vision.c); pass merged image embeddings with \"embeds\" instead");
}
