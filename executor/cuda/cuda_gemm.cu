/* The cuBLASLt GEMM wrapper of cuda_gemm.h: row-major y = x·wᵀ written as the column-major
 * product yᵀ = w·xᵀ (A = w transposed, B = x), descriptors built on the stack per call (no host
 * allocation on the request path), a reference algorithm per shape and, after exc_gemm_prepare, one
 * algorithm per row-count bucket proved bit-identical to it on a random probe. No epilogues, no
 * batching, no split-K. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_error.h"
#include "cuda_check.h"
#include "cuda_gemm.h"

/* Upper row count of each bucket (the last takes every larger n). */
static const size_t bucket_hi[EXC_GEMM_N_BUCKETS] = {32, 64, 128, 256, 512, 1024, 2048, SIZE_MAX};

enum {
  PROBE_ROWS = 256,     /* rows compared bit for bit per candidate (float32 outputs; bf16
                         * outputs compare every probe row, see select_buckets) */
  LAST_TIME_ROWS = 4096, /* n at which the open-ended last bucket is timed (memory permitting) */
  N_HEURISTIC = 8,      /* heuristic results asked for at each bucket's n */
  MAX_CANDIDATES = 8 * EXC_GEMM_N_BUCKETS + 1, /* reference + the union of those results */
  TIME_REPS = 5,        /* timed runs per candidate and bucket (median), after one warm-up */
};
/* Device memory the probe of one shape may take (weight, inputs, outputs; the L2 flush buffer
 * beside it), and the largest weight probed (larger ones, the LM head, keep the reference). */
static const size_t probe_bytes_max = (size_t)2 << 30;
static const size_t probe_weight_max = (size_t)512 << 20;
static const size_t flush_bytes = (size_t)128 << 20; /* > the H200's 60 MB L2 */

size_t exc_gemm_pad(size_t m) {
  return (m + EXC_GEMM_ALIGN_ELEMS - 1) / EXC_GEMM_ALIGN_ELEMS * EXC_GEMM_ALIGN_ELEMS;
}

int exc_gemm_bucket(size_t n) {
  int b = 0;
  while (b < EXC_GEMM_N_BUCKETS - 1 && n > bucket_hi[b])
    b++;
  return b;
}

size_t exc_gemm_bucket_rows(int b) {
  if (b < 0 || b >= EXC_GEMM_N_BUCKETS)
    return 0;
  return bucket_hi[b];
}

int exc_gemm_new(size_t workspace_bytes, struct exc_gemm **ret_gemm) {
  struct exc_gemm *g = (struct exc_gemm *)calloc(1, sizeof(*g));
  if (!g)
    return -ENOMEM;
  const char *env = getenv("S1_GEMM_SELECT"); /* "0": the reference algorithm for every n */
  g->select = !(env && !strcmp(env, "0"));
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

static size_t esize(enum exc_dtype t) {
  return t == EXC_DTYPE_BF16 ? 2 : 4;
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

/* Asks the heuristic for split-K-free algorithms at n rows (ld_x = k, ld_y = m) and keeps, in the
 * heuristic's order, those whose returned config is split-K 1 with no reduction scheme: such an
 * algorithm computes every output element in one CTA with one k order, so row results do not
 * depend on n. Writes at most `max` algorithms; *ret_n may be 0. */
static int query_algos(struct exc_gemm *g, size_t n, size_t k, size_t m, enum exc_dtype y_dtype,
                       cublasLtMatmulAlgo_t *out, int max, int *ret_n) {
  enum { N_RESULTS = 16 };
  struct gemm_desc d;
  int r = desc_init(&d, n, k, m, k, m, y_dtype);
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
  cublasLtMatmulHeuristicResult_t res[N_RESULTS];
  int n_res = 0, n_out = 0;
  r = EXC_CUBLAS(cublasLtMatmulAlgoGetHeuristic(g->lt, &d.op, &d.a, &d.b, &d.c, &d.c, &pref,
                                                N_RESULTS, res, &n_res));
  if (r < 0)
    return r;
  for (int i = 0; i < n_res && n_out < max; i++) {
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
    out[n_out++] = algo;
  }
  *ret_n = n_out;
  return 0;
}

/* The reference algorithm of a shape: the heuristic's first split-K-free choice at
 * n = EXC_GEMM_REF_ROWS (beta is a run-time scalar: the same algorithms serve accumulate). */
static int choose_ref(struct exc_gemm *g, size_t k, size_t m, enum exc_dtype y_dtype,
                      cublasLtMatmulAlgo_t *ret_algo) {
  int n = 0;
  int r = query_algos(g, EXC_GEMM_REF_ROWS, k, m, y_dtype, ret_algo, 1, &n);
  if (r < 0)
    return r;
  return n == 1 ? 0 : -CM_EUNSUPPORTED;
}

/* ---- per-bucket selection (start-up only) ---- */

__device__ static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* p[i] = uniform in [-1, 1) from a hash of (seed, i), as bf16 (bf16 = true) or float32. */
__global__ static void fill_uniform(void *p, size_t n, uint64_t seed, bool bf16) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull * (i + 1));
    float u = (float)(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
    if (bf16)
      ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(u);
    else
      ((float *)p)[i] = u;
  }
}

/* *count += the number of 32-bit words where a and b differ. */
__global__ static void count_diff(const uint32_t *a, const uint32_t *b, size_t n_words,
                                  unsigned long long *count) {
  unsigned long long c = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_words;
       i += (size_t)gridDim.x * blockDim.x)
    c += a[i] != b[i];
  if (c)
    atomicAdd(count, c);
}

/* The buffers of one shape's probe, all on the device except `diff_host`. */
struct probe {
  cudaStream_t stream;        /* private, non-blocking */
  __nv_bfloat16 *w;           /* [m, k] random */
  __nv_bfloat16 *x;           /* [n_max, k] random */
  void *y;                    /* [n_max, m] candidate output */
  void *y_ref;                /* [n_ref, m] the reference's output */
  void *y0;                   /* [n_max, m] accumulate start values (accumulate only) */
  void *flush;                /* flush_bytes written before each timed run (cold L2) */
  unsigned long long *diff;   /* differing-word counter */
  cudaEvent_t ev[2 * TIME_REPS]; /* start/stop per timed run */
  size_t k, m, n_max;         /* shape and rows of x / y */
  size_t n_ref;               /* rows of y_ref: compared per candidate */
  enum exc_dtype y_dtype;     /* output type */
  bool accumulate;            /* beta = 1 */
};

static void probe_fini(struct probe *p) {
  cudaFree(p->w);
  cudaFree(p->x);
  cudaFree(p->y);
  cudaFree(p->y_ref);
  cudaFree(p->y0);
  cudaFree(p->flush);
  cudaFree(p->diff);
  for (int i = 0; i < 2 * TIME_REPS; i++)
    if (p->ev[i])
      cudaEventDestroy(p->ev[i]);
  if (p->stream)
    cudaStreamDestroy(p->stream);
}

/* Allocates the probe buffers; 1 (not an error) when the device has no room for them. */
static int probe_init(struct probe *p) {
  size_t es = esize(p->y_dtype);
  struct {
    void **ptr;
    size_t bytes;
  } bufs[] = {
      {(void **)&p->w, p->m * p->k * 2},      {(void **)&p->x, p->n_max * p->k * 2},
      {&p->y, p->n_max * p->m * es},          {&p->y_ref, p->n_ref * p->m * es},
      {&p->y0, p->accumulate ? p->n_max * p->m * es : 0}, {&p->flush, flush_bytes},
      {(void **)&p->diff, sizeof(unsigned long long)},
  };
  for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
    if (bufs[i].bytes == 0)
      continue;
    cudaError_t e = cudaMalloc(bufs[i].ptr, bufs[i].bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError(); /* not sticky: clear it */
      return 1;
    }
    int r = EXC_CUDA(e);
    if (r < 0)
      return r;
  }
  int r = EXC_CUDA(cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking));
  for (int i = 0; i < 2 * TIME_REPS && r == 0; i++)
    r = EXC_CUDA(cudaEventCreate(&p->ev[i]));
  if (r < 0)
    return r;
  fill_uniform<<<1024, 256, 0, p->stream>>>(p->w, p->m * p->k, 0x5157ull, true);
  fill_uniform<<<1024, 256, 0, p->stream>>>(p->x, p->n_max * p->k, 0x1a2bull, true);
  /* float32 start values (the probe runs float32 outputs only) */
  if (p->y0)
    fill_uniform<<<1024, 256, 0, p->stream>>>(p->y0, p->n_max * p->m * es / 4, 0x77ull, false);
  return EXC_CUDA(cudaGetLastError());
}

/* Enqueues one GEMM of the probe at n rows into `y` (ld m), first copying the start values into
 * its n rows when accumulating and `init`. Returns the cuBLASLt status (not converted: a candidate
 * that cannot run is rejected, not an error). */
static cublasStatus_t probe_run(struct exc_gemm *g, struct probe *p,
                                const cublasLtMatmulAlgo_t *algo, size_t n, void *y, bool init) {
  size_t es = esize(p->y_dtype);
  if (p->accumulate && init &&
      cudaMemcpyAsync(y, p->y0, n * p->m * es, cudaMemcpyDeviceToDevice, p->stream) != cudaSuccess)
    return CUBLAS_STATUS_EXECUTION_FAILED;
  struct gemm_desc d;
  if (desc_init(&d, n, p->k, p->m, p->k, p->m, p->y_dtype) < 0)
    return CUBLAS_STATUS_INTERNAL_ERROR;
  const float alpha = 1.0f, beta = p->accumulate ? 1.0f : 0.0f;
  return cublasLtMatmul(g->lt, &d.op, &alpha, p->w, &d.a, p->x, &d.b, &beta, y, &d.c, y, &d.c,
                        algo, g->workspace, g->workspace_bytes, p->stream);
}

/* Number of differing 32-bit words between the first n rows of y and of the reference output
 * (synchronizes the probe's stream); negative on a CUDA error. */
static long long probe_diff(struct probe *p, size_t n) {
  size_t words = n * p->m * esize(p->y_dtype) / 4;
  unsigned long long h = 0;
  int r = EXC_CUDA(cudaMemsetAsync(p->diff, 0, sizeof(h), p->stream));
  if (r == 0) {
    count_diff<<<512, 256, 0, p->stream>>>((const uint32_t *)p->y, (const uint32_t *)p->y_ref,
                                           words, p->diff);
    r = EXC_CUDA(cudaGetLastError());
  }
  if (r == 0)
    r = EXC_CUDA(cudaMemcpyAsync(&h, p->diff, sizeof(h), cudaMemcpyDeviceToHost, p->stream));
  if (r == 0)
    r = EXC_CUDA(cudaStreamSynchronize(p->stream));
  return r < 0 ? r : (long long)h;
}

/* Whether cuBLASLt accepts `algo` for the shape at n rows (host-side check, no launch). */
static bool algo_fits(struct exc_gemm *g, const struct probe *p, const cublasLtMatmulAlgo_t *algo,
                      size_t n) {
  struct gemm_desc d;
  cublasLtMatmulHeuristicResult_t res;
  if (desc_init(&d, n, p->k, p->m, p->k, p->m, p->y_dtype) < 0)
    return false;
  return cublasLtMatmulAlgoCheck(g->lt, &d.op, &d.a, &d.b, &d.c, &d.c, algo, &res) ==
             CUBLAS_STATUS_SUCCESS &&
         res.workspaceSize <= g->workspace_bytes;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Median device time (µs) of TIME_REPS runs at n rows, each after a write of the flush buffer
 * (so the weight comes from DRAM as in a forward). Negative on a CUDA error; +inf when the
 * candidate's launch fails. */
static float probe_time_us(struct exc_gemm *g, struct probe *p, const cublasLtMatmulAlgo_t *algo,
                           size_t n) {
  for (int i = 0; i < TIME_REPS; i++) {
    if (EXC_CUDA(cudaMemsetAsync(p->flush, i, flush_bytes, p->stream)) < 0 ||
        EXC_CUDA(cudaEventRecord(p->ev[2 * i], p->stream)) < 0)
      return -1.0f;
    if (probe_run(g, p, algo, n, p->y, false) != CUBLAS_STATUS_SUCCESS)
      return INFINITY;
    if (EXC_CUDA(cudaEventRecord(p->ev[2 * i + 1], p->stream)) < 0)
      return -1.0f;
  }
  if (EXC_CUDA(cudaStreamSynchronize(p->stream)) < 0)
    return -1.0f;
  float t[TIME_REPS];
  for (int i = 0; i < TIME_REPS; i++)
    if (EXC_CUDA(cudaEventElapsedTime(&t[i], p->ev[2 * i], p->ev[2 * i + 1])) < 0)
      return -1.0f;
  qsort(t, TIME_REPS, sizeof(float), cmp_float);
  return t[TIME_REPS / 2] * 1000.0f;
}

/* One candidate of a shape's selection. */
struct candidate {
  cublasLtMatmulAlgo_t algo; /* split-K-free algorithm */
  int verdict;               /* 0 untested, 1 bit-identical to the reference, -1 rejected */
};

/* Runs the candidate at n = n_ref and n = 1 and compares its rows with the reference's
 * bit for bit. Returns 1 (identical), 0 (rejected: a differing bit or a failed launch), or a
 * negative CUDA error. */
static int probe_check(struct exc_gemm *g, struct probe *p, const cublasLtMatmulAlgo_t *algo) {
  const size_t ns[2] = {p->n_ref, 1};
  for (int i = 0; i < 2; i++) {
    if (!algo_fits(g, p, algo, ns[i]) ||
        probe_run(g, p, algo, ns[i], p->y, true) != CUBLAS_STATUS_SUCCESS)
      return 0;
    long long d = probe_diff(p, ns[i]);
    if (d < 0)
      return (int)d;
    if (d > 0)
      return 0;
  }
  return 1;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Chooses e->bucket_algo[] (see exc_gemm_prepare); leaves the reference everywhere and records why
 * when the shape is not eligible or the probe has no room. */
static int select_buckets(struct exc_gemm *g, struct exc_gemm_algo *e) {
  double t0 = now_ms();
  size_t es = esize(e->y_dtype), w_bytes = e->m * e->k * 2;
  e->tried = true;
  if (w_bytes > probe_weight_max) {
    e->sel = EXC_GEMM_SEL_SKIP_SIZE;
    return 0;
  }
  /* rows of x and y (and y0, and y_ref for bf16) that fit beside the weight */
  bool bf16 = e->y_dtype == EXC_DTYPE_BF16;
  size_t n_cap = (probe_bytes_max - w_bytes) /
                 (e->k * 2 + (1 + (e->accumulate ? 1 : 0) + (bf16 ? 1 : 0)) * e->m * es);
  if (n_cap > LAST_TIME_ROWS)
    n_cap = LAST_TIME_ROWS;
  if (n_cap < PROBE_ROWS)
    n_cap = PROBE_ROWS;
  size_t n_time[EXC_GEMM_N_BUCKETS];
  for (int b = 0; b < EXC_GEMM_N_BUCKETS; b++)
    n_time[b] = bucket_hi[b] < n_cap ? bucket_hi[b] : n_cap;

  struct probe p;
  memset(&p, 0, sizeof(p));
  p.k = e->k;
  p.m = e->m;
  p.n_max = n_cap;
  /* A float32 output shows any accumulation difference in its bits. A bf16 output keeps 16 bits
   * fewer: an accumulator differing by d float32 ulps flips the rounded value with probability
   * about d·2^-16, so the probe compares every one of its n_cap rows (≥ 256 × m elements, up to
   * 4,096 × m): for m = 2,560 that is ≥ 10 expected flips per 1-ulp difference in every element
   * at 256 rows and 160 at 4,096, while a different k order moves most elements by many ulps. */
  p.n_ref = bf16 ? n_cap : (size_t)PROBE_ROWS;
  p.y_dtype = e->y_dtype;
  p.accumulate = e->accumulate;
  struct candidate *c = (struct candidate *)calloc(MAX_CANDIDATES, sizeof(*c));
  int n_c = 1;
  int r = c ? EXC_CUDA(cudaDeviceSynchronize()) : -ENOMEM;
  if (r < 0)
    goto out;
  r = probe_init(&p);
  if (r == 1) {
    e->sel = EXC_GEMM_SEL_SKIP_MEMORY;
    r = 0;
    goto out;
  }
  if (r < 0)
    goto out;

  /* candidates: the reference first, then the union of the heuristic's split-K-free choices at
   * every bucket's n */
  c[0].algo = e->algo;
  for (int b = 0; b < EXC_GEMM_N_BUCKETS; b++) {
    cublasLtMatmulAlgo_t got[N_HEURISTIC];
    int n_got = 0;
    if ((r = query_algos(g, n_time[b], e->k, e->m, e->y_dtype, got, N_HEURISTIC, &n_got)) < 0)
      goto out;
    for (int i = 0; i < n_got && n_c < MAX_CANDIDATES; i++) {
      int j = 0;
      while (j < n_c && memcmp(&c[j].algo, &got[i], sizeof(got[i])))
        j++;
      if (j == n_c)
        c[n_c++].algo = got[i];
    }
  }
  e->n_candidates = n_c;

  /* the reference output on n_ref rows, then every candidate against it (the reference too:
   * a rerun that changes a bit would mean it is not deterministic) */
  if (probe_run(g, &p, &e->algo, p.n_ref, p.y_ref, true) != CUBLAS_STATUS_SUCCESS) {
    r = -CM_ECUDA;
    goto out;
  }
  for (int i = 0; i < n_c; i++) {
    int v = probe_check(g, &p, &c[i].algo);
    if (v < 0) {
      r = v;
      goto out;
    }
    c[i].verdict = v ? 1 : -1;
    e->n_rejected += !v;
  }
  if (c[0].verdict != 1) {
    e->sel = EXC_GEMM_SEL_UNSTABLE;
    e->n_rejected = 0;
    goto out;
  }

  /* per bucket: the fastest identical candidate at the bucket's n (also valid at its smallest n;
   * its warm-up run's rows compared again at that n) */
  for (int b = 0; b < EXC_GEMM_N_BUCKETS; b++) {
    size_t lo = b ? bucket_hi[b - 1] + 1 : 1, nb = n_time[b];
    size_t n_cmp = nb < p.n_ref ? nb : p.n_ref;
    float best = INFINITY;
    int best_i = 0;
    for (int i = 0; i < n_c; i++) {
      if (c[i].verdict != 1 || !algo_fits(g, &p, &c[i].algo, lo) ||
          !algo_fits(g, &p, &c[i].algo, nb))
        continue;
      if (probe_run(g, &p, &c[i].algo, nb, p.y, true) != CUBLAS_STATUS_SUCCESS)
        continue;
      long long d = probe_diff(&p, n_cmp);
      if (d < 0) {
        r = (int)d;
        goto out;
      }
      if (d > 0) {
        c[i].verdict = -1;
        e->n_rejected++;
        if (i == 0) { /* the reference changed bits at another n: keep it, select nothing */
          e->sel = EXC_GEMM_SEL_UNSTABLE;
          for (int bb = 0; bb < EXC_GEMM_N_BUCKETS; bb++)
            e->bucket_algo[bb] = e->algo;
          goto out;
        }
        continue;
      }
      float us = probe_time_us(g, &p, &c[i].algo, nb);
      if (us < 0) {
        r = -CM_ECUDA;
        goto out;
      }
      if (i == 0)
        e->ref_us[b] = us;
      if (us < best) {
        best = us;
        best_i = i;
      }
    }
    e->bucket_algo[b] = c[best_i].algo;
    e->bucket_us[b] = best;
    e->bucket_rows[b] = nb;
  }
  e->sel = EXC_GEMM_SEL_BUCKETS;
out:
  if (p.stream)
    cudaStreamSynchronize(p.stream);
  probe_fini(&p);
  free(c);
  e->select_ms = (float)(now_ms() - t0);
  return r;
}

static int find_algo(struct exc_gemm *g, size_t k, size_t m, enum exc_dtype y_dtype,
                     bool accumulate, struct exc_gemm_algo **ret_e) {
  for (int i = 0; i < g->n_algos; i++) {
    struct exc_gemm_algo *e = &g->algos[i];
    if (e->m == m && e->k == k && e->y_dtype == y_dtype && e->accumulate == accumulate) {
      *ret_e = e;
      return 0;
    }
  }
  if (g->n_algos >= EXC_GEMM_MAX_SHAPES)
    return -CM_ELIMIT;
  struct exc_gemm_algo *e = &g->algos[g->n_algos];
  memset(e, 0, sizeof(*e));
  int r = choose_ref(g, k, m, y_dtype, &e->algo);
  if (r < 0)
    return r;
  e->m = m;
  e->k = k;
  e->y_dtype = y_dtype;
  e->accumulate = accumulate;
  e->sel = EXC_GEMM_SEL_REF;
  for (int b = 0; b < EXC_GEMM_N_BUCKETS; b++)
    e->bucket_algo[b] = e->algo;
  g->n_algos++;
  *ret_e = e;
  return 0;
}

int exc_gemm_prepare(struct exc_gemm *g, size_t k, size_t m, enum exc_dtype y_dtype,
                     bool accumulate) {
  int r = check_shape(k, m, y_dtype, accumulate);
  if (r < 0)
    return r;
  struct exc_gemm_algo *e;
  if ((r = find_algo(g, k, m, y_dtype, accumulate, &e)) < 0)
    return r;
  if (!g->select || e->tried)
    return 0;
  r = select_buckets(g, e);
  if (r < 0) /* a half-done selection must not be used */
    for (int b = 0; b < EXC_GEMM_N_BUCKETS; b++)
      e->bucket_algo[b] = e->algo;
  return r;
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
  struct exc_gemm_algo *e;
  r = find_algo(g, k, m, y_dtype, accumulate, &e);
  if (r < 0)
    return r;
  struct gemm_desc d;
  r = desc_init(&d, n, k, m, ld_x, ld_y, y_dtype);
  if (r < 0)
    return r;
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  return EXC_CUBLAS(cublasLtMatmul(g->lt, &d.op, &alpha, w, &d.a, x, &d.b, &beta, y, &d.c, y, &d.c,
                                   &e->bucket_algo[exc_gemm_bucket(n)], g->workspace,
                                   g->workspace_bytes, stream));
}
