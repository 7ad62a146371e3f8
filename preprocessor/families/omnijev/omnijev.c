/* OmniJev compile (spec §2-§5): the request contract (the native port's allow-lists and limits,
 * refusing what the reference would silently ignore), option rendering, the exact prompt per
 * question, the shared prefix, one row per option, positions and usage. The family adapter turns
 * the compiled request into a program; finishing is omnijev_finish.c. */
#include "omnijev.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pp_pyjson.h"

static const char PROMPT_USER[] = "<|im_start|>user\n";
static const char STILL_HEAD[] = "<|vision_start|><|image_pad|><|vision_end|>";
static const char PROMPT_GEN[] = "<|im_end|>\n<|im_start|>assistant\n<think>\n";
static const char OPT[] = "<|opt|>", OPT_END[] = "<|/opt|>";
/* Text that would read as option or image markers (spec §2.5): refused in every user string. */
static const char *const RESERVED[] = {"<|opt|>",          "<|/opt|>",         "<|image_pad|>",
                                       "<|video_pad|>",    "<|vision_start|>", "<|vision_end|>"};

/* ---- model ---------------------------------------------------------------------------------- */

static int get_number(json_object *o, const char *key, double *ret, const char *where,
                      struct cm_diag *diag) {
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, key, &v))
    return cm_diag_set(diag, -CM_EMISSING, "manifest %s.%s missing", where, key);
  if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
    return cm_diag_set(diag, -CM_EFORMAT, "manifest %s.%s must be a number", where, key);
  *ret = json_object_get_double(v);
  if (!isfinite(*ret))
    return cm_diag_set(diag, -CM_EFORMAT, "manifest %s.%s must be finite", where, key);
  return 0;
}

static int special_id(const struct pp_tok *tok, const char *text, int32_t *ret,
                      struct cm_diag *diag) {
  int32_t id = pp_tok_token_to_id(tok, text, strlen(text));
  if (id < 0 || !pp_tok_is_special(tok, id))
    return cm_diag_set(diag, -CM_EFORMAT, "tokenizer: %s is not a special token", text);
  *ret = id;
  return 0;
}

int pp_omnijev_model_init(json_object *manifest, const struct pp_tok *tok,
                          struct pp_omnijev_model *ret_model, struct cm_diag *diag) {
  struct pp_omnijev_model m = {.tok = tok};
  json_object *o = NULL, *t = NULL, *b = NULL, *v = NULL;
  if (!json_object_object_get_ex(manifest, "omnijev", &o) || !json_object_is_type(o, json_type_object))
    return cm_diag_set(diag, -CM_EMISSING, "manifest: object \"omnijev\" missing");
  static const char *const types[3] = {"noul", "choice", "score"};
  double fallback = 1.0;
  if (json_object_object_get_ex(o, "temperature", &v)) {
    int rc = get_number(o, "temperature", &fallback, "omnijev", diag);
    if (rc)
      return rc;
  }
  if (!json_object_object_get_ex(o, "temperatures", &t) || !json_object_is_type(t, json_type_object))
    return cm_diag_set(diag, -CM_EMISSING, "manifest omnijev.temperatures missing");
  for (int i = 0; i < 3; i++) {
    m.calib.temperature[i] = fallback;
    if (json_object_object_get_ex(t, types[i], &v)) {
      int rc = get_number(t, types[i], &m.calib.temperature[i], "omnijev.temperatures", diag);
      if (rc)
        return rc;
    }
    if (!(m.calib.temperature[i] > 0.0))
      return cm_diag_set(diag, -CM_EFORMAT, "manifest omnijev temperature %s must be > 0",
                         types[i]);
  }
  if (json_object_object_get_ex(o, "biases", &b)) {
    if (!json_object_is_type(b, json_type_object))
      return cm_diag_set(diag, -CM_EFORMAT, "manifest omnijev.biases must be an object");
    json_object_object_foreach(b, key, val) {
      (void)val;
      if (strcmp(key, "noul") != 0)
        return cm_diag_set(diag, -CM_EFORMAT, "manifest omnijev.biases.%s: only noul is allowed",
                           key);
    }
    if (json_object_object_get_ex(b, "noul", &v)) {
      int rc = get_number(b, "noul", &m.calib.noul_bias, "omnijev.biases", diag);
      if (rc)
        return rc;
    }
  }
  /* the flags this implementation serves (spec §9.1) */
  json_object *f = NULL;
  if (!json_object_object_get_ex(o, "norm", &f) || !json_object_is_type(f, json_type_string) ||
      strcmp(json_object_get_string(f), "softmax") != 0)
    return cm_diag_set(diag, -CM_EFORMAT, "manifest omnijev.norm must be \"softmax\"");
  static const char *const flags[] = {"lm_feats", "ordinal", "branch"};
  for (size_t i = 0; i < 3; i++)
    if (!json_object_object_get_ex(o, flags[i], &f) || !json_object_is_type(f, json_type_boolean) ||
        !json_object_get_boolean(f))
      return cm_diag_set(diag, -CM_EFORMAT, "manifest omnijev.%s must be true", flags[i]);
  int rc = special_id(tok, OPT, &m.ids.opt, diag);
  if (!rc)
    rc = special_id(tok, OPT_END, &m.ids.opt_end, diag);
  if (!rc)
    rc = special_id(tok, "<|image_pad|>", &m.ids.image_pad, diag);
  if (!rc)
    rc = special_id(tok, "<|vision_start|>", &m.ids.vision_start, diag);
  if (!rc)
    rc = special_id(tok, "<|vision_end|>", &m.ids.vision_end, diag);
  if (rc)
    return rc;
  pp_image_limits_default(&m.image_lim);
  m.image_lim.max_bytes = PP_OMNIJEV_MAX_IMAGE_BYTES;
  m.image_lim.max_side = PP_OMNIJEV_MAX_IMAGE_SIDE;
  m.image_lim.max_src_pixels = (uint64_t)PP_OMNIJEV_MAX_IMAGE_SIDE * PP_OMNIJEV_MAX_IMAGE_SIDE;
  m.image_lim.max_aspect = 200;
  m.image_lim.min_pixels = PP_OMNIJEV_MIN_PIXELS;
  m.image_lim.max_pixels = PP_OMNIJEV_MAX_PIXELS;
  *ret_model = m;
  return 0;
}

/* ---- text helpers --------------------------------------------------------------------------- */

/* Code points of valid UTF-8. */
static size_t n_code_points(const char *s, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++)
    c += ((unsigned char)s[i] & 0xC0) != 0x80;
  return c;
}

/* Bytes of the first `max` code points. */
static size_t prefix_bytes(const char *s, size_t n, size_t max) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++)
    if (((unsigned char)s[i] & 0xC0) != 0x80 && c++ == max)
      return i;
  return n;
}

/* Python str.isspace for one code point (3.10 / 3.11 tables, spec §3.2). */
static bool py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Length of s[n] without trailing Python whitespace (valid UTF-8). */
static size_t rstrip_len(const char *s, size_t n) {
  while (n > 0) {
    size_t st = n - 1;
    while (st > 0 && ((unsigned char)s[st] & 0xC0) == 0x80)
      st--;
    const unsigned char *u = (const unsigned char *)s + st;
    uint32_t c;
    if (u[0] < 0x80)
      c = u[0];
    else if (u[0] < 0xE0)
      c = (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
    else if (u[0] < 0xF0)
      c = (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
    else
      c = (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 |
          (uint32_t)(u[2] & 0x3F) << 6 | (u[3] & 0x3F);
    if (!py_space(c))
      break;
    n = st;
  }
  return n;
}

static bool has_reserved(const char *s, size_t n) {
  for (size_t i = 0; i < sizeof RESERVED / sizeof *RESERVED; i++) {
    size_t m = strlen(RESERVED[i]);
    for (size_t j = 0; j + m <= n; j++)
      if (s[j] == '<' && memcmp(s + j, RESERVED[i], m) == 0)
        return true;
  }
  return false;
}

/* A user string: type, length and reserved-marker checks. `what` names the field, `noun` (""
 * or "a key ") what of it the message is about. */
static int user_text_of(json_object *v, const char *what, const char *noun, const char **ret_s,
                        size_t *ret_n, struct cm_diag *diag) {
  if (!json_object_is_type(v, json_type_string))
    return cm_diag_set(diag, -CM_EREQUEST, "%s: %smust be a string", what, noun);
  const char *s = json_object_get_string(v);
  size_t n = (size_t)json_object_get_string_len(v);
  if (n_code_points(s, n) > PP_OMNIJEV_MAX_TEXT_CHARS)
    return cm_diag_set(diag, -CM_ELIMIT, "%s: %slonger than %d characters", what, noun,
                       PP_OMNIJEV_MAX_TEXT_CHARS);
  if (has_reserved(s, n))
    return cm_diag_set(diag, -CM_EREQUEST, "%s: %scontains reserved marker text", what, noun);
  *ret_s = s;
  *ret_n = n;
  return 0;
}

static int user_text(json_object *v, const char *what, const char **ret_s, size_t *ret_n,
                     struct cm_diag *diag) {
  return user_text_of(v, what, "", ret_s, ret_n, diag);
}

static char *dup_n(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = 0;
  }
  return d;
}

/* The rendered option text: s cut to PP_OMNIJEV_OPTION_CHARS code points. */
static char *option_text(const char *s, size_t n) {
  return dup_n(s, prefix_bytes(s, n, PP_OMNIJEV_OPTION_CHARS));
}

/* Checks that obj (the field `what`, "body" at the top) has only the allowed members; the
 * message names the first other one (its first 48 code points) and the allowed ones. */
static int allow_only(json_object *obj, const char *const *allowed, size_t n_allowed,
                      const char *what, struct cm_diag *diag) {
  json_object_object_foreach(obj, key, val) {
    (void)val;
    bool ok = false;
    for (size_t i = 0; i < n_allowed && !ok; i++)
      ok = strcmp(key, allowed[i]) == 0;
    if (!ok) {
      char list[128] = "";
      size_t n = 0;
      for (size_t i = 0; i < n_allowed && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s\"%s\"", i ? ", " : "", allowed[i]);
      bool top = strcmp(what, "body") == 0;
      return cm_diag_set(diag, -CM_EREQUEST, "%s%s%.*s: unknown field; %s takes %s",
                         top ? "" : what, top ? "" : ".",
                         (int)prefix_bytes(key, strlen(key), 48), key, what, list);
    }
  }
  return 0;
}

/* "region [x1,y1,x2,y2]" from {"box": [4 numbers]}, each rounded half to even (spec §3.5). */
static int region_text(json_object *region, const char *what, char **ret, struct cm_diag *diag) {
  static const char *const allowed[] = {"box"};
  json_object *box = NULL;
  if (!json_object_is_type(region, json_type_object))
    return cm_diag_set(diag, -CM_EREQUEST, "%s.region: must be an object {\"box\": [x1, y1, x2, y2]}",
                       what);
  size_t n_sub = strlen(what) + sizeof ".region";
  char *sub = malloc(n_sub);
  if (!sub)
    return -ENOMEM;
  snprintf(sub, n_sub, "%s.region", what);
  int rc = allow_only(region, allowed, 1, sub, diag);
  free(sub);
  if (rc)
    return rc;
  if (!json_object_object_get_ex(region, "box", &box) || !json_object_is_type(box, json_type_array) ||
      json_object_array_length(box) != 4)
    return cm_diag_set(diag, -CM_EREQUEST, "%s.region.box: must be an array of 4 numbers", what);
  /* Python round(float(x)) of each number (tests/oracle/omnijev_compile.py render_region): the
   * nearest double, rounded half to even, written as its exact integer (%.0f of an integral
   * double is exact in glibc; 309 digits at most). Integers at the 64-bit bounds are values
   * (pp_json_check refused wider ones, which json-c would have clamped to them). */
  char buf[4 * 312 + 16];
  size_t n = (size_t)snprintf(buf, sizeof buf, "region [");
  for (size_t i = 0; i < 4; i++) {
    json_object *c = json_object_array_get_idx(box, i);
    if (!json_object_is_type(c, json_type_double) && !json_object_is_type(c, json_type_int))
      return cm_diag_set(diag, -CM_EREQUEST, "%s.region.box[%zu]: must be a number", what, i);
    double x = json_object_get_double(c);
    if (!isfinite(x)) /* 1e999 parses as infinity; Python's round() raises OverflowError */
      return cm_diag_set(diag, -CM_EREQUEST, "%s.region.box[%zu]: cannot convert float infinity "
                         "to integer", what, i);
    double r = nearbyint(x); /* round half to even (default rounding mode) */
    n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%.0f", i ? "," : "", r == 0.0 ? 0.0 : r);
  }
  snprintf(buf + n, sizeof buf - n, "]");
  if (!(*ret = strdup(buf)))
    return -ENOMEM;
  return 0;
}

/* ---- questions ------------------------------------------------------------------------------ */

static int add_option(struct pp_omnijev_question *q, char *key, char *text) {
  if (!key || !text) {
    free(key), free(text);
    return -ENOMEM;
  }
  q->keys[q->n_options] = key;
  q->texts[q->n_options] = text;
  q->n_options++;
  return 0;
}

/* Criteria map → keys and texts. With_rubric: "key: rubric" as the choice renders it. */
static int from_criteria(struct pp_omnijev_question *q, json_object *crit, bool with_rubric,
                         const char *what, struct cm_diag *diag) {
  char name[PP_OMNIJEV_MAX_ID_CHARS * 4 + 64];
  if (!json_object_is_type(crit, json_type_object))
    return cm_diag_set(diag, -CM_EREQUEST, "%s.criteria: must be an object", what);
  if ((size_t)json_object_object_length(crit) > PP_OMNIJEV_MAX_OPTIONS)
    return cm_diag_set(diag, -CM_ELIMIT, "%s.criteria: has more than %d entries", what,
                       PP_OMNIJEV_MAX_OPTIONS);
  json_object_object_foreach(crit, key, rubric) {
    const char *k, *r = NULL;
    size_t nk, nr = 0;
    json_object *kv = json_object_new_string(key);
    snprintf(name, sizeof name, "%s.criteria", what);
    int rc = kv ? user_text_of(kv, name, "a key ", &k, &nk, diag) : -ENOMEM;
    if (rc) {
      json_object_put(kv);
      return rc;
    }
    snprintf(name, sizeof name, "%s.criteria.%s", what, key);
    if (rubric && (rc = user_text(rubric, name, &r, &nr, diag))) {
      json_object_put(kv);
      if (json_object_is_type(rubric, json_type_string))
        return rc;
      return cm_diag_set(diag, -CM_EREQUEST, "%s: must be a string or null", name);
    }
    char *text;
    if (!with_rubric || !r || !nr) {
      text = option_text(key, strlen(key));
    } else {
      size_t n = strlen(key);
      char *j = malloc(n + 2 + nr + 1);
      text = NULL;
      if (j) {
        memcpy(j, key, n);
        memcpy(j + n, ": ", 2);
        memcpy(j + n + 2, r, nr);
        text = option_text(j, n + 2 + nr);
        free(j);
      }
    }
    rc = add_option(q, strdup(key), text);
    json_object_put(kv);
    if (rc)
      return rc;
  }
  return 0;
}

static int choice_options(struct pp_omnijev_question *q, json_object *opts, const char *what,
                          struct cm_diag *diag) {
  static const char *const allowed[] = {"key", "text", "region", "abstain"};
  char name[PP_OMNIJEV_MAX_ID_CHARS * 4 + 64];
  if (!json_object_is_type(opts, json_type_array))
    return cm_diag_set(diag, -CM_EREQUEST, "%s.options: must be an array", what);
  size_t n = json_object_array_length(opts);
  if (n > PP_OMNIJEV_MAX_ROWS)
    return cm_diag_set(diag, -CM_ELIMIT, "%s.options: has more than %d entries", what,
                       PP_OMNIJEV_MAX_ROWS);
  for (size_t i = 0; i < n; i++) {
    json_object *e = json_object_array_get_idx(opts, i), *v = NULL;
    snprintf(name, sizeof name, "%s.options[%zu]", what, i);
    if (!json_object_is_type(e, json_type_object))
      return cm_diag_set(diag, -CM_EREQUEST, "%s: must be an object", name);
    int rc = allow_only(e, allowed, 4, name, diag);
    if (rc)
      return rc;
    bool abstain = false;
    if (json_object_object_get_ex(e, "abstain", &v)) {
      if (!json_object_is_type(v, json_type_boolean))
        return cm_diag_set(diag, -CM_EREQUEST, "%s.abstain: must be a boolean", name);
      abstain = json_object_get_boolean(v);
    }
    const char *key = NULL, *text = NULL;
    size_t nkey = 0, ntext = 0;
    char sub[sizeof name + 16];
    if (json_object_object_get_ex(e, "key", &v)) {
      snprintf(sub, sizeof sub, "%s.key", name);
      if ((rc = user_text(v, sub, &key, &nkey, diag)))
        return rc;
    }
    if (json_object_object_get_ex(e, "text", &v)) {
      snprintf(sub, sizeof sub, "%s.text", name);
      if ((rc = user_text(v, sub, &text, &ntext, diag)))
        return rc;
    }
    char *rendered = NULL;
    if (json_object_object_get_ex(e, "region", &v) && (rc = region_text(v, name, &rendered, diag)))
      return rc;
    if (abstain) { /* skipped: the head has its own abstain output */
      free(rendered);
      continue;
    }
    if (q->n_options == PP_OMNIJEV_MAX_OPTIONS) {
      free(rendered);
      return cm_diag_set(diag, -CM_ELIMIT, "%s: has more than %d options", what,
                         PP_OMNIJEV_MAX_OPTIONS);
    }
    if (!rendered)
      rendered = option_text(text ? text : "", ntext);
    char *k;
    if (nkey)
      k = dup_n(key, nkey);
    else if (ntext)
      k = dup_n(text, ntext);
    else if ((k = malloc(32)))
      snprintf(k, 32, "option_%zu", i);
    if ((rc = add_option(q, k, rendered)))
      return rc;
  }
  return 0;
}

static int score_levels(struct pp_omnijev_question *q, json_object *levels, const char *what,
                        struct cm_diag *diag) {
  char name[PP_OMNIJEV_MAX_ID_CHARS * 4 + 64];
  if (!json_object_is_type(levels, json_type_array))
    return cm_diag_set(diag, -CM_EREQUEST, "%s.levels: must be an array of strings", what);
  size_t n = json_object_array_length(levels);
  if (n > PP_OMNIJEV_MAX_OPTIONS)
    return cm_diag_set(diag, -CM_ELIMIT, "%s.levels: has more than %d entries", what,
                       PP_OMNIJEV_MAX_OPTIONS);
  for (size_t i = 0; i < n; i++) {
    const char *s;
    size_t ns;
    snprintf(name, sizeof name, "%s.levels[%zu]", what, i);
    int rc = user_text(json_object_array_get_idx(levels, i), name, &s, &ns, diag);
    if (!rc)
      rc = add_option(q, dup_n(s, ns), option_text(s, ns));
    if (rc)
      return rc;
  }
  return 0;
}

/* Parses question `id` into q (keys, texts, type) and renders its prompt; `head` is the user
 * content before the instructions (the image placeholder, or the video's text and frames). */
static int parse_question(const char *id, json_object *qo, const char *head,
                          struct pp_omnijev_question *q, struct cm_diag *diag) {
  static const char *const allow_noul[] = {"type", "instructions", "region"};
  static const char *const allow_choice[] = {"type", "instructions", "options", "criteria"};
  static const char *const allow_score[] = {"type", "instructions", "levels", "criteria"};
  char what[PP_OMNIJEV_MAX_ID_CHARS * 4 + 32];
  snprintf(what, sizeof what, "questions.%s", id);
  q->id = id;
  if (!json_object_is_type(qo, json_type_object))
    return cm_diag_set(diag, -CM_EREQUEST, "%s: must be an object", what);
  json_object *t = NULL, *ins = NULL, *v = NULL, *w = NULL;
  if (!json_object_object_get_ex(qo, "type", &t) || !json_object_is_type(t, json_type_string))
    return cm_diag_set(diag, -CM_EREQUEST, "%s.type: must be \"noul\", \"choice\" or \"score\"",
                       what);
  const char *ts = json_object_get_string(t);
  int rc;
  if (strcmp(ts, "noul") == 0) {
    q->type = PP_OMNIJEV_NOUL;
    rc = allow_only(qo, allow_noul, 3, what, diag);
  } else if (strcmp(ts, "choice") == 0) {
    q->type = PP_OMNIJEV_CHOICE;
    rc = allow_only(qo, allow_choice, 4, what, diag);
  } else if (strcmp(ts, "score") == 0) {
    q->type = PP_OMNIJEV_SCORE;
    rc = allow_only(qo, allow_score, 4, what, diag);
  } else {
    return cm_diag_set(diag, -CM_EREQUEST, "%s.type: must be \"noul\", \"choice\" or \"score\"",
                       what);
  }
  if (rc)
    return rc;
  char name[sizeof what + 16];
  snprintf(name, sizeof name, "%s.instructions", what);
  const char *is;
  size_t ni;
  if (!json_object_object_get_ex(qo, "instructions", &ins))
    return cm_diag_set(diag, -CM_EREQUEST, "%s: required", name);
  if ((rc = user_text(ins, name, &is, &ni, diag)))
    return rc;
  q->keys = calloc(PP_OMNIJEV_MAX_OPTIONS, sizeof *q->keys);
  q->texts = calloc(PP_OMNIJEV_MAX_OPTIONS, sizeof *q->texts);
  if (!q->keys || !q->texts)
    return -ENOMEM;
  switch (q->type) {
  case PP_OMNIJEV_NOUL: {
    char *text = NULL;
    if (json_object_object_get_ex(qo, "region", &v) && (rc = region_text(v, what, &text, diag)))
      return rc;
    rc = add_option(q, strdup("yes"), text ? text : strdup(""));
    break;
  }
  case PP_OMNIJEV_CHOICE:
  case PP_OMNIJEV_SCORE: {
    const char *list = q->type == PP_OMNIJEV_CHOICE ? "options" : "levels";
    bool has_list = json_object_object_get_ex(qo, list, &v);
    bool has_crit = json_object_object_get_ex(qo, "criteria", &w);
    if (has_list == has_crit)
      return cm_diag_set(diag, -CM_EREQUEST, "%s: needs exactly one of \"%s\" and \"criteria\"",
                         what, list);
    if (has_crit)
      rc = from_criteria(q, w, q->type == PP_OMNIJEV_CHOICE, what, diag);
    else if (q->type == PP_OMNIJEV_CHOICE)
      rc = choice_options(q, v, what, diag);
    else
      rc = score_levels(q, v, what, diag);
    if (!rc && q->type == PP_OMNIJEV_SCORE && q->n_options == 0)
      rc = cm_diag_set(diag, -CM_EREQUEST, "%s: has no levels", what);
    break;
  }
  }
  if (rc)
    return rc;
  for (size_t i = 0; i < q->n_options; i++)
    for (size_t j = 0; j < i; j++)
      if (strcmp(q->keys[i], q->keys[j]) == 0)
        return cm_diag_set(diag, -CM_EREQUEST, "%s: duplicate key \"%s\"", what, q->keys[i]);
  /* the prompt (spec §3.1) */
  struct pp_buf b = {0};
  rc = pp_buf_puts(&b, PROMPT_USER);
  if (!rc)
    rc = pp_buf_puts(&b, head);
  if (!rc)
    rc = pp_buf_put(&b, is, rstrip_len(is, ni));
  if (!rc)
    rc = pp_buf_puts(&b, PROMPT_GEN);
  for (size_t i = 0; !rc && i < q->n_options; i++) {
    rc = pp_buf_puts(&b, OPT);
    if (!rc)
      rc = pp_buf_puts(&b, q->texts[i]);
    if (!rc)
      rc = pp_buf_puts(&b, OPT_END);
  }
  if (rc) {
    pp_buf_fini(&b);
    return rc;
  }
  q->prompt = b.bytes;
  return 0;
}

/* ---- compile -------------------------------------------------------------------------------- */

static int check_top(json_object *body, json_object **ret_images, json_object **ret_questions,
                     json_object **ret_video, struct cm_diag *diag) {
  static const char *const allow_top[] = {"model", "state", "questions"};
  static const char *const allow_state[] = {"images", "video"};
  json_object *state = NULL, *images = NULL, *qs = NULL;
  if (!json_object_is_type(body, json_type_object))
    return cm_diag_set(diag, -CM_EREQUEST, "body: must be a JSON object");
  int rc = allow_only(body, allow_top, 3, "body", diag);
  if (rc)
    return rc;
  if (!json_object_object_get_ex(body, "state", &state) || !json_object_is_type(state, json_type_object))
    return cm_diag_set(diag, -CM_EREQUEST, "state: must be an object with \"images\"");
  if ((rc = allow_only(state, allow_state, 2, "state", diag)))
    return rc;
  *ret_video = NULL;
  json_object_object_get_ex(state, "video", ret_video);
  if (!json_object_object_get_ex(state, "images", &images) ||
      !json_object_is_type(images, json_type_array) || json_object_array_length(images) < 1)
    return cm_diag_set(diag, -CM_EREQUEST, "state.images: must hold at least one image");
  size_t n_images = json_object_array_length(images);
  if (*ret_video && n_images != 1)
    return cm_diag_set(diag, -CM_EREQUEST, "state.images: must hold exactly one image (the mosaic) "
                       "with state.video");
  if (n_images > PP_OMNIJEV_MAX_STILLS)
    return cm_diag_set(diag, -CM_ELIMIT, "state.images: holds %zu images, at most %d (one panel)",
                       n_images, PP_OMNIJEV_MAX_STILLS);
  for (size_t i = 0; i < n_images; i++) {
    json_object *url = json_object_array_get_idx(images, i);
    if (!json_object_is_type(url, json_type_string))
      return cm_diag_set(diag, -CM_EREQUEST, "state.images[%zu]: must be a data URL string", i);
    const char *u = json_object_get_string(url);
    if (strncmp(u, "data:image/png;base64,", 22) != 0 &&
        strncmp(u, "data:image/jpeg;base64,", 23) != 0)
      return cm_diag_set(diag, -CM_EREQUEST, "state.images[%zu]: must be a data:image/png;base64 or "
                         "data:image/jpeg;base64 URL", i);
  }
  if (!json_object_object_get_ex(body, "questions", &qs) || !json_object_is_type(qs, json_type_object))
    return cm_diag_set(diag, -CM_EREQUEST, "questions: must be an object");
  size_t nq = (size_t)json_object_object_length(qs);
  if (nq == 0)
    return cm_diag_set(diag, -CM_EREQUEST, "questions: must not be empty");
  if (nq > PP_OMNIJEV_MAX_QUESTIONS)
    return cm_diag_set(diag, -CM_ELIMIT, "questions: more than %d questions", PP_OMNIJEV_MAX_QUESTIONS);
  json_object_object_foreach(qs, id, val) {
    (void)val;
    if (n_code_points(id, strlen(id)) > PP_OMNIJEV_MAX_ID_CHARS)
      return cm_diag_set(diag, -CM_ELIMIT, "questions: a question id is longer than %d characters",
                         PP_OMNIJEV_MAX_ID_CHARS);
  }
  *ret_images = images;
  *ret_questions = qs;
  return 0;
}

/* ---- the video form (spec §2.3, §3.6, §10.6) ---------------------------------------------- */

/* What state.video says: the mosaic's layout and the frames' text. */
struct video_form {
  uint32_t n_frames; /* K frames, 1 .. PP_OMNIJEV_MAX_FRAMES */
  uint32_t cols;     /* mosaic columns; frame k at column k mod cols, row k div cols */
  uint32_t tile;     /* frame side in the mosaic, pixels */
};

/* True when v is a JSON integer in [lo, hi]; writes it to *ret. */
static bool int_in(json_object *v, int64_t lo, int64_t hi, int64_t *ret) {
  if (!json_object_is_type(v, json_type_int))
    return false;
  errno = 0;
  int64_t x = json_object_get_int64(v);
  if (errno || x < lo || x > hi)
    return false;
  *ret = x;
  return true;
}

/* Checks state.video and renders the user content before the instructions (records.video_content
 * through the chat template): "A video of {D} seconds; {K} frames sampled uniformly in order.",
 * then per frame "t={timestamps[k]}s:" and the image placeholder. D is duration with zero
 * decimals, correctly rounded from the binary value, ties to even (Python's format, like printf).
 * Ownership: *ret_head malloc'd. Returns 0; -CM_EREQUEST naming the field; -ENOMEM. */
static int video_head(json_object *video, struct video_form *ret_form, char **ret_head,
                      struct cm_diag *diag) {
  static const char *const allowed[] = {"n_frames", "cols", "tile", "timestamps", "duration"};
  json_object *v = NULL, *ts = NULL;
  int64_t n = 0, cols = 0, tile = 0;
  if (!json_object_is_type(video, json_type_object))
    return cm_diag_set(diag, -CM_EREQUEST, "state.video: must be an object {n_frames, cols, tile, "
                       "timestamps, duration}");
  int rc = allow_only(video, allowed, 5, "state.video", diag);
  if (rc)
    return rc;
  if (!json_object_object_get_ex(video, "n_frames", &v) || !int_in(v, 1, PP_OMNIJEV_MAX_FRAMES, &n))
    return cm_diag_set(diag, -CM_EREQUEST, "state.video.n_frames: must be an integer from 1 to %d",
                       PP_OMNIJEV_MAX_FRAMES);
  if (!json_object_object_get_ex(video, "cols", &v) || !int_in(v, 1, n, &cols))
    return cm_diag_set(diag, -CM_EREQUEST, "state.video.cols: must be an integer from 1 to n_frames");
  if (!json_object_object_get_ex(video, "tile", &v) || !int_in(v, 32, PP_OMNIJEV_MAX_TILE, &tile))
    return cm_diag_set(diag, -CM_EREQUEST, "state.video.tile: must be an integer from 32 to %d",
                       PP_OMNIJEV_MAX_TILE);
  if (!json_object_object_get_ex(video, "timestamps", &ts) ||
      !json_object_is_type(ts, json_type_array) || json_object_array_length(ts) != (size_t)n)
    return cm_diag_set(diag, -CM_EREQUEST, "state.video.timestamps: must be an array of n_frames "
                       "integers");
  if (!json_object_object_get_ex(video, "duration", &v) ||
      !(json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)) ||
      !(json_object_get_double(v) >= 1.0 && json_object_get_double(v) <= 1e9))
    return cm_diag_set(diag, -CM_EREQUEST, "state.video.duration: must be a number of seconds from "
                       "1 to 1e9");
  double duration = json_object_get_double(v);
  struct pp_buf b = {0};
  char num[64];
  snprintf(num, sizeof num, "%.0f", duration);
  rc = pp_buf_puts(&b, "A video of ");
  if (!rc)
    rc = pp_buf_puts(&b, num);
  snprintf(num, sizeof num, " seconds; %d frames sampled uniformly in order.", (int)n);
  if (!rc)
    rc = pp_buf_puts(&b, num);
  for (int64_t k = 0; !rc && k < n; k++) {
    int64_t t = 0;
    if (!int_in(json_object_array_get_idx(ts, (size_t)k), 0, 1000000000, &t)) {
      rc = cm_diag_set(diag, -CM_EREQUEST, "state.video.timestamps[%d]: must be an integer from 0 "
                       "to 1e9", (int)k);
      break;
    }
    snprintf(num, sizeof num, "t=%lds:", (long)t);
    rc = pp_buf_puts(&b, num);
    if (!rc)
      rc = pp_buf_puts(&b, STILL_HEAD);
  }
  if (rc) {
    pp_buf_fini(&b);
    return rc;
  }
  *ret_form = (struct video_form){(uint32_t)n, (uint32_t)cols, (uint32_t)tile};
  *ret_head = b.bytes;
  return 0;
}

/* The video's frames: tile k of the decoded mosaic, each prepared as its own image. A mosaic
 * smaller than its layout is refused (Pillow's crop would pad with black). */
static int video_frames(const struct pp_omnijev_model *m, const struct pp_rgb *mosaic,
                        const struct video_form *f, struct pp_image *ret_images,
                        struct cm_diag *diag) {
  uint32_t rows = (f->n_frames + f->cols - 1) / f->cols;
  if ((uint64_t)f->cols * f->tile > mosaic->width || (uint64_t)rows * f->tile > mosaic->height)
    return cm_diag_set(diag, -CM_EREQUEST, "a %ux%u mosaic cannot hold %u frames "
                       "of %u px in %u columns", mosaic->width, mosaic->height, f->n_frames,
                       f->tile, f->cols);
  struct pp_rgb frame = {f->tile, f->tile, malloc((size_t)f->tile * f->tile * 3)};
  if (!frame.data)
    return -ENOMEM;
  int rc = 0;
  for (uint32_t k = 0; !rc && k < f->n_frames; k++) {
    size_t x0 = (size_t)(k % f->cols) * f->tile, y0 = (size_t)(k / f->cols) * f->tile;
    for (uint32_t y = 0; y < f->tile; y++)
      memcpy(frame.data + (size_t)y * f->tile * 3,
             mosaic->data + ((y0 + y) * mosaic->width + x0) * 3, (size_t)f->tile * 3);
    rc = pp_image_prepare_rgb(&frame, k, &m->image_lim, &ret_images[k], diag);
  }
  pp_rgb_fini(&frame);
  return rc;
}

/* Several stills (spec §2.3, §10.5): each decoded and thumbnailed as soon as it is decoded (so
 * at most one full-size still is held), then tiled into one panel, JPEG-encoded and read back;
 * the panel is prepared as the request's one image. A failure names its still in *ret_index. */
static int prepare_panel(const struct pp_omnijev_model *m, json_object *images,
                         struct pp_image *ret_image, size_t *ret_index, struct cm_diag *diag) {
  size_t n = json_object_array_length(images);
  struct pp_rgb *thumbs = calloc(n, sizeof *thumbs), panel = {0};
  if (!thumbs)
    return -ENOMEM;
  int rc = 0;
  for (size_t i = 0; !rc && i < n; i++) {
    json_object *url = json_object_array_get_idx(images, i);
    uint8_t *bytes = NULL;
    size_t n_bytes = 0;
    struct pp_rgb full = {0};
    *ret_index = i;
    rc = pp_image_b64_decode(json_object_get_string(url), (size_t)json_object_get_string_len(url),
                             (uint32_t)i, &m->image_lim, &bytes, &n_bytes, diag);
    if (!rc)
      rc = pp_image_decode(bytes, n_bytes, (uint32_t)i, &m->image_lim, &full, diag);
    free(bytes);
    if (!rc && (rc = pp_image_thumbnail(&full, PP_IMAGE_PANEL_MAX_SIDE, &thumbs[i])))
      rc = rc == -ENOMEM ? rc : cm_diag_set(diag, rc, "image %zu could not be thumbnailed", i);
    pp_rgb_fini(&full);
  }
  if (!rc) {
    *ret_index = 0;
    rc = pp_image_panel(thumbs, (uint32_t)n, &panel);
    if (rc && rc != -ENOMEM)
      rc = cm_diag_set(diag, rc, "the panel of %zu images could not be made", n);
  }
  for (size_t i = 0; i < n; i++)
    pp_rgb_fini(&thumbs[i]);
  free(thumbs);
  if (!rc)
    rc = pp_image_prepare_rgb(&panel, 0, &m->image_lim, ret_image, diag);
  pp_rgb_fini(&panel);
  return rc;
}

/* Prepares state.images: one still; several stills as one panel; or (video != NULL) the
 * mosaic's frames. On failure *ret_index names the image at fault. */
static int prepare_images(const struct pp_omnijev_model *m, json_object *images,
                          const struct video_form *video, struct pp_omnijev_request *r,
                          size_t *ret_index, struct cm_diag *diag) {
  json_object *url = json_object_array_get_idx(images, 0);
  const char *u = json_object_get_string(url);
  size_t nu = (size_t)json_object_get_string_len(url);
  *ret_index = 0;
  if (!(r->images = calloc(video ? video->n_frames : 1, sizeof *r->images)))
    return -ENOMEM;
  r->n_images = video ? video->n_frames : 1;
  if (!video && json_object_array_length(images) > 1)
    return prepare_panel(m, images, &r->images[0], ret_index, diag);
  if (!video)
    return pp_image_prepare_data_url(u, nu, 0, &m->image_lim, &r->images[0], diag);
  uint8_t *bytes = NULL;
  size_t n_bytes = 0;
  struct pp_rgb mosaic = {0};
  int rc = pp_image_b64_decode(u, nu, 0, &m->image_lim, &bytes, &n_bytes, diag);
  if (!rc)
    rc = pp_image_decode(bytes, n_bytes, 0, &m->image_lim, &mosaic, diag);
  free(bytes);
  if (!rc)
    rc = video_frames(m, &mosaic, video, r->images, diag);
  pp_rgb_fini(&mosaic);
  return rc;
}

/* Tokenizes prompt q into S_q (seq, reset first) with its k-th <|image_pad|> expanded to
 * images[k].n_tokens copies, and checks the per-question token limit. */
static int encode_question(const struct pp_omnijev_model *m, const struct pp_omnijev_question *q,
                           const struct pp_image *images, size_t n_images, struct pp_tok_ids *seq,
                           struct cm_diag *diag) {
  struct pp_tok_ids ids = {0};
  int rc = pp_tok_encode(m->tok, q->prompt, strlen(q->prompt), &ids, diag);
  if (rc)
    goto out;
  size_t pads = 0, n = ids.n;
  for (size_t i = 0; i < ids.n; i++)
    if (ids.ids[i] == m->ids.image_pad && pads < n_images)
      n += images[pads++].n_tokens - 1;
  if (pads != n_images) {
    rc = cm_diag_set(diag, -CM_EINTERNAL, "prompt of %s has %zu image placeholders", q->id, pads);
    goto out;
  }
  if (n > PP_OMNIJEV_MAX_QUESTION_TOKENS) {
    rc = cm_diag_set(diag, -CM_ELIMIT, "questions.%s: %zu tokens, more than %d", q->id, n,
                     PP_OMNIJEV_MAX_QUESTION_TOKENS);
    goto out;
  }
  seq->n = 0;
  if ((rc = pp_tok_ids_reserve(seq, n)))
    goto out;
  pads = 0;
  for (size_t i = 0; i < ids.n; i++) {
    if (ids.ids[i] == m->ids.image_pad)
      for (uint32_t k = 0; k < images[pads].n_tokens; k++)
        seq->ids[seq->n++] = m->ids.image_pad;
    else
      seq->ids[seq->n++] = ids.ids[i];
    pads += ids.ids[i] == m->ids.image_pad;
  }
out:
  pp_tok_ids_fini(&ids);
  return rc;
}

int pp_omnijev_compile(const struct pp_omnijev_model *model, json_object *body,
                       struct pp_omnijev_request **ret_req, struct cm_diag *diag) {
  json_object *images = NULL, *qs = NULL, *video = NULL;
  int rc = check_top(body, &images, &qs, &video, diag);
  if (rc)
    return rc;
  struct video_form vf = {0};
  char *head = NULL;
  if (video && (rc = video_head(video, &vf, &head, diag)))
    return rc;
  struct pp_omnijev_request *r = calloc(1, sizeof *r);
  if (!r) {
    free(head);
    return -ENOMEM;
  }
  r->body = json_object_get(body);
  size_t nq = (size_t)json_object_object_length(qs);
  struct pp_tok_ids *seqs = calloc(nq, sizeof *seqs);
  r->questions = calloc(nq, sizeof *r->questions);
  if (!seqs || !r->questions) {
    rc = -ENOMEM;
    goto out;
  }
  size_t n_rows = 0;
  json_object_object_foreach(qs, id, qo) {
    struct pp_omnijev_question *q = &r->questions[r->n_questions++];
    if ((rc = parse_question(id, qo, head ? head : STILL_HEAD, q, diag)))
      goto out;
    n_rows += q->n_options ? q->n_options : 1;
    if (n_rows > PP_OMNIJEV_MAX_ROWS) {
      rc = cm_diag_set(diag, -CM_ELIMIT, "questions: more than %d options in all", PP_OMNIJEV_MAX_ROWS);
      goto out;
    }
  }
  /* the image, after every cheap check */
  size_t bad_image = 0;
  if ((rc = prepare_images(model, images, video ? &vf : NULL, r, &bad_image, diag))) {
    if (rc != -ENOMEM && diag) { /* the image module's message, prefixed with the field */
      char *inner = diag->msg;
      diag->msg = NULL;
      diag->code = 0;
      cm_diag_set(diag, rc, "state.images[%zu]: %s", bad_image, inner ? inner : cm_strerror(rc));
      free(inner);
    }
    goto out;
  }
  /* S_q, L (spec §4.3) */
  size_t L0 = SIZE_MAX, cut = SIZE_MAX;
  for (size_t i = 0; i < nq; i++) {
    struct pp_omnijev_question *q = &r->questions[i];
    if ((rc = encode_question(model, q, r->images, r->n_images, &seqs[i], diag)))
      goto out;
    q->n_seq = seqs[i].n;
    size_t lcp = 0;
    if (i == 0) {
      lcp = seqs[0].n;
    } else {
      size_t m = seqs[i].n < seqs[0].n ? seqs[i].n : seqs[0].n;
      while (lcp < m && seqs[i].ids[lcp] == seqs[0].ids[lcp])
        lcp++;
    }
    L0 = lcp < L0 ? lcp : L0;
    for (size_t t = 0; t < seqs[i].n; t++)
      if (seqs[i].ids[t] == model->ids.opt) {
        cut = t - 1 < cut ? t - 1 : cut;
        break;
      }
  }
  size_t L = L0 < cut ? L0 : cut;
  L = L < 1 ? 1 : L > PP_OMNIJEV_MAX_QUESTION_TOKENS ? PP_OMNIJEV_MAX_QUESTION_TOKENS : L;
  r->n_prefix = L;
  r->prefix_ids = malloc(L * sizeof *r->prefix_ids);
  r->prefix_pos = malloc(3 * L * sizeof *r->prefix_pos);
  r->row_off = calloc(n_rows + 1, sizeof *r->row_off);
  if (!r->prefix_ids || !r->prefix_pos || !r->row_off) {
    rc = -ENOMEM;
    goto out;
  }
  memcpy(r->prefix_ids, seqs[0].ids, L * sizeof *r->prefix_ids);
  struct pp_grid grids[PP_OMNIJEV_MAX_FRAMES];
  for (size_t k = 0; k < r->n_images; k++)
    grids[k] = (struct pp_grid){r->images[k].grid_thw[0], r->images[k].grid_thw[1],
                                r->images[k].grid_thw[2]};
  if ((rc = pp_mrope_positions(r->prefix_ids, L, model->ids.image_pad, grids, r->n_images, 0,
                               r->prefix_pos, &r->p0, diag)))
    goto out;
  /* rows (spec §4.4): head_q + S_q[opens[k] .. closes[k]] */
  size_t text_tokens = 0;
  for (size_t i = 0; i < nq; i++) {
    const struct pp_tok_ids *s = &seqs[i];
    size_t n_open = 0;
    for (size_t t = L; t < s->n; t++)
      n_open += s->ids[t] == model->ids.opt;
    if (n_open != r->questions[i].n_options) {
      rc = cm_diag_set(diag, -CM_EINTERNAL, "question %s: %zu option markers for %zu options",
                       r->questions[i].id, n_open, r->questions[i].n_options);
      goto out;
    }
  }
  struct pp_tok_ids rows = {0};
  uint64_t usage = L;
  for (size_t i = 0; i < nq && !rc; i++) {
    struct pp_omnijev_question *q = &r->questions[i];
    const struct pp_tok_ids *s = &seqs[i];
    q->first_row = r->n_rows;
    size_t open0 = SIZE_MAX;
    for (size_t t = L; t < s->n && open0 == SIZE_MAX; t++)
      if (s->ids[t] == model->ids.opt)
        open0 = t;
    if (open0 == SIZE_MAX) { /* no markers: one row S_q[L:] (an empty choice) */
      q->n_rows = 1;
      rc = pp_tok_ids_reserve(&rows, s->n - L);
      if (!rc && s->n > L) {
        memcpy(rows.ids + rows.n, s->ids + L, (s->n - L) * sizeof *rows.ids);
        rows.n += s->n - L;
      }
      usage += s->n - L;
      r->row_off[++r->n_rows] = rows.n;
      continue;
    }
    q->open_offset = (uint32_t)(open0 - L);
    q->n_rows = q->n_options;
    size_t t = open0;
    for (size_t k = 0; k < q->n_options && !rc; k++) {
      size_t close = t + 1;
      while (close < s->n && s->ids[close] != model->ids.opt_end)
        close++;
      size_t n_row = (open0 - L) + (close - t + 1);
      if ((rc = pp_tok_ids_reserve(&rows, n_row)))
        break;
      memcpy(rows.ids + rows.n, s->ids + L, (open0 - L) * sizeof *rows.ids);
      memcpy(rows.ids + rows.n + (open0 - L), s->ids + t, (close - t + 1) * sizeof *rows.ids);
      rows.n += n_row;
      usage += n_row;
      text_tokens += close - t - 1;
      r->row_off[++r->n_rows] = rows.n;
      t = close + 1;
    }
  }
  if (!rc && !rows.ids)
    rc = pp_tok_ids_reserve(&rows, 1); /* row_ids is never NULL, even when every row is empty */
  r->row_ids = rows.ids;
  r->input_tokens = usage;
  if (rc)
    goto out;
  if (usage > PP_OMNIJEV_MAX_INPUT_TOKENS) {
    rc = cm_diag_set(diag, -CM_ELIMIT, "questions: %llu input tokens, more than %d",
                     (unsigned long long)usage, PP_OMNIJEV_MAX_INPUT_TOKENS);
    goto out;
  }
  if (text_tokens > PP_OMNIJEV_MAX_OPTION_TOKENS) {
    rc = cm_diag_set(diag, -CM_ELIMIT, "questions: %zu option-text tokens, more than %d", text_tokens,
                     PP_OMNIJEV_MAX_OPTION_TOKENS);
    goto out;
  }
out:
  for (size_t i = 0; seqs && i < nq; i++)
    pp_tok_ids_fini(&seqs[i]);
  free(seqs);
  free(head);
  if (rc) {
    pp_omnijev_request_free(r);
    return rc;
  }
  *ret_req = r;
  return 0;
}

void pp_omnijev_request_free(struct pp_omnijev_request *req) {
  if (!req)
    return;
  for (size_t i = 0; req->questions && i < req->n_questions; i++) {
    struct pp_omnijev_question *q = &req->questions[i];
    for (size_t k = 0; k < q->n_options; k++) {
      free(q->keys[k]);
      free(q->texts[k]);
    }
    free(q->keys);
    free(q->texts);
    free(q->prompt);
  }
  free(req->questions);
  for (size_t k = 0; req->images && k < req->n_images; k++)
    pp_image_fini(&req->images[k]);
  free(req->images);
  free(req->prefix_ids);
  free(req->prefix_pos);
  free(req->row_ids);
  free(req->row_off);
  json_object_put(req->body);
  free(req);
}
