/* Gated DeltaNet core on CUDA (see cuda_gdn.h), all in float32 SIMT (TF32 tensor cores would cost
 * ~3e-4 relative, over the 1e-4 budget). The chunked rule runs in two launches: the intra-chunk
 * work of every (chunk, value head) in parallel (Γ, L = β(KKᵀ)⊙D, A = (QKᵀ)⊙D, the unit-triangular
 * solves for U and W), then one block per (sequence, value head, column block of the state) walks
 * its chunks in order with its [dk, nc] slice of the state in shared memory. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "cm_error.h"
#include "cuda_attention.h" /* EXC_MAX_SEQS */
#include "cuda_check.h"
#include "cuda_gdn.h"

#define GDN_C 64     /* chunk length, EX_QWEN35_GDN_CHUNK */
#define GDN_NT 256   /* threads of every GDN block */

/* Launch parameters passed by value: the sequences and the first global chunk of each. */
struct gdn_params {
  struct exc_gdn_seq seqs[EXC_MAX_SEQS]; /* host copy of the caller's array */
  int32_t chunk_start[EXC_MAX_SEQS + 1]; /* prefix sum of ⌈n/64⌉ over the sequences */
  int32_t n_seqs;                        /* sequences in the launch */
};

/* Per (chunk, value head) scratch, written by the intra kernel, read by the state kernel. */
template <int DK, int DV> struct gdn_layout {
  static constexpr size_t w = (size_t)GDN_C * DK; /* W [64, dk] */
  static constexpr size_t u = (size_t)GDN_C * DV; /* U [64, dv] */
  static constexpr size_t a = (size_t)GDN_C * GDN_C; /* A = (QKᵀ)⊙D, lower incl. diagonal */
  static constexpr size_t coef = 3 * GDN_C; /* e^{Γi}, e^{ΓC−Γi}, e^{ΓC} (at [128]) */
  static constexpr size_t total = w + u + a + coef;
};

static size_t gdn_floats_per_chunk_head(size_t dk, size_t dv) {
  return (size_t)GDN_C * dk + (size_t)GDN_C * dv + (size_t)GDN_C * GDN_C + 3 * GDN_C;
}

__device__ static int find_seq(const struct gdn_params &p, int chunk) {
  int lo = 0, hi = p.n_seqs - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (p.chunk_start[mid] <= chunk)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__device__ __forceinline__ static void cp_async16(void *smem, const void *gmem) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ static void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
__device__ __forceinline__ static void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* ---------------------------------------------------------------------------------------------
 * Preparation: L2 norms of q and k per head (one warp per head vector), then the gates. */
__global__ static void gdn_l2norm_kernel(float *qkv, size_t ld, int n, int hk, int dk,
                                         float q_scale) {
  int warp = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
  int lane = threadIdx.x & 31;
  if (warp >= n * 2 * hk)
    return;
  int t = warp / (2 * hk), v = warp % (2 * hk); /* v < hk: q head v; else k head v − hk */
  float *x = qkv + (size_t)t * ld + (size_t)v * dk;
  float ss = 0.0f;
  for (int d = lane; d < dk; d += 32)
    ss += x[d] * x[d];
  for (int o = 16; o > 0; o >>= 1)
    ss += __shfl_xor_sync(0xffffffffu, ss, o);
  float inv = 1.0f / sqrtf(ss + 1e-6f);
  bool is_q = v < hk;
  for (int d = lane; d < dk; d += 32)
    x[d] = is_q ? (x[d] * inv) * q_scale : x[d] * inv;
}

__global__ static void gdn_gates_kernel(const float *b, const float *a, size_t ld_ba,
                                        const float *a_log, const float *dt_bias, float *beta,
                                        float *g, int n, int hv) {
  int i = (int)(blockIdx.x * (size_t)blockDim.x + threadIdx.x);
  if (i >= n * hv)
    return;
  int t = i / hv, h = i % hv;
  float x = a[(size_t)t * ld_ba + h] + dt_bias[h];
  float sp = x > 20.0f ? x : log1pf(expf(x));
  float bv = b[(size_t)t * ld_ba + h];
  g[i] = -expf(a_log[h]) * sp;
  beta[i] = 1.0f / (1.0f + expf(-bv));
}

extern "C" int exc_gdn_prepare(cudaStream_t stream, float *qkv, size_t ld_qkv, const float *b,
                               const float *a, size_t ld_ba, const float *a_log,
                               const float *dt_bias, float *beta, float *g, size_t n,
                               const struct ex_gdn_dims *dims) {
  if (n == 0)
    return 0;
  int hk = (int)dims->n_k_heads, hv = (int)dims->n_v_heads, dk = (int)dims->dk;
  float q_scale = (float)(1.0 / sqrt((double)dk));
  size_t warps = n * 2 * (size_t)hk;
  gdn_l2norm_kernel<<<(unsigned)((warps * 32 + 255) / 256), 256, 0, stream>>>(qkv, ld_qkv, (int)n,
                                                                             hk, dk, q_scale);
  int rc = EXC_CUDA(cudaGetLastError());
  if (rc)
    return rc;
  size_t m = n * (size_t)hv;
  gdn_gates_kernel<<<(unsigned)((m + 255) / 256), 256, 0, stream>>>(b, a, ld_ba, a_log, dt_bias,
                                                                   beta, g, (int)n, hv);
  return EXC_CUDA(cudaGetLastError());
}

/* ---------------------------------------------------------------------------------------------
 * Intra-chunk kernel: block (chunk, value head). Shared: Kᵀ and Qᵀ [dk][64+4], L [64][65]. */
template <int DK, int DV>
__global__ __launch_bounds__(GDN_NT) static void gdn_intra_kernel(
    const __grid_constant__ struct gdn_params p, const float *__restrict__ qkv, size_t ld,
    const float *__restrict__ beta, const float *__restrict__ g, float *__restrict__ scratch,
    int hk, int hv) {
  using LY = gdn_layout<DK, DV>;
  constexpr int TP = GDN_C + 4; /* transposed row pitch */
  extern __shared__ float4 smem4[];
  float *kt = (float *)smem4;    /* [DK][TP] */
  float *qt = kt + DK * TP;      /* [DK][TP] */
  float *lm = qt + DK * TP;      /* [64][65] */
  float *gam = lm + GDN_C * 65;  /* [64] */
  float *bet = gam + GDN_C;      /* [64] */
  float *beg = bet + GDN_C;      /* [64] β e^{Γ} */

  int chunk = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  int s = find_seq(p, chunk);
  const struct exc_gdn_seq sq = p.seqs[s];
  int c0 = (chunk - p.chunk_start[s]) * GDN_C;
  int len = min(GDN_C, sq.n - c0);
  int kh = h / (hv / hk);
  size_t row0 = (size_t)sq.start + c0;
  float *base = scratch + ((size_t)chunk * hv + h) * LY::total;
  float *w_out = base, *u_out = base + LY::w, *a_out = u_out + LY::u, *coef = a_out + LY::a;

  for (int idx = tid; idx < GDN_C * DK; idx += GDN_NT) {
    int i = idx / DK, a = idx % DK;
    float kv = 0.0f, qv = 0.0f;
    if (i < len) {
      const float *r = qkv + (row0 + i) * ld;
      qv = r[(size_t)kh * DK + a];
      kv = r[(size_t)(hk + kh) * DK + a];
    }
    kt[a * TP + i] = kv;
    qt[a * TP + i] = qv;
  }
  if (tid == 0) { /* Γ in token order, as the twin sums it; padded tokens have g = 0, β = 0 */
    float acc = 0.0f;
    for (int i = 0; i < GDN_C; i++) {
      if (i < len)
        acc += g[(row0 + i) * hv + h];
      gam[i] = acc;
    }
  }
  __syncthreads();
  if (tid < GDN_C) {
    int i = tid;
    float b = i < len ? beta[(row0 + i) * hv + h] : 0.0f;
    bet[i] = b;
    beg[i] = b * expf(gam[i]);
    float gl = gam[GDN_C - 1];
    coef[i] = expf(gam[i]);
    coef[GDN_C + i] = expf(gl - gam[i]);
    if (i == 0)
      coef[2 * GDN_C] = expf(gl);
  }
  __syncthreads();

  /* L and A: 4×4 tiles of the 64×64 products, 256 threads */
  {
    int ti = tid / 16, tj = tid % 16;
    float kk[4][4], qk[4][4];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
      for (int c = 0; c < 4; c++)
        kk[r][c] = qk[r][c] = 0.0f;
#pragma unroll 4
    for (int a = 0; a < DK; a++) {
      float4 ki = *(const float4 *)&kt[a * TP + 4 * ti];
      float4 kj = *(const float4 *)&kt[a * TP + 4 * tj];
      float4 qi = *(const float4 *)&qt[a * TP + 4 * ti];
      float kiv[4] = {ki.x, ki.y, ki.z, ki.w}, kjv[4] = {kj.x, kj.y, kj.z, kj.w};
      float qiv[4] = {qi.x, qi.y, qi.z, qi.w};
#pragma unroll
      for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
          kk[r][c] += kiv[r] * kjv[c];
          qk[r][c] += qiv[r] * kjv[c];
        }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
      int i = 4 * ti + r;
      float4 av;
      float *avp = (float *)&av;
#pragma unroll
      for (int c = 0; c < 4; c++) {
        int j = 4 * tj + c;
        float d = j <= i ? expf(gam[i] - gam[j]) : 0.0f;
        lm[i * 65 + j] = j < i ? bet[i] * kk[r][c] * d : 0.0f;
        avp[c] = j <= i ? qk[r][c] * d : 0.0f;
      }
      *(float4 *)&a_out[i * GDN_C + 4 * tj] = av;
    }
  }
  __syncthreads();

  /* forward substitution, one column per thread: (I + L) U = β⊙V, (I + L) W = βe^{Γ}⊙K */
  for (int col = tid; col < DV + DK; col += GDN_NT) {
    float x[GDN_C];
    if (col < DV) {
      const float *vcol = qkv + row0 * ld + (size_t)2 * hk * DK + (size_t)h * DV + col;
#pragma unroll
      for (int i = 0; i < GDN_C; i++)
        x[i] = i < len ? bet[i] * vcol[(size_t)i * ld] : 0.0f;
    } else {
      int a = col - DV;
#pragma unroll
      for (int i = 0; i < GDN_C; i++)
        x[i] = beg[i] * kt[a * TP + i];
    }
#pragma unroll
    for (int i = 1; i < GDN_C; i++) {
      float xi = x[i];
#pragma unroll
      for (int j = 0; j < i; j++)
        xi -= lm[i * 65 + j] * x[j];
      x[i] = xi;
    }
    if (col < DV) {
#pragma unroll
      for (int i = 0; i < GDN_C; i++)
        u_out[i * DV + col] = x[i];
    } else {
#pragma unroll
      for (int i = 0; i < GDN_C; i++)
        w_out[i * DK + (col - DV)] = x[i];
    }
  }
}

/* ---------------------------------------------------------------------------------------------
 * State kernel: block (column block, value head, sequence) walks the chunks of its sequence.
 * Per chunk: [V'; QS] = [U; 0] − [W; −Q]·S, then S ← e^{ΓC}S + Kᵀ(e^{ΓC−Γ}⊙V') and
 * O = e^{Γ}⊙QS + A·V'. W, Q and U of the next chunk stream in while the update runs. */
template <int DK, int DV, int NC> struct gdn_state_smem {
  static constexpr int KP = DK + 4, CP = NC + 4, AP = GDN_C + 4;
  static constexpr int ws = 0, qs = ws + GDN_C * KP, ks = qs + GDN_C * KP, as = ks + GDN_C * KP,
                       us = as + GDN_C * AP, vp = us + GDN_C * CP, vps = vp + GDN_C * CP,
                       qss = vps + GDN_C * CP, st = qss + GDN_C * CP, cf = st + DK * CP,
                       total = cf + 3 * GDN_C + 4;
};

template <int DK, int DV, int NC>
__global__ __launch_bounds__(GDN_NT) static void gdn_state_kernel(
    const __grid_constant__ struct gdn_params p, const float *__restrict__ qkv, size_t ld,
    const float *__restrict__ scratch, float *__restrict__ out, int hk, int hv) {
  using LY = gdn_layout<DK, DV>;
  using SM = gdn_state_smem<DK, DV, NC>;
  constexpr int KP = SM::KP, CP = SM::CP, AP = SM::AP;
  extern __shared__ float4 smem4[];
  float *sm = (float *)smem4;
  float *ws = sm + SM::ws, *qs = sm + SM::qs, *ks = sm + SM::ks, *as = sm + SM::as;
  float *us = sm + SM::us, *vp = sm + SM::vp, *vps = sm + SM::vps, *qss = sm + SM::qss;
  float *st = sm + SM::st, *cf = sm + SM::cf;

  int cb = blockIdx.x * NC, h = blockIdx.y, s = blockIdx.z, tid = threadIdx.x;
  const struct exc_gdn_seq sq = p.seqs[s];
  int kh = h / (hv / hk);
  int n_chunks = p.chunk_start[s + 1] - p.chunk_start[s];

  for (int idx = tid; idx < DK * NC; idx += GDN_NT) {
    int a = idx / NC, c = idx % NC;
    st[a * CP + c] = sq.state_in ? sq.state_in[((size_t)h * DK + a) * DV + cb + c] : 0.0f;
  }

  /* loads of chunk ci: part 1 (W, Q, U) and part 2 (K, A, coefficients) */
  auto load_part1 = [&](int ci) {
    const float *base = scratch + ((size_t)(p.chunk_start[s] + ci) * hv + h) * LY::total;
    int len = min(GDN_C, sq.n - ci * GDN_C);
    size_t row0 = (size_t)sq.start + (size_t)ci * GDN_C;
    for (int idx = tid; idx < GDN_C * DK / 4; idx += GDN_NT) {
      int i = idx / (DK / 4), a4 = (idx % (DK / 4)) * 4;
      cp_async16(&ws[i * KP + a4], base + i * DK + a4);
      if (i < len)
        cp_async16(&qs[i * KP + a4], qkv + (row0 + i) * ld + (size_t)kh * DK + a4);
      else
        *(float4 *)&qs[i * KP + a4] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    for (int idx = tid; idx < GDN_C * NC / 4; idx += GDN_NT) {
      int i = idx / (NC / 4), c4 = (idx % (NC / 4)) * 4;
      cp_async16(&us[i * CP + c4], base + LY::w + i * DV + cb + c4);
    }
    cp_async_commit();
  };
  auto load_part2 = [&](int ci) {
    const float *base = scratch + ((size_t)(p.chunk_start[s] + ci) * hv + h) * LY::total;
    int len = min(GDN_C, sq.n - ci * GDN_C);
    size_t row0 = (size_t)sq.start + (size_t)ci * GDN_C;
    for (int idx = tid; idx < GDN_C * DK / 4; idx += GDN_NT) {
      int i = idx / (DK / 4), a4 = (idx % (DK / 4)) * 4;
      if (i < len)
        cp_async16(&ks[i * KP + a4], qkv + (row0 + i) * ld + (size_t)(hk + kh) * DK + a4);
      else
        *(float4 *)&ks[i * KP + a4] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    for (int idx = tid; idx < GDN_C * GDN_C / 4; idx += GDN_NT) {
      int i = idx / (GDN_C / 4), j4 = (idx % (GDN_C / 4)) * 4;
      cp_async16(&as[i * AP + j4], base + LY::w + LY::u + i * GDN_C + j4);
    }
    for (int idx = tid; idx < 3 * GDN_C / 4; idx += GDN_NT)
      cp_async16(&cf[idx * 4], base + LY::w + LY::u + LY::a + idx * 4);
    cp_async_commit();
  };

  if (n_chunks > 0) {
    load_part1(0);
    load_part2(0);
  }
  for (int ci = 0; ci < n_chunks; ci++) {
    int len = min(GDN_C, sq.n - ci * GDN_C);
    cp_async_wait_all();
    __syncthreads();
    /* [W; Q]·S: 128 rows × NC columns, 4×4 tiles */
    for (int tile = tid; tile < (2 * GDN_C / 4) * (NC / 4); tile += GDN_NT) {
      int rb = (tile / (NC / 4)) * 4, c4 = (tile % (NC / 4)) * 4;
      const float *m = rb < GDN_C ? ws + rb * KP : qs + (rb - GDN_C) * KP;
      float acc[4][4];
#pragma unroll
      for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++)
          acc[r][c] = 0.0f;
#pragma unroll 4
      for (int a = 0; a < DK; a++) {
        float4 sv = *(const float4 *)&st[a * CP + c4];
        float svv[4] = {sv.x, sv.y, sv.z, sv.w};
#pragma unroll
        for (int r = 0; r < 4; r++) {
          float mv = m[r * KP + a];
#pragma unroll
          for (int c = 0; c < 4; c++)
            acc[r][c] += mv * svv[c];
        }
      }
      if (rb < GDN_C) {
#pragma unroll
        for (int r = 0; r < 4; r++) {
          int i = rb + r;
          float e = cf[GDN_C + i];
#pragma unroll
          for (int c = 0; c < 4; c++) {
            float v = us[i * CP + c4 + c] - acc[r][c];
            vp[i * CP + c4 + c] = v;
            vps[i * CP + c4 + c] = e * v;
          }
        }
      } else {
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
          for (int c = 0; c < 4; c++)
            qss[(rb - GDN_C + r) * CP + c4 + c] = acc[r][c];
      }
    }
    __syncthreads();
    if (ci + 1 < n_chunks)
      load_part1(ci + 1); /* W, Q, U are free now */
    /* S ← e^{ΓC} S + Kᵀ (e^{ΓC−Γ} ⊙ V'): DK × NC, 4×4 tiles */
    float el = cf[2 * GDN_C];
    for (int tile = tid; tile < (DK / 4) * (NC / 4); tile += GDN_NT) {
      int a4 = (tile / (NC / 4)) * 4, c4 = (tile % (NC / 4)) * 4;
      float acc[4][4];
#pragma unroll
      for (int r = 0; r < 4; r++) {
        float4 sv = *(const float4 *)&st[(a4 + r) * CP + c4];
        acc[r][0] = el * sv.x;
        acc[r][1] = el * sv.y;
        acc[r][2] = el * sv.z;
        acc[r][3] = el * sv.w;
      }
#pragma unroll 4
      for (int i = 0; i < GDN_C; i++) {
        float4 kv = *(const float4 *)&ks[i * KP + a4];
        float4 vv = *(const float4 *)&vps[i * CP + c4];
        float kvv[4] = {kv.x, kv.y, kv.z, kv.w}, vvv[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
          for (int c = 0; c < 4; c++)
            acc[r][c] += kvv[r] * vvv[c];
      }
#pragma unroll
      for (int r = 0; r < 4; r++)
        *(float4 *)&st[(a4 + r) * CP + c4] = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    }
    /* O = e^{Γ} ⊙ QS + A·V': 64 × NC, 2×4 tiles */
    for (int tile = tid; tile < (GDN_C / 2) * (NC / 4); tile += GDN_NT) {
      int ib = (tile / (NC / 4)) * 2, c4 = (tile % (NC / 4)) * 4;
      float acc[2][4];
#pragma unroll
      for (int r = 0; r < 2; r++)
#pragma unroll
        for (int c = 0; c < 4; c++)
          acc[r][c] = cf[ib + r] * qss[(ib + r) * CP + c4 + c];
      int jmax = ib + 2;
      for (int j = 0; j < jmax; j++) {
        float4 vv = *(const float4 *)&vp[j * CP + c4];
        float vvv[4] = {vv.x, vv.y, vv.z, vv.w};
        float a0 = as[ib * AP + j], a1 = as[(ib + 1) * AP + j];
#pragma unroll
        for (int c = 0; c < 4; c++) {
          acc[0][c] += a0 * vvv[c];
          acc[1][c] += a1 * vvv[c];
        }
      }
#pragma unroll
      for (int r = 0; r < 2; r++) {
        int i = ib + r;
        if (i < len) {
          float *o = out + (((size_t)sq.start + (size_t)ci * GDN_C + i) * hv + h) * DV + cb + c4;
#pragma unroll
          for (int c = 0; c < 4; c++)
            o[c] = acc[r][c];
        }
      }
    }
    __syncthreads();
    if (ci + 1 < n_chunks)
      load_part2(ci + 1);
  }
  if (sq.state_out) {
    __syncthreads();
    for (int idx = tid; idx < DK * NC; idx += GDN_NT) {
      int a = idx / NC, c = idx % NC;
      sq.state_out[((size_t)h * DK + a) * DV + cb + c] = st[a * CP + c];
    }
  }
}

size_t exc_gdn_chunked_scratch_bytes(size_t total_tokens, int n_seqs,
                                     const struct ex_gdn_dims *dims) {
  size_t chunks = total_tokens / GDN_C + (size_t)n_seqs;
  return chunks * dims->n_v_heads * gdn_floats_per_chunk_head(dims->dk, dims->dv) * sizeof(float);
}

template <int DK, int DV, int NC>
static int gdn_launch(cudaStream_t stream, const struct gdn_params &p, int total_chunks,
                      const float *qkv, size_t ld, const float *beta, const float *g, float *out,
                      int hk, int hv, void *scratch) {
  constexpr int TP = GDN_C + 4;
  size_t intra_smem = ((size_t)2 * DK * TP + GDN_C * 65 + 3 * GDN_C) * sizeof(float);
  size_t state_smem = (size_t)gdn_state_smem<DK, DV, NC>::total * sizeof(float);
  static bool attr_done = false; /* per instantiation; both calls are idempotent */
  int rc = 0;
  if (!attr_done) {
    rc = EXC_CUDA(cudaFuncSetAttribute(gdn_intra_kernel<DK, DV>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)intra_smem));
    if (!rc)
      rc = EXC_CUDA(cudaFuncSetAttribute(gdn_state_kernel<DK, DV, NC>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)state_smem));
    if (rc)
      return rc;
    attr_done = true;
  }
  gdn_intra_kernel<DK, DV><<<dim3((unsigned)total_chunks, (unsigned)hv), GDN_NT, intra_smem,
                             stream>>>(p, qkv, ld, beta, g, (float *)scratch, hk, hv);
  rc = EXC_CUDA(cudaGetLastError());
  if (rc)
    return rc;
  gdn_state_kernel<DK, DV, NC><<<dim3(DV / NC, (unsigned)hv, (unsigned)p.n_seqs), GDN_NT,
                                 state_smem, stream>>>(p, qkv, ld, (const float *)scratch, out,
                                                       hk, hv);
  return EXC_CUDA(cudaGetLastError());
}

extern "C" int exc_gdn_chunked(cudaStream_t stream, const float *qkv, size_t ld_qkv,
                               const float *beta, const float *g, float *out,
                               const struct exc_gdn_seq *seqs, int n_seqs,
                               const struct ex_gdn_dims *dims, void *scratch) {
  if (n_seqs < 1 || n_seqs > EXC_MAX_SEQS || !dims || dims->n_k_heads == 0 ||
      dims->n_v_heads % dims->n_k_heads != 0)
    return -EINVAL;
  /* 16-byte copies of q/k rows: the row pitch and base must keep float4 alignment */
  if (ld_qkv % 4 != 0 || ((uintptr_t)qkv & 15) != 0 || ((uintptr_t)scratch & 15) != 0)
    return -EINVAL;
  struct gdn_params p; /* 7.2 KB, copied into the launch */
  struct gdn_params *pp = &p;
  memset(pp, 0, sizeof *pp);
  int total_chunks = 0;
  for (int i = 0; i < n_seqs; i++) {
    if (seqs[i].n < 1 || seqs[i].start < 0)
      return -EINVAL;
    pp->seqs[i] = seqs[i];
    pp->chunk_start[i] = total_chunks;
    total_chunks += (seqs[i].n + GDN_C - 1) / GDN_C;
  }
  pp->chunk_start[n_seqs] = total_chunks;
  pp->n_seqs = n_seqs;
  int hk = (int)dims->n_k_heads, hv = (int)dims->n_v_heads;
  if (dims->dk == 128 && dims->dv == 128)
    return gdn_launch<128, 128, 32>(stream, *pp, total_chunks, qkv, ld_qkv, beta, g, out, hk, hv,
                                    scratch);
  if (dims->dk == 16 && dims->dv == 24)
    return gdn_launch<16, 24, 24>(stream, *pp, total_chunks, qkv, ld_qkv, beta, g, out, hk, hv,
                                  scratch);
  return -EINVAL;
}
