/* CANCEL against a running s1-executor, as a preprocessor sends it (nng REQ, proto CANCEL answered
 * by ACK), with recorded programs (s1-executor --record) re-sent under fresh request ids:
 *  1. a long program in flight, cancelled 300 ms after it was sent: answered -CM_ECANCELLED
 *     within MAX_CANCEL_MS of the CANCEL (its step), long before its work would end;
 *  2. a CANCEL that arrives before its program: the program is answered -CM_ECANCELLED when it is
 *     taken in (after the current step);
 *  3. then a short program runs to its end (status 0): the executor serves on.
 * usage: test_exec_cancel EXECUTOR_URL LONG.msgpack SHORT.msgpack; exit 0 when every check
 * holds. */
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto_program.h"

#define MAX_CANCEL_MS 10000 /* a step (a program waits for the current one) on a loaded machine */

static int failures;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("FAIL " __VA_ARGS__);                                                                 \
      printf("\n");                                                                                \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One REQ context with its aio: send now, receive later. */
struct req {
  nng_ctx ctx;
  nng_aio *aio;
};

static int req_send(nng_socket sock, struct req *q, const struct proto_bytes *b) {
  nng_msg *m = NULL;
  int rv;
  if ((rv = nng_ctx_open(&q->ctx, sock)) || (rv = nng_aio_alloc(&q->aio, NULL, NULL)) ||
      (rv = nng_msg_alloc(&m, 0)) || (rv = nng_msg_append(m, b->data, b->len)))
    return rv;
  nng_aio_set_timeout(q->aio, 10000);
  nng_aio_set_msg(q->aio, m);
  nng_ctx_send(q->ctx, q->aio);
  nng_aio_wait(q->aio);
  if ((rv = nng_aio_result(q->aio))) {
    nng_msg_free(m);
    return rv;
  }
  nng_aio_set_timeout(q->aio, 600000);
  nng_ctx_recv(q->ctx, q->aio);
  return 0;
}

/* Waits for the reply; *ret_msg is the caller's. */
static int req_wait(struct req *q, nng_msg **ret_msg) {
  nng_aio_wait(q->aio);
  int rv = nng_aio_result(q->aio);
  if (!rv)
    *ret_msg = nng_aio_get_msg(q->aio);
  nng_aio_free(q->aio);
  nng_ctx_close(q->ctx);
  return rv;
}

static int program_as(const struct proto_program *p0, const char *rid, struct proto_bytes *ret) {
  struct proto_program p = *p0;
  p.request_id = (char *)rid;
  p.deadline_us = 0;
  return proto_program_encode(&p, ret);
}

/* Sends a program under rid on its own context (the reply comes later). */
static int send_program(nng_socket sock, const struct proto_program *p, const char *rid,
                        struct req *q) {
  struct proto_bytes b = {0};
  int rv = program_as(p, rid, &b);
  if (!rv)
    rv = req_send(sock, q, &b);
  proto_bytes_free(&b);
  return rv;
}

static int result_of(struct req *q, struct proto_result *ret) {
  nng_msg *m = NULL;
  int rv = req_wait(q, &m);
  if (!rv)
    rv = proto_result_decode(nng_msg_body(m), nng_msg_len(m), ret, NULL);
  nng_msg_free(m);
  return rv;
}

/* CANCEL rid; true when the executor answered ACK. */
static bool cancel(nng_socket sock, const char *rid) {
  struct proto_bytes b = {0};
  struct req q = {0};
  nng_msg *m = NULL;
  struct proto_cancel c = {.request_id = (char *)rid};
  bool ok = proto_cancel_encode(&c, &b) == 0 && req_send(sock, &q, &b) == 0 &&
            req_wait(&q, &m) == 0 &&
            proto_simple_decode(nng_msg_body(m), nng_msg_len(m), PROTO_KIND_ACK, NULL) == 0;
  nng_msg_free(m);
  proto_bytes_free(&b);
  return ok;
}

static int read_program(const char *path, struct proto_program *ret) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return -1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  int r = buf && fread(buf, 1, (size_t)n, f) == (size_t)n ? 0 : -1;
  fclose(f);
  struct cm_diag diag = {0};
  if (!r && proto_program_decode(buf, (size_t)n, ret, &diag)) {
    fprintf(stderr, "%s: %s\n", path, diag.msg ? diag.msg : "unreadable");
    r = -1;
  }
  cm_diag_fini(&diag);
  free(buf);
  return r;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s EXECUTOR_URL LONG.msgpack SHORT.msgpack\n", argv[0]);
    return 2;
  }
  struct proto_program p = {0}, small = {0};
  if (read_program(argv[2], &p) || read_program(argv[3], &small))
    return 2;
  nng_socket sock;
  int rv;
  if ((rv = nng_req0_open(&sock)) ||
      (rv = nng_socket_set_ms(sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) ||
      (rv = nng_socket_set_size(sock, NNG_OPT_RECVMAXSZ, (size_t)1 << 30)) ||
      (rv = nng_dial(sock, argv[1], NULL, 0))) {
    fprintf(stderr, "%s: %s\n", argv[1], nng_strerror(rv));
    return 2;
  }
  /* 1. cancelled in flight */
  struct req late = {0};
  double t0 = now_ms();
  CHECK(send_program(sock, &p, "cancel-late", &late) == 0, "send the program");
  nng_msleep(300);
  double tc = now_ms();
  CHECK(cancel(sock, "cancel-late"), "CANCEL cancel-late: no ACK");
  struct proto_result r = {0};
  CHECK(result_of(&late, &r) == 0, "no result for cancel-late");
  double done = now_ms();
  printf("in flight: cancelled after %.0f ms, answered %.0f ms after the CANCEL, status %d (%s)\n",
         tc - t0, done - tc, r.status, r.message ? r.message : "");
  CHECK(r.status == -CM_ECANCELLED, "cancel-late: status %d, want %d", r.status, -CM_ECANCELLED);
  CHECK(done - tc < MAX_CANCEL_MS, "cancel-late: answered %.0f ms after the CANCEL", done - tc);
  proto_result_fini(&r);
  /* 2. the CANCEL first */
  CHECK(cancel(sock, "cancel-early"), "CANCEL cancel-early: no ACK");
  struct req early = {0};
  t0 = now_ms();
  CHECK(send_program(sock, &p, "cancel-early", &early) == 0, "send the program");
  memset(&r, 0, sizeof(r));
  CHECK(result_of(&early, &r) == 0, "no result for cancel-early");
  printf("cancelled before it came: answered in %.0f ms, status %d\n", now_ms() - t0, r.status);
  CHECK(r.status == -CM_ECANCELLED, "cancel-early: status %d, want %d", r.status, -CM_ECANCELLED);
  CHECK(now_ms() - t0 < MAX_CANCEL_MS, "cancel-early: answered after %.0f ms", now_ms() - t0);
  proto_result_fini(&r);
  /* 3. serving on */
  struct req ok = {0};
  t0 = now_ms();
  CHECK(send_program(sock, &small, "after-cancel", &ok) == 0, "send the program");
  memset(&r, 0, sizeof(r));
  CHECK(result_of(&ok, &r) == 0, "no result for after-cancel");
  printf("then the same program runs: status %d, %u outputs, %.0f ms\n", r.status, r.n_outputs,
         now_ms() - t0);
  CHECK(r.status == 0 && r.n_outputs == small.n_readouts, "after-cancel: status %d, %u outputs",
        r.status, r.n_outputs);
  proto_result_fini(&r);
  nng_close(sock);
  proto_program_fini(&p);
  proto_program_fini(&small);
  printf("%s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
