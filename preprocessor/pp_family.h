/* The model-family interface of the preprocessor, its one registration table (pp_family.c) and the
 * loading every family shares (pp_model_load: tokenizer, the /v1/models entry). A family turns a
 * parsed request into a program for the executor (compile) and the program's result into the
 * response JSON (finish). The preprocessor's main owns sockets, strict JSON parsing (duplicate
 * keys, NaN, surrogates and depth are refused before a family sees the request), model routing by
 * id / alias, deadlines and errors; a family only reads the model directory and its request.
 * Adding a family: its folder families/<name>/ (its code and `const struct pp_family
 * pp_family_<name>`), one line in pp_family.c's table, its name in families/meson.build; the name
 * must be in common/cm_family.c (test family_tables; families/README.md has the whole map). */
#ifndef S1_PP_FAMILY_H
#define S1_PP_FAMILY_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"
#include "cm_model_dir.h"
#include "pp_tok.h"
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
  const char *name;                   /* manifest "family" value (cm_family.h), e.g. "open_jev" */
  const char *const *question_types;  /* NULL-terminated, /v1/models "question_types" order */
  const char *const *heads;           /* NULL-terminated executor head kinds its programs name in
                                         HEAD readouts (executor/server/ex_head.c lists them) */

  /* Loads the family's state from an opened, verified model directory (manifest fields,
   * limits) and its tokenizer. The directory and the tokenizer stay alive while the model is
   * loaded; the state may borrow from both. Fills ret_desc's id, aliases, n_aliases and revision
   * (borrowed from the state or the directory); the caller builds describe. Ownership: *ret_model
   * is freed with free. Returns 0 or a negative code with diag naming the file or key. */
  int (*load)(const struct cm_model_dir *dir, const struct pp_tok *tok, void **ret_model,
              struct pp_model_desc *ret_desc, struct cm_diag *diag);

  /* Adds the family's keys to its /v1/models entry after id, aliases, family and question_types
   * (candidate_limits, image_limits, max_tokens, ...). */
  void (*describe)(const void *model, json_object *entry);

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

/* A loaded model: what every family shares, around the family's own state. */
struct pp_model {
  const struct pp_family *family; /* its registry entry */
  struct pp_tok *tok;             /* the directory's tokenizer.json, owned */
  void *state;                    /* the family's state, owned (family->free) */
  struct pp_model_desc desc;      /* id, aliases, revision from the family; describe owned here */
};

/* Loads the model of an opened directory: its family's entry, the tokenizer (dir->tokenizer_path),
 * the family's state, and the /v1/models entry {id, aliases, family, question_types, then the
 * family's keys}. `dir` must outlive the model. Ownership: *ret_model is heap, freed with
 * pp_model_free. Returns 0; -CM_EUNSUPPORTED (no preprocessor family of that name: diag names
 * the directory and family), the tokenizer's or the family's error; -ENOMEM. */
int pp_model_load(const struct cm_model_dir *dir, struct pp_model **ret_model,
                  struct cm_diag *diag);
void pp_model_free(struct pp_model *model); /* accepts NULL */

/* A JSON array [lo, hi] (a /v1/models range; families/pp_describe.c, in the families' library).
 * Returns NULL when out of memory. */
json_object *pp_describe_range(int64_t lo, int64_t hi);

/* The family registered under `name`, or NULL. */
const struct pp_family *pp_family_find(const char *name);

/* The registered families, NULL-terminated (static). */
const struct pp_family *const *pp_families(void);

#endif
