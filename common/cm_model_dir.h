/* The s1serve model directory (format "s1serve-model/1") that s1-export writes and every process
 * loads: s1-model.json (manifest), weights.safetensors, optional heads.safetensors / adapter
 * safetensors, tokenizer.json. Opening verifies the format id and the SHA-256 of every listed file
 * before anything is used. The family-specific fields stay JSON for the families to read. */
#ifndef S1_CM_MODEL_DIR_H
#define S1_CM_MODEL_DIR_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"
#include "cm_safetensors.h"

/* The two numerics modes; every rounding step of the request path belongs to exactly one.
 * CM_NUMERICS_FP32 reproduces the authors' code run in float32 (nothing is rounded to bf16: option
 * rows, heads, logits, features stay float32); CM_NUMERICS_BF16 reproduces their bf16 run (every
 * rounding transformers makes in bf16; the CPU backend's emulation and the CUDA engine). */
enum cm_numerics {
  CM_NUMERICS_FP32,
  CM_NUMERICS_BF16,
  CM_NUMERICS_COUNT,
};

/* "fp32" / "bf16" (NULL for a value out of range), and the reverse. Returns 0 or -EINVAL. */
const char *cm_numerics_name(enum cm_numerics numerics);
int cm_numerics_parse(const char *name, enum cm_numerics *ret_numerics);

struct cm_model_dir {
  char *path;                     /* directory path, heap copy */
  json_object *manifest;          /* parsed s1-model.json, owned */
  const char *family;             /* manifest "family": "qwen3_5", "open_jev", ...; borrowed */
  json_object *config;            /* manifest "config": the Hugging Face config.json object; borrowed */
  struct cm_safetensors *weights; /* weights.safetensors, owned */
  char *tokenizer_path;           /* absolute path of tokenizer.json, heap */
  bool vision;                    /* manifest "vision": the weights hold the vision tower */
  struct cm_safetensors *adapter; /* the kept LoRA file of manifest "adapter", owned; NULL if none */
  json_object *adapter_info;      /* manifest "adapter" {rank, alpha, scale, file}; borrowed; or NULL */
  enum cm_numerics numerics;      /* manifest "numerics": the default mode (absent: fp32) */
  struct cm_safetensors *f32_rows_file; /* manifest "embed_f32_rows" file, owned; NULL if none */
  struct cm_tensor_view f32_rows; /* its tensor [n_f32_rows, H] F32: embedding rows the release
                                     keeps in float32 (OmniJev's new_tok_emb.pt) */
  int32_t *f32_row_ids;           /* [n_f32_rows] the embedding rows they replace, heap */
  size_t n_f32_rows;              /* 0 without the block */
  int n_files_hashed;             /* listed files whose SHA-256 this open computed */
  int n_files_cached;             /* listed files the verified-file cache vouched for, unread */
  char manifest_sha256[65];       /* hex SHA-256 of the s1-model.json bytes opened: the identity of
                                     the directory's content (it lists every file's hash), which
                                     preprocessors and executors compare to route by model */
};

#define CM_MODEL_FORMAT "s1serve-model/1"
#define CM_MODEL_MANIFEST "s1-model.json"

/* Default request limits written to manifest "limits" by s1-export (documented in README.md). */
#define CM_LIMIT_MAX_PROMPT_TOKENS 32768    /* tokens per prompt, after image expansion */
#define CM_LIMIT_MAX_IMAGES 16              /* images per request */
#define CM_LIMIT_MAX_IMAGE_PIXELS 16777216  /* pixels per image (spec §1.4 longest_edge) */
#define CM_LIMIT_MAX_ROWS 256               /* continuation rows per request */
/* Request body limits by family when manifest limits.max_body_bytes is absent, each its
 * reference's: Open-Jev
 * 4 MiB (413), OmniJev's worker 12 MiB (413), JEMM 16,000,000 bytes (its reference's 422). */
#define CM_LIMIT_MAX_BODY_OPEN_JEV 4194304u
#define CM_LIMIT_MAX_BODY_OMNIJEV 12582912u
#define CM_LIMIT_MAX_BODY_JEMM 16000000u
#define CM_LIMIT_MAX_BODY_HARD (64u << 20)  /* no model may accept more (PROTO_MAX_BODY_BYTES) */

/* Opens and verifies a model directory (format, family known, every file's SHA-256, required keys).
 * Manifest "numerics" ("fp32" or "bf16", absent: "fp32") is the mode a server uses unless told
 * otherwise; "embed_f32_rows" {"file", "tensor", "ids"} names float32 rows of the embedding table
 * (the table itself is BF16 and holds them rounded): a listed safetensors file whose F32 tensor
 * [len(ids), hidden] replaces rows ids (distinct, in the vocabulary) in fp32; the bf16 mode rounds
 * them, which gives the table's own rows.
 * A listed file is not re-hashed when the verified-file cache (cm_verify_cache.h) records it with
 * the manifest's SHA-256 and the same st_dev, st_ino, st_size, st_mtim and st_ctim; every other
 * file is hashed (the first open always hashes everything) and, when it matches and was last
 * changed at least 2 s before, recorded. Cache: $S1_CACHE_DIR, else $XDG_CACHE_HOME/s1serve, else
 * $HOME/.cache/s1serve, file verified-files.json; S1_VERIFY=always turns it off. A missing or
 * corrupt cache only means hashing; a cache never turns a mismatch into a pass.
 * n_files_hashed / n_files_cached count what this open did.
 * Ownership: *ret_dir is heap-owned, freed with cm_model_dir_free.
 * Returns: 0; -ENOENT / -CM_EMISSING (file or key absent), -CM_EFORMAT (bad JSON or format id,
 * an unknown numerics, embed_f32_rows of the wrong shape, dtype or ids),
 * -CM_EHASH (hash mismatch), -CM_EUNSUPPORTED (a family not in cm_family.h), or a
 * cm_safetensors_open error.
 * `diag` names the file (and tensor or key). */
int cm_model_dir_open(const char *path, struct cm_model_dir **ret_dir, struct cm_diag *diag);

/* What a process reads of a model directory, for cm_model_dir_open_for. */
enum cm_model_dir_use {
  CM_MODEL_DIR_SERVE,   /* everything (executors, tools): cm_model_dir_open */
  CM_MODEL_DIR_COMPILE, /* what compiling requests reads (preprocessors): the manifest, checked as
                           cm_model_dir_open checks it (keys, format, family, config, the required
                           files listed), and the tokenizer file, hashed; no other listed file is
                           read, and it may be absent, so a preprocessor host needs only
                           s1-model.json and tokenizer.json. weights, adapter and f32_rows stay
                           NULL. The executors that run its programs verify everything and are
                           matched to it by manifest_sha256, which lists every file's hash. */
};

/* cm_model_dir_open for one use: CM_MODEL_DIR_SERVE is cm_model_dir_open; CM_MODEL_DIR_COMPILE
 * verifies the manifest and the tokenizer only (above). Same ownership, returns and messages. */
int cm_model_dir_open_for(const char *path, enum cm_model_dir_use use,
                          struct cm_model_dir **ret_dir, struct cm_diag *diag);
void cm_model_dir_free(struct cm_model_dir *dir);

/* The request body limit of a model, bytes: manifest limits.max_body_bytes (an integer in
 * 1 .. CM_LIMIT_MAX_BODY_HARD), else its family's max_body_bytes (cm_family.h; 4 MiB for one
 * without, the bare backbone).
 * Returns 0 with *ret_bytes; -CM_EFORMAT when limits.max_body_bytes is present and not such an
 * integer (diag names it). */
int cm_model_dir_max_body(const struct cm_model_dir *dir, uint64_t *ret_bytes,
                          struct cm_diag *diag);

/* Hashes dir/name and records {"sha256": hex, "bytes": n} under files[name] (used by writers).
 * Returns 0 or cm_sha256_file's error. */
int cm_model_dir_add_file(json_object *files, const char *dir, const char *name,
                          struct cm_diag *diag);

/* Builds the head of a manifest in the key order s1-export writes: format, family, numerics
 * ("fp32"; the writer may replace it), config, vision,
 * tokenizer {"file": tokenizer_file}, chat {"prefix": "", "suffix": ""} (placeholders the families
 * fill), image_processor (or null), calibration {}, limits (the CM_LIMIT_* defaults above; no
 * max_body_bytes: the family's default applies until a directory sets one). The
 * caller adds upstream, the adapter block and files (s1-export, s1-mkmodel --s1-out).
 * Ownership: takes a new reference on config and image_processor (NULL: null); the result is the
 * caller's (json_object_put). Returns NULL when out of memory. */
json_object *cm_model_dir_manifest_new(const char *family, json_object *config, bool vision,
                                       const char *tokenizer_file, json_object *image_processor);

/* Writes `manifest` to dir/s1-model.json (pretty, 2-space indent). Returns 0 or -EIO. */
int cm_model_dir_write_manifest(const char *dir, json_object *manifest, struct cm_diag *diag);

#endif
