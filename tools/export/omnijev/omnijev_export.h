/* The OmniJev part of s1-export (see omnijev_export.c): the hook that s1-export's main calls for
 * --family omnijev, and the checks of head_meta.json it applies. */
#ifndef S1_OMNIJEV_EXPORT_H
#define S1_OMNIJEV_EXPORT_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"

/* Runs `s1-export --family omnijev --base QWEN35_DIR --checkpoint OMNIJEV_DIR [--lora keep|merge]
 * --out DIR`; qwen_main is s1-export's own main, called once for the backbone and the LoRA.
 * Returns the process exit status: 0, 1 (failure, printed on stderr), 2 (bad usage). */
int ex_export_omnijev_main(int argc, char **argv, int (*qwen_main)(int, char **));

/* Checks a parsed head_meta.json (spec §9.1, §11.6 item 5): norm "softmax", lm_feats, ordinal and
 * branch true, temperatures (noul/choice/score, positive finite numbers, each optional with the
 * `temperature` fallback, default 1.0), biases holding no key but noul. Fills *ret_calib with the
 * manifest's "omnijev" calibration fields (new object, caller owns).
 * Returns 0; -CM_EFORMAT with diag naming the field. Source: mso/infer.py MSO1.__init__. */
int ex_omnijev_check_meta(json_object *meta, json_object **ret_calib, struct cm_diag *diag);

/* Makes the tokenizer.json at `path` hold <|opt|> and <|/opt|> as special added tokens with the
 * next two ids (records.add_option_tokens), unless it has them already, and checks them with the
 * project's tokenizer: they must be the last two ids. Shapes: ret_ids [2]. Units: *ret_vocab is
 * the tokenizer's length (ids). Returns 0, or -1 / a negative code after printing the reason. */
int ex_omnijev_option_tokens(const char *path, size_t *ret_vocab, int32_t ret_ids[2]);

#endif
