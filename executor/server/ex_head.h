/* Learned heads the executor runs over gathered hidden rows (HEAD readouts), fp32, and the
 * executor's one family table (ex_head.c): each family of common/cm_family.h with the head kinds
 * its models carry. A family's heads live in executor/heads/<family>/ as
 * `const struct ex_head_kind ex_head_<name>`; adding a family: that folder, one line in ex_head.c's
 * table, its sources in server/meson.build (test family_tables checks the names against the
 * common and preprocessor tables). */
#ifndef S1_EX_HEAD_H
#define S1_EX_HEAD_H

#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"
#include "cm_model_dir.h"
#include "cm_safetensors.h"

/* What a group head may ask of the backbone about the row it is reading: log-probabilities of
 * target tokens at the row's positions (the engine's bf16-rounded LM-head logits, full-vocabulary
 * log-softmax; ex_engine.h target_logprobs). Filled by the runner for each row call. */
struct ex_head_lm {
  /* lp[i] = log_softmax(logits at row position first + i)[targets[i]], i < n; positions within
   * the row. Returns 0; -EINVAL (a target outside the vocabulary); another negative code. */
  int (*target_logprobs)(const struct ex_head_lm *lm, uint32_t first, const int32_t *targets,
                         size_t n, float *lp, struct cm_diag *diag);
};

/* A group head: one HEAD readout whose ids carry the head's arguments and which reads several
 * consecutive rows, starting at the readout's row (e.g. one question's options). The runner
 * calls begin, then row for each of them in order right after its forward, then finish. */
struct ex_head_group {
  /* Rows spanned and output width for these arguments. Returns 0 or -EINVAL (bad arguments). */
  int (*shape)(const int32_t *args, uint32_t n_args, uint32_t *ret_rows, uint32_t *ret_width);
  /* A fresh accumulator for one readout (freed with free_acc). Returns 0 or -ENOMEM. */
  int (*begin)(const void *state, const int32_t *args, uint32_t n_args, void **ret_acc);
  /* Row k of the group: ids [n], hidden [n, H] its final-norm rows; `position` is the readout's.
   * `lm` gives LM-head log-probabilities at the row's positions. Returns 0; -CM_EPROGRAM (the
   * row does not fit the layout) or another negative code with diag. */
  int (*row)(const void *state, const struct ex_head_lm *lm, void *acc, uint32_t k,
             int32_t position, const int32_t *ids, uint32_t n, const float *hidden,
             struct cm_diag *diag);
  /* Optional (NULL: row asks lm as it goes): the log-probabilities row() will ask of lm for the
   * same arguments, declared before the launch's row calls so that the runner fetches those of
   * every row of a launch in one engine call and serves row()'s request from them: writes
   * *ret_first and targets[0 .. *ret_n) (*ret_n ≤ n; 0 when the row asks nothing or its
   * arguments are bad, which row() then reports). Shapes: targets [n] caller-allocated. */
  void (*lm_targets)(const void *acc, int32_t position, const int32_t *ids, uint32_t n,
                     uint32_t *ret_first, int32_t *targets, size_t *ret_n);
  /* Writes the output [width] after the last row. Returns 0 or a negative code with diag. */
  int (*finish)(const void *state, void *acc, float *out, struct cm_diag *diag);
  /* Optional (NULL: finish per readout): finish for the n readouts of this head in one program
   * at once, outs[i] [width of accs[i]]; the same outputs bit for bit as n finish calls (a head
   * batches the rows of all of them through its weights in one pass). Returns as finish. */
  int (*finish_all)(const void *state, void *const *accs, size_t n, float *const *outs,
                    struct cm_diag *diag);
  void (*free_acc)(void *acc); /* accepts NULL */
};

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

  const struct ex_head_group *group; /* NULL for a per-row head; else run is unused */
};

#define EX_FAMILY_MAX_HEADS 2 /* head kinds of one family */
#define EX_HEAD_FILE "heads.safetensors" /* the model directory's fp32 heads */

/* What the executor runs for one family beyond the backbone. */
struct ex_family {
  const char *name; /* manifest "family" (cm_family.h) */
  const struct ex_head_kind *heads[EX_FAMILY_MAX_HEADS + 1]; /* its head kinds, NULL-terminated */
};

/* The family registered under `name`, or NULL. */
const struct ex_family *ex_family_find(const char *name);

/* The registered families (static) and their count. */
const struct ex_family *ex_families(size_t *ret_n);

/* Opens dir/heads.safetensors for a head's load. Ownership: *ret_st (cm_safetensors_close) and
 * *ret_path (heap, free) are the caller's, written only on success. Returns 0; -ENOENT when the
 * directory has no heads file; -ENOMEM; cm_safetensors_open's error with diag. */
int ex_head_file_open(const struct cm_model_dir *dir, struct cm_safetensors **ret_st,
                      char **ret_path, struct cm_diag *diag);

/* The head kind registered under `name` (in any family), or NULL. */
const struct ex_head_kind *ex_head_find(const char *name);

/* Every family's head kinds, NULL-terminated (static). */
const struct ex_head_kind *const *ex_head_kinds(void);

#endif
