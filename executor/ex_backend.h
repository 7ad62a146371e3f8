/* The small backend interface the one Qwen3.5 model code path runs on: one function pointer per
 * op, with the same arguments as the float32 CPU ops in cpu/ (the reference). A CUDA backend fills
 * the same table with launchers over device buffers; memory placement stays the caller's. The
 * argument types of the ops (GDN shapes, GELU forms) are defined here, and the backends' op
 * headers (cpu/, cuda/) include this file: the interface depends on no implementation. */
#ifndef S1_EX_BACKEND_H
#define S1_EX_BACKEND_H

#include <stddef.h>
#include <stdint.h>

/* Shapes shared by the GDN ops: Hk q/k heads of dk, Hv value heads of dv, Hv a multiple of Hk;
 * value head h reads q/k head h / (Hv/Hk). */
struct ex_gdn_dims {
  size_t n_k_heads; /* Hk: linear_num_key_heads */
  size_t n_v_heads; /* Hv: linear_num_value_heads */
  size_t dk;        /* linear_key_head_dim */
  size_t dv;        /* linear_value_head_dim */
};

/* The GELU forms of the vision tower (cpu/vision_gelu.h and its CUDA twin). */
enum ex_gelu_kind {
  EX_GELU_ERF,  /* 0.5·x·(1 + erf(x/√2)) */
  EX_GELU_TANH, /* 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) */
  EX_GELU_COUNT,
};

struct ex_backend {
  const char *name; /* "cpu", "cuda" */
  /* y = x·wᵀ (+ bias): cpu_matmul.h */
  void (*linear)(const float *x, const float *w, const float *bias, float *y, size_t n, size_t k,
                 size_t m);
  /* y += scale·(x·aᵀ)·bᵀ: cpu_matmul.h */
  void (*linear_lora_add)(const float *x, const float *a, const float *b, float scale, float *y,
                          float *tmp, size_t n, size_t k, size_t r, size_t m);
  /* row gather: cpu_embed.h */
  int (*embed)(const float *table, size_t vocab, const int32_t *ids, float *out, size_t n,
               size_t d);
  /* zero-centred RMSNorm and gated RMSNorm: cpu_norm.h */
  void (*rms_norm)(const float *x, const float *w, float eps, float *y, size_t n, size_t d);
  void (*gated_rms_norm)(const float *x, const float *z, const float *w, float eps, float *y,
                         size_t n, size_t d);
  /* the bf16 reference's form of the ops above and below that chain several torch ops (one
   * rounding per op, spec/qwen3_5.md §3.5): used when the model rounds as a bf16 oracle */
  void (*gated_rms_norm_bf16)(const float *x, const float *z, const float *w, float eps, float *y,
                              size_t n, size_t d);
  void (*swiglu_bf16)(const float *gate, const float *up, float *out, size_t n);
  void (*rope_apply_bf16)(float *x, size_t n, size_t n_heads, size_t head_dim, size_t rot_dims,
                          const float *cos_t, const float *sin_t);
  void (*causal_conv1d_silu_bf16)(const float *x, const float *w, float *window, float *y,
                                  size_t n, size_t c, size_t kernel);
  /* silu(gate)·up and bf16 rounding: cpu_act.h */
  void (*swiglu)(const float *gate, const float *up, float *out, size_t n);
  void (*round_bf16)(float *x, size_t n);
  /* mRoPE tables and application: cpu_rope.h */
  int (*mrope_tables)(const int32_t *pos, size_t n, int rot_dims, double theta,
                      const int section[3], float *cos_t, float *sin_t);
  void (*rope_apply)(float *x, size_t n, size_t n_heads, size_t head_dim, size_t rot_dims,
                     const float *cos_t, const float *sin_t);
  /* causal GQA attention with sigmoid gate over a KV cache: cpu_attention.h */
  void (*attention_gated)(const float *q, const float *gate, const float *k, const float *v,
                          float *out, float *scratch, size_t n, size_t n_past, size_t n_heads,
                          size_t n_kv, size_t head_dim, float scale);
  void (*attention_gated_bf16)(const float *q, const float *gate, const float *k, const float *v,
                               float *out, float *scratch, size_t n, size_t n_past,
                               size_t n_heads, size_t n_kv, size_t head_dim, float scale);
  /* depthwise causal conv1d + SiLU with carried window: cpu_conv1d.h */
  void (*causal_conv1d_silu)(const float *x, const float *w, float *window, float *y, size_t n,
                             size_t c, size_t kernel);
  /* Gated DeltaNet: cpu_gdn.h */
  void (*gdn_prepare)(float *q, float *k, const float *b, const float *a, const float *a_log,
                      const float *dt_bias, float *beta, float *g, size_t n,
                      const struct ex_gdn_dims *dims);
  void (*gdn_recurrent)(const float *q, const float *k, const float *v, const float *beta,
                        const float *g, float *state, float *out, size_t n,
                        const struct ex_gdn_dims *dims);
  void (*gdn_chunked)(const float *q, const float *k, const float *v, const float *beta,
                      const float *g, float *state, float *out, size_t n, size_t chunk,
                      const struct ex_gdn_dims *dims, float *scratch);
};

/* The float32 CPU reference backend (host buffers). */
extern const struct ex_backend ex_backend_cpu;

#endif
