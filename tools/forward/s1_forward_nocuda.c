/* s1-forward built without CUDA: the device path refuses with a message (s1_forward_cuda.h). */
#include <string.h>

#include "s1_forward_cuda.h"

int s1_forward_cuda_device(const char *device) {
  return strncmp(device, "cuda", 4) == 0 ? 0 : -1;
}

int s1_forward_cuda(const struct cm_model_dir *dir, const struct ex_qwen35_config *cfg, int device,
                    const struct s1_forward_job *job, float *ret_hidden, float *ret_logits,
                    struct cm_diag *diag) {
  (void)dir, (void)cfg, (void)job, (void)ret_hidden, (void)ret_logits;
  return cm_diag_set(diag, -CM_EUNSUPPORTED,
                     "device cuda:%d: this s1-forward was built without CUDA", device);
}

void s1_forward_cuda_release(void) {}

int s1_forward_vision_cuda(const struct cm_model_dir *dir, int device, const float *pixels,
                           int64_t n_patches, const int32_t *grid_thw, int n_images,
                           bool round_bf16, float *ret_embeds, struct cm_diag *diag) {
  (void)dir, (void)pixels, (void)n_patches, (void)grid_thw, (void)n_images, (void)ret_embeds;
  (void)round_bf16;
  return cm_diag_set(diag, -CM_EUNSUPPORTED,
                     "device cuda:%d: this s1-forward was built without CUDA", device);
}
