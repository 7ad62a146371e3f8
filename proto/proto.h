/* The messages between s1serve's processes: msgpack maps with short string keys, each carrying the
 * schema version "v" and the kind "k". Every decoder validates every field, type, length and
 * range, and refuses unknown or duplicate keys and another version (-CM_EVERSION), so a peer built
 * from another revision is refused at its first message. Sockets are not touched here. */
#ifndef S1_PROTO_H
#define S1_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"

/* 2: ASK carries "last" (a drain's final reply), STATUS may be DRAINING.
 * 3: a REPLY and a RESULT carry "numerics" (the mode that computed the answer).
 * 4: adds CANCEL (preprocessor → executor), the executor timings per step kind in RESULT, and
 *    the executor counters in HEALTH_REPLY and STATUS. */
#define PROTO_VERSION 4

/* Hard limits on what a decoder accepts (documented here, checked before any allocation). */
#define PROTO_MAX_ID_BYTES 256          /* request id, model id, worker id, head name */
#define PROTO_MAX_TEXT_BYTES 65536      /* messages, error texts, JSON descriptions */
#define PROTO_MAX_BODY_BYTES (64u << 20) /* HTTP body in a job or a reply */
#define PROTO_MAX_IMAGES 64             /* images per program */
#define PROTO_MAX_PATCHES (1 << 20)     /* pixel patches per image */
#define PROTO_PATCH_DIM 1536            /* floats per patch (3 · 2 · 16 · 16) */
#define PROTO_MAX_PREFIXES 4096         /* prefixes per program */
#define PROTO_MAX_ROWS 131072           /* rows per program (Open-Jev: up to 65,536 candidates) */
#define PROTO_MAX_TOKENS (1 << 22)      /* tokens summed over prefixes and rows */
#define PROTO_MAX_READOUTS 262144       /* readouts per program */
#define PROTO_MAX_READOUT_IDS 262144    /* label or target ids per readout */
#define PROTO_MAX_MODELS 64             /* models a preprocessor reports */
#define PROTO_MAX_ALIASES 16            /* aliases per model */
#define PROTO_MAX_OUT_FLOATS (1u << 28) /* floats over all readout outputs of one result */

/* Message kinds (value of "k"). */
enum proto_kind {
  PROTO_KIND_ASK,        /* preprocessor → frontend (REQ): a credit, optionally carrying a reply */
  PROTO_KIND_JOB,        /* frontend → preprocessor (REP answer to ASK): one HTTP request */
  PROTO_KIND_STATUS,     /* preprocessor → frontend (REQ): health and models, every ~200 ms */
  PROTO_KIND_ACK,        /* frontend → preprocessor: answer to STATUS */
  PROTO_KIND_PROGRAM,    /* preprocessor → executor (REQ): a program to run */
  PROTO_KIND_RESULT,     /* executor → preprocessor (REP answer to PROGRAM) */
  PROTO_KIND_HEALTH,     /* preprocessor → executor: health probe */
  PROTO_KIND_HEALTH_REPLY, /* executor → preprocessor: state, model id, revision */
  PROTO_KIND_CANCEL,     /* preprocessor → executor (REQ, answered by ACK): drop a request's work */
  PROTO_KIND_COUNT,
};

/* Reads the version and kind of a message without decoding the rest.
 * Returns 0; -CM_EFORMAT (not a msgpack map with "v" and "k"), -CM_EVERSION (v != PROTO_VERSION). */
int proto_peek(const void *data, size_t n_bytes, enum proto_kind *ret_kind, struct cm_diag *diag);

/* Name of a kind ("ask", "job", ..., "cancel"), static; "?" for an invalid value. */
const char *proto_kind_name(enum proto_kind kind);

/* Encoded bytes: heap (malloc) owned by the caller, freed with proto_bytes_free. */
struct proto_bytes {
  char *data;   /* [len] msgpack bytes */
  size_t len;   /* length in bytes */
};
void proto_bytes_free(struct proto_bytes *b);

/* A small message with only "v" and "k" (ACK, HEALTH). Returns 0 or -ENOMEM. */
int proto_simple_encode(enum proto_kind kind, struct proto_bytes *ret_bytes);
/* Checks a message is exactly {"v", "k": kind}. Returns 0, -CM_EFORMAT, -CM_EVERSION. */
int proto_simple_decode(const void *data, size_t n_bytes, enum proto_kind kind,
                        struct cm_diag *diag);

/* Current time in µs: CLOCK_REALTIME (deadlines travel between processes; hosts keep NTP). */
int64_t proto_now_us(void);

#endif
