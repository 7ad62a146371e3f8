/* Elementwise ops of the CUDA engine: SwiGLU from the float32 (or bf16) gate/up projection to the
 * bf16 down-projection input, the bf16 reference's residual add, and float32 → bf16 casts of row blocks. Twin: cpu/cpu_act.c
 * (ex_cpu_swiglu, ex_cpu_round_bf16). */
#ifndef S1_EX_CUDA_ACT_H
#define S1_EX_CUDA_ACT_H

#include <cuda_runtime.h>
#include <stddef.h>

#include "exc_bf16.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[t, i] = bf16(silu(gate[t, i]) · up[t, i]) with silu(x) = x / (1 + e^−x) in float32.
 * Shapes: gate, up [n, ld_in] float32 rows (first `width` columns; they may be two column ranges
 *         of one fused projection output); out [n, width] bf16; device.
 * Ownership: stream-ordered, no sync. Returns 0; -EINVAL; -CM_ECUDA.
 * Source: spec/qwen3_5.md §3.4 (Qwen3_5MLP); twin ex_cpu_swiglu then ex_cpu_round_bf16. */
int exc_swiglu(cudaStream_t stream, const float *gate, const float *up, size_t ld_in,
               __nv_bfloat16 *out, size_t n, size_t width);

/* As exc_swiglu, evaluated as the bf16 reference does, with gate and up rounded to bf16 as they
 * are read (the reference's gate_proj and up_proj outputs) and the SiLU rounded before the
 * product: out[t, i] = R(R(silu(R(gate))) · R(up)), the unrounded inputs left as they are.
 * Shapes, ownership, returns as exc_swiglu. Source: spec/qwen3_5.md §3.4, §3.5;
 * twin ex_cpu_round_bf16 of both, then ex_cpu_swiglu_bf16. */
int exc_swiglu_rounded(cudaStream_t stream, const float *gate, const float *up, size_t ld_in,
                       __nv_bfloat16 *out, size_t n, size_t width);

/* As exc_swiglu_rounded, from the bf16 gate/up projection a GEMM with a bf16 output writes (the
 * reference's gate_proj and up_proj outputs, rounded once from the float32 accumulator):
 * out[t, i] = R(R(silu(gate[t, i])) · up[t, i]); bit-identical to exc_swiglu_rounded on the same
 * values held as float32. Reads half the bytes of the float32 forms.
 * Shapes: gate, up [n, ld_in] bf16 rows (first `width` columns); out [n, width] bf16; device;
 *         width and ld_in multiples of 8, the three pointers 16-byte aligned.
 * Ownership: stream-ordered, no sync. Returns 0; -EINVAL (sizes, alignment); -CM_ECUDA.
 * Source: spec/qwen3_5.md §3.4, §3.5; twin ex_cpu_swiglu_bf16. */
int exc_swiglu_bf16(cudaStream_t stream, const __nv_bfloat16 *gate, const __nv_bfloat16 *up,
                    size_t ld_in, __nv_bfloat16 *out, size_t n, size_t width);

/* y[t, i] = bf16(x[t, i]) (round to nearest even) for n rows of `width` values.
 * Shapes: x [n, ld_x] float32; y [n, ld_y] bf16; device. Returns 0; -EINVAL; -CM_ECUDA.
 * Source: torch .to(bfloat16); twin ex_cpu_round_bf16. */
int exc_cast_bf16(cudaStream_t stream, const float *x, size_t ld_x, __nv_bfloat16 *y, size_t ld_y,
                  size_t n, size_t width);

/* In place: x[t, i] = bf16(x[t, i]) (round to nearest even, kept as float32 values) for n rows of
 * `width` values; NaN stays NaN. Shapes: x [n, ld_x] float32 device. Ownership: stream-ordered,
 * no sync. Returns 0; -EINVAL; -CM_ECUDA.
 * Source: the bf16 reference's rounding of an op output (spec/qwen3_5.md §0.2, §3.5); twin
 * ex_cpu_round_bf16. */
int exc_round_bf16(cudaStream_t stream, float *x, size_t ld_x, size_t n, size_t width);

/* The bf16 reference's residual add: h[i] = bf16(h[i] + bf16(y[t, c])) for the n·width values of
 * h (row-major [n, width], i = t·width + c), both roundings to nearest even, the sum in float32
 * as PyTorch's bf16 add computes it (opmath float32, one rounding).
 * Shapes: h [n, width] float32; y [n, ld_y] float32 (an unrounded projection output); device.
 * Ownership: stream-ordered, no sync. Returns 0; -EINVAL; -CM_ECUDA.
 * Source: spec/qwen3_5.md §3.3 (h = R(h + R(x·Wᵀ))); twin ex_qwen35_forward's residual add with
 * round_bf16 (ex_cpu_round_bf16 of the projection, then of the sum). */
int exc_add_round_bf16(cudaStream_t stream, float *h, const float *y, size_t ld_y, size_t n,
                       size_t width);

/* As exc_add_round_bf16 with a bf16 projection (a GEMM's bf16 output, already the reference's
 * rounded x·Wᵀ): h[i] = bf16(h[i] + y[t, c]). Shapes: h [n, width] float32; y [n, ld_y] bf16;
 * device. Ownership, returns and source as exc_add_round_bf16. */
int exc_add_bf16_round(cudaStream_t stream, float *h, const __nv_bfloat16 *y, size_t ld_y,
                       size_t n, size_t width);

#ifdef __cplusplus
}
#endif

#endif
