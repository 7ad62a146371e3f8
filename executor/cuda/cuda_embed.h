/* Token embedding gather of the CUDA engine: bf16 table rows widened to the float32 residual
 * stream. Image features are scattered by the caller. Twin: cpu/cpu_embed.c (ex_cpu_embed). */
#ifndef S1_EX_CUDA_EMBED_H
#define S1_EX_CUDA_EMBED_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "exc_bf16.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[t, :] = f32(table[ids[t], :]). Ids must be in [0, vocab): the caller checks them on the host
 * before upload (an out-of-range id writes NaN rows instead of reading outside the table).
 * Shapes: table [vocab, d] bf16; ids [n] int32; out [n, d] float32; all device.
 * Ownership: stream-ordered, no sync. Returns 0; -EINVAL (d or n zero); -CM_ECUDA.
 * Source: spec/qwen3_5.md §3.1 step 1; twin ex_cpu_embed. */
int exc_embed(cudaStream_t stream, const __nv_bfloat16 *table, size_t vocab, const int32_t *ids,
              float *out, size_t n, size_t d);

#ifdef __cplusplus
}
#endif

#endif
