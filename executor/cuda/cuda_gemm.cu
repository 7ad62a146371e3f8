/* The cuBLASLt GEMM wrapper of cuda_gemm.h: row-major y = x·wᵀ written as the column-major
 * product yᵀ = w·xᵀ (A = w transposed, B = x), descriptors built on the stack per call (no host
 * allocation on the request path), one algorithm per shape. No epilogues, no batching. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cm_error.h"
#include "cuda_check.h"
#include "cuda_gemm.h"

size_t exc_gemm_pad(size_t m) {
  return (m + EXC_GEMM_ALIGN_ELEMS - 1) / EXC_GEMM_ALIGN_ELEMS * EXC_GEMM_ALIGN_ELEMS;
}

int exc_gemm_new(size_t workspace_bytes, struct exc_gemm **ret_gemm) {
  struct exc_gemm *g = (struct exc_gemm *)calloc(1, sizeof(*g));
  if (!g)
    return -ENOMEM;
  int r = EXC_CUBLAS(cublasLtCreate(&g->lt));
  if (r < 0)
    goto fail;
  if (workspace_bytes > 0) {
    r = EXC_CUDA(cudaMalloc(&g->workspace, workspace_bytes));
    if (r < 0)
      goto fail;
  }
  g->workspace_bytes = workspace_bytes;
  *ret_gemm = g;
  return 0;
fail:
  exc_gemm_free(g);
  return r;
}

void exc_gemm_free(struct exc_gemm *g) {
  if (!g)
    return;
  if (g->workspace)
    cudaFree(g->workspace);
  if (g->lt)
    cublasLtDestroy(g->lt);
  free(g);
}

static cudaDataType_t cuda_type(enum exc_dtype t) {
  return t == EXC_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* The operation descriptor and the three layouts of one call, on the caller's stack. */
struct gemm_desc {
  cublasLtMatmulDescOpaque_t op;
  cublasLtMatrixLayoutOpaque_t a, b, c;
};

static int desc_init(struct gemm_desc *d, size_t n, size_t k, size_t m, size_t ld_x, size_t ld_y,
                     enum exc_dtype y_dtype) {
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  int r = EXC_CUBLAS(cublasLtMatmulDescInit(&d->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  if (r == 0)
    r = EXC_CUBLAS(
        cublasLtMatmulDescSetAttribute(&d->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  if (r == 0)
    r = EXC_CUBLAS(
        cublasLtMatmulDescSetAttribute(&d->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  /* A = w: k × m column-major (ld k), used transposed; B = x: k × n (ld ld_x); C = D = yᵀ. */
  if (r == 0)
    r = EXC_CUBLAS(cublasLtMatrixLayoutInit(&d->a, CUDA_R_16BF, k, m, k));
  if (r == 0)
    r = EXC_CUBLAS(cublasLtMatrixLayoutInit(&d->b, CUDA_R_16BF, k, n, ld_x));
  if (r == 0)
    r = EXC_CUBLAS(cublasLtMatrixLayoutInit(&d->c, cuda_type(y_dtype), m, n, ld_y));
  return r;
}

static bool aligned16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}

static int check_shape(size_t k, size_t m, enum exc_dtype y_dtype, bool accumulate) {
  if (k == 0 || m == 0 || k % EXC_GEMM_ALIGN_ELEMS || m % EXC_GEMM_ALIGN_ELEMS ||
      (int)y_dtype < 0 || y_dtype >= EXC_DTYPE_COUNT || k > INT32_MAX || m > INT32_MAX)
    return -EINVAL;
  /* measured on the H200: with a bf16 D and beta = 1, cuBLASLt rounds the product to bf16 before
   * adding C (errors of half a bf16 ulp of the product, not of the sum): refused */
  if (accumulate && y_dtype == EXC_DTYPE_BF16)
    return -EINVAL;
  return 0;
}

/* Asks the heuristic for split-K-free algorithms at n = EXC_GEMM_REF_ROWS and keeps the first one
 * that is split-K 1 with no reduction scheme (checked on the returned config, then set explicitly):
 * such an algorithm computes every output element in one CTA with one k order, so row results do
 * not depend on n. */
static int choose_algo(struct exc_gemm *g, size_t k, size_t m, enum exc_dtype y_dtype,
                       bool accumulate, cublasLtMatmulAlgo_t *ret_algo) {
  enum { N_RESULTS = 8 };
  struct gemm_desc d;
  int r = desc_init(&d, EXC_GEMM_REF_ROWS, k, m, k, m, y_dtype);
  if (r < 0)
    return r;
  cublasLtMatmulPreferenceOpaque_t pref;
  uint64_t ws = g->workspace_bytes;
  uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE;
  uint32_t align = 16;
  r = EXC_CUBLAS(cublasLtMatmulPreferenceInit(&pref));
  if (r == 0)
    r = EXC_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
        &pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  if (r == 0)
    r = EXC_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
        &pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask)));
  const cublasLtMatmulPreferenceAttributes_t aligns[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && r == 0; i++)
    r = EXC_CUBLAS(cublasLtMatmulPreferenceSetAttribute(&pref, aligns[i], &align, sizeof(align)));
  if (r < 0)
    return r;
  (void)accumulate; /* beta is a run-time scalar: the same algorithms serve both */
  cublasLtMatmulHeuristicResult_t res[N_RESULTS];
  int n_res = 0;
  r = EXC_CUBLAS(cublasLtMatmulAlgoGetHeuristic(g->lt, &d.op, &d.a, &d.b, &d.c, &d.c, &pref,
                                                N_RESULTS, res, &n_res));
  if (r < 0)
    return r;
  for (int i = 0; i < n_res; i++) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS)
      continue;
    cublasLtMatmulAlgo_t algo = res[i].algo;
    int32_t splitk = 1;
    uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;
    size_t got = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                             sizeof(splitk), &got) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                             sizeof(scheme), &got) != CUBLAS_STATUS_SUCCESS)
      continue;
    if (splitk > 1 || scheme != CUBLASLT_REDUCTION_SCHEME_NONE)
      continue;
    *ret_algo = algo;
    return 0;
  }
  return -CM_EUNSUPPORTED;
}

static int find_algo(struct exc_gemm *g, size_t k, size_t m, enum exc_dtype y_dtype,
                     bool accumulate, const cublasLtMatmulAlgo_t **ret_algo) {
  for (int i = 0; i < g->n_algos; i++) {
    const struct exc_gemm_algo *e = &g->algos[i];
    if (e->m == m && e->k == k && e->y_dtype == y_dtype && e->accumulate == accumulate) {
      *ret_algo = &e->algo;
      return 0;
    }
  }
  if (g->n_algos >= EXC_GEMM_MAX_SHAPES)
    return -CM_ELIMIT;
  struct exc_gemm_algo *e = &g->algos[g->n_algos];
  int r = choose_algo(g, k, m, y_dtype, accumulate, &e->algo);
  if (r < 0)
    return r;
  e->m = m;
  e->k = k;
  e->y_dtype = y_dtype;
  e->accumulate = accumulate;
  g->n_algos++;
  *ret_algo = &e->algo;
  return 0;
}

int exc_gemm_prepare(struct exc_gemm *g, size_t k, size_t m, enum exc_dtype y_dtype,
                     bool accumulate) {
  int r = check_shape(k, m, y_dtype, accumulate);
  if (r < 0)
    return r;
  const cublasLtMatmulAlgo_t *algo;
  return find_algo(g, k, m, y_dtype, accumulate, &algo);
}

int exc_gemm(struct exc_gemm *g, cudaStream_t stream, const __nv_bfloat16 *x, size_t ld_x,
             const __nv_bfloat16 *w, void *y, size_t ld_y, enum exc_dtype y_dtype, bool accumulate,
             size_t n, size_t k, size_t m) {
  int r = check_shape(k, m, y_dtype, accumulate);
  if (r < 0)
    return r;
  if (ld_x < k || ld_y < m || ld_x % EXC_GEMM_ALIGN_ELEMS || ld_y % EXC_GEMM_ALIGN_ELEMS ||
      n > INT32_MAX || !aligned16(x) || !aligned16(w) || !aligned16(y))
    return -EINVAL;
  if (n == 0)
    return 0;
  const cublasLtMatmulAlgo_t *algo;
  r = find_algo(g, k, m, y_dtype, accumulate, &algo);
  if (r < 0)
    return r;
  struct gemm_desc d;
  r = desc_init(&d, n, k, m, ld_x, ld_y, y_dtype);
  if (r < 0)
    return r;
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  return EXC_CUBLAS(cublasLtMatmul(g->lt, &d.op, &alpha, w, &d.a, x, &d.b, &beta, y, &d.c, y,
                                   &d.c, algo, g->workspace, g->workspace_bytes, stream));
}
