/* The Qwen3.5 tensor inventory (spec qwen3_5.md §2): from a Hugging Face config.json object, the
 * canonical key, shape and allowed dtypes of every tensor, and a check of a safetensors set against
 * it (count, names, shapes, dtypes). Shared by s1-export, s1-mkmodel and the model-directory open.
 * It leaves out the forward itself and any config value that does not decide a shape. */
#ifndef S1_CM_QWEN35_H
#define S1_CM_QWEN35_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "cm_error.h"
#include "cm_safetensors.h"

/* Sizes read from the config (text_config and vision_config, or a flat text config). */
struct cm_qwen35_dims {
  int64_t vocab;          /* embedding rows */
  int64_t hidden;         /* H */
  int64_t intermediate;   /* I */
  int64_t n_layers;       /* decoder layers */
  bool *is_full;          /* [n_layers]: full attention (else Gated DeltaNet); heap */
  int64_t n_heads;        /* Hq */
  int64_t n_kv_heads;     /* Hkv */
  int64_t head_dim;       /* D */
  int64_t lin_k_heads;    /* Hk */
  int64_t lin_v_heads;    /* Hv */
  int64_t lin_k_dim;      /* dk */
  int64_t lin_v_dim;      /* dv */
  int64_t conv_kernel;    /* K */
  bool tied;              /* tie_word_embeddings: no lm_head.weight */
  bool has_vision_config; /* config has a vision_config object */
  int64_t v_depth;        /* vision blocks */
  int64_t v_hidden;       /* V */
  int64_t v_intermediate; /* F */
  int64_t v_in_channels;  /* 3 */
  int64_t v_patch;        /* patch_size */
  int64_t v_temporal;     /* temporal_patch_size */
  int64_t v_merge;        /* spatial_merge_size */
  int64_t v_n_pos;        /* num_position_embeddings */
  int64_t v_out_hidden;   /* O */
};

/* One expected tensor. */
struct cm_qwen35_tensor {
  char name[112];                   /* canonical key (ConditionalGeneration layout) */
  int n_dims;                       /* 1..5 */
  int64_t shape[5];                 /* sizes */
  bool f32_ok;                      /* F32 accepted besides BF16 (A_log, dt_bias; spec §2.2) */
};

/* Reads the sizes from a config.json object; `file` names it in messages.
 * Ownership: dims->is_full heap, freed by cm_qwen35_dims_fini. Returns 0; -CM_EMISSING (a key
 * absent: "FILE: key 'text_config.hidden_size' missing"); -CM_EFORMAT (wrong type or value <= 0,
 * layer_types length or values wrong). Source: spec §1.1-1.2. */
int cm_qwen35_dims_read(json_object *config, const char *file, struct cm_qwen35_dims *dims,
                        struct cm_diag *diag);
void cm_qwen35_dims_fini(struct cm_qwen35_dims *dims);

/* The expected tensors, text (§2.3) then vision (§2.4) when with_vision. Ownership: *ret_list
 * heap, freed with free(). Returns 0 or -ENOMEM. Count: §2.5. */
int cm_qwen35_inventory(const struct cm_qwen35_dims *dims, bool with_vision,
                        struct cm_qwen35_tensor **ret_list, size_t *ret_n);

/* Checks a canonical-layout weights file against the inventory: every tensor present, BF16 (or
 * F32 where allowed), with its shape, and nothing else. `file` names it in messages.
 * Returns 0; -CM_EMISSING ("FILE: tensor 'K' missing"); -CM_ESHAPE; -CM_EDTYPE; -CM_EFORMAT
 * (an unexpected tensor); -ENOMEM. */
int cm_qwen35_check(const struct cm_qwen35_dims *dims, bool with_vision,
                    const struct cm_safetensors *weights, const char *file, struct cm_diag *diag);

/* Formats a shape as "[a, b, c]" into buf (at least 16 * n_dims + 3 bytes). */
void cm_shape_str(const int64_t *shape, int n_dims, char *buf, size_t n_buf);

#endif
