/* The bf16 GEMM of the CUDA engine: y = x·wᵀ through cuBLASLt with float32 accumulation. Each
 * weight shape has a reference algorithm and, once prepared, one algorithm per row-count bucket
 * that matched the reference bit for bit on a start-up probe, so a row's result does not depend on
 * how many rows share the call (batched rows equal single rows bit for bit) while small calls get
 * tiles that fill the GPU. No bias, no LoRA, no other epilogue, no split-K.
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

#define EXC_GEMM_ALIGN_ELEMS 8  /* k, ld_x, ld_y and m_pad are multiples of this (16-byte rows) */
#define EXC_GEMM_MAX_SHAPES 128 /* distinct (m, k, out dtype, accumulate) shapes per handle */
#define EXC_GEMM_REF_ROWS 1024  /* row count n at which a shape's reference algorithm is chosen */
#define EXC_GEMM_N_BUCKETS 8    /* row-count buckets: n ≤ 32, 64, …, 1024, 2048, larger */

/* Rows a weight of m output features is padded to on the device (m rounded up to a multiple of
 * EXC_GEMM_ALIGN_ELEMS; e.g. a 248,079-row LM head becomes 248,080 rows, the pad rows zero): odd
 * widths make cuBLASLt fall back to slow kernels (spec/benchmark.md). */
size_t exc_gemm_pad(size_t m);

/* Bucket index (0 … EXC_GEMM_N_BUCKETS − 1) of a call with n rows: the first bucket whose upper
 * row count is ≥ n, the last for every n > 2048. */
int exc_gemm_bucket(size_t n);
/* Upper row count of bucket b (32, 64, …, 2048; SIZE_MAX for the last); 0 when b is out of
 * range. */
size_t exc_gemm_bucket_rows(int b);

/* How a shape's per-bucket algorithms were chosen. */
enum exc_gemm_sel {
  EXC_GEMM_SEL_REF,         /* the reference for every n (first used without exc_gemm_prepare, or
                             * selection off: exc_gemm.select, env S1_GEMM_SELECT=0) */
  EXC_GEMM_SEL_BUCKETS,     /* per bucket the fastest candidate that passed the probe */
  EXC_GEMM_SEL_SKIP_SIZE,   /* weight over 512 MiB (the LM head): reference kept */
  EXC_GEMM_SEL_SKIP_MEMORY, /* no device memory for the probe: reference kept */
  EXC_GEMM_SEL_UNSTABLE,    /* the reference changed a bit on a rerun: reference kept */
};

/* The algorithms of one shape. */
struct exc_gemm_algo {
  size_t m, k;               /* output features (padded) and reduction length */
  enum exc_dtype y_dtype;    /* output type */
  bool accumulate;           /* beta = 1 (y += x·wᵀ) */
  cublasLtMatmulAlgo_t algo; /* the reference: split-K 1, no reduction scheme, chosen at n = 1024 */
  cublasLtMatmulAlgo_t bucket_algo[EXC_GEMM_N_BUCKETS]; /* what a call of bucket b runs */
  enum exc_gemm_sel sel;     /* how bucket_algo was filled */
  bool tried;                /* exc_gemm_prepare's selection ran (whatever its outcome) */
  int n_candidates;          /* distinct split-K-free algorithms probed (reference included) */
  int n_rejected;            /* of those, rejected: a differing bit or a failed launch */
  float bucket_us[EXC_GEMM_N_BUCKETS]; /* median µs of the chosen one at bucket_rows (cold L2) */
  float ref_us[EXC_GEMM_N_BUCKETS];    /* the reference's median µs there */
  size_t bucket_rows[EXC_GEMM_N_BUCKETS]; /* n at which bucket b was timed */
  float select_ms;           /* wall time of the selection (probe, heuristics, timing) */
};

/* A cuBLASLt handle with its workspace and the per-shape algorithm cache. Not thread-safe: one per
 * stream-owning thread. */
struct exc_gemm {
  cublasLtHandle_t lt;                             /* cuBLASLt handle */
  void *workspace;                                 /* device workspace, reserved at creation */
  size_t workspace_bytes;                          /* its size */
  bool select;                                     /* exc_gemm_prepare chooses per-bucket
                                                    * algorithms (default true; false when env
                                                    * S1_GEMM_SELECT=0 at creation; settable) */
  int n_algos;                                     /* cache entries in use */
  struct exc_gemm_algo algos[EXC_GEMM_MAX_SHAPES]; /* the cache, filled on each shape's first use */
};

/* Creates the handle and reserves `workspace_bytes` of device memory (32 MiB is cuBLASLt's advice
 * for Hopper; 0 allowed). Ownership: the caller frees with exc_gemm_free (NULL-safe).
 * Returns 0; -ENOMEM; -CM_ECUDA (no device, allocation or handle creation failed). */
int exc_gemm_new(size_t workspace_bytes, struct exc_gemm **ret_gemm);
void exc_gemm_free(struct exc_gemm *g);

/* y[n, m] = x[n, k] · w[m, k]ᵀ (+ y when `accumulate`), float32 accumulation, one rounding to the
 * output type. The call runs its shape's algorithm for the bucket of n (exc_gemm_bucket; a table
 * lookup, nothing else on this path). A shape not prepared gets its reference on its first call
 * (cuBLASLt heuristic at n = EXC_GEMM_REF_ROWS, split-K reductions excluded) for every bucket.
 * Every algorithm used is split-K-free and matched the reference bit for bit on the probe of
 * exc_gemm_prepare, so a row's result does not depend on n (tested at every bucket).
 * Shapes: x [n, ld_x] bf16 (first k columns used), w [m, k] bf16 row-major (the PyTorch weight
 *         layout, rows padded to exc_gemm_pad(m) by the caller when m is odd), y [n, ld_y] of
 *         y_dtype (first m columns written); k, ld_x, ld_y, m multiples of EXC_GEMM_ALIGN_ELEMS,
 *         pointers 16-byte aligned; y must not alias x or w. n = 0 does nothing.
 * Units: none. Ownership: device buffers of the caller; enqueued on `stream`, no sync; the handle
 * must not be used from two threads at once.
 * Returns 0; -EINVAL (alignment, sizes, dtype, accumulate with bf16 output: cuBLASLt rounds the
 * product to bf16 before adding y there, measured); -CM_ELIMIT (more than EXC_GEMM_MAX_SHAPES
 * shapes); -CM_EUNSUPPORTED (cuBLASLt has no split-K-free algorithm for the shape); -CM_ECUDA.
 * Source: torch.nn.functional.linear in bf16 (cuBLASLt, fp32 accumulate); twin ex_cpu_linear. */
int exc_gemm(struct exc_gemm *g, cudaStream_t stream, const __nv_bfloat16 *x, size_t ld_x,
             const __nv_bfloat16 *w, void *y, size_t ld_y, enum exc_dtype y_dtype, bool accumulate,
             size_t n, size_t k, size_t m);

/* Chooses (and caches) a shape's algorithms before the first request: the reference (as on a first
 * exc_gemm call), then, when g->select, per row-count bucket the fastest split-K-free candidate
 * of the cuBLASLt heuristic (asked at every bucket's n) whose output is bit-identical to the
 * reference's on a random probe (rows at n = 256, or all probe rows up to 4,096 for bf16 outputs,
 * whose rounding hides most single differences; n = 1; the bucket's n; one differing bit
 * rejects), timed with CUDA events at the bucket's upper n (4,096 or fewer for the last), cold
 * L2, median of 5. Identical bits are possible because, without split-K, an output element is one
 * CTA's k loop and kernels with the same MMA instruction and k order round alike whatever their
 * tile; the probe checks it. Weights over 512 MiB keep the reference (enum exc_gemm_sel).
 * Shapes and arguments: as exc_gemm. Units: algos[].bucket_us µs, select_ms ms.
 * Ownership: start-up only: synchronizes the device, allocates and frees up to ~2.2 GiB for the
 * probe (no room: reference kept), takes 0.05-2 s per shape (measured on the H200); once per shape.
 * Returns 0; exc_gemm's argument errors; -CM_ELIMIT; -CM_EUNSUPPORTED; -ENOMEM; -CM_ECUDA (then
 * the shape keeps its reference for every n). Source: cuBLASLt heuristics; twin ex_cpu_linear. */
int exc_gemm_prepare(struct exc_gemm *g, size_t k, size_t m, enum exc_dtype y_dtype,
                     bool accumulate);

#ifdef __cplusplus
}
#endif

#endif
