/* The Open-Jev family behind the preprocessor's family interface (pp_family.h): loads the model
 * constants and tokenizer from a model directory, turns a compiled request into a program (one
 * row per candidate sequence with a HEAD readout of the scalar head at its last token; the
 * sequences' common token prefixes run once, as shared prefixes on the 64-token grid, see
 * pp_open_jev_program) and the result's head outputs into the response. The tokenizer and the
 * /v1/models entry's head are the core's (pp_model_load). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "open_jev.h"
#include "pp_family.h"
#include "proto.h"

static const char *const QUESTION_TYPES[] = {"choice", "score", "noul", NULL};
static const char *const HEADS[] = {"open_jev_scalar", NULL}; /* executor/heads/open_jev/ */

/* The loaded model: its constants (model id, aliases, temperature, limits). */
struct state {
  struct pp_open_jev_model model; /* constants */
};

struct ctx {
  struct pp_open_jev_request *req; /* compiled request, owned */
};

static void state_free(void *p) {
  struct state *s = p;
  if (!s)
    return;
  pp_open_jev_model_fini(&s->model);
  free(s);
}

static int load(const struct cm_model_dir *dir, const struct pp_tok *tok, void **ret_model,
                struct pp_model_desc *ret_desc, struct cm_diag *diag) {
  struct state *s = calloc(1, sizeof *s);
  if (!s)
    return -ENOMEM;
  int rc = pp_open_jev_model_init(dir->manifest, tok, &s->model, diag);
  if (rc) {
    state_free(s);
    return rc;
  }
  json_object *v = NULL;
  ret_desc->id = s->model.model_id;
  ret_desc->aliases = (const char *const *)s->model.aliases;
  ret_desc->n_aliases = s->model.n_aliases;
  ret_desc->revision = json_object_object_get_ex(s->model.metadata, "checkpoint_sha256", &v) &&
                               json_object_is_type(v, json_type_string)
                           ? json_object_get_string(v)
                           : "unknown";
  *ret_model = s;
  return 0;
}

static void describe(const void *model, json_object *d) {
  const struct state *s = model;
  json_object *lim = json_object_new_object();
  json_object_object_add(lim, "questions", pp_describe_range(1, PP_OPEN_JEV_MAX_QUESTIONS));
  json_object_object_add(lim, "choice_options", pp_describe_range(1, PP_OPEN_JEV_MAX_CHOICE));
  json_object_object_add(lim, "score_levels",
                         pp_describe_range(PP_OPEN_JEV_MIN_SCORE, PP_OPEN_JEV_MAX_SCORE));
  json_object_object_add(lim, "candidate_sequences",
                         json_object_new_int(PP_OPEN_JEV_MAX_SEQUENCES));
  json_object_object_add(d, "candidate_limits", lim);
  json_object_object_add(d, "image_limits", json_object_new_int(0));
  json_object_object_add(d, "max_tokens", json_object_new_int64(s->model.max_length));
  json_object_object_add(d, "temperature", json_object_new_double(s->model.temperature));
}

static void ctx_free(void *p) {
  struct ctx *c = p;
  if (!c)
    return;
  pp_open_jev_request_free(c->req);
  free(c);
}

static int compile(const void *model, json_object *request, const struct pp_request_info *info,
                   struct proto_program *ret_program, void **ret_ctx, struct cm_diag *diag) {
  (void)info;
  const struct state *s = model;
  struct ctx *c = calloc(1, sizeof *c);
  if (!c)
    return -ENOMEM;
  int rc = pp_open_jev_compile(&s->model, request, false, &c->req, diag);
  if (!rc)
    rc = pp_open_jev_program(c->req, true, HEADS[0], ret_program, diag);
  if (rc) {
    ctx_free(c);
    return rc;
  }
  *ret_ctx = c;
  return 0;
}

/* Sequence i's tokens. */
static const int32_t *seq_ids(const struct pp_open_jev_request *r, size_t i, size_t *ret_n) {
  *ret_n = r->seq_off[i + 1] - r->seq_off[i];
  return r->ids + r->seq_off[i];
}

/* The grid-aligned prefix the sequences [first, first + n) share, leaving each ≥ 2 tokens. */
static size_t shared_prefix(const struct pp_open_jev_request *r, size_t first, size_t n) {
  size_t n0, k;
  const int32_t *a = seq_ids(r, first, &n0);
  k = n0 >= 2 ? n0 - 2 : 0;
  for (size_t i = first + 1; i < first + n && k; i++) {
    size_t m;
    const int32_t *b = seq_ids(r, i, &m);
    if (m < 2)
      return 0;
    if (m - 2 < k)
      k = m - 2;
    size_t j = 0;
    while (j < k && a[j] == b[j])
      j++;
    k = j;
  }
  return k / PP_OPEN_JEV_GRID * PP_OPEN_JEV_GRID;
}

int pp_open_jev_program(const struct pp_open_jev_request *r, bool share, const char *head,
                        struct proto_program *p, struct cm_diag *diag) {
  size_t root = share && r->n_seqs >= 2 ? shared_prefix(r, 0, r->n_seqs) : 0;
  size_t *qlen = calloc(r->n_questions + 1, sizeof *qlen); /* a chosen question's prefix end */
  int32_t *qpre = malloc((r->n_questions + 1) * sizeof *qpre); /* its prefix index */
  bool *pick = calloc(r->n_questions + 1, sizeof *pick);          /* it has a prefix */
  int rc = 0;
  uint32_t idx_root = 0;
  if (!qlen || !qpre || !pick) {
    rc = -ENOMEM;
    goto out;
  }
  for (size_t q = 0; q < r->n_questions; q++) {
    const struct pp_open_jev_question *x = &r->questions[q];
    qpre[q] = -1;
    if (share && x->n_seqs >= 2)
      qlen[q] = shared_prefix(r, x->first_seq, x->n_seqs);
    if (qlen[q] <= root)
      qlen[q] = 0;
  }
  /* the questions that save the most tokens get the prefixes left after the root's */
  size_t budget = PP_OPEN_JEV_MAX_PREFIXES - (root ? 1 : 0), chosen = 0;
  while (chosen < budget) {
    size_t best = SIZE_MAX, best_gain = 0;
    for (size_t q = 0; q < r->n_questions; q++) {
      size_t gain = qlen[q] ? (qlen[q] - root) * (r->questions[q].n_seqs - 1) : 0;
      if (!pick[q] && gain > best_gain)
        best = q, best_gain = gain;
    }
    if (best == SIZE_MAX)
      break;
    pick[best] = true;
    chosen++;
  }
  if (root) {
    size_t n0;
    const int32_t *a = seq_ids(r, 0, &n0);
    rc = proto_program_add_prefix(p, a, NULL, (uint32_t)root, -1, NULL, 0, &idx_root);
  }
  for (size_t q = 0; !rc && q < r->n_questions; q++) {
    if (!pick[q])
      continue;
    size_t n0;
    uint32_t idx;
    const int32_t *a = seq_ids(r, r->questions[q].first_seq, &n0);
    rc = proto_program_add_prefix(p, a + root, NULL, (uint32_t)(qlen[q] - root),
                                  root ? (int32_t)idx_root : -1, NULL, 0, &idx);
    qpre[q] = (int32_t)idx;
  }
  if (rc) {
    rc = cm_diag_set(diag, rc, "program: shared prefix: %s", cm_strerror(rc));
    goto out;
  }
  for (size_t q = 0; q < r->n_questions && !rc; q++) {
    const struct pp_open_jev_question *x = &r->questions[q];
    size_t start = qpre[q] >= 0 ? qlen[q] : root;
    int32_t parent = qpre[q] >= 0 ? qpre[q] : root ? (int32_t)idx_root : -1;
    for (size_t i = x->first_seq; i < x->first_seq + x->n_seqs && !rc; i++) {
      size_t n;
      uint32_t row;
      const int32_t *ids = seq_ids(r, i, &n);
      rc = proto_program_add_row(p, ids + start, NULL, (uint32_t)(n - start), parent, &row);
      if (!rc)
        rc = proto_program_add_readout(p, PROTO_READOUT_HEAD, row, -1, NULL, 0, head, NULL);
      if (rc)
        rc = cm_diag_set(diag, rc, "program: sequence %zu: %s", i, cm_strerror(rc));
    }
  }
out:
  free(qlen);
  free(qpre);
  free(pick);
  return rc;
}

static int finish(const void *model, void *ctx, const struct proto_result *result,
                  const struct pp_request_info *info, char **ret_json, size_t *ret_len,
                  struct pp_finish_stats *ret_stats, struct cm_diag *diag) {
  const struct state *s = model;
  const struct ctx *c = ctx;
  const struct pp_open_jev_request *r = c->req;
  if (result->n_outputs != r->n_seqs)
    return cm_diag_set(diag, -CM_EINTERNAL, "result has %u outputs for %zu sequences",
                       result->n_outputs, r->n_seqs);
  float *scores = malloc((r->n_seqs ? r->n_seqs : 1) * sizeof *scores);
  if (!scores)
    return -ENOMEM;
  for (size_t i = 0; i < r->n_seqs; i++) {
    if (result->n_floats[i] != 1) {
      free(scores);
      return cm_diag_set(diag, -CM_EINTERNAL, "head output %zu has %u values, expected 1", i,
                         result->n_floats[i]);
    }
    scores[i] = result->outputs[i][0];
  }
  double seconds = (double)(proto_now_us() - info->compile_end_us) / 1e6;
  int rc = pp_open_jev_finish(&s->model, r, scores, seconds, ret_json, ret_len, diag);
  free(scores);
  if (!rc && ret_stats) {
    ret_stats->tokens = r->n_seqs ? r->seq_off[r->n_seqs] : 0;
    ret_stats->decisions = r->n_questions;
  }
  return rc;
}

const struct pp_family pp_family_open_jev = {
    .name = "open_jev",
    .question_types = QUESTION_TYPES,
    .heads = HEADS,
    .load = load,
    .describe = describe,
    .compile = compile,
    .finish = finish,
    .ctx_free = ctx_free,
    .free = state_free,
};
