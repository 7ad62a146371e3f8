/* s1-preprocessor: a CPU worker of the service. It dials the frontend as a REQ socket and offers K
 * credits (one context and one worker thread each: "ask" carries the previous reply, the answer
 * is the next job), dials every executor (one REQ socket each, health probed every 200 ms),
 * parses request JSON strictly, routes by model id / alias, runs the family's compile, sends the
 * program to the least-loaded ready executor, runs finish and replies. A status thread reports
 * executor health and the loaded models to the frontend. Requests fail as data, never as a crash. */
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

#include "cm_version.h"
#include "pp_family.h"
#include "pp_json.h"
#include "proto_job.h"
#include "proto_status.h"

#define MAX_EXECUTORS 64
#define MAX_MODELS 16
#define MAX_CREDITS 256
#define PROBE_EVERY_MS 200
#define PROBE_TIMEOUT_MS 1000
#define RECV_MAX_BYTES ((size_t)1 << 30)

struct executor {
  const char *url;        /* nng URL (argv) */
  nng_socket sock;        /* REQ socket dialled to it */
  atomic_int state;       /* enum proto_state from the last probe (UNAVAILABLE when unreachable) */
  atomic_int in_flight;   /* programs sent and not answered */
  atomic_int pipes;       /* connected pipes (0: unreachable, a send would wait) */
  atomic_int connected;   /* ever connected: before that an absent executor is still starting */
  char reason[320];       /* why not ready, from the last probe (status thread only) */
  char instance[PROTO_MAX_ID_BYTES + 1]; /* its id from the last health reply (status thread) */
  struct proto_exec_stats stats; /* its counters from the last health reply (status thread) */
};

struct model {
  struct cm_model_dir *dir;     /* opened directory */
  const struct pp_family *fam;  /* its family */
  void *state;                  /* family state */
  struct pp_model_desc desc;    /* id, aliases, revision, describe */
  char *describe_text;          /* desc.describe as compact JSON */
};

static struct {
  nng_socket front;                        /* REQ socket to the frontend */
  struct executor ex[MAX_EXECUTORS];       /* executors dialled */
  int n_ex;                                /* entries in ex */
  struct model models[MAX_MODELS];         /* loaded models */
  int n_models;                            /* entries in models */
  int credits;                             /* worker threads = credits offered (--credits) */
  char worker_id[128];                     /* "host:pid:id", sent with every message */
  atomic_int busy;                         /* workers inside a job */
  atomic_int serving;                      /* an executor was ready once: credits are offered */
  volatile sig_atomic_t stop;              /* SIGTERM seen */
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

static void probe_executors(void) {
  struct proto_bytes b = {0};
  if (proto_simple_encode(PROTO_KIND_HEALTH, &b))
    return;
  for (int i = 0; i < g.n_ex; i++) {
    nng_msg *m = NULL;
    struct proto_health h = {0};
    int st = atomic_load(&g.ex[i].connected) ? PROTO_STATE_UNAVAILABLE : PROTO_STATE_STARTING;
    snprintf(g.ex[i].reason, sizeof(g.ex[i].reason), "executor %s: %s", g.ex[i].url,
             st == PROTO_STATE_STARTING ? "not connected yet" : "unreachable");
    g.ex[i].instance[0] = 0; /* reported only while it answers */
    if (atomic_load(&g.ex[i].pipes) > 0 && roundtrip(g.ex[i].sock, &b, PROBE_TIMEOUT_MS, &m) == 0 &&
        proto_health_decode(nng_msg_body(m), nng_msg_len(m), &h, NULL) == 0) {
      st = (int)h.state;
      snprintf(g.ex[i].reason, sizeof(g.ex[i].reason), "executor %s: %s", g.ex[i].url,
               h.reason ? h.reason : "ready");
      snprintf(g.ex[i].instance, sizeof(g.ex[i].instance), "%s", h.instance ? h.instance : "");
      g.ex[i].stats = h.stats;
    }
    nng_msg_free(m);
    proto_health_fini(&h);
    atomic_store(&g.ex[i].state, st);
  }
  proto_bytes_free(&b);
}

/* nng thread: an executor connection came or went. A lost one is unavailable at once (a REQ
 * send without a pipe would wait for the deadline); the next probe decides when it is back. */
static void on_executor_pipe(nng_pipe p, nng_pipe_ev ev, void *arg) {
  (void)p;
  struct executor *e = arg;
  if (ev == NNG_PIPE_EV_ADD_POST) {
    atomic_fetch_add(&e->pipes, 1);
    atomic_store(&e->connected, 1);
  } else if (ev == NNG_PIPE_EV_REM_POST) {
    atomic_fetch_sub(&e->pipes, 1);
    atomic_store(&e->state, PROTO_STATE_UNAVAILABLE);
  }
}

/* The ready, connected executor with the fewest programs in flight, or -1. */
static int pick_executor(void) {
  int best = -1, best_n = 0;
  for (int i = 0; i < g.n_ex; i++) {
    if (atomic_load(&g.ex[i].state) != PROTO_STATE_READY || atomic_load(&g.ex[i].pipes) <= 0)
      continue;
    int n = atomic_load(&g.ex[i].in_flight);
    if (best < 0 || n < best_n)
      best = i, best_n = n;
  }
  return best;
}

static enum proto_state overall_state(uint32_t *ret_ready, const char **ret_reason) {
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
  if (starting >= 0) {
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

static void *status_thread(void *arg) {
  (void)arg;
  struct proto_model pm[MAX_MODELS];
  for (int i = 0; i < g.n_models; i++)
    pm[i] = (struct proto_model){(char *)g.models[i].desc.id, (char *)g.models[i].desc.revision,
                                 g.models[i].describe_text};
  struct proto_exec_report er[MAX_EXECUTORS];
  while (!g.stop) {
    int64_t t0 = mono_us();
    probe_executors();
    struct proto_status s = {.worker = g.worker_id, .executors_total = (uint32_t)g.n_ex,
                             .credits = (uint32_t)g.credits, .models = pm,
                             .n_models = (uint32_t)g.n_models, .executors = er};
    for (int i = 0; i < g.n_ex; i++) /* the counters of every executor that answered a probe */
      if (g.ex[i].instance[0] && s.n_executors < PROTO_MAX_EXECUTORS)
        er[s.n_executors++] = (struct proto_exec_report){g.ex[i].instance, g.ex[i].stats};
    const char *reason = NULL;
    s.state = overall_state(&s.executors_ready, &reason);
    s.reason = (char *)reason;
    if (s.state == PROTO_STATE_READY)
      atomic_store(&g.serving, 1);
    struct proto_bytes b = {0};
    nng_msg *m = NULL;
    if (proto_status_encode(&s, &b) == 0 && roundtrip(g.front, &b, PROBE_TIMEOUT_MS, &m) == 0)
      nng_msg_free(m);
    proto_bytes_free(&b);
    int64_t left = PROBE_EVERY_MS * 1000 - (mono_us() - t0);
    if (left > 0)
      usleep((useconds_t)left);
  }
  return NULL;
}

/* ---- one job -------------------------------------------------------------------------------- */

static const struct model *route(json_object *root, const char *header_model,
                                 struct cm_diag *diag, int *ret_code) {
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
    *ret_code = cm_diag_set(diag, -CM_EREQUEST, "model: required, %d models are loaded",
                            g.n_models);
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
  *ret_code = cm_diag_set(diag, -CM_EREQUEST, "model: unknown model \"%.200s\"", name);
  return NULL;
}

static void handle_job(const struct proto_job *job, struct proto_reply *rp) {
  struct cm_diag diag = {0};
  json_object *root = NULL;
  struct proto_program prog = {0};
  struct proto_result res = {0};
  struct proto_bytes pb = {0};
  void *ctx = NULL;
  nng_msg *m = NULL;
  const struct model *md = NULL;
  int ex = -1, code = 0;
  int64_t t0 = mono_us(), t1 = t0, t2 = t0;
  struct pp_request_info info = {.request_id = job->request_id, .deadline_us = job->deadline_us,
                                 .received_us = proto_now_us()};
  rp->job_id = job->job_id;
  if (job->deadline_us && proto_now_us() >= job->deadline_us) {
    code = cm_diag_set(&diag, -CM_ETIMEOUT, "the request deadline passed in the queue");
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
  free(rp->model_revision);
  rp->model_revision = md->desc.revision ? strdup(md->desc.revision) : NULL;
  if ((code = md->fam->compile(md->state, root, &info, &prog, &ctx, &diag)))
    goto out;
  prog.deadline_us = job->deadline_us;
  if ((code = proto_program_set_ids(&prog, md->desc.id, job->request_id)) ||
      (code = proto_program_encode(&prog, &pb))) {
    code = cm_diag_set(&diag, code == -ENOMEM ? -ENOMEM : -CM_EINTERNAL,
                       "the compiled program is invalid or too large");
    goto out;
  }
  t1 = mono_us();
  info.compile_end_us = proto_now_us();
  if ((ex = pick_executor()) < 0) {
    code = cm_diag_set(&diag, -CM_EUNAVAILABLE, "no executor is ready");
    goto out;
  }
  int64_t left_ms = job->deadline_us ? (job->deadline_us - proto_now_us()) / 1000 : 600000;
  if (left_ms <= 0) {
    code = cm_diag_set(&diag, -CM_ETIMEOUT, "the request deadline passed");
    goto out;
  }
  atomic_fetch_add(&g.ex[ex].in_flight, 1);
  int rv = roundtrip(g.ex[ex].sock, &pb, (nng_duration)left_ms, &m);
  atomic_fetch_sub(&g.ex[ex].in_flight, 1);
  t2 = mono_us();
  if (rv == NNG_ETIMEDOUT) {
    code = cm_diag_set(&diag, -CM_ETIMEOUT, "the request deadline passed during execution");
    goto out;
  }
  if (rv) {
    atomic_store(&g.ex[ex].state, PROTO_STATE_UNAVAILABLE); /* until the next probe says more */
    code = cm_diag_set(&diag, -CM_EUNAVAILABLE, "executor %s failed: %s", g.ex[ex].url,
                       nng_strerror(rv));
    goto out;
  }
  if ((code = proto_result_decode(nng_msg_body(m), nng_msg_len(m), &res, &diag))) {
    code = -CM_EINTERNAL;
    goto out;
  }
  if (res.status) {
    code = res.status == -CM_ETIMEOUT || res.status == -CM_EUNAVAILABLE ||
                   res.status == -CM_ENOTREADY || res.status == -CM_ECANCELLED
               ? res.status
               : -CM_EINTERNAL;
    if (res.status == -CM_ENOTREADY)
      code = -CM_EUNAVAILABLE;
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
    if ((code = md->fam->finish(md->state, ctx, &res, &info, &json, &n, &stats, &diag))) {
      code = code == -ENOMEM ? code : -CM_EINTERNAL;
      goto out;
    }
    rp->status = 200;
    rp->body = json;
    rp->n_body = n;
    rp->tokens = stats.tokens;
    rp->decisions = stats.decisions;
  }
out:
  if (code)
    reply_error(rp, code, diag.msg);
  int64_t t3 = mono_us();
  if (code && t1 == t0)
    t1 = t3;
  if (t2 < t1)
    t2 = t1;
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
    md->fam->ctx_free(ctx);
  nng_msg_free(m);
  proto_bytes_free(&pb);
  proto_program_fini(&prog);
  proto_result_fini(&res);
  json_object_put(root);
  cm_diag_fini(&diag);
}

/* One credit: ask (with the previous reply), take the job, answer it. */
static void *worker_thread(void *arg) {
  (void)arg;
  nng_ctx ctx;
  nng_aio *aio = NULL;
  struct proto_ask ask = {.worker = g.worker_id};
  if (nng_ctx_open(&ctx, g.front) || nng_aio_alloc(&aio, NULL, NULL))
    return NULL;
  /* no credit before an executor has finished its warm-up: a job would only fail here */
  while (!g.stop && !atomic_load(&g.serving))
    usleep(20000);
  while (!g.stop) {
    struct proto_bytes b = {0};
    nng_msg *m = NULL;
    if (proto_ask_encode(&ask, &b) || nng_msg_alloc(&m, 0) || nng_msg_append(m, b.data, b.len)) {
      nng_msg_free(m);
      proto_bytes_free(&b);
      usleep(100000);
      continue;
    }
    proto_bytes_free(&b);
    proto_reply_fini(&ask.reply);
    ask.has_reply = false;
    nng_aio_set_timeout(aio, 1000);
    nng_aio_set_msg(aio, m);
    nng_ctx_send(ctx, aio);
    nng_aio_wait(aio);
    if (nng_aio_result(aio)) {
      nng_msg_free(m);
      continue; /* frontend not there yet */
    }
    /* wait for a job with no timeout: a cancelled REQ receive abandons the request, and the job
     * the frontend then sends would be dropped. Closing the socket (SIGTERM) ends the wait. */
    nng_aio_set_timeout(aio, NNG_DURATION_INFINITE);
    nng_ctx_recv(ctx, aio);
    nng_aio_wait(aio);
    if (nng_aio_result(aio))
      continue; /* the frontend went away (or we stop); ask again */
    m = nng_aio_get_msg(aio);
    atomic_fetch_add(&g.busy, 1);
    struct proto_job job = {0};
    struct cm_diag diag = {0};
    if (proto_job_decode(nng_msg_body(m), nng_msg_len(m), &job, &diag) == 0) {
      handle_job(&job, &ask.reply);
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
  return NULL;
}

/* ---- start-up ------------------------------------------------------------------------------- */

static int load_model(const char *path, struct model *md) {
  struct cm_diag diag = {0};
  int r = cm_model_dir_open(path, &md->dir, &diag);
  if (!r && !(md->fam = pp_family_find(md->dir->family)))
    r = cm_diag_set(&diag, -CM_EUNSUPPORTED, "%s: family \"%s\" has no preprocessor family in "
                    "this build", path, md->dir->family);
  if (!r)
    r = md->fam->load(md->dir, &md->state, &diag);
  if (!r) {
    md->fam->describe(md->state, &md->desc);
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
          "usage: s1-preprocessor --frontend URL --executor URL [--executor URL...]\n"
          "                       --model DIR [--model DIR...] [--credits K] [--id NAME]\n"
          "  --credits  jobs this process works on at once (default 4)\n");
}

int main(int argc, char **argv) {
  if (cm_version_requested(argc, argv, "s1-preprocessor"))
    return 0;
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
  if (!front || !g.n_ex || !n_paths || optind != argc) {
    usage();
    return 2;
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
  for (int i = 0; i < g.credits; i++)
    pthread_create(&workers[i], NULL, worker_thread, NULL);
  /* SIGTERM: let jobs in progress finish (their replies go out with the next ask), then close */
  while (!g.stop)
    usleep(50000);
  for (int i = 0; i < 600 && atomic_load(&g.busy) > 0; i++)
    usleep(50000);
  usleep(100000);
  nng_close(g.front);
  for (int i = 0; i < g.credits; i++)
    pthread_join(workers[i], NULL);
  pthread_join(st, NULL);
  for (int i = 0; i < g.n_ex; i++)
    nng_close(g.ex[i].sock);
  for (int i = 0; i < g.n_models; i++) {
    g.models[i].fam->free(g.models[i].state);
    free(g.models[i].describe_text);
    cm_model_dir_free(g.models[i].dir);
  }
  return 0;
}
