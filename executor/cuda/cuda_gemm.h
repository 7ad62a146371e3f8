/* The bf16 GEMM of the CUDA engine: y = x·wᵀ through cuBLASLt with float32 accumulation, one fixed
 * algorithm per weight shape so that a row's result never depends on how many rows share the call
 * (batched rows equal single rows bit for bit). No bias, no LoRA, no other epilogue.
 * Twin: cpu/cpu_matmul.c (ex_cpu_linear). */
#ifndef S1_EX_CUDA_GEMM_H
#define S1_EX_CUDA_GEMM_H

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>

#include "exc_bf16.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Output element type of a GEMM (the inputs are always bf16). */
enum exc_dtype {
  EXC_DTYPE_F32,  /* float32 */
  EXC_DTYPE_BF16, /* bfloat16, rounded once (nearest even) from the float32 accumulator */
  EXC_DTYPE_COUNT,
};

#define EXC_GEMM_ALIGN_ELEMS 8    /* k, ld_x, ld_y and m_pad are multiples of this (16-byte rows) */
#define EXC_GEMM_MAX_SHAPES 128   /* distinct (m, k, out dtype, accumulate) shapes per handle */
#define EXC_GEMM_REF_ROWS 1024    /* row count n at which the one algorithm of a shape is chosen */

/* Rows a weight of m output features is padded to on the device (m rounded up to a multiple of
 * EXC_GEMM_ALIGN_ELEMS; e.g. a 248,079-row LM head becomes 248,080 rows, the pad rows zero): odd
 * widths make cuBLASLt fall back to slow kernels (spec/benchmark.md). */
size_t exc_gemm_pad(size_t m);

/* One algorithm, chosen once per shape. */
struct exc_gemm_algo {
  size_t m, k;            /* output features (padded) and reduction length */
  enum exc_dtype y_dtype; /* output type */
  bool accumulate;        /* beta = 1 (y += x·wᵀ) */
  cublasLtMatmulAlgo_t algo; /* the cuBLASLt algorithm, split-K 1, no reduction scheme */
};

/* A cuBLASLt handle with its workspace and the per-shape algorithm cache. Not thread-safe: one per
 * stream-owning thread. */
struct exc_gemm {
  cublasLtHandle_t lt;         /* cuBLASLt handle */
  void *workspace;             /* device workspace, reserved at creation */
  size_t workspace_bytes;      /* its size */
  int n_algos;                 /* cache entries in use */
  struct exc_gemm_algo algos[EXC_GEMM_MAX_SHAPES]; /* the cache, filled on each shape's first use */
};

/* Creates the handle and reserves `workspace_bytes` of device memory (32 MiB is cuBLASLt's advice
 * for Hopper; 0 allowed). Ownership: the caller frees with exc_gemm_free (NULL-safe).
 * Returns 0; -ENOMEM; -CM_ECUDA (no device, allocation or handle creation failed). */
int exc_gemm_new(size_t workspace_bytes, struct exc_gemm **ret_gemm);
void exc_gemm_free(struct exc_gemm *g);

/* y[n, m] = x[n, k] · w[m, k]ᵀ (+ y when `accumulate`), float32 accumulation, one rounding to the
 * output type. The algorithm of (m, k, y_dtype, accumulate) is chosen on its first call (cuBLASLt
 * heuristic at n = EXC_GEMM_REF_ROWS, split-K reductions excluded) and reused for every n: each
 * output element is then one CTA's dot product over k in the algorithm's fixed order, whatever n.
 * Shapes: x [n, ld_x] bf16 (first k columns used), w [m, k] bf16 row-major (the PyTorch weight
 *         layout, rows padded to exc_gemm_pad(m) by the caller when m is odd), y [n, ld_y] of
 *         y_dtype (first m columns written); k, ld_x, ld_y, m multiples of EXC_GEMM_ALIGN_ELEMS,
 *         pointers 16-byte aligned; y must not alias x or w. n = 0 does nothing.
 * Units: none. Ownership: device buffers of the caller; enqueued on `stream`, no sync; the handle
 * must not be used from two threads at once.
 * Returns 0; -EINVAL (alignment, sizes, dtype, accumulate with bf16 output: cuBLASLt rounds the
 * product to bf16 before adding y there, measured); -CM_ELIMIT (more than EXC_GEMM_MAX_SHAPES shapes);
 * -CM_EUNSUPPORTED (cuBLASLt has no split-K-free algorithm for the shape); -CM_ECUDA.
 * Source: torch.nn.functional.linear in bf16 (cuBLASLt, fp32 accumulate); twin ex_cpu_linear. */
int exc_gemm(struct exc_gemm *g, cudaStream_t stream, const __nv_bfloat16 *x, size_t ld_x,
             const __nv_bfloat16 *w, void *y, size_t ld_y, enum exc_dtype y_dtype, bool accumulate,
             size_t n, size_t k, size_t m);

/* Chooses (and caches) the algorithm of a shape without running it, so that start-up does every
 * heuristic query before the first request. Same arguments and errors as exc_gemm. */
int exc_gemm_prepare(struct exc_gemm *g, size_t k, size_t m, enum exc_dtype y_dtype,
                     bool accumulate);

#ifdef __cplusplus
}
#endif

#endif
