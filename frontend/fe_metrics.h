/* Counters and latency histograms of the frontend, rendered as Prometheus text (version 0.0.4).
 * Pure data: the loop thread updates them, /metrics renders them; no locking (one thread). */
#ifndef S1_FE_METRICS_H
#define S1_FE_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "proto_status.h"

#define FE_HIST_BUCKETS 14 /* upper bounds, seconds: 0.001 … 60, then +Inf */

/* One latency histogram. */
struct fe_hist {
  uint64_t counts[FE_HIST_BUCKETS + 1]; /* per bucket (not cumulative); last is +Inf */
  double sum_s;                         /* sum of observations, seconds */
  uint64_t n;                           /* observations */
};

enum fe_stage { FE_STAGE_QUEUE, FE_STAGE_PREPROCESS, FE_STAGE_EXECUTE, FE_STAGE_TOTAL, FE_STAGE_COUNT };

/* Where a request was when its client was seen gone. */
enum fe_cancel {
  FE_CANCEL_ADMISSION, /* already gone when it arrived: nothing queued */
  FE_CANCEL_QUEUE,     /* waiting for a credit: dropped from the queue */
  FE_CANCEL_IN_FLIGHT, /* at a preprocessor: cancelled there and at its executor */
  FE_CANCEL_COUNT,
};

struct fe_metrics {
  uint64_t by_status[6][100];          /* answers by status [1xx..5xx]: every one on
                                          /v1/systemone, the HTTP layer's refusals, 404/405 */
  struct fe_hist stage[FE_STAGE_COUNT]; /* latency histograms */
  uint64_t tokens;                     /* input tokens of answered requests */
  uint64_t decisions;                  /* questions answered */
  uint64_t cancelled[FE_CANCEL_COUNT]; /* requests whose clients went away, by where they were */
  uint64_t queue_depth;                /* gauge: requests waiting for a credit */
  uint64_t in_flight;                  /* gauge: requests at a preprocessor */
  uint64_t credits;                    /* gauge: idle credits held */
  uint64_t preprocessors;              /* gauge: connected preprocessors */
  uint64_t preprocessors_ready;        /* gauge: those reporting READY */
};

/* Records one observation in µs. */
void fe_hist_observe(struct fe_hist *h, int64_t us);

/* Counts one answered request. */
void fe_metrics_count_status(struct fe_metrics *m, int status);

/* Renders the Prometheus text: the frontend's series, then the executors' counters (ex [n_ex],
 * one per executor instance, labelled executor="host:pid"; the preprocessors' STATUS carries
 * them from the health replies). Ownership: *ret_text heap (free()), *ret_len its length.
 * Returns 0 or -ENOMEM. */
int fe_metrics_render(const struct fe_metrics *m, const struct proto_exec_report *ex,
                      size_t n_ex, char **ret_text, size_t *ret_len);

#endif
