/* The per-program part of running a program (ex_program.c), for the scheduler (ex_sched.c): the
 * checks before any work, the readout rows each row asks of its launch, the readouts and group-
 * head rows right after that launch, the heads at the end. Scheduling, snapshots and caches are
 * not here. Not thread-safe: the compute thread only. */
#ifndef S1_EX_JOB_H
#define S1_EX_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ex_program.h"

/* One program's readout plan and result. */
struct ex_job {
  const struct ex_runner *x;     /* borrowed */
  const struct proto_program *p; /* borrowed; outlives the job */
  uint32_t *widths;              /* [n_readouts] output floats */
  uint32_t *by_row;              /* [n_readouts] readout indices sorted by row */
  uint32_t *row_start;           /* [n_rows + 1] each row's range in by_row */
  int32_t *group_of;             /* [n_rows] the group-head readout reading the row, or -1 */
  void **group_acc;              /* [n_readouts] a group head's accumulator, or NULL */
  uint32_t *n_reads;             /* [n_rows] readout rows the row asks of its launch; 0: the row
                                    is never run (no readout reads it) */
  float *head_in;                /* [n HEAD readouts, H] hidden rows gathered for the heads */
  uint32_t *head_of;             /* [n HEAD readouts] their readout indices */
  size_t k_head;                 /* rows gathered so far */
  struct proto_result res;       /* outputs allocated at init, filled as rows finish */
};

/* Checks `p` against the model before any work (proto_program_check, ids in the vocabulary,
 * image slots, heads, positions; every row within one launch and every snapshot within
 * lim.max_ctx) and plans its readouts. Ownership: p and x are borrowed; ex_job_fini frees.
 * Returns 0; -CM_EPROGRAM (the program does not fit the model, named in diag); -ENOMEM. */
int ex_job_init(struct ex_job *j, const struct ex_runner *x, const struct proto_program *p,
                struct cm_diag *diag);
void ex_job_fini(struct ex_job *j); /* accepts a zeroed or failed job */

/* Writes the packed readout indices row i asks of a launch where its first token is packed row
 * `base` (j->n_reads[i] of them) into reads, and returns their count. */
size_t ex_job_row_reads(const struct ex_job *j, uint32_t i, size_t base, size_t *reads);

/* The LM log-probs that the group rows of one launch will ask (their heads declare them:
 * ex_head_group.lm_targets), fetched in one engine target_logprobs call before the rows'
 * readouts instead of one call per row; a row's request equal to its declaration is served from
 * here (the same values: each log-prob is its readout row's alone). Reused across launches. */
struct ex_lm_batch {
  size_t n, cap;          /* log-probs declared / room */
  size_t *reads;          /* [cap] launch readout index of each */
  int32_t *targets;       /* [cap] target token of each */
  float *lp;              /* [cap] the engine's answers (valid when ok) */
  size_t n_seg, cap_seg;  /* declared rows / room */
  size_t *seg;            /* [cap_seg] first entry of each declared row (rows in order) */
  const struct ex_job **seg_job; /* [cap_seg] its job */
  bool ok;                /* lp holds the answers of all n */
};
void ex_lm_batch_reset(struct ex_lm_batch *b); /* empties it (keeps the room) */
void ex_lm_batch_fini(struct ex_lm_batch *b);  /* frees; accepts a zeroed batch */

/* Appends what row i's group head will ask (nothing for a row without a group head or a head
 * without lm_targets); rd: the row's first readout in the launch, as for ex_job_row_readouts.
 * Returns 0 or -ENOMEM. */
int ex_job_row_lm_declare(const struct ex_job *j, uint32_t i, size_t rd, struct ex_lm_batch *b);

/* One target_logprobs call for everything declared (nothing when empty). Sets b->ok. A bad
 * target (-EINVAL) is not an error here: ok stays false and each row asks alone, reporting its
 * own. Returns 0 or the engine's other negative codes with diag. */
int ex_lm_batch_run(struct ex_lm_batch *b, struct ex_engine *eng, struct cm_diag *diag);

/* Right after the launch that ran row i: its readouts, which are the launch's readouts rd ..
 * rd + n_reads[i] − 1 (hid: the launch's readout rows [n_read, H]): group-head rows, hidden
 * rows, label logits and log-probs into the result, HEAD rows gathered for ex_job_heads. `lmb`
 * (or NULL): the launch's batched LM log-probs, run. Returns 0 or a negative code with diag
 * (-CM_EPROGRAM: the row does not fit its head). */
int ex_job_row_readouts(struct ex_job *j, uint32_t i, size_t rd, const float *hid,
                        const struct ex_lm_batch *lmb, struct cm_diag *diag);

/* After the last row: group heads finish (a head with finish_all: all its readouts of the
 * program at once), the other heads run over their gathered rows (batched per head). Returns 0 or a negative code with diag (a head failure is sticky). */
int ex_job_heads(struct ex_job *j, struct cm_diag *diag);

#endif
