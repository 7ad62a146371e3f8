/* The JEMM family (spec/jemm.md): compile a request into one chat prompt per question (Python's
 * text rules: str()/repr() of JSON values, compact insertion-ordered JSON, the str.isspace set,
 * tool-spec summaries; images before the text) and finish 32-label logits into the reference's
 * answers (temperature softmax as NumPy computes it, first argmax, confidence, expected value).
 * Pure code: no sockets or processes; the program/result plumbing is jemm_family.c. */
#ifndef S1_PP_JEMM_H
#define S1_PP_JEMM_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"
#include "pp_image.h"
#include "pp_pyjson.h"
#include "pp_tok.h"
#include "proto_program.h"

/* Limits (spec §8.5; the question cap and prompt bytes are the port's, §8.6). Refusals: 422. */
#define PP_JEMM_LABELS "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345" /* candidate labels, in order */
#define PP_JEMM_N_LABELS 32                               /* candidates per question, at most */
#define PP_JEMM_MAX_QUESTIONS 64                          /* questions per request */
#define PP_JEMM_MAX_IMAGES 4             /* images per request, shared by every question */
#define PP_JEMM_MAX_IMAGE_PIXELS 3145728 /* source width x height (3072 tokens x 32 x 32) */
#define PP_JEMM_MAX_TEXT_TOKENS 8192     /* tokens of one text prompt */
#define PP_JEMM_MAX_MM_TOKENS 3072       /* tokens of one prompt of a request with images */
#define PP_JEMM_MAX_PROMPT_BYTES ((size_t)16 << 20) /* rendered prompt text, all questions */
#define PP_JEMM_MAX_ALIASES 16                      /* model aliases in a manifest */
#define PP_JEMM_SYSTEM                                                                             \
  "Choose the best available candidate for the question using only the supplied state. "           \
  "Return exactly one candidate label."

enum pp_jemm_type {
  PP_JEMM_CHOICE, /* criteria object: one candidate per entry */
  PP_JEMM_SCORE,  /* criteria array of levels: candidates "0", "1", ... */
  PP_JEMM_NOUL,   /* always "yes" then "no" */
};

/* What the preprocessor knows of one exported JEMM model (manifest "jemm" + "chat"). */
struct pp_jemm_model {
  char *model_id;                      /* the response "model" ("JEMM") */
  char *aliases[PP_JEMM_MAX_ALIASES];  /* other accepted request "model" names */
  size_t n_aliases;                    /* entries used in aliases */
  double temperature;                  /* T for text-only requests */
  double mm_temperature;               /* T when the request has any image */
  double threshold;                    /* shipped with the model, never applied (§7) */
  char *chat_prefix;                   /* template text before the user content */
  char *chat_suffix;                   /* template text after it, ending in "</think>\n\n" */
  int32_t label_ids[PP_JEMM_N_LABELS]; /* first token id of each label, label order */
  int32_t image_token_id;              /* <|image_pad|> */
  int32_t vision_start_id;             /* <|vision_start|> */
  int32_t vision_end_id;               /* <|vision_end|> */
  int32_t video_pad_id;                /* <|video_pad|>, -1 if the tokenizer lacks it */
  int32_t vision_pad_id;               /* <|vision_pad|>, -1 if the tokenizer lacks it */
  struct pp_image_limits image_limits; /* decode and smart_resize limits */
  const struct pp_tok *tok;            /* the model's tokenizer, borrowed */
};

/* One compiled question. */
struct pp_jemm_question {
  const char *id;         /* question id (key of "questions"), borrowed from the body */
  enum pp_jemm_type type; /* question type */
  size_t n_candidates;    /* 2 .. 32 */
  const char **cand_ids;  /* [n_candidates] answer keys: choice keys (borrowed) or static */
  char *user;             /* the user message (spec §3.9), NUL-terminated, heap */
  size_t user_len;        /* its bytes */
  int32_t *ids;           /* [n_ids] the whole templated prompt's token ids, heap */
  size_t n_ids;           /* prompt length in tokens (≤ the budget) */
};

/* A compiled request. Ownership: heap (pp_jemm_request_free); holds a reference on the body. */
struct pp_jemm_request {
  json_object *body;                  /* the request, referenced (ids borrow from it) */
  struct pp_jemm_question *questions; /* [n_questions], request order */
  size_t n_questions;                 /* 1 .. PP_JEMM_MAX_QUESTIONS */
  struct pp_image *images;            /* [n_images] prepared images */
  size_t n_images;                    /* 0 .. 4 */
  size_t prefix_len;                  /* ids shared by every prompt (< every prompt's length) */
  int32_t *prefix_pos;                /* [3, prefix_len] mRoPE positions of the shared prefix */
  int32_t next_pos;                   /* the position the first token after the prefix takes */
  uint64_t input_tokens;              /* Σ prompt lengths (usage.input_tokens) */
};

/* Reads manifest "jemm" {model_id, aliases, temperature, mm_temperature, threshold, label_ids}
 * and "chat" {prefix, suffix}, and checks them against the tokenizer: 32 distinct label ids equal
 * to the first id of each label's encoding, the vision tokens present, the prefix holding the
 * system message, the suffix ending in "</think>\n\n".
 * Ownership: *ret_model owns its strings (pp_jemm_model_fini); tok is borrowed.
 * Returns 0; -CM_EMISSING / -CM_EFORMAT naming the key; -ENOMEM. Source: spec §3.11, §4.4, §9.3. */
int pp_jemm_model_init(json_object *manifest, const struct pp_tok *tok,
                       struct pp_jemm_model *ret_model, struct cm_diag *diag);
/* Frees the model's strings and zeroes it; accepts NULL and a zeroed struct. */
void pp_jemm_model_fini(struct pp_jemm_model *m);

/* Compiles a strictly parsed request body, in the reference's order: body an object, images
 * (all decoded first), questions (an object, 1 .. 64), then question by question: type,
 * criteria, candidates, count, user text, chat wrapping, tokenization, placeholder check and
 * budget. Also plans the shared prefix and its positions.
 * Ownership: *ret_req heap (pp_jemm_request_free), written only on success.
 * Returns 0; -CM_EREQUEST with the reference's detail text (e.g. "questions.q: unsupported
 * question type: None"); -CM_ELIMIT (question count, prompt bytes); the image library's codes
 * (-CM_EFORMAT, -CM_ELIMIT: 422); -ENOMEM. Source: jemm/systemone.py, jemm/contract.py. */
int pp_jemm_compile(const struct pp_jemm_model *m, json_object *body,
                    struct pp_jemm_request **ret_req, struct cm_diag *diag);
/* Frees a compiled request (images, prompts) and drops its body reference; accepts NULL. */
void pp_jemm_request_free(struct pp_jemm_request *req);

/* Appends the program of a compiled request: its images, one prefix (the shared ids with the
 * images' <|image_pad|> runs), one row per question continuing it (the rest of its prompt), and
 * one LABEL_LOGITS readout per question at the row's last token, of the first n label ids.
 * Returns 0 or a proto builder error (-EINVAL, -ENOMEM). */
int pp_jemm_program(const struct pp_jemm_model *m, const struct pp_jemm_request *req,
                    struct proto_program *p);

/* p_i = exp(z_i - L), z_i = s_i / T, L = NumPy logaddexp.reduce(z) (left fold), no
 * renormalisation. Shapes: s, ret_p [n], n ≥ 1. Source: jemm/model.py softmax. */
void pp_jemm_softmax(const double *s, size_t n, double temperature, double *ret_p);

/* Writes the response body: {"model", "answers" (request order), "usage" {input_tokens,
 * output_tokens 0, latency_ms}} as Python json.dumps(ensure_ascii=False) writes it.
 * Shapes: logits[q] [questions[q].n_candidates], the label logits as the executor's numerics
 * computed them (float32 in fp32; bf16 values in bf16, where ties are the reference's); nothing is
 * rounded here.
 * Ownership: *ret_json heap (free), *ret_len its bytes.
 * Returns 0; -CM_EINTERNAL for a non-finite logit; -ENOMEM. Source: systemone.answer, §7. */
int pp_jemm_finish(const struct pp_jemm_model *m, const struct pp_jemm_request *req,
                   const float *const *logits, double latency_ms, char **ret_json, size_t *ret_len,
                   struct cm_diag *diag);

/* ---- Python text rules, exposed for tests ---- */

/* Python str.isspace() (spec §3.6 W) and str.isprintable() (the Unicode 14.0 database of Python
 * 3.11) of one code point. */
bool pp_jemm_is_space(uint32_t cp);
bool pp_jemm_is_printable(uint32_t cp);

/* flat(t): runs of W become one space, then both ends are stripped. strip(t): ends only.
 * Shapes: t[n] valid UTF-8. Returns 0 or -ENOMEM. */
int pp_jemm_flat(struct pp_buf *b, const char *t, size_t n);
int pp_jemm_strip(struct pp_buf *b, const char *t, size_t n);

/* Python str(v) of a JSON value (spec §3.7): strings as they are; None/True/False; integers
 * exact; float repr ("inf", "nan" for non-finite); containers in repr. / Python
 * json.dumps(v, ensure_ascii=False, separators=(",", ":")) (spec §3.8).
 * Integers are exact (pp_json_check refused wider than 64 bits). Returns 0; -ENOMEM. */
int pp_jemm_py_str(struct pp_buf *b, json_object *v, struct cm_diag *diag);
int pp_jemm_compact_json(struct pp_buf *b, json_object *v, struct cm_diag *diag);

/* The candidate text of a description whose action has "tool_name" (spec §3.5): a JSON tool spec
 * rendered as name — summary | params: ..., or flat(description) when it is not one.
 * Returns 0; -CM_EREQUEST "unhashable type: 'list'" (a required member that is an array or
 * object) or an integer literal outside 64 bits; -ENOMEM. */
int pp_jemm_tool_text(struct pp_buf *b, const char *desc, size_t n, struct cm_diag *diag);

#endif
