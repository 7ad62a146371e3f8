/* The Gated DeltaNet chunked implementations that the engine does not run (tests/cuda/
 * gdn_variants.cu), for the twin test and the kernel benchmark only: each takes exactly
 * exc_gdn_chunked's arguments, scratch (exc_gdn_chunked_scratch_bytes) and errors, and must
 * give its results up to float32 rounding. */
#ifndef S1_TESTS_CUDA_GDN_VARIANTS_H
#define S1_TESTS_CUDA_GDN_VARIANTS_H

#include "cuda_gdn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* `simt`, the first implementation: one intra block per (chunk, value head) with per-column
 * solves, S per chunk stored by the walk, then O = e^Γ⊙(Q·S_c) + A·V' in a third launch; every
 * product in fp32 FMAs. Source: spec/qwen3_5.md §4.6; twin ex_cpu_gdn_chunked. */
int gdn_simt_chunked(cudaStream_t stream, const float *qkv, size_t ld_qkv, const float *beta,
                     const float *g, float *out, const struct exc_gdn_seq *seqs, int n_seqs,
                     const struct ex_gdn_dims *dims, void *scratch);
/* `invt`: the engine's intra and A·V' launches around a state walk whose products (W·S, Q·S,
 * Kᵀ·V') run on tensor cores in 3xTF32 (x = hi + lo, three TF32 products with fp32 accumulation,
 * ≈ fp32 accuracy) with S held in registers. Source and twin as above. */
int gdn_invt_chunked(cudaStream_t stream, const float *qkv, size_t ld_qkv, const float *beta,
                     const float *g, float *out, const struct exc_gdn_seq *seqs, int n_seqs,
                     const struct ex_gdn_dims *dims, void *scratch);

#ifdef __cplusplus
}
#endif

#endif
