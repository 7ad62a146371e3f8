/* JEMM compile and finish (see jemm.h): the reference's checks in its order, one templated prompt
 * per question tokenized whole (so special-token text becomes special ids, as the Hugging Face
 * tokenizer does), the shared prefix planned from the prompts' common ids, and the answers
 * written with Python's separators and float repr. Text rules live in jemm_text.c. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jemm.h"

static int get_key(json_object *o, const char *key, json_type t, const char *where,
                   json_object **ret, struct cm_diag *diag) {
  *ret = NULL; /* on every path: the compiler cannot see that cm_diag_set returns non-zero */
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, key, &v))
    return cm_diag_set(diag, -CM_EMISSING, "manifest: key '%s%s' is missing", where, key);
  if (!json_object_is_type(v, t) &&
      !(t == json_type_double && json_object_is_type(v, json_type_int)))
    return cm_diag_set(diag, -CM_EFORMAT, "manifest: key '%s%s' has the wrong type", where, key);
  *ret = v;
  return 0;
}

static int dup_str(json_object *v, char **ret) {
  *ret = strdup(json_object_get_string(v));
  return *ret ? 0 : -ENOMEM;
}

void pp_jemm_model_fini(struct pp_jemm_model *m) {
  if (!m)
    return;
  free(m->model_id);
  for (size_t i = 0; i < m->n_aliases; i++)
    free(m->aliases[i]);
  free(m->chat_prefix);
  free(m->chat_suffix);
  memset(m, 0, sizeof *m);
}

static int positive(json_object *o, const char *key, double *ret, struct cm_diag *diag) {
  json_object *v;
  int rc = get_key(o, key, json_type_double, "jemm.", &v, diag);
  if (rc)
    return rc;
  *ret = json_object_get_double(v);
  if (!(isfinite(*ret) && *ret > 0))
    return cm_diag_set(diag, -CM_EFORMAT, "manifest: key 'jemm.%s' must be finite and positive",
                       key);
  return 0;
}

static int32_t special_id(const struct pp_tok *tok, const char *text) {
  int32_t id = pp_tok_token_to_id(tok, text, strlen(text));
  return id >= 0 && pp_tok_is_special(tok, id) ? id : -1;
}

int pp_jemm_model_init(json_object *manifest, const struct pp_tok *tok,
                       struct pp_jemm_model *ret_model, struct cm_diag *diag) {
  struct pp_jemm_model m = {.tok = tok};
  json_object *jm, *chat, *v, *labels = NULL;
  int rc = get_key(manifest, "jemm", json_type_object, "", &jm, diag);
  if (!rc)
    rc = get_key(manifest, "chat", json_type_object, "", &chat, diag);
  if (!rc)
    rc = get_key(jm, "model_id", json_type_string, "jemm.", &v, diag);
  if (!rc)
    rc = dup_str(v, &m.model_id);
  if (!rc)
    rc = positive(jm, "temperature", &m.temperature, diag);
  if (!rc)
    rc = positive(jm, "mm_temperature", &m.mm_temperature, diag);
  if (!rc)
    rc = positive(jm, "threshold", &m.threshold, diag);
  if (!rc)
    rc = get_key(jm, "aliases", json_type_array, "jemm.", &v, diag);
  if (!rc && json_object_array_length(v) > PP_JEMM_MAX_ALIASES)
    rc = cm_diag_set(diag, -CM_EFORMAT, "manifest: key 'jemm.aliases' has more than %d names",
                     PP_JEMM_MAX_ALIASES);
  for (size_t i = 0; !rc && i < json_object_array_length(v); i++) {
    json_object *a = json_object_array_get_idx(v, i);
    if (!json_object_is_type(a, json_type_string))
      rc = cm_diag_set(diag, -CM_EFORMAT, "manifest: key 'jemm.aliases[%zu]' must be a string", i);
    else if (!(rc = dup_str(a, &m.aliases[m.n_aliases])))
      m.n_aliases++;
  }
  if (!rc)
    rc = get_key(jm, "label_token_ids", json_type_array, "jemm.", &labels, diag);
  if (!rc && json_object_array_length(labels) != PP_JEMM_N_LABELS)
    rc = cm_diag_set(diag, -CM_EFORMAT, "manifest: 'jemm.label_token_ids' must have %d ids",
                     PP_JEMM_N_LABELS);
  /* each label's first token id, as the reference takes it, must be the exported one */
  for (int i = 0; !rc && i < PP_JEMM_N_LABELS; i++) {
    struct pp_tok_ids ids = {0};
    rc = pp_tok_encode(tok, &PP_JEMM_LABELS[i], 1, &ids, diag);
    int64_t want = json_object_get_int64(json_object_array_get_idx(labels, (size_t)i));
    if (!rc && (ids.n < 1 || ids.ids[0] != want))
      rc = cm_diag_set(diag, -CM_EFORMAT,
                       "manifest: label '%c' has id %lld, the tokenizer "
                       "gives %d",
                       PP_JEMM_LABELS[i], (long long)want, ids.n ? ids.ids[0] : -1);
    if (!rc)
      m.label_ids[i] = ids.ids[0];
    for (int j = 0; !rc && j < i; j++)
      if (m.label_ids[j] == m.label_ids[i])
        rc = cm_diag_set(diag, -CM_EFORMAT, "manifest: labels '%c' and '%c' share id %d",
                         PP_JEMM_LABELS[j], PP_JEMM_LABELS[i], m.label_ids[i]);
    pp_tok_ids_fini(&ids);
  }
  if (!rc) {
    m.image_token_id = special_id(tok, "<|image_pad|>");
    m.vision_start_id = special_id(tok, "<|vision_start|>");
    m.vision_end_id = special_id(tok, "<|vision_end|>");
    m.video_pad_id = special_id(tok, "<|video_pad|>");
    m.vision_pad_id = special_id(tok, "<|vision_pad|>");
    if (m.image_token_id < 0 || m.vision_start_id < 0 || m.vision_end_id < 0)
      rc = cm_diag_set(diag, -CM_EFORMAT,
                       "tokenizer: <|image_pad|>, <|vision_start|> or "
                       "<|vision_end|> is not a special token");
  }
  if (!rc)
    rc = get_key(chat, "prefix", json_type_string, "chat.", &v, diag);
  if (!rc)
    rc = dup_str(v, &m.chat_prefix);
  if (!rc)
    rc = get_key(chat, "suffix", json_type_string, "chat.", &v, diag);
  if (!rc)
    rc = dup_str(v, &m.chat_suffix);
  if (!rc && !strstr(m.chat_prefix, PP_JEMM_SYSTEM))
    rc = cm_diag_set(diag, -CM_EFORMAT, "manifest: 'chat.prefix' lacks the JEMM system message");
  if (!rc) {
    size_t n = strlen(m.chat_suffix), k = strlen("</think>\n\n");
    if (n < k || strcmp(m.chat_suffix + n - k, "</think>\n\n") != 0)
      rc = cm_diag_set(diag, -CM_EFORMAT, "manifest: 'chat.suffix' must end in \"</think>\\n\\n\"");
  }
  if (rc) {
    pp_jemm_model_fini(&m);
    return rc;
  }
  pp_image_limits_default(&m.image_limits);
  m.image_limits.max_src_pixels = PP_JEMM_MAX_IMAGE_PIXELS;
  *ret_model = m;
  return 0;
}

/* ---- compile ----------------------------------------------------------------------------------
 */

void pp_jemm_request_free(struct pp_jemm_request *r) {
  if (!r)
    return;
  for (size_t i = 0; i < r->n_questions; i++) {
    free(r->questions[i].cand_ids);
    free(r->questions[i].user);
    free(r->questions[i].ids);
  }
  free(r->questions);
  for (size_t i = 0; i < r->n_images; i++)
    pp_image_fini(&r->images[i]);
  free(r->images);
  free(r->prefix_pos);
  json_object_put(r->body);
  free(r);
}

/* Python str(description) per systemone._description; *ret_empty: the text is "". */
static int description(struct pp_buf *b, json_object *v, struct cm_diag *diag) {
  if (json_object_is_type(v, json_type_object)) {
    json_object *d = NULL;
    if (!json_object_object_get_ex(v, "description", &d))
      return 0;
    return pp_jemm_py_str(b, d, diag);
  }
  if (!v) /* JSON null (json-c's NULL) */
    return 0;
  return pp_jemm_py_str(b, v, diag);
}

/* One candidate: its description text and whether its action has "tool_name". */
struct cand {
  const char *id;  /* answer key */
  struct pp_buf d; /* description, before flattening */
  bool tool;       /* action object contains "tool_name" */
};

static const char *const score_ids[PP_JEMM_N_LABELS] = {
    "0",  "1",  "2",  "3",  "4",  "5",  "6",  "7",  "8",  "9",  "10", "11", "12", "13", "14", "15",
    "16", "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31"};

/* An empty description becomes `fallback` (the reference's `or` test, before flattening). */
static int or_fallback(struct cand *c, const char *fallback) {
  return c->d.n ? 0 : pp_buf_puts(&c->d, fallback);
}

/* systemone.candidates_for, then contract._check_candidates (count). */
static int candidates(const char *qid, json_object *q, enum pp_jemm_type *ret_type, struct cand *c,
                      size_t *ret_n, struct cm_diag *diag) {
  json_object *type = NULL, *crit = NULL;
  bool has_type = json_object_object_get_ex(q, "type", &type);
  json_object_object_get_ex(q, "criteria", &crit);
  const char *t =
      has_type && json_object_is_type(type, json_type_string) ? json_object_get_string(type) : NULL;
  if (has_type && !(t && (!strcmp(t, "choice") || !strcmp(t, "score") || !strcmp(t, "noul")))) {
    struct pp_buf r = {0};
    /* repr(kind): a string is quoted, anything else as Python shows it */
    json_object *wrap = json_object_new_array();
    int rc = wrap ? 0 : -ENOMEM;
    if (!rc) {
      json_object_array_add(wrap, json_object_get(type));
      rc = pp_jemm_py_str(&r, wrap, diag);
      json_object_put(wrap);
    }
    if (!rc)
      rc = cm_diag_set(diag, -CM_EREQUEST, "questions.%s: unsupported question type: %.*s", qid,
                       (int)(r.n - 2), r.bytes + 1);
    pp_buf_fini(&r);
    return rc;
  }
  int rc = 0;
  size_t n = 0;
  if (t && !strcmp(t, "noul")) {
    *ret_type = PP_JEMM_NOUL;
    json_object *yes = NULL, *no = NULL;
    if (json_object_is_type(crit, json_type_object)) {
      json_object_object_get_ex(crit, "true", &yes);
      json_object_object_get_ex(crit, "false", &no);
    }
    c[0].id = "yes", c[1].id = "no";
    rc = description(&c[0].d, yes, diag);
    if (!rc)
      rc = or_fallback(&c[0], "yes");
    if (!rc)
      rc = description(&c[1].d, no, diag);
    if (!rc)
      rc = or_fallback(&c[1], "no");
    n = 2;
  } else if (t && !strcmp(t, "score")) {
    *ret_type = PP_JEMM_SCORE;
    if (!json_object_is_type(crit, json_type_array) || json_object_array_length(crit) < 2)
      return cm_diag_set(diag, -CM_EREQUEST,
                         "questions.%s.criteria: score question needs a list "
                         "of at least two levels",
                         qid);
    n = json_object_array_length(crit);
    if (n > PP_JEMM_N_LABELS)
      return cm_diag_set(diag, -CM_EREQUEST,
                         "questions.%s.criteria: UNSUPPORTED: candidate "
                         "count",
                         qid);
    for (size_t i = 0; i < n && !rc; i++) {
      char fb[16];
      snprintf(fb, sizeof fb, "level %zu", i);
      c[i].id = score_ids[i];
      rc = description(&c[i].d, json_object_array_get_idx(crit, i), diag);
      if (!rc)
        rc = or_fallback(&c[i], fb);
    }
  } else {
    *ret_type = PP_JEMM_CHOICE;
    if (!json_object_is_type(crit, json_type_object) || json_object_object_length(crit) < 2)
      return cm_diag_set(diag, -CM_EREQUEST,
                         "questions.%s.criteria: choice question needs a "
                         "criteria map with at least two options",
                         qid);
    if (json_object_object_length(crit) > PP_JEMM_N_LABELS)
      return cm_diag_set(diag, -CM_EREQUEST,
                         "questions.%s.criteria: UNSUPPORTED: candidate "
                         "count",
                         qid);
    json_object_object_foreach(crit, key, val) {
      if (rc)
        break;
      json_object *act = NULL;
      c[n].id = key;
      c[n].tool = json_object_is_type(val, json_type_object) &&
                  json_object_object_get_ex(val, "action", &act) &&
                  json_object_is_type(act, json_type_object) &&
                  json_object_object_get_ex(act, "tool_name", NULL);
      rc = description(&c[n].d, val, diag);
      n++;
    }
  }
  if (rc && diag && diag->msg && !strstr(diag->msg, "questions.")) {
    /* name the question in messages that came from the text rules */
    char *m = diag->msg;
    diag->msg = NULL;
    diag->code = 0;
    rc = cm_diag_set(diag, rc, "questions.%s: %s", qid, m);
    free(m);
  }
  *ret_n = n;
  return rc;
}

/* The user message of §3.9 for one question. */
static int user_text(struct pp_buf *u, const char *state, size_t state_len, json_object *q,
                     const struct cand *c, size_t n, const char *qid, struct cm_diag *diag) {
  int rc = pp_buf_puts(u, "State:\n");
  if (!rc)
    rc = pp_jemm_strip(u, state, state_len);
  if (!rc)
    rc = pp_buf_puts(u, "\n\nQuestion: ");
  json_object *ins = NULL;
  if (!rc && json_object_object_get_ex(q, "instructions", &ins)) {
    struct pp_buf t = {0};
    rc = pp_jemm_py_str(&t, ins, diag);
    if (!rc)
      rc = pp_jemm_flat(u, t.bytes ? t.bytes : "", t.n);
    pp_buf_fini(&t);
  }
  if (!rc)
    rc = pp_buf_puts(u, "\n\nCandidates:\n");
  for (size_t i = 0; i < n && !rc; i++) {
    char lab[4] = {PP_JEMM_LABELS[i], ')', ' ', 0};
    if (i)
      rc = pp_buf_puts(u, "\n");
    if (!rc)
      rc = pp_buf_puts(u, lab);
    const char *d = c[i].d.bytes ? c[i].d.bytes : "";
    if (!rc)
      rc = c[i].tool ? pp_jemm_tool_text(u, d, c[i].d.n, diag) : pp_jemm_flat(u, d, c[i].d.n);
  }
  if (!rc)
    rc = pp_buf_puts(u, "\n\nAnswer with exactly one candidate label.");
  if (rc == -CM_EREQUEST && diag && diag->msg && !strstr(diag->msg, "questions.")) {
    char *m = diag->msg;
    diag->msg = NULL;
    diag->code = 0;
    rc = cm_diag_set(diag, rc, "questions.%s.criteria: %s", qid, m);
    free(m);
  }
  return rc;
}

/* Decodes and prepares every image (§5.1-5.3), before anything else looks at the request. */
static int compile_images(const struct pp_jemm_model *m, json_object *body,
                          struct pp_jemm_request *r, struct cm_diag *diag) {
  json_object *imgs = NULL;
  if (!json_object_object_get_ex(body, "images", &imgs) || !imgs)
    return 0;
  if (!json_object_is_type(imgs, json_type_array) ||
      json_object_array_length(imgs) > PP_JEMM_MAX_IMAGES)
    return cm_diag_set(diag, -CM_EREQUEST,
                       "images: images must be a list of at most %d base64 "
                       "strings",
                       PP_JEMM_MAX_IMAGES);
  size_t n = json_object_array_length(imgs);
  if (!n)
    return 0;
  r->images = calloc(n, sizeof *r->images);
  if (!r->images)
    return -ENOMEM;
  int rc = pp_image_global_init();
  for (size_t i = 0; i < n && !rc; i++) {
    json_object *it = json_object_array_get_idx(imgs, i);
    if (!json_object_is_type(it, json_type_string))
      return cm_diag_set(diag, -CM_EREQUEST, "images[%zu]: image %zu is not a base64 string", i, i);
    rc = pp_image_prepare_data_url(json_object_get_string(it),
                                   (size_t)json_object_get_string_len(it), (uint32_t)i,
                                   &m->image_limits, &r->images[i], diag);
    if (!rc)
      r->n_images++;
    else if (diag && diag->msg) { /* name the field, as every other refusal does */
      char *detail = diag->msg;
      int code = diag->code;
      *diag = (struct cm_diag){0};
      cm_diag_set(diag, code, "images[%zu]: %s", i, detail);
      free(detail);
    }
  }
  return rc;
}

/* Templated text of one question: prefix + image runs + user + suffix. */
static int prompt_text(const struct pp_jemm_model *m, const struct pp_jemm_request *r,
                       const struct pp_buf *u, struct pp_buf *p) {
  int rc = pp_buf_puts(p, m->chat_prefix);
  for (size_t i = 0; i < r->n_images && !rc; i++) {
    rc = pp_buf_puts(p, "<|vision_start|>");
    for (uint32_t k = 0; k < r->images[i].n_tokens && !rc; k++)
      rc = pp_buf_puts(p, "<|image_pad|>");
    if (!rc)
      rc = pp_buf_puts(p, "<|vision_end|>");
  }
  if (!rc)
    rc = pp_buf_put(p, u->bytes, u->n);
  if (!rc)
    rc = pp_buf_puts(p, m->chat_suffix);
  return rc;
}

static int compile_question(const struct pp_jemm_model *m, struct pp_jemm_request *r,
                            const char *qid, json_object *q, const char *state, size_t state_len,
                            size_t *prompt_bytes, struct cm_diag *diag) {
  struct pp_jemm_question *out = &r->questions[r->n_questions];
  struct cand c[PP_JEMM_N_LABELS] = {0};
  struct pp_buf u = {0}, p = {0};
  struct pp_tok_ids ids = {0};
  size_t n = 0;
  out->id = qid;
  int rc = candidates(qid, q, &out->type, c, &n, diag);
  if (!rc)
    rc = user_text(&u, state, state_len, q, c, n, qid, diag);
  if (!rc)
    rc = prompt_text(m, r, &u, &p);
  if (!rc && (*prompt_bytes += p.n) > PP_JEMM_MAX_PROMPT_BYTES)
    rc = cm_diag_set(diag, -CM_ELIMIT, "questions: the rendered prompts exceed %zu bytes",
                     PP_JEMM_MAX_PROMPT_BYTES);
  if (!rc)
    rc = pp_tok_encode(m->tok, p.bytes, p.n, &ids, diag);
  if (!rc && r->n_images) {
    /* every vision marker of the prompt must be the images' own: marker text in the request
     * (<|image_pad|>, <|vision_start|>, <|vision_end|>, <|video_pad|>, <|vision_pad|>) would
     * misplace the image features (spec §11 item 10; the port refuses it) */
    size_t pads = 0, want = 0, starts = 0, ends = 0, others = 0;
    for (size_t i = 0; i < ids.n; i++) {
      int32_t t = ids.ids[i];
      pads += t == m->image_token_id;
      starts += t == m->vision_start_id;
      ends += t == m->vision_end_id;
      others += (t == m->video_pad_id || t == m->vision_pad_id) && t >= 0;
    }
    for (size_t i = 0; i < r->n_images; i++)
      want += r->images[i].n_tokens;
    if (pads != want || starts != r->n_images || ends != r->n_images || others)
      rc = cm_diag_set(diag, -CM_EREQUEST,
                       "questions.%s: unexpected image placeholders (image "
                       "marker text in a request with images)",
                       qid);
  }
  size_t budget = r->n_images ? PP_JEMM_MAX_MM_TOKENS : PP_JEMM_MAX_TEXT_TOKENS;
  if (!rc && ids.n > budget)
    rc = cm_diag_set(diag, -CM_EREQUEST,
                     "questions.%s: UNSUPPORTED: input exceeds token budget "
                     "(%zu tokens, at most %zu)",
                     qid, ids.n, budget);
  if (!rc && !(out->cand_ids = malloc(n * sizeof *out->cand_ids)))
    rc = -ENOMEM;
  if (!rc) {
    for (size_t i = 0; i < n; i++)
      out->cand_ids[i] = c[i].id;
    out->n_candidates = n;
    out->user = u.bytes, out->user_len = u.n;
    u.bytes = NULL;
    out->ids = ids.ids, out->n_ids = ids.n;
    ids.ids = NULL;
    r->input_tokens += out->n_ids;
    r->n_questions++;
  }
  for (size_t i = 0; i < PP_JEMM_N_LABELS; i++)
    pp_buf_fini(&c[i].d);
  pp_buf_fini(&u);
  pp_buf_fini(&p);
  pp_tok_ids_fini(&ids);
  return rc;
}

/* Shared prefix: the common ids of every prompt, leaving each question ≥ 1 token of its own;
 * then its 3-axis positions (the images sit inside it: they come before any question text). */
static int plan_prefix(const struct pp_jemm_model *m, struct pp_jemm_request *r,
                       struct cm_diag *diag) {
  size_t k = r->questions[0].n_ids - 1;
  for (size_t q = 1; q < r->n_questions; q++) {
    const struct pp_jemm_question *x = &r->questions[q];
    if (x->n_ids - 1 < k)
      k = x->n_ids - 1;
    size_t j = 0;
    while (j < k && x->ids[j] == r->questions[0].ids[j])
      j++;
    k = j;
  }
  for (size_t q = 0; q < r->n_questions && r->n_images; q++)
    for (size_t t = k; t < r->questions[q].n_ids; t++)
      if (r->questions[q].ids[t] == m->image_token_id)
        return cm_diag_set(diag, -CM_EINTERNAL, "questions: image slots after the shared prefix");
  if (k == 0)
    return cm_diag_set(diag, -CM_EINTERNAL, "questions: prompts share no prefix");
  r->prefix_len = k;
  r->prefix_pos = malloc(3 * k * sizeof *r->prefix_pos);
  if (!r->prefix_pos)
    return -ENOMEM;
  struct pp_grid g[PP_JEMM_MAX_IMAGES];
  for (size_t i = 0; i < r->n_images; i++)
    g[i] = (struct pp_grid){r->images[i].grid_thw[0], r->images[i].grid_thw[1],
                            r->images[i].grid_thw[2]};
  if (!r->n_images) {
    for (size_t a = 0; a < 3; a++)
      for (size_t t = 0; t < k; t++)
        r->prefix_pos[a * k + t] = (int32_t)t;
    r->next_pos = (int32_t)k;
    return 0;
  }
  return pp_mrope_positions(r->questions[0].ids, k, m->image_token_id, g, r->n_images, 0,
                            r->prefix_pos, &r->next_pos, diag);
}

int pp_jemm_compile(const struct pp_jemm_model *m, json_object *body,
                    struct pp_jemm_request **ret_req, struct cm_diag *diag) {
  if (!json_object_is_type(body, json_type_object))
    return cm_diag_set(diag, -CM_EREQUEST, "request body must be an object");
  struct pp_jemm_request *r = calloc(1, sizeof *r);
  if (!r)
    return -ENOMEM;
  r->body = json_object_get(body);
  struct pp_buf state = {0};
  size_t prompt_bytes = 0;
  json_object *qs = NULL, *st = NULL;
  int rc = compile_images(m, body, r, diag);
  if (!rc && (!json_object_object_get_ex(body, "questions", &qs) ||
              !json_object_is_type(qs, json_type_object) || !json_object_object_length(qs)))
    rc = cm_diag_set(diag, -CM_EREQUEST, "questions: no questions");
  if (!rc && json_object_object_length(qs) > PP_JEMM_MAX_QUESTIONS)
    rc = cm_diag_set(diag, -CM_ELIMIT, "questions: %d questions; 1 to %d are served",
                     json_object_object_length(qs), PP_JEMM_MAX_QUESTIONS);
  if (!rc && json_object_object_get_ex(body, "state", &st)) {
    if (json_object_is_type(st, json_type_string))
      rc = pp_buf_put(&state, json_object_get_string(st), (size_t)json_object_get_string_len(st));
    else if ((rc = pp_jemm_compact_json(&state, st, diag)) == -CM_EREQUEST)
      rc = cm_diag_set(diag, rc, "state: value refused");
  }
  if (!rc && !(r->questions = calloc((size_t)json_object_object_length(qs), sizeof *r->questions)))
    rc = -ENOMEM;
  if (!rc) {
    json_object_object_foreach(qs, qid, q) {
      if (!json_object_is_type(q, json_type_object)) {
        struct pp_buf k = {0};
        json_object *s = json_object_new_array();
        rc = s ? 0 : -ENOMEM;
        if (!rc) {
          json_object_array_add(s, json_object_new_string(qid));
          rc = pp_jemm_py_str(&k, s, diag);
          json_object_put(s);
        }
        if (!rc)
          rc = cm_diag_set(diag, -CM_EREQUEST, "questions.%s: question %.*s is not an object", qid,
                           (int)(k.n - 2), k.bytes + 1);
        pp_buf_fini(&k);
        break;
      }
      rc = compile_question(m, r, qid, q, state.bytes ? state.bytes : "", state.n, &prompt_bytes,
                            diag);
      if (rc)
        break;
    }
  }
  if (!rc)
    rc = plan_prefix(m, r, diag);
  pp_buf_fini(&state);
  if (rc) {
    pp_jemm_request_free(r);
    return rc;
  }
  *ret_req = r;
  return 0;
}

int pp_jemm_program(const struct pp_jemm_model *m, const struct pp_jemm_request *r,
                    struct proto_program *p) {
  uint32_t img[PP_JEMM_MAX_IMAGES], prefix, row;
  int rc = 0;
  for (size_t i = 0; i < r->n_images && !rc; i++)
    rc = proto_program_add_image(p, r->images[i].pixel_values, r->images[i].n_patches,
                                 r->images[i].grid_thw, &img[i]);
  if (!rc)
    rc = proto_program_add_prefix(p, r->questions[0].ids, r->prefix_pos, (uint32_t)r->prefix_len,
                                  -1, img, (uint32_t)r->n_images, &prefix);
  int32_t *pos = NULL;
  for (size_t q = 0; q < r->n_questions && !rc; q++) {
    const struct pp_jemm_question *x = &r->questions[q];
    size_t n = x->n_ids - r->prefix_len;
    free(pos);
    if (!(pos = malloc(3 * n * sizeof *pos))) {
      rc = -ENOMEM;
      break;
    }
    for (size_t a = 0; a < 3; a++)
      for (size_t t = 0; t < n; t++)
        pos[a * n + t] = r->next_pos + (int32_t)t;
    rc = proto_program_add_row(p, x->ids + r->prefix_len, pos, (uint32_t)n, (int32_t)prefix, &row);
    if (!rc)
      rc = proto_program_add_readout(p, PROTO_READOUT_LABEL_LOGITS, row, -1, m->label_ids,
                                     (uint32_t)x->n_candidates, NULL, NULL);
  }
  free(pos);
  return rc;
}

/* ---- finish -----------------------------------------------------------------------------------
 */

/* numpy npy_logaddexp. */
static double logaddexp(double x, double y) {
  if (x == y)
    return x + M_LN2;
  double d = x - y;
  if (d > 0)
    return x + log1p(exp(-d));
  if (d <= 0)
    return y + log1p(exp(d));
  return d;
}

void pp_jemm_softmax(const double *s, size_t n, double temperature, double *ret_p) {
  double *z = ret_p; /* z in place, then p */
  for (size_t i = 0; i < n; i++)
    z[i] = s[i] / temperature;
  double l = z[0];
  for (size_t i = 1; i < n; i++)
    l = logaddexp(l, z[i]);
  for (size_t i = 0; i < n; i++)
    ret_p[i] = exp(z[i] - l);
}

static int put_float(struct pp_buf *b, double x) {
  char num[PP_PYJSON_FLOAT_MAX];
  size_t n = pp_pyjson_float(x, num);
  return pp_buf_put(b, num, n);
}

/* ", " (unless first) + "key": */
static int put_key(struct pp_buf *b, const char *key, bool first) {
  int rc = first ? 0 : pp_buf_puts(b, ", ");
  if (!rc)
    rc = pp_pyjson_string(b, key, strlen(key));
  return rc ? rc : pp_buf_puts(b, ": ");
}

static int put_answer(struct pp_buf *b, const struct pp_jemm_question *q, const double *p) {
  size_t best = 0;
  for (size_t i = 1; i < q->n_candidates; i++)
    if (p[i] > p[best])
      best = i;
  static const char *const names[] = {"choice", "score", "noul"};
  int rc = pp_buf_puts(b, "{");
  if (!rc)
    rc = put_key(b, "type", true);
  if (!rc)
    rc = pp_pyjson_string(b, names[q->type], strlen(names[q->type]));
  if (!rc && q->type == PP_JEMM_CHOICE) {
    rc = put_key(b, "choice", false);
    if (!rc)
      rc = pp_pyjson_string(b, q->cand_ids[best], strlen(q->cand_ids[best]));
  } else if (!rc && q->type == PP_JEMM_NOUL) {
    rc = put_key(b, "noul", false);
    if (!rc)
      rc = put_float(b, p[0]);
  }
  if (!rc)
    rc = put_key(b, "probabilities", false);
  if (!rc)
    rc = pp_buf_puts(b, "{");
  for (size_t i = 0; i < q->n_candidates && !rc; i++) {
    rc = put_key(b, q->cand_ids[i], i == 0);
    if (!rc)
      rc = put_float(b, p[i]);
  }
  if (!rc)
    rc = pp_buf_puts(b, "}");
  if (!rc)
    rc = put_key(b, "confidence", false);
  if (!rc)
    rc = put_float(b, p[best]);
  if (!rc && q->type == PP_JEMM_SCORE) {
    double e = 0.0; /* Python sum() from 0, candidate order */
    for (size_t i = 0; i < q->n_candidates; i++)
      e += (double)i * p[i];
    rc = put_key(b, "expected_value", false);
    if (!rc)
      rc = put_float(b, e);
  }
  return rc ? rc : pp_buf_puts(b, "}");
}

int pp_jemm_finish(const struct pp_jemm_model *m, const struct pp_jemm_request *r,
                   const float *const *logits, double latency_ms, char **ret_json, size_t *ret_len,
                   struct cm_diag *diag) {
  double s[PP_JEMM_N_LABELS], p[PP_JEMM_N_LABELS];
  double t = r->n_images ? m->mm_temperature : m->temperature;
  struct pp_buf b = {0};
  int rc = pp_buf_puts(&b, "{");
  if (!rc)
    rc = put_key(&b, "model", true);
  if (!rc)
    rc = pp_pyjson_string(&b, m->model_id, strlen(m->model_id));
  if (!rc)
    rc = put_key(&b, "answers", false);
  if (!rc)
    rc = pp_buf_puts(&b, "{");
  for (size_t q = 0; q < r->n_questions && !rc; q++) {
    const struct pp_jemm_question *x = &r->questions[q];
    for (size_t i = 0; i < x->n_candidates; i++) {
      s[i] = (double)logits[q][i]; /* as the executor's numerics left them (bf16: rounded) */
      if (!isfinite(s[i]))
        rc = cm_diag_set(diag, -CM_EINTERNAL, "question %s: non-finite label logit", x->id);
    }
    if (rc)
      break;
    pp_jemm_softmax(s, x->n_candidates, t, p);
    rc = put_key(&b, x->id, q == 0);
    if (!rc)
      rc = put_answer(&b, x, p);
  }
  if (!rc)
    rc = pp_buf_puts(&b, "}");
  char usage[128];
  snprintf(usage, sizeof usage, "%llu", (unsigned long long)r->input_tokens);
  if (!rc)
    rc = put_key(&b, "usage", false);
  if (!rc)
    rc = pp_buf_puts(&b, "{");
  if (!rc)
    rc = put_key(&b, "input_tokens", true);
  if (!rc)
    rc = pp_buf_puts(&b, usage);
  if (!rc)
    rc = put_key(&b, "output_tokens", false);
  if (!rc)
    rc = pp_buf_puts(&b, "0");
  if (!rc)
    rc = put_key(&b, "latency_ms", false);
  if (!rc)
    rc = put_float(&b, latency_ms);
  if (!rc)
    rc = pp_buf_puts(&b, "}}");
  if (rc) {
    pp_buf_fini(&b);
    return rc;
  }
  *ret_json = b.bytes;
  *ret_len = b.n;
  return 0;
}
