/* Depthwise causal conv1d + SiLU of the Gated DeltaNet layers on CUDA over packed sequences, each
 * with its carried window of the last K−1 input rows (continuation stays exact). No bias.
 * Twin: cpu/cpu_conv1d.c (ex_cpu_causal_conv1d_silu). */
#ifndef S1_EX_CUDA_CONV1D_H
#define S1_EX_CUDA_CONV1D_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "exc_bf16.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One packed sequence of a conv launch. */
struct exc_conv_seq {
  int32_t start;          /* first row of the launch */
  int32_t n;              /* rows (≥ 1) */
  const float *window_in; /* [K−1, c] device, oldest first, or NULL for zeros */
  float *window_out;      /* [K−1, c] device or NULL: the last K−1 rows of (window_in, x rows) */
};

/* y[t,c] = silu(Σ_{j<K} w[c,j] · x[t−(K−1)+j, c]) with rows before the sequence's start taken
 * from its window. Shapes: x, y [total, c] float32 device (y must not alias x); w [c, K] float32.
 * window_out must not alias any window_in of the launch. Ownership: host `seqs` (≤ EXC_MAX_SEQS)
 * copied into the launch; no sync. Returns 0; -EINVAL (n_seqs, kernel outside 2..8); -CM_ECUDA.
 * Source: spec/qwen3_5.md §4.2, §4.9; twin ex_cpu_causal_conv1d_silu. */
int exc_causal_conv1d_silu(cudaStream_t stream, const float *x, const float *w, float *y,
                           const struct exc_conv_seq *seqs, int n_seqs, size_t c, size_t kernel);

/* As exc_causal_conv1d_silu, evaluated as the bf16 reference does (x, w and windows already bf16
 * values; the convolution and the SiLU are two ops): y = R(silu(R(Σ taps))), float32 storage.
 * Shapes, ownership, returns as there. Source: spec/qwen3_5.md §4.2, §0.2; twin
 * ex_cpu_causal_conv1d_silu_bf16. */
int exc_causal_conv1d_silu_rounded(cudaStream_t stream, const float *x, const float *w, float *y,
                                   const struct exc_conv_seq *seqs, int n_seqs, size_t c,
                                   size_t kernel);

/* As exc_causal_conv1d_silu_rounded with the input rows in bf16 (the in_proj_qkv output a GEMM with
 * a bf16 output writes, already the reference's rounded projection); windows and y stay float32
 * (window_out holds the bf16 values as float32). Bit-identical to the _rounded form on the same
 * values held as float32. Shapes: x [total, c] bf16 device; the rest, ownership and returns as
 * there. Source: spec/qwen3_5.md §4.2, §0.2; twin ex_cpu_causal_conv1d_silu_bf16. */
int exc_causal_conv1d_silu_bf16(cudaStream_t stream, const __nv_bfloat16 *x, const float *w,
                                float *y, const struct exc_conv_seq *seqs, int n_seqs, size_t c,
                                size_t kernel);

#ifdef __cplusplus
}
#endif

#endif
