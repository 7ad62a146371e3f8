/* The program (DESIGN.md "The program"): a family-agnostic forest of token segments plus readouts,
 * sent by a preprocessor to an executor, the result that comes back, and the CANCEL of a request. Images feed the
 * <|image_pad|> slots of prefixes; prefixes may continue other prefixes and leave a snapshot;
 * rows continue one snapshot (or start empty) and never see each other; readouts pick a row
 * position. Ownership: every array in these structs is heap-owned by the struct (the decoders and
 * the proto_program_add_* builders allocate; proto_program_fini / proto_result_fini free). */
#ifndef S1_PROTO_PROGRAM_H
#define S1_PROTO_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/* One image: pixel patches and its grid. */
struct proto_image {
  float *pixels;        /* [n_patches, PROTO_PATCH_DIM] float32, patch order of the processor */
  uint32_t n_patches;   /* = grid_thw[0] · grid_thw[1] · grid_thw[2] */
  int32_t grid_thw[3];  /* (t, h, w) in patches; t = 1, h and w even */
};

/* One prefix: a token segment that leaves a snapshot at its end. */
struct proto_prefix {
  int32_t *ids;         /* [n_tokens] token ids; each image contributes h·w/4 <|image_pad|> ids */
  int32_t *pos;         /* [3, n_tokens] mRoPE position ids, rows T, H, W */
  uint32_t n_tokens;    /* ≥ 1 */
  int32_t parent;       /* index of the prefix it continues (< own index), or -1 for none */
  uint32_t *images;     /* [n_images] indices into program images, in slot order */
  uint32_t n_images;    /* images feeding this prefix's <|image_pad|> runs */
};

/* One row: a token segment continuing one snapshot; rows never see each other. */
struct proto_row {
  int32_t *ids;         /* [n_tokens] token ids (text only) */
  int32_t *pos;         /* [3, n_tokens] mRoPE position ids */
  uint32_t n_tokens;    /* ≥ 1 */
  int32_t prefix;       /* index of the prefix snapshot it continues, or -1 (empty state) */
};

/* What a readout returns. */
enum proto_readout_kind {
  PROTO_READOUT_HIDDEN,        /* final-norm hidden [H] fp32 */
  PROTO_READOUT_LABEL_LOGITS,  /* LM-head logits of ids [n_ids], rounded as the model rounds */
  PROTO_READOUT_TOKEN_LOGPROB, /* log-softmax over the full vocabulary, at ids [n_ids] */
  PROTO_READOUT_HEAD,          /* a learned head over the hidden row: [head's width] fp32 */
  PROTO_READOUT_COUNT,
};

/* One readout request. */
struct proto_readout {
  enum proto_readout_kind kind; /* what to return */
  uint32_t row;                 /* row index */
  int32_t position;             /* token index in the row; negative counts from the end (-1 last) */
  int32_t *ids;                 /* [n_ids] label / target ids (LABEL_LOGITS, TOKEN_LOGPROB), or
                                   a HEAD's optional integer arguments (a group head's layout) */
  uint32_t n_ids;               /* 0 for HIDDEN; optional for HEAD */
  char *head;                   /* head name for HEAD (e.g. "open_jev_scalar"), else NULL */
};

/* A program. */
struct proto_program {
  char *model_id;                 /* model the preprocessor compiled for */
  char *request_id;               /* for logs and records */
  int64_t deadline_us;            /* absolute deadline, proto_now_us() clock; 0 = none */
  struct proto_image *images;     /* [n_images] */
  uint32_t n_images;
  struct proto_prefix *prefixes;  /* [n_prefixes]; a parent always precedes its children */
  uint32_t n_prefixes;
  struct proto_row *rows;         /* [n_rows] */
  uint32_t n_rows;
  struct proto_readout *readouts; /* [n_readouts] */
  uint32_t n_readouts;
  uint32_t cap_images, cap_prefixes, cap_rows, cap_readouts; /* builder capacities */
};

/* Executor-side timings of one program, µs: where its time went. A step's launch is shared by
 * the programs in it in proportion to their tokens; queue + vision + prefix + rows + readout +
 * heads + wait = total. */
#define PROTO_EXEC_TIMINGS 9 /* entries of "t" in a RESULT */
struct proto_exec_timings {
  int64_t queue_us;   /* arrival to admission (waiting for the loop or for snapshot memory) */
  int64_t vision_us;  /* its images through the vision tower */
  int64_t prefix_us;  /* its share of the launches that ran its prefix pieces */
  int64_t rows_us;    /* its share of the launches that ran its rows */
  int64_t readout_us; /* its rows' readouts: logits, log-probs, group-head rows */
  int64_t heads_us;   /* its heads at the end */
  int64_t wait_us;    /* admitted, while steps ran other programs' work */
  int64_t total_us;   /* arrival to result */
  int64_t steps;      /* steps it took part in (a count, not µs) */
};

/* The result of a program: a status and, on success, one float32 array per readout. */
struct proto_result {
  int status;                       /* 0, or a negative cm code (-CM_EPROGRAM, -CM_EUNAVAILABLE...) */
  char *message;                    /* error message, NULL on success */
  float **outputs;                  /* [n_outputs][n_floats[i]] float32, readout order */
  uint32_t *n_floats;               /* [n_outputs] */
  uint32_t n_outputs;               /* = program n_readouts on success, 0 on error */
  struct proto_exec_timings timings; /* µs */
  char *numerics; /* "fp32" / "bf16": the mode that computed the outputs, or NULL */
};

/* Builders (for families): append a deep copy of the arrays given and return the new index.
 * Shapes: ids [n]; pos [3, n] or NULL (text: every axis = start + t, where start is one past the
 * largest position of the parent / continued prefix, 0 without one); pixels [n_patches, 1536].
 * Returns 0; -EINVAL (index out of range, n == 0, a limit above), -ENOMEM. */
int proto_program_add_image(struct proto_program *p, const float *pixels, uint32_t n_patches,
                            const int32_t grid_thw[3], uint32_t *ret_index);
/* proto_program_add_image without the copy: the program takes the malloc'd pixel buffer
 * *pixels ([n_patches, 1536]) and sets *pixels = NULL; on failure it stays the caller's. */
int proto_program_take_image(struct proto_program *p, float **pixels, uint32_t n_patches,
                             const int32_t grid_thw[3], uint32_t *ret_index);
int proto_program_add_prefix(struct proto_program *p, const int32_t *ids, const int32_t *pos,
                             uint32_t n, int32_t parent, const uint32_t *images,
                             uint32_t n_images, uint32_t *ret_index);
int proto_program_add_row(struct proto_program *p, const int32_t *ids, const int32_t *pos,
                          uint32_t n, int32_t prefix, uint32_t *ret_index);
int proto_program_add_readout(struct proto_program *p, enum proto_readout_kind kind, uint32_t row,
                              int32_t position, const int32_t *ids, uint32_t n_ids,
                              const char *head, uint32_t *ret_index);
/* Sets model_id / request_id (copied). Returns 0 or -ENOMEM. */
int proto_program_set_ids(struct proto_program *p, const char *model_id, const char *request_id);

/* Structural check shared by encode and decode: indices in range, parents before children, image
 * slots match image sizes' count, positions of readouts inside their rows, limits.
 * Returns 0 or -CM_EFORMAT naming the field. (Token ids against the vocabulary are the executor's
 * check: -CM_EPROGRAM.) */
int proto_program_check(const struct proto_program *p, struct cm_diag *diag);

/* Encode (program read only; ret_bytes heap; floats as msgpack bin, little-endian) and validating
 * decode (heap copies, aligned; written only on success; runs proto_program_check).
 * Returns 0; -EINVAL / -CM_EFORMAT (named field), -CM_EVERSION, -ENOMEM. */
int proto_program_encode(const struct proto_program *p, struct proto_bytes *ret_bytes);
/* proto_program_encode into memory the caller provides, in one exact-size allocation: the bytes
 * are counted first (the large bins are not copied to count them), then alloc(arg, n) must
 * return n writable bytes (e.g. a transport message's body, so the program is not copied again;
 * NULL: -ENOMEM), which are filled with the same bytes proto_program_encode gives.
 * Ownership: the buffer stays the caller's, also on failure. Returns 0 (*ret_len = n); -EINVAL
 * (the program fails proto_program_check); -ENOMEM. */
int proto_program_encode_into(const struct proto_program *p, void *(*alloc)(void *arg, size_t n),
                              void *arg, size_t *ret_len);
int proto_program_decode(const void *data, size_t n_bytes, struct proto_program *ret,
                         struct cm_diag *diag);
void proto_program_fini(struct proto_program *p);

/* Sets result outputs: allocates n_outputs arrays of the given sizes (zeroed).
 * Returns 0, -EINVAL (over PROTO_MAX_OUT_FLOATS), -ENOMEM. */
int proto_result_alloc(struct proto_result *r, uint32_t n_outputs, const uint32_t *n_floats);
/* Sets an error status and message (copied; replaces outputs). Returns `status`. */
int proto_result_set_error(struct proto_result *r, int status, const char *message);
int proto_result_encode(const struct proto_result *r, struct proto_bytes *ret_bytes);
int proto_result_decode(const void *data, size_t n_bytes, struct proto_result *ret,
                        struct cm_diag *diag);
void proto_result_fini(struct proto_result *r);

/* CANCEL (preprocessor → executor, a REQ on the program socket, answered by ACK): the client of
 * request `request_id` is gone; the executor drops the remaining work of every program with that
 * request id and answers each with -CM_ECANCELLED. */
struct proto_cancel {
  char *request_id; /* the programs' request_id, 1 ≤ bytes ≤ PROTO_MAX_ID_BYTES, no NUL */
};

/* Encode (read only; ret_bytes heap) and validating decode (heap copy; written only on success).
 * Returns 0; -EINVAL (encode: request_id NULL, empty or over the limit), -CM_EFORMAT (decode:
 * unknown, duplicate or missing key, wrong type, empty or over-long id; diag names the field),
 * -CM_EVERSION, -ENOMEM. Implemented in proto_cancel.c. */
int proto_cancel_encode(const struct proto_cancel *c, struct proto_bytes *ret_bytes);
int proto_cancel_decode(const void *data, size_t n_bytes, struct proto_cancel *ret,
                        struct cm_diag *diag);
/* Frees the owned id and zeroes; accepts NULL and zeroed structs. */
void proto_cancel_fini(struct proto_cancel *c);

#endif
