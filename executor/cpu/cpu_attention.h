/* Causal grouped-query softmax attention with the Qwen3.5 sigmoid output gate, for the CPU
 * reference backend. It reads keys and values from a KV cache that already holds the new tokens;
 * cache growth and q/k normalisation and rotary are the caller's. */
#ifndef S1_EX_CPU_ATTENTION_H
#define S1_EX_CPU_ATTENTION_H

#include <stddef.h>

/* For query token t (sequence position n_past + t) and head h, with kv head h / (n_heads/n_kv):
 * s_j = scale · (q·k_j) for j ≤ n_past + t, P = softmax(s) in float32, o = Σ_j P_j v_j, then
 * out = o · sigmoid(gate). Keys are reduced in ascending order, independent of n.
 * Shapes: q, gate [n, n_heads, head_dim]; k, v [n_past + n, n_kv, head_dim] (the cache);
 *         out [n, n_heads · head_dim] head-major; scratch [n_past + n] floats.
 * Units: scale = head_dim^-1/2. Ownership: caller's host buffers; out must not alias inputs.
 * Source: spec/qwen3_5.md §5.1 steps 6-7 (eager attention of Qwen3_5Attention). */
void ex_cpu_attention_gated(const float *q, const float *gate, const float *k, const float *v,
                            float *out, float *scratch, size_t n, size_t n_past, size_t n_heads,
                            size_t n_kv, size_t head_dim, float scale);

/* As ex_cpu_attention_gated, evaluated as the bf16 reference does (inputs bf16 values): sdpa's
 * flash path rounds the unnormalised weights e^(s_j − max s) to bf16 before P·V (their float32 sum
 * normalises), o is rounded, then out = R(o · R(sigmoid(gate))). With all keys in one block this
 * is the flash form exactly; the CUDA kernel's block-wise running maximum can round differently.
 * Shapes, units, ownership as there. Source: spec/qwen3_5.md §5.1 steps 6 (sdpa) and 7. */
void ex_cpu_attention_gated_bf16(const float *q, const float *gate, const float *k,
                                 const float *v, float *out, float *scratch, size_t n,
                                 size_t n_past, size_t n_heads, size_t n_kv, size_t head_dim,
                                 float scale);

#endif
