/* Learned heads the executor runs over gathered hidden rows (HEAD readouts), fp32, and their
 * registry by name. A head kind is defined in executor/heads/<file>.c as
 * `const struct ex_head_kind ex_head_<name>` and listed in ex_head.c (meson compiles
 * executor/heads/ex_head_open_jev.c when it exists and defines EX_HEAD_OPEN_JEV). */
#ifndef S1_EX_HEAD_H
#define S1_EX_HEAD_H

#include <stddef.h>

#include "cm_error.h"
#include "cm_model_dir.h"

struct ex_head_kind {
  const char *name; /* what a HEAD readout names, e.g. "open_jev_scalar" */

  /* Loads the head's weights for a model directory (e.g. from dir->path/heads.safetensors).
   * `hidden` is the backbone's H. Ownership: *ret_state is freed with free_state.
   * Returns 0; -ENOENT when this model has no such head (the executor then skips the kind);
   * another negative code (with diag) refuses the model. Writes *ret_n_out: the head's width k. */
  int (*load)(const struct cm_model_dir *dir, size_t hidden, void **ret_state, size_t *ret_n_out,
              struct cm_diag *diag);

  /* out = head(hidden). Shapes: hidden [n, H] fp32 final-norm rows (as the backbone gives them);
   * out [n, k] fp32, caller-allocated. Returns 0 or a negative code with diag (a sticky error:
   * the executor retires). */
  int (*run)(const void *state, const float *hidden, size_t n, float *out, struct cm_diag *diag);

  void (*free_state)(void *state); /* accepts NULL */
};

/* The head kind registered under `name`, or NULL. */
const struct ex_head_kind *ex_head_find(const char *name);

/* The registered kinds, NULL-terminated. */
const struct ex_head_kind *const *ex_head_kinds(void);

#endif
