/* The program runner: a loaded model (engine and heads) that runs proto_programs (vision tower
 * for images, prefixes into snapshots, rows continuing snapshots, readouts gathered, heads over
 * gathered hidden rows) and fills proto_results; the scheduler (ex_sched.h) runs many at once,
 * ex_runner_run one alone. Single-threaded: one runner per compute thread. The backbone runs on
 * an engine (ex_engine.h): the float32 CPU model (default) or the bf16 CUDA engine. */
#ifndef S1_EX_PROGRAM_H
#define S1_EX_PROGRAM_H

#include <stdbool.h>

#include "cm_error.h"
#include "cm_model_dir.h"
#include "ex_engine.h"
#include "proto_program.h"

struct ex_runner;

struct ex_runner_options {
  const char
      *numerics;      /* "fp32" or "bf16"; NULL: the directory's default on the CPU, bf16 on CUDA */
  const char *device; /* "cpu" (also NULL), "cuda" or "cuda:N" (ex_engine_device) */
  struct ex_engine_options engine; /* CUDA limits (zero: defaults of ex_engine.h) */
};

/* Loads the backbone on opt->device in one numerics mode (opt->numerics, else on the CPU the model
 * directory's "numerics" and on CUDA bf16, the only mode it serves; an explicit fp32 on CUDA is
 * refused) with a kept LoRA adapter if the directory has one, the vision tower when
 * the manifest has one, and every head of the directory's family (ex_head.h's table) the
 * directory provides (only the kinds named in the manifest's "head_kinds" array when it has one).
 * Ownership: `dir` must outlive the runner; *ret_runner is freed with ex_runner_free.
 * Returns 0; -CM_EUNSUPPORTED (a family without an executor entry); or the loader's negative
 * code with diag. */
int ex_runner_new(const struct cm_model_dir *dir, const struct ex_runner_options *opt,
                  struct ex_runner **ret_runner, struct cm_diag *diag);
void ex_runner_free(struct ex_runner *runner);

/* Model facts for health replies: the directory's model id ("model_id" in the manifest, else
 * the directory name) and revision (manifest "revision", else the weights' SHA-256 prefix). */
const char *ex_runner_model_id(const struct ex_runner *runner);
const char *ex_runner_revision(const struct ex_runner *runner);
/* The numerics mode every answer of this runner is computed in: "fp32" or "bf16". */
const char *ex_runner_numerics(const struct ex_runner *runner);

/* The runner's engine (for the scheduler; its cache keys take ex_runner_numerics too). */
struct ex_engine *ex_runner_engine(const struct ex_runner *runner);

/* Runs `p` alone, through a scheduler of its own without caches (ex_sched.h), and fills `res`
 * (zero-initialised by the caller): status 0 and one float32 output per readout, in order:
 * HIDDEN [H]; LABEL_LOGITS [n_ids] (LM-head logits, bf16-rounded in bf16 only); TOKEN_LOGPROB
 * [n_ids] (log-softmax over the vocabulary, float64 sum); HEAD [k]; and res->numerics, the mode
 * that computed them (ex_runner_numerics).
 * Timings in res->timings (µs). Ownership: res owns its outputs (proto_result_fini).
 * Returns 0; -CM_EPROGRAM when the program does not fit the model (token id out of the
 * vocabulary, <|image_pad|> count ≠ image sizes, unknown head, images without a vision tower,
 * position ids out of range, a row or image over the engine's limits): the request fails, the
 * executor stays healthy; -CM_ETIMEOUT when
 * the deadline passed before the work started; any other negative code is sticky (the executor
 * retires). diag names the cause. */
int ex_runner_run(struct ex_runner *runner, const struct proto_program *p,
                  struct proto_result *res, struct cm_diag *diag);

#endif
