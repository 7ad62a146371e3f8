/* Float32 matrix products for the CPU reference backend (the twin of the cuBLASLt GEMMs).
 * Plain C, deterministic: each output element is one dot product accumulated in float32 in
 * ascending k order, so a row's result never depends on how many rows share the call. */
#ifndef S1_EX_CPU_MATMUL_H
#define S1_EX_CPU_MATMUL_H

#include <stddef.h>

/* y = x · wᵀ (+ bias): the nn.Linear convention.
 * Shapes: x [n, k] row-major, w [m, k] row-major (PyTorch weight layout), bias [m] or NULL,
 *         y [n, m] row-major; y must not alias x or w.
 * Units: none. Ownership: all host buffers owned by the caller.
 * Source: torch.nn.functional.linear in float32; twin of the cuBLASLt GEMM path. */
void ex_cpu_linear(const float *x, const float *w, const float *bias, float *y, size_t n, size_t k,
                   size_t m);

/* Unmerged LoRA on top of a linear output: y += scale · ((x · aᵀ) · bᵀ), the low-rank product
 * formed first (t = x·aᵀ), then t·bᵀ, then multiplied by scale and added, in float32.
 * Shapes: x [n, k]; a [r, k] (lora_A); b [m, r] (lora_B); y [n, m] in/out; tmp [n, r] scratch.
 * Units: scale = alpha / r. Ownership: caller's host buffers.
 * Source: peft LoraLayer.forward (result + lora_B(lora_A(x)) * scaling). */
void ex_cpu_linear_lora_add(const float *x, const float *a, const float *b, float scale, float *y,
                            float *tmp, size_t n, size_t k, size_t r, size_t m);

/* Dot product of two float32 vectors of length k, accumulated in float32 in ascending order. */
float ex_cpu_dot(const float *a, const float *b, size_t k);

#endif
