/* The Open-Jev family (spec/open_jev.md): compile a request body into one token sequence per
 * candidate (exact prompts, Python-style structured rendering, the export's chat wrapper, every
 * limit in the reference order) and finish head scores into the reference's response JSON
 * (float64 temperature softmax per question, confidences, legend, usage, metadata).
 * Pure code: no sockets, no processes; the program/result plumbing lives in the family adapter. */
#ifndef S1_PP_OPEN_JEV_H
#define S1_PP_OPEN_JEV_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"
#include "pp_tok.h"
#include "proto_program.h"

/* Limits (spec §8.5, plus the s1serve prompt-bytes bound). All refusals are 422 except body size. */
#define PP_OPEN_JEV_MAX_BODY_BYTES ((size_t)4 << 20) /* request body: 4 MiB (413 above) */
#define PP_OPEN_JEV_MAX_QUESTIONS 4096               /* questions per request */
#define PP_OPEN_JEV_MAX_SEQUENCES 65536              /* candidate sequences per request */
#define PP_OPEN_JEV_MAX_CHOICE 255                   /* options of one choice question */
#define PP_OPEN_JEV_MIN_SCORE 2                      /* levels of one score question, at least */
#define PP_OPEN_JEV_MAX_SCORE 10                     /* levels of one score question, at most */
#define PP_OPEN_JEV_MAX_LENGTH 16384                 /* largest max_length an export may set */
#define PP_OPEN_JEV_MAX_PROMPT_BYTES ((size_t)32 << 20) /* sum of chat-wrapped prompt bytes */
#define PP_OPEN_JEV_MAX_TOTAL_TOKENS 4194304 /* tokens over all sequences (= PROTO_MAX_TOKENS) */
#define PP_OPEN_JEV_BATCH 32 /* reference batch_size: the max_length error names a batch maximum */
#define PP_OPEN_JEV_MAX_ALIASES 16 /* model aliases in a manifest */
#define PP_OPEN_JEV_GRID 64        /* shared prefixes end on multiples of it (the GDN chunk) */
#define PP_OPEN_JEV_MAX_PREFIXES 8 /* shared prefixes per program (the CUDA engine's default
                                      --snapshots: prefixes of one program) */

/* Error codes of compile and finish (HTTP by cm_error_http): -CM_EREQUEST and -CM_ELIMIT 422
 * invalid_request with the reference's message; -CM_EINTERNAL 500 (non-finite head output, the
 * reference's "model inference failed"); -ENOMEM 500. Strict JSON (400) is the caller's
 * pp_json_parse, before compile. */

enum pp_open_jev_type {
  PP_OPEN_JEV_CHOICE, /* criteria object key -> description; answer: choice, probabilities */
  PP_OPEN_JEV_SCORE,  /* criteria array of levels; answer: expected level, legend */
  PP_OPEN_JEV_NOUL,   /* one yes/no sequence; answer: p(true) */
};

/* What the preprocessor knows of one exported Open-Jev model (manifest "open_jev" + "chat"). */
struct pp_open_jev_model {
  char *model_id;           /* base model id, the response "model" (e.g. "Qwen/Qwen3.8-27B") */
  char *aliases[PP_OPEN_JEV_MAX_ALIASES]; /* accepted request "model" names besides model_id */
  size_t n_aliases;         /* entries used in aliases */
  double temperature;       /* T of the softmax, full float64 precision */
  int64_t max_length;       /* longest accepted sequence, tokens (1 .. PP_OPEN_JEV_MAX_LENGTH) */
  char *chat_prefix;        /* text before each prompt: "<|im_start|>user\n" */
  char *chat_suffix;        /* text after it, ending in "</think>\n\n" */
  json_object *metadata;    /* response "metadata" constants (checkpoint_sha256, base_revision,
                               backbone_parameter_dtypes, code_commit), owned */
  const struct pp_tok *tok; /* the model's tokenizer, borrowed */
};

/* One compiled question. */
struct pp_open_jev_question {
  const char *id;             /* question id (key of "questions"), borrowed from the body */
  enum pp_open_jev_type type; /* question type */
  size_t first_seq;           /* index of its first sequence */
  size_t n_seqs;              /* its sequences: options, levels, or 1 for noul */
  json_object *criteria;      /* choice: the criteria object (keys); score: the level array */
};

/* A compiled request: sequences in question order, then option order. */
struct pp_open_jev_request {
  json_object *body;                      /* parsed request, owned (ids and keys point into it) */
  struct pp_open_jev_question *questions; /* [n_questions] */
  size_t n_questions;                     /* questions, request order */
  int32_t *ids;                           /* [seq_off[n_seqs]] token ids of every sequence */
  size_t *seq_off;                        /* [n_seqs + 1] start of each sequence in ids */
  size_t n_seqs;                          /* candidate sequences (= metadata.candidate_sequences) */
  char **prompts;                         /* [n_seqs] prompt texts before the chat wrapper, or
                                             NULL unless compiled with keep_prompts */
};

/* Reads the model constants from a manifest (keys "open_jev" and "chat", see recipe/open_jev).
 * Ownership: fills *ret_model (caller frees with pp_open_jev_model_fini); tok stays borrowed.
 * Returns: 0; -CM_EMISSING / -CM_EFORMAT naming the key; -ENOMEM. */
int pp_open_jev_model_init(json_object *manifest, const struct pp_tok *tok,
                           struct pp_open_jev_model *ret_model, struct cm_diag *diag);
void pp_open_jev_model_fini(struct pp_open_jev_model *model);

/* Validates and compiles a parsed request body: checks in the reference order (spec §8.3),
 * renders every prompt (§3), wraps it in the chat prefix/suffix (§4.1), tokenizes it and checks
 * max_length per reference batch (§4.4, §6.4).
 * Shapes: one sequence per choice option / score level, one per noul question.
 * Ownership: takes a new reference to `body`; *ret_req is heap-owned (pp_open_jev_request_free).
 * Returns: 0; -CM_EREQUEST with the spec's 422 message in diag after the field's path (e.g.
 * "questions.q.type: question type must be choice, score, or noul";
 * "state: Out of range float values are not JSON compliant" for a non-finite number rendered);
 * -CM_ELIMIT ("questions: request exceeds the candidate limit", "questions.q.criteria.k: Input
 * length L exceeds max_length=M; no silent truncation" naming the batch's longest sequence,
 * prompt bytes, total tokens); -ENOMEM. A path's object keys are cut to 48 code points.
 * Source: upstream jev/api.py at 3308a15 through the fork wording (spec §8.4). */
int pp_open_jev_compile(const struct pp_open_jev_model *model, json_object *body, bool keep_prompts,
                        struct pp_open_jev_request **ret_req, struct cm_diag *diag);
void pp_open_jev_request_free(struct pp_open_jev_request *req);

/* The program of a compiled request: one row per candidate sequence, in sequence order, each with
 * a HEAD readout of `head` at its last token. With `share`, the token prefix every sequence has
 * in common (the chat prefix, the state) becomes one prefix, and a question's longer common
 * prefix (its question text) a child prefix continuing it, each cut down to a multiple of
 * PP_OPEN_JEV_GRID and leaving every row ≥ 2 tokens of its own; at most PP_OPEN_JEV_MAX_PREFIXES,
 * the questions saving the most tokens first. Why the grid: the Gated DeltaNet runs chunks of 64
 * counted from the first token of each forward, so a forward split on the grid runs the very
 * chunks of the whole one, and a continuation of ≥ 2 tokens runs the chunked form as the whole
 * forward does (one token on a state would run the recurrent form); attention reads the same
 * keys in the same order. On the float32 CPU engine the head outputs are then bit-identical to
 * the unshared plan's (test open_jev_e2e_cpu). Without `share`: every row starts empty, exactly
 * the reference's independent sequences. Usage and metadata are counted from `req`, unchanged.
 * Ownership: appends to `program` (the caller's, proto_program_fini).
 * Returns: 0; -EINVAL / -ENOMEM from the builders (diag names the sequence). */
int pp_open_jev_program(const struct pp_open_jev_request *req, bool share, const char *head,
                        struct proto_program *program, struct cm_diag *diag);

/* Turns head scores into the response body, byte for byte as the reference's
 * json.dumps(body, ensure_ascii=False) (spec §2.3, §7).
 * Shapes: scores[req->n_seqs], float32 head outputs in sequence order.
 * Units: inference_seconds is written to metadata as given.
 * Ownership: *ret_json is a malloc'd NUL-terminated string, length *ret_n.
 * Returns: 0; -CM_EINTERNAL for a non-finite score (500); -CM_EREQUEST for the reference's checks
 * ("questions.q: probabilities must be finite and in [0, 1]", "questions.q: probabilities must
 * sum to one"); -ENOMEM.
 * Source: jev/metrics.py softmax (max-subtracted float64), formatter (re-division by the sum). */
int pp_open_jev_finish(const struct pp_open_jev_model *model, const struct pp_open_jev_request *req,
                       const float *scores, double inference_seconds, char **ret_json,
                       size_t *ret_n, struct cm_diag *diag);

/* Temperature softmax of one row, as the reference: p_i = exp((s_i - max)/T) / sum_j, float64,
 * summed in order, then divided once more by the sum of the p (the formatter).
 * Shapes: s[n], p[n]. Returns 0, or -CM_EREQUEST when the row fails the formatter's checks. */
int pp_open_jev_softmax(const double *s, size_t n, double temperature, double *p,
                        struct cm_diag *diag);

#endif
