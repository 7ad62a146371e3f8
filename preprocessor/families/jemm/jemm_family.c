/* The JEMM family behind the preprocessor's family interface (pp_family.h): loads the manifest
 * constants and the tokenizer, compiles a request into one program (images, a shared prefix, one
 * row per question with a LABEL_LOGITS readout of its candidates' label ids at the last token)
 * and turns the label logits into the reference's response. The tokenizer and the /v1/models
 * entry's head are the core's (pp_model_load). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jemm.h"
#include "pp_family.h"
#include "proto.h"

static const char *const QUESTION_TYPES[] = {"choice", "score", "noul", NULL};
static const char *const HEADS[] = {NULL}; /* LABEL_LOGITS readouts only: no executor head */

struct state {
  struct pp_jemm_model model; /* constants, label ids, chat wrapper */
  char revision[16];          /* x-model-revision: a SHA-256 prefix of the checkpoint file */
};

static void state_free(void *p) {
  struct state *s = p;
  if (!s)
    return;
  pp_jemm_model_fini(&s->model);
  free(s);
}

static int load(const struct cm_model_dir *dir, const struct pp_tok *tok, void **ret_model,
                struct pp_model_desc *ret_desc, struct cm_diag *diag) {
  struct state *s = calloc(1, sizeof *s);
  if (!s)
    return -ENOMEM;
  int rc = pp_jemm_model_init(dir->manifest, tok, &s->model, diag);
  if (rc) {
    state_free(s);
    return rc;
  }
  /* x-model-revision: the kept adapter's SHA-256 (the JEMM checkpoint), else the weights' */
  json_object *files = NULL, *f = NULL, *h = NULL;
  if (json_object_object_get_ex(dir->manifest, "files", &files) &&
      (json_object_object_get_ex(files, "adapter.safetensors", &f) ||
       json_object_object_get_ex(files, "weights.safetensors", &f)) &&
      json_object_object_get_ex(f, "sha256", &h) && json_object_is_type(h, json_type_string))
    snprintf(s->revision, sizeof s->revision, "%.12s", json_object_get_string(h));
  else
    snprintf(s->revision, sizeof s->revision, "unknown");
  ret_desc->id = s->model.model_id;
  ret_desc->aliases = (const char *const *)s->model.aliases;
  ret_desc->n_aliases = s->model.n_aliases;
  ret_desc->revision = s->revision;
  *ret_model = s;
  return 0;
}

static void describe(const void *model, json_object *d) {
  (void)model;
  json_object *lim = json_object_new_object(), *img = json_object_new_object(),
              *tok = json_object_new_object();
  json_object_object_add(lim, "questions", pp_describe_range(1, PP_JEMM_MAX_QUESTIONS));
  json_object_object_add(lim, "choice_options", pp_describe_range(2, PP_JEMM_N_LABELS));
  json_object_object_add(lim, "score_levels", pp_describe_range(2, PP_JEMM_N_LABELS));
  json_object_object_add(d, "candidate_limits", lim);
  json_object_object_add(img, "images", pp_describe_range(0, PP_JEMM_MAX_IMAGES));
  json_object_object_add(img, "max_pixels", json_object_new_int(PP_JEMM_MAX_IMAGE_PIXELS));
  json_object_object_add(img, "formats", json_object_new_string("PNG, JPEG, WebP"));
  json_object_object_add(d, "image_limits", img);
  json_object_object_add(tok, "text", json_object_new_int(PP_JEMM_MAX_TEXT_TOKENS));
  json_object_object_add(tok, "with_images", json_object_new_int(PP_JEMM_MAX_MM_TOKENS));
  json_object_object_add(d, "max_tokens", tok);
}

static void ctx_free(void *p) {
  pp_jemm_request_free(p);
}

static int compile(const void *model, json_object *request, const struct pp_request_info *info,
                   struct proto_program *ret_program, void **ret_ctx, struct cm_diag *diag) {
  (void)info;
  const struct state *s = model;
  struct pp_jemm_request *r = NULL;
  int rc = pp_jemm_compile(&s->model, request, &r, diag);
  if (rc)
    return rc;
  if ((rc = pp_jemm_program(&s->model, r, ret_program))) {
    pp_jemm_request_free(r);
    return cm_diag_set(diag, rc, "program: %s", cm_strerror(rc));
  }
  *ret_ctx = r;
  return 0;
}

static int finish(const void *model, void *ctx, const struct proto_result *result,
                  const struct pp_request_info *info, char **ret_json, size_t *ret_len,
                  struct pp_finish_stats *ret_stats, struct cm_diag *diag) {
  const struct state *s = model;
  const struct pp_jemm_request *r = ctx;
  if (result->n_outputs != r->n_questions)
    return cm_diag_set(diag, -CM_EINTERNAL, "result has %u outputs for %zu questions",
                       result->n_outputs, r->n_questions);
  for (size_t q = 0; q < r->n_questions; q++)
    if (result->n_floats[q] != r->questions[q].n_candidates)
      return cm_diag_set(diag, -CM_EINTERNAL, "output %zu has %u logits for %zu candidates", q,
                         result->n_floats[q], r->questions[q].n_candidates);
  double latency_ms = (double)(proto_now_us() - info->received_us) / 1000.0;
  int rc = pp_jemm_finish(&s->model, r, (const float *const *)result->outputs, latency_ms, ret_json,
                          ret_len, diag);
  if (!rc && ret_stats) {
    ret_stats->tokens = r->input_tokens;
    ret_stats->decisions = r->n_questions;
  }
  return rc;
}

const struct pp_family pp_family_jemm = {
    .name = "jemm",
    .question_types = QUESTION_TYPES,
    .heads = HEADS,
    .load = load,
    .describe = describe,
    .compile = compile,
    .finish = finish,
    .ctx_free = ctx_free,
    .free = state_free,
};
