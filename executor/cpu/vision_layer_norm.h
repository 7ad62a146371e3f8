/* LayerNorm with weight and bias over the last dimension, float32: the vision tower's norm1, norm2
 * and merger norm (torch.nn.LayerNorm, eps 1e-6 in Qwen3.5). Mean and variance are accumulated in
 * double, so the result is within an ulp or so of torch's float32 kernel; the bf16 variant rounds
 * the output once, as the bf16 reference does. */
#ifndef S1_EX_CPU_VISION_LAYER_NORM_H
#define S1_EX_CPU_VISION_LAYER_NORM_H

#include <stddef.h>

/* y[r] = (x[r] - mean(x[r])) / sqrt(var(x[r]) + eps) * w + b, for each of n rows.
 * Shapes: x, y [n, dim] row-major (y may alias x); w, b [dim]. var is the biased variance.
 * Units: none. Ownership: host buffers owned by the caller.
 * Source: torch.nn.functional.layer_norm; twin of the CUDA vision norm kernel. */
void ex_cpu_layer_norm(const float *x, const float *w, const float *b, float *y, size_t n,
                       size_t dim, float eps);

/* As ex_cpu_layer_norm, the bf16 reference's form: statistics and the normalised value in float32
 * (x holds bf16 values), the output rounded once, y = R(LN(x)). Shapes, units, ownership as there.
 * Source: spec/qwen3_5.md §6.5 (a = R(LN1(x)), m = R(LN2(x))) and §6.6 (y = R(LN(x))). */
void ex_cpu_layer_norm_bf16(const float *x, const float *w, const float *b, float *y, size_t n,
                            size_t dim, float eps);

#endif
