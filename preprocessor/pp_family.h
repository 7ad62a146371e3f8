/* The model-family interface of the preprocessor and the registry by family name. A family turns
 * a parsed request into a program for the executor (compile) and the program's result into the
 * response JSON (finish). The preprocessor's main owns sockets, strict JSON parsing (duplicate
 * keys, NaN, surrogates and depth are refused before a family sees the request), model routing by
 * id / alias, deadlines and errors; a family only reads the model directory and its request.
 * To add a family: define `const struct pp_family pp_family_<name>` in families/<name>.c (meson
 * picks the file up when it exists) and list it in pp_family.c. */
#ifndef S1_PP_FAMILY_H
#define S1_PP_FAMILY_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"
#include "cm_model_dir.h"
#include "proto_program.h"

/* How a loaded model presents itself (routing, /v1/models, headers). Borrowed from the model
 * state: valid until the family's free. */
struct pp_model_desc {
  const char *id;               /* public model id, the response's "model" (e.g. "Qwen/Qwen3.5-9B") */
  const char *const *aliases;   /* [n_aliases] other names a request's "model" may use */
  size_t n_aliases;             /* count */
  const char *revision;         /* model revision for x-model-revision (e.g. a checkpoint hash) */
  json_object *describe;        /* the /v1/models entry: id, aliases, family, question types,
                                   candidate limits, image limits, max tokens */
};

/* Per-request facts the preprocessor gives compile and finish. Times on the proto_now_us() clock. */
struct pp_request_info {
  const char *request_id;  /* x-request-id */
  int64_t deadline_us;     /* absolute deadline (µs) */
  int64_t received_us;     /* when the preprocessor took the job (µs) */
  int64_t compile_end_us;  /* end of compile (µs); set by the preprocessor before finish */
};

/* Counts finish reports for /metrics. */
struct pp_finish_stats {
  uint64_t tokens;    /* input tokens over all sequences of the request */
  uint64_t decisions; /* questions answered */
};

struct pp_family {
  const char *name; /* manifest "family" value, e.g. "open_jev" */

  /* Loads the family's state from an opened, verified model directory (tokenizer, manifest
   * fields, limits). The directory stays open while the model is loaded; the state may borrow
   * from it. Ownership: *ret_model is freed with free(). Returns 0 or a negative code with diag
   * naming the file or key. */
  int (*load)(const struct cm_model_dir *dir, void **ret_model, struct cm_diag *diag);

  /* Fills *ret_desc with borrowed pointers into the state. */
  void (*describe)(const void *model, struct pp_model_desc *ret_desc);

  /* Validates the request and compiles it. `request` is the whole parsed body (a JSON object,
   * strictly parsed, its "model" already resolved to this model). Every limit is checked here,
   * before any executor work. Ownership: *ret_program is zero-initialised by the caller and
   * filled with the proto_program_add_* builders (the caller sets model/request ids and the
   * deadline, sends it and frees it); *ret_ctx (may be NULL) is the per-request finish context,
   * freed with ctx_free. Thread-safety: called concurrently from several worker threads on one
   * model state (the state is read-only after load).
   * Returns 0; -CM_EREQUEST / -CM_ELIMIT (422), -CM_EJSON (400), -CM_ETOOLARGE (413),
   * -CM_EMEDIA (415) with diag naming the field (e.g. "questions.q1.criteria: ..."); other
   * negative codes become 500. */
  int (*compile)(const void *model, json_object *request, const struct pp_request_info *info,
                 struct proto_program *ret_program, void **ret_ctx, struct cm_diag *diag);

  /* Turns a successful result (result->status == 0, one output per readout in program order)
   * into the response JSON. Ownership: *ret_json is heap (free()), *ret_len its length
   * (no NUL counted). Returns 0, or a negative code (500 internal) with diag. */
  int (*finish)(const void *model, void *ctx, const struct proto_result *result,
                const struct pp_request_info *info, char **ret_json, size_t *ret_len,
                struct pp_finish_stats *ret_stats, struct cm_diag *diag);

  void (*ctx_free)(void *ctx);  /* frees a compile context; accepts NULL */
  void (*free)(void *model);    /* frees a loaded state; accepts NULL */
};

/* The family registered under `name`, or NULL. */
const struct pp_family *pp_family_find(const char *name);

/* Names of every registered family, NULL-terminated (static). */
const char *const *pp_family_names(void);

#endif
