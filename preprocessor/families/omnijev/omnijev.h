/* The OmniJev-4B v1.1 family (spec/omnijev.md): compile a request (one still image, an ordered map
 * of noul / choice / score questions) into the shared prefix and one row per (question, option),
 * with the exact prompts, marker offsets, positions and usage; and finish the per-question head
 * outputs into the reference's answers (calibration, float32 storage points, ties, Jev confidence,
 * rounding). Also the video form (spec §2.3, §3.6: a mosaic cut into frames, one image each, with
 * timestamp text), and several stills tiled into one panel (spec §2.3, §10.5: pp_image_panel).
 * Pure code: no sockets. Leaves out state.text (refused). */
#ifndef S1_PP_OMNIJEV_H
#define S1_PP_OMNIJEV_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"
#include "pp_image.h"
#include "pp_tok.h"

/* Limits (the native port's contract, spec §12.2), checked before any tokenization or image work
 * that they bound. Every refusal is 422 (-CM_EREQUEST / -CM_ELIMIT). */
#define PP_OMNIJEV_MAX_QUESTIONS 64          /* questions per request */
#define PP_OMNIJEV_MAX_ID_CHARS 256          /* code points of a question id */
#define PP_OMNIJEV_MAX_OPTIONS 255           /* options (levels) of one question */
#define PP_OMNIJEV_MAX_ROWS 1024             /* options over all questions */
#define PP_OMNIJEV_MAX_TEXT_CHARS 8192       /* code points of any text field */
#define PP_OMNIJEV_MAX_QUESTION_TOKENS 8192  /* tokens of one question's sequence S_q */
#define PP_OMNIJEV_MAX_INPUT_TOKENS 65536    /* usage: prefix once + every row */
#define PP_OMNIJEV_MAX_OPTION_TOKENS 16384   /* option-text tokens whose log-probs are read */
#define PP_OMNIJEV_MAX_IMAGE_BYTES ((uint64_t)8 << 20) /* decoded image file bytes */
#define PP_OMNIJEV_MAX_IMAGE_SIDE 4096       /* source width / height, pixels */
#define PP_OMNIJEV_MAX_PIXELS 602112         /* smart_resize max_pixels: the MSO1 override */
#define PP_OMNIJEV_MIN_PIXELS 65536          /* smart_resize min_pixels (processor config) */
#define PP_OMNIJEV_OPTION_CHARS 200          /* rendered option texts are cut to this many code points */
#define PP_OMNIJEV_FEATS 6                   /* LM features per option */
#define PP_OMNIJEV_MAX_FRAMES 16             /* frames of the video form (mso/video.py makes 16) */
#define PP_OMNIJEV_MAX_TILE 1024             /* video tile side, pixels (mso/video.py: 384) */
#define PP_OMNIJEV_MAX_STILLS 16             /* stills in state.images (several = one panel); each
                                                within the image limits above, before decoding */

/* Question types; the values are the heads' type ids τ (spec §8.2). */
enum pp_omnijev_type {
  PP_OMNIJEV_NOUL = 0,   /* one option "yes"; answer noul = P(true) */
  PP_OMNIJEV_CHOICE = 1, /* options + abstain; answer choice, probabilities, abstain, valid */
  PP_OMNIJEV_SCORE = 2,  /* ordered levels; answer score, probabilities */
};

/* Calibration of head_meta.json as the export records it (spec §9.1). */
struct pp_omnijev_calib {
  double temperature[3]; /* T per type (noul, choice, score), full precision */
  double noul_bias;      /* log-odds bias b added before the noul temperature */
};

/* Token ids the prompts and readouts need, read from the model's tokenizer. */
struct pp_omnijev_ids {
  int32_t opt;          /* <|opt|> (248077 in the release) */
  int32_t opt_end;      /* <|/opt|> (248078) */
  int32_t image_pad;    /* <|image_pad|> (248056) */
  int32_t vision_start; /* <|vision_start|> */
  int32_t vision_end;   /* <|vision_end|> */
};

/* What compile knows of a loaded model. */
struct pp_omnijev_model {
  const struct pp_tok *tok;         /* the model's tokenizer (with the option tokens), borrowed */
  struct pp_omnijev_ids ids;        /* special ids */
  struct pp_omnijev_calib calib;    /* calibration */
  struct pp_image_limits image_lim; /* decode and smart_resize bounds */
};

/* One compiled question. */
struct pp_omnijev_question {
  const char *id;             /* question id, borrowed from the body */
  enum pp_omnijev_type type;  /* type */
  size_t n_options;           /* K: answer keys = option texts = rows (0 only for an empty choice) */
  char **keys;                /* [n_options] answer keys (UTF-8, heap) */
  char **texts;               /* [n_options] rendered option texts (UTF-8, heap) */
  size_t first_row;           /* index of its first row in the request's rows */
  size_t n_rows;              /* rows: n_options, or 1 for an empty choice (the marker-less row) */
  uint32_t open_offset;       /* o: offset of <|opt|> in each of its rows (= len(head_q)) */
  size_t n_seq;               /* len(S_q), tokens, image expanded */
  char *prompt;               /* the rendered prompt text (single <|image_pad|>), heap */
};

/* A compiled request. */
struct pp_omnijev_request {
  json_object *body;                      /* parsed request, owned (ids borrow from it) */
  struct pp_omnijev_question *questions;  /* [n_questions], request order */
  size_t n_questions;                     /* questions */
  struct pp_image *images;                /* [n_images] the prepared still, or the video's frames */
  size_t n_images;                        /* 1 (a still or the panel), or the video's n_frames */
  int32_t *prefix_ids;                    /* [n_prefix] the shared prefix (from S_0) */
  int32_t *prefix_pos;                    /* [3, n_prefix] mRoPE positions, axis-major (T, H, W) */
  size_t n_prefix;                        /* L */
  int32_t p0;                             /* first row position: largest prefix position + 1 */
  int32_t *row_ids;                       /* [row_off[n_rows]] every row's ids, concatenated */
  size_t *row_off;                        /* [n_rows + 1] start of each row in row_ids */
  size_t n_rows;                          /* rows, grouped by question in question order */
  uint64_t input_tokens;                  /* usage: L + every row's length */
};

/* Reads the calibration and flags of a manifest's "omnijev" object (written by s1-export:
 * temperatures {noul, choice, score}, temperature, biases {noul}, norm, lm_feats, ordinal,
 * branch) and the special ids from the tokenizer. Ownership: tok stays borrowed.
 * Returns 0; -CM_EMISSING / -CM_EFORMAT naming the key, token or flag. */
int pp_omnijev_model_init(json_object *manifest, const struct pp_tok *tok,
                          struct pp_omnijev_model *ret_model, struct cm_diag *diag);

/* Validates and compiles a parsed request body (spec §2-§5): the contract (allow-lists, types,
 * limits, reserved marker text), the image (decode, smart_resize, patches), several stills
 * (2..PP_OMNIJEV_MAX_STILLS without video: one panel, pp_image_panel, prepared as one image) or
 * the video form
 * (state.video {n_frames, cols, tile, timestamps, duration}: frame k is the tile at
 * (k mod cols, k div cols) of images[0], each prepared as its own image), option rendering
 * (200-code-point cut, region text with half-to-even rounding), the exact prompts, the shared
 * prefix L, one row per option, positions and usage.
 * Ownership: takes a new reference to `body`; *ret_req is heap (pp_omnijev_request_free).
 * Returns 0; -CM_EREQUEST naming the field; -CM_ELIMIT naming the limit; the image's
 * -CM_EFORMAT / -CM_ELIMIT (422); -ENOMEM. Source: mso/infer.py _options/_prompt/ask_branch,
 * mso/branch.py rows_from_ids/_marks, records.render_option, the native port's contract.rs. */
int pp_omnijev_compile(const struct pp_omnijev_model *model, json_object *body,
                       struct pp_omnijev_request **ret_req, struct cm_diag *diag);
void pp_omnijev_request_free(struct pp_omnijev_request *req);

/* ---- finishing (spec §9) ------------------------------------------------------------------ */

/* Python round(x, 4): correctly rounded from the exact binary value, exact ties to even. */
double pp_omnijev_round4(double x);

/* The reference's _scale: unchanged when |T - 1| < 1e-6, else w_i = max(1e-9, v_i)^(1/T) and
 * w / Σw (float64, summed left to right). Shapes: v[n] in, out[n] (may alias v). */
void pp_omnijev_scale(const double *v, size_t n, double temperature, double *out);

/* Jev confidence of a float32 vector: clamp((k·max − 1)/(k − 1), 0, 1) in float32, 1 if k < 2. */
float pp_omnijev_jev(const float *p, size_t k);

/* Noul: bias before temperature (spec §9.3). Returns the unrounded probability. */
double pp_omnijev_finish_noul(const struct pp_omnijev_calib *calib, float mu);

/* Choice (spec §9.4). Shapes: mu[k] float32 head outputs (k ≥ 1); ret_probs[k] (doubles holding
 * the float32 storage values). Writes abstain, valid, confidence (unrounded) and the first argmax. */
void pp_omnijev_finish_choice(const struct pp_omnijev_calib *calib, const float *mu, size_t k,
                              double *ret_probs, double *ret_abstain, bool *ret_valid,
                              double *ret_confidence, size_t *ret_argmax);

/* Score (spec §9.5). Shapes: mu[k] (k ≥ 1); ret_probs[k] renormalized float64. */
void pp_omnijev_finish_score(const struct pp_omnijev_calib *calib, const float *mu, size_t k,
                             double *ret_probs, double *ret_confidence, size_t *ret_argmax);

/* Writes the response body {"model": "tinnel123/OmniJev", "answers": {...}, "usage": {...}} as
 * the reference's json.dumps would. Shapes: mu[q] points at question q's K float32 head outputs
 * (unused for an empty choice). Units: latency_s is the request's measured seconds, split evenly
 * over the questions (spec §9.8). Ownership: *ret_json malloc'd, NUL-terminated, length *ret_n.
 * Returns 0; -CM_EINTERNAL for a non-finite head output; -ENOMEM. */
int pp_omnijev_finish(const struct pp_omnijev_model *model, const struct pp_omnijev_request *req,
                      const float *const *mu, double latency_s, char **ret_json, size_t *ret_n,
                      struct cm_diag *diag);

#endif
