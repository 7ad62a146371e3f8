/* The Open-Jev scalar head (see ex_head_open_jev.h) and its registry entry "open_jev_scalar" for
 * the executor's HEAD readouts. A model directory without heads.safetensors simply has no such
 * head (-ENOENT); one whose file is present but wrong refuses the model. */
#include "ex_head_open_jev.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ex_head.h"

int ex_head_open_jev_init(const struct cm_safetensors *st, const char *path, size_t hidden,
                          struct ex_head_open_jev *ret_head, struct cm_diag *diag) {
  struct cm_tensor_view w, b;
  if (cm_safetensors_find(st, EX_HEAD_OPEN_JEV_WEIGHT, &w) != 0)
    return cm_diag_set(diag, -CM_EMISSING, "%s: tensor '%s' missing", path, EX_HEAD_OPEN_JEV_WEIGHT);
  if (cm_safetensors_find(st, EX_HEAD_OPEN_JEV_BIAS, &b) != 0)
    return cm_diag_set(diag, -CM_EMISSING, "%s: tensor '%s' missing", path, EX_HEAD_OPEN_JEV_BIAS);
  if (w.dtype != CM_DTYPE_F32 || b.dtype != CM_DTYPE_F32)
    return cm_diag_set(diag, -CM_EDTYPE, "%s: the head tensors must be F32", path);
  if (w.n_dims != 2 || w.shape[0] != 1 || w.shape[1] != (int64_t)hidden)
    return cm_diag_set(diag, -CM_ESHAPE, "%s: tensor '%s' must be [1, %zu]", path,
                       EX_HEAD_OPEN_JEV_WEIGHT, hidden);
  if (b.n_dims != 1 || b.shape[0] != 1)
    return cm_diag_set(diag, -CM_ESHAPE, "%s: tensor '%s' must be [1]", path, EX_HEAD_OPEN_JEV_BIAS);
  float *wv = malloc(hidden * sizeof *wv);
  if (!wv)
    return -ENOMEM;
  float bv;
  cm_tensor_to_f32(&w, wv);
  cm_tensor_to_f32(&b, &bv);
  bool finite = isfinite(bv);
  for (size_t i = 0; i < hidden && finite; i++)
    finite = isfinite(wv[i]);
  if (!finite) {
    free(wv);
    return cm_diag_set(diag, -CM_EFORMAT, "%s: the head holds a non-finite value", path);
  }
  ret_head->weight = wv;
  ret_head->bias = bv;
  ret_head->hidden = hidden;
  return 0;
}

void ex_head_open_jev_fini(struct ex_head_open_jev *head) {
  if (!head)
    return;
  free(head->weight);
  head->weight = NULL;
}

int ex_head_open_jev_run(const struct ex_head_open_jev *head, const float *hidden, size_t n,
                         float *out) {
  size_t h = head->hidden;
  for (size_t i = 0; i < n; i++) {
    const float *x = hidden + i * h;
    double acc = 0.0;
    for (size_t k = 0; k < h; k++)
      acc += (double)head->weight[k] * (double)x[k];
    out[i] = (float)(acc + (double)head->bias);
  }
  return 0;
}

/* ---- registry entry -------------------------------------------------------------------------- */

static int load(const struct cm_model_dir *dir, size_t hidden, void **ret_state, size_t *ret_n_out,
                struct cm_diag *diag) {
  struct cm_safetensors *st = NULL;
  char *path = NULL;
  int rc = ex_head_file_open(dir, &st, &path, diag); /* -ENOENT: this model has no head */
  if (rc)
    return rc;
  struct ex_head_open_jev *head = calloc(1, sizeof *head);
  rc = head ? ex_head_open_jev_init(st, path, hidden, head, diag) : -ENOMEM;
  if (!rc) {
    *ret_state = head;
    *ret_n_out = 1;
    head = NULL;
  }
  free(head);
  cm_safetensors_close(st);
  free(path);
  return rc;
}

static int run(const void *state, const float *hidden, size_t n, float *out,
               struct cm_diag *diag) {
  (void)diag;
  return ex_head_open_jev_run(state, hidden, n, out);
}

static void free_state(void *state) {
  ex_head_open_jev_fini(state);
  free(state);
}

const struct ex_head_kind ex_head_open_jev = {
    .name = "open_jev_scalar",
    .load = load,
    .run = run,
    .free_state = free_state,
};
