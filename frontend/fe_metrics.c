/* Prometheus text rendering of the frontend's counters (fe_metrics.h). */
#include "fe_metrics.h"

#include <errno.h>
#include <stdarg.h>
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

int fe_metrics_render(const struct fe_metrics *m, char **ret_text, size_t *ret_len) {
  struct out o = {.s = malloc(4096), .cap = 4096};
  if (!o.s)
    return -ENOMEM;
  put(&o, "# HELP s1_requests_total Requests on /v1/systemone by HTTP status.\n"
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
  if (o.err) {
    free(o.s);
    return o.err;
  }
  *ret_text = o.s;
  *ret_len = o.n;
  return 0;
}
