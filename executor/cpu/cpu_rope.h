/* Partial, interleaved 3-axis rotary position embedding (mRoPE) of the Qwen3.5 full-attention
 * layers for the CPU reference backend: cos/sin tables from 3-axis positions, and their NeoX-style
 * application to the first rot_dims dims of every head. The vision 2-D rotary is not here. */
#ifndef S1_EX_CPU_ROPE_H
#define S1_EX_CPU_ROPE_H

#include <stddef.h>
#include <stdint.h>

/* Builds the per-token tables for F = rot_dims/2 frequencies. Frequency j takes its position from
 * axis H when j % 3 == 1 and j < 3·section[1], axis W when j % 3 == 2 and j < 3·section[2], else T;
 * inv_freq_j = 1 / theta^(2j/rot_dims) and angle = pos · inv_freq_j, all in float32.
 * Shapes: pos [3, n] int32 (rows T, H, W); cos, sin [n, F] float32.
 * Units: theta in the config's units (rope_theta, 1e7); positions are mRoPE ids, not sequence
 * indices. Ownership: caller's buffers. Returns 0, -EINVAL (rot_dims odd or 0).
 * Source: spec/qwen3_5.md §5.2 (Qwen3_5TextRotaryEmbedding, apply_interleaved_mrope). */
int ex_cpu_mrope_tables(const int32_t *pos, size_t n, int rot_dims, double theta,
                        const int section[3], float *cos_t, float *sin_t);

/* Rotates dims [0, rot_dims) of every head in place, pairing dim j with dim j + F (rotate_half);
 * dims [rot_dims, head_dim) pass through.
 * Shapes: x [n, n_heads, head_dim] float32; cos, sin [n, F] from ex_cpu_mrope_tables.
 * Ownership: caller's buffers. Source: spec/qwen3_5.md §5.1 step 4 (apply_rotary_pos_emb). */
void ex_cpu_rope_apply(float *x, size_t n, size_t n_heads, size_t head_dim, size_t rot_dims,
                       const float *cos_t, const float *sin_t);

/* As ex_cpu_rope_apply, evaluated as the bf16 reference does (torch eager, one rounding per op,
 * x and the tables already bf16 values): x'_j = R(R(x_j·c_j) − R(x_{j+F}·s_j)),
 * x'_{j+F} = R(R(x_{j+F}·c_j) + R(x_j·s_j)). Shapes and ownership as ex_cpu_rope_apply.
 * Source: spec/qwen3_5.md §5.1 step 4 (the bf16 form), §0.2. */
void ex_cpu_rope_apply_bf16(float *x, size_t n, size_t n_heads, size_t head_dim, size_t rot_dims,
                            const float *cos_t, const float *sin_t);

#endif
