/* Prometheus text rendering of the frontend's counters (fe_metrics.h). */
#include "fe_metrics.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double bounds_s[FE_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                 0.25,  0.5,    1,     2.5,  5,     10,   60};
static const char *const stage_names[FE_STAGE_COUNT] = {"queue", "preprocess", "execute", "total"};

void fe_hist_observe(struct fe_hist *h, int64_t us) {
  double s = us > 0 ? (double)us / 1e6 : 0.0;
  size_t b = 0;
  while (b < FE_HIST_BUCKETS && s > bounds_s[b])
    b++;
  h->counts[b]++;
  h->sum_s += s;
  h->n++;
}

void fe_metrics_count_status(struct fe_metrics *m, int status) {
  if (status >= 100 && status <= 599)
    m->by_status[status / 100][status % 100]++;
}

struct out {
  char *s;
  size_t n, cap;
  int err;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...) {
  if (o->err)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(o->s + o->n, o->cap - o->n, fmt, ap);
    va_end(ap);
    if (k < 0) {
      o->err = -EINVAL;
      return;
    }
    if ((size_t)k < o->cap - o->n) {
      o->n += (size_t)k;
      return;
    }
    size_t c = o->cap * 2 + (size_t)k;
    char *p = realloc(o->s, c);
    if (!p) {
      o->err = -ENOMEM;
      return;
    }
    o->s = p;
    o->cap = c;
  }
}

/* The executor series: name, help, counter or gauge, offset in struct proto_exec_stats. */
static const struct {
  const char *name, *help;
  int gauge;
  size_t off;
} ex_series[] = {
#define S(n, f, g, h) {n, h, g, offsetof(struct proto_exec_stats, f)}
    S("s1_executor_steps_total", steps, 0, "Scheduler steps that ran work."),
    S("s1_executor_step_programs_total", step_programs, 0,
      "Programs touched per step, summed (divided by steps: the mean batch)."),
    S("s1_executor_step_tokens_total", step_tokens, 0, "Tokens launched (prefix pieces, rows)."),
    S("s1_executor_programs_total", finished, 0, "Programs answered, every status."),
    S("s1_executor_deadline_dropped_total", deadline_dropped, 0,
      "Programs dropped because their deadline passed (their remaining work not run)."),
    S("s1_executor_cancelled_total", cancelled, 0, "Programs dropped by a CANCEL."),
    S("s1_prefix_cache_hits_total", prefix_hits, 0, "Prefixes that found a cached snapshot."),
    S("s1_prefix_cache_misses_total", prefix_misses, 0, "Prefixes that found none."),
    S("s1_prefix_cache_evictions_total", prefix_evictions, 0, "Cached snapshots dropped."),
    S("s1_prefix_cache_inserts_total", prefix_inserts, 0, "Snapshots stored."),
    S("s1_prefix_cache_tokens_reused_total", prefix_tokens_reused, 0,
      "Prefix tokens not run thanks to a hit."),
    S("s1_vision_cache_hits_total", vision_hits, 0, "Images whose tower output was cached."),
    S("s1_vision_cache_misses_total", vision_misses, 0, "Images run through the tower."),
    S("s1_vision_cache_evictions_total", vision_evictions, 0, "Cached tower outputs dropped."),
    S("s1_vision_cache_inserts_total", vision_inserts, 0, "Tower outputs stored."),
    S("s1_prefix_cache_bytes", prefix_bytes, 1, "Bytes of cached snapshots."),
    S("s1_prefix_cache_entries", prefix_entries, 1, "Cached snapshots."),
    S("s1_vision_cache_bytes", vision_bytes, 1, "Bytes of cached tower outputs."),
    S("s1_vision_cache_entries", vision_entries, 1, "Cached tower outputs."),
    S("s1_executor_waiting", waiting, 1, "Programs waiting for snapshot memory."),
    S("s1_executor_active", active, 1, "Programs in flight."),
    S("s1_snapshot_pool_bytes", pool_bytes, 1, "The snapshot pool."),
    S("s1_snapshot_pool_reserved_bytes", pool_reserved_bytes, 1,
      "Pool bytes reserved by programs in flight."),
#undef S
};

int fe_metrics_render(const struct fe_metrics *m, const struct proto_exec_report *ex,
                      size_t n_ex, char **ret_text, size_t *ret_len) {
  struct out o = {.s = malloc(4096), .cap = 4096};
  if (!o.s)
    return -ENOMEM;
  put(&o, "# HELP s1_requests_total Answers by HTTP status: every answer on /v1/systemone, the "
          "HTTP layer's refusals, and 404/405 on any path.\n"
          "# TYPE s1_requests_total counter\n");
  for (int c = 1; c < 6; c++)
    for (int k = 0; k < 100; k++)
      if (m->by_status[c][k])
        put(&o, "s1_requests_total{status=\"%d\"} %llu\n", c * 100 + k,
            (unsigned long long)m->by_status[c][k]);
  for (int s = 0; s < FE_STAGE_COUNT; s++) {
    const struct fe_hist *h = &m->stage[s];
    put(&o, "# HELP s1_%s_seconds Request latency: %s.\n# TYPE s1_%s_seconds histogram\n",
        stage_names[s], stage_names[s], stage_names[s]);
    uint64_t cum = 0;
    for (int b = 0; b < FE_HIST_BUCKETS; b++) {
      cum += h->counts[b];
      put(&o, "s1_%s_seconds_bucket{le=\"%g\"} %llu\n", stage_names[s], bounds_s[b],
          (unsigned long long)cum);
    }
    cum += h->counts[FE_HIST_BUCKETS];
    put(&o, "s1_%s_seconds_bucket{le=\"+Inf\"} %llu\n", stage_names[s], (unsigned long long)cum);
    put(&o, "s1_%s_seconds_sum %.6f\ns1_%s_seconds_count %llu\n", stage_names[s], h->sum_s,
        stage_names[s], (unsigned long long)h->n);
  }
  put(&o, "# HELP s1_tokens_total Input tokens of answered requests.\n"
          "# TYPE s1_tokens_total counter\ns1_tokens_total %llu\n",
      (unsigned long long)m->tokens);
  put(&o, "# HELP s1_decisions_total Questions answered.\n"
          "# TYPE s1_decisions_total counter\ns1_decisions_total %llu\n",
      (unsigned long long)m->decisions);
  static const char *const cancel_stage[FE_CANCEL_COUNT] = {"admission", "queue", "in_flight"};
  put(&o, "# HELP s1_cancelled_total Requests whose clients went away (answered 499), by where "
          "they were then.\n# TYPE s1_cancelled_total counter\n");
  for (int c = 0; c < FE_CANCEL_COUNT; c++)
    put(&o, "s1_cancelled_total{stage=\"%s\"} %llu\n", cancel_stage[c],
        (unsigned long long)m->cancelled[c]);
  put(&o, "# HELP s1_queue_depth Requests waiting for a preprocessor credit.\n"
          "# TYPE s1_queue_depth gauge\ns1_queue_depth %llu\n",
      (unsigned long long)m->queue_depth);
  put(&o, "# HELP s1_in_flight Requests at a preprocessor.\n"
          "# TYPE s1_in_flight gauge\ns1_in_flight %llu\n",
      (unsigned long long)m->in_flight);
  put(&o, "# HELP s1_credits Idle preprocessor credits.\n"
          "# TYPE s1_credits gauge\ns1_credits %llu\n",
      (unsigned long long)m->credits);
  put(&o, "# HELP s1_preprocessors Connected preprocessors.\n"
          "# TYPE s1_preprocessors gauge\ns1_preprocessors %llu\n",
      (unsigned long long)m->preprocessors);
  put(&o, "# HELP s1_preprocessors_ready Preprocessors whose executors are ready.\n"
          "# TYPE s1_preprocessors_ready gauge\ns1_preprocessors_ready %llu\n",
      (unsigned long long)m->preprocessors_ready);
  for (size_t k = 0; n_ex && k < sizeof(ex_series) / sizeof(ex_series[0]); k++) {
    put(&o, "# HELP %s %s\n# TYPE %s %s\n", ex_series[k].name, ex_series[k].help,
        ex_series[k].name, ex_series[k].gauge ? "gauge" : "counter");
    for (size_t i = 0; i < n_ex; i++) {
      uint64_t v;
      char label[PROTO_MAX_ID_BYTES + 1];
      size_t j = 0;
      for (const char *c = ex[i].instance; *c && j < PROTO_MAX_ID_BYTES; c++) /* label-safe */
        label[j++] = *c == '"' || *c == '\\' || (unsigned char)*c < 0x20 ? '_' : *c;
      label[j] = 0;
      memcpy(&v, (const char *)&ex[i].stats + ex_series[k].off, sizeof(v));
      put(&o, "%s{executor=\"%s\"} %llu\n", ex_series[k].name, label, (unsigned long long)v);
    }
  }
  if (o.err) {
    free(o.s);
    return o.err;
  }
  *ret_text = o.s;
  *ret_len = o.n;
  return 0;
}
