/* The one reader of a Qwen3.5 config.json (spec qwen3_5.md §1, §2.7): every value that any part
 * uses (shapes, layer kinds, rotary, norms, token ids, the vision tower's settings), and from it the
 * tensor inventory (§2): the canonical key, shape and allowed dtypes of every tensor, and a check of
 * a safetensors set against it (count, names, shapes, dtypes). Used by the model-directory open,
 * s1-export, s1-mkmodel and the executor's model configs (ex_qwen35_config_parse,
 * ex_vision_config_parse), which add only the limits of their implementation. */
#ifndef S1_CM_QWEN35_H
#define S1_CM_QWEN35_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "cm_error.h"
#include "cm_safetensors.h"

/* Values read from the config (text_config and vision_config, or a flat text config). Strings are
 * borrowed from the config object (valid while it is). */
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
  double rms_eps;         /* rms_norm_eps, default 1e-6 */
  const char *hidden_act; /* text hidden_act (a JSON string's text), NULL when absent */
  bool attention_bias;    /* attention_bias true */
  bool has_rope_theta;    /* rope_theta found (rope_parameters, else the text config) */
  double rope_theta;      /* rotary base when has_rope_theta */
  const char *rope_type;  /* rope_parameters rope_type (or type), NULL when absent */
  int64_t rot_dims;       /* head_dim · partial_rotary_factor (default 0.25), truncated */
  int64_t mrope_section[3]; /* frequencies per axis (T, H, W), sum = rot_dims / 2 */
  int64_t image_token_id;        /* top level, else text config; -1 when absent or not an int */
  int64_t vision_start_token_id; /* as image_token_id */
  bool has_vision_config; /* config has a vision_config object; the v_ shape fields are set */
  int64_t v_depth;        /* vision blocks */
  int64_t v_hidden;       /* V */
  int64_t v_intermediate; /* F */
  int64_t v_in_channels;  /* 3 */
  int64_t v_patch;        /* patch_size */
  int64_t v_temporal;     /* temporal_patch_size */
  int64_t v_merge;        /* spatial_merge_size */
  int64_t v_patch_dim;    /* in_channels · temporal_patch_size · patch_size² */
  int64_t v_n_pos;        /* num_position_embeddings */
  int64_t v_out_hidden;   /* O */
  /* the tower's settings, set by cm_qwen35_vision_read only */
  int64_t v_num_heads;    /* attention heads of a block */
  int64_t v_head_dim;     /* V / num_heads, a multiple of 4 */
  int64_t v_pos_side;     /* √num_position_embeddings (a square) */
  bool v_gelu_erf;        /* block hidden_act "gelu" (exact erf); else "gelu_pytorch_tanh" */
  double v_rope_theta;    /* vision rotary base, default 10000 */
};

/* One expected tensor. */
struct cm_qwen35_tensor {
  char name[112];                   /* canonical key (ConditionalGeneration layout) */
  int n_dims;                       /* 1..5 */
  int64_t shape[5];                 /* sizes */
  bool f32_ok;                      /* F32 accepted besides BF16 (A_log, dt_bias; spec §2.2) */
};

/* Reads a config.json object (Qwen3_5ForConditionalGeneration with text_config and vision_config,
 * or a text-only Qwen3_5ForCausalLM config); `file` names it in messages. Of vision_config it reads
 * the keys that decide tensor shapes, with cm_qwen35_vision_read's code, ranges and defaults (depth,
 * hidden_size, intermediate_size, out_hidden_size, in_channels, patch_size, temporal_patch_size,
 * spatial_merge_size, num_position_embeddings); the tower's other settings are
 * cm_qwen35_vision_read's. Defaults are transformers 5.17's (head_dim 256,
 * linear_conv_kernel_dim 4, full_attention_interval 4, partial_rotary_factor 0.25).
 * Ownership: dims->is_full heap, freed by cm_qwen35_dims_fini; strings borrowed from config.
 * Returns 0; -CM_EMISSING (a key absent: "FILE: key 'text_config.hidden_size' missing", or the
 * rope_parameters); -CM_EFORMAT (wrong type or value <= 0, head counts that do not divide,
 * layer_types length or values wrong, not 3 mrope sections, a vision_config key); -CM_EUNSUPPORTED
 * (mRoPE not interleaved, sections not summing to rot_dims / 2: loader rule 9).
 * Source: spec §1.1-1.2, §2.7; configuration_qwen3_5.py (5.17). */
int cm_qwen35_dims_read(json_object *config, const char *file, struct cm_qwen35_dims *dims,
                        struct cm_diag *diag);

/* Reads a `vision_config` object into dims' v_ fields (and sets has_vision_config): the shape keys
 * as cm_qwen35_dims_read and the tower's settings (v_num_heads to v_rope_theta). Required:
 * depth, hidden_size, num_heads, intermediate_size, out_hidden_size. Optional with the transformers
 * defaults: in_channels 3, patch_size 16, temporal_patch_size 2, spatial_merge_size 2,
 * num_position_embeddings 2304, hidden_act "gelu_pytorch_tanh" (or "gelu"), rope_parameters
 * {rope_type "axial", rope_theta 10000}. Accepted model_type: "qwen3_5_vision", "qwen3_5" (older
 * checkpoints), or absent. Messages start "vision_config".
 * Returns 0; -CM_EMISSING (a required key); -CM_EFORMAT (a key of the wrong JSON type or out of
 * range, hidden_size not a multiple of num_heads, num_position_embeddings not a square);
 * -CM_EUNSUPPORTED (head_dim not a multiple of 4, another hidden_act, rope_type or model_type,
 * non-empty deepstack_visual_indexes). The v_ fields are written only on success.
 * Source: configuration_qwen3_5.py (5.17), modeling_qwen3_5.py (the vision tower). */
int cm_qwen35_vision_read(json_object *vision_config, struct cm_qwen35_dims *dims,
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
