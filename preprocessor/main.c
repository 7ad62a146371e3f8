/* s1-preprocessor: a CPU worker of the service. It dials the frontend as a REQ socket and offers K
 * credits (one context and one worker thread each: "ask" carries the previous reply, the answer
 * is the next job), dials every executor (one REQ socket each, ipc:// or tcp://, health probed
 * every 200 ms), parses request JSON strictly, routes by model id / alias, runs the family's
 * compile, sends the program to the least-loaded ready executor that serves that model (the
 * executor's health names its model directory's digest), fails it over to another such executor
 * when the first one's connection drops mid-request, runs finish and replies. A status thread
 * reports executor health and the loaded models to the frontend; the frontend's answer names the
 * jobs whose clients have gone, which are abandoned here and cancelled at their executor.
 * Requests fail as data, never as a crash. */
#include <errno.h>
#include <getopt.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cm_alloc.h"
#include "cm_runtime.h"
#include "cm_version.h"
#include "pp_family.h"
#include "pp_json.h"
#include "proto_job.h"
#include "proto_status.h"

#define MAX_EXECUTORS 64
#define MAX_MODELS 16
#define MAX_CREDITS 256
#define PROBE_EVERY_MS 200   /* health probes and STATUS; also the latency of a cancellation */
#define PROBE_TIMEOUT_MS 1000
#define CANCEL_SEND_MS 200   /* a CANCEL's send to an executor; its ACK is not awaited */
#define PROBE_MISSES 5       /* unanswered probes in a row after which an executor's connection is
                                closed (a host gone without closing TCP): its programs fail over */
#define RECV_MAX_BYTES ((size_t)1 << 30)
#define DRAIN_MAX_US 55000000   /* SIGTERM: longest wait for jobs in hand (systemd stop: 60 s) */
#define DRAIN_REPLY_US 10000000 /* SIGTERM: longest retrying to deliver a finished job's reply */
#define CLOSE_MAX_US 5000000    /* SIGTERM: longest for closing the sockets once the drain is over */

struct executor {
  const char *url;        /* nng URL (argv) */
  nng_socket sock;        /* REQ socket dialled to it */
  atomic_int state;       /* enum proto_state from the last probe (UNAVAILABLE when unreachable
                             or when it serves no model this process loads) */
  atomic_int model;       /* index in g.models of the model it serves (digest match), -1 unknown */
  atomic_int in_flight;   /* programs sent and not answered */
  atomic_int pipes;       /* connected pipes (0: unreachable, a send would wait) */
  atomic_uint pipe_id;    /* the connected pipe's id (one dialer: one pipe at a time) */
  int probe_misses;       /* probes unanswered in a row on the current pipe (status thread) */
  int logged_state;       /* the state last logged, -1 before the first (status thread) */
  atomic_int connected;   /* ever connected: before that an absent executor is still starting */
  char reason[320];       /* why not ready, from the last probe (status thread only) */
  char numerics[8];       /* the mode it serves ("fp32" / "bf16"), from the last ready probe */
  char instance[PROTO_MAX_ID_BYTES + 1]; /* its id from the last health reply (status thread) */
  struct proto_exec_stats stats; /* its counters from the last health reply (status thread) */
};

struct model {
  struct cm_model_dir *dir;     /* opened directory */
  struct pp_model *pm;          /* its family, tokenizer and family state */
  struct pp_model_desc desc;    /* pm->desc: id, aliases, revision, describe */
  char *describe_text;          /* desc.describe as compact JSON */
  uint64_t max_body;            /* request body limit, bytes (manifest limits.max_body_bytes) */
};

/* One credit's job as the status thread (cancellation) and nng's pipe callbacks (failover) see
 * it. A flag set under mu with the executor round trip's aio cancelled makes the worker's wait
 * return at once; the worker re-checks the flags after starting each operation, so a flag set
 * just before the operation began is not missed. */
struct job_slot {
  pthread_mutex_t mu;   /* guards every field below */
  uint64_t job_id;      /* the frontend's id of the job being worked on, 0 when idle */
  bool cancelled;       /* the frontend said this job's client has gone */
  bool lost;            /* the executor of the current attempt lost its connection */
  int ex;               /* executor of the current attempt, -1 when none */
  nng_aio *aio;         /* the executor round trip's aio (owned by the worker) */
  char program_id[PROTO_MAX_ID_BYTES + 1]; /* the program's request id, which CANCEL names */
};

static struct {
  nng_socket front;                        /* REQ socket to the frontend */
  struct executor ex[MAX_EXECUTORS];       /* executors dialled */
  int n_ex;                                /* entries in ex */
  struct model models[MAX_MODELS];         /* loaded models */
  int n_models;                            /* entries in models */
  int credits;                             /* worker threads = credits offered (--credits) */
  struct job_slot slots[MAX_CREDITS];      /* one per worker thread */
  atomic_uint rr;                          /* rotation among equally loaded executors */
  char worker_id[128];                     /* "host:pid:id", sent with every message */
  atomic_int busy;                         /* workers inside a job */
  atomic_int serving;                      /* an executor was ready once: credits are offered */
  atomic_int workers_running;              /* worker threads not yet ended */
  atomic_int status_stop;                  /* the status thread ends (after the workers) */
  volatile sig_atomic_t stop;              /* SIGTERM seen: drain */
  char *default_front;                     /* the default --frontend URL (heap), NULL if given */
} g;

static int64_t mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void on_signal(int sig) {
  (void)sig;
  g.stop = 1;
}

/* One request/reply on a REQ socket through a fresh context. Ownership: *ret_msg is the caller's
 * (nng_msg_free). Returns 0 or an nng error. */
static int roundtrip(nng_socket sock, const struct proto_bytes *b, nng_duration timeout_ms,
                     nng_msg **ret_msg) {
  nng_ctx ctx;
  nng_aio *aio = NULL;
  nng_msg *m = NULL;
  int rv = nng_ctx_open(&ctx, sock);
  if (rv)
    return rv;
  if ((rv = nng_aio_alloc(&aio, NULL, NULL)) || (rv = nng_msg_alloc(&m, 0)) ||
      (rv = nng_msg_append(m, b->data, b->len)))
    goto out;
  nng_aio_set_timeout(aio, timeout_ms);
  nng_aio_set_msg(aio, m);
  nng_ctx_send(ctx, aio);
  nng_aio_wait(aio);
  if ((rv = nng_aio_result(aio)))
    goto out; /* the message is still ours */
  m = NULL;
  nng_ctx_recv(ctx, aio);
  nng_aio_wait(aio);
  if ((rv = nng_aio_result(aio)) == 0)
    *ret_msg = nng_aio_get_msg(aio);
out:
  nng_msg_free(m);
  nng_aio_free(aio);
  nng_ctx_close(ctx);
  return rv;
}

/* proto_program_encode_into's allocator: a message of n bytes, the program encoded straight into
 * its body (no second copy of the ~14 MB of an OmniJev image's pixels). */
static void *alloc_msg(void *arg, size_t n) {
  nng_msg **m = arg;
  return nng_msg_alloc(m, n) ? NULL : nng_msg_body(*m);
}

/* ---- replies -------------------------------------------------------------------------------- */

static void reply_error(struct proto_reply *rp, int code, const char *message) {
  const char *type = NULL;
  rp->status = cm_error_http(code, &type);
  if (!type)
    type = "internal", rp->status = 500;
  json_object *root = json_object_new_object(), *err = json_object_new_object();
  json_object_object_add(err, "type", json_object_new_string(type));
  json_object_object_add(err, "message", json_object_new_string(message ? message : cm_strerror(code)));
  json_object_object_add(root, "error", err);
  size_t n = 0;
  const char *s = json_object_to_json_string_length(root, JSON_C_TO_STRING_PLAIN |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE, &n);
  free(rp->body);
  rp->body = strndup(s, n);
  rp->n_body = rp->body ? n : 0;
  free(rp->error_type);
  rp->error_type = strdup(type);
  json_object_put(root);
}

/* ---- executors ------------------------------------------------------------------------------ */

/* The loaded model whose directory has this digest, or -1. */
static int model_by_digest(const char *digest) {
  for (int i = 0; digest && i < g.n_models; i++)
    if (strcmp(g.models[i].dir->manifest_sha256, digest) == 0)
      return i;
  return -1;
}

/* Probes every connected executor at once (one context each; the probes overlap, so a slow
 * executor costs PROBE_TIMEOUT_MS once, not once per executor), then records state, model and
 * reason. An executor that serves a model this process does not load is UNAVAILABLE to it. */
static void probe_executors(void) {
  struct proto_bytes b = {0};
  nng_ctx ctx[MAX_EXECUTORS];
  nng_aio *aio[MAX_EXECUTORS] = {0};
  bool sent[MAX_EXECUTORS] = {0};
  if (proto_simple_encode(PROTO_KIND_HEALTH, &b))
    return;
  for (int i = 0; i < g.n_ex; i++) {
    nng_msg *m = NULL;
    if (atomic_load(&g.ex[i].pipes) <= 0 || nng_aio_alloc(&aio[i], NULL, NULL))
      continue;
    if (nng_ctx_open(&ctx[i], g.ex[i].sock)) {
      nng_aio_free(aio[i]);
      aio[i] = NULL;
      continue;
    }
    if (nng_msg_alloc(&m, 0) || nng_msg_append(m, b.data, b.len)) {
      nng_msg_free(m);
      continue;
    }
    nng_aio_set_timeout(aio[i], PROBE_TIMEOUT_MS);
    nng_aio_set_msg(aio[i], m);
    nng_ctx_send(ctx[i], aio[i]);
    sent[i] = true;
  }
  for (int i = 0; i < g.n_ex; i++) {
    if (!sent[i])
      continue;
    nng_aio_wait(aio[i]);
    if (nng_aio_result(aio[i])) {
      nng_msg_free(nng_aio_get_msg(aio[i]));
      sent[i] = false;
      continue;
    }
    nng_ctx_recv(ctx[i], aio[i]);
  }
  for (int i = 0; i < g.n_ex; i++) {
    struct executor *e = &g.ex[i];
    struct proto_health h = {0};
    nng_msg *m = NULL;
    int st = atomic_load(&e->connected) ? PROTO_STATE_UNAVAILABLE : PROTO_STATE_STARTING, md = -1;
    snprintf(e->reason, sizeof(e->reason), "executor %s: %s", e->url,
             st == PROTO_STATE_STARTING ? "not connected yet" : "unreachable");
    e->instance[0] = 0; /* reported only while it answers */
    if (sent[i]) {
      nng_aio_wait(aio[i]);
      if (nng_aio_result(aio[i]) == 0)
        m = nng_aio_get_msg(aio[i]);
    }
    if (sent[i] && !m && ++e->probe_misses >= PROBE_MISSES) {
      /* connected, yet silent: a host that vanished leaves its TCP connection open */
      fprintf(stderr, "s1-preprocessor: executor %s: %d probes unanswered; closing its "
              "connection\n", e->url, e->probe_misses);
      e->probe_misses = 0;
      nng_pipe_close((nng_pipe){.id = atomic_load(&e->pipe_id)});
    }
    if (m && proto_health_decode(nng_msg_body(m), nng_msg_len(m), &h, NULL) == 0) {
      e->probe_misses = 0;
      st = (int)h.state;
      snprintf(e->reason, sizeof(e->reason), "executor %s: %s", e->url,
               h.reason ? h.reason : "ready");
      if (h.numerics)
        snprintf(g.ex[i].numerics, sizeof(g.ex[i].numerics), "%s", h.numerics);
      if (st == PROTO_STATE_READY && (md = model_by_digest(h.digest)) < 0) {
        st = PROTO_STATE_UNAVAILABLE;
        snprintf(e->reason, sizeof(e->reason), "executor %s serves model %.64s (directory digest "
                 "%.16s), which this preprocessor does not load", e->url,
                 h.model_id ? h.model_id : "?", h.digest ? h.digest : "none");
      }
      snprintf(e->instance, sizeof(e->instance), "%s", h.instance ? h.instance : "");
      e->stats = h.stats;
    }
    nng_msg_free(m);
    proto_health_fini(&h);
    if (md >= 0)
      atomic_store(&e->model, md);
    if (st != e->logged_state && st != PROTO_STATE_STARTING) /* each change, once */
      fprintf(stderr, "s1-preprocessor: %s\n", e->reason);
    e->logged_state = st;
    atomic_store(&e->state, st);
    if (aio[i]) {
      nng_aio_free(aio[i]);
      nng_ctx_close(ctx[i]);
    }
  }
  proto_bytes_free(&b);
}

/* nng thread: an executor connection came or went. A lost one is unavailable at once (a REQ
 * send without a pipe would wait for the deadline), and every program in flight there is
 * abandoned so that its worker fails it over; the next probe decides when it is back. */
static void on_executor_pipe(nng_pipe p, nng_pipe_ev ev, void *arg) {
  struct executor *e = arg;
  int idx = (int)(e - g.ex);
  if (ev == NNG_PIPE_EV_ADD_POST) {
    atomic_store(&e->pipe_id, (unsigned)nng_pipe_id(p));
    atomic_fetch_add(&e->pipes, 1);
    atomic_store(&e->connected, 1);
  } else if (ev == NNG_PIPE_EV_REM_POST) {
    atomic_fetch_sub(&e->pipes, 1);
    atomic_store(&e->state, PROTO_STATE_UNAVAILABLE);
    for (int i = 0; i < g.credits; i++) {
      struct job_slot *js = &g.slots[i];
      pthread_mutex_lock(&js->mu);
      if (js->ex == idx) {
        js->lost = true;
        nng_aio_cancel(js->aio);
      }
      pthread_mutex_unlock(&js->mu);
    }
  }
}

/* A ready, connected executor of model `md` not in `tried` (bit i: executor i), the one with
 * the fewest programs in flight; ties go round-robin so equal executors share the load. -1 when
 * there is none. */
static int pick_executor(int md, uint64_t tried) {
  int best = -1, best_n = 0;
  unsigned start = atomic_fetch_add(&g.rr, 1);
  for (int k = 0; k < g.n_ex; k++) {
    int i = (int)((start + (unsigned)k) % (unsigned)g.n_ex);
    if ((tried >> i & 1) || atomic_load(&g.ex[i].state) != PROTO_STATE_READY ||
        atomic_load(&g.ex[i].pipes) <= 0 || atomic_load(&g.ex[i].model) != md)
      continue;
    int n = atomic_load(&g.ex[i].in_flight);
    if (best < 0 || n < best_n)
      best = i, best_n = n;
  }
  return best;
}

/* Ready executors serving model md. */
static uint32_t model_ready(int md) {
  uint32_t n = 0;
  for (int i = 0; i < g.n_ex; i++)
    n += atomic_load(&g.ex[i].state) == PROTO_STATE_READY && atomic_load(&g.ex[i].model) == md;
  return n;
}

/* This process's state for the frontend. At start-up it is STARTING while an executor still
 * starts, until every model has had a ready executor (wire.md: ready once every configured
 * model has warmed up); after that it is READY while any executor is, so one executor that
 * restarts later leaves the others serving. */
static enum proto_state overall_state(uint32_t *ret_ready, const char **ret_reason) {
  static bool seen[MAX_MODELS], all_seen;
  if (!all_seen) {
    all_seen = true;
    for (int m = 0; m < g.n_models; m++)
      all_seen &= (seen[m] |= model_ready(m) > 0);
  }
  uint32_t ready = 0;
  int starting = -1, other = -1;
  for (int i = 0; i < g.n_ex; i++) {
    int s = atomic_load(&g.ex[i].state);
    ready += s == PROTO_STATE_READY;
    if (s == PROTO_STATE_STARTING && starting < 0)
      starting = i;
    if (s == PROTO_STATE_UNAVAILABLE && other < 0)
      other = i;
  }
  *ret_ready = ready;
  if (starting >= 0 && !(ready && all_seen)) {
    *ret_reason = g.ex[starting].reason;
    return PROTO_STATE_STARTING;
  }
  if (!ready) {
    *ret_reason = other >= 0 ? g.ex[other].reason : "no executor is ready";
    return PROTO_STATE_UNAVAILABLE;
  }
  *ret_reason = NULL;
  return PROTO_STATE_READY;
}

/* /v1/models names the numerics each model is served in: that of the first ready executor serving
 * it, once one answered (until then the directory's default, set at load). Status thread only. */
static void describe_numerics(struct proto_model *pm) {
  for (int i = 0; i < g.n_models; i++) {
    const char *nm = NULL;
    for (int k = 0; k < g.n_ex && !nm; k++)
      if (atomic_load(&g.ex[k].state) == PROTO_STATE_READY && atomic_load(&g.ex[k].model) == i &&
          g.ex[k].numerics[0])
        nm = g.ex[k].numerics;
    if (!nm)
      continue;
    json_object *d = g.models[i].desc.describe, *cur = NULL;
    if (json_object_object_get_ex(d, "numerics", &cur) &&
        strcmp(json_object_get_string(cur), nm) == 0)
      continue;
    json_object_object_add(d, "numerics", json_object_new_string(nm));
    char *t = strdup(json_object_to_json_string_ext(d, JSON_C_TO_STRING_PLAIN));
    if (!t)
      continue;
    free(g.models[i].describe_text);
    g.models[i].describe_text = pm[i].describe = t;
  }
}

/* Sends CANCEL(program_id) to executor ex without waiting for its ACK: the context is closed
 * once the message is on its way, so the ACK is dropped by nng. */
static void send_cancel(int ex, const char *program_id) {
  struct proto_cancel c = {.request_id = (char *)program_id};
  struct proto_bytes b = {0};
  nng_ctx ctx;
  nng_aio *aio = NULL;
  nng_msg *m = NULL;
  if (proto_cancel_encode(&c, &b) || nng_aio_alloc(&aio, NULL, NULL))
    goto out;
  if (nng_ctx_open(&ctx, g.ex[ex].sock)) {
    nng_aio_free(aio);
    aio = NULL;
    goto out;
  }
  if (nng_msg_alloc(&m, 0) == 0 && nng_msg_append(m, b.data, b.len) == 0) {
    nng_aio_set_timeout(aio, CANCEL_SEND_MS);
    nng_aio_set_msg(aio, m);
    nng_ctx_send(ctx, aio);
    nng_aio_wait(aio);
    if (nng_aio_result(aio) == 0)
      m = NULL;
  }
  nng_ctx_close(ctx);
out:
  nng_msg_free(m);
  nng_aio_free(aio);
  proto_bytes_free(&b);
}

/* The frontend says job `id`'s client has gone: the worker on it stops waiting, and the
 * program, when it is at an executor, is cancelled there. Unknown ids (a job already answered,
 * or not yet taken: the frontend repeats the id in every ACK until the reply) change nothing. */
static void cancel_job(uint64_t id) {
  for (int i = 0; id && i < g.credits; i++) {
    struct job_slot *js = &g.slots[i];
    char pid[PROTO_MAX_ID_BYTES + 1];
    int ex = -1;
    pthread_mutex_lock(&js->mu);
    if (js->job_id == id && !js->cancelled) {
      js->cancelled = true;
      ex = js->ex;
      memcpy(pid, js->program_id, sizeof(pid));
      nng_aio_cancel(js->aio);
    }
    pthread_mutex_unlock(&js->mu);
    if (ex >= 0)
      send_cancel(ex, pid);
  }
}

static void *status_thread(void *arg) {
  (void)arg;
  struct proto_model pm[MAX_MODELS];
  for (int i = 0; i < g.n_models; i++)
    pm[i] = (struct proto_model){(char *)g.models[i].desc.id, (char *)g.models[i].desc.revision,
                                 g.models[i].describe_text, 0};
  struct proto_exec_report er[MAX_EXECUTORS];
  while (!atomic_load(&g.status_stop)) {
    int64_t t0 = mono_us();
    int draining = g.stop;
    probe_executors();
    describe_numerics(pm);
    for (int i = 0; i < g.n_models; i++)
      pm[i].executors_ready = model_ready(i);
    struct proto_status s = {.worker = g.worker_id, .executors_total = (uint32_t)g.n_ex,
                             .credits = (uint32_t)g.credits, .models = pm,
                             .n_models = (uint32_t)g.n_models, .executors = er};
    for (int i = 0; i < g.n_ex; i++) /* the counters of every executor that answered a probe */
      if (g.ex[i].instance[0] && s.n_executors < PROTO_MAX_EXECUTORS)
        er[s.n_executors++] = (struct proto_exec_report){g.ex[i].instance, g.ex[i].stats};
    const char *reason = NULL;
    s.state = overall_state(&s.executors_ready, &reason);
    s.reason = (char *)reason;
    if (draining) { /* the frontend gives the idle credits back and sends no new job */
      s.state = PROTO_STATE_DRAINING;
      s.reason = "the preprocessor is shutting down (draining)";
    }
    if (s.state == PROTO_STATE_READY)
      atomic_store(&g.serving, 1);
    struct proto_bytes b = {0};
    struct proto_ack ack = {0};
    nng_msg *m = NULL;
    if (proto_status_encode(&s, &b) == 0 && roundtrip(g.front, &b, PROBE_TIMEOUT_MS, &m) == 0 &&
        proto_ack_decode(nng_msg_body(m), nng_msg_len(m), &ack, NULL) == 0)
      for (uint32_t i = 0; i < ack.n_cancel; i++)
        cancel_job(ack.cancel[i]);
    proto_ack_fini(&ack);
    nng_msg_free(m);
    proto_bytes_free(&b);
    /* wait for the next report; a SIGTERM is reported at once */
    while (!atomic_load(&g.status_stop) && g.stop == draining &&
           mono_us() - t0 < PROBE_EVERY_MS * 1000)
      usleep(5000);
  }
  return NULL;
}

/* ---- one job -------------------------------------------------------------------------------- */

#define NAMES_MAX 16         /* model names (ids and aliases) an unknown-model error lists */
#define NAMES_MAX_BYTES 1024 /* and at most these bytes of them, then "…" */

/* The loaded models' names for an error: "\"A\" (aliases \"a1\", \"a2\"), \"B\"", at most
 * NAMES_MAX names and NAMES_MAX_BYTES bytes, then "…". Writes buf (cap > NAMES_MAX_BYTES + 8). */
static void loaded_names(char *buf, size_t cap) {
  size_t n = 0, names = 0;
  buf[0] = 0;
  for (int i = 0; i < g.n_models; i++) {
    const struct pp_model_desc *d = &g.models[i].desc;
    for (size_t a = 0; a <= d->n_aliases; a++) {
      const char *name = a == 0 ? d->id : d->aliases[a - 1];
      const char *lead = a == 0 ? (i ? ", " : "") : a == 1 ? " (aliases " : ", ";
      const char *tail = a > 0 && a == d->n_aliases ? ")" : "";
      size_t piece = strlen(lead) + strlen(name) + 2 + strlen(tail);
      if (names == NAMES_MAX || n + piece > NAMES_MAX_BYTES) {
        snprintf(buf + n, cap - n, "%s…%s", n ? ", " : "", a > 0 ? ")" : "");
        return;
      }
      n += (size_t)snprintf(buf + n, cap - n, "%s\"%s\"%s", lead, name, tail);
      names++;
    }
  }
}

/* Bytes of s within max_bytes, cut at a UTF-8 code point boundary. */
static int utf8_prefix(const char *s, size_t max_bytes) {
  size_t n = strnlen(s, max_bytes + 1);
  if (n > max_bytes) {
    n = max_bytes;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
      n--;
  }
  return (int)n;
}

static const struct model *route(json_object *root, const char *header_model,
                                 struct cm_diag *diag, int *ret_code) {
  char names[NAMES_MAX_BYTES + 16];
  json_object *mv = NULL;
  const char *name = header_model;
  if (json_object_object_get_ex(root, "model", &mv) && mv) {
    if (!json_object_is_type(mv, json_type_string)) {
      *ret_code = cm_diag_set(diag, -CM_EREQUEST, "model: must be a string or null");
      return NULL;
    }
    name = json_object_get_string(mv);
  }
  if (!name) {
    if (g.n_models == 1)
      return &g.models[0];
    loaded_names(names, sizeof(names));
    *ret_code = cm_diag_set(diag, -CM_EREQUEST, "model: required, %d models are loaded: %s",
                            g.n_models, names);
    return NULL;
  }
  for (int i = 0; i < g.n_models; i++) {
    const struct pp_model_desc *d = &g.models[i].desc;
    if (strcmp(d->id, name) == 0)
      return &g.models[i];
    for (size_t a = 0; a < d->n_aliases; a++)
      if (strcmp(d->aliases[a], name) == 0)
        return &g.models[i];
  }
  loaded_names(names, sizeof(names));
  *ret_code = cm_diag_set(diag, -CM_EREQUEST, "model: unknown model \"%.*s\"; loaded: %s",
                          utf8_prefix(name, 200), name, names);
  return NULL;
}

/* Whether the frontend cancelled the slot's job. */
static bool slot_cancelled(struct job_slot *js) {
  pthread_mutex_lock(&js->mu);
  bool c = js->cancelled;
  pthread_mutex_unlock(&js->mu);
  return c;
}

/* Starts the operation already set up on js->aio (op: nng_ctx_send or nng_ctx_recv), waits for
 * it, and returns its result; a cancellation or a lost connection flagged before or during the
 * wait aborts it with NNG_ECANCELED. */
static int slot_op(struct job_slot *js, nng_ctx ctx, void (*op)(nng_ctx, nng_aio *)) {
  op(ctx, js->aio);
  pthread_mutex_lock(&js->mu);
  if (js->cancelled || js->lost)
    nng_aio_cancel(js->aio);
  pthread_mutex_unlock(&js->mu);
  nng_aio_wait(js->aio);
  return nng_aio_result(js->aio);
}

/* One attempt: the encoded program *msg to executor ex and its result back, within timeout_ms in
 * all. Ownership: *msg is used up once a send was tried (nng's after a successful send, freed
 * after a failed one, whose REQ header may hold this attempt's id): *msg = NULL then; *ret_msg is
 * the caller's (nng_msg_free).
 * Returns 0 or an nng error (NNG_ECANCELED when the job was cancelled or the executor's
 * connection dropped; the slot's flags say which). */
static int exec_roundtrip(struct job_slot *js, int ex, nng_msg **msg, int64_t timeout_ms,
                          nng_msg **ret_msg) {
  struct executor *e = &g.ex[ex];
  nng_ctx ctx;
  int64_t end = mono_us() + timeout_ms * 1000;
  int rv = nng_ctx_open(&ctx, e->sock);
  if (rv)
    return rv;
  pthread_mutex_lock(&js->mu);
  js->ex = ex;
  js->lost = atomic_load(&e->pipes) <= 0; /* gone before this attempt could be flagged */
  pthread_mutex_unlock(&js->mu);
  atomic_fetch_add(&e->in_flight, 1);
  nng_aio_set_timeout(js->aio, (nng_duration)timeout_ms);
  nng_aio_set_msg(js->aio, *msg);
  nng_msg *sent = *msg;
  *msg = NULL;
  if ((rv = slot_op(js, ctx, nng_ctx_send)) == 0) {
    int64_t left_ms = (end - mono_us()) / 1000;
    nng_aio_set_timeout(js->aio, (nng_duration)(left_ms > 0 ? left_ms : 1));
    if ((rv = slot_op(js, ctx, nng_ctx_recv)) == 0)
      *ret_msg = nng_aio_get_msg(js->aio);
  } else {
    nng_msg_free(sent); /* a failed send leaves the message with us */
  }
  atomic_fetch_sub(&e->in_flight, 1);
  pthread_mutex_lock(&js->mu);
  js->ex = -1;
  pthread_mutex_unlock(&js->mu);
  nng_ctx_close(ctx); /* a late answer to an abandoned attempt is dropped here */
  return rv;
}

static void handle_job(struct job_slot *js, const struct proto_job *job, struct proto_reply *rp) {
  struct cm_diag diag = {0};
  json_object *root = NULL;
  struct proto_program prog = {0};
  struct proto_result res = {0};
  nng_msg *pm = NULL; /* the encoded program */
  size_t n_pm = 0;
  void *ctx = NULL;
  nng_msg *m = NULL;
  const struct model *md = NULL;
  int code = 0, lost = 0, full = 0, attempts = 0;
  uint64_t tried = 0;
  int64_t t0 = mono_us(), t1 = t0, t2 = t0;
  struct pp_request_info info = {.request_id = job->request_id, .deadline_us = job->deadline_us,
                                 .received_us = proto_now_us()};
  rp->job_id = job->job_id;
  if (job->deadline_us && proto_now_us() >= job->deadline_us) {
    code = cm_diag_set(&diag, -CM_ETIMEOUT, "the request deadline passed in the queue");
    goto out;
  }
  /* the body limit of the model the request is for: before parsing when only one is loaded */
  if (g.n_models == 1 && job->n_body > g.models[0].max_body) {
    code = cm_diag_set(&diag, -CM_ETOOLARGE, "body: %zu bytes; %s accepts at most %llu",
                       job->n_body, g.models[0].desc.id, (unsigned long long)g.models[0].max_body);
    goto out;
  }
  if ((code = pp_json_parse(job->body, job->n_body, &root, &diag)))
    goto out;
  if (!json_object_is_type(root, json_type_object)) {
    code = cm_diag_set(&diag, -CM_EREQUEST, "body: must be a JSON object");
    goto out;
  }
  if (!(md = route(root, job->model, &diag, &code)))
    goto out;
  if (job->n_body > md->max_body) {
    code = cm_diag_set(&diag, -CM_ETOOLARGE, "body: %zu bytes; %s accepts at most %llu",
                       job->n_body, md->desc.id, (unsigned long long)md->max_body);
    goto out;
  }
  int mi = (int)(md - g.models);
  free(rp->model_revision);
  rp->model_revision = md->desc.revision ? strdup(md->desc.revision) : NULL;
  if (!model_ready(mi)) { /* refused before any work */
    code = cm_diag_set(&diag, -CM_EUNAVAILABLE, "model %s: no executor serving it is ready",
                       md->desc.id);
    goto out;
  }
  if ((code = md->pm->family->compile(md->pm->state, root, &info, &prog, &ctx, &diag)))
    goto out;
  prog.deadline_us = job->deadline_us;
  /* The program's request id is unique (the client's x-request-id need not be): the client's
   * id, this worker and the frontend's job id. CANCEL names it. */
  pthread_mutex_lock(&js->mu);
  snprintf(js->program_id, sizeof(js->program_id), "%.100s@%s#%llu", job->request_id,
           g.worker_id, (unsigned long long)job->job_id);
  pthread_mutex_unlock(&js->mu);
  if ((code = proto_program_set_ids(&prog, md->desc.id, js->program_id)) ||
      (code = proto_program_encode_into(&prog, alloc_msg, &pm, &n_pm))) {
    code = cm_diag_set(&diag, code == -ENOMEM ? -ENOMEM : -CM_EINTERNAL,
                       "the compiled program is invalid or too large");
    goto out;
  }
  t1 = mono_us();
  info.compile_end_us = proto_now_us();
  /* Attempts: one per executor of this model at most. A program is a pure function of its
   * bytes, so running it again elsewhere after a lost connection or a retired executor gives the
   * same answer; the abandoned attempt's late answer is dropped, so the job is answered once. */
  for (;;) {
    if (slot_cancelled(js)) {
      code = cm_diag_set(&diag, -CM_ECANCELLED, "the client has gone");
      goto out;
    }
    int ex = pick_executor(mi, tried);
    if (ex < 0 && full && !lost) {
      code = cm_diag_set(&diag, -CM_EOVERLOADED, "model %s: every executor serving it holds "
                         "its most programs", md->desc.id);
      goto out;
    }
    if (ex < 0) {
      code = lost ? cm_diag_set(&diag, -CM_EUNAVAILABLE, "model %s: the executor running the "
                                "request was lost and no other one serving it is ready",
                                md->desc.id)
                  : cm_diag_set(&diag, -CM_EUNAVAILABLE, "model %s: no executor serving it is "
                                "ready", md->desc.id);
      goto out;
    }
    tried |= (uint64_t)1 << ex;
    int64_t left_ms = job->deadline_us ? (job->deadline_us - proto_now_us()) / 1000 : 600000;
    if (left_ms <= 0) {
      code = cm_diag_set(&diag, -CM_ETIMEOUT, "the request deadline passed");
      goto out;
    }
    if (attempts++)
      fprintf(stderr, "s1-preprocessor: request %s: failing over to executor %s\n",
              job->request_id, g.ex[ex].url);
    /* the program is encoded straight into the message; a failover encodes it again (the
     * same bytes): the first attempt's message is used up */
    if (!pm && proto_program_encode_into(&prog, alloc_msg, &pm, &n_pm)) {
      code = cm_diag_set(&diag, -ENOMEM, "the program could not be encoded again for failover");
      goto out;
    }
    int rv = exec_roundtrip(js, ex, &pm, left_ms, &m);
    if (rv == NNG_ECANCELED) {
      pthread_mutex_lock(&js->mu);
      bool was_lost = js->lost && !js->cancelled;
      pthread_mutex_unlock(&js->mu);
      if (!was_lost) {
        code = cm_diag_set(&diag, -CM_ECANCELLED, "the client has gone");
        goto out;
      }
      lost = 1;
      continue;
    }
    if (rv == NNG_ETIMEDOUT) {
      code = cm_diag_set(&diag, -CM_ETIMEOUT, "the request deadline passed during execution");
      goto out;
    }
    if (rv) {
      atomic_store(&g.ex[ex].state, PROTO_STATE_UNAVAILABLE); /* until the next probe says more */
      lost = 1;
      continue;
    }
    proto_result_fini(&res);
    if ((code = proto_result_decode(nng_msg_body(m), nng_msg_len(m), &res, &diag))) {
      code = -CM_EINTERNAL;
      goto out;
    }
    nng_msg_free(m);
    m = NULL;
    if (res.status == -CM_EUNAVAILABLE || res.status == -CM_ENOTREADY) {
      lost = 1; /* retired or not warmed up: nothing of it reached the answer; try another */
      continue;
    }
    if (res.status == -CM_EOVERLOADED) {
      full = 1; /* refused unrun (--max-programs held): another executor may have room */
      continue;
    }
    break;
  }
  t2 = mono_us();
  if (res.status) {
    code = res.status == -CM_ETIMEOUT || res.status == -CM_ECANCELLED ? res.status
                                                                       : -CM_EINTERNAL;
    cm_diag_set(&diag, code, "executor: %s", res.message ? res.message : cm_strerror(res.status));
    goto out;
  }
  if (res.n_outputs != prog.n_readouts) {
    code = cm_diag_set(&diag, -CM_EINTERNAL, "executor returned %u readouts for %u",
                       res.n_outputs, prog.n_readouts);
    goto out;
  }
  {
    char *json = NULL;
    size_t n = 0;
    struct pp_finish_stats stats = {0};
    const struct pp_family *fam = md->pm->family;
    if ((code = fam->finish(md->pm->state, ctx, &res, &info, &json, &n, &stats, &diag))) {
      code = code == -ENOMEM ? code : -CM_EINTERNAL;
      goto out;
    }
    rp->status = 200;
    rp->body = json;
    rp->n_body = n;
    free(rp->numerics);
    rp->numerics = res.numerics ? strdup(res.numerics) : NULL; /* the mode that answered */
    rp->tokens = stats.tokens;
    rp->decisions = stats.decisions;
  }
out:
  if (code)
    reply_error(rp, code, diag.msg);
  int64_t t3 = mono_us();
  if (code && t1 == t0)
    t1 = t3; /* failed before the program was sent */
  if (t2 == t0)
    t2 = t3; /* failed before or while executing */
  rp->timings.preprocess_us = t1 - t0;
  rp->timings.execute_us = t2 - t1;
  rp->timings.finish_us = t3 - t2;
  rp->timings.ex_queue_us = res.timings.queue_us; /* zeros when no executor answered */
  rp->timings.vision_us = res.timings.vision_us;
  rp->timings.prefix_us = res.timings.prefix_us;
  rp->timings.rows_us = res.timings.rows_us;
  rp->timings.heads_us = res.timings.readout_us + res.timings.heads_us;
  rp->timings.wait_us = res.timings.wait_us;
  if (md && ctx)
    md->pm->family->ctx_free(ctx);
  nng_msg_free(m);
  nng_msg_free(pm);
  proto_program_fini(&prog);
  proto_result_fini(&res);
  json_object_put(root);
  cm_diag_fini(&diag);
}

/* One credit: ask (with the previous reply), take the job, answer it. After SIGTERM (drain) the
 * reply of the job in hand goes out in a `last` ask, which the frontend answers with ACK, and an
 * idle credit ends when the frontend gives it back (ACK); a job that arrives meanwhile is still
 * answered. The reply is dropped only once it was sent. */
static void *worker_thread(void *arg) {
  struct job_slot *js = arg;
  nng_ctx ctx;
  nng_aio *aio = NULL;
  struct proto_ask ask = {.worker = g.worker_id};
  if (nng_ctx_open(&ctx, g.front) || nng_aio_alloc(&aio, NULL, NULL)) {
    atomic_fetch_sub(&g.workers_running, 1);
    return NULL;
  }
  /* no credit before an executor has finished its warm-up: a job would only fail here */
  while (!g.stop && !atomic_load(&g.serving))
    usleep(20000);
  int64_t give_up_us = 0;
  for (;;) {
    bool last = g.stop;
    if (last && !ask.has_reply)
      break; /* draining, nothing to deliver and no credit held */
    if (last && !give_up_us)
      give_up_us = mono_us() + DRAIN_REPLY_US;
    if (last && mono_us() > give_up_us) {
      fprintf(stderr, "s1-preprocessor: drain: the reply to job %llu could not be delivered\n",
              (unsigned long long)ask.reply.job_id);
      break;
    }
    ask.last = last;
    struct proto_bytes b = {0};
    nng_msg *m = NULL;
    if (proto_ask_encode(&ask, &b) || nng_msg_alloc(&m, 0) || nng_msg_append(m, b.data, b.len)) {
      nng_msg_free(m);
      proto_bytes_free(&b);
      usleep(100000);
      continue;
    }
    proto_bytes_free(&b);
    nng_aio_set_timeout(aio, 1000);
    nng_aio_set_msg(aio, m);
    nng_ctx_send(ctx, aio);
    nng_aio_wait(aio);
    int rv = nng_aio_result(aio);
    if (rv) {
      nng_msg_free(m);
      if (rv == NNG_ECLOSED)
        break; /* the drain closed the socket: nothing more can be delivered */
      continue; /* frontend not there (yet): the reply, if any, goes with the next ask */
    }
    proto_reply_fini(&ask.reply);
    ask.has_reply = false;
    /* wait for a job with no timeout: a cancelled REQ receive abandons the request, and the job
     * the frontend then sends would be dropped. A `last` ask is answered by ACK at once. */
    nng_aio_set_timeout(aio, last ? 10000 : NNG_DURATION_INFINITE);
    nng_ctx_recv(ctx, aio);
    nng_aio_wait(aio);
    if (nng_aio_result(aio)) {
      if (last || g.stop)
        break;
      continue; /* the frontend went away; ask again */
    }
    m = nng_aio_get_msg(aio);
    enum proto_kind kind = PROTO_KIND_COUNT;
    if (proto_peek(nng_msg_body(m), nng_msg_len(m), &kind, NULL) == 0 && kind == PROTO_KIND_ACK) {
      nng_msg_free(m); /* the credit came back (we drain) or the last reply was taken */
      if (last || g.stop)
        break;
      continue;
    }
    atomic_fetch_add(&g.busy, 1);
    struct proto_job job = {0};
    struct cm_diag diag = {0};
    if (proto_job_decode(nng_msg_body(m), nng_msg_len(m), &job, &diag) == 0) {
      pthread_mutex_lock(&js->mu);
      js->job_id = job.job_id;
      js->cancelled = js->lost = false;
      pthread_mutex_unlock(&js->mu);
      handle_job(js, &job, &ask.reply);
      pthread_mutex_lock(&js->mu);
      js->job_id = 0;
      pthread_mutex_unlock(&js->mu);
      ask.has_reply = true;
    } else {
      fprintf(stderr, "s1-preprocessor: unreadable job: %s\n", diag.msg ? diag.msg : "?");
    }
    cm_diag_fini(&diag);
    proto_job_fini(&job);
    nng_msg_free(m);
    atomic_fetch_sub(&g.busy, 1);
  }
  proto_reply_fini(&ask.reply);
  nng_aio_free(aio);
  nng_ctx_close(ctx);
  atomic_fetch_sub(&g.workers_running, 1);
  return NULL;
}

/* The exit's last guard. nng 1.5's nng_close of the frontend socket was seen to block for good
 * (trio_drain under load, 2026-12-02: main in nng_close -> pthread_cond_wait inside libnng, every
 * worker already gone, the status thread idle); by then every reply is delivered or given up, so
 * a close that outlasts CLOSE_MAX_US ends the process (status 0) instead of waiting for systemd's
 * SIGKILL. Started (detached) just before the sockets close; main's normal return beats it. */
static void *close_watchdog(void *arg) {
  (void)arg;
  usleep(CLOSE_MAX_US);
  fprintf(stderr, "s1-preprocessor: drained, exiting (closing the sockets took over %d s: "
          "left to the kernel)\n", CLOSE_MAX_US / 1000000);
  _exit(0);
}

/* ---- start-up ------------------------------------------------------------------------------- */

static int load_model(const char *path, struct model *md) {
  struct cm_diag diag = {0};
  int r = cm_model_dir_open_for(path, CM_MODEL_DIR_COMPILE, &md->dir, &diag);
  if (!r)
    r = pp_model_load(md->dir, &md->pm, &diag);
  if (!r)
    r = cm_model_dir_max_body(md->dir, &md->max_body, &diag);
  if (!r) {
    md->desc = md->pm->desc;
    /* /v1/models lists the body limit; the frontend reads it from here */
    json_object_object_add(md->desc.describe, "max_body_bytes",
                           json_object_new_int64((int64_t)md->max_body));
    json_object_object_add(md->desc.describe, "numerics", /* until an executor reports its own */
                           json_object_new_string(cm_numerics_name(md->dir->numerics)));
    md->describe_text = strdup(json_object_to_json_string_ext(md->desc.describe,
                                                              JSON_C_TO_STRING_PLAIN));
  }
  if (r)
    fprintf(stderr, "s1-preprocessor: model %s: %s\n", path, diag.msg ? diag.msg : cm_strerror(r));
  cm_diag_fini(&diag);
  return r;
}

static void usage(void) {
  fprintf(stderr,
          "usage: s1-preprocessor [--frontend URL] --executor URL [--executor URL...]\n"
          "                       --model DIR [--model DIR...] [--credits K] [--id NAME]\n"
          "  --frontend the frontend's pool (default ipc://RUNTIME/frontend.sock, as s1-frontend)\n"
          "  --executor nng URL of an s1-executor (ipc:// or tcp://); each serves one model and\n"
          "             gets only that model's programs (several per model share the load)\n"
          "  --model    a model directory this process compiles for (several: requests pick\n"
          "             one by \"model\"); every preprocessor of a frontend loads the same ones\n"
          "  --credits  jobs this process works on at once (default 4)\n"
          "  --id       NAME in this process's name HOST:PID:NAME, which logs, request ids\n"
          "             and the frontend's /metrics show (default pp)\n");
}

int main(int argc, char **argv) {
  if (cm_version_requested(argc, argv, "s1-preprocessor"))
    return 0;
  cm_alloc_keep_large(); /* large request buffers reused, not re-mapped (cm_alloc.h) */
  static const struct option opts[] = {
      {"frontend", required_argument, 0, 'f'}, {"executor", required_argument, 0, 'e'},
      {"model", required_argument, 0, 'm'},    {"credits", required_argument, 0, 'k'},
      {"id", required_argument, 0, 'i'},       {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  const char *front = NULL, *model_paths[MAX_MODELS], *id = NULL;
  int n_paths = 0, c;
  g.credits = 4;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'f': front = optarg; break;
    case 'e':
      if (g.n_ex == MAX_EXECUTORS) {
        fprintf(stderr, "s1-preprocessor: at most %d executors\n", MAX_EXECUTORS);
        return 2;
      }
      g.ex[g.n_ex++].url = optarg;
      break;
    case 'm':
      if (n_paths == MAX_MODELS) {
        fprintf(stderr, "s1-preprocessor: at most %d models\n", MAX_MODELS);
        return 2;
      }
      model_paths[n_paths++] = optarg;
      break;
    case 'k': {
      char *end;
      long k = strtol(optarg, &end, 10);
      if (*end || k < 1 || k > MAX_CREDITS) {
        fprintf(stderr, "s1-preprocessor: --credits must be 1..%d\n", MAX_CREDITS);
        return 2;
      }
      g.credits = (int)k;
      break;
    }
    case 'i': id = optarg; break;
    case 'h': usage(); return 0;
    default: usage(); return 2;
    }
  }
  if (!g.n_ex || !n_paths || optind != argc) {
    usage();
    return 2;
  }
  /* ipc sockets only in a private directory (cm_runtime.h): no other user can have made them */
  struct cm_diag rdiag = {0};
  int bad = !front && cm_runtime_url("frontend.sock", &g.default_front, &rdiag);
  if (!bad && !front)
    front = g.default_front;
  bad = bad || cm_ipc_check(front, true, "--frontend", &rdiag);
  for (int i = 0; !bad && i < g.n_ex; i++)
    bad = cm_ipc_check(g.ex[i].url, true, "--executor", &rdiag) != 0;
  if (bad) {
    fprintf(stderr, "s1-preprocessor: %s\n", rdiag.msg ? rdiag.msg : "refused");
    cm_diag_fini(&rdiag);
    return 1;
  }
  char host[64] = "host";
  gethostname(host, sizeof(host) - 1);
  snprintf(g.worker_id, sizeof(g.worker_id), "%s:%ld:%s", host, (long)getpid(), id ? id : "pp");
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  for (int i = 0; i < n_paths; i++) {
    if (load_model(model_paths[i], &g.models[i]))
      return 1;
    g.n_models = i + 1;
    for (int j = 0; j < i; j++)
      if (strcmp(g.models[i].dir->manifest_sha256, g.models[j].dir->manifest_sha256) == 0) {
        fprintf(stderr, "s1-preprocessor: --model %s and %s are the same model directory\n",
                model_paths[j], model_paths[i]);
        return 2;
      }
  }
  /* the slots exist before any executor connection: its pipe callbacks read them */
  for (int i = 0; i < g.credits; i++) {
    pthread_mutex_init(&g.slots[i].mu, NULL);
    g.slots[i].ex = -1;
    if (nng_aio_alloc(&g.slots[i].aio, NULL, NULL)) {
      fprintf(stderr, "s1-preprocessor: out of memory\n");
      return 1;
    }
  }
  int rv;
  if ((rv = nng_req0_open(&g.front)) ||
      (rv = nng_socket_set_ms(g.front, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) ||
      (rv = nng_socket_set_size(g.front, NNG_OPT_RECVMAXSZ, RECV_MAX_BYTES)) ||
      (rv = nng_socket_set_ms(g.front, NNG_OPT_RECONNMINT, 50)) ||
      (rv = nng_socket_set_ms(g.front, NNG_OPT_RECONNMAXT, 1000)) ||
      (rv = nng_dial(g.front, front, NULL, NNG_FLAG_NONBLOCK))) {
    fprintf(stderr, "s1-preprocessor: frontend %s: %s\n", front, nng_strerror(rv));
    return 1;
  }
  for (int i = 0; i < g.n_ex; i++) {
    struct executor *e = &g.ex[i];
    atomic_store(&e->state, PROTO_STATE_STARTING);
    atomic_store(&e->model, -1);
    e->logged_state = -1;
    if ((rv = nng_req0_open(&e->sock)) ||
        (rv = nng_socket_set_ms(e->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) ||
        (rv = nng_socket_set_size(e->sock, NNG_OPT_RECVMAXSZ, RECV_MAX_BYTES)) ||
        (rv = nng_socket_set_ms(e->sock, NNG_OPT_RECONNMINT, 50)) ||
        (rv = nng_socket_set_ms(e->sock, NNG_OPT_RECONNMAXT, 500)) ||
        (rv = nng_pipe_notify(e->sock, NNG_PIPE_EV_ADD_POST, on_executor_pipe, e)) ||
        (rv = nng_pipe_notify(e->sock, NNG_PIPE_EV_REM_POST, on_executor_pipe, e)) ||
        (rv = nng_dial(e->sock, e->url, NULL, NNG_FLAG_NONBLOCK))) {
      fprintf(stderr, "s1-preprocessor: executor %s: %s\n", e->url, nng_strerror(rv));
      return 1;
    }
  }
  fprintf(stderr, "s1-preprocessor %s: %d model(s), %d executor(s), %d credits, frontend %s\n",
          g.worker_id, g.n_models, g.n_ex, g.credits, front);
  pthread_t st, workers[MAX_CREDITS];
  pthread_create(&st, NULL, status_thread, NULL);
  atomic_store(&g.workers_running, g.credits);
  for (int i = 0; i < g.credits; i++)
    pthread_create(&workers[i], NULL, worker_thread, &g.slots[i]);
  /* SIGTERM: drain. The status thread reports DRAINING (the frontend sends no new job and gives
   * the idle credits back); every job in hand is answered, its reply sent in a last ask. */
  while (!g.stop)
    usleep(50000);
  fprintf(stderr, "s1-preprocessor: SIGTERM: draining %d job(s)\n", atomic_load(&g.busy));
  int64_t end = mono_us() + DRAIN_MAX_US;
  while (atomic_load(&g.workers_running) > 0 && mono_us() < end)
    usleep(10000);
  if (atomic_load(&g.workers_running) > 0) {
    fprintf(stderr, "s1-preprocessor: drain: %d worker(s) still busy after %d s; cancelling their "
            "jobs and closing\n", atomic_load(&g.workers_running), DRAIN_MAX_US / 1000000);
    /* a job still at an executor would hold its worker (and the exit) until its own deadline:
     * cancel it as a client that left is (cancel_job), so the stop stays within systemd's 60 s */
    for (int i = 0; i < g.credits; i++) {
      pthread_mutex_lock(&g.slots[i].mu);
      uint64_t id = g.slots[i].job_id;
      pthread_mutex_unlock(&g.slots[i].mu);
      cancel_job(id);
    }
  }
  pthread_t wd;
  if (pthread_create(&wd, NULL, close_watchdog, NULL) == 0)
    pthread_detach(wd);
  nng_close(g.front);
  for (int i = 0; i < g.credits; i++)
    pthread_join(workers[i], NULL);
  atomic_store(&g.status_stop, 1);
  pthread_join(st, NULL);
  fprintf(stderr, "s1-preprocessor: drained, exiting\n");
  for (int i = 0; i < g.n_ex; i++)
    nng_close(g.ex[i].sock);
  for (int i = 0; i < g.credits; i++)
    nng_aio_free(g.slots[i].aio);
  for (int i = 0; i < g.n_models; i++) {
    pp_model_free(g.models[i].pm);
    free(g.models[i].describe_text);
    cm_model_dir_free(g.models[i].dir);
  }
  free(g.default_front);
  return 0;
}
