/* Benchmark driver for scripts/bench tokenizer (not a test): load time of a tokenizer.json (wall
 * and process CPU time; the load parses on two threads) and single-thread encode throughput on a corpus of JSON-lines strings (each line encoded on its
 * own, and the whole corpus as one string). Prints one JSON object; writes the ids of each line
 * to IDS_OUT (JSON lines) so the script can compare them with the Python library's.
 * usage: bench_tok TOKENIZER.json CORPUS.jsonl IDS_OUT [REPEATS] */
#include "pp_tok.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_s(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }
/* CPU seconds of the whole process (all threads): robust on a shared, loaded machine. */
static double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s TOKENIZER.json CORPUS.jsonl IDS_OUT [REPEATS]\n", argv[0]);
    return 2;
  }
  int repeats = argc > 4 ? atoi(argv[4]) : 5;
  if (repeats < 1 || repeats > 100)
    repeats = 5;
  struct cm_diag d = {0};
  struct pp_tok *tok = NULL;
  double load[100], load_cpu[100];
  for (int r = 0; r < repeats; r++) {
    double t0 = now_s(), c0 = cpu_s();
    if (pp_tok_load_file(argv[1], &tok, &d)) {
      fprintf(stderr, "load: %s\n", d.msg);
      return 1;
    }
    load[r] = now_s() - t0;
    load_cpu[r] = cpu_s() - c0;
    if (r + 1 < repeats) {
      pp_tok_free(tok);
      tok = NULL;
    }
  }
  qsort(load, (size_t)repeats, sizeof(double), cmp_double);
  qsort(load_cpu, (size_t)repeats, sizeof(double), cmp_double);

  FILE *f = fopen(argv[2], "r");
  if (!f) {
    fprintf(stderr, "%s: cannot open\n", argv[2]);
    return 1;
  }
  char **lines = NULL, *line = NULL;
  size_t *lens = NULL, n_lines = 0, cap = 0, line_cap = 0, total = 0;
  ssize_t got;
  while ((got = getline(&line, &line_cap, f)) > 0) {
    json_object *o = json_tokener_parse(line);
    if (!o || !json_object_is_type(o, json_type_string)) {
      fprintf(stderr, "%s: line %zu is not a JSON string\n", argv[2], n_lines + 1);
      return 1;
    }
    if (n_lines == cap) {
      cap = cap ? cap * 2 : 256;
      lines = realloc(lines, cap * sizeof(*lines));
      lens = realloc(lens, cap * sizeof(*lens));
    }
    lens[n_lines] = (size_t)json_object_get_string_len(o);
    lines[n_lines] = malloc(lens[n_lines] + 1);
    memcpy(lines[n_lines], json_object_get_string(o), lens[n_lines] + 1);
    total += lens[n_lines];
    n_lines++;
    json_object_put(o);
  }
  free(line);
  fclose(f);
  char *all = malloc(total + 1);
  size_t off = 0;
  for (size_t i = 0; i < n_lines; i++) {
    memcpy(all + off, lines[i], lens[i]);
    off += lens[i];
  }

  struct pp_tok_ids ids = {0};
  double per_line[100], whole[100], per_line_cpu[100], whole_cpu[100];
  size_t n_tokens = 0, n_tokens_whole = 0;
  for (int r = 0; r < repeats; r++) {
    double t0 = now_s(), c0 = cpu_s();
    n_tokens = 0;
    for (size_t i = 0; i < n_lines; i++) {
      ids.n = 0;
      if (pp_tok_encode(tok, lines[i], lens[i], &ids, &d)) {
        fprintf(stderr, "encode: %s\n", d.msg);
        return 1;
      }
      n_tokens += ids.n;
    }
    per_line[r] = now_s() - t0;
    per_line_cpu[r] = cpu_s() - c0;
    t0 = now_s();
    c0 = cpu_s();
    ids.n = 0;
    if (pp_tok_encode(tok, all, total, &ids, &d)) {
      fprintf(stderr, "encode: %s\n", d.msg);
      return 1;
    }
    whole[r] = now_s() - t0;
    whole_cpu[r] = cpu_s() - c0;
    n_tokens_whole = ids.n;
  }
  FILE *out = fopen(argv[3], "w");
  for (size_t i = 0; out && i < n_lines; i++) {
    ids.n = 0;
    pp_tok_encode(tok, lines[i], lens[i], &ids, &d);
    fputc('[', out);
    for (size_t k = 0; k < ids.n; k++)
      fprintf(out, k ? ",%d" : "%d", (int)ids.ids[k]);
    fputs("]\n", out);
  }
  if (out)
    fclose(out);
  double first_line = per_line[0], first_whole = whole[0];
  qsort(per_line, (size_t)repeats, sizeof(double), cmp_double);
  qsort(whole, (size_t)repeats, sizeof(double), cmp_double);
  qsort(per_line_cpu, (size_t)repeats, sizeof(double), cmp_double);
  qsort(whole_cpu, (size_t)repeats, sizeof(double), cmp_double);
  printf("{\"impl\": \"s1 C\", \"vocab\": %zu, \"load_ms_min\": %.1f, \"load_ms_median\": %.1f, "
         "\"load_cpu_ms_min\": %.1f, \"bytes\": %zu, \"lines\": %zu, \"tokens\": %zu, "
         "\"tokens_whole\": %zu, \"lines_MBps_first\": %.2f, \"lines_MBps_median\": %.2f, "
         "\"lines_MBps_cpu_best\": %.2f, \"whole_MBps_median\": %.2f, \"whole_MBps_cpu_best\": %.2f}\n",
         pp_tok_vocab_size(tok, true), load[0] * 1e3, load[repeats / 2] * 1e3, load_cpu[0] * 1e3,
         total, n_lines, n_tokens, n_tokens_whole, (double)total / first_line / 1e6,
         (double)total / per_line[repeats / 2] / 1e6, (double)total / per_line_cpu[0] / 1e6,
         (double)total / whole[repeats / 2] / 1e6, (double)total / whole_cpu[0] / 1e6);
  (void)first_whole;
  for (size_t i = 0; i < n_lines; i++)
    free(lines[i]);
  free(lines);
  free(lens);
  free(all);
  pp_tok_ids_fini(&ids);
  pp_tok_free(tok);
  cm_diag_fini(&d);
  return 0;
}
