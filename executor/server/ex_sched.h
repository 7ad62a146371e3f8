/* The executor's scheduler: many programs in flight on one engine. Each step it drops the work of
 * programs past their deadline, admits waiting programs in arrival order while the snapshot pool
 * has room for them (the pool is the engine's lim.pool_bytes; what a program's prefixes need is
 * reserved at admission, so no allocation fails later), and forms one batch from the ready work
 * of the programs in flight — vision items, prefix pieces cut on the 64-token grid, whole rows —
 * under a token budget: first a fair share of the budget for each program with ready work, in
 * arrival order, then what is left to the oldest. It runs the vision items, then one launch of
 * all pieces and rows, reads each row's readouts, and finishes every program whose work is done
 * (heads, result). Every result is bit-identical to the program run alone (ex_runner_run): the
 * engine packs sequences without changing their values, and a prefix cut on its own 64-token
 * grid continues exactly as one pass. A prefix-snapshot cache and a vision-output cache (ex_lru.h,
 * keyed by SHA-256 of what determines the value) let programs reuse each other's work.
 * Not thread-safe (the compute thread only) but for ex_sched_post_cancel. Policy and limits:
 * executor/server/README.md. */
#ifndef S1_EX_SCHED_H
#define S1_EX_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ex_lru.h"
#include "ex_program.h"

#define EX_SCHED_GRID 64            /* prefix pieces and cached snapshots sit on this grid */
#define EX_SCHED_MAX_PROGRAMS 1024  /* most programs held at once (--max-programs) */

/* What one step did and where its time went (µs, monotonic clock), for ex_sched_options.on_step:
 * the step log of s1-executor (S1_EXECUTOR_STEPS=1) and s1-replay --batch --steps. */
struct ex_sched_step_info {
  uint64_t step;        /* its number (ex_sched_stats.steps after it) */
  uint32_t programs;    /* programs with work in it */
  uint32_t active;      /* programs in flight when it formed (admitted) */
  uint32_t waiting;     /* programs still waiting for snapshot memory */
  uint32_t images;      /* vision items (cache hits included) */
  uint64_t image_rows;  /* their merged rows */
  uint32_t pieces;      /* prefix pieces in the launch */
  uint32_t rows;        /* rows in the launch */
  uint64_t tokens;      /* tokens launched: pieces and rows */
  uint64_t readouts;    /* readout rows of the launch */
  uint32_t finished;    /* programs answered at its end (every status) */
  int64_t vision_us;    /* the vision tower */
  int64_t forward_us;   /* the launch (ex_engine.forward), per-program re-runs included */
  int64_t logprob_us;   /* the launch's batched LM log-probs */
  int64_t readout_us;   /* the rows' readouts */
  int64_t heads_us;     /* heads and results of the programs finished */
  int64_t total_us;     /* the whole step, batch forming included */
};

/* Zero values take the defaults. */
struct ex_sched_options {
  size_t max_batch_tokens;   /* tokens of one step (vision merged rows, prefix pieces, rows);
                                default min(engine max_tokens, 8192 on CUDA, 512 on the CPU), at
                                least EX_SCHED_GRID; a row longer than it runs alone in its step */
  size_t max_batch_readouts; /* readout rows of one step (a group-head row reads every position);
                                default 128 on the CPU, the engine's per launch on CUDA; the
                                first row of a step may exceed it */
  size_t prefix_cache_bytes; /* prefix-snapshot cache budget, from the snapshot pool; 0: none */
  size_t vision_cache_bytes; /* vision-output cache budget, host memory; 0: none */
  size_t max_programs;       /* programs held (waiting + in flight) at most (default 64) */
  /* Called on the compute thread after every step that ran work, or NULL. */
  void (*on_step)(void *ctx, const struct ex_sched_step_info *info);
  void *on_step_ctx;
};

/* Counters since start, and gauges. */
struct ex_sched_stats {
  uint64_t steps;              /* steps that ran work */
  uint64_t step_programs;      /* Σ programs touched per step (÷ steps: the mean batch) */
  uint64_t step_tokens;        /* Σ tokens launched (prefix pieces and rows) */
  uint64_t finished;           /* programs answered (every status) */
  uint64_t deadline_dropped;   /* programs dropped because their deadline passed, unrun part */
  uint64_t cancelled;          /* programs dropped by a CANCEL */
  uint64_t prefix_tokens_reused; /* prefix tokens not run thanks to a cache hit */
  size_t waiting;              /* programs not admitted yet (gauge) */
  size_t active;               /* programs in flight (gauge) */
  size_t pool_bytes;           /* the snapshot pool (gauge) */
  size_t pool_reserved_bytes;  /* reserved by programs in flight (gauge; the cache adds its own) */
  struct ex_lru_stats prefix;  /* prefix-snapshot cache: lookups per prefix, bytes of the pool */
  struct ex_lru_stats vision;  /* vision-output cache: lookups per image, host bytes */
};

struct ex_sched;

/* A scheduler over the runner's engine. Ownership: the runner outlives it; ex_sched_free.
 * Returns 0; -EINVAL (an option out of range, named in diag); -ENOMEM. */
int ex_sched_new(struct ex_runner *x, const struct ex_sched_options *opt, struct ex_sched **ret,
                 struct cm_diag *diag);
/* Frees every held program's state (their results are dropped, never popped) and the caches. */
void ex_sched_free(struct ex_sched *s);

/* Takes a program in. It is checked at once (ex_job_init, the snapshot memory it needs against
 * the pool); a program that cannot run, whose deadline (p->deadline_us, proto_now_us clock) has
 * passed, or of a cancelled request is finished at once with its error and nothing run.
 * arrival_us: monotonic µs of its arrival (queue timing). Ownership: p and tag are borrowed
 * until ex_sched_pop returns them. Returns 0 or -ENOMEM (nothing taken). */
int ex_sched_submit(struct ex_sched *s, const struct proto_program *p, void *tag,
                    int64_t arrival_us);

/* Finishes every held program of request `request_id` with -CM_ECANCELLED (nothing more of it
 * runs) and remembers the id, so a program of it that arrives later is refused the same way.
 * Returns the programs finished now. */
size_t ex_sched_cancel(struct ex_sched *s, const char *request_id);

/* The one thread-safe call: queues a CANCEL of request_id from any thread (an nng callback); the
 * compute thread applies it as ex_sched_cancel does at the start of the next step or between the
 * readouts of the current one. Returns 0 or -ENOMEM (then nothing is queued). */
int ex_sched_post_cancel(struct ex_sched *s, const char *request_id);

/* One step (see the top). Returns 0 (also with nothing to do); a sticky engine or head error
 * with diag: every held program is then finished with -CM_EUNAVAILABLE. */
int ex_sched_step(struct ex_sched *s, struct cm_diag *diag);

/* The next finished program, in finish order: its tag and program as submitted, and its result
 * (status, outputs or message, timings), moved into *ret_res (zeroed by the caller; the caller
 * frees it). Returns false when none is finished. */
bool ex_sched_pop(struct ex_sched *s, void **ret_tag, const struct proto_program **ret_p,
                  struct proto_result *ret_res);

/* Programs held: waiting or in flight, not counting finished ones not popped. */
size_t ex_sched_held(const struct ex_sched *s);

/* Finishes every held program with `code` and `msg` (shutdown, retirement). */
void ex_sched_fail_all(struct ex_sched *s, int code, const char *msg);

void ex_sched_stats(const struct ex_sched *s, struct ex_sched_stats *ret);

/* One log line (no newline) of a step's info, "step=N programs=P ... total_us=T" (the keys are
 * the field names of struct ex_sched_step_info), into buf of n bytes (truncated to fit). */
void ex_sched_step_format(const struct ex_sched_step_info *info, char *buf, size_t n);

#endif
