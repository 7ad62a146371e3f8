/* RMS normalisations of the CUDA engine: the zero-centred RMSNorm (weight 1 + w) with the residual
 * add fused in front and bf16 and/or float32 outputs (the GEMM input and the final-norm hidden
 * rows), and the gated RMSNorm of the Gated DeltaNet output (plain w, times silu(z)) to bf16.
 * LayerNorm (vision) is not here. Twins: cpu/cpu_norm.c (ex_cpu_rms_norm, ex_cpu_gated_rms_norm).
 */
#ifndef S1_EX_CUDA_NORM_H
#define S1_EX_CUDA_NORM_H

#include <cuda_runtime.h>
#include <stddef.h>

#include "exc_bf16.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per row: when `add` is not NULL, x ← x + add first (written back: the float32 residual stream);
 * then y = x · (1 / sqrt(mean(x²) + eps)) · (1 + w), written as float32 to y_f32 and/or rounded
 * once to bf16 into y_bf16 (either may be NULL, not both). The sum of squares is float32.
 * Shapes: x [n, d] float32 (row stride d), add [n, d] or NULL; w [d] float32 (bf16 values);
 *         y_f32 [n, d]; y_bf16 [n, ld_bf16] (first d columns written); all device.
 * Units: eps absolute (rms_norm_eps). Ownership: stream-ordered, no sync.
 * Returns 0; -EINVAL (sizes, both outputs NULL); -CM_ECUDA.
 * Source: spec/qwen3_5.md §3.2; twin ex_cpu_rms_norm (with the add done first in float32). */
int exc_rms_norm(cudaStream_t stream, float *x, const float *add, const float *w, float eps,
                 float *y_f32, __nv_bfloat16 *y_bf16, size_t ld_bf16, size_t n, size_t d);

/* Gated RMSNorm per value head: y[t, h, :] = bf16(w · x̂ · silu(z[t, h·dv + :])) with
 * x̂ = x[t, h, :] / sqrt(mean(x[t, h, :]²) + eps), all in float32.
 * Shapes: x [n, n_heads, dv] float32; z [n, ld_z] float32 (first n_heads·dv columns used);
 *         w [dv] float32; y [n, n_heads·dv] bf16; all device. Units: eps absolute.
 * Ownership: stream-ordered, no sync. Returns 0; -EINVAL; -CM_ECUDA.
 * Source: spec/qwen3_5.md §4.8 (Qwen3_5RMSNormGated); twin ex_cpu_gated_rms_norm. */
int exc_gated_rms_norm(cudaStream_t stream, const float *x, const float *z, size_t ld_z,
                       const float *w, float eps, __nv_bfloat16 *y, size_t n, size_t n_heads,
                       size_t dv);

/* As exc_gated_rms_norm, evaluated as the bf16 reference does (z and w already bf16 values; x is
 * read as R(x), the reference's bf16 GDN output, so a float32 x needs no rounding pass first):
 * y = R(R(R(x̂) · w) · silu(z)), three roundings, x̂ from R(x). Shapes, units, ownership, returns as there.
 * Source: spec/qwen3_5.md §4.8; twin ex_cpu_gated_rms_norm_bf16. */
int exc_gated_rms_norm_rounded(cudaStream_t stream, const float *x, const float *z, size_t ld_z,
                               const float *w, float eps, __nv_bfloat16 *y, size_t n,
                               size_t n_heads, size_t dv);

#ifdef __cplusplus
}
#endif

#endif
