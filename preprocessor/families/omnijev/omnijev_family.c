/* The OmniJev family behind the preprocessor's family interface (pp_family.h): one program per
 * request with the image, the shared prefix (parent -1), one row per option continuing it, and one
 * HEAD readout "omnijev" per question over its consecutive rows (the readout's layout:
 * executor/heads/omnijev/ex_head_omnijev.h); a request of only empty choices sends a one-token
 * program whose output nothing reads. Finish reads each question's μ and writes the answers. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "omnijev.h"
#include "pp_family.h"
#include "proto.h"

#define OMNIJEV_ID "tinnel123/OmniJev"

static const char *const ALIASES[] = {"omnijev", "omnijev-4b-v1.1"};
static const char *const QUESTION_TYPES[] = {"noul", "choice", "score", NULL};
static const char *const HEADS[] = {"omnijev", NULL}; /* executor/heads/omnijev/ */

struct ctx {
  struct pp_omnijev_request *req; /* compiled request, owned */
  int32_t *readout_of;            /* [n_questions] readout index per question, -1 for none */
};

/* The state is a heap struct pp_omnijev_model (constants; nothing of its own to free). */
static void state_free(void *p) {
  free(p);
}

static int load(const struct cm_model_dir *dir, const struct pp_tok *tok, void **ret_model,
                struct pp_model_desc *ret_desc, struct cm_diag *diag) {
  struct pp_omnijev_model *m = calloc(1, sizeof *m);
  if (!m)
    return -ENOMEM;
  int rc = pp_omnijev_model_init(dir->manifest, tok, m, diag);
  if (rc) {
    free(m);
    return rc;
  }
  json_object *v = NULL;
  ret_desc->id = OMNIJEV_ID;
  ret_desc->aliases = ALIASES;
  ret_desc->n_aliases = sizeof ALIASES / sizeof *ALIASES;
  ret_desc->revision = json_object_object_get_ex(dir->manifest, "revision", &v) &&
                               json_object_is_type(v, json_type_string)
                           ? json_object_get_string(v)
                           : "unknown";
  *ret_model = m;
  return 0;
}

static void describe(const void *model, json_object *d) {
  (void)model;
  json_object *lim = json_object_new_object(), *img = json_object_new_object();
  json_object_object_add(lim, "questions", json_object_new_int(PP_OMNIJEV_MAX_QUESTIONS));
  json_object_object_add(lim, "options_per_question", json_object_new_int(PP_OMNIJEV_MAX_OPTIONS));
  json_object_object_add(lim, "options", json_object_new_int(PP_OMNIJEV_MAX_ROWS));
  json_object_object_add(d, "candidate_limits", lim);
  /* one still, or 2..16 stills (one panel), or one video mosaic */
  json_object_object_add(img, "images", pp_describe_range(1, PP_OMNIJEV_MAX_STILLS));
  json_object_object_add(img, "max_bytes", json_object_new_int64(PP_OMNIJEV_MAX_IMAGE_BYTES));
  json_object_object_add(img, "max_side", json_object_new_int(PP_OMNIJEV_MAX_IMAGE_SIDE));
  json_object_object_add(img, "max_pixels", json_object_new_int(PP_OMNIJEV_MAX_PIXELS));
  json_object_object_add(d, "image_limits", img);
  json_object_object_add(d, "max_tokens", json_object_new_int(PP_OMNIJEV_MAX_INPUT_TOKENS));
}

static void ctx_free(void *p) {
  struct ctx *c = p;
  if (!c)
    return;
  pp_omnijev_request_free(c->req);
  free(c->readout_of);
  free(c);
}

/* Appends the request's image, prefix, rows and per-question readouts to `p`; the images' pixel
 * buffers move into the program (r->images[k].pixel_values becomes NULL). */
static int build_program(struct pp_omnijev_request *r, struct proto_program *p,
                         int32_t *readout_of) {
  uint32_t pre;
  bool any = false;
  for (size_t i = 0; i < r->n_questions; i++) {
    readout_of[i] = -1;
    any |= r->questions[i].n_options > 0;
  }
  if (!any) { /* only empty choices: nothing to read; a one-token program keeps the protocol */
    int32_t pos[3] = {0, 0, 0};
    uint32_t row;
    int rc = proto_program_add_row(p, r->prefix_ids, pos, 1, -1, &row);
    return rc ? rc : proto_program_add_readout(p, PROTO_READOUT_HIDDEN, row, 0, NULL, 0, NULL, NULL);
  }
  uint32_t img[PP_OMNIJEV_MAX_FRAMES];
  int rc = 0;
  for (size_t k = 0; !rc && k < r->n_images; k++)
    rc = proto_program_take_image(p, &r->images[k].pixel_values, r->images[k].n_patches,
                                 r->images[k].grid_thw, &img[k]);
  if (!rc)
    rc = proto_program_add_prefix(p, r->prefix_ids, r->prefix_pos, (uint32_t)r->n_prefix, -1,
                                  img, (uint32_t)r->n_images, &pre);
  int32_t *pos = NULL;
  size_t cap = 0;
  for (size_t i = 0; !rc && i < r->n_questions; i++) {
    const struct pp_omnijev_question *q = &r->questions[i];
    if (!q->n_options)
      continue; /* an empty choice: its marker-less row only counts in usage */
    uint32_t first = 0;
    for (size_t k = 0; !rc && k < q->n_rows; k++) {
      size_t row = q->first_row + k, n = r->row_off[row + 1] - r->row_off[row];
      if (3 * n > cap) {
        int32_t *np = realloc(pos, 3 * n * sizeof *pos);
        if (!np) {
          rc = -ENOMEM;
          break;
        }
        pos = np, cap = 3 * n;
      }
      for (size_t t = 0; t < n; t++)
        pos[t] = pos[n + t] = pos[2 * n + t] = r->p0 + (int32_t)t;
      uint32_t idx;
      rc = proto_program_add_row(p, r->row_ids + r->row_off[row], pos, (uint32_t)n, (int32_t)pre,
                                 &idx);
      if (k == 0)
        first = idx;
    }
    int32_t args[2] = {(int32_t)q->type, (int32_t)q->n_options};
    uint32_t ro;
    if (!rc)
      rc = proto_program_add_readout(p, PROTO_READOUT_HEAD, first, (int32_t)q->open_offset, args,
                                     2, HEADS[0], &ro);
    if (!rc)
      readout_of[i] = (int32_t)ro;
  }
  free(pos);
  return rc;
}

static int compile(const void *model, json_object *request, const struct pp_request_info *info,
                   struct proto_program *ret_program, void **ret_ctx, struct cm_diag *diag) {
  (void)info;
  const struct pp_omnijev_model *m = model;
  struct ctx *c = calloc(1, sizeof *c);
  if (!c)
    return -ENOMEM;
  int rc = pp_omnijev_compile(m, request, &c->req, diag);
  if (!rc && !(c->readout_of = malloc(c->req->n_questions * sizeof *c->readout_of)))
    rc = -ENOMEM;
  if (!rc && (rc = build_program(c->req, ret_program, c->readout_of)))
    rc = cm_diag_set(diag, rc, "program: %s", cm_strerror(rc));
  if (rc) {
    ctx_free(c);
    return rc;
  }
  *ret_ctx = c;
  return 0;
}

static int finish(const void *model, void *ctx, const struct proto_result *result,
                  const struct pp_request_info *info, char **ret_json, size_t *ret_len,
                  struct pp_finish_stats *ret_stats, struct cm_diag *diag) {
  const struct ctx *c = ctx;
  const struct pp_omnijev_request *r = c->req;
  const float **mu = calloc(r->n_questions, sizeof *mu);
  if (!mu)
    return -ENOMEM;
  int rc = 0;
  for (size_t i = 0; i < r->n_questions && !rc; i++) {
    const struct pp_omnijev_question *q = &r->questions[i];
    int32_t ro = c->readout_of[i];
    if (ro < 0)
      continue;
    size_t want = q->n_options * (q->type == PP_OMNIJEV_SCORE ? 1 : 1 + PP_OMNIJEV_FEATS);
    if ((uint32_t)ro >= result->n_outputs || result->n_floats[ro] != want)
      rc = cm_diag_set(diag, -CM_EINTERNAL, "question %s: head output missing or of the wrong "
                       "width (want %zu)", q->id, want);
    else
      mu[i] = result->outputs[ro];
  }
  /* latency: compile plus the executor's work up to the heads (spec §9.8) */
  double seconds = (double)(info->compile_end_us - info->received_us) / 1e6 +
                   (double)(result->timings.total_us) / 1e6;
  if (!rc)
    rc = pp_omnijev_finish(model, r, mu, seconds, ret_json, ret_len, diag);
  free(mu);
  if (!rc && ret_stats) {
    ret_stats->tokens = r->input_tokens;
    ret_stats->decisions = r->n_questions;
  }
  return rc;
}

const struct pp_family pp_family_omnijev = {
    .name = "omnijev",
    .question_types = QUESTION_TYPES,
    .heads = HEADS,
    .load = load,
    .describe = describe,
    .compile = compile,
    .finish = finish,
    .ctx_free = ctx_free,
    .free = state_free,
};
