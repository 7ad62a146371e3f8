/* 2-D rotary position embedding of the vision tower, float32 (spec §6.4): hd/4 inverse frequencies,
 * angles [row·f | col·f] duplicated to hd, rotate_half over the full head dim (dim j pairs with
 * j + hd/2). Tables are kept in float32 in every engine; the bf16 engine rounds q and k once after
 * the rotation. It leaves out the text tower's interleaved mRoPE. */
#ifndef S1_EX_CPU_VISION_ROTARY_H
#define S1_EX_CPU_VISION_ROTARY_H

#include <stddef.h>
#include <stdint.h>

/* inv_freq[j] = 1 / theta^(2j / (hd/2)) for j < hd/4, each step rounded to float32 as torch does.
 * Shapes: inv_freq [head_dim/4]; head_dim a positive multiple of 4. Ownership: caller's buffer.
 * Source: Qwen3_5VisionRotaryEmbedding.compute_axial_rope_parameters (transformers 5.17). */
void ex_vision_rotary_inv_freq(int head_dim, float theta, float *inv_freq);

/* cos/sin tables for n patches at (row, col) grid positions.
 * Shapes: pos [n, 2] int32 (row, col); inv_freq [head_dim/4]; cos, sin [n, head_dim] float32.
 * Units: angles in radians. Ownership: caller's host buffers.
 * Source: Qwen3_5VisionRotaryEmbedding.forward + recomposition_frequencies. */
void ex_cpu_vision_rotary_tables(const int32_t *pos, size_t n, const float *inv_freq, int head_dim,
                                 float *cos_t, float *sin_t);

/* In place: x[r, h, :] = x·cos + rotate_half(x)·sin for every row r and head h.
 * Shapes: x rows of `heads` heads of head_dim floats, row r starting at x + r·row_stride (elements);
 *         cos, sin [n, head_dim]. Ownership: caller's host buffers.
 * Source: apply_rotary_pos_emb_vision (transformers 5.17); twin of the CUDA vision rope kernel. */
void ex_cpu_vision_rotary_apply(float *x, size_t n, size_t row_stride, int heads, int head_dim,
                                const float *cos_t, const float *sin_t);

/* As ex_cpu_vision_rotary_apply with x holding bf16 values (the rounded qkv GEMM output): the same
 * float32 rotation, each result rounded to bf16 once, x = R(x·cos + rotate_half(x)·sin).
 * Shapes, units, ownership as there. Source: spec/qwen3_5.md §6.4-6.5 (q,k = R(rotary_fp32)). */
void ex_cpu_vision_rotary_apply_bf16(float *x, size_t n, size_t row_stride, int heads, int head_dim,
                                     const float *cos_t, const float *sin_t);

#endif
