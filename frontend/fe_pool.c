/* The credit pool of s1-frontend (fe_pool.h): REP contexts holding the preprocessors' credits,
 * the job table, STATUS reports and the events nng threads post to the loop. A client that goes
 * away is noticed (HTTP/1: fe_http1_client_gone every tick; HTTP/2: h2o disposes the reset
 * stream's request) and its job cancelled: dropped from the queue, or named to its preprocessor
 * in the answer to that preprocessor's next STATUS, which cancels it at the executor.
 * What it leaves out: the HTTP answer of a job (cfg.answer), admission checks (fe_routes.c). */
#include "fe_pool.h"

#include <errno.h>
#include <json-c/json.h>
#include <nng/protocol/reqrep0/rep.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_nng.h"
#include "fe_http1.h"

enum slot_phase { SLOT_RECV, SLOT_HOLD, SLOT_SEND };
enum ev_type { EV_RECV, EV_SEND_FAILED, EV_PIPE_REM };
enum job_state { JOB_QUEUED, JOB_IN_FLIGHT };

/* One REP context: receiving, holding a credit (an ASK waiting for a job) or sending. */
struct fe_slot {
  struct fe_pool *pool;  /* its pool */
  nng_ctx ctx;           /* REP context */
  nng_aio *aio;          /* its aio (callback on_aio) */
  enum slot_phase phase; /* touched by the loop, and by the callback only while not HOLD */
  uint32_t pipe;         /* pipe of the ASK held */
  uint64_t job_id;       /* job being sent */
  h2o_linklist_t link;   /* in pool->credits while HOLD */
};

/* An event from an nng thread to the loop. */
struct ev {
  h2o_multithread_message_t super; /* queue link */
  enum ev_type type;               /* what happened */
  struct fe_slot *slot;            /* EV_RECV: the context that received */
  nng_msg *msg;                    /* EV_RECV: the message received (owned by the event) */
  uint64_t job_id;                 /* EV_SEND_FAILED */
  uint32_t pipe;                   /* EV_PIPE_REM */
};

struct job;

/* Lives in the request's memory pool; h2o disposes it with the request. */
struct req_hook {
  struct job *j; /* the request's job, NULL once answered */
};

/* One POST waiting for its answer (heap: it may outlive its HTTP request, whose client can go). */
struct job {
  struct fe_pool *pool;  /* its pool */
  h2o_req_t *req;        /* the HTTP request; NULL once answered or disposed by h2o */
  struct req_hook *hook; /* in req's pool while req is set */
  uint64_t job_id;       /* id of its job */
  char rid[160];         /* x-request-id (≤ 128 bytes from the client, else generated) */
  char *model_header;    /* x-model header value (heap) or NULL */
  int64_t deadline_us;   /* proto_now_us clock */
  int64_t start_us;      /* monotonic, arrival */
  int64_t dispatch_us;   /* monotonic, handed to a preprocessor */
  enum job_state state;  /* queued or in flight */
  uint32_t pipe;         /* preprocessor pipe while in flight */
  bool cancelled;        /* in flight and its client gone: named in that preprocessor's ACKs
                            until the reply arrives, which is then dropped */
  h2o_linklist_t link;   /* in pool->queue or pool->in_flight */
};

static int64_t mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- preprocessors -------------------------------------------------------------------------- */

static struct fe_worker *worker_by_id(struct fe_pool *pool, const char *id, uint32_t pipe) {
  for (int i = 0; i < pool->n_workers; i++)
    if (strcmp(pool->workers[i].id, id) == 0) {
      pool->workers[i].pipe = pipe;
      return &pool->workers[i];
    }
  if (pool->n_workers == FE_POOL_MAX_WORKERS)
    return NULL;
  struct fe_worker *w = &pool->workers[pool->n_workers];
  memset(w, 0, sizeof(*w));
  if (!(w->id = strdup(id)))
    return NULL;
  w->pipe = pipe;
  pool->n_workers++;
  return w;
}

static void update_limits(struct fe_pool *pool);

static void worker_remove(struct fe_pool *pool, int i) {
  free(pool->workers[i].id);
  proto_status_fini(&pool->workers[i].st);
  pool->workers[i] = pool->workers[--pool->n_workers];
  update_limits(pool);
}

int fe_pool_state(const struct fe_pool *pool, const char **ret_reason) {
  int any = 0, starting = 0, draining = 0, ready = 0;
  const char *why = NULL;
  for (int i = 0; i < pool->n_workers; i++) {
    if (!pool->workers[i].has_status)
      continue;
    any = 1;
    const struct proto_status *s = &pool->workers[i].st;
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

const char *fe_pool_revision(const struct fe_pool *pool) {
  const char *rev = NULL;
  for (int i = 0; i < pool->n_workers; i++)
    for (uint32_t k = 0; pool->workers[i].has_status && k < pool->workers[i].st.n_models; k++) {
      const char *r = pool->workers[i].st.models[k].revision;
      if (!r)
        continue;
      if (rev && strcmp(rev, r) != 0)
        return NULL;
      rev = r;
    }
  return rev;
}

/* ---- body limits ---------------------------------------------------------------------------- */

static void add_limit(struct fe_pool *pool, const char *name, const char *model, size_t max_body) {
  for (int i = 0; i < pool->n_limits; i++)
    if (strcmp(pool->limits[i].name, name) == 0)
      return;
  struct fe_body_limit *l = &pool->limits[pool->n_limits];
  if (pool->n_limits == FE_POOL_MAX_LIMITS || !(l->name = strdup(name)))
    return;
  l->model = model ? model : l->name;
  l->max_body = max_body;
  pool->n_limits++;
}

static void clear_limits(struct fe_pool *pool) {
  for (int i = 0; i < pool->n_limits; i++)
    free(pool->limits[i].name);
  pool->n_limits = pool->n_limit_models = 0;
  pool->max_model_body = 0;
}

/* The body limits of every model the preprocessors serve (their /v1/models entries carry
 * max_body_bytes); h2o's own limit follows the largest, capped by --max-body. */
static void update_limits(struct fe_pool *pool) {
  size_t cap = pool->cfg.max_body;
  clear_limits(pool);
  for (int w = 0; w < pool->n_workers; w++)
    for (uint32_t k = 0; pool->workers[w].has_status && k < pool->workers[w].st.n_models; k++) {
      const struct proto_model *pm = &pool->workers[w].st.models[k];
      json_object *d = json_tokener_parse(pm->describe), *v = NULL, *al;
      int64_t lim = d && json_object_object_get_ex(d, "max_body_bytes", &v)
                        ? json_object_get_int64(v) : 0;
      size_t max_body = lim > 0 && (uint64_t)lim < cap ? (size_t)lim : cap;
      int known = 0;
      for (int i = 0; i < pool->n_limits; i++)
        known |= strcmp(pool->limits[i].name, pm->id) == 0;
      if (!known) {
        int first = pool->n_limits;
        add_limit(pool, pm->id, NULL, max_body);
        if (pool->n_limits > first) {
          pool->n_limit_models++;
          const char *model = pool->limits[first].name;
          if (json_object_object_get_ex(d, "aliases", &al) &&
              json_object_is_type(al, json_type_array))
            for (size_t a = 0; a < json_object_array_length(al); a++) {
              const char *name = json_object_get_string(json_object_array_get_idx(al, a));
              if (name)
                add_limit(pool, name, model, max_body);
            }
        }
        if (max_body > pool->max_model_body)
          pool->max_model_body = max_body;
      }
      json_object_put(d);
    }
  /* h2o refuses a chunked body that reaches its limit (a Content-Length equal to it passes):
   * one byte of slack lets exactly the limit through both ways; fe_routes refuses the rest */
  *pool->cfg.entity_limit = (pool->max_model_body ? pool->max_model_body : cap) + 1;
}

size_t fe_pool_body_limit(const struct fe_pool *pool, const char *model_header,
                          const char **ret_model) {
  *ret_model = NULL;
  if (!pool->n_limits)
    return pool->cfg.max_body;
  for (int i = 0; model_header && i < pool->n_limits; i++)
    if (strcmp(pool->limits[i].name, model_header) == 0) {
      *ret_model = pool->limits[i].model;
      return pool->limits[i].max_body;
    }
  if (pool->n_limit_models == 1) {
    *ret_model = pool->limits[0].model;
    return pool->limits[0].max_body;
  }
  return pool->max_model_body;
}

/* ---- REP contexts --------------------------------------------------------------------------- */

static void slot_recv(struct fe_slot *s) {
  s->phase = SLOT_RECV;
  nng_ctx_recv(s->ctx, s->aio);
}

/* Sends b's bytes on s (copied into a new message; on failure s receives again). */
static void slot_send(struct fe_slot *s, const struct proto_bytes *b) {
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

/* Answers a REP context with ACK: the preprocessor's credit ends without a job (it drains). */
static void slot_ack(struct fe_slot *s) {
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
static void release_credits(struct fe_pool *pool, uint32_t pipe) {
  for (int i = 0; i < pool->n_slots; i++) {
    struct fe_slot *s = &pool->slots[i];
    if (s->phase == SLOT_HOLD && s->pipe == pipe) {
      h2o_linklist_unlink(&s->link);
      pool->cfg.metrics->credits--;
      slot_ack(s);
    }
  }
}

/* ---- jobs ----------------------------------------------------------------------------------- */

/* The HTTP request of j, detached from j (it is answered now); NULL when h2o disposed it. */
static h2o_req_t *take_req(struct job *j) {
  h2o_req_t *req = j->req;
  if (j->hook)
    j->hook->j = NULL;
  j->hook = NULL;
  j->req = NULL;
  return req;
}

static void job_free(struct job *j) {
  take_req(j);
  free(j->model_header);
  free(j);
}

static void answer_failed(struct job *j, h2o_req_t *req, int code, const char *message) {
  struct fe_job_end end = {.code = code, .message = message};
  j->pool->cfg.answer(j->pool->cfg.answer_arg, req, j->rid, &end);
}

/* Finishes an in-flight job with its preprocessor's reply. */
static void job_answer(struct job *j, const struct proto_reply *rp) {
  struct fe_pool *pool = j->pool;
  struct fe_metrics *m = pool->cfg.metrics;
  h2o_linklist_unlink(&j->link);
  m->in_flight--;
  if (j->cancelled) { /* its client has gone: counted when that was seen; the reply is dropped */
    job_free(j);
    return;
  }
  struct proto_timings t = rp->timings;
  int64_t now = mono_us();
  t.queue_us = j->dispatch_us - j->start_us;
  fe_metrics_count_status(m, rp->status);
  fe_hist_observe(&m->stage[FE_STAGE_QUEUE], t.queue_us);
  fe_hist_observe(&m->stage[FE_STAGE_PREPROCESS], t.preprocess_us);
  fe_hist_observe(&m->stage[FE_STAGE_EXECUTE], t.execute_us);
  fe_hist_observe(&m->stage[FE_STAGE_TOTAL], now - j->start_us);
  m->tokens += rp->tokens;
  m->decisions += rp->decisions;
  h2o_req_t *req = take_req(j);
  if (req) {
    struct fe_job_end end = {.reply = rp, .timings = &t};
    pool->cfg.answer(pool->cfg.answer_arg, req, j->rid, &end);
  }
  job_free(j);
}

/* Ends a queued or in-flight job with an error (code, message). */
static void job_fail(struct job *j, int code, const char *message) {
  struct fe_metrics *m = j->pool->cfg.metrics;
  if (j->state == JOB_QUEUED)
    j->pool->queue_len--, m->queue_depth--;
  else
    m->in_flight--;
  h2o_linklist_unlink(&j->link);
  h2o_req_t *req = take_req(j);
  if (!j->cancelled) {
    fe_metrics_count_status(m, cm_error_http(code, NULL));
    fe_hist_observe(&m->stage[FE_STAGE_TOTAL], mono_us() - j->start_us);
  }
  if (req)
    answer_failed(j, req, code, message);
  job_free(j);
}

/* j's client has gone (seen by fe_http1_client_gone, or h2o disposed its request: then j->req
 * is NULL). Queued: dropped. In flight: kept until its preprocessor's reply, named in every ACK
 * to that preprocessor meanwhile. Counted once, as a 499; a request still held gets the 499
 * answer so that h2o closes the connection. */
static void job_cancel(struct job *j) {
  struct fe_pool *pool = j->pool;
  struct fe_metrics *m = pool->cfg.metrics;
  if (j->cancelled)
    return;
  fe_metrics_count_status(m, 499);
  fe_hist_observe(&m->stage[FE_STAGE_TOTAL], mono_us() - j->start_us);
  h2o_req_t *req = take_req(j);
  if (req)
    answer_failed(j, req, -CM_ECANCELLED, "the client has gone");
  if (j->state == JOB_QUEUED) {
    m->cancelled[FE_CANCEL_QUEUE]++;
    pool->queue_len--, m->queue_depth--;
    h2o_linklist_unlink(&j->link);
    job_free(j);
    return;
  }
  m->cancelled[FE_CANCEL_IN_FLIGHT]++;
  j->cancelled = true;
}

/* h2o disposes a request's pool: when its job still holds it, the request vanished before it
 * was answered (an HTTP/2 stream reset, a closed connection). */
static void on_req_dispose(void *arg) {
  struct req_hook *h = arg;
  struct job *j = h->j;
  if (!j)
    return;
  j->hook = NULL;
  j->req = NULL;
  job_cancel(j);
}

/* Hands queued jobs to held credits while both exist. */
static void dispatch(struct fe_pool *pool) {
  struct fe_metrics *m = pool->cfg.metrics;
  while (!h2o_linklist_is_empty(&pool->queue) && !h2o_linklist_is_empty(&pool->credits)) {
    struct job *j = H2O_STRUCT_FROM_MEMBER(struct job, link, pool->queue.next);
    struct fe_slot *s = H2O_STRUCT_FROM_MEMBER(struct fe_slot, link, pool->credits.next);
    h2o_linklist_unlink(&s->link);
    m->credits--;
    struct proto_job pj = {.job_id = j->job_id, .request_id = j->rid,
                           .deadline_us = j->deadline_us, .model = j->model_header,
                           .body = j->req->entity.base, .n_body = j->req->entity.len};
    struct proto_bytes b = {0};
    h2o_linklist_unlink(&j->link);
    pool->queue_len--;
    m->queue_depth--;
    if (proto_job_encode(&pj, &b) != 0) {
      m->in_flight++;
      j->state = JOB_IN_FLIGHT;
      h2o_linklist_insert(&pool->in_flight, &j->link);
      job_fail(j, -CM_EINTERNAL, "the request could not be handed to a preprocessor");
      h2o_linklist_insert(&pool->credits, &s->link);
      m->credits++;
      continue;
    }
    j->state = JOB_IN_FLIGHT;
    j->pipe = s->pipe;
    j->dispatch_us = mono_us();
    h2o_linklist_insert(&pool->in_flight, &j->link);
    m->in_flight++;
    s->job_id = j->job_id;
    slot_send(s, &b);
    proto_bytes_free(&b);
  }
}

static struct job *find_in_flight(struct fe_pool *pool, uint64_t job_id) {
  for (h2o_linklist_t *l = pool->in_flight.next; l != &pool->in_flight; l = l->next) {
    struct job *j = H2O_STRUCT_FROM_MEMBER(struct job, link, l);
    if (j->job_id == job_id)
      return j;
  }
  return NULL;
}

bool fe_pool_full(const struct fe_pool *pool) {
  /* an anchor whose next is itself (h2o_linklist_is_empty takes no const) */
  return pool->credits.next == &pool->credits && pool->queue_len >= pool->cfg.queue_max;
}

bool fe_pool_idle(const struct fe_pool *pool) {
  return pool->queue_len == 0 && pool->cfg.metrics->in_flight == 0;
}

int fe_pool_submit(struct fe_pool *pool, h2o_req_t *req, const char *rid,
                   const char *model_header) {
  struct job *j = calloc(1, sizeof(*j));
  if (!j)
    return -ENOMEM;
  j->pool = pool;
  snprintf(j->rid, sizeof(j->rid), "%s", rid);
  if (model_header && !(j->model_header = strdup(model_header))) {
    free(j);
    return -ENOMEM;
  }
  struct req_hook *hook = h2o_mem_alloc_shared(&req->pool, sizeof(*hook), on_req_dispose);
  hook->j = j;
  j->hook = hook;
  j->req = req;
  j->job_id = ++pool->next_job;
  j->start_us = mono_us();
  j->dispatch_us = j->start_us;
  j->deadline_us = proto_now_us() + pool->cfg.timeout_us;
  j->state = JOB_QUEUED;
  h2o_linklist_insert(&pool->queue, &j->link);
  pool->queue_len++;
  pool->cfg.metrics->queue_depth++;
  dispatch(pool);
  return 0;
}

/* ---- events from nng threads ---------------------------------------------------------------- */

/* A STATUS: the preprocessor's state replaces the last one; the answer (ACK) names its jobs whose
 * clients have gone. */
static void on_status(struct fe_pool *pool, struct fe_slot *s, const void *d, size_t n,
                      uint32_t pipe) {
  struct proto_status st = {0};
  struct proto_bytes ack = {0};
  struct cm_diag diag = {0};
  if (proto_status_decode(d, n, &st, &diag) == 0) {
    struct fe_worker *w = worker_by_id(pool, st.worker, pipe);
    if (w) {
      proto_status_fini(&w->st);
      w->st = st;
      w->has_status = true;
      w->seen_us = mono_us();
      if (w->st.state == PROTO_STATE_DRAINING)
        release_credits(pool, pipe);
      update_limits(pool);
    } else {
      proto_status_fini(&st);
    }
  }
  cm_diag_fini(&diag);
  uint64_t ids[256];
  struct proto_ack a = {.cancel = ids};
  for (h2o_linklist_t *l = pool->in_flight.next; l != &pool->in_flight && a.n_cancel < 256;
       l = l->next) {
    struct job *j = H2O_STRUCT_FROM_MEMBER(struct job, link, l);
    if (j->cancelled && j->pipe == pipe)
      ids[a.n_cancel++] = j->job_id;
  }
  if (proto_ack_encode(&a, &ack) == 0)
    slot_send(s, &ack);
  else
    slot_recv(s);
  proto_bytes_free(&ack);
}

/* "what: reason" to the process's log (cfg.log), if it has one. */
static void pool_log(const struct fe_pool *pool, const char *what, const struct cm_diag *diag) {
  if (!pool->cfg.log)
    return;
  char line[512];
  snprintf(line, sizeof line, "%s: %s", what, diag->msg ? diag->msg : "?");
  pool->cfg.log(line);
}

static void on_recv_event(struct fe_pool *pool, struct fe_slot *s, nng_msg *m) {
  enum proto_kind kind;
  uint32_t pipe = (uint32_t)nng_pipe_id(nng_msg_get_pipe(m));
  const void *d = nng_msg_body(m);
  size_t n = nng_msg_len(m);
  struct cm_diag diag = {0};
  if (proto_peek(d, n, &kind, &diag) != 0) {
    pool_log(pool, "refused a message", &diag);
    cm_diag_fini(&diag);
    slot_recv(s);
    return;
  }
  if (kind == PROTO_KIND_STATUS) {
    on_status(pool, s, d, n, pipe);
    return;
  }
  if (kind != PROTO_KIND_ASK) {
    slot_recv(s);
    return;
  }
  struct proto_ask ask = {0};
  if (proto_ask_decode(d, n, &ask, &diag) != 0) {
    pool_log(pool, "refused an ask", &diag);
    cm_diag_fini(&diag);
    slot_recv(s);
    return;
  }
  struct fe_worker *w = worker_by_id(pool, ask.worker, pipe);
  if (w)
    w->seen_us = mono_us();
  if (ask.has_reply) {
    struct job *j = find_in_flight(pool, ask.reply.job_id);
    if (j)
      job_answer(j, &ask.reply);
  }
  bool no_credit = ask.last || (w && w->has_status && w->st.state == PROTO_STATE_DRAINING);
  proto_ask_fini(&ask);
  if (no_credit) { /* a draining preprocessor: its reply, then ACK instead of a job */
    slot_ack(s);
    return;
  }
  s->phase = SLOT_HOLD;
  s->pipe = pipe;
  h2o_linklist_insert(&pool->credits, &s->link);
  pool->cfg.metrics->credits++;
  dispatch(pool);
}

/* A preprocessor's connection closed: its credits go, its jobs in flight fail (500), it is
 * forgotten. */
static void on_pipe_gone(struct fe_pool *pool, uint32_t pipe) {
  for (int i = 0; i < pool->n_slots; i++) {
    struct fe_slot *s = &pool->slots[i];
    if (s->phase == SLOT_HOLD && s->pipe == pipe) {
      h2o_linklist_unlink(&s->link);
      pool->cfg.metrics->credits--;
      slot_recv(s);
    }
  }
  for (h2o_linklist_t *l = pool->in_flight.next; l != &pool->in_flight;) {
    struct job *j = H2O_STRUCT_FROM_MEMBER(struct job, link, l);
    l = l->next;
    if (j->pipe == pipe)
      job_fail(j, -CM_EINTERNAL, "the preprocessor handling the request went away");
  }
  for (int i = 0; i < pool->n_workers;)
    if (pool->workers[i].pipe == pipe)
      worker_remove(pool, i);
    else
      i++;
}

static void on_messages(h2o_multithread_receiver_t *r, h2o_linklist_t *messages) {
  struct fe_pool *pool = H2O_STRUCT_FROM_MEMBER(struct fe_pool, recv, r);
  while (!h2o_linklist_is_empty(messages)) {
    struct ev *e = H2O_STRUCT_FROM_MEMBER(struct ev, super.link, messages->next);
    h2o_linklist_unlink(&e->super.link);
    switch (e->type) {
    case EV_RECV:
      on_recv_event(pool, e->slot, e->msg);
      nng_msg_free(e->msg);
      break;
    case EV_SEND_FAILED: {
      struct job *j = find_in_flight(pool, e->job_id);
      if (j)
        job_fail(j, -CM_EINTERNAL, "the request could not be handed to a preprocessor");
      break;
    }
    case EV_PIPE_REM: on_pipe_gone(pool, e->pipe); break;
    }
    free(e);
  }
}

/* nng thread: an operation on a REP context finished. */
static void on_aio(void *arg) {
  struct fe_slot *s = arg;
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
        h2o_multithread_send_message(&s->pool->recv, &e->super);
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
  h2o_multithread_send_message(&s->pool->recv, &e->super);
}

/* nng thread: a pipe (a preprocessor's connection) closed. */
static void on_pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg) {
  struct fe_pool *pool = arg;
  if (ev != NNG_PIPE_EV_REM_POST)
    return;
  struct ev *e = calloc(1, sizeof(*e));
  if (!e)
    return;
  e->type = EV_PIPE_REM;
  e->pipe = (uint32_t)nng_pipe_id(p);
  h2o_multithread_send_message(&pool->recv, &e->super);
}

/* ---- lifetime and tick ---------------------------------------------------------------------- */

int fe_pool_init(struct fe_pool *pool, const struct fe_pool_config *cfg, struct cm_diag *diag) {
  memset(pool, 0, sizeof(*pool));
  pool->cfg = *cfg;
  h2o_linklist_init_anchor(&pool->credits);
  h2o_linklist_init_anchor(&pool->queue);
  h2o_linklist_init_anchor(&pool->in_flight);
  pool->mq = h2o_multithread_create_queue(cfg->loop);
  h2o_multithread_register_receiver(pool->mq, &pool->recv, on_messages);
  int rv = nng_rep0_open(&pool->sock);
  pool->open = rv == 0;
  if (rv || (rv = nng_socket_set_size(pool->sock, NNG_OPT_RECVMAXSZ, FE_POOL_RECV_MAX_BYTES)) ||
      (rv = nng_pipe_notify(pool->sock, NNG_PIPE_EV_REM_POST, on_pipe_event, pool)) ||
      (rv = cm_listen_private(pool->sock, cfg->url)))
    return cm_diag_set(diag, -EIO, "cannot listen on %s: %s", cfg->url, nng_strerror(rv));
  if (!(pool->slots = calloc((size_t)cfg->n_contexts, sizeof(*pool->slots))))
    return cm_diag_set(diag, -ENOMEM, "out of memory");
  for (int i = 0; i < cfg->n_contexts; i++) {
    struct fe_slot *s = &pool->slots[i];
    s->pool = pool;
    if ((rv = nng_ctx_open(&s->ctx, pool->sock)))
      return cm_diag_set(diag, -EIO, "nng: %s", nng_strerror(rv));
    if ((rv = nng_aio_alloc(&s->aio, on_aio, s))) {
      nng_ctx_close(s->ctx);
      return cm_diag_set(diag, -EIO, "nng: %s", nng_strerror(rv));
    }
    pool->n_slots++;
    slot_recv(s);
  }
  return 0;
}

void fe_pool_fini(struct fe_pool *pool) {
  if (pool->open)
    nng_close(pool->sock);
  pool->open = false;
  for (int i = 0; i < pool->n_slots; i++)
    nng_aio_free(pool->slots[i].aio);
  free(pool->slots);
  pool->slots = NULL;
  pool->n_slots = 0;
  h2o_linklist_t *lists[2] = {&pool->queue, &pool->in_flight};
  for (int k = 0; k < 2; k++)
    while (lists[k]->next && !h2o_linklist_is_empty(lists[k])) {
      struct job *j = H2O_STRUCT_FROM_MEMBER(struct job, link, lists[k]->next);
      h2o_linklist_unlink(&j->link);
      job_free(j);
    }
  for (int i = 0; i < pool->n_workers; i++) {
    free(pool->workers[i].id);
    proto_status_fini(&pool->workers[i].st);
  }
  pool->n_workers = 0;
  clear_limits(pool);
  /* the event queue stays: events nng posted while closing are never delivered; the process
   * exits after this */
}

/* Cancels the jobs whose clients have gone. */
static void check_clients(struct fe_pool *pool) {
  h2o_linklist_t *lists[2] = {&pool->queue, &pool->in_flight};
  for (int k = 0; k < 2; k++)
    for (h2o_linklist_t *l = lists[k]->next; l != lists[k];) {
      struct job *j = H2O_STRUCT_FROM_MEMBER(struct job, link, l);
      l = l->next;
      if (j->req && !j->cancelled && fe_http1_client_gone(j->req))
        job_cancel(j);
    }
}

void fe_pool_tick(struct fe_pool *pool) {
  int64_t now = proto_now_us(), mono = mono_us();
  struct fe_metrics *m = pool->cfg.metrics;
  check_clients(pool);
  for (h2o_linklist_t *l = pool->queue.next; l != &pool->queue;) {
    struct job *j = H2O_STRUCT_FROM_MEMBER(struct job, link, l);
    l = l->next;
    if (now >= j->deadline_us)
      job_fail(j, -CM_ETIMEOUT, "the request deadline passed in the queue");
  }
  /* in flight: the preprocessor answers 504 itself; this catches a lost answer */
  for (h2o_linklist_t *l = pool->in_flight.next; l != &pool->in_flight;) {
    struct job *j = H2O_STRUCT_FROM_MEMBER(struct job, link, l);
    l = l->next;
    if (now >= j->deadline_us + 2000000)
      job_fail(j, -CM_ETIMEOUT, "the request deadline passed");
  }
  for (int i = 0; i < pool->n_workers;)
    if (mono - pool->workers[i].seen_us > FE_POOL_WORKER_STALE_US && pool->workers[i].has_status)
      worker_remove(pool, i);
    else
      i++;
  m->preprocessors = (uint64_t)pool->n_workers;
  m->preprocessors_ready = 0;
  for (int i = 0; i < pool->n_workers; i++)
    m->preprocessors_ready += pool->workers[i].has_status &&
                              pool->workers[i].st.state == PROTO_STATE_READY;
}
