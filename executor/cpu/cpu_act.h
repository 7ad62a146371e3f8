/* Elementwise activations of the Qwen3.5 text stack for the CPU reference backend: SwiGLU
 * (silu(gate) · up), sigmoid, and the bf16 rounding step used to imitate a bf16 oracle.
 * Vision GELUs live with the vision tower. */
#ifndef S1_EX_CPU_ACT_H
#define S1_EX_CPU_ACT_H

#include <stddef.h>

/* silu(x) = x · sigmoid(x) in float32. */
float ex_cpu_silu(float x);

/* SwiGLU product: out[i] = silu(gate[i]) · up[i].
 * Shapes: gate, up, out [n] float32; out may alias gate or up. Ownership: caller's buffers.
 * Source: spec/qwen3_5.md §3.4 (Qwen3_5MLP). */
void ex_cpu_swiglu(const float *gate, const float *up, float *out, size_t n);

/* SwiGLU as the bf16 reference evaluates it (torch eager, one rounding per op):
 * out[i] = R(R(silu(gate[i])) · up[i]), with gate and up already bf16 values (the rounded gate_proj
 * and up_proj outputs). Shapes and ownership as ex_cpu_swiglu.
 * Source: spec/qwen3_5.md §3.4 (p = R(R(silu(g))·u)), §0.2. */
void ex_cpu_swiglu_bf16(const float *gate, const float *up, float *out, size_t n);

/* R(x): x rounded to the nearest bfloat16 (ties to even), as float32. NaN stays NaN. */
float ex_cpu_bf16(float x);

/* Rounds each value to the nearest bfloat16 (ties to even) and back to float32, in place: the R()
 * of spec/qwen3_5.md §0.2. Shapes: x [n]. NaN stays NaN. */
void ex_cpu_round_bf16(float *x, size_t n);

#endif
