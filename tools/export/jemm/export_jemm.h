/* The `--family jemm` part of s1-export (spec/jemm.md §9): on top of the Qwen3.5 export (BF16
 * backbone, the LoRA kept as fp32 factors or merged, tokenizer.json) it checks the adapter against
 * the pinned JEMM adapter's shape, reads decision_config.json, verifies the label token ids in the
 * exported tokenizer and writes the manifest's "jemm" and "chat" blocks. It leaves out the chat
 * template engine: the wrapper comes from --chat (written by recipe/jemm/chat_wrapper.py) or is
 * the Qwen3.5 wrapper of §3.11, checked against the base's template text. */
#ifndef S1_EXPORT_JEMM_H
#define S1_EXPORT_JEMM_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_qwen35.h"

/* What export.c knows when the Qwen3.5 part is written. */
struct export_jemm_in {
  const char *base;                  /* Hugging Face base directory */
  const char *adapter_dir;           /* PEFT adapter directory; JEMM needs one */
  const char *out;                   /* output directory; tokenizer.json already copied */
  const char *chat_path;             /* --chat JSON {"prefix", "suffix"}, or NULL */
  bool merged;                       /* the LoRA was merged into weights.safetensors */
  int64_t rank;                      /* adapter r */
  double alpha;                      /* adapter lora_alpha */
  size_t n_pairs;                    /* adapted language-model projections */
  size_t n_other_pairs;              /* factors on anything else (lm_head, vision) */
  const struct cm_qwen35_dims *dims; /* the base's sizes */
  int64_t image_token_id;            /* config image_token_id, -1 when absent */
};

/* Adds manifest "family" = "jemm", "jemm" {model_id, aliases, temperature, mm_temperature,
 * threshold, labels, label_token_ids, lora_mode, lora_rank, lora_alpha, lora_pairs,
 * untied_lm_head, max_tokens, max_mm_tokens, chat_source} and "chat" {prefix, suffix}, and each
 * file it read to `sources` ({"path", "sha256"}).
 * Checks: rank 16, alpha 32, one pair per language projection (8 per Gated DeltaNet layer, 7 per
 * attention layer: 496 on the 27B) and none elsewhere; an untied LM head; a finite positive
 * calibration; 32 labels that each encode to one distinct token; <|image_pad|> = the config's
 * image_token_id; a wrapper whose prefix holds the system message and whose suffix ends in
 * "<think>\n\n</think>\n\n".
 * Returns 0, or -1 after printing the reason to stderr. Source: jemm/model.py, jemm/contract.py,
 * the port's recipe/jemm/export.py checks (spec §9.7). */
int export_jemm(const struct export_jemm_in *in, json_object *manifest, json_object *sources);

#endif
