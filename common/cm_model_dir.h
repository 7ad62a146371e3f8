/* The s1serve model directory (format "s1serve-model/1") that s1-export writes and every process
 * loads: s1-model.json (manifest), weights.safetensors, optional heads.safetensors / adapter
 * safetensors, tokenizer.json. Opening verifies the format id and the SHA-256 of every listed file
 * before anything is used. The family-specific fields stay JSON for the families to read. */
#ifndef S1_CM_MODEL_DIR_H
#define S1_CM_MODEL_DIR_H

#include <json-c/json.h>
#include <stdbool.h>

#include "cm_error.h"
#include "cm_safetensors.h"

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

/* Opens and verifies a model directory (format, family known, every file's SHA-256, required keys).
 * A listed file is not re-hashed when the verified-file cache (cm_verify_cache.h) records it with
 * the manifest's SHA-256 and the same st_dev, st_ino, st_size, st_mtim and st_ctim; every other file
 * is hashed (the first open always hashes everything) and, when it matches and was last changed at
 * least 2 s before, recorded. Cache: $S1_CACHE_DIR, else $XDG_CACHE_HOME/s1serve, else
 * $HOME/.cache/s1serve, file verified-files.json; S1_VERIFY=always turns it off. A missing or
 * corrupt cache only means hashing; a cache never turns a mismatch into a pass.
 * n_files_hashed / n_files_cached count what this open did.
 * Ownership: *ret_dir is heap-owned, freed with cm_model_dir_free.
 * Returns: 0; -ENOENT / -CM_EMISSING (file or key absent), -CM_EFORMAT (bad JSON or format id),
 * -CM_EHASH (hash mismatch), -CM_EUNSUPPORTED (unknown family), or a cm_safetensors_open error.
 * `diag` names the file (and tensor or key). */
int cm_model_dir_open(const char *path, struct cm_model_dir **ret_dir, struct cm_diag *diag);
void cm_model_dir_free(struct cm_model_dir *dir);

/* True for a family whose loader this build has ("qwen3_5", "open_jev", "omnijev", "jemm"). */
bool cm_model_family_known(const char *family);

/* Hashes dir/name and records {"sha256": hex, "bytes": n} under files[name] (used by writers).
 * Returns 0 or cm_sha256_file's error. */
int cm_model_dir_add_file(json_object *files, const char *dir, const char *name,
                          struct cm_diag *diag);

/* Builds the head of a manifest in the key order s1-export writes: format, family, config, vision,
 * tokenizer {"file": tokenizer_file}, chat {"prefix": "", "suffix": ""} (placeholders the families
 * fill), image_processor (or null), calibration {}, limits (the CM_LIMIT_* defaults above). The
 * caller adds upstream, the adapter block and files (s1-export, s1-mkmodel --s1-out).
 * Ownership: takes a new reference on config and image_processor (NULL: null); the result is the
 * caller's (json_object_put). Returns NULL when out of memory. */
json_object *cm_model_dir_manifest_new(const char *family, json_object *config, bool vision,
                                       const char *tokenizer_file, json_object *image_processor);

/* Writes `manifest` to dir/s1-model.json (pretty, 2-space indent). Returns 0 or -EIO. */
int cm_model_dir_write_manifest(const char *dir, json_object *manifest, struct cm_diag *diag);

#endif
