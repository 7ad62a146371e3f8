/* Depthwise causal conv1d + SiLU of the Gated DeltaNet layers for the CPU reference backend, with
 * the carried window of the last kernel−1 input rows that makes continuation exact. No bias (the
 * Qwen3.5 conv has none). */
#ifndef S1_EX_CPU_CONV1D_H
#define S1_EX_CPU_CONV1D_H

#include <stddef.h>

/* y[t,c] = silu( Σ_{j<K} w[c,j] · x[t−(K−1)+j, c] ), where rows before t = 0 come from `window`
 * (the previous call's last K−1 input rows, oldest first; zeros for a fresh sequence). Afterwards
 * `window` holds the last K−1 rows of (window followed by x).
 * Shapes: x, y [n, c] float32 (y must not alias x); w [c, K] (conv1d.weight [c, 1, K]);
 *         window [K−1, c] in/out. Ownership: caller's buffers.
 * Source: spec/qwen3_5.md §4.2 and §4.9 (causal_conv1d torch fallback). */
void ex_cpu_causal_conv1d_silu(const float *x, const float *w, float *window, float *y, size_t n,
                               size_t c, size_t kernel);

/* As ex_cpu_causal_conv1d_silu, evaluated as the bf16 reference does (x and w bf16 values; the
 * convolution and the SiLU are two ops): y[t,c] = R(silu(R(Σ_j w[c,j]·x[…]))), the sum in
 * float32. Shapes, window and ownership as there. Source: spec/qwen3_5.md §4.2, §0.2. */
void ex_cpu_causal_conv1d_silu_bf16(const float *x, const float *w, float *window, float *y,
                                    size_t n, size_t c, size_t kernel);

#endif
