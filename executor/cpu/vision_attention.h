/* Variable-length, non-causal multi-head attention of the vision tower, float32: packed patches of
 * several images (or video frames) attend only inside their own segment (cu_seqlens semantics, as
 * the eager/SDPA per-chunk path and varlen flash attention of transformers). No mask, no GQA, no
 * dropout. The bf16 variant follows sdpa (the reference's attention); eager mode's bf16 rounding of
 * the scores is left out. */
#ifndef S1_EX_CPU_VISION_ATTENTION_H
#define S1_EX_CPU_VISION_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

/* out[i, h] = Σ_j softmax_j(scale · q[i, h]·k[j, h]) · v[j, h], for i, j in the same segment.
 * Shapes: qkv [n, 3, heads, head_dim] (q all heads | k all heads | v all heads per row);
 *         cu_seqlens [n_segs + 1] int32, cu_seqlens[0] = 0, non-decreasing, cu_seqlens[n_segs] = n;
 *         out [n, heads·head_dim]; scratch [max segment length] floats.
 * Units: scale = head_dim^−½ for the vision tower. Ownership: caller's host buffers; out must not
 * alias qkv. Preconditions are the caller's (ex_vision_forward checks them).
 * Source: Qwen3_5VisionAttention.forward + eager_attention_forward (transformers 5.17); twin of the
 * CUDA vision attention kernel. */
void ex_cpu_vision_attention(const float *qkv, size_t n, int heads, int head_dim,
                             const int32_t *cu_seqlens, int n_segs, float scale, float *out,
                             float *scratch);

/* As ex_cpu_vision_attention, evaluated as the bf16 reference's sdpa does per segment (qkv holds
 * bf16 values: the rounded, rotated q and k and the rounded v): scores and their maximum in
 * float32, the unnormalised weights e^(s_j − max s) rounded to bf16 before P·V while their float32
 * sum normalises, o = R(Σ_j R(e_j)·v_j / Σ_j e_j). With every key of a segment in one block this is
 * the flash form exactly. Shapes, units, ownership as there.
 * Source: spec/qwen3_5.md §6.5 (attention with sdpa's bf16-rounded weights, R(o)). */
void ex_cpu_vision_attention_bf16(const float *qkv, size_t n, int heads, int head_dim,
                                  const int32_t *cu_seqlens, int n_segs, float scale, float *out,
                                  float *scratch);

#endif
