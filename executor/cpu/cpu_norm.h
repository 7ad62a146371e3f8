/* Float32 RMS normalisations of the Qwen3.5 text stack for the CPU reference backend: the
 * zero-centred RMSNorm (weight applied as 1 + w) and the gated RMSNorm of the Gated DeltaNet output
 * (plain w, times SiLU of the gate). LayerNorm (vision) is not here. */
#ifndef S1_EX_CPU_NORM_H
#define S1_EX_CPU_NORM_H

#include <stddef.h>

/* Zero-centred RMSNorm over the last dimension: y = x · rsqrt(mean(x²) + eps) · (1 + w).
 * Shapes: x, y [n, d] row-major float32 (y may alias x); w [d].
 * Units: eps absolute (rms_norm_eps, 1e-6). Ownership: caller's host buffers.
 * Source: spec/qwen3_5.md §3.2 (Qwen3_5RMSNorm); CUDA twin to come in cuda/rms_norm.cu. */
void ex_cpu_rms_norm(const float *x, const float *w, float eps, float *y, size_t n, size_t d);

/* Gated RMSNorm: y = (x · rsqrt(mean(x²) + eps)) · w · silu(z), per row of d values.
 * Shapes: x, z, y [n, d] float32 (y may alias x); w [d], used as is (not 1 + w).
 * Units: eps absolute. Ownership: caller's host buffers.
 * Source: spec/qwen3_5.md §4.8 (Qwen3_5RMSNormGated). */
void ex_cpu_gated_rms_norm(const float *x, const float *z, const float *w, float eps, float *y,
                           size_t n, size_t d);

/* Gated RMSNorm as the bf16 reference evaluates it (x, z and w bf16 values): per element,
 * nrm = R(R(x · rsqrt(mean(x²) + eps)) · w), y = R(nrm · silu(z)) with the sum of squares, rsqrt,
 * silu and the last product in float32: three roundings. Shapes and ownership as
 * ex_cpu_gated_rms_norm. Source: spec/qwen3_5.md §4.8 (Qwen3_5RMSNormGated in bf16). */
void ex_cpu_gated_rms_norm_bf16(const float *x, const float *z, const float *w, float eps,
                                float *y, size_t n, size_t d);

#endif
