/* Open-Jev compile and finish (see open_jev.h). Compile validates in two passes so the errors
 * come in the reference order without building prompts first: pass 1 checks and renders every
 * question's text and options (O(body) memory) and counts sequences; pass 2 assembles and tokenizes
 * one chat-wrapped prompt at a time. Finish writes the body with pp_pyjson, never through json-c's
 * serializer, so the bytes equal Python's json.dumps. */
#include "open_jev.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pp_pyjson.h"

static const char msg_instructions[] =
    "instructions and descriptions must be text, an object, or an array";

/* ---- error paths ----------------------------------------------------------------------------- */

/* A request error names its field first (spec/wire.md), then the reference's wording verbatim:
 * "questions.big.criteria: Choice requires between 1 and 255 candidates". An object key in the
 * path is cut to its first PATH_KEY_CHARS code points (as pp_json's paths), so the message stays
 * bounded whatever the client sends. */
#define PATH_KEY_CHARS 48

/* Byte length of the first PATH_KEY_CHARS code points of the UTF-8 string k. */
static int key_bytes(const char *k) {
  size_t n = 0, chars = 0;
  while (k[n] && chars < PATH_KEY_CHARS) {
    n++;
    while (((unsigned char)k[n] & 0xC0) == 0x80)
      n++;
    chars++;
  }
  return (int)n;
}

/* Where a refusal is: root ("state", "questions", "model", "body"), then optionally the question
 * id, a field of the question, an object key and an array index below it. */
struct where {
  const char *root;  /* top-level field */
  const char *qid;   /* question id, NULL for a request-level error */
  const char *field; /* "type", "instructions", "criteria" or NULL */
  const char *key;   /* a key below field (criteria key, "true"/"false"), or NULL */
  bool has_index;    /* whether index names an element below field */
  size_t index;      /* that index (a score level) */
};

#define AT(r, ...) ((struct where){.root = (r), __VA_ARGS__})

/* Records code with "PATH: text" in diag; returns code. */
static int refuse(struct cm_diag *diag, int code, struct where w, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(struct cm_diag *diag, int code, struct where w, const char *fmt, ...) {
  char text[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  char idx[32] = "";
  if (w.has_index)
    snprintf(idx, sizeof(idx), "[%zu]", w.index);
  return cm_diag_set(diag, code, "%s%s%.*s%s%s%s%.*s%s: %s", w.root, w.qid ? "." : "",
                     w.qid ? key_bytes(w.qid) : 0, w.qid ? w.qid : "", w.field ? "." : "",
                     w.field ? w.field : "", w.key ? "." : "", w.key ? key_bytes(w.key) : 0,
                     w.key ? w.key : "", idx, text);
}

/* ---- model ----------------------------------------------------------------------------------- */

static int get_key(json_object *o, const char *key, json_type t, const char *where,
                   json_object **ret, struct cm_diag *diag) {
  *ret = NULL; /* on every path: the compiler cannot see that cm_diag_set returns non-zero */
  json_object *v;
  if (!json_object_object_get_ex(o, key, &v))
    return cm_diag_set(diag, -CM_EMISSING, "manifest: key '%s%s' missing", where, key);
  if (!json_object_is_type(v, t) &&
      !(t == json_type_double && json_object_is_type(v, json_type_int)))
    return cm_diag_set(diag, -CM_EFORMAT, "manifest: key '%s%s' must be a %s", where, key,
                       json_type_to_name(t));
  *ret = v;
  return 0;
}

static int dup_str(json_object *v, char **ret) {
  *ret = strdup(json_object_get_string(v));
  return *ret ? 0 : -ENOMEM;
}

void pp_open_jev_model_fini(struct pp_open_jev_model *m) {
  if (!m)
    return;
  free(m->model_id);
  for (size_t i = 0; i < m->n_aliases; i++)
    free(m->aliases[i]);
  free(m->chat_prefix);
  free(m->chat_suffix);
  json_object_put(m->metadata);
  memset(m, 0, sizeof *m);
}

int pp_open_jev_model_init(json_object *manifest, const struct pp_tok *tok,
                           struct pp_open_jev_model *ret_model, struct cm_diag *diag) {
  struct pp_open_jev_model m = {.tok = tok};
  json_object *oj, *chat, *v;
  int rc = get_key(manifest, "open_jev", json_type_object, "", &oj, diag);
  if (!rc)
    rc = get_key(manifest, "chat", json_type_object, "", &chat, diag);
  if (!rc)
    rc = get_key(oj, "model_id", json_type_string, "open_jev.", &v, diag);
  if (!rc)
    rc = dup_str(v, &m.model_id);
  if (!rc)
    rc = get_key(oj, "temperature", json_type_double, "open_jev.", &v, diag);
  if (!rc) {
    m.temperature = json_object_get_double(v);
    if (!(isfinite(m.temperature) && m.temperature > 0))
      rc = cm_diag_set(diag, -CM_EFORMAT, "manifest: key 'open_jev.temperature' must be finite "
                                          "and positive");
  }
  if (!rc)
    rc = get_key(oj, "max_length", json_type_int, "open_jev.", &v, diag);
  if (!rc) {
    m.max_length = json_object_get_int64(v);
    if (m.max_length < 1 || m.max_length > PP_OPEN_JEV_MAX_LENGTH)
      rc = cm_diag_set(diag, -CM_EFORMAT, "manifest: key 'open_jev.max_length' must be 1..%d",
                       PP_OPEN_JEV_MAX_LENGTH);
  }
  if (!rc)
    rc = get_key(oj, "aliases", json_type_array, "open_jev.", &v, diag);
  if (!rc && json_object_array_length(v) > PP_OPEN_JEV_MAX_ALIASES)
    rc = cm_diag_set(diag, -CM_EFORMAT, "manifest: key 'open_jev.aliases' has more than %d names",
                     PP_OPEN_JEV_MAX_ALIASES);
  for (size_t i = 0; !rc && i < json_object_array_length(v); i++) {
    json_object *a = json_object_array_get_idx(v, i);
    if (!json_object_is_type(a, json_type_string))
      rc = cm_diag_set(diag, -CM_EFORMAT, "manifest: key 'open_jev.aliases[%zu]' must be a string",
                       i);
    else if (!(rc = dup_str(a, &m.aliases[m.n_aliases])))
      m.n_aliases++;
  }
  if (!rc)
    rc = get_key(oj, "metadata", json_type_object, "open_jev.", &v, diag);
  if (!rc)
    m.metadata = json_object_get(v);
  if (!rc)
    rc = get_key(chat, "prefix", json_type_string, "chat.", &v, diag);
  if (!rc)
    rc = dup_str(v, &m.chat_prefix);
  if (!rc)
    rc = get_key(chat, "suffix", json_type_string, "chat.", &v, diag);
  if (!rc)
    rc = dup_str(v, &m.chat_suffix);
  if (rc) {
    pp_open_jev_model_fini(&m);
    return rc;
  }
  *ret_model = m;
  return 0;
}

/* ---- compile --------------------------------------------------------------------------------- */

/* Rendered texts of one question (pass 1). */
struct qtext {
  char *question;  /* Q, with the noul "Yes means/No means" lines */
  char **options;  /* [n] OPTION texts (choice, score); NULL for noul */
  size_t *opt_len; /* [n] their byte lengths */
  size_t q_len;    /* bytes of question */
};

static bool is_description(json_object *v) {
  return json_object_is_type(v, json_type_string) || json_object_is_type(v, json_type_object) ||
         json_object_is_type(v, json_type_array);
}

/* render(v): a string verbatim, anything else sorted Python JSON. Appends to b. */
static int render(struct pp_buf *b, json_object *v, struct cm_diag *diag) {
  if (json_object_is_type(v, json_type_string))
    return pp_buf_put(b, json_object_get_string(v), (size_t)json_object_get_string_len(v));
  return pp_pyjson_dump(b, v, true, diag);
}

/* render(v) of the field at w: a render failure (a non-finite number) names the field. */
static int render_at(struct pp_buf *b, json_object *v, struct where w, struct cm_diag *diag) {
  struct cm_diag d = {0};
  int rc = render(b, v, &d);
  if (rc && d.msg)
    refuse(diag, rc, w, "%s", d.msg);
  else if (rc)
    cm_diag_set(diag, rc, "%s", cm_strerror(rc));
  cm_diag_fini(&d);
  return rc;
}

/* _description: type check, then render (non-finite numbers fail the render). */
static int description(struct pp_buf *b, json_object *v, struct where w, struct cm_diag *diag) {
  if (!is_description(v))
    return refuse(diag, -CM_EREQUEST, w, "%s", msg_instructions);
  return render_at(b, v, w, diag);
}

static char *take(struct pp_buf *b, size_t *ret_len) {
  char *s = b->bytes;
  if (!s)
    s = calloc(1, 1);
  if (ret_len)
    *ret_len = b->n;
  b->bytes = NULL;
  b->n = b->cap = 0;
  return s;
}

static void qtext_fini(struct qtext *t, size_t n) {
  free(t->question);
  if (t->options)
    for (size_t i = 0; i < n; i++)
      free(t->options[i]);
  free(t->options);
  free(t->opt_len);
}

/* Pass 1 for one question: the checks of compile_request in order, the texts, the count. */
static int compile_question(const char *id, json_object *def, struct pp_open_jev_question *q,
                            struct qtext *t, struct cm_diag *diag) {
  struct pp_buf b = {0};
  json_object *type = NULL, *instr = NULL, *crit = NULL;
  int rc = 0;
  q->id = id;
  if (!json_object_is_type(def, json_type_object))
    return refuse(diag, -CM_EREQUEST, AT("questions", .qid = id),
                  "question IDs must be strings and definitions must be mappings");
  json_object_object_get_ex(def, "type", &type);
  const char *ts = json_object_is_type(type, json_type_string) ? json_object_get_string(type) : "";
  size_t tl = json_object_is_type(type, json_type_string) ? (size_t)json_object_get_string_len(type)
                                                          : 0;
  if (tl == 6 && memcmp(ts, "choice", 6) == 0)
    q->type = PP_OPEN_JEV_CHOICE;
  else if (tl == 5 && memcmp(ts, "score", 5) == 0)
    q->type = PP_OPEN_JEV_SCORE;
  else if (tl == 4 && memcmp(ts, "noul", 4) == 0)
    q->type = PP_OPEN_JEV_NOUL;
  else
    return refuse(diag, -CM_EREQUEST, AT("questions", .qid = id, .field = "type"),
                  "question type must be choice, score, or noul");
  json_object_object_get_ex(def, "instructions", &instr);
  rc = description(&b, instr, AT("questions", .qid = id, .field = "instructions"), diag);
  if (rc)
    goto fail;
  json_object_object_get_ex(def, "criteria", &crit);
  if (q->type == PP_OPEN_JEV_CHOICE) {
    size_t n = json_object_is_type(crit, json_type_object) ? (size_t)json_object_object_length(crit)
                                                           : 0;
    if (n < 1 || n > PP_OPEN_JEV_MAX_CHOICE) {
      rc = refuse(diag, -CM_EREQUEST, AT("questions", .qid = id, .field = "criteria"),
                  "Choice requires between 1 and %d candidates", PP_OPEN_JEV_MAX_CHOICE);
      goto fail;
    }
    q->n_seqs = n;
  } else if (q->type == PP_OPEN_JEV_SCORE) {
    size_t n = json_object_is_type(crit, json_type_array) ? json_object_array_length(crit) : 0;
    if (n < PP_OPEN_JEV_MIN_SCORE || n > PP_OPEN_JEV_MAX_SCORE) {
      rc = refuse(diag, -CM_EREQUEST, AT("questions", .qid = id, .field = "criteria"),
                  "Score requires an array of %d to %d descriptive levels", PP_OPEN_JEV_MIN_SCORE,
                  PP_OPEN_JEV_MAX_SCORE);
      goto fail;
    }
    q->n_seqs = n;
  } else {
    q->n_seqs = 1;
  }
  q->criteria = crit;
  if (q->type != PP_OPEN_JEV_NOUL) {
    t->options = calloc(q->n_seqs, sizeof *t->options);
    t->opt_len = calloc(q->n_seqs, sizeof *t->opt_len);
    if (!t->options || !t->opt_len) {
      rc = -ENOMEM;
      goto fail;
    }
  }
  t->question = take(&b, &t->q_len);
  if (!t->question) {
    rc = -ENOMEM;
    goto fail;
  }
  if (q->type == PP_OPEN_JEV_CHOICE) {
    /* each description: type check, then render (non-finite numbers fail), in key order */
    size_t i = 0;
    json_object_object_foreach(crit, key, val) {
      struct where w = AT("questions", .qid = id, .field = "criteria", .key = key);
      if (val != NULL && !is_description(val)) {
        rc = refuse(diag, -CM_EREQUEST, w, "%s", msg_instructions);
        goto fail;
      }
      rc = pp_buf_puts(&b, key);
      if (!rc && val != NULL)
        rc = pp_buf_put(&b, ": ", 2);
      if (!rc && val != NULL)
        rc = render_at(&b, val, w, diag);
      if (rc)
        goto fail;
      t->options[i] = take(&b, &t->opt_len[i]);
      if (!t->options[i++]) {
        rc = -ENOMEM;
        goto fail;
      }
    }
  } else if (q->type == PP_OPEN_JEV_SCORE) {
    for (size_t i = 0; i < q->n_seqs; i++) {
      rc = description(&b, json_object_array_get_idx(crit, i),
                       AT("questions", .qid = id, .field = "criteria", .has_index = true, .index = i), diag);
      if (rc)
        goto fail;
      t->options[i] = take(&b, &t->opt_len[i]);
      if (!t->options[i]) {
        rc = -ENOMEM;
        goto fail;
      }
    }
  } else if (crit != NULL) {
    json_object *yes = NULL, *no = NULL;
    if (!json_object_is_type(crit, json_type_object) || json_object_object_length(crit) != 2 ||
        !json_object_object_get_ex(crit, "true", &yes) ||
        !json_object_object_get_ex(crit, "false", &no)) {
      rc = refuse(diag, -CM_EREQUEST, AT("questions", .qid = id, .field = "criteria"),
                  "Noul criteria must contain true and false descriptions");
      goto fail;
    }
    rc = pp_buf_put(&b, t->question, t->q_len);
    if (!rc)
      rc = pp_buf_puts(&b, "\nYes means: ");
    if (!rc)
      rc = description(&b, yes, AT("questions", .qid = id, .field = "criteria", .key = "true"),
                       diag);
    if (!rc)
      rc = pp_buf_puts(&b, "\nNo means: ");
    if (!rc)
      rc = description(&b, no, AT("questions", .qid = id, .field = "criteria", .key = "false"),
                       diag);
    if (rc)
      goto fail;
    free(t->question);
    t->question = take(&b, &t->q_len);
    if (!t->question) {
      rc = -ENOMEM;
      goto fail;
    }
  }
  return 0;
fail:
  pp_buf_fini(&b);
  return rc;
}

static const char ctx_head[] = "Context:\n", q_head[] = "\n\nQuestion: ",
                  opt_head[] = "\nProposed answer: ",
                  opt_tail[] = "\nIs this proposed answer correct? Answer Yes or No.",
                  noul_tail[] = "\nIs the answer to this question yes? Answer Yes or No.";
#define LIT(s) (sizeof(s) - 1)

/* Prompt bytes (before the chat wrapper) of sequence j of a question. */
static size_t prompt_bytes(size_t state_len, const struct qtext *t, bool noul, size_t j) {
  size_t n = LIT(ctx_head) + state_len + LIT(q_head) + t->q_len;
  return n + (noul ? LIT(noul_tail) : LIT(opt_head) + t->opt_len[j] + LIT(opt_tail));
}

static int build_prompt(struct pp_buf *b, const char *state, size_t state_len,
                        const struct qtext *t, bool noul, size_t j) {
  int rc = pp_buf_put(b, ctx_head, LIT(ctx_head));
  if (!rc)
    rc = pp_buf_put(b, state, state_len);
  if (!rc)
    rc = pp_buf_put(b, q_head, LIT(q_head));
  if (!rc)
    rc = pp_buf_put(b, t->question, t->q_len);
  if (noul) {
    if (!rc)
      rc = pp_buf_put(b, noul_tail, LIT(noul_tail));
    return rc;
  }
  if (!rc)
    rc = pp_buf_put(b, opt_head, LIT(opt_head));
  if (!rc)
    rc = pp_buf_put(b, t->options[j], t->opt_len[j]);
  if (!rc)
    rc = pp_buf_put(b, opt_tail, LIT(opt_tail));
  return rc;
}

void pp_open_jev_request_free(struct pp_open_jev_request *req) {
  if (!req)
    return;
  if (req->prompts)
    for (size_t i = 0; i < req->n_seqs; i++)
      free(req->prompts[i]);
  free(req->prompts);
  free(req->questions);
  free(req->ids);
  free(req->seq_off);
  json_object_put(req->body);
  free(req);
}

/* The reference's max_length check: batches of candidate_batches(records, 32), each batch's
 * longest sequence checked before it runs; the first failing batch names its longest (the first
 * of equal length), and the message its question and option. */
static int check_lengths(const struct pp_open_jev_model *m, const struct pp_open_jev_request *r,
                         struct cm_diag *diag) {
  size_t size = 0, longest = 0, longest_seq = 0;
  for (size_t qi = 0; qi <= r->n_questions; qi++) {
    const struct pp_open_jev_question *q = qi < r->n_questions ? &r->questions[qi] : NULL;
    size_t n = q ? q->n_seqs : 0;
    for (size_t start = 0; q && start < n; start += PP_OPEN_JEV_BATCH) {
      size_t count = n - start < PP_OPEN_JEV_BATCH ? n - start : PP_OPEN_JEV_BATCH;
      if (size > 0 && size + count > PP_OPEN_JEV_BATCH) {
        if (longest > (size_t)m->max_length)
          goto fail;
        size = longest = 0;
      }
      for (size_t j = 0; j < count; j++) {
        size_t s = q->first_seq + start + j;
        size_t len = r->seq_off[s + 1] - r->seq_off[s];
        if (len > longest) {
          longest = len;
          longest_seq = s;
        }
      }
      size += count;
    }
  }
  if (size > 0 && longest > (size_t)m->max_length)
    goto fail;
  return 0;
fail:;
  size_t qi = 0;
  while (qi + 1 < r->n_questions && r->questions[qi + 1].first_seq <= longest_seq)
    qi++;
  const struct pp_open_jev_question *q = &r->questions[qi];
  size_t j = longest_seq - q->first_seq;
  struct where w = AT("questions", .qid = q->id);
  if (q->type == PP_OPEN_JEV_SCORE) {
    w.field = "criteria";
    w.has_index = true;
    w.index = j;
  } else if (q->type == PP_OPEN_JEV_CHOICE) {
    struct json_object_iterator it = json_object_iter_begin(q->criteria);
    for (size_t k = 0; k < j; k++)
      json_object_iter_next(&it);
    w.field = "criteria";
    w.key = json_object_iter_peek_name(&it);
  }
  return refuse(diag, -CM_ELIMIT, w, "Input length %zu exceeds max_length=%lld; no silent "
                                     "truncation",
                longest, (long long)m->max_length);
}

int pp_open_jev_compile(const struct pp_open_jev_model *m, json_object *body, bool keep_prompts,
                        struct pp_open_jev_request **ret_req, struct cm_diag *diag) {
  struct pp_open_jev_request *r = calloc(1, sizeof *r);
  struct qtext *texts = NULL;
  struct pp_buf state = {0}, prompt = {0};
  struct pp_tok_ids ids = {0};
  json_object *jstate = NULL, *jq = NULL, *jm = NULL;
  int rc = 0;
  if (!r)
    return -ENOMEM;
  r->body = json_object_get(body);
  /* 1. body shape */
  if (!json_object_is_type(body, json_type_object) ||
      !json_object_object_get_ex(body, "state", &jstate) ||
      !json_object_object_get_ex(body, "questions", &jq)) {
    rc = refuse(diag, -CM_EREQUEST,
                AT(!json_object_is_type(body, json_type_object) ? "body"
                   : !json_object_object_get_ex(body, "state", NULL) ? "state"
                                                                     : "questions"),
                "request requires state and questions");
    goto out;
  }
  /* 2. model */
  if (json_object_object_get_ex(body, "model", &jm) && jm != NULL) {
    bool ok = false;
    if (json_object_is_type(jm, json_type_string)) {
      const char *name = json_object_get_string(jm);
      size_t len = (size_t)json_object_get_string_len(jm);
      ok = strlen(m->model_id) == len && memcmp(name, m->model_id, len) == 0;
      for (size_t i = 0; i < m->n_aliases && !ok; i++)
        ok = strlen(m->aliases[i]) == len && memcmp(name, m->aliases[i], len) == 0;
    }
    if (!ok) {
      rc = refuse(diag, -CM_EREQUEST, AT("model"), "requested model is not loaded; see /v1/models");
      goto out;
    }
  }
  /* 3. questions container and limit */
  if (!json_object_is_type(jq, json_type_object) ||
      json_object_object_length(jq) > PP_OPEN_JEV_MAX_QUESTIONS) {
    rc = refuse(diag, -CM_ELIMIT, AT("questions"),
                "questions must be an object within the server question limit");
    goto out;
  }
  /* 4. compile: state, then every question */
  if (!is_description(jstate)) {
    rc = refuse(diag, -CM_EREQUEST, AT("state"), "state must be text, a JSON object, or an array");
    goto out;
  }
  rc = render_at(&state, jstate, AT("state"), diag);
  if (rc)
    goto out;
  r->n_questions = (size_t)json_object_object_length(jq);
  if (r->n_questions == 0) {
    rc = refuse(diag, -CM_EREQUEST, AT("questions"), "questions must be a nonempty mapping");
    goto out;
  }
  r->questions = calloc(r->n_questions, sizeof *r->questions);
  texts = calloc(r->n_questions, sizeof *texts);
  if (!r->questions || !texts) {
    rc = -ENOMEM;
    goto out;
  }
  size_t qi = 0, n_seqs = 0;
  json_object_object_foreach(jq, qid, qdef) {
    rc = compile_question(qid, qdef, &r->questions[qi], &texts[qi], diag);
    if (rc)
      goto out;
    r->questions[qi].first_seq = n_seqs;
    n_seqs += r->questions[qi].n_seqs;
    qi++;
  }
  /* 5. candidate total */
  if (n_seqs > PP_OPEN_JEV_MAX_SEQUENCES) {
    rc = refuse(diag, -CM_ELIMIT, AT("questions"), "request exceeds the candidate limit");
    goto out;
  }
  /* s1serve bound on the text to tokenize, before any tokenization */
  size_t wrap = strlen(m->chat_prefix) + strlen(m->chat_suffix), total = 0;
  for (size_t i = 0; i < r->n_questions; i++) {
    bool noul = r->questions[i].type == PP_OPEN_JEV_NOUL;
    for (size_t j = 0; j < r->questions[i].n_seqs; j++)
      total += wrap + prompt_bytes(state.n, &texts[i], noul, j);
    if (total > PP_OPEN_JEV_MAX_PROMPT_BYTES)
      break;
  }
  if (total > PP_OPEN_JEV_MAX_PROMPT_BYTES) {
    rc = refuse(diag, -CM_ELIMIT, AT("questions"),
                "request prompts exceed %zu bytes in total (the server's tokenization limit)",
                PP_OPEN_JEV_MAX_PROMPT_BYTES);
    goto out;
  }
  /* tokenize every chat-wrapped prompt */
  r->n_seqs = n_seqs;
  r->seq_off = calloc(n_seqs + 1, sizeof *r->seq_off);
  if (keep_prompts)
    r->prompts = calloc(n_seqs ? n_seqs : 1, sizeof *r->prompts);
  if (!r->seq_off || (keep_prompts && !r->prompts)) {
    rc = -ENOMEM;
    goto out;
  }
  size_t s = 0;
  for (size_t i = 0; i < r->n_questions; i++) {
    bool noul = r->questions[i].type == PP_OPEN_JEV_NOUL;
    for (size_t j = 0; j < r->questions[i].n_seqs; j++, s++) {
      prompt.n = 0;
      rc = pp_buf_puts(&prompt, m->chat_prefix);
      size_t p0 = prompt.n;
      if (!rc)
        rc = build_prompt(&prompt, state.bytes ? state.bytes : "", state.n, &texts[i], noul, j);
      size_t p1 = prompt.n;
      if (!rc)
        rc = pp_buf_puts(&prompt, m->chat_suffix);
      if (!rc && keep_prompts && !(r->prompts[s] = strndup(prompt.bytes + p0, p1 - p0)))
        rc = -ENOMEM;
      if (!rc)
        rc = pp_tok_encode(m->tok, prompt.bytes, prompt.n, &ids, diag);
      if (rc)
        goto out;
      r->seq_off[s + 1] = ids.n;
    }
  }
  r->ids = ids.ids;
  ids.ids = NULL;
  ids.n = ids.cap = 0;
  /* 6. max_length, per reference batch; then the program's token bound (s1serve) */
  rc = check_lengths(m, r, diag);
  if (!rc && r->seq_off[n_seqs] > PP_OPEN_JEV_MAX_TOTAL_TOKENS)
    rc = refuse(diag, -CM_ELIMIT, AT("questions"), "request has %zu tokens over all sequences; "
                "the server limit is %d", r->seq_off[n_seqs], PP_OPEN_JEV_MAX_TOTAL_TOKENS);
out:
  if (texts)
    for (size_t i = 0; i < r->n_questions; i++)
      qtext_fini(&texts[i], r->questions ? r->questions[i].n_seqs : 0);
  free(texts);
  pp_buf_fini(&state);
  pp_buf_fini(&prompt);
  pp_tok_ids_fini(&ids);
  if (rc) {
    pp_open_jev_request_free(r);
    return rc;
  }
  *ret_req = r;
  return 0;
}

/* ---- finish ---------------------------------------------------------------------------------- */

/* Python's built-in sum() over floats (CPython >= 3.12: Neumaier-compensated), in order. */
static double py_sum(const double *x, size_t n) {
  double f = 0.0, c = 0.0;
  for (size_t i = 0; i < n; i++) {
    double t = f + x[i];
    if (fabs(f) >= fabs(x[i]))
      c += (f - t) + x[i];
    else
      c += (x[i] - t) + f;
    f = t;
  }
  if (c != 0.0 && isfinite(c))
    f += c;
  return f;
}

int pp_open_jev_softmax(const double *s, size_t n, double temperature, double *p,
                        struct cm_diag *diag) {
  double mx = s[0];
  for (size_t i = 1; i < n; i++)
    if (s[i] > mx)
      mx = s[i];
  for (size_t i = 0; i < n; i++)
    p[i] = exp((s[i] - mx) / temperature);
  double total = py_sum(p, n);
  for (size_t i = 0; i < n; i++)
    p[i] /= total;
  /* format_response: range check, sum check, one more division by the sum */
  for (size_t i = 0; i < n; i++)
    if (!isfinite(p[i]) || p[i] < 0 || p[i] > 1)
      return cm_diag_set(diag, -CM_EREQUEST, "probabilities must be finite and in [0, 1]");
  total = py_sum(p, n);
  double diff = fabs(total - 1.0), tol = fmax(1e-6 * fmax(fabs(total), 1.0), 1e-6);
  if (!(diff <= tol))
    return cm_diag_set(diag, -CM_EREQUEST, "probabilities must sum to one");
  for (size_t i = 0; i < n; i++)
    p[i] /= total;
  return 0;
}

static int put_float(struct pp_buf *b, double x) {
  char num[PP_PYJSON_FLOAT_MAX];
  size_t n = pp_pyjson_float(x, num);
  return pp_buf_put(b, num, n);
}

static int put_key(struct pp_buf *b, const char *key, bool first) {
  int rc = first ? 0 : pp_buf_put(b, ", ", 2);
  if (!rc)
    rc = pp_pyjson_string(b, key, strlen(key));
  return rc ? rc : pp_buf_put(b, ": ", 2);
}

/* probabilities object: keys of the criteria object (choice) or "0".."n-1" (score). */
static int put_probabilities(struct pp_buf *b, const struct pp_open_jev_question *q,
                             const double *p) {
  int rc = pp_buf_puts(b, "{");
  size_t i = 0;
  if (q->type == PP_OPEN_JEV_CHOICE) {
    json_object_object_foreach(q->criteria, key, val) {
      (void)val;
      rc = rc ? rc : put_key(b, key, i == 0);
      rc = rc ? rc : put_float(b, p[i]);
      i++;
    }
  } else {
    for (; i < q->n_seqs && !rc; i++) {
      char k[24];
      snprintf(k, sizeof k, "%zu", i);
      rc = put_key(b, k, i == 0);
      rc = rc ? rc : put_float(b, p[i]);
    }
  }
  return rc ? rc : pp_buf_puts(b, "}");
}

static int put_answer(struct pp_buf *b, const struct pp_open_jev_question *q, const double *p,
                      struct cm_diag *diag) {
  size_t n = q->n_seqs;
  int rc;
  if (q->type == PP_OPEN_JEV_NOUL) {
    rc = pp_buf_puts(b, "{\"type\": \"noul\", \"noul\": ");
    rc = rc ? rc : put_float(b, p[1]);
    return rc ? rc : pp_buf_puts(b, "}");
  }
  size_t top = 0; /* first maximum */
  for (size_t i = 1; i < n; i++)
    if (p[i] > p[top])
      top = i;
  if (q->type == PP_OPEN_JEV_CHOICE) {
    double conf = n == 1 ? 1.0 : (p[top] - 1.0 / (double)n) / (1.0 - 1.0 / (double)n);
    rc = pp_buf_puts(b, "{\"type\": \"choice\", \"choice\": ");
    size_t i = 0;
    json_object_object_foreach(q->criteria, key, val) {
      (void)val;
      if (i++ == top && !rc)
        rc = pp_pyjson_string(b, key, strlen(key));
    }
    rc = rc ? rc : pp_buf_puts(b, ", \"probabilities\": ");
    rc = rc ? rc : put_probabilities(b, q, p);
    rc = rc ? rc : pp_buf_puts(b, ", \"confidence\": ");
    rc = rc ? rc : put_float(b, conf);
    return rc ? rc : pp_buf_puts(b, "}");
  }
  /* score */
  double terms[PP_OPEN_JEV_MAX_SCORE], dist[PP_OPEN_JEV_MAX_SCORE], half[PP_OPEN_JEV_MAX_SCORE];
  double center = (double)(n - 1) / 2.0;
  for (size_t i = 0; i < n; i++) {
    terms[i] = (double)i * p[i];
    dist[i] = p[i] * fabs((double)i - (double)top);
    half[i] = fabs((double)i - center);
  }
  double score = py_sum(terms, n), d = py_sum(dist, n), u = py_sum(half, n) / (double)n;
  double conf = fmax(0.0, 1.0 - d / u);
  rc = pp_buf_puts(b, "{\"type\": \"score\", \"score\": ");
  rc = rc ? rc : put_float(b, score);
  rc = rc ? rc : pp_buf_puts(b, ", \"probabilities\": ");
  rc = rc ? rc : put_probabilities(b, q, p);
  rc = rc ? rc : pp_buf_puts(b, ", \"confidence\": ");
  rc = rc ? rc : put_float(b, conf);
  rc = rc ? rc : pp_buf_puts(b, ", \"legend\": {");
  for (size_t i = 0; i < n && !rc; i++) {
    char k[24];
    snprintf(k, sizeof k, "%zu", i);
    rc = put_key(b, k, i == 0);
    rc = rc ? rc : pp_pyjson_dump(b, json_object_array_get_idx(q->criteria, i), false, diag);
  }
  return rc ? rc : pp_buf_puts(b, "}}");
}

int pp_open_jev_finish(const struct pp_open_jev_model *m, const struct pp_open_jev_request *r,
                       const float *scores, double inference_seconds, char **ret_json,
                       size_t *ret_n, struct cm_diag *diag) {
  struct pp_buf b = {0};
  double row[PP_OPEN_JEV_MAX_CHOICE + 1], p[PP_OPEN_JEV_MAX_CHOICE + 1];
  int rc = 0;
  for (size_t s = 0; s < r->n_seqs; s++)
    if (!isfinite(scores[s]))
      return cm_diag_set(diag, -CM_EINTERNAL,
                         "model inference failed: backend returned invalid logits");
  uint64_t input_tokens = r->n_seqs ? r->seq_off[r->n_seqs] : 0;
  rc = pp_buf_puts(&b, "{\"answers\": {");
  for (size_t qi = 0; qi < r->n_questions && !rc; qi++) {
    const struct pp_open_jev_question *q = &r->questions[qi];
    size_t n = q->n_seqs;
    if (q->type == PP_OPEN_JEV_NOUL) {
      row[0] = 0.0;
      row[1] = (double)scores[q->first_seq];
      n = 2;
    } else {
      for (size_t i = 0; i < n; i++)
        row[i] = (double)scores[q->first_seq + i];
    }
    struct cm_diag d = {0};
    rc = pp_open_jev_softmax(row, n, m->temperature, p, &d);
    if (rc) /* the formatter's checks name the question */
      refuse(diag, rc, AT("questions", .qid = q->id), "%s", d.msg ? d.msg : cm_strerror(rc));
    cm_diag_fini(&d);
    rc = rc ? rc : put_key(&b, q->id, qi == 0);
    rc = rc ? rc : put_answer(&b, q, p, diag);
  }
  char num[64];
  rc = rc ? rc : pp_buf_puts(&b, "}, \"model\": ");
  rc = rc ? rc : pp_pyjson_string(&b, m->model_id, strlen(m->model_id));
  snprintf(num, sizeof num, "%llu", (unsigned long long)input_tokens);
  rc = rc ? rc : pp_buf_puts(&b, ", \"usage\": {\"input_tokens\": ");
  rc = rc ? rc : pp_buf_puts(&b, num);
  rc = rc ? rc : pp_buf_puts(&b, ", \"output_tokens\": 0}, \"metadata\": {\"method\": "
                                 "\"lora_decision_head\", \"temperature\": ");
  rc = rc ? rc : put_float(&b, m->temperature);
  snprintf(num, sizeof num, "%zu", r->n_seqs);
  rc = rc ? rc : pp_buf_puts(&b, ", \"candidate_sequences\": ");
  rc = rc ? rc : pp_buf_puts(&b, num);
  rc = rc ? rc : pp_buf_puts(&b, ", \"inference_seconds\": ");
  rc = rc ? rc : put_float(&b, isfinite(inference_seconds) ? inference_seconds : 0.0);
  rc = rc ? rc : pp_buf_puts(&b, ", \"prefix_cache\": {\"enabled\": false, \"mode\": "
                                 "\"independent_candidates\"}");
  json_object_object_foreach(m->metadata, key, val) {
    rc = rc ? rc : put_key(&b, key, false);
    rc = rc ? rc : pp_pyjson_dump(&b, val, false, diag);
  }
  rc = rc ? rc : pp_buf_puts(&b, "}}");
  if (rc) {
    pp_buf_fini(&b);
    return rc;
  }
  *ret_n = b.n;
  *ret_json = b.bytes;
  return 0;
}
