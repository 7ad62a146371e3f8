/* The vision tower's own CUDA ops (spec/qwen3_5.md §6), one .cu file each beside this header:
 * vision_layer_norm.cu, vision_pos_interp.cu, vision_rotary.cu, vision_attention.cu,
 * vision_gelu.cu. The GEMMs between them are cuBLASLt's (bf16 in, fp32 out, no bias): every op here
 * adds the preceding GEMM's bias itself. Activations between ops are fp32; an op that feeds a GEMM
 * writes bf16. Each has its float32 twin in ../cpu/vision_*.c; tests/vision/test_vision_cuda_ops.c
 * compares them. With round_bf16 false the residual stream stays fp32 (the fp32-residual
 * numerics); with round_bf16 true every op rounds where the transformers bf16 run does (spec §6,
 * the ref-bf16 numerics; twins: the _bf16 variants of the CPU ops). Left out: the older
 * bf16-summed position interpolation. */
#ifndef S1_EX_CUDA_VISION_OPS_H
#define S1_EX_CUDA_VISION_OPS_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exc_bf16.h"
#include "vision_gelu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Optional residual add, then LayerNorm: when y is not NULL, x[r] += y[r] (+ y_bias) first and x is
 * written back; then out[r] = bf16((x[r] − mean) / sqrt(var + eps) · w + b), statistics in fp32.
 * round_bf16: the add is x = R(x + R(y + y_bias)) (spec §6.5 x = R(x + R(o·Wpᵀ + bp))), x then
 * holds bf16 values.
 * Shapes: x [n, dim] fp32 (in/out); y [n, dim] fp32 or NULL; y_bias [dim] bf16 or NULL (only with
 * y); w, b [dim] bf16; out [n, dim] bf16. dim ≤ 8192. Units: none.
 * Ownership: device buffers; enqueued on `stream`, no sync. out must not alias x or y.
 * Returns 0; -EINVAL (n < 0, dim outside 1..8192); -CM_ECUDA (launch failed).
 * Source: torch.nn.functional.layer_norm; twin ex_cpu_layer_norm (ex_cpu_layer_norm_bf16 when
 * round_bf16) + the residual add of ex_vision_forward. */
int exc_vision_add_layer_norm(cudaStream_t stream, float *x, const float *y,
                              const __nv_bfloat16 *y_bias, const __nv_bfloat16 *w,
                              const __nv_bfloat16 *b, __nv_bfloat16 *out, int64_t n, int dim,
                              float eps, bool round_bf16);

/* x[r] += bias + Σ_t weights[r, t] · table[taps[r, t]] (fp32 products, summed TL, TR, BL, BR).
 * round_bf16: x[r] = R(R(x[r] + bias) + R(pe)), the patch embedding's R(P·Wᵀ + b) and §6.3's
 * x = R(x + R(pe)).
 * Shapes: table [side·side, dim] bf16; taps [n, 4] int32 (rows of the table); weights [n, 4]
 * fp32; bias [dim] bf16 or NULL (the patch embedding's); x [n, dim] fp32 (in/out).
 * Ownership: device buffers; enqueued on `stream`. Returns 0; -EINVAL (n < 0, dim < 1);
 * -CM_ECUDA. Source: Qwen3_5VisionModel.forward (pos_embeds); twin ex_cpu_vision_pos_embed_add
 * (_bf16 when round_bf16; geometry from ex_vision_pos_interp_taps, host-side). */
int exc_vision_pos_embed_add(cudaStream_t stream, const __nv_bfloat16 *table,
                             const int32_t *taps, const float *weights,
                             const __nv_bfloat16 *bias, float *x, int64_t n, int dim,
                             bool round_bf16);

/* cos/sin tables of the 2-D vision rotary: angle k of row r is pos[r, k / (hd/4) % 2]·inv_freq[k %
 * (hd/4)] for k < hd/2, repeated for k ≥ hd/2; fp32 cosf/sinf (≤ 2 ulp from glibc's).
 * Shapes: pos [n, 2] int32 (row, col); inv_freq [head_dim/4] fp32; cos_t, sin_t [n, head_dim]
 * fp32. Ownership: device buffers; enqueued on `stream`.
 * Returns 0; -EINVAL (head_dim not a positive multiple of 4, n < 0); -CM_ECUDA.
 * Source: Qwen3_5VisionRotaryEmbedding; twin ex_cpu_vision_rotary_tables. */
int exc_vision_rotary_tables(cudaStream_t stream, const int32_t *pos, int64_t n,
                             const float *inv_freq, int head_dim, float *cos_t, float *sin_t);

/* The qkv GEMM's epilogue: out = bf16(qkv + bias), with q and k rotated in fp32 first
 * (x·cos + rotate_half(x)·sin over each head, dim j paired with j + hd/2) and rounded once.
 * round_bf16: qkv + bias is rounded before the rotation (spec §6.5 qkv = R(a·Wᵀ + b)).
 * Shapes: qkv [n, 3, heads, head_dim] fp32 (the GEMM output); bias [3·heads·head_dim] bf16;
 * cos_t, sin_t [n, head_dim] fp32; out [n, 3, heads, head_dim] bf16.
 * Ownership: device buffers; enqueued on `stream`. Returns 0; -EINVAL (head_dim not a positive
 * multiple of 4, heads < 1, n < 0); -CM_ECUDA.
 * Source: apply_rotary_pos_emb_vision (spec §6.4); twin: ex_cpu_linear's bias + ex_cpu_vision_
 * rotary_apply on q and k (round_bf16: the bias-added sum rounded, then ..._apply_bf16). */
int exc_vision_qkv_rotary(cudaStream_t stream, const float *qkv, const __nv_bfloat16 *bias,
                          const float *cos_t, const float *sin_t, __nv_bfloat16 *out, int64_t n,
                          int heads, int head_dim, bool round_bf16);

/* One query tile of the varlen attention: query rows q0 .. min(q0 + 64, seg_end) − 1 of the segment
 * [seg_start, seg_end). Built on the host by exc_vision_attention_tiles. */
struct exc_vision_tile {
  int32_t q0;        /* first query row of the tile (packed row index) */
  int32_t seg_start; /* first row of its segment */
  int32_t seg_end;   /* one past the last row of its segment */
  int32_t pad_;      /* keeps 16-byte records */
};

#define EXC_VISION_ATTN_TILE 64 /* query rows per tile (and keys per step) */

/* Splits segments into query tiles. Shapes: cu_seqlens [n_segs + 1] host int32 (0, non-decreasing);
 * tiles [cap] host. Returns the number of tiles (≤ n / 64 + n_segs), or -EINVAL when cu_seqlens is
 * malformed or more than cap tiles are needed. */
int exc_vision_attention_tiles(const int32_t *cu_seqlens, int n_segs,
                               struct exc_vision_tile *tiles, int cap);

/* Non-causal attention inside each segment (an image or video frame): out[i, h] =
 * Σ_j softmax_j(scale · q[i, h]·k[j, h]) v[j, h] for i, j in one segment. Flash-style: one block per
 * (tile, head), online softmax in fp32, bf16 tensor-core products, probabilities rounded to bf16
 * for the P·V product, fp32 accumulation.
 * Shapes: qkv [n, 3, heads, head_dim] bf16 (rotated q, k); tiles [n_tiles] device (from
 * exc_vision_attention_tiles, covering every row once); out [n, heads·head_dim] bf16.
 * head_dim a multiple of 8, ≤ 128 (24 tiny, 64 4B, 72 9B/27B). Units: scale = head_dim^−½.
 * Ownership: device buffers; enqueued on `stream`. Returns 0; -EINVAL (head_dim, heads < 1);
 * -CM_ECUDA. Source: spec §6.5 (SDPA per segment); twin ex_cpu_vision_attention (float32) and,
 * for the ref-bf16 numerics, ex_cpu_vision_attention_bf16 (the same form: unnormalised weights
 * rounded to bf16 before P·V, their fp32 sum normalising). */
int exc_vision_attention(cudaStream_t stream, const __nv_bfloat16 *qkv,
                         const struct exc_vision_tile *tiles, int n_tiles, int heads, int head_dim,
                         float scale, __nv_bfloat16 *out);

/* out = bf16(gelu(x + bias)) elementwise over rows; round_bf16: bf16(gelu(R(x + bias))) (spec
 * §6.5 f = R(gelu_tanh(R(m·W1ᵀ + b1))), §6.6 likewise with erf). Shapes: x [n, dim] fp32; bias
 * [dim] bf16 or NULL; out [n, dim] bf16. kind: EX_GELU_TANH (block MLP) or EX_GELU_ERF (merger).
 * Ownership: device buffers; enqueued on `stream`. Returns 0; -EINVAL (kind, n < 0, dim < 1);
 * -CM_ECUDA. Source: torch gelu(approximate="tanh" | "none"); twin ex_cpu_gelu (_bf16). */
int exc_vision_gelu(cudaStream_t stream, const float *x, const __nv_bfloat16 *bias,
                    __nv_bfloat16 *out, int64_t n, int dim, enum ex_gelu_kind kind,
                    bool round_bf16);

/* x[r] += bias (the last GEMM's bias; fp32 result); round_bf16: x[r] = R(x[r] + bias) (spec §6.6
 * out = R(z·W2ᵀ + b2)). Shapes: x [n, dim] fp32; bias [dim] bf16.
 * Ownership: device buffers; enqueued on `stream`. Returns 0; -EINVAL; -CM_ECUDA.
 * Twin: the bias of ex_cpu_linear. */
int exc_vision_add_bias(cudaStream_t stream, float *x, const __nv_bfloat16 *bias, int64_t n,
                        int dim, bool round_bf16);

/* out = bf16(x) elementwise (the pixel cast R(pixel) of spec §6.1, round to nearest even).
 * Shapes: x, out [n] (n elements). Ownership: device buffers; enqueued on `stream`.
 * Returns 0; -EINVAL (n < 0); -CM_ECUDA. */
int exc_vision_to_bf16(cudaStream_t stream, const float *x, __nv_bfloat16 *out, int64_t n);

#ifdef __cplusplus
}
#endif

#endif
