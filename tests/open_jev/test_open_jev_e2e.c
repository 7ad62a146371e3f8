/* End to end without processes: the tiny random Open-Jev model directory (s1-mkmodel seed 4242 +
 * the committed upstream package, exported by s1-export --family open_jev) answers the requests of
 * tests/fixtures/open_jev/e2e/e2e.json through the family's compile, the executor's program runner
 * on the float32 CPU backend with the open_jev_scalar head, and the family's finish. The answers
 * must match the float32 transformers + PEFT reference (tests/oracle/open_jev_e2e.py) within 1e-5,
 * with identical decisions, token ids (each row with its shared prefixes) and usage. With bf16
 * rounding points on, the largest probability difference to the bf16 reference is printed (the
 * spec's parity is ~1e-2).
 * Prefix sharing: for these requests and for longer ones made here (long state, long question
 * texts, identical options, more questions than prefixes), the program with shared prefixes and
 * the same program with every row spelled out from the empty state (the reference's independent
 * sequences) give bit-identical head outputs, in both modes; the longer ones must share.
 * usage: test_open_jev_e2e MODEL_DIR E2E.json */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_model_dir.h"
#include "ex_program.h"
#include "open_jev.h"
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

/* Appends the ids of prefix `k` and its parents, root first, to ids at *n. */
static void chain_ids(const struct proto_program *p, int32_t k, int32_t *ids, size_t *n) {
  if (k < 0)
    return;
  chain_ids(p, p->prefixes[k].parent, ids, n);
  memcpy(ids + *n, p->prefixes[k].ids, p->prefixes[k].n_tokens * sizeof(int32_t));
  *n += p->prefixes[k].n_tokens;
}

/* Row i's whole sequence: its prefix chain, then the row. Ownership: heap (free()). */
static int32_t *full_row(const struct proto_program *p, uint32_t i, size_t *ret_n) {
  size_t cap = p->rows[i].n_tokens;
  for (int32_t k = p->rows[i].prefix; k >= 0; k = p->prefixes[k].parent)
    cap += p->prefixes[k].n_tokens;
  int32_t *ids = malloc(cap * sizeof(int32_t));
  size_t n = 0;
  if (!ids)
    return NULL;
  chain_ids(p, p->rows[i].prefix, ids, &n);
  memcpy(ids + n, p->rows[i].ids, p->rows[i].n_tokens * sizeof(int32_t));
  *ret_n = n + p->rows[i].n_tokens;
  return ids;
}

/* The same program with every row spelled out from the empty state (no prefixes). */
static int unshare(const struct proto_program *p, struct proto_program *ret) {
  int rc = 0;
  for (uint32_t i = 0; !rc && i < p->n_rows; i++) {
    size_t n = 0;
    int32_t *ids = full_row(p, i, &n);
    rc = ids ? proto_program_add_row(ret, ids, NULL, (uint32_t)n, -1, NULL) : -ENOMEM;
    free(ids);
  }
  for (uint32_t i = 0; !rc && i < p->n_readouts; i++) {
    const struct proto_readout *r = &p->readouts[i];
    rc = proto_program_add_readout(ret, r->kind, r->row, r->position, r->ids, r->n_ids, r->head,
                                   NULL);
  }
  return rc;
}

/* Runs the shared and the unshared program and compares every output bit for bit. Returns
 * 0 when identical (prints and counts a failure otherwise). */
static int same_bits(struct ex_runner *runner, const struct proto_program *shared,
                     const struct proto_result *res_shared, const char *name) {
  struct proto_program flat = {0};
  struct proto_result res = {0};
  struct cm_diag d = {0};
  int rc = unshare(shared, &flat);
  if (!rc)
    rc = ex_runner_run(runner, &flat, &res, &d);
  if (!rc && res.n_outputs != res_shared->n_outputs)
    rc = -1;
  for (uint32_t i = 0; !rc && i < res.n_outputs; i++)
    if (res.n_floats[i] != res_shared->n_floats[i] ||
        memcmp(res.outputs[i], res_shared->outputs[i], res.n_floats[i] * sizeof(float)) != 0) {
      fprintf(stderr, "%s: readout %u: shared %.9g, unshared %.9g\n", name, i,
              res_shared->outputs[i][0], res.outputs[i][0]);
      rc = -1;
    }
  if (rc) {
    fprintf(stderr, "%s: the shared plan's outputs are not the unshared plan's bits (%d %s)\n",
            name, rc, d.msg ? d.msg : "");
    fails++;
  }
  cm_diag_fini(&d);
  proto_result_fini(&res);
  proto_program_fini(&flat);
  return rc;
}

/* Requests that must share: a long state (every sequence's common prefix ≥ 2 grid cells),
 * long question texts (child prefixes), two identical options (their common prefix is the whole
 * sequence: each row keeps ≥ 2 tokens), and 9 choice questions (more than the prefix budget). */
static json_object *sharing_requests(void) {
  json_object *arr = json_object_new_array();
  char state[4096], instr[2048];
  size_t n = 0;
  for (int i = 0; i < 14; i++)
    n += (size_t)snprintf(state + n, sizeof state - n, "fact %d is that item %d is red; ", i, i);
  for (int r = 0; r < 3; r++) {
    json_object *body = json_object_new_object(), *qs = json_object_new_object();
    json_object_object_add(body, "state", json_object_new_string(state));
    int n_q = r == 2 ? 9 : 3;
    for (int q = 0; q < n_q; q++) {
      json_object *x = json_object_new_object(), *crit = NULL;
      size_t m = 0;
      for (int w = 0; w < (r == 1 ? 2 : r == 0 ? 12 : 5 + q % 3); w++)
        m += (size_t)snprintf(instr + m, sizeof instr - m, "consider part %d of question %d, ",
                              w, q);
      json_object_object_add(x, "instructions", json_object_new_string(instr));
      int kind = r == 2 ? 0 : q % 3;
      json_object_object_add(x, "type", json_object_new_string(kind == 0   ? "choice"
                                                             : kind == 1 ? "score"
                                                                         : "noul"));
      if (kind == 0) {
        crit = json_object_new_object();
        for (int o = 0; o < (r == 2 ? 2 : 4); o++) {
          char k[16], v[64];
          snprintf(k, sizeof k, "o%d", o);
          snprintf(v, sizeof v, "option %d", r == 1 && o == 3 ? 2 : o); /* o3 = o2 in r 1 */
          json_object_object_add(crit, k, json_object_new_string(v));
        }
      } else if (kind == 1) {
        crit = json_object_new_array();
        json_object_array_add(crit, json_object_new_string("low"));
        json_object_array_add(crit, json_object_new_string("high"));
      }
      if (crit)
        json_object_object_add(x, "criteria", crit);
      char qid[16];
      snprintf(qid, sizeof qid, "q%d", q);
      json_object_object_add(qs, qid, x);
    }
    json_object_object_add(body, "questions", qs);
    json_object *req = json_object_new_object();
    char name[32];
    snprintf(name, sizeof name, "sharing_%d", r);
    json_object_object_add(req, "name", json_object_new_string(name));
    json_object_object_add(req, "body", json_object_new_string(json_object_to_json_string(body)));
    json_object_array_add(arr, req);
    json_object_put(body);
  }
  return arr;
}

/* The sharing requests: each program must have shared prefixes (child ones for the long
 * question texts, at most the budget), and its outputs must be the unshared plan's bits. */
static void run_sharing(struct ex_runner *runner, const struct pp_family *fam, void *state) {
  json_object *reqs = sharing_requests();
  for (size_t r = 0; r < json_object_array_length(reqs); r++) {
    json_object *q = json_object_array_get_idx(reqs, r), *body = NULL;
    const char *name = json_object_get_string(get(q, "name"));
    const char *text = json_object_get_string(get(q, "body"));
    struct proto_program prog = {0};
    struct proto_result res = {0};
    struct pp_request_info info = {.request_id = name, .received_us = proto_now_us()};
    struct cm_diag d = {0};
    void *ctx = NULL;
    int rc = pp_json_parse(text, strlen(text), &body, &d);
    if (!rc)
      rc = fam->compile(state, body, &info, &prog, &ctx, &d);
    if (!rc)
      rc = ex_runner_run(runner, &prog, &res, &d);
    uint64_t row_tokens = 0, all_tokens = 0;
    uint32_t children = 0;
    for (uint32_t i = 0; !rc && i < prog.n_rows; i++) {
      size_t n = 0;
      free(full_row(&prog, i, &n));
      all_tokens += n;
      row_tokens += prog.rows[i].n_tokens;
      if (prog.rows[i].n_tokens < 2)
        rc = fprintf(stderr, "%s: row %u has %u token(s)\n", name, i, prog.rows[i].n_tokens);
    }
    for (uint32_t i = 0; !rc && i < prog.n_prefixes; i++) {
      children += prog.prefixes[i].parent >= 0;
      if (prog.prefixes[i].n_tokens % 64)
        rc = fprintf(stderr, "%s: prefix %u of %u tokens is off the grid\n", name, i,
                     prog.prefixes[i].n_tokens);
    }
    /* sharing_1's question texts are short: the state prefix only */
    if (rc || (r != 1 && (prog.n_prefixes < 2 || children < 1)) || prog.n_prefixes < 1 ||
        prog.n_prefixes > PP_OPEN_JEV_MAX_PREFIXES || 2 * row_tokens > all_tokens) {
      fprintf(stderr, "%s: %d %s; %u prefixes (%u continuing another), rows %llu of %llu "
              "tokens\n", name, rc, d.msg ? d.msg : "", prog.n_prefixes, children,
              (unsigned long long)row_tokens, (unsigned long long)all_tokens);
      fails++;
    } else if (same_bits(runner, &prog, &res, name) == 0) {
      printf("%s: %u rows, %u shared prefixes: rows run %llu of %llu tokens; outputs bit-identical "
             "to the unshared plan\n", name, prog.n_rows, prog.n_prefixes,
             (unsigned long long)row_tokens, (unsigned long long)all_tokens);
    }
    cm_diag_fini(&d);
    fam->ctx_free(ctx);
    proto_program_fini(&prog);
    proto_result_fini(&res);
    json_object_put(body);
  }
  json_object_put(reqs);
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
  run_sharing(runner, fam, state);
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
      size_t n = 0;
      int32_t *row = full_row(&prog, i, &n);
      bool same = row && n == json_object_array_length(want);
      for (size_t k = 0; same && k < n; k++)
        same = row[k] == json_object_get_int(json_object_array_get_idx(want, k));
      free(row);
      if (!same) {
        fprintf(stderr, "%s: row %u token ids differ from the reference tokenizer's\n", name, i);
        fails++;
      }
    }
    info.compile_end_us = proto_now_us();
    if (!rc)
      rc = ex_runner_run(runner, &prog, &res, &d);
    if (!rc)
      same_bits(runner, &prog, &res, name);
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
  struct pp_model *pm = NULL;
  json_object *fix = json_object_from_file(argv[2]);
  const struct pp_family *fam = pp_family_find("open_jev");
  if (!fix || !fam) {
    fprintf(stderr, "cannot read %s or no open_jev family\n", argv[2]);
    return 1;
  }
  if (cm_model_dir_open(argv[1], &dir, &d) != 0 || pp_model_load(dir, &pm, &d) != 0) {
    fprintf(stderr, "%s: %s\n", argv[1], d.msg);
    return 1;
  }
  void *state = pm->state;
  double worst32 = INFINITY, worst16 = INFINITY;
  if (run_all(dir, fam, state, fix, false, &worst32) != 0 ||
      run_all(dir, fam, state, fix, true, &worst16) != 0)
    fails++;
  printf("open_jev e2e: max |answer - fp32 reference| = %.3g; with bf16 rounding points, "
         "max |answer - bf16 reference| = %.3g\n",
         worst32, worst16);
  pp_model_free(pm);
  cm_model_dir_free(dir);
  json_object_put(fix);
  cm_diag_fini(&d);
  return fails ? 1 : 0;
}
