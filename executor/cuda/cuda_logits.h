/* LM-head readouts of the CUDA engine: logits of selected vocabulary rows (the label tokens of a
 * family) and the full-vocabulary log-prob of target tokens, computed in bounded vocabulary chunks
 * (never the whole [n, vocab] logits at once). Full logits of a few rows are a plain exc_gemm.
 * Twins: cpu/cpu_matmul.c (ex_cpu_linear) and cpu/cpu_act.c (ex_cpu_round_bf16), then a float32
 * log-softmax (the tests). */
#ifndef S1_EX_CUDA_LOGITS_H
#define S1_EX_CUDA_LOGITS_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_gemm.h"
#include "exc_bf16.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[i, j] = Σ_c x[i, c] · w[rows[j], c] in float32, rounded to bf16 (kept in float32) when
 * round_bf16 (the reference's bf16 logits), for n positions × m selected rows.
 * Shapes: x [n, ld_x] bf16 (first h columns); w [vocab, h] bf16; rows [m] int32 in [0, vocab);
 *         out [n, m] float32; device. Ownership: stream-ordered, no sync.
 * Returns 0; -EINVAL; -CM_ECUDA. Source: spec/jemm.md (label logits), spec/qwen3_5.md §3.1;
 * twin ex_cpu_linear on the gathered rows (+ ex_cpu_round_bf16). */
int exc_lm_rows(cudaStream_t stream, const __nv_bfloat16 *x, size_t ld_x, const __nv_bfloat16 *w,
                const int32_t *rows, float *out, size_t n, size_t m, size_t h, bool round_bf16);

/* Bytes of scratch exc_lm_logprob needs for n positions and a chunk of `chunk` vocabulary rows. */
size_t exc_lm_logprob_scratch_bytes(size_t n, size_t chunk);

/* out[i] = l[i, targets[i]] − log Σ_{v < vocab} exp(l[i, v]) with l = bf16(x · wᵀ) (a bf16 GEMM with
 * bf16 output, as the reference), the normaliser over exactly `vocab` logits, accumulated online
 * over chunks of `chunk` rows in float32 (running max and rescaled sum).
 * Shapes: x [n, ld_x] bf16; w [vocab_pad, h] bf16 with vocab ≤ vocab_pad = exc_gemm_pad(vocab)
 *         (pad rows ignored); targets [n] int32 in [0, vocab); out [n] float32; scratch of
 *         exc_lm_logprob_scratch_bytes(n, chunk) bytes; chunk a multiple of 8; all device.
 * Units: natural log. Ownership: stream-ordered, no sync; `g` is used on `stream`.
 * Returns 0; -EINVAL; exc_gemm's errors. Source: spec/omnijev.md §7 (LM features);
 * twin ex_cpu_linear + ex_cpu_round_bf16 + a float32 log-softmax. */
int exc_lm_logprob(struct exc_gemm *g, cudaStream_t stream, const __nv_bfloat16 *x, size_t ld_x,
                   const __nv_bfloat16 *w, size_t vocab, const int32_t *targets, float *out,
                   void *scratch, size_t n, size_t h, size_t chunk);

#ifdef __cplusplus
}
#endif

#endif
