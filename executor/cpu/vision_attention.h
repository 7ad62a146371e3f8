/* Variable-length, non-causal multi-head attention of the vision tower, float32: packed patches of
 * several images (or video frames) attend only inside their own segment (cu_seqlens semantics, as
 * the eager/SDPA per-chunk path and varlen flash attention of transformers). No mask, no GQA, no
 * dropout; it leaves out the bf16 rounding of scores that eager mode does in a bf16 run. */
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

#endif
