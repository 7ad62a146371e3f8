/* The Qwen3.5 text backbone (hybrid Gated DeltaNet + gated full attention), one model code path
 * over struct ex_backend: config parsing, weights (float32 after load, optional unmerged LoRA),
 * the prefill forward to final-norm hidden rows, LM-head logits, and snapshots for continuation.
 * The vision tower is ex_vision.h; 3-axis positions for images come from the caller. */
#ifndef S1_EX_QWEN35_H
#define S1_EX_QWEN35_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"
#include "cm_safetensors.h"
#include "ex_backend.h"

#define EX_QWEN35_MAX_LAYERS 256
#define EX_QWEN35_GDN_CHUNK 64

/* Sizes and settings of the text tower, read from the Hugging Face config.json. */
struct ex_qwen35_config {
  int vocab_size;                       /* embedding / LM-head rows (padding rows included) */
  int hidden_size;                      /* H */
  int intermediate_size;                /* I, SwiGLU width */
  int n_layers;                         /* num_hidden_layers */
  bool full_attn[EX_QWEN35_MAX_LAYERS]; /* layer i is full attention (else Gated DeltaNet) */
  int n_heads;                          /* Hq, attention query heads */
  int n_kv_heads;                       /* Hkv */
  int head_dim;                         /* D */
  int rot_dims;                         /* rotary dims per head = D · partial_rotary_factor */
  int mrope_section[3];                 /* frequencies per axis (T, H, W), sum = rot_dims/2 */
  double rope_theta;                    /* rotary base (1e7) */
  int lin_k_heads;                      /* Hk, GDN q/k heads */
  int lin_v_heads;                      /* Hv, GDN value heads (multiple of Hk) */
  int lin_dk;                           /* GDN key head dim */
  int lin_dv;                           /* GDN value head dim */
  int conv_kernel;                      /* K, depthwise conv width (4) */
  float rms_eps;                        /* rms_norm_eps */
  bool tied;                            /* LM head = embed_tokens */
  int32_t image_token_id;               /* <|image_pad|>, -1 when the config has none */
  int32_t vision_start_token_id;        /* <|vision_start|>, -1 when absent */
};

/* Parses a config.json object (Qwen3_5ForConditionalGeneration with text_config, or a text-only
 * Qwen3_5ForCausalLM config) with the one config reader, cm_qwen35_dims_read (common/cm_qwen35.h:
 * keys, defaults, and its refusals: non-interleaved mRoPE, mrope sections not summing to
 * rot_dims/2, head counts that do not divide, a bad vision_config), and refuses besides what this
 * forward does not implement: non-default rotary, attention bias, an activation other than silu,
 * a value above 2^24, more than EX_QWEN35_MAX_LAYERS layers, a conv kernel above 16.
 * Returns 0; -CM_EMISSING (a key absent), -CM_EFORMAT (wrong type or value),
 * -CM_EUNSUPPORTED. `diag` names the key. Source: spec/qwen3_5.md §1.1, §2.7. */
int ex_qwen35_config_parse(json_object *cfg, struct ex_qwen35_config *ret_cfg,
                           struct cm_diag *diag);

/* A projection y = x·wᵀ, with an optional unmerged LoRA y += scale·(x·aᵀ)·bᵀ. */
struct ex_linear {
  float *w;      /* [n_out, n_in] float32 */
  float *lora_a; /* [rank, n_in] or NULL */
  float *lora_b; /* [n_out, rank] or NULL */
  size_t n_in;   /* input features */
  size_t n_out;  /* output features */
  size_t rank;   /* LoRA rank, 0 without LoRA */
};

/* One decoder layer's weights (float32). Only the mixer of the layer's kind is set. */
struct ex_qwen35_layer {
  bool full_attn;        /* mixer kind */
  float *input_norm;     /* [H] zero-centred */
  float *post_norm;      /* [H] zero-centred */
  struct ex_linear gate; /* mlp.gate_proj [I, H] */
  struct ex_linear up;   /* mlp.up_proj [I, H] */
  struct ex_linear down; /* mlp.down_proj [H, I] */
  struct ex_linear q;    /* self_attn.q_proj [Hq·2D, H], per head query then gate rows */
  struct ex_linear k;    /* self_attn.k_proj [Hkv·D, H] */
  struct ex_linear v;    /* self_attn.v_proj [Hkv·D, H] */
  struct ex_linear o;    /* self_attn.o_proj [H, Hq·D] */
  float *q_norm;         /* [D] zero-centred */
  float *k_norm;         /* [D] zero-centred */
  struct ex_linear qkv;  /* linear_attn.in_proj_qkv [2·Hk·dk + Hv·dv, H] */
  struct ex_linear z;    /* linear_attn.in_proj_z [Hv·dv, H] */
  struct ex_linear b;    /* linear_attn.in_proj_b [Hv, H] */
  struct ex_linear a;    /* linear_attn.in_proj_a [Hv, H] */
  struct ex_linear out;  /* linear_attn.out_proj [H, Hv·dv] */
  float *conv;           /* linear_attn.conv1d [conv_dim, K] */
  float *a_log;          /* linear_attn.A_log [Hv] */
  float *dt_bias;        /* linear_attn.dt_bias [Hv] */
  float *gdn_norm;       /* linear_attn.norm [dv], plain weight */
};

/* How the Gated DeltaNet core runs. */
enum ex_gdn_mode {
  EX_GDN_AUTO,      /* as the reference dispatches: recurrent for 1 token on a populated state */
  EX_GDN_CHUNKED,   /* always chunked (chunk 64 from the first token of the call) */
  EX_GDN_RECURRENT, /* always token by token */
};

/* A loaded model: float32 weights on the backend plus run options. */
struct ex_qwen35_model {
  struct ex_qwen35_config cfg;    /* parsed config */
  const struct ex_backend *be;    /* ops; &ex_backend_cpu */
  float *embed;                   /* embed_tokens [vocab, H] */
  float *final_norm;              /* norm [H] zero-centred */
  const float *lm_head;           /* [vocab, H]; == embed when tied */
  struct ex_qwen35_layer *layers; /* [n_layers] */
  float lora_scale;               /* alpha / rank of the kept adapter; 0 without one */
  bool round_bf16;                /* round where a bf16 oracle rounds (spec §3.5), off for fp32 */
  enum ex_gdn_mode gdn_mode;      /* EX_GDN_AUTO by default */
  void **owned;                   /* every heap buffer above, freed by ex_qwen35_model_free */
  size_t n_owned;                 /* entries in owned */
  size_t cap_owned;               /* capacity of owned */
};

/* Loads the text weights from a checkpoint, converting BF16/F16/F32 to float32. Keys resolve
 * with the prefixes "model.language_model.", "model.", "" (first that has embed_tokens); the head
 * falls back to embed_tokens when lm_head.weight is absent and the config is tied; mtp.* and
 * model.visual.* are ignored. The count of text tensors and every shape are checked. With
 * `adapter` (kept LoRA, canonical key + ".lora_A" [r, in] / ".lora_B" [out, r]) every factor must
 * land on a text projection, and lora_scale multiplies its product.
 * Ownership: *ret_model is heap-owned (ex_qwen35_model_free); st and adapter are only read.
 * Returns 0; -CM_EMISSING (tensor absent), -CM_ESHAPE (shape or count), -CM_EFORMAT (adapter
 * factor for no known projection), -ENOMEM. `diag` names the file and tensor.
 * Source: spec/qwen3_5.md §2.1-2.7. */
int ex_qwen35_model_load(const struct ex_qwen35_config *cfg, const struct cm_safetensors *st,
                         const struct cm_safetensors *adapter, float lora_scale,
                         struct ex_qwen35_model **ret_model, struct cm_diag *diag);

/* Replaces embedding rows ids[i] by rows[i]: the rows a release keeps in float32 (cm_model_dir
 * embed_f32_rows, OmniJev's new_tok_emb.pt). round_bf16 (the bf16 mode) rounds them to bf16 first,
 * as the reference's bf16 model casts them; fp32 keeps them. A tied LM head is the same table.
 * Shapes: ids [n] in [0, vocab); rows F32 [n, H]. Ownership: rows only read.
 * Returns 0; -CM_ESHAPE (dtype or shape); -EINVAL (an id outside the vocabulary); -ENOMEM.
 * Source: records.add_option_tokens (spec/omnijev.md §11.3). */
int ex_qwen35_set_embed_rows(struct ex_qwen35_model *m, const int32_t *ids,
                             const struct cm_tensor_view *rows, size_t n, bool round_bf16,
                             struct cm_diag *diag);

/* The bf16 numerics' load of the parameters a checkpoint may store wider than bf16
 * (linear_attn.A_log and dt_bias, spec §2.2: F32 allowed): each rounded to bf16 in place, as the
 * reference's bf16 model (and the CUDA engine's upload) casts them. The fp32 numerics keep them.
 * Source: transformers from_pretrained(dtype=bfloat16); twin: exc_qwen35 up_vector. */
void ex_qwen35_round_wide_params(struct ex_qwen35_model *m);

/* Allocates a model with every tensor zeroed and sized from cfg, for callers that fill weights
 * themselves (tests, future loaders). lora_rank > 0 also allocates zeroed factors for every
 * projection. Returns 0 or -ENOMEM. */
int ex_qwen35_model_alloc(const struct ex_qwen35_config *cfg, size_t lora_rank,
                          struct ex_qwen35_model **ret_model);

/* Frees the model and its weights; accepts NULL. */
void ex_qwen35_model_free(struct ex_qwen35_model *model);

/* Per-layer sequence state. */
struct ex_qwen35_layer_state {
  float *k;    /* full attention: post-norm, post-RoPE keys [cap, Hkv, D] */
  float *v;    /* full attention: values [cap, Hkv, D] */
  float *conv; /* GDN: last K−1 pre-conv qkv rows [K−1, conv_dim], oldest first */
  float *s;    /* GDN: recurrent state [Hv, dk, dv] fp32 */
};

/* The state of one sequence after its tokens so far: a snapshot when kept and cloned. */
struct ex_qwen35_state {
  size_t n_tokens;                      /* tokens seen (sequence positions 0..n_tokens−1) */
  int64_t rope_delta;                   /* text position = sequence position + rope_delta */
  size_t cap;                           /* KV rows allocated per full-attention layer */
  size_t n_layers;                      /* entries in layers */
  struct ex_qwen35_layer_state *layers; /* [n_layers] */
};

/* A fresh (empty) state, a deep copy (snapshot), and its release (accepts NULL).
 * Ownership: heap, caller frees with ex_qwen35_state_free. Returns 0 or -ENOMEM. */
int ex_qwen35_state_new(const struct ex_qwen35_model *model, struct ex_qwen35_state **ret_state);
int ex_qwen35_state_clone(const struct ex_qwen35_state *src, const struct ex_qwen35_model *model,
                          struct ex_qwen35_state **ret_state);
void ex_qwen35_state_free(struct ex_qwen35_state *state);

/* Token embeddings: out[t] = embed_tokens[tokens[t]].
 * Shapes: tokens [n]; out [n, H]. Returns 0, -EINVAL (id out of range, named in diag). */
int ex_qwen35_embed(const struct ex_qwen35_model *model, const int32_t *tokens, size_t n,
                    float *out, struct cm_diag *diag);

/* Runs n new rows after the state's tokens and advances the state (KV appended, conv windows and
 * recurrent states updated). A continuation from a cloned snapshot equals the one-pass forward.
 * Shapes: embeds [n, H] (token embeddings, image rows already scattered); pos [3, n] int32 mRoPE
 * ids (rows T, H, W) or NULL for text (n_tokens + rope_delta + t on every axis);
 * ret_hidden [n, H]: the final-norm hidden rows.
 * Ownership: caller's host buffers; the state grows its KV cache as needed.
 * Returns 0; -EINVAL (n == 0), -ENOMEM. Source: spec/qwen3_5.md §3-5; oracle transformers 5.17
 * Qwen3_5TextModel.forward (fp32, eager). */
int ex_qwen35_forward(const struct ex_qwen35_model *model, struct ex_qwen35_state *state,
                      const float *embeds, const int32_t *pos, size_t n, float *ret_hidden,
                      struct cm_diag *diag);

/* One sequence of a packed forward (ex_qwen35_forward_packed). */
struct ex_qwen35_seq {
  struct ex_qwen35_state *state; /* continued; NULL: a fresh sequence (only when !advance) */
  bool advance;       /* append the rows to `state`; else the state is only read (a working copy
                         runs), so several sequences may read one state */
  bool chunked;       /* Gated DeltaNet chunked even for one row on a populated state: a piece of
                         a longer pass cut on the chunk grid runs as that pass runs (EX_GDN_AUTO) */
  size_t n;           /* rows, ≥ 1 */
  const int32_t *pos; /* [3, n] mRoPE ids, or NULL for text positions (state's n_tokens +
                         rope_delta + t on every axis) */
};

/* Runs several sequences packed in one call: the row-wise ops (norms, projections, MLP, rotary)
 * over all rows at once, attention, convolution and Gated DeltaNet per sequence over its own
 * state. Each sequence's rows are exactly what ex_qwen35_forward gives it alone (the matmul sums
 * in a fixed order whatever the row count; every other op is per row or per sequence), and the
 * sequences never see each other. Shapes: embeds [Σn, H] packed in seqs order; ret_hidden [Σn, H].
 * Ownership: caller's host buffers; advanced states grow their KV cache; working copies are
 * freed before returning. Returns 0; -EINVAL (no sequences, an empty one, a state advanced by
 * one sequence and used by another, advance without a state), -ENOMEM. Source: as
 * ex_qwen35_forward; twin exc_qwen35_forward (the CUDA packed launch). */
int ex_qwen35_forward_packed(const struct ex_qwen35_model *model,
                             const struct ex_qwen35_seq *seqs, size_t n_seqs, const float *embeds,
                             float *ret_hidden, struct cm_diag *diag);

/* ex_qwen35_forward that also returns the residual stream: ret_residual [n_layers + 1, n, H]
 * holds the input of layer 0 (embeds), then the output of each decoder layer (the residual rows
 * before the final norm; bf16 values when the model rounds). ret_hidden as ex_qwen35_forward.
 * Returns as ex_qwen35_forward. Source: transformers' decoder layer outputs (hidden_states). */
int ex_qwen35_forward_residual(const struct ex_qwen35_model *model, struct ex_qwen35_state *state,
                               const float *embeds, const int32_t *pos, size_t n,
                               float *ret_hidden, float *ret_residual, struct cm_diag *diag);

/* Decoder layer `layer` alone on given input rows, from a fresh sequence state (the layer's
 * mixer sees only these n rows, as in a one-pass forward): ret_out = layer(in). Feeding it the
 * residual rows another implementation computed isolates one layer's error.
 * Shapes: in, ret_out [n, H]; pos [3, n] mRoPE ids or NULL (0 .. n−1).
 * Returns 0; -EINVAL (n == 0, layer outside [0, n_layers)), -ENOMEM. Twin of
 * exc_qwen35_layer_forward; source: transformers' Qwen3_5DecoderLayer.forward. */
int ex_qwen35_layer_forward(const struct ex_qwen35_model *model, int layer, const float *in,
                            const int32_t *pos, size_t n, float *ret_out, struct cm_diag *diag);

/* LM-head logits of final-norm hidden rows: logits = hidden · W_lmᵀ (rounded to bf16 when the
 * model rounds). Shapes: hidden [n, H]; logits [n, vocab]. */
void ex_qwen35_logits(const struct ex_qwen35_model *model, const float *hidden, size_t n,
                      float *logits);

/* The k largest values of x [n] with their indices, largest first (ties: lower index first).
 * Shapes: ret_idx, ret_val [k], k ≤ n. */
void ex_top_k(const float *x, size_t n, size_t k, int32_t *ret_idx, float *ret_val);

#endif
