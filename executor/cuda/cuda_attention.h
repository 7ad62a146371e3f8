/* Gated full attention of Qwen3.5 on CUDA: causal GQA softmax attention over variable-length packed
 * sequences, each attending to its own prefix K/V (shared snapshot rows allowed) followed by its own
 * new keys, with the sigmoid output gate fused. q/k norm and rotary are separate ops.
 * Twin: cpu/cpu_attention.c (ex_cpu_attention_gated). */
#ifndef S1_EX_CUDA_ATTENTION_H
#define S1_EX_CUDA_ATTENTION_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#else
/* C sees only cuda_bf16.h's raw 2-byte struct; the same layout as the C++ type (pointers only). */
typedef __nv_bfloat16_raw __nv_bfloat16;
#endif

#define EXC_MAX_SEQS 256 /* sequences per launch; passed by value as a kernel parameter */

/* One packed sequence: query rows q_start .. q_start+n_q−1 of the launch; query t sits at position
 * n_prefix + t and attends to the n_prefix prefix keys and to new keys 0..t. */
struct exc_attn_seq {
  int32_t q_start;              /* first row in q / gate / out */
  int32_t n_q;                  /* query rows (≥ 1) */
  int32_t n_prefix;             /* keys before the new ones (0 for a fresh sequence) */
  int32_t pad_;                 /* keeps the pointers 8-byte aligned */
  const __nv_bfloat16 *k_prefix; /* [n_prefix, n_kv, head_dim] device; may be shared */
  const __nv_bfloat16 *v_prefix; /* [n_prefix, n_kv, head_dim] device */
  const __nv_bfloat16 *k_new;    /* [n_q, n_kv, head_dim] device (may be k_prefix + n_prefix rows) */
  const __nv_bfloat16 *v_new;    /* [n_q, n_kv, head_dim] device */
};

/* out[t, h·D + d] = sigmoid(gate[t,h,d]) · Σ_j softmax_j(scale · q[t,h]·k_j) v_j[d], kv head
 * h / (n_heads / n_kv); softmax and accumulation in float32, inputs and output bf16.
 * Shapes: q, gate [total_q, n_heads, head_dim] bf16; out [total_q, n_heads·head_dim] bf16
 *         (head-major, the o_proj input). head_dim ∈ {64, 128, 256}.
 * Units: scale = head_dim^-1/2. Ownership: device buffers, host `seqs` array (≤ EXC_MAX_SEQS,
 * copied into the launch, so it may be reused on return); enqueued on `stream`, no sync.
 * Returns 0; -EINVAL (n_seqs out of range, unsupported head_dim, n_heads not a multiple of n_kv);
 * -CM_ECUDA (launch failed). Source: spec/qwen3_5.md §5.1; twin ex_cpu_attention_gated. */
int exc_attention_gated(cudaStream_t stream, const __nv_bfloat16 *q, const __nv_bfloat16 *gate,
                        __nv_bfloat16 *out, const struct exc_attn_seq *seqs, int n_seqs,
                        int n_heads, int n_kv, int head_dim, float scale);

#ifdef __cplusplus
}
#endif

#endif
