/* s1-forward's image step with the vision tower (ex_vision.h): config from the manifest's
 * vision_config, weights under model.visual., one forward over all images of the input. */
#include "s1_forward_images.h"

#include <json-c/json.h>

#include "ex_vision.h"

int s1_forward_vision_load(const struct cm_model_dir *dir, struct ex_vision_config *ret_cfg,
                           struct ex_vision **ret_vision, struct cm_diag *diag) {
  json_object *vc = NULL;
  if (!dir->vision)
    return cm_diag_set(diag, -CM_EUNSUPPORTED,
                       "%s: the model directory has no vision tower "
                       "(exported without vision weights)",
                       dir->path);
  if (!json_object_object_get_ex(dir->config, "vision_config", &vc))
    return cm_diag_set(diag, -CM_EMISSING, "%s: config has no vision_config", dir->path);
  int r = ex_vision_config_parse(vc, ret_cfg, diag);
  return r ? r : ex_vision_new(ret_cfg, dir->weights, NULL, ret_vision, diag);
}

int s1_forward_vision(const struct cm_model_dir *dir, const float *pixels, int64_t n_patches,
                      const int32_t *grid_thw, int n_images, bool round_bf16, float *ret_embeds,
                      struct cm_diag *diag) {
  struct ex_vision_config cfg;
  struct ex_vision *v = NULL;
  int r = s1_forward_vision_load(dir, &cfg, &v, diag);
  if (!r) {
    v->round_bf16 = round_bf16;
    r = ex_vision_forward(v, pixels, n_patches, grid_thw, n_images, ret_embeds, diag);
  }
  ex_vision_free(v);
  return r;
}
