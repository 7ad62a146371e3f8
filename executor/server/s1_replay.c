/* s1-replay: re-runs the programs an executor recorded (--record DIR) against a model directory on
 * the CPU backend and reports every result that differs, bit for bit, from the recorded one.
 * Exit status 0 when every record replays identically, 1 when any differs, 2 on usage or I/O. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_version.h"
#include "ex_program.h"
#include "ex_record.h"

static void usage(void) {
  fprintf(stderr, "usage: s1-replay RECORD_DIR --model DIR [--numerics fp32|bf16]\n"
                  "  --numerics  the mode the executor served (default: the directory's);\n"
                  "              --bf16-rounding is --numerics bf16\n");
}

int main(int argc, char **argv) {
  if (cm_version_requested(argc, argv, "s1-replay"))
    return 0;
  static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                       {"bf16-rounding", no_argument, 0, 'b'},
                                       {"numerics", required_argument, 0, 'n'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  const char *model = NULL;
  struct ex_runner_options ro = {0};
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'm': model = optarg; break;
    case 'b':
      ro.numerics = "bf16";
      break;
    case 'n':
      ro.numerics = optarg;
      break;
    case 'h': usage(); return 0;
    default: usage(); return 2;
    }
  }
  if (!model || optind != argc - 1) {
    usage();
    return 2;
  }
  const char *rec = argv[optind];
  struct cm_diag diag = {0};
  struct cm_model_dir *dir = NULL;
  struct ex_runner *runner = NULL;
  uint64_t *seqs = NULL;
  size_t n = 0, same = 0, differ = 0;
  int rc = 2;
  if (cm_model_dir_open(model, &dir, &diag) || ex_runner_new(dir, &ro, &runner, &diag) ||
      ex_record_list(rec, &seqs, &n, &diag)) {
    fprintf(stderr, "s1-replay: %s\n", diag.msg ? diag.msg : "cannot start");
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    char *pb = NULL, *rb = NULL;
    size_t pn = 0, rn = 0;
    struct proto_program p = {0};
    struct proto_result want = {0}, got = {0};
    if (ex_record_read(rec, seqs[i], &pb, &pn, &rb, &rn, &diag) ||
        proto_result_decode(rb, rn, &want, &diag)) {
      fprintf(stderr, "s1-replay: record %llu: %s\n", (unsigned long long)seqs[i],
              diag.msg ? diag.msg : "unreadable");
      cm_diag_fini(&diag);
      free(pb), free(rb);
      goto out;
    }
    int r = proto_program_decode(pb, pn, &p, &diag);
    if (!r) {
      p.deadline_us = 0; /* a replay is not bound by the original deadline */
      r = ex_runner_run(runner, &p, &got, &diag);
    } else {
      proto_result_set_error(&got, -CM_EPROGRAM, diag.msg);
    }
    cm_diag_fini(&diag);
    const char *why = NULL;
    char buf[160];
    if (got.status != want.status) {
      snprintf(buf, sizeof(buf), "status %d, recorded %d", got.status, want.status);
      why = buf;
    } else if (got.n_outputs != want.n_outputs) {
      why = "readout count differs";
    } else if (want.numerics && (!got.numerics || strcmp(got.numerics, want.numerics) != 0)) {
      snprintf(buf, sizeof(buf), "numerics %s, recorded %s (pass --numerics %s)",
               got.numerics ? got.numerics : "none", want.numerics, want.numerics);
      why = buf;
    }
    for (uint32_t k = 0; !why && k < got.n_outputs; k++) {
      if (got.n_floats[k] != want.n_floats[k]) {
        snprintf(buf, sizeof(buf), "readout %u: %u floats, recorded %u", k, got.n_floats[k],
                 want.n_floats[k]);
        why = buf;
      }
      for (uint32_t j = 0; !why && j < got.n_floats[k]; j++)
        if (memcmp(&got.outputs[k][j], &want.outputs[k][j], sizeof(float)) != 0) {
          snprintf(buf, sizeof(buf), "readout %u[%u]: %.9g, recorded %.9g", k, j,
                   (double)got.outputs[k][j], (double)want.outputs[k][j]);
          why = buf;
        }
    }
    if (why) {
      printf("record %08llu (request %s): DIFFERS: %s\n", (unsigned long long)seqs[i],
             p.request_id ? p.request_id : "?", why);
      differ++;
    } else {
      same++;
    }
    proto_program_fini(&p);
    proto_result_fini(&want);
    proto_result_fini(&got);
    free(pb), free(rb);
  }
  printf("s1-replay: %zu records, %zu identical, %zu differ\n", n, same, differ);
  rc = differ ? 1 : 0;
out:
  cm_diag_fini(&diag);
  free(seqs);
  ex_runner_free(runner);
  cm_model_dir_free(dir);
  return rc;
}
