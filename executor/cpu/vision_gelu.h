/* GELU activations of the vision tower, float32: the exact-erf form (nn.GELU(), the merger and
 * hidden_act "gelu") and the tanh approximation (hidden_act "gelu_pytorch_tanh", the blocks of every
 * released Qwen3.5). Other ACT2FN names are refused by the config parser, not here. */
#ifndef S1_EX_CPU_VISION_GELU_H
#define S1_EX_CPU_VISION_GELU_H

#include <stddef.h>

#include "ex_backend.h" /* enum ex_gelu_kind */

/* y = gelu(x) elementwise.
 * Shapes: x, y [n] (y may alias x). Units: none. Ownership: caller's host buffers.
 * Source: torch.nn.functional.gelu(approximate="none" | "tanh"); twin of the CUDA vision gelu. */
void ex_cpu_gelu(const float *x, float *y, size_t n, enum ex_gelu_kind kind);

/* As ex_cpu_gelu with x holding bf16 values (the rounded fc1 output): gelu in float32, the result
 * rounded once, y = R(gelu(x)). Shapes, units, ownership as there.
 * Source: spec/qwen3_5.md §6.5 (f = R(gelu_tanh(·))) and §6.6 (z = R(gelu_erf(·))). */
void ex_cpu_gelu_bf16(const float *x, float *y, size_t n, enum ex_gelu_kind kind);

#endif
