/* The Gated DeltaNet core of Qwen3.5 on CUDA: q/k L2 norm and gates, then the chunked delta rule
 * (chunk 64, counted from each sequence's first token of the launch) with the float32 recurrent
 * state carried in and out, over variable-length packed sequences (rows may share one state_in).
 * Twins: cpu/cpu_gdn.c (ex_cpu_gdn_prepare, ex_cpu_gdn_chunked). */
#ifndef S1_EX_CUDA_GDN_H
#define S1_EX_CUDA_GDN_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu_gdn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One packed sequence of a GDN launch. */
struct exc_gdn_seq {
  int32_t start;         /* first token row of the launch */
  int32_t n;             /* tokens (≥ 1) */
  const float *state_in; /* [Hv, dk, dv] device, or NULL for zeros (a fresh sequence) */
  float *state_out;      /* [Hv, dk, dv] device, or NULL; may equal state_in */
};

/* In place on the conv output rows qkv [n, ld_qkv] (q at column 0, k at Hk·dk, v at 2·Hk·dk):
 * q ← q·rsqrt(Σq²+1e-6)/√dk, k ← k·rsqrt(Σk²+1e-6) per head; beta = sigmoid(b),
 * g = −exp(A_log)·softplus(a + dt_bias). Shapes: b, a [n, ld_ba] (first Hv columns used);
 * beta, g [n, Hv]; a_log, dt_bias [Hv]; all float32 device. Ownership: stream-ordered, no sync.
 * Returns 0 or -CM_ECUDA. Source: spec/qwen3_5.md §4.3-4.4; twin ex_cpu_gdn_prepare. */
int exc_gdn_prepare(cudaStream_t stream, float *qkv, size_t ld_qkv, const float *b,
                    const float *a, size_t ld_ba, const float *a_log, const float *dt_bias,
                    float *beta, float *g, size_t n, const struct ex_gdn_dims *dims);

/* Chunked delta rule per sequence: S ← e^{g}S; δ = β(v − Sᵀk); S ← S + kδᵀ; o = Sᵀq, evaluated in
 * chunks of EX_QWEN35_GDN_CHUNK (64) as the reference's torch_chunk_gated_delta_rule.
 * Shapes: qkv [total, ld_qkv] prepared (see exc_gdn_prepare); beta, g [total, Hv];
 *         out [total, Hv, dv] float32; scratch of exc_gdn_chunked_scratch_bytes bytes.
 * Ownership: device buffers (out overlapping none of the others); host `seqs` (≤ EXC_MAX_SEQS)
 * copied into the launch; no sync.
 * Returns 0; -EINVAL (n_seqs, sizes, dk/dv other than 128/128 or 16/24, ld_qkv not a multiple
 * of 4, qkv/out/scratch not 16-byte aligned); -CM_ECUDA. Source: spec/qwen3_5.md §4.6; twins
 * ex_cpu_gdn_chunked (and ex_cpu_gdn_recurrent up to float32 rounding). One implementation (fp32
 * SIMT; cuda_gdn.cu); the variants measured against it are in tests/cuda/gdn_variants.cu. */
int exc_gdn_chunked(cudaStream_t stream, const float *qkv, size_t ld_qkv, const float *beta,
                    const float *g, float *out, const struct exc_gdn_seq *seqs, int n_seqs,
                    const struct ex_gdn_dims *dims, void *scratch);
size_t exc_gdn_chunked_scratch_bytes(size_t total_tokens, int n_seqs,
                                     const struct ex_gdn_dims *dims);

#ifdef __cplusplus
}
#endif

#endif
