/* Benchmark (not a test): the path of one request body from the frontend's hands to the
 * executor's decoded program, stage by stage, on the calling thread with the real pieces (times: process CPU, libvips workers included, and wall):
 *   fe.job_encode     the frontend packs the body into a JOB message (proto_job_encode)
 *   fe.nng_copy       nng_msg_append of that message (what the frontend's send copies)
 *   ipc.job           the job message sent over nng ipc:// (pair1, in this process) and received
 *   pp.job_decode     proto_job_decode in the preprocessor
 *   pp.json_check     pp_json_check (the strict grammar pass)
 *   pp.json_parse     json-c's parse (pp_json_parse minus the check)
 *   pp.compile        the family's compile (image included), then in it, measured apart on the
 *                     same data URL: img.base64, img.decode (PNG/JPEG -> RGB), img.prepare
 *                     (smart_resize, resample, normalise + patchify)
 *   pp.encode         proto_program_set_ids + proto_program_encode_into an nng message, as
 *                     preprocessor/main.c does
 *   pp.nng_copy       0 now (until 2026-12-02 the encoded program was copied into the message)
 *   ipc.program       the program message over the same ipc:// pair
 *   ex.decode         proto_program_decode in the executor
 * `preprocess` = json_check + json_parse + compile + encode is what Server-Timing's preprocess
 * covers (preprocessor/main.c handle_job t1 - t0). Prints the median over N runs of each stage in
 * ms, as process CPU time and as wall time (the ipc stages' work is on nng's threads: wall counts),
 * and the sizes. As in s1-preprocessor, cm_alloc_keep_large is set first and the request work runs on a worker
 * thread (its own malloc arena). Usage: bench_preprocess MODEL_DIR BODY.json N */
#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cm_alloc.h"
#include "cm_model_dir.h"
#include "pp_family.h"
#include "pp_image.h"
#include "pp_json.h"
#include "proto.h"
#include "proto_job.h"

enum { S_JOB_ENC, S_FE_COPY, S_IPC_JOB, S_JOB_DEC, S_CHECK, S_PARSE, S_COMPILE, S_B64, S_DECODE,
       S_PREPARE, S_ENCODE, S_PP_COPY, S_IPC_PROG, S_EX_DEC, S_PREPROCESS, S_COUNT };
static const char *const NAMES[S_COUNT] = {
    "fe.job_encode", "fe.nng_copy", "ipc.job (wall)", "pp.job_decode", "pp.json_check",
    "pp.json_parse", "pp.compile", "  img.base64", "  img.decode", "  img.prepare", "pp.encode",
    "pp.nng_copy", "ipc.program (wall)", "ex.decode", "preprocess (check+parse+compile+encode)"};

struct clk {
  double cpu, wall;
};

static struct clk now(void) {
  struct timespec c, w;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c);
  clock_gettime(CLOCK_MONOTONIC, &w);
  return (struct clk){1e3 * (double)c.tv_sec + 1e-6 * (double)c.tv_nsec,
                      1e3 * (double)w.tv_sec + 1e-6 * (double)w.tv_nsec};
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* As preprocessor/main.c: the program is encoded straight into an nng message's body. */
static void *alloc_msg(void *arg, size_t n) {
  nng_msg **m = arg;
  return nng_msg_alloc(m, n) ? NULL : nng_msg_body(*m);
}

static int die(const char *what, const struct cm_diag *d) {
  fprintf(stderr, "bench_preprocess: %s: %s\n", what, d && d->msg ? d->msg : "failed");
  return 1;
}

struct args {
  int argc;
  char **argv;
  int rc;
};

static int run(int argc, char **argv);

static void *worker(void *arg) {
  struct args *a = arg;
  a->rc = run(a->argc, a->argv);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: bench_preprocess MODEL_DIR BODY.json N\n");
    return 2;
  }
  cm_alloc_keep_large();
  struct args a = {argc, argv, 1};
  pthread_t t;
  if (pthread_create(&t, NULL, worker, &a))
    return 1;
  pthread_join(t, NULL);
  return a.rc;
}

static int run(int argc, char **argv) {
  (void)argc;
  int n_runs = atoi(argv[3]);
  if (n_runs < 1)
    n_runs = 1;
  struct cm_diag d = {0};
  struct cm_model_dir *dir = NULL;
  if (cm_model_dir_open(argv[1], &dir, &d))
    return die("model dir", &d);
  struct pp_model *pm = NULL;
  if (pp_model_load(dir, &pm, &d))
    return die("family load", &d);
  const struct pp_family *fam = pm->family;
  void *state = pm->state;
  FILE *f = fopen(argv[2], "rb");
  if (!f)
    return die(argv[2], NULL);
  fseek(f, 0, SEEK_END);
  size_t n_body = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  char *body = malloc(n_body + 1);
  if (!body || fread(body, 1, n_body, f) != n_body)
    return die("read body", NULL);
  fclose(f);

  double *cpu = calloc((size_t)n_runs * S_COUNT, sizeof *cpu);
  double *wall = calloc((size_t)n_runs * S_COUNT, sizeof *wall);
  size_t n_job = 0, n_prog = 0, n_image = 0;
  struct pp_image_limits lim;
  pp_image_limits_default(&lim);
  lim.max_pixels = 602112; /* OmniJev's budget (spec/omnijev.md) */
  /* one ipc:// pair standing for the frontend -> preprocessor -> executor hops */
  nng_socket tx, rx;
  char url[128];
  snprintf(url, sizeof(url), "ipc:///tmp/bench_preprocess.%d.sock", (int)getpid());
  if (nng_pair1_open(&rx) || nng_socket_set_size(rx, NNG_OPT_RECVMAXSZ, 0) ||
      nng_listen(rx, url, NULL, 0) || nng_pair1_open(&tx) || nng_dial(tx, url, NULL, 0))
    return die("nng ipc pair", NULL);
  for (int r = 0; r < n_runs; r++) {
    double *c = cpu + (size_t)r * S_COUNT, *w = wall + (size_t)r * S_COUNT;
    struct clk t[16];
    int k = 0;
    struct proto_job job = {.job_id = 1, .request_id = "bench", .body = body, .n_body = n_body};
    struct proto_bytes jb = {0}, pb = {0};
    nng_msg *m1 = NULL, *m2 = NULL;
    struct proto_job got = {0};
    json_object *root = NULL;
    struct proto_program prog = {0}, dec = {0};
    void *ctx = NULL;
    struct pp_request_info info = {.request_id = "bench", .received_us = proto_now_us()};
    t[k++] = now();
    if (proto_job_encode(&job, &jb))
      return die("job encode", NULL);
    t[k++] = now();
    if (nng_msg_alloc(&m1, 0) || nng_msg_append(m1, jb.data, jb.len))
      return die("nng", NULL);
    t[k++] = now();
    if (nng_sendmsg(tx, m1, 0) || nng_recvmsg(rx, &m1, 0))
      return die("ipc job", NULL);
    t[k++] = now();
    if (proto_job_decode(nng_msg_body(m1), nng_msg_len(m1), &got, &d))
      return die("job decode", &d);
    t[k++] = now();
    if (pp_json_check(got.body, got.n_body, &d))
      return die("json check", &d);
    t[k++] = now();
    if (pp_json_parse(got.body, got.n_body, &root, &d))
      return die("json parse", &d);
    t[k++] = now();
    if (fam->compile(state, root, &info, &prog, &ctx, &d))
      return die("compile", &d);
    t[k++] = now();
    size_t n_pm = 0;
    if (proto_program_set_ids(&prog, "bench", "bench") ||
        proto_program_encode_into(&prog, alloc_msg, &m2, &n_pm))
      return die("program encode", NULL);
    t[k++] = now();
    t[k++] = now(); /* pp.nng_copy: none since the program is encoded into the message */
    pb.len = n_pm;
    if (nng_sendmsg(tx, m2, 0) || nng_recvmsg(rx, &m2, 0))
      return die("ipc program", NULL);
    t[k++] = now();
    if (proto_program_decode(nng_msg_body(m2), nng_msg_len(m2), &dec, &d))
      return die("program decode", &d);
    t[k++] = now();
    const int order[] = {S_JOB_ENC, S_FE_COPY, S_IPC_JOB,  S_JOB_DEC, S_CHECK, S_PARSE,
                         S_COMPILE, S_ENCODE,  S_PP_COPY, S_IPC_PROG, S_EX_DEC};
    for (int i = 0; i + 1 < k; i++) {
      c[order[i]] = t[i + 1].cpu - t[i].cpu;
      w[order[i]] = t[i + 1].wall - t[i].wall;
    }
    /* the JSON parse here re-runs the check inside pp_json_parse: count it once */
    c[S_PARSE] -= c[S_CHECK];
    w[S_PARSE] -= w[S_CHECK];
    c[S_PREPROCESS] = c[S_CHECK] + c[S_PARSE] + c[S_COMPILE] + c[S_ENCODE];
    w[S_PREPROCESS] = w[S_CHECK] + w[S_PARSE] + w[S_COMPILE] + w[S_ENCODE];
    n_job = jb.len, n_prog = pb.len;

    /* the image stages apart, on the request's first data URL */
    json_object *st = NULL, *imgs = NULL;
    if (json_object_object_get_ex(root, "state", &st) &&
        json_object_object_get_ex(st, "images", &imgs) && json_object_array_length(imgs) > 0) {
      json_object *u = json_object_array_get_idx(imgs, 0);
      uint8_t *bytes = NULL;
      size_t nb = 0;
      struct pp_rgb rgb = {0};
      struct pp_image img = {0};
      struct clk a = now();
      if (pp_image_b64_decode(json_object_get_string(u), (size_t)json_object_get_string_len(u),
                              0, &lim, &bytes, &nb, &d))
        return die("base64", &d);
      struct clk b = now();
      if (pp_image_decode(bytes, nb, 0, &lim, &rgb, &d))
        return die("image decode", &d);
      struct clk e = now();
      if (pp_image_prepare_rgb(&rgb, 0, &lim, &img, &d))
        return die("image prepare", &d);
      struct clk g = now();
      c[S_B64] = b.cpu - a.cpu, w[S_B64] = b.wall - a.wall;
      c[S_DECODE] = e.cpu - b.cpu, w[S_DECODE] = e.wall - b.wall;
      c[S_PREPARE] = g.cpu - e.cpu, w[S_PREPARE] = g.wall - e.wall;
      n_image = nb;
      free(bytes);
      pp_rgb_fini(&rgb);
      pp_image_fini(&img);
    }
    proto_program_fini(&dec);
    nng_msg_free(m2);
    fam->ctx_free(ctx);
    proto_program_fini(&prog);
    json_object_put(root);
    proto_job_fini(&got);
    nng_msg_free(m1);
    proto_bytes_free(&jb);
  }
  printf("body %zu bytes, job message %zu bytes, image %zu bytes, program %zu bytes; median of "
         "%d runs (ms)\n",
         n_body, n_job, n_image, n_prog, n_runs);
  printf("%-42s %9s %9s\n", "stage", "cpu_ms", "wall_ms");
  for (int s = 0; s < S_COUNT; s++) {
    double vc[n_runs], vw[n_runs];
    for (int r = 0; r < n_runs; r++)
      vc[r] = cpu[(size_t)r * S_COUNT + s], vw[r] = wall[(size_t)r * S_COUNT + s];
    printf("%-42s %9.2f %9.2f\n", NAMES[s], median(vc, n_runs), median(vw, n_runs));
  }
  nng_close(tx);
  nng_close(rx);
  unlink(url + strlen("ipc://"));
  free(cpu);
  free(wall);
  free(body);
  pp_model_free(pm);
  cm_model_dir_free(dir);
  cm_diag_fini(&d);
  return 0;
}
