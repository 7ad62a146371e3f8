/* Rotary and attention input preparation of the CUDA engine's full-attention layers: mRoPE cos/sin
 * tables from 3-axis positions, and one fused pass from the q/k/v projection outputs to the
 * attention inputs: per-head zero-centred q/k RMSNorm, partial interleaved mRoPE (NeoX pairing),
 * the split of the interleaved query/gate rows, and bf16 K/V written straight into the KV cache.
 * Twins: cpu/cpu_rope.c (ex_cpu_mrope_tables, ex_cpu_rope_apply) and cpu/cpu_norm.c. */
#ifndef S1_EX_CUDA_ROPE_H
#define S1_EX_CUDA_ROPE_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "exc_bf16.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Host: inv_freq[j] = 1 / theta^(2j / rot_dims) for j < rot_dims/2, in float32 exactly as the CPU
 * twin computes it (float exponent, powf, reciprocal). Shapes: inv_freq [rot_dims/2]. */
void exc_rope_inv_freq(int rot_dims, double theta, float *inv_freq);

/* cos/sin[t, j] of angle pos[axis(j), t] · inv_freq[j] (float32 product, then cosf/sinf), where
 * axis(j) is H when j % 3 == 1 and j < 3·section[1], W when j % 3 == 2 and j < 3·section[2], else
 * T. Shapes: pos [3, n] int32 (rows T, H, W); inv_freq [F]; cos_t, sin_t [n, F] float32; device.
 * Ownership: stream-ordered, no sync. Returns 0; -EINVAL; -CM_ECUDA.
 * Source: spec/qwen3_5.md §5.2; twin ex_cpu_mrope_tables. */
int exc_mrope_tables(cudaStream_t stream, const int32_t *pos, size_t n, const float *inv_freq,
                     int n_freq, const int section[3], float *cos_t, float *sin_t);

/* From projection rows (q_proj output qg: per head D query values then D gate values; k and v
 * outputs), for every token t:
 *   q[t,h]    = bf16(rope(rmsnorm(qg[t, 2hD .. 2hD+D)) · (1 + q_norm)))
 *   gate[t,h] = bf16(qg[t, 2hD+D .. 2hD+2D))
 *   k_out[t,g] = bf16(rope(rmsnorm(k[t, gD .. gD+D)) · (1 + k_norm)));  v_out[t,g] = bf16(v[t, g])
 * with rope rotating dims [0, rot_dims) (pairs j, j + rot_dims/2) by cos/sin[t], in float32.
 * Shapes: qg, k, v [n, ld] float32 rows (qg uses Hq·2D columns, k and v Hkv·D; they may be column
 *         ranges of one fused projection output); q_norm, k_norm [D] float32; cos_t, sin_t
 *         [n, rot_dims/2]; q, gate [n, Hq, D] bf16; k_out, v_out [n, Hkv, D] bf16 (KV-cache rows).
 *         D ≤ 512. Units: eps absolute. Ownership: device, stream-ordered, no sync.
 * Returns 0; -EINVAL; -CM_ECUDA. Source: spec/qwen3_5.md §5.1 steps 1-5; twins ex_cpu_rms_norm
 * then ex_cpu_rope_apply (the CPU model's attn_layer). */
int exc_attn_prep(cudaStream_t stream, const float *qg, const float *k, const float *v, size_t ld,
                  const float *q_norm, const float *k_norm, float eps, const float *cos_t,
                  const float *sin_t, int rot_dims, __nv_bfloat16 *q, __nv_bfloat16 *gate,
                  __nv_bfloat16 *k_out, __nv_bfloat16 *v_out, size_t n, int n_heads, int n_kv,
                  int head_dim);

/* As exc_attn_prep, with the normed q and k rounded to bf16 before the rotation (the bf16
 * reference's q_norm / k_norm outputs): q[t,h] = bf16(rope(bf16(rmsnorm(...) · (1 + q_norm)))),
 * likewise k, the projection read as R(x) (the reference's bf16 q_proj / k_proj output: a float32
 * projection needs no rounding pass first); the gate and v as there. With cos/sin tables already
 * rounded to bf16 this is the CPU forward's round_bf16 path (round, norm, round, rotate, round). Shapes, units, ownership and returns as exc_attn_prep.
 * Source: spec/qwen3_5.md §5.1 steps 3-4, §3.5; twin ex_cpu_rms_norm, ex_cpu_round_bf16,
 * ex_cpu_rope_apply, ex_cpu_round_bf16. */
int exc_attn_prep_rounded(cudaStream_t stream, const float *qg, const float *k, const float *v,
                          size_t ld, const float *q_norm, const float *k_norm, float eps,
                          const float *cos_t, const float *sin_t, int rot_dims, __nv_bfloat16 *q,
                          __nv_bfloat16 *gate, __nv_bfloat16 *k_out, __nv_bfloat16 *v_out, size_t n,
                          int n_heads, int n_kv, int head_dim);

#ifdef __cplusplus
}
#endif

#endif
