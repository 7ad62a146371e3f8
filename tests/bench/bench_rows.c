/* bench_rows: the rows half of `scripts/bench gpu` on the bf16 CUDA engine (exc_qwen35.h): B rows of
 * T tokens packed into one launch, each fresh (the form of the peer's batched rows) or each
 * continuing one shared prefix snapshot (--prefix P, the OmniJev procedure), to the last-position
 * logits of every row. Timing only (CUDA events on the engine's stream, first run excluded); the
 * engine's twin test (tests/cuda/test_engine.c) checks that packed rows equal single ones.
 * usage: bench_rows --model DIR [--device cuda:N] --input ROWS.json [--input ...] [--prefix P]
 *                   [--repeat K]
 * ROWS.json: {"rows": [[ids of row 0], ...]} (rows of one length) or {"tokens": [...]} (one row);
 * tests/oracle/bench_peer.py writes both. One engine (one model load) serves every input; one JSON
 * line per input. */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_error.h"
#include "cm_model_dir.h"
#include "cuda_check.h"
#include "ex_qwen35.h"
#include "exc_qwen35.h"

#define PREFIX_MAX_ID 151643 /* ordinary Qwen3 BPE ids, as bench_peer.py draws */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Reads {"rows": [[...], ...]} into tokens [B, T] (heap). Returns 0 or a negative code. */
static int read_rows(const char *path, int32_t **ret_tok, size_t *ret_b, size_t *ret_t,
                     struct cm_diag *diag) {
  json_object *root = json_object_from_file(path), *rows = NULL;
  if (!root)
    return cm_diag_set(diag, -CM_EFORMAT, "%s: not readable JSON", path);
  int r = 0;
  size_t b = 0, t = 0;
  int32_t *tok = NULL;
  json_object *one = NULL;
  if (json_object_object_get_ex(root, "tokens", &one) && json_object_is_type(one, json_type_array)) {
    rows = json_object_new_array(); /* {"tokens": [...]}: one row */
    json_object_array_add(rows, json_object_get(one));
    json_object_object_add(root, "rows", rows);
  }
  if (!json_object_object_get_ex(root, "rows", &rows) || !json_object_is_type(rows, json_type_array) ||
      !(b = json_object_array_length(rows))) {
    r = cm_diag_set(diag, -CM_EFORMAT, "%s: no \"rows\" or \"tokens\" array", path);
    goto out;
  }
  t = json_object_array_length(json_object_array_get_idx(rows, 0));
  if (!t || !(tok = malloc(b * t * sizeof(int32_t)))) {
    r = t ? -ENOMEM : cm_diag_set(diag, -CM_EFORMAT, "%s: empty row", path);
    goto out;
  }
  for (size_t i = 0; i < b; i++) {
    json_object *row = json_object_array_get_idx(rows, i);
    if (!json_object_is_type(row, json_type_array) || json_object_array_length(row) != t) {
      r = cm_diag_set(diag, -CM_EFORMAT, "%s: row %zu is not %zu ids", path, i, t);
      goto out;
    }
    for (size_t j = 0; j < t; j++)
      tok[i * t + j] = (int32_t)json_object_get_int64(json_object_array_get_idx(row, j));
  }
out:
  json_object_put(root);
  if (r) {
    free(tok);
    return r;
  }
  *ret_tok = tok, *ret_b = b, *ret_t = t;
  return 0;
}

#define MAX_INPUTS 64

struct rows_input {
  const char *path; /* file, borrowed from argv */
  int32_t *tok;     /* [b, t] ids, heap */
  size_t b, t;      /* rows, tokens per row */
};

/* Times one input's rows in one launch, `repeat` + 1 times (first excluded), and prints its line. */
static int time_rows(struct exc_qwen35 *e, struct exc_qwen35_state *st, const struct rows_input *in,
                     size_t prefix, int repeat, double ready_ms, int vocab,
                     struct exc_qwen35_seq *seqs, size_t *ro, float *logits, float *ms,
                     struct cm_diag *diag) {
  cudaEvent_t ea = NULL, eb = NULL;
  int r;
  for (size_t i = 0; i < in->b; i++) {
    seqs[i] = (struct exc_qwen35_seq){.state = st, .advance = false, .n = in->t, .pos = NULL};
    ro[i] = i * in->t + in->t - 1;
  }
  cudaStream_t s = exc_qwen35_stream(e);
  if ((r = EXC_CUDA(cudaEventCreate(&ea))) || (r = EXC_CUDA(cudaEventCreate(&eb))))
    goto out;
  for (int i = 0; i <= repeat; i++) {
    if ((r = EXC_CUDA(cudaEventRecord(ea, s))))
      goto out;
    if ((r = exc_qwen35_forward(e, seqs, (int)in->b, in->tok, NULL, 0, ro, in->b, NULL, logits,
                                diag)))
      goto out;
    if ((r = EXC_CUDA(cudaEventRecord(eb, s))) || (r = EXC_CUDA(cudaEventSynchronize(eb))) ||
        (r = EXC_CUDA(cudaEventElapsedTime(&ms[i], ea, eb))))
      goto out;
  }
  /* row 0's top 5, for the table's agreement column */
  int top[5] = {-1, -1, -1, -1, -1};
  for (int k = 0; k < 5; k++)
    for (int v = 0; v < vocab; v++) {
      bool taken = false;
      for (int q = 0; q < k; q++)
        taken |= top[q] == v;
      if (!taken && (top[k] < 0 || logits[v] > logits[top[k]]))
        top[k] = v;
    }
  qsort(ms + 1, (size_t)repeat, sizeof(float), cmp_float);
  double median = repeat % 2 ? ms[1 + repeat / 2] : 0.5 * (ms[repeat / 2] + ms[1 + repeat / 2]);
  size_t free_b = 0, total_b = 0;
  if ((r = EXC_CUDA(cudaMemGetInfo(&free_b, &total_b))))
    goto out;
  printf("{\"input\": \"%s\", \"device\": \"cuda\", \"rows\": %zu, \"tokens_per_row\": %zu, "
         "\"prefix\": %zu, \"repeat\": %d, \"first_ms\": %.3f, \"median_ms\": %.3f, "
         "\"min_ms\": %.3f, \"max_ms\": %.3f, \"ready_ms\": %.1f, \"device_used_bytes\": %zu, "
         "\"top5_row0\": [%d, %d, %d, %d, %d]}\n",
         in->path, in->b, in->t, prefix, repeat, ms[0], median, ms[1], ms[repeat], ready_ms,
         total_b - free_b, top[0], top[1], top[2], top[3], top[4]);
  fflush(stdout);
out:
  if (ea)
    cudaEventDestroy(ea);
  if (eb)
    cudaEventDestroy(eb);
  return r;
}

static int run(const char *model, int device, struct rows_input *ins, int n_in, size_t prefix,
               int repeat, double t0, struct cm_diag *diag) {
  struct cm_model_dir *dir = NULL;
  struct exc_qwen35 *e = NULL;
  struct exc_qwen35_state *st = NULL;
  struct exc_qwen35_seq *seqs = NULL;
  int32_t *ptok = NULL;
  size_t *ro = NULL, max_b = 1, max_bt = 64, max_t = 1;
  float *logits = NULL, *ms = NULL;
  struct ex_qwen35_config cfg;
  int r = 0;
  for (int i = 0; i < n_in && !r; i++)
    r = read_rows(ins[i].path, &ins[i].tok, &ins[i].b, &ins[i].t, diag);
  if (r || (r = cm_model_dir_open(model, &dir, diag)) ||
      (r = ex_qwen35_config_parse(dir->config, &cfg, diag)))
    goto out;
  for (int i = 0; i < n_in; i++) {
    max_b = ins[i].b > max_b ? ins[i].b : max_b;
    max_t = ins[i].t > max_t ? ins[i].t : max_t;
    max_bt = ins[i].b * ins[i].t > max_bt ? ins[i].b * ins[i].t : max_bt;
  }
  struct exc_qwen35_limits lim;
  exc_qwen35_limits_default(&lim);
  lim.max_tokens = max_bt > prefix ? max_bt : prefix;
  lim.max_seqs = max_b;
  lim.max_ctx = prefix + max_t > 64 ? prefix + max_t : 64;
  lim.n_snapshots = 1;
  lim.max_readouts = max_b;
  if ((r = exc_qwen35_new(&cfg, dir->weights, device, &lim, &e, diag)))
    goto out;
  double ready_ms = now_ms() - t0;
  seqs = calloc(max_b, sizeof(*seqs));
  ro = malloc(max_b * sizeof(size_t));
  logits = malloc(max_b * (size_t)cfg.vocab_size * sizeof(float));
  ms = calloc((size_t)repeat + 1, sizeof(float));
  ptok = malloc((prefix ? prefix : 1) * sizeof(int32_t));
  if (!seqs || !ro || !logits || !ms || !ptok) {
    r = -ENOMEM;
    goto out;
  }
  if (prefix) { /* the shared prefix, once (untimed): seeded ordinary ids */
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < prefix; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      ptok[i] = (int32_t)(x % PREFIX_MAX_ID);
    }
    if ((r = exc_qwen35_state_acquire(e, &st)))
      goto out;
    struct exc_qwen35_seq sp = {.state = st, .advance = true, .n = prefix, .pos = NULL};
    size_t last = prefix - 1;
    if ((r = exc_qwen35_forward(e, &sp, 1, ptok, NULL, 0, &last, 1, NULL, logits, diag)))
      goto out;
  }
  for (int i = 0; i < n_in && !r; i++)
    r = time_rows(e, st, &ins[i], prefix, repeat, ready_ms, cfg.vocab_size, seqs, ro, logits, ms,
                  diag);
out:
  if (e) {
    exc_qwen35_state_release(e, st);
    exc_qwen35_free(e);
  }
  cm_model_dir_free(dir);
  for (int i = 0; i < n_in; i++)
    free(ins[i].tok);
  free(seqs), free(ro), free(logits), free(ms), free(ptok);
  return r;
}

int main(int argc, char **argv) {
  double t0 = now_ms();
  static const struct option opts[] = {
      {"model", required_argument, 0, 'm'},  {"device", required_argument, 0, 'd'},
      {"input", required_argument, 0, 'i'},  {"prefix", required_argument, 0, 'p'},
      {"repeat", required_argument, 0, 'r'}, {0, 0, 0, 0}};
  const char *model = NULL, *device = "cuda:0";
  struct rows_input ins[MAX_INPUTS] = {0};
  int n_in = 0;
  long prefix = 0, repeat = 10;
  int c;
  char *end = NULL;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'm': model = optarg; break;
    case 'd': device = optarg; break;
    case 'i':
      if (n_in == MAX_INPUTS)
        goto usage;
      ins[n_in++].path = optarg;
      break;
    case 'p': prefix = strtol(optarg, &end, 10); break;
    case 'r': repeat = strtol(optarg, &end, 10); break;
    default: goto usage;
    }
    if (end && (*end || prefix < 0 || prefix > 1 << 20 || repeat < 1 || repeat > 10000))
      goto usage;
    end = NULL;
  }
  long dev = strcmp(device, "cuda") == 0 ? 0 : -1;
  if (strncmp(device, "cuda:", 5) == 0 && device[5]) {
    dev = strtol(device + 5, &end, 10);
    if (*end || dev > 1024)
      dev = -1;
  }
  if (!model || !n_in || optind != argc || dev < 0)
    goto usage;
  struct cm_diag diag = {0};
  int r = run(model, (int)dev, ins, n_in, (size_t)prefix, (int)repeat, t0, &diag);
  if (r)
    fprintf(stderr, "bench_rows: %s (%s)\n", diag.msg ? diag.msg : cm_strerror(r), cm_strerror(r));
  cm_diag_fini(&diag);
  return r ? 1 : 0;
usage:
  fprintf(stderr, "usage: bench_rows --model DIR [--device cuda:N] --input ROWS.json [--input ...] "
                  "[--prefix P] [--repeat K]\n");
  return 2;
}
