/* The Gated DeltaNet core of Qwen3.5 for the CPU reference backend: gate and q/k preparation, and
 * the delta-rule recurrence in float32 in both its recurrent (token by token) and chunked (chunk
 * 64, the reference's prefill) forms, each carrying the [Hv, dk, dv] state in and out. The conv,
 * projections and the gated output norm are separate ops. */
#ifndef S1_EX_CPU_GDN_H
#define S1_EX_CPU_GDN_H

#include <stddef.h>

#include "ex_backend.h" /* struct ex_gdn_dims */

/* In place on the conv output's q and k parts, and from the raw b and a projections:
 * q ← q · rsqrt(Σq² + 1e-6) / √dk, k ← k · rsqrt(Σk² + 1e-6) (per head vector);
 * beta = sigmoid(b); g = −exp(A_log) · softplus(a + dt_bias) (softplus(x) = x above 20).
 * Shapes: q, k [n, Hk, dk]; b, a, beta, g [n, Hv]; a_log, dt_bias [Hv]. beta/g may alias b/a.
 * Units: g is a log-decay (≤ 0). Source: spec/qwen3_5.md §4.3-4.4 (newer, fp32 L2 norm). */
void ex_cpu_gdn_prepare(float *q, float *k, const float *b, const float *a, const float *a_log,
                        const float *dt_bias, float *beta, float *g, size_t n,
                        const struct ex_gdn_dims *dims);

/* Recurrent form, token by token: S ← e^{g}S; δ = β(v − Sᵀk); S ← S + kδᵀ; o = Sᵀq.
 * Shapes: q, k [n, Hk, dk] (prepared); v [n, Hv, dv]; beta, g [n, Hv]; state [Hv, dk, dv] in/out
 *         (zeros for a fresh sequence); out [n, Hv, dv]. Ownership: caller's buffers.
 * Source: spec/qwen3_5.md §4.5 (torch_recurrent_gated_delta_rule). Twin of the chunked form. */
void ex_cpu_gdn_recurrent(const float *q, const float *k, const float *v, const float *beta,
                          const float *g, float *state, float *out, size_t n,
                          const struct ex_gdn_dims *dims);

/* Chunked form with chunks of `chunk` tokens counted from the first token of this call; equal to
 * the recurrent form up to float32 rounding.
 * Shapes: as ex_cpu_gdn_recurrent; scratch of ex_cpu_gdn_chunked_scratch(chunk, dims) floats.
 * Source: spec/qwen3_5.md §4.6 (torch_chunk_gated_delta_rule, triangular solve form). */
void ex_cpu_gdn_chunked(const float *q, const float *k, const float *v, const float *beta,
                        const float *g, float *state, float *out, size_t n, size_t chunk,
                        const struct ex_gdn_dims *dims, float *scratch);
size_t ex_cpu_gdn_chunked_scratch(size_t chunk, const struct ex_gdn_dims *dims);

#endif
