/* The job (frontend → preprocessor) and the reply (preprocessor → frontend): one HTTP request in
 * and one HTTP answer out. The frontend parses no model JSON; the body travels as raw bytes.
 * Ownership: decoders return owned copies (heap); free with the matching _fini. */
#ifndef S1_PROTO_JOB_H
#define S1_PROTO_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/* One HTTP request handed to a preprocessor. */
struct proto_job {
  uint64_t job_id;     /* frontend's id for this hand-off (unique per frontend run) */
  char *request_id;    /* x-request-id (client's or generated), NUL-terminated, ≤ 256 bytes */
  int64_t deadline_us; /* absolute deadline, proto_now_us() clock */
  char *model;         /* x-model header if the client sent one, else NULL */
  char *body;          /* [n_body] raw request body (not NUL-terminated; may hold NULs) */
  size_t n_body;       /* body length, ≤ PROTO_MAX_BODY_BYTES */
};

/* Timings of one request, µs: the frontend's queue, the preprocessor's parts, and where the
 * executor's part went (its proto_exec_timings; 0 when the request never reached one). */
#define PROTO_REPLY_TIMINGS 10 /* entries of "t" in a reply */
struct proto_timings {
  int64_t queue_us;      /* frontend queue wait (filled by the frontend) */
  int64_t preprocess_us; /* JSON parse + compile */
  int64_t execute_us;    /* executor round trip */
  int64_t finish_us;     /* finish step */
  int64_t ex_queue_us;   /* executor: arrival to admission */
  int64_t vision_us;     /* executor: vision tower */
  int64_t prefix_us;     /* executor: its share of the prefix launches */
  int64_t rows_us;       /* executor: its share of the row launches */
  int64_t heads_us;      /* executor: readouts (logits, log-probs) and heads */
  int64_t wait_us;       /* executor: in flight while other programs' work ran */
};

/* The answer to one job: an HTTP status, an error type (NULL on 200) and a JSON body. */
struct proto_reply {
  uint64_t job_id;              /* copied from the job */
  int status;                   /* HTTP status (200, 4xx, 5xx) */
  char *error_type;             /* wire.md error type, NULL when status is 200 */
  char *body;                   /* [n_body] response JSON (success or the error shape) */
  size_t n_body;                /* body length */
  char *model_revision;         /* x-model-revision header value, NULL when unknown */
  char *numerics;               /* x-numerics: "fp32" / "bf16", the mode that computed the answer;
                                   NULL when no executor did (errors before or at execution) */
  struct proto_timings timings; /* µs */
  uint64_t tokens;              /* input tokens of the request (metrics) */
  uint64_t decisions;           /* questions answered (metrics) */
};

/* ASK: a preprocessor's credit; carries the reply to its previous job, if any. A `last` ask
 * offers no credit (the preprocessor drains: SIGTERM): the frontend takes its reply and answers
 * ACK instead of a job. The frontend also answers ACK to a credit it gives back (the
 * preprocessor reported DRAINING). */
struct proto_ask {
  char *worker;             /* preprocessor id (e.g. "host:pid"), ≤ 256 bytes */
  bool last;                /* no credit: answer with ACK, never with a job */
  bool has_reply;           /* reply is set */
  struct proto_reply reply; /* the previous job's reply when has_reply */
};

/* Encoders: Ownership: the input is only read; ret_bytes is heap (proto_bytes_free).
 * Returns 0, -EINVAL (a field over its limit), -ENOMEM. */
int proto_job_encode(const struct proto_job *job, struct proto_bytes *ret_bytes);
int proto_ask_encode(const struct proto_ask *ask, struct proto_bytes *ret_bytes);

/* Validating decoders. Ownership: *ret is filled with heap copies (free with _fini); nothing
 * points into `data`. Written only on success. Returns 0; -CM_EFORMAT (type, length, missing,
 * unknown or duplicate key; diag names the field), -CM_EVERSION, -ENOMEM. */
int proto_job_decode(const void *data, size_t n_bytes, struct proto_job *ret,
                     struct cm_diag *diag);
int proto_ask_decode(const void *data, size_t n_bytes, struct proto_ask *ret,
                     struct cm_diag *diag);

/* Free owned fields and zero; accept NULL and zeroed structs. */
void proto_job_fini(struct proto_job *job);
void proto_reply_fini(struct proto_reply *reply);
void proto_ask_fini(struct proto_ask *ask);

#endif
