/* The credit pool of s1-frontend: everything that talks to the preprocessors. They are nng REQ
 * sockets that ask for work (ASK, one credit each); this is the REP side, one context per
 * outstanding credit, with the job table (queued and in-flight requests), their deadlines,
 * cancellation of requests whose clients left, failover when a preprocessor goes away, and the
 * preprocessors' STATUS reports (health, models, body limits, executor counters).
 * nng callbacks only post events to the h2o loop; all state lives on the loop thread.
 * What it leaves out: HTTP answers (a job's end goes to fe_pool_answer_fn), routes, access. */
#ifndef S1_FE_POOL_H
#define S1_FE_POOL_H

#include <h2o.h>
#include <h2o/multithread.h>
#include <nng/nng.h>
#include <stdbool.h>
#include <stdint.h>

#include "cm_error.h"
#include "fe_metrics.h"
#include "proto_job.h"
#include "proto_status.h"

#define FE_POOL_MAX_WORKERS 256         /* preprocessors known at once */
#define FE_POOL_MAX_LIMITS 256          /* model names (ids and aliases) with a body limit */
#define FE_POOL_WORKER_STALE_US 2000000 /* a preprocessor not heard from for 2 s is gone */
#define FE_POOL_RECV_MAX_BYTES ((size_t)64 << 20) /* largest message from a preprocessor */

/* How one job ends, handed to fe_pool_answer_fn to become its HTTP answer. */
struct fe_job_end {
  const struct proto_reply *reply;     /* the preprocessor's reply, or NULL: failed here (code) */
  const struct proto_timings *timings; /* reply != NULL: its timings, queue_us the frontend's */
  int code;                            /* reply == NULL: the error (cm_error_http maps it) */
  const char *message;                 /* reply == NULL: static text naming what failed */
};

/* Answers req (still held by h2o) for a job that ended. Called on the loop thread, once per
 * request at most; counting in /metrics is the pool's. rid: the request's x-request-id. */
typedef void (*fe_pool_answer_fn)(void *arg, h2o_req_t *req, const char *rid,
                                  const struct fe_job_end *end);

/* The pool's settings and wiring (all borrowed; they outlive the pool). */
struct fe_pool_config {
  const char *url;          /* nng URL the preprocessors dial (ipc path checked by the caller) */
  int n_contexts;           /* REP contexts = most credits held at once (--contexts) */
  size_t queue_max;         /* requests waiting for a credit before overloaded (--queue) */
  size_t max_body;          /* cap on every model's body limit, bytes (--max-body) */
  int64_t timeout_us;       /* request deadline after arrival (--timeout-ms) */
  h2o_loop_t *loop;         /* the h2o loop the events are posted to */
  struct fe_metrics *metrics; /* counters and gauges the pool updates */
  size_t *entity_limit;     /* h2o's max_request_entity_size: kept at the largest model limit + 1 */
  fe_pool_answer_fn answer; /* a job's HTTP answer */
  void *answer_arg;         /* its first argument */
  void (*log)(const char *msg); /* what the process logs (a refused message), or NULL */
};

/* One preprocessor as its messages describe it (read-only outside fe_pool.c). */
struct fe_worker {
  char *id;               /* preprocessor id (heap) */
  uint32_t pipe;          /* its nng pipe */
  int64_t seen_us;        /* monotonic, last message */
  struct proto_status st; /* last STATUS (zeroed until one arrives) */
  bool has_status;        /* st is set */
};

/* A model name and its request body limit (limits.max_body_bytes, listed in /v1/models). */
struct fe_body_limit {
  char *name;        /* model id or alias (heap) */
  const char *model; /* the model's id (the entry naming it owns it) */
  size_t max_body;   /* bytes */
};

struct fe_slot;

/* The pool (embedded by main; fields are read-only outside fe_pool.c). */
struct fe_pool {
  struct fe_pool_config cfg;          /* settings and wiring */
  h2o_multithread_queue_t *mq;        /* nng threads → loop */
  h2o_multithread_receiver_t recv;    /* its receiver */
  nng_socket sock;                    /* REP socket the preprocessors dial */
  bool open;                          /* sock is open */
  struct fe_slot *slots;              /* [n_slots] REP contexts (heap) */
  int n_slots;                        /* contexts opened */
  h2o_linklist_t credits;             /* slots holding a credit */
  h2o_linklist_t queue;               /* jobs waiting for a credit */
  h2o_linklist_t in_flight;           /* jobs sent to a preprocessor */
  size_t queue_len;                   /* jobs in queue */
  uint64_t next_job;                  /* last job id handed out */
  struct fe_worker workers[FE_POOL_MAX_WORKERS]; /* known preprocessors */
  int n_workers;                      /* entries in workers */
  struct fe_body_limit limits[FE_POOL_MAX_LIMITS]; /* model ids and aliases → body limit */
  int n_limits;                       /* entries in limits */
  int n_limit_models;                 /* distinct models among them */
  size_t max_model_body;              /* the largest model limit, bytes (0: none known yet) */
};

/* Opens the REP socket at cfg->url (0600 for ipc: cm_listen_private) with cfg->n_contexts
 * contexts receiving, and the event queue on cfg->loop. Ownership: cfg's pointers are borrowed.
 * Returns 0, or -EIO with diag naming the nng call and its reason ("cannot listen on URL: ...",
 * "nng: ..."), -ENOMEM. fe_pool_fini undoes a half-done init. */
int fe_pool_init(struct fe_pool *pool, const struct fe_pool_config *cfg, struct cm_diag *diag);

/* Closes the socket (aios stop) and frees every slot, job and worker. Accepts a zeroed pool. */
void fe_pool_fini(struct fe_pool *pool);

/* Health of the pool: 0 when at least one preprocessor serves (reports READY), else the code and
 * reason (static or the reporting preprocessor's text, valid until its next STATUS):
 * -CM_ENOTREADY while none is connected or all are starting or draining, -CM_EUNAVAILABLE when
 * the connected ones have no executor left. A preprocessor joining later changes nothing. */
int fe_pool_state(const struct fe_pool *pool, const char **ret_reason);

/* The model revision every connected preprocessor reports, for answers no executor made;
 * NULL when none is known or the revisions differ. */
const char *fe_pool_revision(const struct fe_pool *pool);

/* The body limit of one request, bytes: its x-model header's model (model_header, NULL when
 * absent), the only model, or the largest (the preprocessor checks the model its body names);
 * --max-body while no model is known. *ret_model: the model's id, or NULL when not one model's. */
size_t fe_pool_body_limit(const struct fe_pool *pool, const char *model_header,
                          const char **ret_model);

/* Whether a new job would exceed the queue bound (no idle credit and queue_max jobs waiting). */
bool fe_pool_full(const struct fe_pool *pool);

/* Whether no job is queued or in flight (a draining frontend may exit). */
bool fe_pool_idle(const struct fe_pool *pool);

/* Queues a job for req (its body is req->entity; rid ≤ 128 bytes; model_header: the x-model
 * value or NULL) and hands it out at once if a credit is held. Its end comes to cfg.answer,
 * unless the client goes first (then counted as 499; an HTTP request still held is answered
 * with -CM_ECANCELLED). Ownership: req stays h2o's; the pool hooks its disposal. Returns 0 or
 * -ENOMEM (nothing queued; the caller answers). */
int fe_pool_submit(struct fe_pool *pool, h2o_req_t *req, const char *rid,
                   const char *model_header);

/* Every tick: cancels jobs whose clients have gone (fe_http1_client_gone), fails queued jobs
 * past their deadline (504) and in-flight ones 2 s past it (a lost answer), forgets
 * preprocessors silent for FE_POOL_WORKER_STALE_US, and sets the preprocessor gauges. */
void fe_pool_tick(struct fe_pool *pool);

#endif
