/* The Open-Jev part of s1-export (see open_jev_export.c): the package reader and the hook that
 * s1-export's main calls for --family open_jev. */
#ifndef S1_OPEN_JEV_EXPORT_H
#define S1_OPEN_JEV_EXPORT_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "cm_sha256.h"

/* Runs `s1-export --family open_jev ...` (options in its usage text); qwen_main is s1-export's
 * own main, called once for the backbone with a --family qwen3_5 argument vector.
 * Returns the process exit status: 0, 1 (failure, printed on stderr), 2 (bad usage). */
int ex_export_open_jev_main(int argc, char **argv, int (*qwen_main)(int, char **));

/* The upstream checkpoint_sha256 of a package directory: SHA-256 over every regular file under
 * `dir` in Python Path order (component-wise), each as its relative path in UTF-8, a NUL byte,
 * then its bytes. Shapes: ret_hex gets 64 hex digits + NUL.
 * Returns 0, -1 (message printed) or -ENOMEM. Source: upstream jev/serving.py at b9e6bdc5. */
int ex_open_jev_checkpoint_sha256(const char *dir, char ret_hex[CM_SHA256_HEX]);

/* Adds the family's manifest fields to `m` (a qwen3_5 manifest with "limits"): family, model_id
 * (the base id), revision and metadata.checkpoint_sha256 (package_hex), chat (the Qwen wrapper
 * of spec/open_jev.md §4.1), calibration and open_jev {model_id, aliases ("open-jev",
 * "jev-latest", the pinned base's alias, then `aliases`), temperature, max_length, method, head
 * (heads.safetensors keys open_jev.head.weight [1, H] / .bias [1]), metadata}, and the
 * family's request limits. Used by the export and by s1-mkmodel --s1-out --family open_jev.
 * Returns 0. Source: upstream jev/serving.py (spec §9). */
int ex_open_jev_manifest_add(json_object *m, const char *model_id, const char *base_revision,
                             const char *package_hex, double temperature, int64_t max_length,
                             bool has_adapter, const char *const *aliases, int n_aliases);

#endif
