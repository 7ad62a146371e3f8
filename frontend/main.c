/* s1-frontend: the HTTP face of s1serve (h2o event loop, one thread). Enforces content type and
 * body size (h2o refuses an oversize body while reading; a filter gives that 413 the error shape),
 * gives each request an id and a deadline, keeps a bounded queue (full: fast 503 + Retry-After),
 * and hands jobs to preprocessors through a credit pool: the preprocessors are REQ sockets that
 * ask for work, this process is the REP side holding one context per outstanding credit. nng
 * callbacks only post events to the loop; every request and all state live on the loop thread.
 * A client that goes away is noticed (HTTP/1: its socket polled for EOF every tick, as h2o 2.2
 * stops reading while a request is processed; HTTP/2: h2o disposes the reset stream's request)
 * and its request cancelled: dropped from the queue, or named to its preprocessor in the answer
 * to that preprocessor's next STATUS, which cancels it at the executor. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <h2o.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cm_nng.h"
#include "cm_runtime.h"
#include "cm_version.h"
#include "fe_http1.h"
#include "fe_metrics.h"
#include "fe_security.h"
#include "fe_static.h"
#include "proto_job.h"
#include "proto_status.h"

#define MAX_WORKERS 256
#define WORKER_STALE_US 2000000 /* a preprocessor not heard from for 2 s is gone */
#define TICK_MS 20
#define RECV_MAX_BYTES ((size_t)64 << 20)

enum slot_phase { SLOT_RECV, SLOT_HOLD, SLOT_SEND };
enum ev_type { EV_RECV, EV_SEND_FAILED, EV_PIPE_REM };
enum pend_state { PEND_QUEUED, PEND_IN_FLIGHT };

/* One REP context: receiving, holding a credit (an ASK waiting for a job) or sending. */
struct slot {
  nng_ctx ctx;           /* REP context */
  nng_aio *aio;          /* its aio (callback on_aio) */
  enum slot_phase phase; /* touched by the loop, and by the callback only while not HOLD */
  uint32_t pipe;         /* pipe of the ASK held */
  uint64_t job_id;       /* job being sent */
  h2o_linklist_t link;   /* in g.credits while HOLD */
};

/* An event from an nng thread to the loop. */
struct ev {
  h2o_multithread_message_t super; /* queue link */
  enum ev_type type;               /* what happened */
  struct slot *slot;               /* EV_RECV: the context that received */
  nng_msg *msg;   /* EV_RECV: the message received (owned by the event) */
  uint64_t job_id; /* EV_SEND_FAILED */
  uint32_t pipe;   /* EV_PIPE_REM */
};

#define MAX_LIMITS 256 /* model names (ids and aliases) with a body limit */

/* A model name and its request body limit (limits.max_body_bytes, listed in /v1/models). */
struct body_limit {
  char *name;        /* model id or alias (heap) */
  const char *model; /* the model's id (the entry naming it owns it) */
  size_t max_body;   /* bytes */
};

struct pending;

/* Lives in the request's memory pool; h2o disposes it with the request. */
struct req_hook {
  struct pending *p; /* the request's pending, NULL once answered */
};

/* One POST waiting for its answer (heap: it may outlive its HTTP request, whose client can go). */
struct pending {
  h2o_req_t *req;      /* the HTTP request; NULL once answered or disposed by h2o */
  struct req_hook *hook; /* in req's pool while req is set */
  uint64_t job_id;     /* id of its job */
  char rid[160];       /* x-request-id (≤ 128 bytes from the client, else generated) */
  char *model_header;  /* x-model header value (heap) or NULL */
  int64_t deadline_us; /* proto_now_us clock */
  int64_t start_us;    /* monotonic, arrival */
  int64_t dispatch_us; /* monotonic, handed to a preprocessor */
  enum pend_state state; /* queued or in flight */
  uint32_t pipe;       /* preprocessor pipe while in flight */
  int cancelled;       /* in flight and its client gone: named in that preprocessor's ACKs until
                          the reply arrives, which is then dropped */
  h2o_linklist_t link; /* in g.queue or g.in_flight */
};

struct worker {
  char *id;                 /* preprocessor id */
  uint32_t pipe;            /* its pipe */
  int64_t seen_us;          /* monotonic, last message */
  struct proto_status st;   /* last STATUS (zeroed until one arrives) */
  int has_status;           /* st is set */
};

static struct {
  h2o_globalconf_t config;          /* h2o configuration (one host, one path) */
  h2o_context_t ctx;                /* the one h2o context and its event loop */
  h2o_accept_ctx_t accept_ctx;      /* for h2o_accept */
  h2o_socket_t *listener;           /* HTTP listen socket; NULL once draining */
  h2o_multithread_queue_t *mq;      /* nng threads → loop */
  h2o_multithread_receiver_t recv;  /* its receiver (on_messages) */
  h2o_timeout_t tick;               /* TICK_MS timer */
  h2o_timeout_entry_t tick_entry;   /* its entry (on_tick) */
  nng_socket pool;                  /* REP socket the preprocessors dial */
  struct slot *slots;               /* [n_slots] REP contexts */
  int n_slots;                      /* = --contexts */
  h2o_linklist_t credits;           /* slots holding a credit */
  h2o_linklist_t queue;             /* pending, waiting for a credit */
  h2o_linklist_t in_flight;         /* pending, sent to a preprocessor */
  size_t queue_len, queue_max;      /* queued now, and the bound (--queue) */
  size_t max_body;                  /* body cap over every model's limit, bytes (--max-body) */
  struct body_limit limits[MAX_LIMITS]; /* model ids and aliases → body limit (from STATUS) */
  int n_limits;                     /* entries in limits */
  int n_limit_models;               /* distinct models among them */
  size_t max_model_body;            /* the largest model limit (0: none known yet) */
  int64_t timeout_us;               /* request deadline after arrival (--timeout-ms) */
  uint64_t next_job;                /* last job id handed out */
  struct worker workers[MAX_WORKERS]; /* known preprocessors */
  int n_workers;                    /* entries in workers */
  struct fe_metrics metrics;        /* /metrics */
  struct fe_security sec;           /* origin rule, bearer token */
  int listen_loopback;              /* --listen is a 127.0.0.0/8 address */
  char *default_pool;               /* the default --pool URL (heap), NULL when given */
  volatile sig_atomic_t term;       /* SIGTERM seen (signal handler) */
  int draining;                     /* admission stopped */
} g;

static int64_t mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void on_term(int sig) {
  (void)sig;
  g.term = 1;
}

/* ---- HTTP answers --------------------------------------------------------------------------- */

static const char *reason_of(int status) {
  switch (status) {
  case 200: return "OK";
  case 204: return "No Content";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 413: return "Payload Too Large";
  case 415: return "Unsupported Media Type";
  case 417: return "Expectation Failed";
  case 422: return "Unprocessable Entity";
  case 431: return "Request Header Fields Too Large";
  case 499: return "Client Closed Request";
  case 500: return "Internal Server Error";
  case 503: return "Service Unavailable";
  case 501: return "Not Implemented";
  case 504: return "Gateway Timeout";
  default: return "Status";
  }
}

static void add_hdr(h2o_req_t *req, const char *name, const char *value, size_t n) {
  h2o_iovec_t v = h2o_strdup(&req->pool, value, n);
  h2o_add_header_by_str(&req->pool, &req->res.headers, name, strlen(name), 1, NULL, v.base, v.len);
}

/* The model revision every connected preprocessor reports, for answers that no executor made
 * (errors before routing, /health, /v1/models); NULL when none is known or revisions differ. */
static const char *served_revision(void) {
  const char *rev = NULL;
  for (int i = 0; i < g.n_workers; i++)
    for (uint32_t k = 0; g.workers[i].has_status && k < g.workers[i].st.n_models; k++) {
      const char *r = g.workers[i].st.models[k].revision;
      if (!r)
        continue;
      if (rev && strcmp(rev, r) != 0)
        return NULL;
      rev = r;
    }
  return rev;
}

/* Sends status + JSON body with the headers of wire.md. body is copied. numerics: the mode that
 * computed the answer ("fp32" / "bf16"), as x-numerics and a Server-Timing entry; NULL when no
 * executor did. */
static void respond(h2o_req_t *req, int status, const char *body, size_t n, const char *rid,
                    const struct proto_timings *t, const char *revision, int retry_after_s,
                    const char *numerics) {
  req->res.status = status;
  req->res.reason = reason_of(status);
  h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                 H2O_STRLIT("application/json"));
  if (rid)
    add_hdr(req, "x-request-id", rid, strlen(rid));
  /* Answers are per request and always JSON (open_jev.md 2.3 lists both headers). */
  add_hdr(req, "cache-control", "no-store", 8);
  add_hdr(req, "x-content-type-options", "nosniff", 7);
  char st[400];
  struct proto_timings z = {0};
  if (!t)
    t = &z;
  /* the executor's part of execute: its queue, vision, prefix, rows, readouts and heads, and the
   * time it spent on other requests' work while this one was in flight */
  int k = snprintf(st, sizeof(st), "queue;dur=%.3f, preprocess;dur=%.3f, execute;dur=%.3f, "
                   "finish;dur=%.3f, ex-queue;dur=%.3f, vision;dur=%.3f, prefix;dur=%.3f, "
                   "rows;dur=%.3f, heads;dur=%.3f, ex-wait;dur=%.3f",
                   (double)t->queue_us / 1000.0, (double)t->preprocess_us / 1000.0,
                   (double)t->execute_us / 1000.0, (double)t->finish_us / 1000.0,
                   (double)t->ex_queue_us / 1000.0, (double)t->vision_us / 1000.0,
                   (double)t->prefix_us / 1000.0, (double)t->rows_us / 1000.0,
                   (double)t->heads_us / 1000.0, (double)t->wait_us / 1000.0);
  /* the numerics as a Server-Timing metric with a description (RFC: token, no duration) */
  if (numerics && strlen(numerics) < 16 &&
      strspn(numerics, "abcdefghijklmnopqrstuvwxyz0123456789-") == strlen(numerics)) {
    k += snprintf(st + k, sizeof(st) - (size_t)k, ", numerics;desc=%s", numerics);
    add_hdr(req, "x-numerics", numerics, strlen(numerics));
  }
  add_hdr(req, "server-timing", st, (size_t)k);
  if (!revision)
    revision = served_revision();
  if (revision)
    add_hdr(req, "x-model-revision", revision, strlen(revision));
  if (retry_after_s > 0) {
    k = snprintf(st, sizeof(st), "%d", retry_after_s);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL,
                   h2o_strdup(&req->pool, st, (size_t)k).base, (size_t)k);
  }
  req->res.content_length = n;
  h2o_send_inline(req, body, n);
}

/* The error shape of wire.md, {"error": {"type", "message"}}, JSON-escaped by json-c. */
static void respond_shape(h2o_req_t *req, int status, const char *type, const char *message,
                          const char *rid, int retry_after_s) {
  json_object *root = json_object_new_object(), *err = json_object_new_object();
  json_object_object_add(err, "type", json_object_new_string(type));
  json_object_object_add(err, "message", json_object_new_string(message ? message : type));
  json_object_object_add(root, "error", err);
  size_t n = 0;
  const char *s = json_object_to_json_string_length(root, JSON_C_TO_STRING_PLAIN |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE, &n);
  respond(req, status, s, n, rid, NULL, NULL, retry_after_s, NULL);
  json_object_put(root);
}

/* The error answer for a code (cm_error_http is the one mapping). */
static void respond_error(h2o_req_t *req, int code, const char *message, const char *rid,
                          int retry_after_s) {
  const char *type = NULL;
  int status = cm_error_http(code, &type);
  if (!type)
    type = "internal", status = 500;
  respond_shape(req, status, type, message, rid, retry_after_s);
}

static void respond_plain_error(h2o_req_t *req, int status, const char *type, const char *message,
                                const char *rid) {
  respond_shape(req, status, type, message, rid, 0);
}

static char *request_id(h2o_req_t *req);
static void new_request_id(char *buf, size_t cap);

/* A 404 (no route at the path) or 405 (the route takes other methods; `allow` names them, NULL
 * for a 404), counted in /metrics whatever the path: a client sending to the wrong place shows
 * there. */
static void respond_route_error(h2o_req_t *req, int status, const char *allow, const char *rid) {
  fe_metrics_count_status(&g.metrics, status);
  if (allow)
    add_hdr(req, "allow", allow, strlen(allow));
  char msg[96] = "path: no such route (see GET /openapi.json)";
  if (status != 404)
    snprintf(msg, sizeof(msg), "method: %.*s is not allowed here; use %s",
             (int)(req->method.len > 16 ? 16 : req->method.len), req->method.base, allow);
  respond_plain_error(req, status, status == 404 ? "not_found" : "method_not_allowed", msg, rid);
}

/* ---- h2o's own answers and refused framing ------------------------------------------------ */

/* h2o answers a few requests itself, as text/plain: an oversize body (413, refused while
 * reading), an Expect other than 100-continue (417), a path outside every route (404). This
 * filter gives those answers the error shape and headers of wire.md; every other answer (ours
 * carry x-request-id) passes through. It also tells fe_http1 that a response started, so the
 * connection's framer is put back in front once h2o re-arms reading. */
struct h2o_error_shape {
  int status;        /* h2o's status */
  const char *body;  /* the wire.md error body */
};
static const struct h2o_error_shape h2o_errors[] = {
    {400, "{\"error\":{\"type\":\"bad_request\",\"message\":\"request: refused by the HTTP layer\"}}"},
    {404, "{\"error\":{\"type\":\"not_found\",\"message\":\"path: no such route (see GET "
          "/openapi.json)\"}}"},
    {413, "{\"error\":{\"type\":\"too_large\",\"message\":\"body: larger than the limit\"}}"},
    {417, "{\"error\":{\"type\":\"expectation_failed\",\"message\":\"Expect: only 100-continue "
          "is supported\"}}"},
};
static const char h2o_error_other[] =
    "{\"error\":{\"type\":\"internal\",\"message\":\"the HTTP layer failed\"}}";

struct shape_ostream {
  h2o_ostream_t super; /* h2o's ostream */
  const char *body;    /* the body sent instead of h2o's */
};

static void shape_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs, size_t n,
                       h2o_send_state_t state) {
  (void)bufs, (void)n;
  if (h2o_send_state_is_in_progress(state)) {
    h2o_ostream_send_next(self, req, NULL, 0, state);
    return;
  }
  const char *body = ((struct shape_ostream *)self)->body;
  h2o_iovec_t b = h2o_iovec_init(body, strlen(body));
  h2o_ostream_send_next(self, req, &b, 1, state);
}

static void on_setup_ostream(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot) {
  (void)self;
  fe_http1_response_started(req);
  if (req->res.status >= 400 &&
      h2o_find_header_by_str(&req->res.headers, H2O_STRLIT("x-request-id"), -1) < 0) {
    const char *body = h2o_error_other;
    for (size_t k = 0; k < sizeof(h2o_errors) / sizeof(*h2o_errors); k++)
      if (h2o_errors[k].status == req->res.status)
        body = h2o_errors[k].body;
    ssize_t i = h2o_find_header(&req->res.headers, H2O_TOKEN_CONTENT_TYPE, -1);
    if (i >= 0)
      req->res.headers.entries[i].value = h2o_iovec_init(H2O_STRLIT("application/json"));
    req->res.content_length = strlen(body);
    char *rid = request_id(req);
    add_hdr(req, "x-request-id", rid, strlen(rid));
    add_hdr(req, "cache-control", "no-store", 8);
    add_hdr(req, "x-content-type-options", "nosniff", 7);
    add_hdr(req, "server-timing", H2O_STRLIT("queue;dur=0.000, preprocess;dur=0.000, "
                                             "execute;dur=0.000, finish;dur=0.000"));
    fe_metrics_count_status(&g.metrics, req->res.status);
    struct shape_ostream *o = (struct shape_ostream *)h2o_add_ostream(req, sizeof(*o), slot);
    o->super.do_send = shape_send;
    o->body = body;
    slot = &o->super.next;
  }
  h2o_setup_next_ostream(req, slot);
}

/* The answer to a request the framer refused (fe_http1_render_fn): the wire.md shape, written
 * by fe_http1 directly on the connection, which then closes. */
static int render_refusal(const struct fe_framing_refusal *r, char **ret_bytes, size_t *ret_len) {
  json_object *root = json_object_new_object(), *err = json_object_new_object();
  json_object_object_add(err, "type", json_object_new_string(r->type));
  json_object_object_add(err, "message", json_object_new_string(r->message));
  json_object_object_add(root, "error", err);
  size_t n = 0;
  const char *body = json_object_to_json_string_length(root, JSON_C_TO_STRING_PLAIN |
                                                       JSON_C_TO_STRING_NOSLASHESCAPE, &n);
  char rid[FE_FRAMING_MAX_ID_BYTES + 1];
  if (r->request_id[0])
    snprintf(rid, sizeof(rid), "%s", r->request_id);
  else
    new_request_id(rid, sizeof(rid));
  const char *rev = served_revision();
  size_t cap = n + 640 + (rev ? strlen(rev) : 0);
  char *out = malloc(cap);
  int k = out ? snprintf(out, cap, "HTTP/1.1 %d %s\r\nserver: s1serve\r\nconnection: close\r\n"
                         "content-type: application/json\r\ncontent-length: %zu\r\n"
                         "x-request-id: %s\r\ncache-control: no-store\r\n"
                         "x-content-type-options: nosniff\r\nserver-timing: queue;dur=0.000, "
                         "preprocess;dur=0.000, execute;dur=0.000, finish;dur=0.000\r\n"
                         "%s%s%s\r\n%s", r->status, reason_of(r->status), n, rid,
                         rev ? "x-model-revision: " : "", rev ? rev : "", rev ? "\r\n" : "", body)
              : -1;
  json_object_put(root);
  if (k < 0 || (size_t)k >= cap) {
    free(out);
    return -ENOMEM;
  }
  fe_metrics_count_status(&g.metrics, r->status);
  *ret_bytes = out;
  *ret_len = (size_t)k;
  return 0;
}

/* ---- preprocessors and credits -------------------------------------------------------------- */

static struct worker *worker_by_id(const char *id, uint32_t pipe) {
  for (int i = 0; i < g.n_workers; i++)
    if (strcmp(g.workers[i].id, id) == 0) {
      g.workers[i].pipe = pipe;
      return &g.workers[i];
    }
  if (g.n_workers == MAX_WORKERS)
    return NULL;
  struct worker *w = &g.workers[g.n_workers];
  memset(w, 0, sizeof(*w));
  if (!(w->id = strdup(id)))
    return NULL;
  w->pipe = pipe;
  g.n_workers++;
  return w;
}

static void update_limits(void);

static void worker_remove(int i) {
  free(g.workers[i].id);
  proto_status_fini(&g.workers[i].st);
  g.workers[i] = g.workers[--g.n_workers];
  update_limits();
}

/* Health of the pool: 0 when at least one preprocessor serves (reports READY), else the code and
 * reason: not_ready while none is connected or all are starting, unavailable when the connected
 * ones have no executor left. A preprocessor joining later (still starting) changes nothing. */
static int pool_state(const char **ret_reason) {
  int any = 0, starting = 0, draining = 0, ready = 0;
  const char *why = NULL;
  for (int i = 0; i < g.n_workers; i++) {
    if (!g.workers[i].has_status)
      continue;
    any = 1;
    const struct proto_status *s = &g.workers[i].st;
    if (s->state == PROTO_STATE_STARTING)
      starting = 1;
    else if (s->state == PROTO_STATE_DRAINING)
      draining = 1;
    else if (s->state == PROTO_STATE_READY)
      ready++;
    else
      why = s->reason;
  }
  if (ready) {
    *ret_reason = NULL;
    return 0;
  }
  if (!any || ((starting || draining) && !why)) {
    *ret_reason = !any ? "no preprocessor connected"
                  : starting ? "warm-up not finished"
                             : "the preprocessors are shutting down (draining)";
    return -CM_ENOTREADY;
  }
  *ret_reason = why ? why : "no executor available";
  return -CM_EUNAVAILABLE;
}

static void slot_recv(struct slot *s) {
  s->phase = SLOT_RECV;
  nng_ctx_recv(s->ctx, s->aio);
}

static void slot_send(struct slot *s, const struct proto_bytes *b) {
  nng_msg *m = NULL;
  if (nng_msg_alloc(&m, 0) != 0 || nng_msg_append(m, b->data, b->len) != 0) {
    nng_msg_free(m);
    slot_recv(s);
    return;
  }
  s->phase = SLOT_SEND;
  nng_aio_set_msg(s->aio, m);
  nng_ctx_send(s->ctx, s->aio);
}

/* The HTTP request of p, detached from p (it is answered now); NULL when h2o disposed it. */
static h2o_req_t *take_req(struct pending *p) {
  h2o_req_t *req = p->req;
  if (p->hook)
    p->hook->p = NULL;
  p->hook = NULL;
  p->req = NULL;
  return req;
}

static void pending_free(struct pending *p) {
  take_req(p);
  free(p->model_header);
  free(p);
}

/* Finishes a pending request with a reply from a preprocessor. */
static void answer(struct pending *p, const struct proto_reply *rp) {
  h2o_linklist_unlink(&p->link);
  g.metrics.in_flight--;
  if (p->cancelled) { /* its client has gone: counted when that was seen; the reply is dropped */
    pending_free(p);
    return;
  }
  struct proto_timings t = rp->timings;
  int64_t now = mono_us();
  t.queue_us = p->dispatch_us - p->start_us;
  fe_metrics_count_status(&g.metrics, rp->status);
  fe_hist_observe(&g.metrics.stage[FE_STAGE_QUEUE], t.queue_us);
  fe_hist_observe(&g.metrics.stage[FE_STAGE_PREPROCESS], t.preprocess_us);
  fe_hist_observe(&g.metrics.stage[FE_STAGE_EXECUTE], t.execute_us);
  fe_hist_observe(&g.metrics.stage[FE_STAGE_TOTAL], now - p->start_us);
  g.metrics.tokens += rp->tokens;
  g.metrics.decisions += rp->decisions;
  h2o_req_t *req = take_req(p);
  if (req)
    respond(req, rp->status, rp->body, rp->n_body, p->rid, &t, rp->model_revision, 0,
            rp->numerics);
  pending_free(p);
}

static void fail_pending(struct pending *p, int code, const char *message) {
  if (p->state == PEND_QUEUED)
    g.queue_len--, g.metrics.queue_depth--;
  else
    g.metrics.in_flight--;
  h2o_linklist_unlink(&p->link);
  h2o_req_t *req = take_req(p);
  if (!p->cancelled) {
    fe_metrics_count_status(&g.metrics, cm_error_http(code, NULL));
    fe_hist_observe(&g.metrics.stage[FE_STAGE_TOTAL], mono_us() - p->start_us);
  }
  if (req)
    respond_error(req, code, message, p->rid, 0);
  pending_free(p);
}

/* p's client has gone (seen by client_gone, or h2o disposed its request: then p->req is NULL).
 * Queued: dropped. In flight: kept until its preprocessor's reply, named in every ACK to that
 * preprocessor meanwhile. Counted once, as a 499; a request still held gets the 499 answer so
 * that h2o closes the connection. */
static void cancel_pending(struct pending *p) {
  if (p->cancelled)
    return;
  fe_metrics_count_status(&g.metrics, 499);
  fe_hist_observe(&g.metrics.stage[FE_STAGE_TOTAL], mono_us() - p->start_us);
  h2o_req_t *req = take_req(p);
  if (req)
    respond_error(req, -CM_ECANCELLED, "the client has gone", p->rid, 0);
  if (p->state == PEND_QUEUED) {
    g.metrics.cancelled[FE_CANCEL_QUEUE]++;
    g.queue_len--, g.metrics.queue_depth--;
    h2o_linklist_unlink(&p->link);
    pending_free(p);
    return;
  }
  g.metrics.cancelled[FE_CANCEL_IN_FLIGHT]++;
  p->cancelled = 1;
}

/* h2o disposes a request's pool: when its pending still holds it, the request vanished before
 * it was answered (an HTTP/2 stream reset, a closed connection). */
static void on_req_dispose(void *arg) {
  struct req_hook *h = arg;
  struct pending *p = h->p;
  if (!p)
    return;
  p->hook = NULL;
  p->req = NULL;
  cancel_pending(p);
}

/* Whether the client of an HTTP/1 request has closed its connection (or half-closed it: as
 * nginx does, EOF counts as gone; a pipelined next request does not). h2o 2.2 stops reading the
 * socket while a request is processed, so the EOF waits in the kernel: poll it, peek one byte.
 * HTTP/2 connections are read by h2o throughout (on_req_dispose sees those). */
static int client_gone(h2o_req_t *req) {
  if (req->version >= 0x200 || !req->conn->callbacks->get_socket)
    return 0;
  h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
  int fd = sock ? h2o_socket_get_fd(sock) : -1;
  if (fd < 0)
    return 0;
  struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
  if (poll(&pf, 1, 0) <= 0)
    return 0;
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Every tick: cancels the requests whose clients have gone. */
static void check_clients(void) {
  h2o_linklist_t *lists[2] = {&g.queue, &g.in_flight};
  for (int k = 0; k < 2; k++)
    for (h2o_linklist_t *l = lists[k]->next; l != lists[k];) {
      struct pending *p = H2O_STRUCT_FROM_MEMBER(struct pending, link, l);
      l = l->next;
      if (p->req && !p->cancelled && client_gone(p->req))
        cancel_pending(p);
    }
}

/* Hands queued requests to held credits while both exist. */
static void dispatch(void) {
  while (!h2o_linklist_is_empty(&g.queue) && !h2o_linklist_is_empty(&g.credits)) {
    struct pending *p = H2O_STRUCT_FROM_MEMBER(struct pending, link, g.queue.next);
    struct slot *s = H2O_STRUCT_FROM_MEMBER(struct slot, link, g.credits.next);
    h2o_linklist_unlink(&s->link);
    g.metrics.credits--;
    struct proto_job job = {.job_id = p->job_id, .request_id = p->rid,
                            .deadline_us = p->deadline_us, .model = p->model_header,
                            .body = p->req->entity.base, .n_body = p->req->entity.len};
    struct proto_bytes b = {0};
    h2o_linklist_unlink(&p->link);
    g.queue_len--;
    g.metrics.queue_depth--;
    if (proto_job_encode(&job, &b) != 0) {
      g.metrics.in_flight++;
      p->state = PEND_IN_FLIGHT;
      h2o_linklist_insert(&g.in_flight, &p->link);
      fail_pending(p, -CM_EINTERNAL, "the request could not be handed to a preprocessor");
      h2o_linklist_insert(&g.credits, &s->link);
      g.metrics.credits++;
      continue;
    }
    p->state = PEND_IN_FLIGHT;
    p->pipe = s->pipe;
    p->dispatch_us = mono_us();
    h2o_linklist_insert(&g.in_flight, &p->link);
    g.metrics.in_flight++;
    s->job_id = p->job_id;
    slot_send(s, &b);
    proto_bytes_free(&b);
  }
}

static struct pending *find_in_flight(uint64_t job_id) {
  for (h2o_linklist_t *l = g.in_flight.next; l != &g.in_flight; l = l->next) {
    struct pending *p = H2O_STRUCT_FROM_MEMBER(struct pending, link, l);
    if (p->job_id == job_id)
      return p;
  }
  return NULL;
}

static void add_limit(const char *name, const char *model, size_t max_body) {
  for (int i = 0; i < g.n_limits; i++)
    if (strcmp(g.limits[i].name, name) == 0)
      return;
  if (g.n_limits == MAX_LIMITS || !(g.limits[g.n_limits].name = strdup(name)))
    return;
  g.limits[g.n_limits].model = model ? model : g.limits[g.n_limits].name;
  g.limits[g.n_limits++].max_body = max_body;
}

/* The body limits of every model the preprocessors serve (their /v1/models entries carry
 * max_body_bytes); h2o's own limit follows the largest, capped by --max-body. */
static void update_limits(void) {
  for (int i = 0; i < g.n_limits; i++)
    free(g.limits[i].name);
  g.n_limits = g.n_limit_models = 0;
  g.max_model_body = 0;
  for (int w = 0; w < g.n_workers; w++)
    for (uint32_t k = 0; g.workers[w].has_status && k < g.workers[w].st.n_models; k++) {
      json_object *d = json_tokener_parse(g.workers[w].st.models[k].describe), *v = NULL, *al;
      int64_t lim = d && json_object_object_get_ex(d, "max_body_bytes", &v)
                        ? json_object_get_int64(v) : 0;
      const char *id = g.workers[w].st.models[k].id;
      size_t max_body = lim > 0 && (uint64_t)lim < g.max_body ? (size_t)lim : g.max_body;
      int known = 0;
      for (int i = 0; i < g.n_limits; i++)
        known |= strcmp(g.limits[i].name, id) == 0;
      if (!known) {
        int first = g.n_limits;
        add_limit(id, NULL, max_body);
        if (g.n_limits > first) {
          g.n_limit_models++;
          const char *model = g.limits[first].name;
          if (json_object_object_get_ex(d, "aliases", &al) && json_object_is_type(al, json_type_array))
            for (size_t a = 0; a < json_object_array_length(al); a++) {
              const char *name = json_object_get_string(json_object_array_get_idx(al, a));
              if (name)
                add_limit(name, model, max_body);
            }
        }
        if (max_body > g.max_model_body)
          g.max_model_body = max_body;
      }
      json_object_put(d);
    }
  /* h2o refuses a chunked body that reaches its limit (a Content-Length equal to it passes):
   * one byte of slack lets exactly the limit through both ways; handle_post refuses the rest */
  g.config.max_request_entity_size = (g.max_model_body ? g.max_model_body : g.max_body) + 1;
}

/* The body limit of one request: its x-model header's model, the only model, or the largest
 * (the preprocessor checks the model its body names). *ret_model: the model's id or NULL. */
static size_t request_body_limit(const char *model_header, const char **ret_model) {
  *ret_model = NULL;
  if (!g.n_limits)
    return g.max_body;
  for (int i = 0; model_header && i < g.n_limits; i++)
    if (strcmp(g.limits[i].name, model_header) == 0) {
      *ret_model = g.limits[i].model;
      return g.limits[i].max_body;
    }
  if (g.n_limit_models == 1) {
    *ret_model = g.limits[0].model;
    return g.limits[0].max_body;
  }
  return g.max_model_body;
}

/* Answers a REP context with ACK: the preprocessor's credit ends without a job (it drains). */
static void slot_ack(struct slot *s) {
  struct proto_bytes ack = {0};
  s->job_id = 0;
  if (proto_simple_encode(PROTO_KIND_ACK, &ack) == 0)
    slot_send(s, &ack);
  else
    slot_recv(s);
  proto_bytes_free(&ack);
}

/* A preprocessor reported DRAINING: the credits it holds go back to it (ACK), so its workers end
 * once their jobs are answered. */
static void release_credits(uint32_t pipe) {
  for (int i = 0; i < g.n_slots; i++) {
    struct slot *s = &g.slots[i];
    if (s->phase == SLOT_HOLD && s->pipe == pipe) {
      h2o_linklist_unlink(&s->link);
      g.metrics.credits--;
      slot_ack(s);
    }
  }
}

static void on_recv_event(struct slot *s, nng_msg *m) {
  enum proto_kind kind;
  uint32_t pipe = (uint32_t)nng_pipe_id(nng_msg_get_pipe(m));
  const void *d = nng_msg_body(m);
  size_t n = nng_msg_len(m);
  struct cm_diag diag = {0};
  if (proto_peek(d, n, &kind, &diag) != 0) {
    fprintf(stderr, "s1-frontend: refused a message: %s\n", diag.msg ? diag.msg : "?");
    cm_diag_fini(&diag);
    slot_recv(s);
    return;
  }
  if (kind == PROTO_KIND_STATUS) {
    struct proto_status st = {0};
    struct proto_bytes ack = {0};
    if (proto_status_decode(d, n, &st, &diag) == 0) {
      struct worker *w = worker_by_id(st.worker, pipe);
      if (w) {
        proto_status_fini(&w->st);
        w->st = st;
        w->has_status = 1;
        w->seen_us = mono_us();
        if (w->st.state == PROTO_STATE_DRAINING)
          release_credits(pipe);
        update_limits();
      } else {
        proto_status_fini(&st);
      }
    }
    cm_diag_fini(&diag);
    /* the answer names this preprocessor's jobs whose clients have gone */
    uint64_t ids[256];
    struct proto_ack a = {.cancel = ids};
    for (h2o_linklist_t *l = g.in_flight.next; l != &g.in_flight && a.n_cancel < 256;
         l = l->next) {
      struct pending *p = H2O_STRUCT_FROM_MEMBER(struct pending, link, l);
      if (p->cancelled && p->pipe == pipe)
        ids[a.n_cancel++] = p->job_id;
    }
    if (proto_ack_encode(&a, &ack) == 0)
      slot_send(s, &ack);
    else
      slot_recv(s);
    proto_bytes_free(&ack);
    return;
  }
  if (kind != PROTO_KIND_ASK) {
    slot_recv(s);
    return;
  }
  struct proto_ask ask = {0};
  if (proto_ask_decode(d, n, &ask, &diag) != 0) {
    fprintf(stderr, "s1-frontend: refused an ask: %s\n", diag.msg ? diag.msg : "?");
    cm_diag_fini(&diag);
    slot_recv(s);
    return;
  }
  struct worker *w = worker_by_id(ask.worker, pipe);
  if (w)
    w->seen_us = mono_us();
  if (ask.has_reply) {
    struct pending *p = find_in_flight(ask.reply.job_id);
    if (p)
      answer(p, &ask.reply);
  }
  bool no_credit = ask.last || (w && w->has_status && w->st.state == PROTO_STATE_DRAINING);
  proto_ask_fini(&ask);
  if (no_credit) { /* a draining preprocessor: its reply, then ACK instead of a job */
    slot_ack(s);
    return;
  }
  s->phase = SLOT_HOLD;
  s->pipe = pipe;
  h2o_linklist_insert(&g.credits, &s->link);
  g.metrics.credits++;
  dispatch();
}

static void on_pipe_gone(uint32_t pipe) {
  for (int i = 0; i < g.n_slots; i++) {
    struct slot *s = &g.slots[i];
    if (s->phase == SLOT_HOLD && s->pipe == pipe) {
      h2o_linklist_unlink(&s->link);
      g.metrics.credits--;
      slot_recv(s);
    }
  }
  for (h2o_linklist_t *l = g.in_flight.next; l != &g.in_flight;) {
    struct pending *p = H2O_STRUCT_FROM_MEMBER(struct pending, link, l);
    l = l->next;
    if (p->pipe == pipe)
      fail_pending(p, -CM_EINTERNAL, "the preprocessor handling the request went away");
  }
  for (int i = 0; i < g.n_workers;)
    if (g.workers[i].pipe == pipe)
      worker_remove(i);
    else
      i++;
}

static void on_messages(h2o_multithread_receiver_t *r, h2o_linklist_t *messages) {
  (void)r;
  while (!h2o_linklist_is_empty(messages)) {
    struct ev *e = H2O_STRUCT_FROM_MEMBER(struct ev, super.link, messages->next);
    h2o_linklist_unlink(&e->super.link);
    switch (e->type) {
    case EV_RECV: on_recv_event(e->slot, e->msg); nng_msg_free(e->msg); break;
    case EV_SEND_FAILED: {
      struct pending *p = find_in_flight(e->job_id);
      if (p)
        fail_pending(p, -CM_EINTERNAL, "the request could not be handed to a preprocessor");
      break;
    }
    case EV_PIPE_REM: on_pipe_gone(e->pipe); break;
    }
    free(e);
  }
}

static void post(struct ev *e) {
  h2o_multithread_send_message(&g.recv, &e->super);
}

/* nng thread: an operation on a REP context finished. */
static void on_aio(void *arg) {
  struct slot *s = arg;
  int rv = nng_aio_result(s->aio);
  if (s->phase == SLOT_SEND) {
    uint64_t job = s->job_id;
    s->job_id = 0;
    if (rv != 0) {
      nng_msg_free(nng_aio_get_msg(s->aio));
      struct ev *e = calloc(1, sizeof(*e));
      if (e && job) {
        e->type = EV_SEND_FAILED;
        e->job_id = job;
        post(e);
      } else {
        free(e);
      }
    }
    if (rv != NNG_ECLOSED)
      slot_recv(s);
    return;
  }
  if (rv != 0) {
    if (rv != NNG_ECLOSED)
      slot_recv(s);
    return;
  }
  struct ev *e = calloc(1, sizeof(*e));
  if (!e) {
    nng_msg_free(nng_aio_get_msg(s->aio));
    slot_recv(s);
    return;
  }
  e->type = EV_RECV;
  e->slot = s;
  e->msg = nng_aio_get_msg(s->aio);
  post(e);
}

static void on_pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg) {
  (void)arg;
  if (ev != NNG_PIPE_EV_REM_POST)
    return;
  struct ev *e = calloc(1, sizeof(*e));
  if (!e)
    return;
  e->type = EV_PIPE_REM;
  e->pipe = (uint32_t)nng_pipe_id(p);
  post(e);
}

/* Every TICK_MS: expire deadlines, forget silent preprocessors, handle SIGTERM. */
static void on_tick(h2o_timeout_entry_t *entry) {
  (void)entry;
  int64_t now = proto_now_us(), mono = mono_us();
  check_clients();
  for (h2o_linklist_t *l = g.queue.next; l != &g.queue;) {
    struct pending *p = H2O_STRUCT_FROM_MEMBER(struct pending, link, l);
    l = l->next;
    if (now >= p->deadline_us)
      fail_pending(p, -CM_ETIMEOUT, "the request deadline passed in the queue");
  }
  /* in flight: the preprocessor answers 504 itself; this catches a lost answer */
  for (h2o_linklist_t *l = g.in_flight.next; l != &g.in_flight;) {
    struct pending *p = H2O_STRUCT_FROM_MEMBER(struct pending, link, l);
    l = l->next;
    if (now >= p->deadline_us + 2000000)
      fail_pending(p, -CM_ETIMEOUT, "the request deadline passed");
  }
  for (int i = 0; i < g.n_workers;)
    if (mono - g.workers[i].seen_us > WORKER_STALE_US && g.workers[i].has_status)
      worker_remove(i);
    else
      i++;
  g.metrics.preprocessors = (uint64_t)g.n_workers;
  g.metrics.preprocessors_ready = 0;
  for (int i = 0; i < g.n_workers; i++)
    g.metrics.preprocessors_ready += g.workers[i].has_status &&
                                     g.workers[i].st.state == PROTO_STATE_READY;
  if (g.term && !g.draining) {
    g.draining = 1;
    fprintf(stderr, "s1-frontend: SIGTERM: admission stopped, draining %zu queued, %llu in "
            "flight\n", g.queue_len, (unsigned long long)g.metrics.in_flight);
    if (g.listener) {
      h2o_socket_read_stop(g.listener);
      h2o_socket_close(g.listener);
      g.listener = NULL;
    }
  }
  h2o_timeout_link(g.ctx.loop, &g.tick, &g.tick_entry);
}

/* ---- routes --------------------------------------------------------------------------------- */

/* A generated request id, 39 characters, into buf (≥ 40 bytes). */
static void new_request_id(char *buf, size_t cap) {
  static uint64_t counter;
  uint8_t r[8];
  uint64_t x = (uint64_t)proto_now_us() ^ ((uint64_t)getpid() << 40) ^
               (++counter * 0x9e3779b97f4a7c15ull);
  memcpy(r, &x, 8);
  snprintf(buf, cap, "%02x%02x%02x%02x%02x%02x%02x%02x-%llu", r[0], r[1], r[2], r[3], r[4], r[5],
           r[6], r[7], (unsigned long long)counter);
}

static char *request_id(h2o_req_t *req) {
  ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-request-id"), -1);
  if (i >= 0) {
    h2o_iovec_t v = req->headers.entries[i].value;
    int ok = v.len > 0 && v.len <= FE_FRAMING_MAX_ID_BYTES;
    for (size_t k = 0; ok && k < v.len; k++)
      ok = v.base[k] > 0x20 && v.base[k] < 0x7f;
    if (ok)
      return h2o_strdup(&req->pool, v.base, v.len).base;
  }
  char *s = h2o_mem_alloc_pool(&req->pool, 40);
  new_request_id(s, 40);
  return s;
}

static int is_json_type(h2o_req_t *req) {
  ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1);
  if (i < 0)
    return 0;
  h2o_iovec_t v = req->headers.entries[i].value;
  static const char want[] = "application/json";
  size_t n = sizeof(want) - 1;
  if (v.len < n || strncasecmp(v.base, want, n) != 0)
    return 0;
  return v.len == n || v.base[n] == ';' || v.base[n] == ' ';
}

static void handle_post(h2o_req_t *req, char *rid) {
  if (!is_json_type(req)) {
    fe_metrics_count_status(&g.metrics, 415);
    respond_error(req, -CM_EMEDIA, "Content-Type: must be application/json", rid, 0);
    return;
  }
  ssize_t mh = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-model"), -1);
  char *model_header = mh >= 0 && req->headers.entries[mh].value.len <= PROTO_MAX_ID_BYTES
                           ? h2o_strdup(&req->pool, req->headers.entries[mh].value.base,
                                        req->headers.entries[mh].value.len).base
                           : NULL;
  const char *limit_model = NULL;
  size_t limit = request_body_limit(model_header, &limit_model);
  if (req->entity.len > limit) {
    fe_metrics_count_status(&g.metrics, 413);
    char msg[PROTO_MAX_ID_BYTES + 96];
    if (limit_model)
      snprintf(msg, sizeof(msg), "body: %zu bytes; %s accepts at most %zu", req->entity.len,
               limit_model, limit);
    else
      snprintf(msg, sizeof(msg), "body: %zu bytes, larger than the limit %zu", req->entity.len,
               limit);
    respond_error(req, -CM_ETOOLARGE, msg, rid, 0);
    return;
  }
  const char *reason = NULL;
  int code = g.draining ? -CM_EUNAVAILABLE : pool_state(&reason);
  if (g.draining)
    reason = "the server is shutting down";
  if (code) {
    fe_metrics_count_status(&g.metrics, 503);
    respond_error(req, code, reason, rid, code == -CM_ENOTREADY ? 1 : 0);
    return;
  }
  if (h2o_linklist_is_empty(&g.credits) && g.queue_len >= g.queue_max) {
    fe_metrics_count_status(&g.metrics, 503);
    respond_error(req, -CM_EOVERLOADED, "the request queue is full; retry later", rid, 1);
    return;
  }
  if (client_gone(req)) { /* sent and left (fire and forget): no work, no queue slot */
    g.metrics.cancelled[FE_CANCEL_ADMISSION]++;
    fe_metrics_count_status(&g.metrics, 499);
    respond_error(req, -CM_ECANCELLED, "the client has gone", rid, 0);
    return;
  }
  struct pending *p = calloc(1, sizeof(*p));
  struct req_hook *hook = h2o_mem_alloc_shared(&req->pool, sizeof(*hook), on_req_dispose);
  if (!p) {
    hook->p = NULL;
    fe_metrics_count_status(&g.metrics, 500);
    respond_error(req, -ENOMEM, "out of memory", rid, 0);
    return;
  }
  hook->p = p;
  p->hook = hook;
  p->req = req;
  snprintf(p->rid, sizeof(p->rid), "%s", rid);
  p->job_id = ++g.next_job;
  p->start_us = mono_us();
  p->dispatch_us = p->start_us;
  p->deadline_us = proto_now_us() + g.timeout_us;
  if (model_header && !(p->model_header = strdup(model_header))) {
    pending_free(p);
    fe_metrics_count_status(&g.metrics, 500);
    respond_error(req, -ENOMEM, "out of memory", rid, 0);
    return;
  }
  p->state = PEND_QUEUED;
  h2o_linklist_insert(&g.queue, &p->link);
  g.queue_len++;
  g.metrics.queue_depth++;
  dispatch();
}

static void handle_health(h2o_req_t *req, char *rid) {
  const char *reason = NULL;
  int code = g.draining ? -CM_EUNAVAILABLE : pool_state(&reason);
  if (g.draining)
    reason = "shutting down";
  json_object *root = json_object_new_object();
  if (code) {
    json_object_object_add(root, "status", json_object_new_string(code == -CM_ENOTREADY
                                                                      ? "starting"
                                                                      : "unavailable"));
    json_object_object_add(root, "reason", json_object_new_string(reason));
  } else {
    json_object *models = json_object_new_array();
    json_object_object_add(root, "status", json_object_new_string("ready"));
    for (int i = 0; i < g.n_workers; i++)
      for (uint32_t k = 0; g.workers[i].has_status && k < g.workers[i].st.n_models; k++) {
        const char *id = g.workers[i].st.models[k].id;
        int seen = !g.workers[i].st.models[k].executors_ready; /* listed once one can serve it */
        for (size_t j = 0; j < json_object_array_length(models); j++)
          seen |= strcmp(json_object_get_string(json_object_array_get_idx(models, j)), id) == 0;
        if (!seen)
          json_object_array_add(models, json_object_new_string(id));
      }
    json_object_object_add(root, "models", models);
  }
  size_t n = 0;
  const char *s = json_object_to_json_string_length(root, JSON_C_TO_STRING_PLAIN |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE, &n);
  respond(req, code ? 503 : 200, s, n, rid, NULL, NULL, 0, NULL);
  json_object_put(root);
}

static void handle_models(h2o_req_t *req, char *rid) {
  json_object *root = json_object_new_object(), *arr = json_object_new_array();
  json_object *ids = json_object_new_object();
  for (int i = 0; i < g.n_workers; i++)
    for (uint32_t k = 0; g.workers[i].has_status && k < g.workers[i].st.n_models; k++) {
      const struct proto_model *m = &g.workers[i].st.models[k];
      if (json_object_object_get_ex(ids, m->id, NULL))
        continue;
      json_object_object_add(ids, m->id, NULL);
      json_object *d = json_tokener_parse(m->describe);
      if (d)
        json_object_array_add(arr, d);
    }
  json_object_put(ids);
  json_object_object_add(root, "models", arr);
  size_t n = 0;
  const char *s = json_object_to_json_string_length(root, JSON_C_TO_STRING_PLAIN |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE, &n);
  respond(req, 200, s, n, rid, NULL, NULL, 0, NULL);
  json_object_put(root);
}

static void handle_metrics(h2o_req_t *req, char *rid) {
  char *text = NULL;
  size_t n = 0;
  /* each executor once: several preprocessors report the same one; the latest report wins */
  struct proto_exec_report ex[PROTO_MAX_EXECUTORS];
  int64_t seen[PROTO_MAX_EXECUTORS];
  size_t n_ex = 0;
  for (int i = 0; i < g.n_workers; i++)
    for (uint32_t k = 0; g.workers[i].has_status && k < g.workers[i].st.n_executors; k++) {
      const struct proto_exec_report *e = &g.workers[i].st.executors[k];
      size_t j = 0;
      while (j < n_ex && strcmp(ex[j].instance, e->instance) != 0)
        j++;
      if (j == n_ex && n_ex == PROTO_MAX_EXECUTORS)
        continue;
      if (j == n_ex || g.workers[i].seen_us > seen[j]) {
        ex[j] = *e;
        seen[j] = g.workers[i].seen_us;
        n_ex += j == n_ex;
      }
    }
  if (fe_metrics_render(&g.metrics, ex, n_ex, &text, &n) != 0) {
    respond_plain_error(req, 500, "internal", "metrics rendering failed", rid);
    return;
  }
  req->res.status = 200;
  req->res.reason = "OK";
  h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                 H2O_STRLIT("text/plain; version=0.0.4"));
  add_hdr(req, "x-request-id", rid, strlen(rid));
  req->res.content_length = n;
  h2o_send_inline(req, text, n);
  free(text);
}

/* The origin rule and the bearer token (fe_security.h); CORS headers for an allowed origin.
 * Returns 0 when the request may go on, else it was answered. */
static int check_access(h2o_req_t *req, char *rid, int on_post_route, int is_health,
                        int is_options) {
  int preflight = is_options &&
                  h2o_find_header_by_str(&req->headers, H2O_STRLIT("access-control-request-method"),
                                         -1) >= 0;
  struct fe_access a = fe_security_check(&g.sec, req, is_health, preflight);
  if (a.status) {
    if (on_post_route)
      fe_metrics_count_status(&g.metrics, a.status);
    if (a.status == 401)
      add_hdr(req, "www-authenticate", H2O_STRLIT("Bearer realm=\"s1serve\""));
    respond_plain_error(req, a.status, a.type, a.message, rid);
    return -1;
  }
  if (a.cors) {
    ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("origin"), -1);
    h2o_iovec_t o = req->headers.entries[i].value;
    add_hdr(req, "access-control-allow-origin", o.base, o.len);
    add_hdr(req, "vary", H2O_STRLIT("Origin"));
    add_hdr(req, "access-control-expose-headers",
            H2O_STRLIT("x-request-id, server-timing, x-model-revision, x-numerics"));
    if (preflight) { /* the browser asks before a cross-origin POST: say yes, with no body */
      int post = h2o_memis(req->path_normalized.base, req->path_normalized.len,
                           H2O_STRLIT("/v1/systemone"));
      add_hdr(req, "allow", post ? "POST" : "GET, HEAD", post ? 4 : 9);
      add_hdr(req, "access-control-allow-methods", H2O_STRLIT("GET, HEAD, POST"));
      add_hdr(req, "access-control-allow-headers",
              H2O_STRLIT("content-type, authorization, x-request-id, x-model"));
      add_hdr(req, "access-control-max-age", H2O_STRLIT("600"));
      respond(req, 204, "", 0, rid, NULL, NULL, 0, NULL);
      return -1;
    }
  }
  return 0;
}

/* A compiled-in document (fe_static.h): the page or the OpenAPI document. */
static void handle_static(h2o_req_t *req, char *rid, const struct fe_asset *a) {
  req->res.status = 200;
  req->res.reason = "OK";
  add_hdr(req, "content-type", a->content_type, strlen(a->content_type));
  add_hdr(req, "x-request-id", rid, strlen(rid));
  add_hdr(req, "x-content-type-options", "nosniff", 7);
  add_hdr(req, "cache-control", "no-cache", 8);
  if (a->csp) {
    add_hdr(req, "content-security-policy", a->csp, strlen(a->csp));
    add_hdr(req, "referrer-policy", "no-referrer", 11);
  }
  req->res.content_length = a->body->n;
  h2o_send_inline(req, (const char *)a->body->data, a->body->n);
}

static int on_req(h2o_handler_t *self, h2o_req_t *req) {
  (void)self;
  char *rid = request_id(req);
  h2o_iovec_t path = req->path_normalized;
  int is_get = h2o_memis(req->method.base, req->method.len, H2O_STRLIT("GET"));
  int is_post = h2o_memis(req->method.base, req->method.len, H2O_STRLIT("POST"));
  /* HEAD answers as GET does; h2o sends its status and headers (Content-Length too), no body. */
  int is_head = h2o_memis(req->method.base, req->method.len, H2O_STRLIT("HEAD"));
  int is_options = h2o_memis(req->method.base, req->method.len, H2O_STRLIT("OPTIONS"));
  int on_post_route = h2o_memis(path.base, path.len, H2O_STRLIT("/v1/systemone"));
  int is_health = h2o_memis(path.base, path.len, H2O_STRLIT("/health"));
  int on_get_route = is_health || h2o_memis(path.base, path.len, H2O_STRLIT("/v1/models")) ||
                     h2o_memis(path.base, path.len, H2O_STRLIT("/metrics"));
  const struct fe_asset *asset = on_post_route || on_get_route
                                     ? NULL
                                     : fe_static_find(path.base, path.len);
  /* the static documents hold no data: the origin rule, no token (a browser navigates to them) */
  if ((on_post_route || on_get_route || asset) &&
      check_access(req, rid, on_post_route, is_health || asset != NULL, is_options))
    return 0;
  if ((on_post_route || on_get_route || asset) && is_options) { /* RFC 9110 §9.3.7 */
    if (on_post_route)
      add_hdr(req, "allow", "POST", 4);
    else
      add_hdr(req, "allow", "GET, HEAD", 9);
    respond(req, 204, "", 0, rid, NULL, NULL, 0, NULL);
    return 0;
  }
  if (on_post_route) {
    if (is_post)
      handle_post(req, rid);
    else
      respond_route_error(req, 405, "POST", rid);
  } else if (on_get_route) {
    if (!is_get && !is_head)
      respond_route_error(req, 405, "GET, HEAD", rid);
    else if (path.base[1] == 'h')
      handle_health(req, rid);
    else if (path.base[1] == 'v')
      handle_models(req, rid);
    else
      handle_metrics(req, rid);
  } else if (asset) {
    if (is_get || is_head)
      handle_static(req, rid, asset);
    else
      respond_route_error(req, 405, "GET, HEAD", rid);
  } else {
    respond_route_error(req, 404, NULL, rid);
  }
  return 0;
}

static void on_accept(h2o_socket_t *listener, const char *err) {
  if (err)
    return;
  h2o_socket_t *sock;
  while ((sock = h2o_evloop_socket_accept(listener)) != NULL)
    fe_http1_accept(sock);
}

static int listen_http(const char *hostport) {
  char host[64] = "127.0.0.1";
  int port = 8080;
  const char *colon = strrchr(hostport, ':');
  if (colon) {
    size_t n = (size_t)(colon - hostport);
    if (n >= sizeof(host))
      return -EINVAL;
    memcpy(host, hostport, n);
    host[n] = 0;
    port = atoi(colon + 1);
  } else {
    port = atoi(hostport);
  }
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (port <= 0 || port > 65535 || inet_pton(AF_INET, host, &a.sin_addr) != 1)
    return -EINVAL;
  g.listen_loopback = (ntohl(a.sin_addr.s_addr) >> 24) == 127;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  if (fd < 0)
    return -errno;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, SOMAXCONN) != 0) {
    int e = -errno;
    close(fd);
    return e;
  }
  g.listener = h2o_evloop_socket_create(g.ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
  h2o_socket_read_start(g.listener, on_accept);
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: s1-frontend [--listen HOST:PORT] [--pool URL] [--queue N] [--max-body BYTES]\n"
          "                   [--timeout-ms MS] [--contexts N] [--allow-origin ORIGIN]...\n"
          "                   [--auth-token-file FILE] [--tls-cert FILE --tls-key FILE]\n"
          "  --listen    HTTP address (default 127.0.0.1:8080)\n"
          "  --pool      nng URL preprocessors dial (default ipc://RUNTIME/frontend.sock;\n"
          "              RUNTIME: $RUNTIME_DIRECTORY, $XDG_RUNTIME_DIR/s1serve or\n"
          "              /tmp/s1serve-UID, a private 0700 directory)\n"
          "  --queue     requests waiting for a credit before 503 overloaded (default 64)\n"
          "  --max-body  cap on every model's body limit (limits.max_body_bytes of its\n"
          "              directory, listed by /v1/models), bytes (default 67108864)\n"
          "  --timeout-ms request deadline (default 30000)\n"
          "  --contexts  REP contexts = most credits held at once (default 256)\n"
          "  --allow-origin ORIGIN  a browser origin allowed cross-origin (repeatable; * allows\n"
          "              any); others get 403 (default: none)\n"
          "  --auth-token-file FILE  require Authorization: Bearer <the file's first line> on\n"
          "              every route but /health (default: none; use it beyond loopback)\n"
          "  --tls-cert FILE --tls-key FILE  serve HTTPS (PEM; default: plain HTTP)\n");
}

static long parse_num(const char *s, long lo, long hi) {
  char *end;
  long v = strtol(s, &end, 10);
  return *s && !*end && v >= lo && v <= hi ? v : -1;
}

int main(int argc, char **argv) {
  if (cm_version_requested(argc, argv, "s1-frontend"))
    return 0;
  static const struct option opts[] = {
      {"listen", required_argument, 0, 'l'},   {"pool", required_argument, 0, 'p'},
      {"queue", required_argument, 0, 'q'},    {"max-body", required_argument, 0, 'b'},
      {"timeout-ms", required_argument, 0, 't'}, {"contexts", required_argument, 0, 'c'},
      {"allow-origin", required_argument, 0, 'o'}, {"auth-token-file", required_argument, 0, 'a'},
      {"tls-cert", required_argument, 0, 'C'}, {"tls-key", required_argument, 0, 'K'},
      {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
  const char *listen_at = "127.0.0.1:8080", *pool_url = NULL, *token_file = NULL;
  const char *tls_cert = NULL, *tls_key = NULL;
  long queue = 64, max_body = PROTO_MAX_BODY_BYTES, timeout_ms = 30000, contexts = 256;
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'l': listen_at = optarg; break;
    case 'p': pool_url = optarg; break;
    case 'q': queue = parse_num(optarg, 0, 1 << 20); break;
    case 'b': max_body = parse_num(optarg, 1, PROTO_MAX_BODY_BYTES); break;
    case 't': timeout_ms = parse_num(optarg, 1, 3600000); break;
    case 'c': contexts = parse_num(optarg, 1, 65536); break;
    case 'o':
      if (g.sec.n_origins == FE_MAX_ORIGINS) {
        fprintf(stderr, "s1-frontend: at most %d --allow-origin\n", FE_MAX_ORIGINS);
        return 2;
      }
      g.sec.origins[g.sec.n_origins++] = optarg;
      break;
    case 'a': token_file = optarg; break;
    case 'C': tls_cert = optarg; break;
    case 'K': tls_key = optarg; break;
    case 'h': usage(); return 0;
    default: usage(); return 2;
    }
  }
  if (queue < 0 || max_body < 0 || timeout_ms < 0 || contexts < 0 || optind != argc ||
      !tls_cert != !tls_key) {
    usage();
    return 2;
  }
  struct cm_diag sdiag = {0};
  if ((token_file && fe_security_load_token(&g.sec, token_file, &sdiag)) ||
      (tls_cert && fe_tls_context(tls_cert, tls_key, &g.accept_ctx.ssl_ctx, &sdiag))) {
    fprintf(stderr, "s1-frontend: %s\n", sdiag.msg);
    cm_diag_fini(&sdiag);
    return 1;
  }
  cm_diag_fini(&sdiag);
  g.queue_max = (size_t)queue;
  g.max_body = (size_t)max_body;
  g.timeout_us = timeout_ms * 1000;
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {.sa_handler = on_term};
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  h2o_linklist_init_anchor(&g.credits);
  h2o_linklist_init_anchor(&g.queue);
  h2o_linklist_init_anchor(&g.in_flight);

  h2o_config_init(&g.config);
  /* h2o's limit follows the models' once they are known (update_limits); until then 4 MiB */
  g.config.max_request_entity_size = (g.max_body < (4u << 20) ? g.max_body : (4u << 20)) + 1;
  g.config.server_name = h2o_iovec_init(H2O_STRLIT("s1serve"));
  /* HTTP/1.1 only: the framer (fe_http1) guards HTTP/1 framing; no h2c upgrade or preface */
  g.config.http1.upgrade_to_http2 = 0;
  h2o_hostconf_t *host = h2o_config_register_host(&g.config,
                                                  h2o_iovec_init(H2O_STRLIT("default")), 65535);
  h2o_pathconf_t *pathconf = h2o_config_register_path(host, "/", 0);
  h2o_handler_t *handler = h2o_create_handler(pathconf, sizeof(*handler));
  handler->on_req = on_req;
  h2o_create_filter(pathconf, sizeof(h2o_filter_t))->on_setup_ostream = on_setup_ostream;
  h2o_create_filter(&host->fallback_path, sizeof(h2o_filter_t))->on_setup_ostream =
      on_setup_ostream;
  h2o_context_init(&g.ctx, h2o_evloop_create(), &g.config);
  g.accept_ctx.ctx = &g.ctx;
  g.accept_ctx.hosts = g.config.hosts;
  /* the pool's ipc socket: a private directory, and the lock before nng touches the path */
  struct cm_diag diag = {0};
  int lock_fd = -1, rv;
  if ((!pool_url && cm_runtime_url("frontend.sock", &g.default_pool, &diag)) ||
      cm_ipc_check(pool_url ? pool_url : g.default_pool, true, "--pool", &diag) ||
      cm_ipc_lock(pool_url ? pool_url : g.default_pool, "--pool", &lock_fd, &diag)) {
    fprintf(stderr, "s1-frontend: %s\n", diag.msg ? diag.msg : "--pool: refused");
    cm_diag_fini(&diag);
    return 1;
  }
  if (!pool_url)
    pool_url = g.default_pool;
  if ((rv = fe_http1_init(&g.accept_ctx, render_refusal))) {
    fprintf(stderr, "s1-frontend: HTTP/1 setup failed: %s\n", strerror(-rv));
    return 1;
  }
  g.mq = h2o_multithread_create_queue(g.ctx.loop);
  h2o_multithread_register_receiver(g.mq, &g.recv, on_messages);
  h2o_timeout_init(g.ctx.loop, &g.tick, TICK_MS);
  g.tick_entry.cb = on_tick;
  h2o_timeout_link(g.ctx.loop, &g.tick, &g.tick_entry);

  if ((rv = nng_rep0_open(&g.pool)) ||
      (rv = nng_socket_set_size(g.pool, NNG_OPT_RECVMAXSZ, RECV_MAX_BYTES)) ||
      (rv = nng_pipe_notify(g.pool, NNG_PIPE_EV_REM_POST, on_pipe_event, NULL)) ||
      (rv = cm_listen_private(g.pool, pool_url))) {
    fprintf(stderr, "s1-frontend: cannot listen on %s: %s\n", pool_url, nng_strerror(rv));
    return 1;
  }
  g.n_slots = (int)contexts;
  g.slots = calloc((size_t)g.n_slots, sizeof(*g.slots));
  for (int i = 0; g.slots && i < g.n_slots; i++) {
    if ((rv = nng_ctx_open(&g.slots[i].ctx, g.pool)) ||
        (rv = nng_aio_alloc(&g.slots[i].aio, on_aio, &g.slots[i]))) {
      fprintf(stderr, "s1-frontend: nng: %s\n", nng_strerror(rv));
      return 1;
    }
    slot_recv(&g.slots[i]);
  }
  if ((rv = listen_http(listen_at))) {
    fprintf(stderr, "s1-frontend: cannot listen on %s: %s\n", listen_at, strerror(-rv));
    return 1;
  }
  fprintf(stderr, "s1-frontend: %s://%s, pool %s, queue %ld, body limit %ld, timeout %ld ms%s%s\n",
          tls_cert ? "https" : "http", listen_at, pool_url, queue, max_body, timeout_ms,
          g.sec.token ? ", bearer token required" : "",
          g.sec.n_origins ? ", cross-origin allowed for --allow-origin" : "");
  if (!g.listen_loopback && !g.sec.token)
    fprintf(stderr, "s1-frontend: warning: %s is beyond loopback and no --auth-token-file is "
            "set: anyone who reaches it may use the service\n", listen_at);
  while ((fe_http1_before_run(), h2o_evloop_run(g.ctx.loop, 100) == 0) || errno == EINTR) {
    if (g.draining && g.queue_len == 0 && g.metrics.in_flight == 0)
      break;
  }
  /* let the last answers leave */
  for (int i = 0; i < 20; i++) {
    fe_http1_before_run();
    h2o_evloop_run(g.ctx.loop, 10);
  }
  fprintf(stderr, "s1-frontend: drained, exiting\n");
  nng_close(g.pool);
  for (int i = 0; i < g.n_slots; i++)
    nng_aio_free(g.slots[i].aio);
  free(g.slots);
  free(g.default_pool);
  fe_security_fini(&g.sec);
  if (g.accept_ctx.ssl_ctx)
    SSL_CTX_free(g.accept_ctx.ssl_ctx);
  if (lock_fd >= 0)
    close(lock_fd);
  for (int i = 0; i < g.n_workers; i++) {
    free(g.workers[i].id);
    proto_status_fini(&g.workers[i].st);
  }
  return 0;
}
