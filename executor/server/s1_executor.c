/* s1-executor: owns one model on one device and runs programs. The nng REP socket has one context
 * per program it may hold (--max-programs) plus a few for health probes and CANCELs, which the
 * callbacks answer at once; programs and CANCELs go to the one compute thread (main), whose
 * scheduler (ex_sched.h) runs the programs in flight in batches, drops work past its deadline or
 * cancelled, and answers each program when it is done. Ready only after a warm-up program; a
 * sticky error retires it (health UNAVAILABLE, every held and later program refused, then exit 3
 * for the supervisor to restart it), so no request ever gets a wrong answer. */
#include <errno.h>
#include <getopt.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/supplemental/util/platform.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cm_nng.h"
#include "cm_alloc.h"
#include "cm_args.h"
#include "cm_runtime.h"
#include "cm_version.h"
#include "ex_head.h"
#include "ex_program.h"
#include "ex_record.h"
#include "ex_sched.h"
#include "proto_program.h"
#include "proto_status.h"

#define CONTROL_CTX 4   /* contexts beyond --max-programs: health probes and CANCELs get through */
#define RETIRE_EXIT_S 5 /* a retired executor answers 503 this long, then exits 3 (restart) */
#define RECV_MAX_BYTES ((size_t)1 << 30)

enum slot_phase { SLOT_RECV, SLOT_WAIT, SLOT_SEND };

struct slot {
  nng_ctx ctx;                /* REP context */
  nng_aio *aio;               /* its aio */
  enum slot_phase phase;      /* what the pending operation is */
  nng_msg *req;               /* a received PROGRAM for the compute thread (kept for --record) */
  struct proto_program prog;  /* it, decoded by the compute thread */
  int64_t queued_us;          /* when it arrived (monotonic µs) */
  struct slot *next;          /* intake queue link */
};

static struct {
  nng_socket sock;           /* REP socket preprocessors dial */
  struct slot *slots;        /* [n_slots] its contexts */
  int n_slots;               /* --max-programs + CONTROL_CTX */
  int max_programs;          /* programs held at most */
  atomic_int held;           /* slots holding a program (SLOT_WAIT) */
  pthread_mutex_t mu;        /* guards the intake queue and stats */
  pthread_cond_t cv;         /* signals work or stop */
  struct slot *head, *tail;  /* programs received, not yet taken by the compute thread */
  struct ex_sched *_Atomic sched; /* the scheduler once made (CANCELs are posted to it) */
  atomic_int state;          /* enum proto_state */
  atomic_ullong programs;    /* programs answered */
  char *model_id, *revision; /* for health replies (set once before READY) */
  const char *numerics;      /* the mode served, "fp32" / "bf16" (set once before READY) */
  char *digest;              /* the model directory's manifest SHA-256: preprocessors route by it */
  char reason[256];          /* why not ready */
  char instance[128];        /* "host:pid", for the frontend's per-executor metrics */
  struct proto_exec_stats stats; /* the scheduler's counters after the last step (guarded by mu) */
  bool log_timings;          /* S1_EXECUTOR_TIMINGS=1: one stderr line per program */
  volatile sig_atomic_t stop; /* SIGTERM seen */
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

static void recv_next(struct slot *s) {
  s->phase = SLOT_RECV;
  nng_ctx_recv(s->ctx, s->aio);
}

static void send_bytes(struct slot *s, struct proto_bytes *b) {
  nng_msg *m = NULL;
  if (nng_msg_alloc(&m, 0) != 0 || nng_msg_append(m, b->data, b->len) != 0) {
    nng_msg_free(m);
    proto_bytes_free(b);
    recv_next(s);
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
  if (proto_result_encode(&r, &b) == 0)
    send_bytes(s, &b);
  else
    recv_next(s);
  proto_result_fini(&r);
}

static void send_health(struct slot *s) {
  struct proto_health h = {.state = (enum proto_state)atomic_load(&g.state),
                           .programs = atomic_load(&g.programs)};
  if (h.state == PROTO_STATE_READY) {
    h.model_id = g.model_id;
    h.revision = g.revision;
    h.numerics = (char *)g.numerics;
    h.digest = g.digest;
  } else {
    h.reason = g.reason;
  }
  h.instance = g.instance;
  pthread_mutex_lock(&g.mu);
  h.stats = g.stats;
  pthread_mutex_unlock(&g.mu);
  struct proto_bytes b = {0};
  if (proto_health_encode(&h, &b) == 0)
    send_bytes(s, &b);
  else
    recv_next(s);
}

/* A CANCEL: posted to the scheduler (applied at its next step or between the readouts of the
 * current one), answered ACK at once. Before the scheduler exists no program runs: nothing to do. */
static void on_cancel(struct slot *s, nng_msg *m) {
  struct proto_cancel c = {0};
  int rc = proto_cancel_decode(nng_msg_body(m), nng_msg_len(m), &c, NULL);
  nng_msg_free(m);
  if (rc) {
    send_error(s, -CM_EVERSION, "unreadable CANCEL");
    return;
  }
  struct ex_sched *sched = atomic_load(&g.sched);
  if (sched)
    ex_sched_post_cancel(sched, c.request_id);
  proto_cancel_fini(&c);
  pthread_cond_signal(&g.cv);
  struct proto_bytes b = {0};
  if (proto_simple_encode(PROTO_KIND_ACK, &b) == 0)
    send_bytes(s, &b);
  else
    recv_next(s);
}

/* nng callback: a receive or a send finished on one context. */
static void on_aio(void *arg) {
  struct slot *s = arg;
  int rv = nng_aio_result(s->aio);
  if (s->phase == SLOT_SEND) {
    if (rv != 0)
      nng_msg_free(nng_aio_get_msg(s->aio));
    recv_next(s);
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
  if (kind == PROTO_KIND_HEALTH) {
    nng_msg_free(m);
    send_health(s);
    return;
  }
  if (kind == PROTO_KIND_CANCEL) {
    on_cancel(s, m);
    return;
  }
  int st = atomic_load(&g.state);
  if (st != PROTO_STATE_READY) {
    nng_msg_free(m);
    send_error(s, st == PROTO_STATE_STARTING ? -CM_ENOTREADY : -CM_EUNAVAILABLE,
               st == PROTO_STATE_STARTING ? "executor warming up" : "executor retired");
    return;
  }
  if (atomic_fetch_add(&g.held, 1) >= g.max_programs) {
    atomic_fetch_sub(&g.held, 1);
    nng_msg_free(m);
    send_error(s, -CM_EOVERLOADED, "executor holds its most programs (--max-programs)");
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

/* A byte count with an optional binary suffix (K, M, G), 0 allowed (off): cm_args_bytes. */
static bool bytes_arg(const char *s, size_t *ret) {
  if (cm_args_bytes(s, ret) == 0)
    return true;
  fprintf(stderr, "s1-executor: \"%s\" is not a byte count (digits, optionally K, M or G)\n", s);
  return false;
}

static void usage(void) {
  fprintf(stderr,
          "usage: s1-executor --model DIR [--device cpu|cuda:N] [--listen URL] [--record DIR]\n"
          "                   [--numerics fp32|bf16] [--max-programs N] [--max-batch-tokens N]\n"
          "                   [--max-batch-readouts N]\n"
          "                   [--prefix-cache-bytes B] [--vision-cache-bytes B]\n"
          "                   [--snapshot-pool-bytes B] [--max-tokens N] [--max-seqs N]\n"
          "                   [--max-ctx N] [--snapshots N] [--max-readouts N] [--max-patches N]\n"
          "                   [--cuda-lora on|off]\n"
          "  --listen        nng URL to serve (default ipc://RUNTIME/executor-0.sock, RUNTIME as\n"
          "                  s1-frontend's: a private 0700 directory)\n"
          "  --device        cpu (default) or cuda:N (the bf16 CUDA engine)\n"
          "  --record        write every program and its result to DIR (made 0700: it holds\n"
          "                  the requests' tokens and images), for s1-replay\n"
          "  --numerics      fp32 (the float32 reference run) or bf16 (the bf16 reference run);\n"
          "                  default: the model directory's on the CPU, bf16 on CUDA (its only\n"
          "                  mode); --bf16-rounding is --numerics bf16\n"
          "  Scheduler (executor/server/README.md; B: bytes, or with K, M, G):\n"
          "  --max-programs  programs held at once, waiting or in flight (default 64, at most %d;\n"
          "                  one more is answered 503 overloaded)\n"
          "  --max-batch-tokens  tokens of one step: vision rows, prefix pieces, rows (default\n"
          "                  8192 on CUDA, 512 on the CPU, at most the engine's per launch)\n"
          "  --max-batch-readouts  readout rows of one step (default 128 on the CPU, the engine's\n"
          "                  per launch on CUDA)\n"
          "  --prefix-cache-bytes  snapshots kept for later programs, out of the snapshot pool\n"
          "                  (default 1G; 0 off)\n"
          "  --vision-cache-bytes  vision-tower outputs kept, host memory (default 256M; 0 off)\n"
          "  --snapshot-pool-bytes  CPU: snapshot memory of the programs in flight (default 2G)\n"
          "  Engine limits, reserved at start-up (a program over them is refused):\n"
          "  --max-tokens    tokens of one launch (CUDA default 8192)\n"
          "  --max-seqs      sequences of one launch (default 64)\n"
          "  --max-ctx       CUDA: tokens one snapshot holds, prefix + row (default 8192)\n"
          "  --snapshots     CUDA: the snapshot pool of all programs in flight and the prefix\n"
          "                  cache, in slots of --max-ctx tokens (default 8)\n"
          "  --max-readouts  CUDA: readout rows of one launch (default 256)\n"
          "  --max-patches   CUDA: vision patches of one image, a multiple of 4 (default 16384)\n"
          "  --cuda-lora on|off  load a kept LoRA adapter onto the CUDA engine (default on;\n"
          "                  off refuses such a model on CUDA)\n",
          EX_SCHED_MAX_PROGRAMS);
}

/* S1_EXECUTOR_STEPS=1: one stderr line per step (ex_sched_step_format), for benchmarks. */
static void log_step(void *ctx, const struct ex_sched_step_info *info) {
  (void)ctx;
  char line[512];
  ex_sched_step_format(info, line, sizeof line);
  fprintf(stderr, "s1-executor: %s\n", line);
}

/* Publishes the scheduler's counters for health replies. */
static void publish_stats(const struct ex_sched *sched) {
  struct ex_sched_stats st;
  ex_sched_stats(sched, &st);
  struct proto_exec_stats p = {
      .steps = st.steps, .step_programs = st.step_programs, .step_tokens = st.step_tokens,
      .finished = st.finished, .deadline_dropped = st.deadline_dropped,
      .cancelled = st.cancelled, .prefix_hits = st.prefix.hits,
      .prefix_misses = st.prefix.misses, .prefix_evictions = st.prefix.evictions,
      .prefix_inserts = st.prefix.inserts, .prefix_tokens_reused = st.prefix_tokens_reused,
      .vision_hits = st.vision.hits, .vision_misses = st.vision.misses,
      .vision_evictions = st.vision.evictions, .vision_inserts = st.vision.inserts,
      .prefix_bytes = st.prefix.bytes, .prefix_entries = st.prefix.entries,
      .vision_bytes = st.vision.bytes, .vision_entries = st.vision.entries,
      .waiting = st.waiting, .active = st.active, .pool_bytes = st.pool_bytes,
      .pool_reserved_bytes = st.pool_reserved_bytes};
  pthread_mutex_lock(&g.mu);
  g.stats = p;
  pthread_mutex_unlock(&g.mu);
}

/* Answers the finished programs (result bytes, recorded with --record) and frees them. */
static void answer_done(struct ex_sched *sched, const char *record, uint64_t *seq) {
  void *tag;
  const struct proto_program *p;
  struct proto_result res = {0};
  while (ex_sched_pop(sched, &tag, &p, &res)) {
    struct slot *s = tag;
    struct proto_bytes out = {0};
    struct cm_diag diag = {0};
    if (g.log_timings) /* S1_EXECUTOR_TIMINGS=1: one line per program, for benchmarks */
      fprintf(stderr,
              "s1-executor: timings request=%s queue_us=%lld vision_us=%lld prefix_us=%lld "
              "rows_us=%lld readout_us=%lld total_us=%lld heads_us=%lld wait_us=%lld "
              "steps=%lld\n",
              p && p->request_id ? p->request_id : "?", (long long)res.timings.queue_us,
              (long long)res.timings.vision_us, (long long)res.timings.prefix_us,
              (long long)res.timings.rows_us, (long long)res.timings.readout_us,
              (long long)res.timings.total_us, (long long)res.timings.heads_us,
              (long long)res.timings.wait_us, (long long)res.timings.steps);
    if (proto_result_encode(&res, &out) != 0) {
      proto_result_fini(&res);
      proto_result_set_error(&res, -CM_EINTERNAL, "result too large to encode");
      proto_result_encode(&res, &out);
    }
    if (record && out.data && s->req &&
        ex_record_write(record, (*seq)++, nng_msg_body(s->req), nng_msg_len(s->req), out.data,
                        out.len, &diag) != 0) {
      fprintf(stderr, "s1-executor: record: %s\n", diag.msg ? diag.msg : "write failed");
      cm_diag_fini(&diag);
    }
    nng_msg_free(s->req);
    s->req = NULL;
    proto_program_fini(&s->prog);
    proto_result_fini(&res);
    atomic_fetch_add(&g.programs, 1);
    atomic_fetch_sub(&g.held, 1);
    if (out.data)
      send_bytes(s, &out);
    else
      send_error(s, -CM_EINTERNAL, "result encoding failed");
  }
}

/* Takes the programs received since the last call into the scheduler. */
static void intake(struct ex_sched *sched, bool wait) {
  pthread_mutex_lock(&g.mu);
  if (wait && !g.head && !g.stop) { /* the loop re-checks retirement every second */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    pthread_cond_timedwait(&g.cv, &g.mu, &ts);
  }
  struct slot *s = g.head;
  g.head = g.tail = NULL;
  pthread_mutex_unlock(&g.mu);
  for (struct slot *next; s; s = next) {
    next = s->next;
    struct cm_diag diag = {0};
    int r = proto_program_decode(nng_msg_body(s->req), nng_msg_len(s->req), &s->prog, &diag);
    if (!r && (!sched || atomic_load(&g.state) != PROTO_STATE_READY))
      r = cm_diag_set(&diag, -CM_EUNAVAILABLE, "executor retired");
    if (!r)
      r = ex_sched_submit(sched, &s->prog, s, s->queued_us);
    if (r) {
      nng_msg_free(s->req);
      s->req = NULL;
      proto_program_fini(&s->prog);
      atomic_fetch_sub(&g.held, 1);
      send_error(s, r == -CM_EUNAVAILABLE ? r : r == -ENOMEM ? -CM_EINTERNAL : -CM_EPROGRAM,
                 diag.msg ? diag.msg : cm_strerror(r));
    }
    cm_diag_fini(&diag);
  }
}

int main(int argc, char **argv) {
  if (cm_version_requested(argc, argv, "s1-executor"))
    return 0;
  cm_alloc_keep_large(); /* large request buffers reused, not re-mapped (cm_alloc.h) */
  static const struct option opts[] = {
      {"model", required_argument, 0, 'm'},  {"device", required_argument, 0, 'd'},
      {"listen", required_argument, 0, 'l'}, {"record", required_argument, 0, 'r'},
      {"bf16-rounding", no_argument, 0, 'b'}, {"help", no_argument, 0, 'h'},
      {"max-tokens", required_argument, 0, 'T'}, {"max-seqs", required_argument, 0, 'S'},
      {"max-ctx", required_argument, 0, 'C'},    {"snapshots", required_argument, 0, 'N'},
      {"max-readouts", required_argument, 0, 'R'}, {"max-patches", required_argument, 0, 'P'},
      {"cuda-lora", required_argument, 0, 'L'}, {"numerics", required_argument, 0, 'n'},
      {"max-programs", required_argument, 0, 'p'},
      {"max-batch-tokens", required_argument, 0, 'B'},
      {"max-batch-readouts", required_argument, 0, 'D'},
      {"prefix-cache-bytes", required_argument, 0, 'c'},
      {"vision-cache-bytes", required_argument, 0, 'v'},
      {"snapshot-pool-bytes", required_argument, 0, 'o'},
      {0, 0, 0, 0}};
  const char *model = NULL, *device = "cpu", *url = NULL;
  const char *record = NULL;
  struct ex_runner_options ro = {0};
  struct ex_sched_options so = {.prefix_cache_bytes = (size_t)1 << 30,
                                .vision_cache_bytes = (size_t)256 << 20,
                                .max_programs = 64};
  int c;
  bool ok = true;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'm': model = optarg; break;
    case 'd': device = optarg; break;
    case 'l': url = optarg; break;
    case 'r': record = optarg; break;
    case 'b':
      ro.numerics = "bf16";
      break;
    case 'n':
      ro.numerics = optarg;
      break;
    case 'T': ok = ok && size_arg(optarg, &ro.engine.max_tokens); break;
    case 'S': ok = ok && size_arg(optarg, &ro.engine.max_seqs); break;
    case 'C': ok = ok && size_arg(optarg, &ro.engine.max_ctx); break;
    case 'N': ok = ok && size_arg(optarg, &ro.engine.n_snapshots); break;
    case 'R': ok = ok && size_arg(optarg, &ro.engine.max_readouts); break;
    case 'p': ok = ok && size_arg(optarg, &so.max_programs); break;
    case 'B': ok = ok && size_arg(optarg, &so.max_batch_tokens); break;
    case 'D': ok = ok && size_arg(optarg, &so.max_batch_readouts); break;
    case 'c': ok = ok && bytes_arg(optarg, &so.prefix_cache_bytes); break;
    case 'v': ok = ok && bytes_arg(optarg, &so.vision_cache_bytes); break;
    case 'o':
      ok = ok && bytes_arg(optarg, &ro.engine.pool_bytes) && ro.engine.pool_bytes > 0;
      break;
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
  enum cm_numerics nm;
  if (ro.numerics && cm_numerics_parse(ro.numerics, &nm) != 0) {
    fprintf(stderr, "s1-executor: --numerics \"%s\": fp32 or bf16\n", ro.numerics);
    return 2;
  }
  if (so.max_programs > EX_SCHED_MAX_PROGRAMS) {
    fprintf(stderr, "s1-executor: --max-programs %zu: at most %d\n", so.max_programs,
            EX_SCHED_MAX_PROGRAMS);
    return 2;
  }
  if (ex_engine_device(device) == -2) {
    fprintf(stderr, "s1-executor: unknown device \"%s\" (cpu, cuda or cuda:N)\n", device);
    return 2;
  }
  ro.device = device;
  if (record && mkdir(record, 0700) != 0 && errno != EEXIST) { /* request contents: private */
    fprintf(stderr, "s1-executor: --record %s: %s\n", record, strerror(errno));
    return 2;
  }
  uint64_t seq = 0; /* the next record's number: after those DIR already holds */
  if (record) {
    struct cm_diag d = {0};
    if (ex_record_next(record, &seq, &d)) {
      fprintf(stderr, "s1-executor: --record %s: %s\n", record, d.msg ? d.msg : "unreadable");
      cm_diag_fini(&d);
      return 2;
    }
    if (seq)
      fprintf(stderr, "s1-executor: --record %s holds records up to %08llu; numbering from %08llu\n",
              record, (unsigned long long)seq - 1, (unsigned long long)seq);
  }
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  atomic_store(&g.state, PROTO_STATE_STARTING);
  snprintf(g.reason, sizeof(g.reason), "loading %s", model);
  char host[64] = "host";
  gethostname(host, sizeof(host) - 1);
  snprintf(g.instance, sizeof(g.instance), "%s:%ld", host, (long)getpid());

  /* the ipc socket: a private directory, and the lock before nng touches the path (a second
   * executor on one path would otherwise stop the live one accepting: cm_runtime.h) */
  static char *default_url; /* static: still reachable when a start fails */
  struct cm_diag rdiag = {0};
  int lock_fd = -1;
  if ((!url && cm_runtime_url("executor-0.sock", &default_url, &rdiag)) ||
      cm_ipc_check(url ? url : default_url, true, "--listen", &rdiag) ||
      cm_ipc_lock(url ? url : default_url, "--listen", &lock_fd, &rdiag)) {
    fprintf(stderr, "s1-executor: %s\n", rdiag.msg ? rdiag.msg : "--listen: refused");
    cm_diag_fini(&rdiag);
    return 1;
  }
  if (!url)
    url = default_url;
  g.max_programs = (int)so.max_programs;
  g.n_slots = g.max_programs + CONTROL_CTX;
  if (!(g.slots = calloc((size_t)g.n_slots, sizeof(*g.slots)))) {
    fprintf(stderr, "s1-executor: out of memory\n");
    return 1;
  }
  int rv;
  if ((rv = nng_rep0_open(&g.sock)) != 0 ||
      (rv = nng_socket_set_size(g.sock, NNG_OPT_RECVMAXSZ, RECV_MAX_BYTES)) != 0 ||
      (rv = cm_listen_private(g.sock, url)) != 0) {
    fprintf(stderr, "s1-executor: cannot listen on %s: %s\n", url, nng_strerror(rv));
    return 1;
  }
  for (int i = 0; i < g.n_slots; i++) {
    struct slot *s = &g.slots[i];
    if ((rv = nng_ctx_open(&s->ctx, g.sock)) != 0 ||
        (rv = nng_aio_alloc(&s->aio, on_aio, s)) != 0) {
      fprintf(stderr, "s1-executor: nng: %s\n", nng_strerror(rv));
      return 1;
    }
    recv_next(s);
  }

  struct cm_diag diag = {0};
  struct cm_model_dir *dir = NULL;
  struct ex_runner *runner = NULL;
  struct ex_sched *sched = NULL;
  int64_t t0 = mono_us();
  int r = cm_model_dir_open(model, &dir, &diag);
  if (!r)
    r = ex_runner_new(dir, &ro, &runner, &diag);
  if (!r) {
    g.model_id = strdup(ex_runner_model_id(runner));
    g.revision = strdup(ex_runner_revision(runner));
    g.numerics = ex_runner_numerics(runner);
    g.digest = strdup(dir->manifest_sha256);
    snprintf(g.reason, sizeof(g.reason), "warm-up");
    r = warmup(runner, &diag);
  }
  const char *ls = getenv("S1_EXECUTOR_STEPS");
  if (ls && strcmp(ls, "1") == 0)
    so.on_step = log_step; /* one stderr line per step, for benchmarks */
  if (!r)
    r = ex_sched_new(runner, &so, &sched, &diag);
  atomic_store(&g.sched, sched);
  int64_t retired_us = 0;
  const char *lt = getenv("S1_EXECUTOR_TIMINGS");
  g.log_timings = lt && strcmp(lt, "1") == 0;
  if (r) {
    fprintf(stderr, "s1-executor: %s: %s (%s); retired\n", model,
            diag.msg ? diag.msg : cm_strerror(r), cm_strerror(r));
    snprintf(g.reason, sizeof(g.reason), "model failed to load or warm up: %s",
             diag.msg ? diag.msg : cm_strerror(r));
    atomic_store(&g.state, PROTO_STATE_UNAVAILABLE);
    retired_us = mono_us();
  } else {
    fprintf(stderr,
            "s1-executor: %s ready on %s (device %s, numerics %s, model %s, revision %s, load + "
            "warm-up %.1f ms)\n",
            model, url, device, g.numerics, g.model_id, g.revision,
            (double)(mono_us() - t0) / 1000.0);
    atomic_store(&g.state, PROTO_STATE_READY);
  }
  cm_diag_fini(&diag);

  int rc = 0;
  while (!g.stop) {
    if (retired_us && mono_us() - retired_us > (int64_t)RETIRE_EXIT_S * 1000000) {
      fprintf(stderr, "s1-executor: retired; exiting for the supervisor to restart it\n");
      rc = 3;
      break;
    }
    if (!sched) { /* never started: programs are refused in the callbacks */
      intake(NULL, true);
      continue;
    }
    intake(sched, ex_sched_held(sched) == 0);
    publish_stats(sched); /* health replies during a long step show what it holds */
    if (ex_sched_held(sched) && (r = ex_sched_step(sched, &diag))) {
      fprintf(stderr, "s1-executor: sticky error, retiring: %s\n",
              diag.msg ? diag.msg : cm_strerror(r));
      snprintf(g.reason, sizeof(g.reason), "retired after: %s",
               diag.msg ? diag.msg : cm_strerror(r));
      atomic_store(&g.state, PROTO_STATE_UNAVAILABLE);
      retired_us = mono_us();
      cm_diag_fini(&diag);
    }
    answer_done(sched, record, &seq);
    publish_stats(sched);
  }
  /* stopping: every held program is answered (unavailable) so its preprocessor need not wait for
   * the deadline, then the replies get a moment to leave */
  if (sched) {
    intake(sched, false);
    ex_sched_fail_all(sched, -CM_EUNAVAILABLE, "executor stopping");
    answer_done(sched, record, &seq);
    for (int i = 0; i < 50 && atomic_load(&g.held) > 0; i++)
      nng_msleep(10);
    nng_msleep(50);
  }
  nng_close(g.sock);
  for (int i = 0; i < g.n_slots; i++) {
    nng_aio_stop(g.slots[i].aio);
    nng_msg_free(g.slots[i].req);
    proto_program_fini(&g.slots[i].prog);
    nng_aio_free(g.slots[i].aio);
  }
  free(g.slots);
  atomic_store(&g.sched, NULL);
  ex_sched_free(sched);
  ex_runner_free(runner);
  cm_model_dir_free(dir);
  free(g.model_id);
  free(g.revision);
  free(default_url);
  free(g.digest);
  return rc;
}
