/* End to end without processes: the tiny random Open-Jev model directory (s1-mkmodel seed 4242 +
 * the committed upstream package, exported by s1-export --family open_jev) answers the requests of
 * tests/fixtures/open_jev/e2e/e2e.json through the family's compile, the executor's program runner
 * on the float32 CPU backend with the open_jev_scalar head, and the family's finish. The answers
 * must match the float32 transformers + PEFT reference (tests/oracle/open_jev_e2e.py) within 1e-5,
 * with identical decisions, token ids and usage. With bf16 rounding points on, the largest
 * probability difference to the bf16 reference is printed (the spec's parity is ~1e-2).
 * usage: test_open_jev_e2e MODEL_DIR E2E.json */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_model_dir.h"
#include "ex_program.h"
#include "pp_family.h"
#include "pp_json.h"
#include "proto.h"

static int fails;

static json_object *get(json_object *o, const char *k) {
  json_object *v = NULL;
  json_object_object_get_ex(o, k, &v);
  return v;
}

/* Compares two JSON values: numbers within tol (both directions), everything else exactly.
 * Returns the largest number difference seen, or INFINITY on a structural mismatch. */
static double compare(json_object *a, json_object *b, const char *path) {
  json_type ta = json_object_get_type(a), tb = json_object_get_type(b);
  bool na = ta == json_type_double || ta == json_type_int, nb = tb == json_type_double ||
                                                               tb == json_type_int;
  if (na && nb)
    return fabs(json_object_get_double(a) - json_object_get_double(b));
  if (ta != tb) {
    fprintf(stderr, "%s: types differ\n", path);
    return INFINITY;
  }
  double worst = 0;
  char sub[512];
  switch (ta) {
  case json_type_object:
    if (json_object_object_length(a) != json_object_object_length(b)) {
      fprintf(stderr, "%s: key counts differ\n", path);
      return INFINITY;
    }
    {
      struct lh_entry *eb = json_object_get_object(b)->head;
      json_object_object_foreach(a, k, v) {
        if (!eb || strcmp(k, (const char *)lh_entry_k(eb)) != 0) {
          fprintf(stderr, "%s: key '%s' out of order or missing\n", path, k);
          return INFINITY;
        }
        snprintf(sub, sizeof sub, "%s.%s", path, k);
        worst = fmax(worst, compare(v, (json_object *)lh_entry_v(eb), sub));
        eb = eb->next;
      }
    }
    return worst;
  case json_type_array:
    if (json_object_array_length(a) != json_object_array_length(b))
      return INFINITY;
    for (size_t i = 0; i < json_object_array_length(a); i++) {
      snprintf(sub, sizeof sub, "%s[%zu]", path, i);
      worst = fmax(worst, compare(json_object_array_get_idx(a, i),
                                  json_object_array_get_idx(b, i), sub));
    }
    return worst;
  case json_type_string:
    if (strcmp(json_object_get_string(a), json_object_get_string(b)) != 0) {
      fprintf(stderr, "%s: \"%s\" vs \"%s\"\n", path, json_object_get_string(a),
              json_object_get_string(b));
      return INFINITY;
    }
    return 0;
  default:
    return json_object_equal(a, b) ? 0 : INFINITY;
  }
}

static int run_all(const struct cm_model_dir *dir, const struct pp_family *fam, void *state,
                   json_object *fix, bool bf16, double *ret_worst) {
  struct ex_runner *runner = NULL;
  struct cm_diag d = {0};
  struct ex_runner_options opt = {.numerics = bf16 ? "bf16" : "fp32"};
  if (ex_runner_new(dir, &opt, &runner, &d) != 0) {
    fprintf(stderr, "runner: %s\n", d.msg);
    cm_diag_fini(&d);
    return -1;
  }
  json_object *reqs = get(fix, "requests");
  double worst = 0;
  for (size_t r = 0; r < json_object_array_length(reqs); r++) {
    json_object *q = json_object_array_get_idx(reqs, r), *body = NULL, *resp = NULL;
    const char *name = json_object_get_string(get(q, "name"));
    const char *text = json_object_get_string(get(q, "body"));
    struct proto_program prog = {0};
    struct proto_result res = {0};
    struct pp_request_info info = {.request_id = name, .received_us = proto_now_us()};
    void *ctx = NULL;
    char *out = NULL;
    size_t out_n = 0;
    struct pp_finish_stats stats = {0};
    cm_diag_fini(&d);
    int rc = pp_json_parse(text, strlen(text), &body, &d);
    if (!rc)
      rc = fam->compile(state, body, &info, &prog, &ctx, &d);
    /* token ids of every row against the transformers tokenizer's */
    json_object *ids = get(q, "ids");
    if (!rc && prog.n_rows != json_object_array_length(ids)) {
      fprintf(stderr, "%s: %u rows, want %zu\n", name, prog.n_rows, json_object_array_length(ids));
      fails++;
    }
    for (uint32_t i = 0; !rc && i < prog.n_rows && i < json_object_array_length(ids); i++) {
      json_object *want = json_object_array_get_idx(ids, i);
      bool same = prog.rows[i].n_tokens == json_object_array_length(want);
      for (uint32_t k = 0; same && k < prog.rows[i].n_tokens; k++)
        same = prog.rows[i].ids[k] == json_object_get_int(json_object_array_get_idx(want, k));
      if (!same) {
        fprintf(stderr, "%s: row %u token ids differ from the reference tokenizer's\n", name, i);
        fails++;
      }
    }
    info.compile_end_us = proto_now_us();
    if (!rc)
      rc = ex_runner_run(runner, &prog, &res, &d);
    if (!rc)
      rc = fam->finish(state, ctx, &res, &info, &out, &out_n, &stats, &d);
    if (rc) {
      fprintf(stderr, "%s: %s (%d)\n", name, d.msg ? d.msg : "", rc);
      fails++;
    } else {
      resp = json_tokener_parse(out);
      double diff = compare(get(resp, "answers"), get(q, bf16 ? "answers_bf16" : "answers_fp32"),
                            name);
      double udiff = compare(get(resp, "usage"), get(q, "usage"), name);
      if (udiff != 0) {
        fprintf(stderr, "%s: usage differs\n", name);
        fails++;
      }
      if (!bf16 && !(diff <= 1e-5)) {
        fprintf(stderr, "%s: answers differ from the float32 reference by %.3g\n%s\n", name, diff,
                out);
        fails++;
      }
      if (bf16 && isinf(diff)) {
        fprintf(stderr, "%s: bf16 decisions or legend differ from the bf16 reference\n", name);
        fails++;
      }
      worst = fmax(worst, diff);
    }
    json_object_put(resp);
    free(out);
    fam->ctx_free(ctx);
    proto_program_fini(&prog);
    proto_result_fini(&res);
    json_object_put(body);
  }
  cm_diag_fini(&d);
  ex_runner_free(runner);
  *ret_worst = worst;
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s MODEL_DIR E2E.json\n", argv[0]);
    return 2;
  }
  struct cm_diag d = {0};
  struct cm_model_dir *dir = NULL;
  void *state = NULL;
  json_object *fix = json_object_from_file(argv[2]);
  const struct pp_family *fam = pp_family_find("open_jev");
  if (!fix || !fam) {
    fprintf(stderr, "cannot read %s or no open_jev family\n", argv[2]);
    return 1;
  }
  if (cm_model_dir_open(argv[1], &dir, &d) != 0 || fam->load(dir, &state, &d) != 0) {
    fprintf(stderr, "%s: %s\n", argv[1], d.msg);
    return 1;
  }
  double worst32 = INFINITY, worst16 = INFINITY;
  if (run_all(dir, fam, state, fix, false, &worst32) != 0 ||
      run_all(dir, fam, state, fix, true, &worst16) != 0)
    fails++;
  printf("open_jev e2e: max |answer - fp32 reference| = %.3g; with bf16 rounding points, "
         "max |answer - bf16 reference| = %.3g\n",
         worst32, worst16);
  fam->free(state);
  cm_model_dir_free(dir);
  json_object_put(fix);
  cm_diag_fini(&d);
  return fails ? 1 : 0;
}
