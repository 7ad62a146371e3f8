/* ex_engine_cuda_new in builds without CUDA (meson option cuda disabled or no nvcc): refuses. */
#include "ex_engine.h"

int ex_engine_cuda_new(const struct cm_model_dir *dir, int device,
                       const struct ex_engine_options *opt, struct ex_engine **ret_engine,
                       struct cm_diag *diag) {
  (void)dir, (void)opt;
  *ret_engine = NULL;
  return cm_diag_set(diag, -CM_EUNSUPPORTED,
                     "device cuda:%d: this build has no CUDA (meson option cuda)", device);
}
