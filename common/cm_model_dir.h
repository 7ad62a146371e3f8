/* The s1serve model directory (format "s1serve-model/1") that s1-export writes and every process
 * loads: s1-model.json (manifest), weights.safetensors, optional heads.safetensors / adapter
 * safetensors, tokenizer.json. Opening verifies the format id and the SHA-256 of every listed file
 * before anything is used. The family-specific fields stay JSON for the families to read. */
#ifndef S1_CM_MODEL_DIR_H
#define S1_CM_MODEL_DIR_H

#include <json-c/json.h>

#include "cm_error.h"
#include "cm_safetensors.h"

struct cm_model_dir {
  char *path;                     /* directory path, heap copy */
  json_object *manifest;          /* parsed s1-model.json, owned */
  const char *family;             /* manifest "family": "qwen3_5", "open_jev", ...; borrowed */
  json_object *config;            /* manifest "config": the Hugging Face config.json object; borrowed */
  struct cm_safetensors *weights; /* weights.safetensors, owned */
  char *tokenizer_path;           /* absolute path of tokenizer.json, heap */
};

/* Opens and verifies a model directory (format, family known, every file's SHA-256, required keys).
 * Ownership: *ret_dir is heap-owned, freed with cm_model_dir_free.
 * Returns: 0; -ENOENT / -CM_EMISSING (file or key absent), -CM_EFORMAT (bad JSON or format id),
 * -CM_EHASH (hash mismatch), -CM_EUNSUPPORTED (unknown family), or a cm_safetensors_open error.
 * `diag` names the file (and tensor or key). */
int cm_model_dir_open(const char *path, struct cm_model_dir **ret_dir, struct cm_diag *diag);
void cm_model_dir_free(struct cm_model_dir *dir);

#endif
