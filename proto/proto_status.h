/* Health messages: STATUS (preprocessor → frontend: its executors' state and the models it serves,
 * which feed /health and /v1/models), its answer ACK (frontend → preprocessor: the jobs whose
 * clients have gone, to cancel) and HEALTH_REPLY (executor → preprocessor).
 * Ownership: decoders return heap copies; free with the matching _fini. */
#ifndef S1_PROTO_STATUS_H
#define S1_PROTO_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/* Serving state of an executor, or of a preprocessor's executors taken together. */
enum proto_state {
  PROTO_STATE_STARTING,    /* loading or warm-up not finished */
  PROTO_STATE_READY,       /* warm-up ran; serving */
  PROTO_STATE_UNAVAILABLE, /* retired after a sticky error, or unreachable */
  PROTO_STATE_DRAINING,    /* a preprocessor after SIGTERM: finishes its jobs, takes no new one */
  PROTO_STATE_COUNT,
};
/* "starting", "ready", "unavailable", "draining" */
const char *proto_state_name(enum proto_state s);

/* One model as a preprocessor serves it. */
struct proto_model {
  char *id;          /* model id (the family's public id) */
  char *revision;    /* model revision (x-model-revision) */
  char *describe;    /* the /v1/models entry as compact JSON text (id, aliases, family, limits) */
  uint32_t executors_ready; /* ready executors serving this model (0: requests for it get 503) */
};

/* An executor's counters since its start (and gauges, marked), as its health reply carries them;
 * they travel as one array of PROTO_EXEC_STATS unsigned integers in this order. */
#define PROTO_EXEC_STATS 23
#define PROTO_MAX_EXECUTORS 64 /* executors one STATUS reports */
struct proto_exec_stats {
  uint64_t steps;                /* scheduler steps that ran work */
  uint64_t step_programs;        /* Σ programs per step (÷ steps: the mean batch) */
  uint64_t step_tokens;          /* tokens launched (prefix pieces and rows) */
  uint64_t finished;             /* programs answered (every status) */
  uint64_t deadline_dropped;     /* programs dropped because their deadline passed */
  uint64_t cancelled;            /* programs dropped by a CANCEL */
  uint64_t prefix_hits;          /* prefix lookups that found a cached snapshot */
  uint64_t prefix_misses;        /* prefix lookups that found none */
  uint64_t prefix_evictions;     /* cached snapshots dropped for room */
  uint64_t prefix_inserts;       /* snapshots stored */
  uint64_t prefix_tokens_reused; /* prefix tokens not run thanks to a hit */
  uint64_t vision_hits;          /* images whose tower output was cached */
  uint64_t vision_misses;        /* images run through the tower */
  uint64_t vision_evictions;     /* cached tower outputs dropped for room */
  uint64_t vision_inserts;       /* tower outputs stored */
  uint64_t prefix_bytes;         /* gauge: bytes of cached snapshots */
  uint64_t prefix_entries;       /* gauge: cached snapshots */
  uint64_t vision_bytes;         /* gauge: bytes of cached tower outputs */
  uint64_t vision_entries;       /* gauge: cached tower outputs */
  uint64_t waiting;              /* gauge: programs waiting for admission */
  uint64_t active;               /* gauge: programs in flight */
  uint64_t pool_bytes;           /* gauge: the snapshot pool */
  uint64_t pool_reserved_bytes;  /* gauge: pool bytes reserved by programs in flight */
};

/* One executor in a STATUS: its instance id and counters from its last health reply. */
struct proto_exec_report {
  char *instance;               /* the executor's own id ("host:pid"), ≤ PROTO_MAX_ID_BYTES */
  struct proto_exec_stats stats; /* as of the last probe */
};

/* STATUS: a preprocessor's periodic report. */
struct proto_status {
  char *worker;                /* preprocessor id, ≤ 256 bytes */
  enum proto_state state;      /* READY when every executor finished warm-up and ≥ 1 is ready */
  char *reason;                /* why not ready (NULL when ready) */
  uint32_t executors_total;    /* executors configured */
  uint32_t executors_ready;    /* executors that answered READY to the last probe */
  uint32_t credits;            /* credits (parallel jobs) this preprocessor offers */
  struct proto_model *models;  /* [n_models] */
  uint32_t n_models;           /* ≤ PROTO_MAX_MODELS */
  struct proto_exec_report *executors; /* [n_executors] ready executors' counters (/metrics) */
  uint32_t n_executors;        /* ≤ PROTO_MAX_EXECUTORS */
};

/* HEALTH_REPLY: an executor's answer to a probe. */
struct proto_health {
  enum proto_state state; /* STARTING, READY or UNAVAILABLE (retired) */
  char *model_id;         /* model directory's id (manifest) */
  char *revision;         /* model revision */
  char *reason;           /* why not ready, NULL when ready */
  uint64_t programs;      /* programs run since start */
  char *numerics;         /* "fp32" / "bf16": the mode it serves; NULL before the model loaded */
  char *instance;         /* this executor's id ("host:pid"), NULL when unknown */
  struct proto_exec_stats stats; /* its scheduler's and caches' counters */
  char *digest;           /* the model directory's cm_model_dir.manifest_sha256 (64 hex), the key
                             preprocessors route by; NULL when not ready */
};

/* ACK to a STATUS: the frontend's job ids of this preprocessor's requests whose clients have gone
 * (each sent again in every ACK until the job's reply arrives; cancelling is idempotent). An ACK
 * without ids encodes exactly as proto_simple_encode(PROTO_KIND_ACK). */
#define PROTO_MAX_CANCEL 4096 /* job ids in one ACK */
struct proto_ack {
  uint64_t *cancel;   /* [n_cancel] job ids to cancel */
  uint32_t n_cancel;  /* ≤ PROTO_MAX_CANCEL */
};

/* Encoders (input read only; ret_bytes heap) and validating decoders (heap copies, written only on
 * success). Returns 0; -EINVAL (field over its limit, encode), -CM_EFORMAT (decode; diag names
 * the field), -CM_EVERSION, -ENOMEM. */
int proto_status_encode(const struct proto_status *s, struct proto_bytes *ret_bytes);
int proto_status_decode(const void *data, size_t n_bytes, struct proto_status *ret,
                        struct cm_diag *diag);
void proto_status_fini(struct proto_status *s);

int proto_ack_encode(const struct proto_ack *a, struct proto_bytes *ret_bytes);
int proto_ack_decode(const void *data, size_t n_bytes, struct proto_ack *ret,
                     struct cm_diag *diag);
void proto_ack_fini(struct proto_ack *a);

int proto_health_encode(const struct proto_health *h, struct proto_bytes *ret_bytes);
int proto_health_decode(const void *data, size_t n_bytes, struct proto_health *ret,
                        struct cm_diag *diag);
void proto_health_fini(struct proto_health *h);

#endif
