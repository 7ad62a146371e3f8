/* Loading and applying kept LoRA adapters on the device (cuda_lora.h): a per-layer table of the
 * adapted projections of each GEMM site with their column offset in the site's fused output; the
 * A factors of one site stacked ([Σ rank, in]) so that one FP32 GEMM forms every down product of
 * the site, one up GEMM per projection; cuBLASLt FP32 algorithms pinned per shape. */
#include "cuda_lora.h"

#include <cublasLt.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"

#define MAX_RANK 256

/* A projection an adapter may target: its module name, site, column offset in the site's GEMM
 * output and its in/out widths. */
struct module {
  const char *name;
  enum exc_lora_site site;
  size_t off, in, out;
};

/* One loaded factor pair on the device. */
struct pair {
  enum exc_lora_site site;
  size_t off, in, out, rank;
  size_t r_off; /* first row of this pair's A in its site's stacked A (= column in tmp) */
  float *a, *b; /* [rank, in], [out, rank] device, inside the one allocation */
};

/* The adapted projections of one (layer, site): consecutive pairs reading the same input. */
struct group {
  enum exc_lora_site site;
  size_t first, n; /* pairs[first .. first + n) */
  size_t in, rank; /* input width; Σ rank of the pairs (rows of the stacked A) */
  float *a;        /* [rank, in] stacked A factors (the first pair's a) */
};

/* A pinned FP32 algorithm of one GEMM shape. */
struct shape {
  size_t k, m, ld_x, ld_w, ld_y;
  uint32_t align; /* bytes (4, 8 or 16) every pointer and stride of the calls is a multiple of */
  cublasLtMatmulAlgo_t algo;
};

struct exc_lora {
  float scale;
  bool scale_pow2; /* scale = 2^e: applied as the up GEMM's alpha (exact) */
  size_t max_tokens, max_rank, max_in, max_out;
  void *buf;            /* one device allocation: factors then scratch */
  float *xf;            /* [EXC_LORA_CHUNK_ROWS, max_in] the widened input */
  float *tmp;           /* [EXC_LORA_CHUNK_ROWS, max group rank] down products */
  float *u;             /* [EXC_LORA_CHUNK_ROWS, max_out] up products (scale not 2^e), or NULL */
  struct pair *pairs;   /* [n_pairs], ordered by layer */
  size_t n_pairs;
  struct group *groups; /* [n_groups], ordered by layer */
  size_t n_groups;
  size_t *first; /* [n_layers + 1] first group of each layer */
  cublasLtHandle_t lt;
  void *ws; /* cuBLASLt workspace */
  size_t ws_bytes;
  int n_shapes;
  struct shape shapes[EXC_LORA_MAX_SHAPES];
};

enum {
  WORKSPACE_BYTES = 32 << 20, /* cuBLASLt workspace (split-K partial sums) */
  TUNE_ROWS = 256,            /* rows the heuristic is asked at: a row launch's size */
  SPLIT_K_LEN = 256,          /* k per split when a split is forced */
  MAX_SPLITS = 32,
};

enum { N_MODULES = 12 };

static void modules(const struct ex_qwen35_config *c, struct module *m) {
  size_t h = (size_t)c->hidden_size, in = (size_t)c->intermediate_size;
  size_t qw = (size_t)c->n_heads * 2 * (size_t)c->head_dim;
  size_t kw = (size_t)c->n_kv_heads * (size_t)c->head_dim;
  size_t ow = (size_t)c->n_heads * (size_t)c->head_dim;
  size_t hv = (size_t)c->lin_v_heads, vd = hv * (size_t)c->lin_dv;
  size_t cd = 2 * (size_t)c->lin_k_heads * (size_t)c->lin_dk + vd;
  struct module t[N_MODULES] = {
      {"self_attn.q_proj", EXC_LORA_ATTN_IN, 0, h, qw},
      {"self_attn.k_proj", EXC_LORA_ATTN_IN, qw, h, kw},
      {"self_attn.v_proj", EXC_LORA_ATTN_IN, qw + kw, h, kw},
      {"self_attn.o_proj", EXC_LORA_ATTN_OUT, 0, ow, h},
      {"linear_attn.in_proj_qkv", EXC_LORA_GDN_QKV, 0, h, cd},
      {"linear_attn.in_proj_z", EXC_LORA_GDN_ZBA, 0, h, vd},
      {"linear_attn.in_proj_b", EXC_LORA_GDN_ZBA, vd, h, hv},
      {"linear_attn.in_proj_a", EXC_LORA_GDN_ZBA, vd + hv, h, hv},
      {"linear_attn.out_proj", EXC_LORA_GDN_OUT, 0, vd, h},
      {"mlp.gate_proj", EXC_LORA_MLP_IN, 0, h, in},
      {"mlp.up_proj", EXC_LORA_MLP_IN, in, h, in},
      {"mlp.down_proj", EXC_LORA_MLP_DOWN, 0, in, h},
  };
  memcpy(m, t, sizeof(t));
}

size_t exc_lora_count(const struct exc_lora *l) {
  return l ? l->n_pairs : 0;
}

void exc_lora_free(struct exc_lora *l) {
  if (!l)
    return;
  if (l->buf) {
    cudaDeviceSynchronize();
    cudaFree(l->buf);
  }
  if (l->ws)
    cudaFree(l->ws);
  if (l->lt)
    cublasLtDestroy(l->lt);
  free(l->pairs);
  free(l->groups);
  free(l->first);
  free(l);
}

int exc_lora_new(const struct ex_qwen35_config *cfg, const struct cm_safetensors *adapter,
                 float scale, size_t max_tokens, struct exc_lora **ret, struct cm_diag *diag) {
  struct module mods[N_MODULES];
  modules(cfg, mods);
  size_t nl = (size_t)cfg->n_layers;
  struct exc_lora *l = calloc(1, sizeof(*l));
  struct cm_tensor_view va, vb;
  float *host = NULL;
  int r = 0;
  if (!l)
    return -ENOMEM;
  l->scale = scale;
  int e2;
  l->scale_pow2 = isfinite(scale) && scale > 0.0f && frexpf(scale, &e2) == 0.5f;
  l->max_tokens = max_tokens;
  l->pairs = calloc(nl * N_MODULES + 1, sizeof(*l->pairs));
  l->groups = calloc(nl * EXC_LORA_SITES + 1, sizeof(*l->groups));
  l->first = calloc(nl + 1, sizeof(*l->first));
  if (!l->pairs || !l->groups || !l->first) {
    r = -ENOMEM;
    goto fail;
  }
  /* pass 1: find and check every pair, size the allocation */
  size_t floats = 0, biggest = 0;
  for (size_t li = 0; li < nl; li++) {
    l->first[li] = l->n_groups;
    for (int mi = 0; mi < N_MODULES; mi++) {
      char ka[200], kb[200];
      snprintf(ka, sizeof(ka), "model.language_model.layers.%zu.%s.lora_A", li, mods[mi].name);
      snprintf(kb, sizeof(kb), "model.language_model.layers.%zu.%s.lora_B", li, mods[mi].name);
      bool has_a = cm_safetensors_find(adapter, ka, &va) == 0;
      bool has_b = cm_safetensors_find(adapter, kb, &vb) == 0;
      if (!has_a && !has_b)
        continue;
      if (!has_a || !has_b) {
        r = cm_diag_set(diag, -CM_ESHAPE, "adapter: %s without its partner factor",
                        has_a ? ka : kb);
        goto fail;
      }
      if (va.n_dims != 2 || vb.n_dims != 2 || va.shape[1] != (int64_t)mods[mi].in ||
          vb.shape[0] != (int64_t)mods[mi].out || va.shape[0] != vb.shape[1] || va.shape[0] <= 0 ||
          va.shape[0] > MAX_RANK) {
        r = cm_diag_set(diag, -CM_ESHAPE,
                        "adapter: LoRA factors of layers.%zu.%s have wrong "
                        "shapes (rank 1 .. %d)",
                        li, mods[mi].name, MAX_RANK);
        goto fail;
      }
      struct pair *p = &l->pairs[l->n_pairs++];
      p->site = mods[mi].site;
      p->off = mods[mi].off;
      p->in = mods[mi].in;
      p->out = mods[mi].out;
      p->rank = (size_t)va.shape[0];
      floats += p->rank * (p->in + p->out);
      biggest = p->rank * (p->in > p->out ? p->in : p->out) > biggest
                    ? p->rank * (p->in > p->out ? p->in : p->out)
                    : biggest;
      struct group *g = l->n_groups > l->first[li] ? &l->groups[l->n_groups - 1] : NULL;
      if (!g || g->site != p->site) {
        g = &l->groups[l->n_groups++];
        g->site = p->site;
        g->first = l->n_pairs - 1;
        g->in = p->in;
      }
      p->r_off = g->rank;
      g->rank += p->rank;
      g->n++;
      l->max_rank = g->rank > l->max_rank ? g->rank : l->max_rank;
      l->max_in = p->in > l->max_in ? p->in : l->max_in;
      l->max_out = p->out > l->max_out ? p->out : l->max_out;
    }
  }
  l->first[nl] = l->n_groups;
  size_t n_text = 0; /* tensors outside the vision tower, as the CPU loader counts them */
  for (size_t i = 0; i < cm_safetensors_count(adapter); i++) {
    cm_safetensors_at(adapter, i, &va);
    n_text += strncmp(va.name, "model.visual.", 13) != 0;
  }
  if (n_text != 2 * l->n_pairs) {
    r = cm_diag_set(diag, -CM_EUNSUPPORTED,
                    "adapter: %zu text tensors, %zu of them LoRA factors "
                    "of projections the CUDA engine adapts",
                    n_text, 2 * l->n_pairs);
    goto fail;
  }
  if (!l->n_pairs) {
    *ret = l;
    return 0;
  }
  /* each part starts 16-byte aligned (4 floats) */
  size_t chunk = EXC_LORA_CHUNK_ROWS < max_tokens ? EXC_LORA_CHUNK_ROWS : max_tokens;
  size_t n_xf = (chunk * l->max_in + 3) / 4 * 4, n_tmp = (chunk * l->max_rank + 3) / 4 * 4;
  size_t n_u = l->scale_pow2 ? 0 : chunk * l->max_out;
  size_t bytes = (floats + 8 * l->n_pairs + n_xf + n_tmp + n_u) * sizeof(float);
  if ((r = EXC_CUBLAS(cublasLtCreate(&l->lt))) ||
      (r = EXC_CUDA(cudaMalloc(&l->ws, WORKSPACE_BYTES)))) {
    r = cm_diag_set(diag, r, "cuda: cuBLASLt handle and workspace for the LoRA GEMMs");
    goto fail;
  }
  l->ws_bytes = WORKSPACE_BYTES;
  if ((r = EXC_CUDA(cudaMalloc(&l->buf, bytes)))) {
    r = cm_diag_set(diag, r, "cuda: LoRA factors and scratch (%zu bytes)", bytes);
    goto fail;
  }
  if (!(host = malloc(biggest * sizeof(float) + 16))) {
    r = -ENOMEM;
    goto fail;
  }
  /* pass 2: convert and upload */
  float *at = l->buf;
  for (size_t li = 0, pi = 0; li < nl; li++) {
    for (int mi = 0; mi < N_MODULES; mi++) {
      char ka[200], kb[200];
      snprintf(ka, sizeof(ka), "model.language_model.layers.%zu.%s.lora_A", li, mods[mi].name);
      snprintf(kb, sizeof(kb), "model.language_model.layers.%zu.%s.lora_B", li, mods[mi].name);
      if (cm_safetensors_find(adapter, ka, &va) != 0 || cm_safetensors_find(adapter, kb, &vb) != 0)
        continue;
      struct pair *p = &l->pairs[pi++];
      p->a = NULL;
      for (size_t gi = l->first[li]; gi < l->first[li + 1] && !p->a; gi++) {
        struct group *g = &l->groups[gi];
        if (p >= &l->pairs[g->first] && p < &l->pairs[g->first + g->n]) {
          if (p == &l->pairs[g->first]) { /* the group's A block, then its B factors */
            g->a = at;
            at += (g->rank * g->in + 3) / 4 * 4;
          }
          p->a = g->a + p->r_off * g->in;
        }
      }
      p->b = at;
      at += (p->rank * p->out + 3) / 4 * 4;
      if ((r = cm_tensor_to_f32(&va, host)) ||
          (r = EXC_CUDA(
               cudaMemcpy(p->a, host, p->rank * p->in * sizeof(float), cudaMemcpyHostToDevice))) ||
          (r = cm_tensor_to_f32(&vb, host)) ||
          (r = EXC_CUDA(
               cudaMemcpy(p->b, host, p->rank * p->out * sizeof(float), cudaMemcpyHostToDevice)))) {
        r = cm_diag_set(diag, r, "adapter: upload of layers.%zu.%s failed", li, mods[mi].name);
        goto fail;
      }
    }
  }
  l->xf = at;
  l->tmp = l->xf + n_xf;
  l->u = n_u ? l->tmp + n_tmp : NULL;
  free(host);
  *ret = l;
  return 0;
fail:
  free(host);
  exc_lora_free(l);
  return r;
}

/* Largest power of two ≤ 16 dividing v. */
static uint32_t align_of(uintptr_t v) {
  uint32_t a = 16;
  while (a > 1 && v % a)
    a >>= 1;
  return a;
}

/* Splits of the k loop for a reduction of length k: the down products (k = 2,560 … 17,408, a few
 * dozen outputs) would otherwise run on a handful of CTAs at the row launches' ~256 rows. */
static int32_t splits_for(size_t k) {
  size_t s = k / SPLIT_K_LEN;
  return (int32_t)(s < 1 ? 1 : s > MAX_SPLITS ? MAX_SPLITS : s);
}

/* Whether `algo` runs the shape at `rows` rows within the workspace. */
static bool algo_ok(struct exc_lora *l, cublasLtMatmulDescOpaque_t *op,
                    cublasLtMatrixLayoutOpaque_t *la, const struct shape *key, size_t rows,
                    const cublasLtMatmulAlgo_t *algo) {
  cublasLtMatrixLayoutOpaque_t rb, rc;
  cublasLtMatmulHeuristicResult_t res;
  if (cublasLtMatrixLayoutInit(&rb, CUDA_R_32F, key->k, rows, key->ld_x) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutInit(&rc, CUDA_R_32F, key->m, rows, key->ld_y) != CUBLAS_STATUS_SUCCESS)
    return false;
  memset(&res, 0, sizeof(res));
  return cublasLtMatmulAlgoCheck(l->lt, op, la, &rb, &rc, &rc, algo, &res) ==
             CUBLAS_STATUS_SUCCESS &&
         res.workspaceSize <= l->ws_bytes;
}

/* The pinned algorithm of a shape (cached; chosen on the shape's first call, host only): the
 * heuristic's first FP32 algorithm at TUNE_ROWS rows without in-place (atomic) split-K reduction,
 * given splits_for(k) splits with the compute-type reduction when it has none and k is long.
 * One configuration (split count included) for every row count: each output is the same fixed
 * sequence of partial sums whatever n, so a row's bits do not depend on its launch
 * (tests/cuda/test_lora.c). Checked to run at EXC_LORA_CHUNK_ROWS rows within the workspace. */
static int shape_algo(struct exc_lora *l, const struct shape *key, const cublasLtMatmulAlgo_t **ret,
                      cublasLtMatmulDescOpaque_t *op, cublasLtMatrixLayoutOpaque_t *la) {
  for (int i = 0; i < l->n_shapes; i++) {
    const struct shape *s = &l->shapes[i];
    if (s->k == key->k && s->m == key->m && s->ld_x == key->ld_x && s->ld_w == key->ld_w &&
        s->ld_y == key->ld_y && s->align == key->align) {
      *ret = &s->algo;
      return 0;
    }
  }
  if (l->n_shapes >= EXC_LORA_MAX_SHAPES)
    return -CM_ELIMIT;
  cublasLtMatrixLayoutOpaque_t rb, rc;
  int r = EXC_CUBLAS(cublasLtMatrixLayoutInit(&rb, CUDA_R_32F, key->k, TUNE_ROWS, key->ld_x));
  if (!r)
    r = EXC_CUBLAS(cublasLtMatrixLayoutInit(&rc, CUDA_R_32F, key->m, TUNE_ROWS, key->ld_y));
  cublasLtMatmulPreferenceOpaque_t pref;
  uint64_t ws = l->ws_bytes;
  uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                  CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE,
           align = key->align;
  if (!r)
    r = EXC_CUBLAS(cublasLtMatmulPreferenceInit(&pref));
  if (!r)
    r = EXC_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
        &pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  if (!r)
    r = EXC_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
        &pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask)));
  const cublasLtMatmulPreferenceAttributes_t aligns[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && !r; i++)
    r = EXC_CUBLAS(cublasLtMatmulPreferenceSetAttribute(&pref, aligns[i], &align, sizeof(align)));
  if (r)
    return r;
  enum { N_RESULTS = 16 };
  cublasLtMatmulHeuristicResult_t res[N_RESULTS];
  int n_res = 0;
  if ((r = EXC_CUBLAS(cublasLtMatmulAlgoGetHeuristic(l->lt, op, la, &rb, &rc, &rc, &pref, N_RESULTS,
                                                     res, &n_res))))
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
                                             sizeof(scheme), &got) != CUBLAS_STATUS_SUCCESS ||
        scheme == CUBLASLT_REDUCTION_SCHEME_INPLACE)
      continue;
    if (splitk <= 1 && splits_for(key->k) > 1) { /* try the forced split first */
      cublasLtMatmulAlgo_t split = algo;
      int32_t sk = splits_for(key->k);
      uint32_t sc = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      if (cublasLtMatmulAlgoConfigSetAttribute(&split, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk,
                                               sizeof(sk)) == CUBLAS_STATUS_SUCCESS &&
          cublasLtMatmulAlgoConfigSetAttribute(&split, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &sc,
                                               sizeof(sc)) == CUBLAS_STATUS_SUCCESS &&
          algo_ok(l, op, la, key, EXC_LORA_CHUNK_ROWS, &split) && algo_ok(l, op, la, key, 1, &split))
        algo = split;
    }
    if (!algo_ok(l, op, la, key, EXC_LORA_CHUNK_ROWS, &algo) || !algo_ok(l, op, la, key, 1, &algo))
      continue;
    struct shape *s = &l->shapes[l->n_shapes++];
    *s = *key;
    s->algo = algo;
    *ret = &s->algo;
    return 0;
  }
  return -CM_EUNSUPPORTED;
}

/* y[n, m] (row stride ld_y) = alpha·x[n, k]·w[m, k]ᵀ + beta·y in FP32 (CUBLAS_COMPUTE_32F, no
 * TF32), x row stride ld_x, w row stride ld_w: the column-major yᵀ = wᵀᵀ·xᵀ of cuda_gemm.cu. */
static int mm(struct exc_lora *l, cudaStream_t stream, const float *x, size_t ld_x, const float *w,
              size_t ld_w, float *y, size_t ld_y, size_t n, size_t k, size_t m, float alpha,
              float beta) {
  struct shape key = {.k = k, .m = m, .ld_x = ld_x, .ld_w = ld_w, .ld_y = ld_y};
  key.align = align_of((uintptr_t)x | (uintptr_t)w | (uintptr_t)y | (ld_x * 4) | (ld_w * 4) |
                       (ld_y * 4));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescOpaque_t op;
  cublasLtMatrixLayoutOpaque_t la, lb, lc;
  int r = EXC_CUBLAS(cublasLtMatmulDescInit(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  if (!r)
    r = EXC_CUBLAS(cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  if (!r)
    r = EXC_CUBLAS(cublasLtMatmulDescSetAttribute(&op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (!r)
    r = EXC_CUBLAS(cublasLtMatrixLayoutInit(&la, CUDA_R_32F, k, m, ld_w));
  if (!r)
    r = EXC_CUBLAS(cublasLtMatrixLayoutInit(&lb, CUDA_R_32F, k, n, ld_x));
  if (!r)
    r = EXC_CUBLAS(cublasLtMatrixLayoutInit(&lc, CUDA_R_32F, m, n, ld_y));
  const cublasLtMatmulAlgo_t *algo = NULL;
  if (!r)
    r = shape_algo(l, &key, &algo, &op, &la);
  if (r)
    return r;
  return EXC_CUBLAS(cublasLtMatmul(l->lt, &op, &alpha, w, &la, x, &lb, &beta, y, &lc, y, &lc, algo,
                                   l->ws, l->ws_bytes, stream));
}

int exc_lora_apply(struct exc_lora *l, cudaStream_t stream, int layer, enum exc_lora_site site,
                   const __nv_bfloat16 *x, size_t ld_x, float *y, size_t ld_y, size_t t) {
  if (!l || !l->n_pairs)
    return 0;
  if (t > l->max_tokens || layer < 0)
    return -EINVAL;
  const struct group *g = NULL;
  for (size_t i = l->first[layer]; i < l->first[layer + 1]; i++)
    if (l->groups[i].site == site)
      g = &l->groups[i];
  if (!g || !t)
    return 0;
  int r = 0;
  for (size_t c0 = 0; c0 < t && !r; c0 += EXC_LORA_CHUNK_ROWS) {
    size_t n = t - c0 < EXC_LORA_CHUNK_ROWS ? t - c0 : EXC_LORA_CHUNK_ROWS;
    /* PEFT: x.to(float32), then lora_A for every projection of the site at once */
    r = exc_lora_widen(stream, x + c0 * ld_x, ld_x, l->xf, g->in, n);
    if (!r)
      r = mm(l, stream, l->xf, g->in, g->a, g->in, l->tmp, g->rank, n, g->in, g->rank, 1.0f, 0.0f);
    for (size_t i = 0; i < g->n && !r; i++) {
      const struct pair *p = &l->pairs[g->first + i];
      float *yp = y + c0 * ld_y + p->off;
      if (l->scale_pow2) /* y + 2^e·acc, one rounding, = PEFT's y + round(acc)·2^e */
        r = mm(l, stream, l->tmp + p->r_off, g->rank, p->b, p->rank, yp, ld_y, n, p->rank, p->out,
               l->scale, 1.0f);
      else if (!(r = mm(l, stream, l->tmp + p->r_off, g->rank, p->b, p->rank, l->u, p->out, n,
                        p->rank, p->out, 1.0f, 0.0f)))
        r = exc_lora_scale_add(stream, l->u, p->out, l->scale, yp, ld_y, p->out, n);
    }
  }
  return r;
}
