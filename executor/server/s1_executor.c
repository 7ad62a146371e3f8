/* s1-executor: owns one model on one device and runs programs. The nng REP socket has a few
 * contexts whose callbacks answer health probes at once and hand programs to the one compute
 * thread (main). Ready only after a warm-up program; a sticky error retires it (health
 * UNAVAILABLE, every later program refused, then exit 3 for the supervisor to restart it), so no
 * request ever gets a wrong answer. */
#include <errno.h>
#include <getopt.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ex_head.h"
#include "ex_program.h"
#include "ex_record.h"
#include "proto_program.h"
#include "proto_status.h"

#define N_CTX 8
#define RETIRE_EXIT_S 5 /* a retired executor answers 503 this long, then exits 3 (restart) */
#define RECV_MAX_BYTES ((size_t)1 << 30)
#define CANCEL_RING 64 /* cancelled request ids remembered */

enum slot_phase { SLOT_RECV, SLOT_WAIT, SLOT_SEND };

struct slot {
  nng_ctx ctx;           /* REP context */
  nng_aio *aio;          /* its aio */
  enum slot_phase phase; /* what the pending operation is */
  nng_msg *req;          /* a received PROGRAM waiting for the compute thread */
  int64_t queued_us;     /* when it was queued (monotonic µs) */
  struct slot *next;     /* compute queue link */
};

static struct {
  nng_socket sock;           /* REP socket preprocessors dial */
  struct slot slots[N_CTX];  /* its contexts */
  pthread_mutex_t mu;        /* guards the queue */
  pthread_cond_t cv;         /* signals work or stop */
  struct slot *head, *tail;  /* FIFO of programs */
  atomic_int state;          /* enum proto_state */
  atomic_ullong programs;    /* programs run */
  char *model_id, *revision; /* for health replies (set once before READY) */
  char *digest;              /* the model directory's manifest SHA-256: preprocessors route by it */
  char reason[256];          /* why not ready */
  volatile sig_atomic_t stop; /* SIGTERM seen */
  char cancelled[CANCEL_RING][PROTO_MAX_ID_BYTES + 1]; /* recent CANCEL ids (guarded by mu) */
  unsigned n_cancel;          /* CANCELs seen; the ring holds the last CANCEL_RING */
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static int64_t mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void on_signal(int sig) {
  (void)sig;
  g.stop = 1;
  pthread_cond_signal(&g.cv);
}

static void send_bytes(struct slot *s, struct proto_bytes *b) {
  nng_msg *m = NULL;
  if (nng_msg_alloc(&m, 0) != 0 || nng_msg_append(m, b->data, b->len) != 0) {
    nng_msg_free(m);
    proto_bytes_free(b);
    s->phase = SLOT_RECV;
    nng_ctx_recv(s->ctx, s->aio);
    return;
  }
  proto_bytes_free(b);
  s->phase = SLOT_SEND;
  nng_aio_set_msg(s->aio, m);
  nng_ctx_send(s->ctx, s->aio);
}

static void send_error(struct slot *s, int status, const char *msg) {
  struct proto_result r = {0};
  struct proto_bytes b = {0};
  proto_result_set_error(&r, status, msg);
  if (proto_result_encode(&r, &b) == 0) {
    send_bytes(s, &b);
  } else {
    s->phase = SLOT_RECV;
    nng_ctx_recv(s->ctx, s->aio);
  }
  proto_result_fini(&r);
}

static void send_health(struct slot *s) {
  struct proto_health h = {.state = (enum proto_state)atomic_load(&g.state),
                           .programs = atomic_load(&g.programs)};
  if (h.state == PROTO_STATE_READY) {
    h.model_id = g.model_id;
    h.revision = g.revision;
    h.digest = g.digest;
  } else {
    h.reason = g.reason;
  }
  struct proto_bytes b = {0};
  if (proto_health_encode(&h, &b) == 0) {
    send_bytes(s, &b);
  } else {
    s->phase = SLOT_RECV;
    nng_ctx_recv(s->ctx, s->aio);
  }
}

/* Remembers a cancelled request id (a ring of the last CANCEL_RING): a program of that request
 * that has not started is answered -CM_ECANCELLED with nothing run; one already running finishes. */
static void remember_cancel(const char *rid) {
  pthread_mutex_lock(&g.mu);
  snprintf(g.cancelled[g.n_cancel++ % CANCEL_RING], PROTO_MAX_ID_BYTES + 1, "%s", rid);
  pthread_mutex_unlock(&g.mu);
}

static bool was_cancelled(const char *rid) {
  bool hit = false;
  pthread_mutex_lock(&g.mu);
  for (unsigned i = 0; rid && !hit && i < CANCEL_RING && i < g.n_cancel; i++)
    hit = strcmp(g.cancelled[i], rid) == 0;
  pthread_mutex_unlock(&g.mu);
  return hit;
}

/* nng callback: a receive or a send finished on one context. */
static void on_aio(void *arg) {
  struct slot *s = arg;
  int rv = nng_aio_result(s->aio);
  if (s->phase == SLOT_SEND) {
    if (rv != 0)
      nng_msg_free(nng_aio_get_msg(s->aio));
    s->phase = SLOT_RECV;
    nng_ctx_recv(s->ctx, s->aio);
    return;
  }
  if (rv != 0) {
    if (rv != NNG_ECLOSED)
      nng_ctx_recv(s->ctx, s->aio);
    return;
  }
  nng_msg *m = nng_aio_get_msg(s->aio);
  enum proto_kind kind;
  if (proto_peek(nng_msg_body(m), nng_msg_len(m), &kind, NULL) != 0 ||
      (kind != PROTO_KIND_HEALTH && kind != PROTO_KIND_PROGRAM && kind != PROTO_KIND_CANCEL)) {
    nng_msg_free(m);
    send_error(s, -CM_EVERSION, "unreadable message or another proto version");
    return;
  }
  if (kind == PROTO_KIND_CANCEL) {
    struct proto_cancel c = {0};
    int rc = proto_cancel_decode(nng_msg_body(m), nng_msg_len(m), &c, NULL);
    nng_msg_free(m);
    if (rc) {
      send_error(s, -CM_EVERSION, "unreadable CANCEL");
      return;
    }
    remember_cancel(c.request_id);
    proto_cancel_fini(&c);
    struct proto_bytes b = {0};
    if (proto_simple_encode(PROTO_KIND_ACK, &b) == 0) {
      send_bytes(s, &b);
    } else {
      s->phase = SLOT_RECV;
      nng_ctx_recv(s->ctx, s->aio);
    }
    return;
  }
  if (kind == PROTO_KIND_HEALTH) {
    nng_msg_free(m);
    send_health(s);
    return;
  }
  int st = atomic_load(&g.state);
  if (st != PROTO_STATE_READY) {
    nng_msg_free(m);
    send_error(s, st == PROTO_STATE_STARTING ? -CM_ENOTREADY : -CM_EUNAVAILABLE,
               st == PROTO_STATE_STARTING ? "executor warming up" : "executor retired");
    return;
  }
  s->req = m;
  s->phase = SLOT_WAIT;
  s->queued_us = mono_us();
  s->next = NULL;
  pthread_mutex_lock(&g.mu);
  if (g.tail)
    g.tail->next = s;
  else
    g.head = s;
  g.tail = s;
  pthread_cond_signal(&g.cv);
  pthread_mutex_unlock(&g.mu);
}

/* Writes a warm-up program: one short text row from an empty state, its hidden row, and each
 * head the model has. */
static int warmup(struct ex_runner *runner, struct cm_diag *diag) {
  struct proto_program p = {0};
  struct proto_result res = {0};
  int32_t ids[4] = {0, 1, 2, 3};
  int r = proto_program_add_row(&p, ids, NULL, 4, -1, NULL);
  if (!r)
    r = proto_program_add_readout(&p, PROTO_READOUT_HIDDEN, 0, -1, NULL, 0, NULL, NULL);
  if (!r)
    r = proto_program_add_readout(&p, PROTO_READOUT_TOKEN_LOGPROB, 0, -1, ids, 1, NULL, NULL);
  const struct ex_head_kind *const *kinds = ex_head_kinds();
  for (size_t i = 0; !r && kinds[i]; i++) {
    r = proto_program_add_readout(&p, PROTO_READOUT_HEAD, 0, -1, NULL, 0, kinds[i]->name, NULL);
    struct cm_diag d2 = {0};
    if (!r && ex_runner_run(runner, &p, &res, &d2) == -CM_EPROGRAM) {
      p.n_readouts--; /* this model has no such head */
      free(p.readouts[p.n_readouts].head);
      free(p.readouts[p.n_readouts].ids);
    }
    cm_diag_fini(&d2);
    proto_result_fini(&res);
  }
  if (!r)
    r = ex_runner_run(runner, &p, &res, diag);
  for (uint32_t i = 0; !r && i < res.n_outputs; i++)
    for (uint32_t j = 0; j < res.n_floats[i]; j++)
      if (res.outputs[i][j] != res.outputs[i][j]) {
        r = cm_diag_set(diag, -CM_EINTERNAL, "warm-up readout %u is NaN", i);
        break;
      }
  proto_result_fini(&res);
  proto_program_fini(&p);
  return r;
}

/* A positive count option. */
static bool size_arg(const char *s, size_t *ret) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || !*s || *end || v == 0 || v > (1ull << 40) || *s == '-') {
    fprintf(stderr, "s1-executor: \"%s\" is not a positive count\n", s);
    return false;
  }
  *ret = (size_t)v;
  return true;
}

static void usage(void) {
  fprintf(stderr,
          "usage: s1-executor --model DIR [--device cpu|cuda:N] [--listen URL] [--record DIR]\n"
          "                   [--bf16-rounding] [--max-tokens N] [--max-seqs N] [--max-ctx N]\n"
          "                   [--snapshots N] [--max-readouts N] [--max-patches N] [--cuda-lora on|off]\n"
          "  --listen        nng URL to serve (default ipc:///tmp/s1-executor-0.sock)\n"
          "  --device        cpu (default, float32) or cuda:N (the bf16 CUDA engine)\n"
          "  CUDA limits, reserved at start-up (a program over them is refused):\n"
          "  --max-tokens    tokens of one launch (default 8192)\n"
          "  --max-seqs      rows of one launch (default 64)\n"
          "  --max-ctx       tokens one snapshot holds, prefix + row (default 8192)\n"
          "  --snapshots     prefixes of one program (default 8)\n"
          "  --max-readouts  readout rows of one launch (default 256)\n"
          "  --max-patches   vision patches of one image, a multiple of 4 (default 16384)\n"
          "  --cuda-lora on|off  load a kept LoRA adapter onto the CUDA engine (default on;\n"
          "                  off refuses such a model on CUDA)\n");
}

int main(int argc, char **argv) {
  static const struct option opts[] = {
      {"model", required_argument, 0, 'm'},  {"device", required_argument, 0, 'd'},
      {"listen", required_argument, 0, 'l'}, {"record", required_argument, 0, 'r'},
      {"bf16-rounding", no_argument, 0, 'b'}, {"help", no_argument, 0, 'h'},
      {"max-tokens", required_argument, 0, 'T'}, {"max-seqs", required_argument, 0, 'S'},
      {"max-ctx", required_argument, 0, 'C'},    {"snapshots", required_argument, 0, 'N'},
      {"max-readouts", required_argument, 0, 'R'}, {"max-patches", required_argument, 0, 'P'},
      {"cuda-lora", required_argument, 0, 'L'},
      {0, 0, 0, 0}};
  const char *model = NULL, *device = "cpu", *url = "ipc:///tmp/s1-executor-0.sock";
  const char *record = NULL;
  struct ex_runner_options ro = {0};
  int c;
  bool ok = true;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'm': model = optarg; break;
    case 'd': device = optarg; break;
    case 'l': url = optarg; break;
    case 'r': record = optarg; break;
    case 'b': ro.round_bf16 = true; break;
    case 'T': ok = ok && size_arg(optarg, &ro.engine.max_tokens); break;
    case 'S': ok = ok && size_arg(optarg, &ro.engine.max_seqs); break;
    case 'C': ok = ok && size_arg(optarg, &ro.engine.max_ctx); break;
    case 'N': ok = ok && size_arg(optarg, &ro.engine.n_snapshots); break;
    case 'R': ok = ok && size_arg(optarg, &ro.engine.max_readouts); break;
    case 'L':
      ok = ok && (strcmp(optarg, "on") == 0 || strcmp(optarg, "off") == 0);
      ro.engine.refuse_lora = strcmp(optarg, "off") == 0;
      break;
    case 'P': {
      size_t v = 0;
      ok = ok && size_arg(optarg, &v);
      ro.engine.max_patches = (int64_t)v;
      break;
    }
    case 'h': usage(); return 0;
    default: usage(); return 2;
    }
  }
  if (!model || optind != argc || !ok) {
    usage();
    return 2;
  }
  if (ex_engine_device(device) == -2) {
    fprintf(stderr, "s1-executor: unknown device \"%s\" (cpu, cuda or cuda:N)\n", device);
    return 2;
  }
  ro.device = device;
  if (record && mkdir(record, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "s1-executor: --record %s: %s\n", record, strerror(errno));
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  atomic_store(&g.state, PROTO_STATE_STARTING);
  snprintf(g.reason, sizeof(g.reason), "loading %s", model);

  int rv;
  if ((rv = nng_rep0_open(&g.sock)) != 0 ||
      (rv = nng_socket_set_size(g.sock, NNG_OPT_RECVMAXSZ, RECV_MAX_BYTES)) != 0 ||
      (rv = nng_listen(g.sock, url, NULL, 0)) != 0) {
    fprintf(stderr, "s1-executor: cannot listen on %s: %s\n", url, nng_strerror(rv));
    return 1;
  }
  for (int i = 0; i < N_CTX; i++) {
    struct slot *s = &g.slots[i];
    if ((rv = nng_ctx_open(&s->ctx, g.sock)) != 0 ||
        (rv = nng_aio_alloc(&s->aio, on_aio, s)) != 0) {
      fprintf(stderr, "s1-executor: nng: %s\n", nng_strerror(rv));
      return 1;
    }
    s->phase = SLOT_RECV;
    nng_ctx_recv(s->ctx, s->aio);
  }

  struct cm_diag diag = {0};
  struct cm_model_dir *dir = NULL;
  struct ex_runner *runner = NULL;
  int64_t t0 = mono_us();
  int r = cm_model_dir_open(model, &dir, &diag);
  if (!r)
    r = ex_runner_new(dir, &ro, &runner, &diag);
  if (!r) {
    g.model_id = strdup(ex_runner_model_id(runner));
    g.revision = strdup(ex_runner_revision(runner));
    g.digest = strdup(dir->manifest_sha256);
    snprintf(g.reason, sizeof(g.reason), "warm-up");
    r = warmup(runner, &diag);
  }
  int64_t retired_us = 0;
  if (r) {
    fprintf(stderr, "s1-executor: %s: %s (%s); retired\n", model,
            diag.msg ? diag.msg : cm_strerror(r), cm_strerror(r));
    snprintf(g.reason, sizeof(g.reason), "model failed to load or warm up: %s",
             diag.msg ? diag.msg : cm_strerror(r));
    atomic_store(&g.state, PROTO_STATE_UNAVAILABLE);
    retired_us = mono_us();
  } else {
    fprintf(stderr,
            "s1-executor: %s ready on %s (device %s, model %s, revision %s, load + warm-up "
            "%.1f ms)\n",
            model, url, device, g.model_id, g.revision, (double)(mono_us() - t0) / 1000.0);
    atomic_store(&g.state, PROTO_STATE_READY);
  }
  cm_diag_fini(&diag);

  uint64_t seq = 0;
  int rc = 0;
  while (!g.stop) {
    if (retired_us && mono_us() - retired_us > (int64_t)RETIRE_EXIT_S * 1000000) {
      fprintf(stderr, "s1-executor: retired; exiting for the supervisor to restart it\n");
      rc = 3;
      break;
    }
    pthread_mutex_lock(&g.mu);
    if (!g.head && !g.stop) { /* one wait: the loop re-checks retirement every second */
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_sec += 1;
      pthread_cond_timedwait(&g.cv, &g.mu, &ts);
    }
    struct slot *s = g.head;
    if (s) {
      g.head = s->next;
      if (!g.head)
        g.tail = NULL;
    }
    pthread_mutex_unlock(&g.mu);
    if (!s)
      continue;
    struct proto_program p = {0};
    struct proto_result res = {0};
    struct proto_bytes out = {0};
    int64_t start = mono_us();
    r = proto_program_decode(nng_msg_body(s->req), nng_msg_len(s->req), &p, &diag);
    if (r) {
      proto_result_set_error(&res, -CM_EPROGRAM, diag.msg);
    } else if (was_cancelled(p.request_id)) {
      proto_result_set_error(&res, -CM_ECANCELLED, "request cancelled");
    } else if (atomic_load(&g.state) != PROTO_STATE_READY) {
      proto_result_set_error(&res, -CM_EUNAVAILABLE, "executor retired");
    } else {
      r = ex_runner_run(runner, &p, &res, &diag);
      atomic_fetch_add(&g.programs, 1);
      if (r && r != -CM_EPROGRAM && r != -CM_ETIMEOUT) {
        fprintf(stderr, "s1-executor: request %s: sticky error, retiring: %s\n",
                p.request_id ? p.request_id : "?", diag.msg ? diag.msg : cm_strerror(r));
        snprintf(g.reason, sizeof(g.reason), "retired after: %s",
                 diag.msg ? diag.msg : cm_strerror(r));
        atomic_store(&g.state, PROTO_STATE_UNAVAILABLE);
        retired_us = mono_us();
        proto_result_set_error(&res, -CM_EUNAVAILABLE, "executor retired");
      }
    }
    res.timings.queue_us = start - s->queued_us;
    cm_diag_fini(&diag);
    if (proto_result_encode(&res, &out) != 0) {
      proto_result_fini(&res);
      proto_result_set_error(&res, -CM_EINTERNAL, "result too large to encode");
      proto_result_encode(&res, &out);
    }
    if (record && out.data &&
        ex_record_write(record, seq++, nng_msg_body(s->req), nng_msg_len(s->req), out.data,
                        out.len, &diag) != 0) {
      fprintf(stderr, "s1-executor: record: %s\n", diag.msg ? diag.msg : "write failed");
      cm_diag_fini(&diag);
    }
    nng_msg_free(s->req);
    s->req = NULL;
    proto_program_fini(&p);
    proto_result_fini(&res);
    if (out.data)
      send_bytes(s, &out);
    else
      send_error(s, -CM_EINTERNAL, "result encoding failed");
  }
  nng_close(g.sock);
  for (int i = 0; i < N_CTX; i++) {
    nng_aio_stop(g.slots[i].aio);
    nng_msg_free(g.slots[i].req);
    nng_aio_free(g.slots[i].aio);
  }
  ex_runner_free(runner);
  cm_model_dir_free(dir);
  free(g.model_id);
  free(g.revision);
  free(g.digest);
  return rc;
}
