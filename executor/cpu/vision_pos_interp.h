/* Learned position embedding of the vision tower, resampled bilinearly (align_corners = True) from
 * its side×side table to each image's h×w patch grid (spec §6.3, the transformers >= 5.17 form:
 * float32 weights, one float32 sum; the bf16 variant rounds pe and x + pe). The geometry (taps,
 * weights) is host-side and shared with the CUDA engine; the gather-and-add is the op. The older
 * bf16-summed variant is left out. */
#ifndef S1_EX_CPU_VISION_POS_INTERP_H
#define S1_EX_CPU_VISION_POS_INTERP_H

#include <stddef.h>
#include <stdint.h>

/* The four taps (row-major indices into the side×side table, order TL, TR, BL, BR) and their
 * float32 weights for the patch at (row, col) of an h×w grid.
 * Shapes: taps[4], weights[4]. Preconditions: 0 <= row < h, 0 <= col < w, side >= 1.
 * Source: transformers/vision_utils.py _interpolation_axis_taps_weights (bilinear, border). */
void ex_vision_pos_interp_taps(int row, int col, int h, int w, int side, int32_t *taps,
                               float *weights);

/* x[r] += Σ_t weights[r, t] · table[taps[r, t]] (products and the left-to-right sum in float32).
 * Shapes: table [side·side, dim]; taps [n, 4] int32; weights [n, 4]; x [n, dim].
 * Ownership: caller's host buffers. Source: Qwen3_5VisionModel.forward (pos_embeds); twin of the
 * CUDA vision position kernel. */
void ex_cpu_vision_pos_embed_add(const float *table, const int32_t *taps, const float *weights,
                                 float *x, size_t n, size_t dim);

/* As ex_cpu_vision_pos_embed_add, evaluated as the bf16 reference does (x holds bf16 values, the
 * patch embedding's rounded output): pe is the same float32 sum of f32(table)·weight, rounded once,
 * then x[r] = R(x[r] + R(pe)). Shapes, units, ownership as there.
 * Source: spec/qwen3_5.md §6.3 (newer form: pe = R(Σ f32(E)·w), x = R(x + pe)). */
void ex_cpu_vision_pos_embed_add_bf16(const float *table, const int32_t *taps, const float *weights,
                                      float *x, size_t n, size_t dim);

#endif
