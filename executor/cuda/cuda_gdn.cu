/* Gated DeltaNet core on CUDA (see cuda_gdn.h). The chunked rule runs in three launches:
 * 1. intra: every (chunk, value head) in parallel: Γ, L = β(KKᵀ)⊙D, A = (QKᵀ)⊙D and the
 *    unit-triangular solves for U and W (the state-free part);
 * 2. state: one block per (sequence, value head, column block of the state) walks its chunks in
 *    order with its [dk, nc] slice of S: it keeps S at each chunk start,
 *    V' = U − W·S and S ← e^{ΓC}S + Kᵀ(e^{ΓC−Γ}⊙V') — the only sequential work;
 * 3. output: every (chunk, value head, column half) in parallel: O = e^{Γ}⊙(Q·S_c) + A·V'.
 * Variants (exc_gdn_kernel_set, env S1_GDN_KERNEL): `simt` is the above in fp32 FMAs (4×4 / 8×4
 * register tiles). `invf` (fp32 SIMT): one intra block per (chunk, key head) forms KKᵀ and QKᵀ once
 * for the Hv/Hk value heads that share them, then per value head T = (I + L)⁻¹ by 16×16 blocks and
 * U, W as triangular SIMT products (1'.); its walk also forms the output's e^{Γ}⊙(Q·S) (2'.), so S
 * per chunk is not stored and the output launch only adds A·V' (3'.). `invt`: `invf` whose walk
 * forms its products on tensor cores in 3xTF32 (x = hi + lo, lo·hi + hi·lo + hi·hi with fp32
 * accumulation, ≈ fp32 accuracy; plain TF32 would cost ~3e-4 relative, over the 1e-4 budget)
 * with S in registers (2''.). */
#include <errno.h>
#include <stdlib.h>
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

/* Per (chunk, value head) scratch, in this order. */
template <int DK, int DV> struct gdn_layout {
  static constexpr size_t wt = 0;                         /* Wᵀ [dk, 64] (intra) */
  static constexpr size_t u = wt + (size_t)DK * GDN_C;    /* U [64, dv] (intra), then V' (state) */
  static constexpr size_t at = u + (size_t)GDN_C * DV;    /* Aᵀ [64, 64]: at[j·64+i] = A[i][j] */
  static constexpr size_t coef = at + (size_t)GDN_C * GDN_C; /* e^{Γi}, e^{ΓC−Γi}, e^{ΓC} at [128] */
  static constexpr size_t hs = coef + 3 * GDN_C; /* S at the chunk's start [dk, dv] (not invf) */
  static constexpr size_t total = hs + (size_t)DK * DV;
};

static size_t gdn_floats_per_chunk_head(size_t dk, size_t dv) {
  return dk * GDN_C + (size_t)GDN_C * dv + (size_t)GDN_C * GDN_C + 3 * GDN_C + dk * dv;
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

/* x = hi + lo with hi, lo both tf32 (round to nearest); x − hi is exact in fp32 */
__device__ __forceinline__ static void tf32_split(float x, uint32_t &hi, uint32_t &lo) {
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(hi) : "f"(x));
  float r = x - __uint_as_float(hi);
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(lo) : "f"(r));
}

/* d += a·b on one warp (volatile: warp-synchronous, kept where the code puts it), m16n8k8 tf32
 * (PTX ISA fragments, g = lane/4, t = lane%4):
 * a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); b0 (k t, n g), b1 (k t+4, n g);
 * d0 (g, 2t), d1 (g, 2t+1), d2 (g+8, 2t), d3 (g+8, 2t+1). */
__device__ __forceinline__ static void mma_tf32(float d[4], const uint32_t a[4],
                                                const uint32_t b[2]) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
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
 * 1. Intra-chunk kernel of `simt`: block (chunk, value head). Shared: Kᵀ [dk][TP], Qᵀ [dk][TP],
 * L [64][TP] (TP = 64 + 4), Γ, β, βe^{Γ}, g [4·64]. */
template <int DK> struct gdn_intra_smem {
  static constexpr int TP = GDN_C + 4;
  static constexpr int kt = 0, qt = kt + DK * TP, lm = qt + DK * TP, gam = lm + GDN_C * TP,
                       total = gam + 4 * GDN_C;
};

template <int DK, int DV>
__global__ __launch_bounds__(GDN_NT, 1) static void gdn_intra_kernel(
    const __grid_constant__ struct gdn_params p, const float *__restrict__ qkv, size_t ld,
    const float *__restrict__ beta, const float *__restrict__ g, float *__restrict__ scratch,
    int hk, int hv) {
  using LY = gdn_layout<DK, DV>;
  using SM = gdn_intra_smem<DK>;
  constexpr int TP = SM::TP; /* transposed row pitch */
  extern __shared__ float4 smem4[];
  float *kt = (float *)smem4 + SM::kt; /* [DK][TP] */
  float *qt = (float *)smem4 + SM::qt; /* [DK][TP] */
  float *lm = (float *)smem4 + SM::lm; /* [64][TP], zero on and above the diagonal */
  float *gam = (float *)smem4 + SM::gam; /* [64] */
  float *bet = gam + GDN_C;      /* [64] */
  float *beg = bet + GDN_C;      /* [64] β e^{Γ} */
  float *graw = beg + GDN_C;     /* [64] g of the chunk (0 past its end) */

  int chunk = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  int s = find_seq(p, chunk);
  const struct exc_gdn_seq sq = p.seqs[s];
  int c0 = (chunk - p.chunk_start[s]) * GDN_C;
  int len = min(GDN_C, sq.n - c0);
  int kh = h / (hv / hk);
  size_t row0 = (size_t)sq.start + c0;
  float *base = scratch + ((size_t)chunk * hv + h) * LY::total;
  float *wt_out = base + LY::wt, *u_out = base + LY::u, *at_out = base + LY::at;
  float *coef = base + LY::coef;

  /* Kᵀ, Qᵀ: a warp takes 32 consecutive rows of one 4-column group (conflict-free stores) */
  for (int idx = tid; idx < GDN_C * DK / 4; idx += GDN_NT) {
    int i = idx % GDN_C, a4 = (idx / GDN_C) * 4;
    float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), qv = kv;
    if (i < len) {
      const float *r = qkv + (row0 + i) * ld;
      qv = *(const float4 *)(r + (size_t)kh * DK + a4);
      kv = *(const float4 *)(r + (size_t)(hk + kh) * DK + a4);
    }
    kt[(a4 + 0) * TP + i] = kv.x, kt[(a4 + 1) * TP + i] = kv.y;
    kt[(a4 + 2) * TP + i] = kv.z, kt[(a4 + 3) * TP + i] = kv.w;
    qt[(a4 + 0) * TP + i] = qv.x, qt[(a4 + 1) * TP + i] = qv.y;
    qt[(a4 + 2) * TP + i] = qv.z, qt[(a4 + 3) * TP + i] = qv.w;
  }
  if (tid < GDN_C) {
    graw[tid] = tid < len ? g[(row0 + tid) * hv + h] : 0.0f;
    bet[tid] = tid < len ? beta[(row0 + tid) * hv + h] : 0.0f;
  }
  __syncthreads();
  if (tid == 0) { /* Γ in token order, as the twin sums it; padded tokens have g = 0, β = 0 */
    float acc = 0.0f;
    for (int i = 0; i < GDN_C; i++) {
      acc += graw[i];
      gam[i] = acc;
    }
  }
  __syncthreads();
  if (tid < GDN_C) {
    int i = tid;
    float b = bet[i];
    beg[i] = b * expf(gam[i]);
    float gl = gam[GDN_C - 1];
    coef[i] = expf(gam[i]);
    coef[GDN_C + i] = expf(gl - gam[i]);
    if (i == 0)
      coef[2 * GDN_C] = expf(gl);
  }
  __syncthreads();

  {
    /* L and Aᵀ: 4×4 tiles of the 64×64 products, 256 threads */
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
    for (int c = 0; c < 4; c++) {
      int j = 4 * tj + c;
      float av[4];
#pragma unroll
      for (int r = 0; r < 4; r++) {
        int i = 4 * ti + r;
        float d = j <= i ? expf(gam[i] - gam[j]) : 0.0f;
        lm[i * TP + j] = j < i ? bet[i] * kk[r][c] * d : 0.0f;
        av[r] = j <= i ? qk[r][c] * d : 0.0f;
      }
      *(float4 *)&at_out[j * GDN_C + 4 * ti] = make_float4(av[0], av[1], av[2], av[3]);
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
    /* j ascending as the twin; the zeros of L at j ≥ i subtract exact zeros */
#pragma unroll
    for (int i = 1; i < GDN_C; i++) {
      float xi = x[i];
#pragma unroll
      for (int j4 = 0; j4 < i; j4 += 4) {
        float4 l = *(const float4 *)&lm[i * TP + j4];
        xi -= l.x * x[j4];
        xi -= l.y * x[j4 + 1];
        xi -= l.z * x[j4 + 2];
        xi -= l.w * x[j4 + 3];
      }
      x[i] = xi;
    }
    if (col < DV) {
#pragma unroll
      for (int i = 0; i < GDN_C; i++)
        u_out[i * DV + col] = x[i];
    } else {
      float *w = wt_out + (size_t)(col - DV) * GDN_C;
#pragma unroll
      for (int i = 0; i < GDN_C; i += 4)
        *(float4 *)&w[i] = make_float4(x[i], x[i + 1], x[i + 2], x[i + 3]);
    }
  }
}

/* ---------------------------------------------------------------------------------------------
 * 1'. Intra-chunk kernel of `invf` and `invt` (fp32 SIMT): block (chunk, key head), 256
 * threads, 2 blocks/SM.
 * KKᵀ and QKᵀ depend only on the key head, so the block forms them once (4×4 register tiles, kept
 * in registers) and then, for each of the r = Hv/Hk value heads of that key head in turn: Γ, L and
 * Aᵀ from the register tiles with that head's β and decays; T = (I + L)⁻¹ by forward substitution
 * (column c by the four lanes 4c … 4c+3, stored transposed: tt[j][i] = T[i][j]); then
 * U = T·(β⊙V) and W = T·(βe^{Γ}⊙K) as 4×4-tile products over T's lower triangle (the
 * reference's attn = (I + L)⁻¹, value = attn @ v_beta). Shared: region A = Kᵀ [dk][TP], later the
 * head's β⊙V [64][dv+4]; region B = Qᵀ [dk][TP], later the head's βe^{Γ}⊙K [64][dk+4]; L [64][TP];
 * Tᵀ [64][TP]; Γ, β, βe^{Γ}, g [4·64]. With gridDim.z = r (short inputs) each block takes one
 * value head and the products are formed r times. */
template <int DK, int DV> struct gdn_intra_inv_smem {
  static constexpr int TP = GDN_C + 4, VP = DV + 4, KP = DK + 4, PP = 17; /* PP: pm row pitch */
  static constexpr int RA = DK * TP > GDN_C * VP ? DK * TP : GDN_C * VP;
  static constexpr int RB = DK * TP > GDN_C * KP ? DK * TP : GDN_C * KP;
  static constexpr int ra = 0, rb = ra + RA, lm = rb + RB, tt = lm + GDN_C * TP,
                       gam = tt + GDN_C * TP, pm = gam + 4 * GDN_C,
                       total = pm + 3 * 16 * PP;
};

template <int DK, int DV>
__global__ __launch_bounds__(GDN_NT, 2) static void gdn_intra_inv_kernel(
    const __grid_constant__ struct gdn_params p, const float *__restrict__ qkv, size_t ld,
    const float *__restrict__ beta, const float *__restrict__ g, float *__restrict__ scratch,
    int hk, int hv) {
  using LY = gdn_layout<DK, DV>;
  using SM = gdn_intra_inv_smem<DK, DV>;
  constexpr int TP = SM::TP, VP = SM::VP, KP = SM::KP, PP = SM::PP, NG = (DV + DK) / 4;
  extern __shared__ float4 smem4[];
  float *ra = (float *)smem4 + SM::ra; /* Kᵀ [DK][TP], then β⊙V [64][VP] */
  float *rb = (float *)smem4 + SM::rb; /* Qᵀ [DK][TP], then βe^{Γ}⊙K [64][KP] */
  float *lm = (float *)smem4 + SM::lm; /* [64][TP], zero on and above the diagonal */
  float *tt = (float *)smem4 + SM::tt; /* [64][TP]: tt[j][i] = T[i][j] */
  float *gam = (float *)smem4 + SM::gam;
  float *bet = gam + GDN_C, *beg = bet + GDN_C, *graw = beg + GDN_C;
  float *pm = (float *)smem4 + SM::pm; /* [3][16][PP] partial sums of off-diagonal blocks */

  int chunk = blockIdx.x, kh = blockIdx.y, tid = threadIdx.x;
  int s = find_seq(p, chunk);
  const struct exc_gdn_seq sq = p.seqs[s];
  int c0 = (chunk - p.chunk_start[s]) * GDN_C;
  int len = min(GDN_C, sq.n - c0);
  int r = hv / hk;
  size_t row0 = (size_t)sq.start + c0;
  const float *krow0 = qkv + row0 * ld + (size_t)(hk + kh) * DK;

  /* Kᵀ, Qᵀ: a warp takes 32 consecutive rows of one 4-column group (conflict-free stores) */
  for (int idx = tid; idx < GDN_C * DK / 4; idx += GDN_NT) {
    int i = idx % GDN_C, a4 = (idx / GDN_C) * 4;
    float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), qv = kv;
    if (i < len) {
      const float *rw = qkv + (row0 + i) * ld;
      qv = *(const float4 *)(rw + (size_t)kh * DK + a4);
      kv = *(const float4 *)(rw + (size_t)(hk + kh) * DK + a4);
    }
    ra[(a4 + 0) * TP + i] = kv.x, ra[(a4 + 1) * TP + i] = kv.y;
    ra[(a4 + 2) * TP + i] = kv.z, ra[(a4 + 3) * TP + i] = kv.w;
    rb[(a4 + 0) * TP + i] = qv.x, rb[(a4 + 1) * TP + i] = qv.y;
    rb[(a4 + 2) * TP + i] = qv.z, rb[(a4 + 3) * TP + i] = qv.w;
  }
  __syncthreads();
  /* KKᵀ and QKᵀ of the key head, 4×4 tiles (rows 4ti.., columns 4tj..), kept for every value
   * head. Threads 0 … 135 take the tiles on and below the diagonal (row-major order of the lower
   * triangle) and form them; threads 136 … 255 take the 120 tiles above it, which are zeros (warps
   * 5-7 skip the products, leaving the SM's issue slots to the other block). */
  int ti = 0, tj;
  if (tid < 136) {
    while ((ti + 1) * (ti + 2) / 2 <= tid)
      ti++;
    tj = tid - ti * (ti + 1) / 2;
  } else { /* strict lower index u → (p, q), q < p; the tile above is (q, p) */
    int u = tid - 136, pp = 1;
    while ((pp + 1) * pp / 2 <= u)
      pp++;
    ti = u - pp * (pp - 1) / 2;
    tj = pp;
  }
  float kk[4][4], qk[4][4];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int c = 0; c < 4; c++)
      kk[i][c] = qk[i][c] = 0.0f;
  if (tid < 136) {
#pragma unroll 4
    for (int a = 0; a < DK; a++) {
      float4 ki = *(const float4 *)&ra[a * TP + 4 * ti];
      float4 kj = *(const float4 *)&ra[a * TP + 4 * tj];
      float4 qi = *(const float4 *)&rb[a * TP + 4 * ti];
      float kiv[4] = {ki.x, ki.y, ki.z, ki.w}, kjv[4] = {kj.x, kj.y, kj.z, kj.w};
      float qiv[4] = {qi.x, qi.y, qi.z, qi.w};
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
          kk[i][c] += kiv[i] * kjv[c];
          qk[i][c] += qiv[i] * kjv[c];
        }
    }
  }

  for (int v = blockIdx.z; v < r; v += gridDim.z) { /* gridDim.z value-head groups */
    const int h = kh * r + v;
    float *base = scratch + ((size_t)chunk * hv + h) * LY::total;
    float *wt_out = base + LY::wt, *u_out = base + LY::u, *at_out = base + LY::at;
    float *coef = base + LY::coef;
    __syncthreads(); /* the products (and the previous head) are done with ra, rb, tt, gates */
    if (tid < GDN_C) {
      graw[tid] = tid < len ? g[(row0 + tid) * hv + h] : 0.0f;
      bet[tid] = tid < len ? beta[(row0 + tid) * hv + h] : 0.0f;
    }
    __syncthreads();
    if (tid == 0) { /* Γ in token order, as the twin sums it; padded tokens have g = 0, β = 0 */
      float acc = 0.0f;
      for (int i = 0; i < GDN_C; i++) {
        acc += graw[i];
        gam[i] = acc;
      }
    }
    __syncthreads();
    if (tid < GDN_C) {
      int i = tid;
      beg[i] = bet[i] * expf(gam[i]);
      float gl = gam[GDN_C - 1];
      coef[i] = expf(gam[i]);
      coef[GDN_C + i] = expf(gl - gam[i]);
      if (i == 0)
        coef[2 * GDN_C] = expf(gl);
    }
    __syncthreads();
    /* the head's β⊙V into region A and βe^{Γ}⊙K into region B, rows past len zero */
    const float *vrow0 = qkv + row0 * ld + (size_t)2 * hk * DK + (size_t)h * DV;
    for (int idx = tid; idx < GDN_C * DV / 4; idx += GDN_NT) {
      int j = idx / (DV / 4), c4 = (idx % (DV / 4)) * 4;
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
      if (j < len) {
        x = *(const float4 *)(vrow0 + (size_t)j * ld + c4);
        float b = bet[j];
        x.x *= b, x.y *= b, x.z *= b, x.w *= b;
      }
      *(float4 *)&ra[j * VP + c4] = x;
    }
    for (int idx = tid; idx < GDN_C * DK / 4; idx += GDN_NT) {
      int j = idx / (DK / 4), a4 = (idx % (DK / 4)) * 4;
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
      if (j < len) {
        x = *(const float4 *)(krow0 + (size_t)j * ld + a4);
        float b = beg[j];
        x.x *= b, x.y *= b, x.z *= b, x.w *= b;
      }
      *(float4 *)&rb[j * KP + a4] = x;
    }
    /* L and Aᵀ of this head from the shared products */
#pragma unroll
    for (int c = 0; c < 4; c++) {
      int j = 4 * tj + c;
      float av[4];
#pragma unroll
      for (int i4 = 0; i4 < 4; i4++) {
        int i = 4 * ti + i4;
        float d = j <= i ? expf(gam[i] - gam[j]) : 0.0f;
        lm[i * TP + j] = j < i ? bet[i] * kk[i4][c] * d : 0.0f;
        av[i4] = j <= i ? qk[i4][c] * d : 0.0f;
      }
      *(float4 *)&at_out[j * GDN_C + 4 * ti] = make_float4(av[0], av[1], av[2], av[3]);
    }
    __syncthreads();
    {
      /* Tᵀ by 16×16 blocks (T_IJ, I ≥ J): zeros above the block diagonal; the four diagonal
       * blocks D_I = (I + L_II)⁻¹ at once by forward substitution (column c by lanes 4c … 4c+3,
       * 16 steps); then by block distance d = 1, 2, 3: P = Σ_{K=J}^{I−1} L_IK·T_KJ and
       * T_IJ = −D_I·P (the inverse of a block lower-triangular matrix). */
      for (int idx = tid; idx < GDN_C * GDN_C; idx += GDN_NT) {
        const int j = idx / GDN_C, i = idx % GDN_C;
        if ((i >> 4) < (j >> 4))
          tt[j * TP + i] = 0.0f;
      }
      {
        const int c = tid >> 2, part = tid & 3, b0 = c & ~15;
        float *tcol = tt + c * TP;
        for (int il = 0; il < 16; il++) {
          const int i = b0 + il;
          const float *li = lm + i * TP;
          float x = 0.0f;
          for (int j = c + part; j < i; j += 4)
            x += li[j] * tcol[j];
          x += __shfl_xor_sync(0xffffffffu, x, 1);
          x += __shfl_xor_sync(0xffffffffu, x, 2);
          if (part == 0)
            tcol[i] = (i == c ? 1.0f : 0.0f) - x;
          __syncwarp(); /* the column's later terms read this entry from all four lanes */
        }
      }
      __syncthreads();
      for (int d = 1; d < 4; d++) {
        const int n = (4 - d) * 256; /* elements of the blocks (J + d, J), J < 4 − d */
        for (int e = tid; e < n; e += GDN_NT) {
          const int J = e >> 8, r = (e >> 4) & 15, cc = e & 15;
          const float *li = lm + (16 * (J + d) + r) * TP, *tj = tt + (16 * J + cc) * TP;
          float x0 = 0.0f, x1 = 0.0f, x2 = 0.0f, x3 = 0.0f;
          for (int k = 16 * J; k < 16 * (J + d); k += 4) {
            float4 l = *(const float4 *)&li[k], t = *(const float4 *)&tj[k];
            x0 += l.x * t.x;
            x1 += l.y * t.y;
            x2 += l.z * t.z;
            x3 += l.w * t.w;
          }
          pm[(J * 16 + r) * PP + cc] = (x0 + x1) + (x2 + x3);
        }
        __syncthreads();
        for (int e = tid; e < n; e += GDN_NT) {
          const int J = e >> 8, I = J + d, r = (e >> 4) & 15, cc = e & 15;
          const float *di = tt + 16 * I * TP + 16 * I + r; /* D_I[r][k] = di[k·TP] */
          float x = 0.0f;
          for (int k = 0; k <= r; k++)
            x += di[k * TP] * pm[(J * 16 + k) * PP + cc];
          tt[(16 * J + cc) * TP + 16 * I + r] = -x;
        }
        __syncthreads();
      }
    }
    /* [U | W] = T·[β⊙V | βe^{Γ}⊙K]: 4×4 tiles over 64 × (dv + dk); the sum over j stops at the
     * tile's last row (T is lower triangular). Row blocks ib of slot sl: a thread's slots
     * sl, sl+4, sl+8, sl+12 take blocks {q, 7−q, 8+q, 15−q}, equal work per thread. */
    for (int t = tid; t < (GDN_C / 4) * NG; t += GDN_NT) {
      const int cg = t % NG, sl = t / NG, ib = (sl & 4) ? (sl ^ 3) : sl;
      const int i4 = 4 * ib, c4 = 4 * cg;
      const bool is_u = c4 < DV;
      const float *x = is_u ? ra + c4 : rb + (c4 - DV);
      const int xp = is_u ? VP : KP;
      float acc[4][4];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int c = 0; c < 4; c++)
          acc[i][c] = 0.0f;
#pragma unroll 4
      for (int j = 0; j < i4 + 4; j++) {
        float4 tv = *(const float4 *)&tt[j * TP + i4];
        float4 xv = *(const float4 *)&x[j * xp];
        float tvv[4] = {tv.x, tv.y, tv.z, tv.w}, xvv[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
          for (int c = 0; c < 4; c++)
            acc[i][c] += tvv[i] * xvv[c];
      }
      if (is_u) {
#pragma unroll
        for (int i = 0; i < 4; i++)
          *(float4 *)&u_out[(i4 + i) * DV + c4] =
              make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
      } else {
#pragma unroll
        for (int c = 0; c < 4; c++)
          *(float4 *)&wt_out[(c4 - DV + c) * GDN_C + i4] =
              make_float4(acc[0][c], acc[1][c], acc[2][c], acc[3][c]);
      }
    }
  }
}

/* ---------------------------------------------------------------------------------------------
 * 2. State kernel: block (column block of NC, value head, sequence), NC·4 threads. Per chunk:
 * keep S (its start state) for the output kernel, V' = U − W·S (written over U),
 * S ← e^{ΓC}S + Kᵀ(e^{ΓC−Γ}⊙V'). Inputs are double-buffered: chunk ci+1 streams in during ci. */
template <int DK, int DV, int NC> struct gdn_state_smem {
  static constexpr int WP = GDN_C + 4, KP = DK + 4, CP = NC + 4, CFP = 3 * GDN_C + 4;
  static constexpr int wt = 0, us = wt + 2 * DK * WP, ks = us + 2 * GDN_C * CP,
                       cf = ks + 2 * GDN_C * KP, st = cf + 2 * CFP, vps = st + DK * CP,
                       total = vps + GDN_C * CP;
};

template <int DK, int DV, int NC>
__global__ __launch_bounds__(NC * 4) static void gdn_state_kernel(
    const __grid_constant__ struct gdn_params p, const float *__restrict__ qkv, size_t ld,
    float *__restrict__ scratch, int hk, int hv) {
  using LY = gdn_layout<DK, DV>;
  using SM = gdn_state_smem<DK, DV, NC>;
  constexpr int NT = NC * 4, WP = SM::WP, KP = SM::KP, CP = SM::CP, CFP = SM::CFP;
  extern __shared__ float4 smem4[];
  float *sm = (float *)smem4;
  float *wt0 = sm + SM::wt, *us0 = sm + SM::us, *ks0 = sm + SM::ks, *cf0 = sm + SM::cf;
  float *st = sm + SM::st, *vps = sm + SM::vps;

  int cb = blockIdx.x * NC, h = blockIdx.y, s = blockIdx.z, tid = threadIdx.x;
  const struct exc_gdn_seq sq = p.seqs[s];
  int kh = h / (hv / hk);
  int n_chunks = p.chunk_start[s + 1] - p.chunk_start[s];
  auto chunk_base = [&](int ci) {
    return scratch + ((size_t)(p.chunk_start[s] + ci) * hv + h) * LY::total;
  };

  for (int idx = tid; idx < DK * NC; idx += NT) {
    int a = idx / NC, c = idx % NC;
    st[a * CP + c] = sq.state_in ? sq.state_in[((size_t)h * DK + a) * DV + cb + c] : 0.0f;
  }
  auto load_wu = [&](int ci) {
    const float *base = chunk_base(ci);
    float *wt = wt0 + (ci & 1) * DK * WP, *us = us0 + (ci & 1) * GDN_C * CP;
    for (int idx = tid; idx < DK * GDN_C / 4; idx += NT) {
      int a = idx / (GDN_C / 4), i4 = (idx % (GDN_C / 4)) * 4;
      cp_async16(&wt[a * WP + i4], base + LY::wt + a * GDN_C + i4);
    }
    for (int idx = tid; idx < GDN_C * NC / 4; idx += NT) {
      int i = idx / (NC / 4), c4 = (idx % (NC / 4)) * 4;
      cp_async16(&us[i * CP + c4], base + LY::u + i * DV + cb + c4);
    }
  };
  auto load_k = [&](int ci) {
    const float *base = chunk_base(ci);
    float *ks = ks0 + (ci & 1) * GDN_C * KP, *cf = cf0 + (ci & 1) * CFP;
    int len = min(GDN_C, sq.n - ci * GDN_C);
    size_t row0 = (size_t)sq.start + (size_t)ci * GDN_C;
    for (int idx = tid; idx < GDN_C * DK / 4; idx += NT) {
      int i = idx / (DK / 4), a4 = (idx % (DK / 4)) * 4;
      if (i < len)
        cp_async16(&ks[i * KP + a4], qkv + (row0 + i) * ld + (size_t)(hk + kh) * DK + a4);
      else
        *(float4 *)&ks[i * KP + a4] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    for (int idx = tid; idx < 3 * GDN_C / 4; idx += NT)
      cp_async16(&cf[idx * 4], base + LY::coef + idx * 4);
  };

  if (n_chunks > 0) {
    load_wu(0);
    load_k(0);
    cp_async_commit();
  }
  for (int ci = 0; ci < n_chunks; ci++) {
    float *base = chunk_base(ci);
    const float *ks = ks0 + (ci & 1) * GDN_C * KP, *cf = cf0 + (ci & 1) * CFP;
    const float *wt = wt0 + (ci & 1) * DK * WP, *us = us0 + (ci & 1) * GDN_C * CP;
    cp_async_wait_all();
    __syncthreads();
    if (ci + 1 < n_chunks) { /* all of chunk ci+1 streams in during this one */
      load_wu(ci + 1);
      load_k(ci + 1);
      cp_async_commit();
    }
    /* V' = U − W·S: 64 × NC, 4×4 tiles */
    for (int tile = tid; tile < (GDN_C / 4) * (NC / 4); tile += NT) {
      int i4 = (tile / (NC / 4)) * 4, c4 = (tile % (NC / 4)) * 4;
      float acc[4][4];
#pragma unroll
      for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++)
          acc[r][c] = 0.0f;
#pragma unroll 8
      for (int a = 0; a < DK; a++) {
        float4 wv = *(const float4 *)&wt[a * WP + i4];
        float4 sv = *(const float4 *)&st[a * CP + c4];
        float wvv[4] = {wv.x, wv.y, wv.z, wv.w}, svv[4] = {sv.x, sv.y, sv.z, sv.w};
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
          for (int c = 0; c < 4; c++)
            acc[r][c] += wvv[r] * svv[c];
      }
#pragma unroll
      for (int r = 0; r < 4; r++) {
        int i = i4 + r;
        float e = cf[GDN_C + i];
        float v[4];
#pragma unroll
        for (int c = 0; c < 4; c++) {
          v[c] = us[i * CP + c4 + c] - acc[r][c];
          vps[i * CP + c4 + c] = e * v[c];
        }
        *(float4 *)&base[LY::u + i * DV + cb + c4] = make_float4(v[0], v[1], v[2], v[3]);
      }
    }
    /* keep S at the chunk's start for the output kernel */
    for (int idx = tid; idx < DK * NC / 4; idx += NT) {
      int a = idx / (NC / 4), c4 = (idx % (NC / 4)) * 4;
      *(float4 *)&base[LY::hs + a * DV + cb + c4] = *(const float4 *)&st[a * CP + c4];
    }
    __syncthreads();
    /* S ← e^{ΓC} S + Kᵀ (e^{ΓC−Γ} ⊙ V'): DK × NC, 8×4 tiles */
    float el = cf[2 * GDN_C];
    for (int tile = tid; tile < (DK / 8) * (NC / 4); tile += NT) {
      int a8 = (tile / (NC / 4)) * 8, c4 = (tile % (NC / 4)) * 4;
      float acc[8][4];
#pragma unroll
      for (int r = 0; r < 8; r++) {
        float4 sv = *(const float4 *)&st[(a8 + r) * CP + c4];
        acc[r][0] = el * sv.x;
        acc[r][1] = el * sv.y;
        acc[r][2] = el * sv.z;
        acc[r][3] = el * sv.w;
      }
#pragma unroll 4
      for (int i = 0; i < GDN_C; i++) {
        float4 k0 = *(const float4 *)&ks[i * KP + a8];
        float4 k1 = *(const float4 *)&ks[i * KP + a8 + 4];
        float4 vv = *(const float4 *)&vps[i * CP + c4];
        float kvv[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
        float vvv[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
        for (int r = 0; r < 8; r++)
#pragma unroll
          for (int c = 0; c < 4; c++)
            acc[r][c] += kvv[r] * vvv[c];
      }
#pragma unroll
      for (int r = 0; r < 8; r++)
        *(float4 *)&st[(a8 + r) * CP + c4] =
            make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    }
  }
  if (sq.state_out) {
    __syncthreads();
    for (int idx = tid; idx < DK * NC; idx += NT) {
      int a = idx / NC, c = idx % NC;
      sq.state_out[((size_t)h * DK + a) * DV + cb + c] = st[a * CP + c];
    }
  }
}

/* ---------------------------------------------------------------------------------------------
 * 2'. State walk of `invf`, with the state's share of the output: block (column block of NC,
 * value head, sequence), NC·8 threads. Per chunk: the first half of the block forms
 * V' = U − W·S (4×4 tiles, written over U and as e^{ΓC−Γ}⊙V' for the update), the second half
 * e^{Γ}⊙(Q·S) straight into `out` (rows < len; the A·V' term is added by gdn_out_av_kernel); then
 * all threads S ← e^{ΓC}S + Kᵀ(e^{ΓC−Γ}⊙V'). S at the chunk start is not kept. U, K and the
 * coefficients are double-buffered (chunk ci+1 streams in during ci); W and Q (row-major) have one
 * buffer each, refilled for ci+1 once the chunk's first phase is done with them. */
template <int DK, int DV, int NC> struct gdn_state_fused_smem {
  static constexpr int WP = GDN_C + 4, KP = DK + 4, CP = NC + 4, CFP = 3 * GDN_C + 4;
  static constexpr int wt = 0, qs = wt + DK * WP, us = qs + GDN_C * KP, ks = us + 2 * GDN_C * CP,
                       cf = ks + 2 * GDN_C * KP, st = cf + 2 * CFP, vps = st + DK * CP,
                       total = vps + GDN_C * CP;
};

template <int DK, int DV, int NC>
__global__ __launch_bounds__(NC * 8) static void gdn_state_fused_kernel(
    const __grid_constant__ struct gdn_params p, const float *__restrict__ qkv, size_t ld,
    float *__restrict__ scratch, float *__restrict__ out, int hk, int hv) {
  using LY = gdn_layout<DK, DV>;
  using SM = gdn_state_fused_smem<DK, DV, NC>;
  constexpr int NT = NC * 8, HT = NC * 4, WP = SM::WP, KP = SM::KP, CP = SM::CP, CFP = SM::CFP;
  extern __shared__ float4 smem4[];
  float *sm = (float *)smem4;
  float *wt = sm + SM::wt, *qs = sm + SM::qs, *us0 = sm + SM::us, *ks0 = sm + SM::ks;
  float *cf0 = sm + SM::cf, *st = sm + SM::st, *vps = sm + SM::vps;

  int cb = blockIdx.x * NC, h = blockIdx.y, s = blockIdx.z, tid = threadIdx.x;
  const struct exc_gdn_seq sq = p.seqs[s];
  int kh = h / (hv / hk);
  int n_chunks = p.chunk_start[s + 1] - p.chunk_start[s];
  auto chunk_base = [&](int ci) {
    return scratch + ((size_t)(p.chunk_start[s] + ci) * hv + h) * LY::total;
  };

  for (int idx = tid; idx < DK * NC; idx += NT) {
    int a = idx / NC, c = idx % NC;
    st[a * CP + c] = sq.state_in ? sq.state_in[((size_t)h * DK + a) * DV + cb + c] : 0.0f;
  }
  /* U, K rows, coefficients of chunk ci into buffer ci & 1 */
  auto load_ukc = [&](int ci) {
    const float *base = chunk_base(ci);
    float *us = us0 + (ci & 1) * GDN_C * CP, *ks = ks0 + (ci & 1) * GDN_C * KP;
    float *cf = cf0 + (ci & 1) * CFP;
    int len = min(GDN_C, sq.n - ci * GDN_C);
    size_t row0 = (size_t)sq.start + (size_t)ci * GDN_C;
    for (int idx = tid; idx < GDN_C * NC / 4; idx += NT) {
      int i = idx / (NC / 4), c4 = (idx % (NC / 4)) * 4;
      cp_async16(&us[i * CP + c4], base + LY::u + i * DV + cb + c4);
    }
    for (int idx = tid; idx < GDN_C * DK / 4; idx += NT) {
      int i = idx / (DK / 4), a4 = (idx % (DK / 4)) * 4;
      if (i < len)
        cp_async16(&ks[i * KP + a4], qkv + (row0 + i) * ld + (size_t)(hk + kh) * DK + a4);
      else
        *(float4 *)&ks[i * KP + a4] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    for (int idx = tid; idx < 3 * GDN_C / 4; idx += NT)
      cp_async16(&cf[idx * 4], base + LY::coef + idx * 4);
  };
  /* Wᵀ and the Q rows of chunk ci into their single buffers */
  auto load_wq = [&](int ci) {
    const float *base = chunk_base(ci);
    int len = min(GDN_C, sq.n - ci * GDN_C);
    size_t row0 = (size_t)sq.start + (size_t)ci * GDN_C;
    for (int idx = tid; idx < DK * GDN_C / 4; idx += NT) {
      int a = idx / (GDN_C / 4), i4 = (idx % (GDN_C / 4)) * 4;
      cp_async16(&wt[a * WP + i4], base + LY::wt + a * GDN_C + i4);
    }
    for (int idx = tid; idx < GDN_C * DK / 4; idx += NT) {
      int i = idx / (DK / 4), a4 = (idx % (DK / 4)) * 4;
      if (i < len)
        cp_async16(&qs[i * KP + a4], qkv + (row0 + i) * ld + (size_t)kh * DK + a4);
      else
        *(float4 *)&qs[i * KP + a4] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };

  if (n_chunks > 0) {
    load_ukc(0);
    load_wq(0);
    cp_async_commit();
  }
  for (int ci = 0; ci < n_chunks; ci++) {
    float *base = chunk_base(ci);
    const float *ks = ks0 + (ci & 1) * GDN_C * KP, *cf = cf0 + (ci & 1) * CFP;
    const float *us = us0 + (ci & 1) * GDN_C * CP;
    const int len = min(GDN_C, sq.n - ci * GDN_C);
    const size_t row0 = (size_t)sq.start + (size_t)ci * GDN_C;
    cp_async_wait_all();
    __syncthreads();
    if (ci + 1 < n_chunks) {
      load_ukc(ci + 1);
      cp_async_commit();
    }
    {
      const int half = tid / HT, tile = tid % HT;
      const int i4 = (tile / (NC / 4)) * 4, c4 = (tile % (NC / 4)) * 4;
      float acc[4][4];
#pragma unroll
      for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++)
          acc[r][c] = 0.0f;
      if (half == 0) { /* V' = U − W·S */
#pragma unroll 8
        for (int a = 0; a < DK; a++) {
          float4 wv = *(const float4 *)&wt[a * WP + i4];
          float4 sv = *(const float4 *)&st[a * CP + c4];
          float wvv[4] = {wv.x, wv.y, wv.z, wv.w}, svv[4] = {sv.x, sv.y, sv.z, sv.w};
#pragma unroll
          for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++)
              acc[r][c] += wvv[r] * svv[c];
        }
#pragma unroll
        for (int r = 0; r < 4; r++) {
          int i = i4 + r;
          float e = cf[GDN_C + i];
          float v[4];
#pragma unroll
          for (int c = 0; c < 4; c++) {
            v[c] = us[i * CP + c4 + c] - acc[r][c];
            vps[i * CP + c4 + c] = e * v[c];
          }
          *(float4 *)&base[LY::u + i * DV + cb + c4] = make_float4(v[0], v[1], v[2], v[3]);
        }
      } else { /* e^{Γ} ⊙ (Q·S) into out, four k at a time */
#pragma unroll 2
        for (int a = 0; a < DK; a += 4) {
          float4 qv[4], sv[4];
#pragma unroll
          for (int r = 0; r < 4; r++)
            qv[r] = *(const float4 *)&qs[(i4 + r) * KP + a];
#pragma unroll
          for (int k = 0; k < 4; k++)
            sv[k] = *(const float4 *)&st[(a + k) * CP + c4];
#pragma unroll
          for (int r = 0; r < 4; r++) {
            float qq[4] = {qv[r].x, qv[r].y, qv[r].z, qv[r].w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
              acc[r][0] += qq[k] * sv[k].x;
              acc[r][1] += qq[k] * sv[k].y;
              acc[r][2] += qq[k] * sv[k].z;
              acc[r][3] += qq[k] * sv[k].w;
            }
          }
        }
#pragma unroll
        for (int r = 0; r < 4; r++) {
          int i = i4 + r;
          float e = cf[i];
          if (i < len)
            *(float4 *)(out + ((row0 + i) * hv + h) * DV + cb + c4) =
                make_float4(e * acc[r][0], e * acc[r][1], e * acc[r][2], e * acc[r][3]);
        }
      }
    }
    __syncthreads(); /* V' complete; W and Q free for the next chunk */
    if (ci + 1 < n_chunks) {
      load_wq(ci + 1);
      cp_async_commit();
    }
    /* S ← e^{ΓC} S + Kᵀ (e^{ΓC−Γ} ⊙ V'): DK × NC, 4×4 tiles */
    float el = cf[2 * GDN_C];
    for (int tile = tid; tile < (DK / 4) * (NC / 4); tile += NT) {
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
#pragma unroll 8
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
        *(float4 *)&st[(a4 + r) * CP + c4] =
            make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    }
  }
  if (sq.state_out) {
    __syncthreads();
    for (int idx = tid; idx < DK * NC; idx += NT) {
      int a = idx / NC, c = idx % NC;
      sq.state_out[((size_t)h * DK + a) * DV + cb + c] = st[a * CP + c];
    }
  }
}

/* 2''. State walk of `invt`: gdn_state_fused_kernel's work (V' = U − W·S, e^{Γ}⊙(Q·S) into
 * `out`, S ← e^{ΓC}S + Kᵀ(e^{ΓC−Γ}⊙V')) with every product on tensor cores in 3xTF32
 * (mma.sync m16n8k8: x = hi + lo, lo·hi + hi·lo + hi·hi accumulated in fp32; the dropped lo·lo is
 * ≈ 2⁻²² relative). The products are transposed, (W·S)ᵀ = Sᵀ·Wᵀ, (Q·S)ᵀ = Sᵀ·Qᵀ and
 * Sᵀ ← e^{ΓC}Sᵀ + V''ᵀ·K, so that S is the A operand or the accumulator.
 * Block (column block of NC, value head, sequence), NW = NC/16 · NQ warps; warp w = (m-tile
 * w / NQ of 16 columns, part q = w % NQ):
 * - it keeps Sᵀ[16 columns, dk slice q of dk/NQ] in registers across all chunks as mma accumulator
 *   fragments (n-tile j: d0 (col g, dk 2t), d1 (g, 2t+1), d2 (g+8, 2t), d3 (g+8, 2t+1) of the
 *   8-wide dk block; g = lane/4, t = lane%4), and copies it to `ss` (Sᵀ [NC][dk+8]) after each
 *   update for the others' first products;
 * - 1. it forms rows slice q (128/NQ of the 128 rows [W; Q]) of Sᵀ·[Wᵀ | Qᵀ] over the whole dk
 *   (A fragments from ss) and finalises them in registers: V' = U − W·S (to scratch, over U) and
 *   V''ᵀ = (e^{ΓC−Γ}⊙V')ᵀ (to `vt`), or e^{Γ}⊙(Q·S) into `out` (rows < len; A·V' is added by
 *   gdn_out_av_kernel);
 * - 2. it adds V''ᵀ[its 16 columns, 64]·K[64, its dk slice] to e^{ΓC}·(its Sᵀ) (the product in
 *   fresh accumulators, the sum in fp32).
 * A fragments are read with k permuted inside each 8-step (slot t ↔ 2t, slot t+4 ↔ 2t+1; B rows
 * the same), so that a D fragment's column pair (2t, 2t+1) is one float2. Columns ≥ DV − cb
 * (dv = 24 with NC = 32) are carried as zeros (U padded with zeros) and never written. K is
 * double-buffered (chunk ci+1 streams in during ci); Wᵀ and Q are refilled once the chunk's first
 * products are done, U and the coefficients once the finalisation is done. Shared pitches give
 * conflict-free fragment accesses: Wᵀ 64+4, Q dk+8 (float2), K dk+4, U NC+4, V''ᵀ 64+8 and
 * Sᵀ dk+8 (float2 loads and stores). */
template <int DK, int DV, int NC, int NQ> struct gdn_state_tc_smem {
  static constexpr int NW = NC / 16 * NQ;
  static constexpr int WP = GDN_C + 4, QP = DK + 8, KP = DK + 4, UP = NC + 4, VP = GDN_C + 8,
                       SP = DK + 8, CFP = 3 * GDN_C + 4;
  static constexpr int wt = 0, qs = wt + DK * WP, ks = qs + GDN_C * QP, us = ks + 2 * GDN_C * KP,
                       vt = us + GDN_C * UP, ss = vt + NC * VP, cf = ss + NC * SP,
                       total = cf + CFP;
};

/* x = hi + lo for the four A-fragment values */
__device__ __forceinline__ static void tf32_split4(const float a[4], uint32_t ah[4],
                                                   uint32_t al[4]) {
#pragma unroll
  for (int r = 0; r < 4; r++)
    tf32_split(a[r], ah[r], al[r]);
}
/* d += a·b (m16n8k8, fp32 accumulation) in 3xTF32: a given split, b as fp32 (split here) */
__device__ __forceinline__ static void mma3_frag(float d[4], const uint32_t ah[4],
                                                 const uint32_t al[4], float b0, float b1) {
  uint32_t bh[2], bl[2];
  tf32_split(b0, bh[0], bl[0]);
  tf32_split(b1, bh[1], bl[1]);
  mma_tf32(d, al, bh);
  mma_tf32(d, ah, bl);
  mma_tf32(d, ah, bh);
}

template <int DK, int DV, int NC, int NQ>
__global__ __launch_bounds__(NC / 16 * NQ * 32) static void gdn_state_tc_kernel(
    const __grid_constant__ struct gdn_params p, const float *__restrict__ qkv, size_t ld,
    float *__restrict__ scratch, float *__restrict__ out, int hk, int hv) {
  using LY = gdn_layout<DK, DV>;
  using SM = gdn_state_tc_smem<DK, DV, NC, NQ>;
  constexpr int NT = SM::NW * 32, WP = SM::WP, QP = SM::QP, KP = SM::KP, UP = SM::UP,
                VP = SM::VP, SP = SM::SP;
  constexpr int DKQ = DK / NQ, NJ = DKQ / 8;          /* a warp's dk slice and its n-tiles */
  constexpr int RQ = 2 * GDN_C / NQ, NR = RQ / 8;     /* a warp's rows of [W; Q], n-tiles */
  static_assert(NC % 16 == 0 && DKQ % 8 == 0 && GDN_C % RQ == 0, "walk tiling");
  extern __shared__ float4 smem4[];
  float *sm = (float *)smem4;
  float *wt = sm + SM::wt, *qs = sm + SM::qs, *ks0 = sm + SM::ks, *us = sm + SM::us;
  float *vt = sm + SM::vt, *ss = sm + SM::ss, *cf = sm + SM::cf;

  const int cb = blockIdx.x * NC, h = blockIdx.y, s = blockIdx.z, tid = threadIdx.x;
  const int ncr = min(NC, DV - cb); /* real columns of this block */
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int m0 = (warp / NQ) * 16, q = warp % NQ, dq0 = q * DKQ;
  const bool is_w = q * RQ < GDN_C;             /* rows of W (V') or of Q (output) */
  const int rb = (q * RQ) % GDN_C;              /* first row of the warp's slice in W or Q */
  const struct exc_gdn_seq sq = p.seqs[s];
  const int kh = h / (hv / hk);
  const int n_chunks = p.chunk_start[s + 1] - p.chunk_start[s];
  auto chunk_base = [&](int ci) {
    return scratch + ((size_t)(p.chunk_start[s] + ci) * hv + h) * LY::total;
  };
  /* Sᵀ fragment r of n-tile j: column m0 + g + 8(r/2), dk dq0 + 8j + 2t + r%2 */
  float st[NJ][4];
#pragma unroll
  for (int j = 0; j < NJ; j++)
#pragma unroll
    for (int r = 0; r < 4; r++) {
      const int col = m0 + g + 8 * (r >> 1), a = dq0 + 8 * j + 2 * t + (r & 1);
      st[j][r] = sq.state_in && col < ncr ? sq.state_in[((size_t)h * DK + a) * DV + cb + col]
                                          : 0.0f;
    }
  auto store_ss = [&]() {
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
      for (int rp = 0; rp < 2; rp++)
        *(float2 *)&ss[(m0 + g + 8 * rp) * SP + dq0 + 8 * j + 2 * t] =
            make_float2(st[j][2 * rp], st[j][2 * rp + 1]);
  };
  store_ss();

  auto load_k = [&](int ci) {
    float *ks = ks0 + (ci & 1) * GDN_C * KP;
    const int len = min(GDN_C, sq.n - ci * GDN_C);
    const size_t row0 = (size_t)sq.start + (size_t)ci * GDN_C;
    for (int idx = tid; idx < GDN_C * DK / 4; idx += NT) {
      int i = idx / (DK / 4), a4 = (idx % (DK / 4)) * 4;
      if (i < len)
        cp_async16(&ks[i * KP + a4], qkv + (row0 + i) * ld + (size_t)(hk + kh) * DK + a4);
      else
        *(float4 *)&ks[i * KP + a4] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  auto load_wq = [&](int ci) {
    const float *base = chunk_base(ci);
    const int len = min(GDN_C, sq.n - ci * GDN_C);
    const size_t row0 = (size_t)sq.start + (size_t)ci * GDN_C;
    for (int idx = tid; idx < DK * GDN_C / 4; idx += NT) {
      int a = idx / (GDN_C / 4), i4 = (idx % (GDN_C / 4)) * 4;
      cp_async16(&wt[a * WP + i4], base + LY::wt + a * GDN_C + i4);
    }
    for (int idx = tid; idx < GDN_C * DK / 4; idx += NT) {
      int i = idx / (DK / 4), a4 = (idx % (DK / 4)) * 4;
      if (i < len)
        cp_async16(&qs[i * QP + a4], qkv + (row0 + i) * ld + (size_t)kh * DK + a4);
      else
        *(float4 *)&qs[i * QP + a4] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  auto load_uc = [&](int ci) { /* U columns ≥ ncr as zeros */
    const float *base = chunk_base(ci);
    for (int idx = tid; idx < GDN_C * NC / 4; idx += NT) {
      int i = idx / (NC / 4), c4 = (idx % (NC / 4)) * 4;
      if (c4 < ncr)
        cp_async16(&us[i * UP + c4], base + LY::u + i * DV + cb + c4);
      else
        *(float4 *)&us[i * UP + c4] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    for (int idx = tid; idx < 3 * GDN_C / 4; idx += NT)
      cp_async16(&cf[idx * 4], base + LY::coef + idx * 4);
  };

  if (n_chunks > 0) {
    load_k(0);
    load_wq(0);
    load_uc(0);
    cp_async_commit();
  }
  for (int ci = 0; ci < n_chunks; ci++) {
    float *base = chunk_base(ci);
    const float *ks = ks0 + (ci & 1) * GDN_C * KP;
    const int len = min(GDN_C, sq.n - ci * GDN_C);
    const size_t row0 = (size_t)sq.start + (size_t)ci * GDN_C;
    cp_async_wait_all();
    __syncthreads(); /* chunk ci's inputs landed, ss holds S; the previous chunk is done with vt */
    if (ci + 1 < n_chunks) {
      load_k(ci + 1);
      cp_async_commit();
    }
    /* 1. P = Sᵀ[m-tile, dk]·[Wᵀ | Qᵀ][dk, rows rb … rb + RQ of W or Q] */
    float acc[NR][4];
#pragma unroll
    for (int n = 0; n < NR; n++)
#pragma unroll
      for (int r = 0; r < 4; r++)
        acc[n][r] = 0.0f;
#pragma unroll 4
    for (int kb = 0; kb < DK / 8; kb++) {
      const int a0 = 8 * kb + 2 * t; /* dk of slot t; slot t+4 is a0 + 1 */
      const float2 x0 = *(const float2 *)&ss[(m0 + g) * SP + a0];
      const float2 x1 = *(const float2 *)&ss[(m0 + g + 8) * SP + a0];
      const float af[4] = {x0.x, x1.x, x0.y, x1.y};
      uint32_t ah[4], al[4];
      tf32_split4(af, ah, al);
      if (is_w) {
#pragma unroll
        for (int n = 0; n < NR; n++)
          mma3_frag(acc[n], ah, al, wt[a0 * WP + rb + 8 * n + g],
                    wt[(a0 + 1) * WP + rb + 8 * n + g]);
      } else {
#pragma unroll
        for (int n = 0; n < NR; n++) {
          const float2 qv = *(const float2 *)&qs[(rb + 8 * n + g) * QP + a0];
          mma3_frag(acc[n], ah, al, qv.x, qv.y);
        }
      }
    }
    __syncthreads(); /* Wᵀ and Q free */
    if (ci + 1 < n_chunks) {
      load_wq(ci + 1);
      cp_async_commit();
    }
    if (is_w) { /* V' = U − W·S, V''ᵀ */
#pragma unroll
      for (int n = 0; n < NR; n++)
#pragma unroll
        for (int rp = 0; rp < 2; rp++) { /* rp: column g or g + 8 */
          const int col = m0 + g + 8 * rp, i = rb + 8 * n + 2 * t;
          const float v0 = us[i * UP + col] - acc[n][2 * rp];
          const float v1 = us[(i + 1) * UP + col] - acc[n][2 * rp + 1];
          *(float2 *)&vt[col * VP + i] = make_float2(cf[GDN_C + i] * v0, cf[GDN_C + i + 1] * v1);
          if (col < ncr) {
            base[LY::u + i * DV + cb + col] = v0;
            base[LY::u + (i + 1) * DV + cb + col] = v1;
          }
        }
    } else { /* e^{Γ} ⊙ (Q·S) */
#pragma unroll
      for (int n = 0; n < NR; n++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
          const int col = m0 + g + 8 * (r >> 1), i = rb + 8 * n + 2 * t + (r & 1);
          if (i < len && col < ncr)
            out[((row0 + i) * hv + h) * DV + cb + col] = cf[i] * acc[n][r];
        }
    }
    const float el = cf[2 * GDN_C];
    __syncthreads(); /* V''ᵀ complete; U and the coefficients free */
    if (ci + 1 < n_chunks) {
      load_uc(ci + 1);
      cp_async_commit();
    }
    /* 2. Sᵀ ← e^{ΓC}·Sᵀ + V''ᵀ[m-tile, 64]·K[64, dk slice] */
    float pr[NJ][4];
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
      for (int r = 0; r < 4; r++)
        pr[j][r] = 0.0f;
#pragma unroll 4
    for (int kb = 0; kb < GDN_C / 8; kb++) {
      const int i0 = 8 * kb + 2 * t; /* i of slot t; slot t+4 is i0 + 1 */
      const float2 v0 = *(const float2 *)&vt[(m0 + g) * VP + i0];
      const float2 v1 = *(const float2 *)&vt[(m0 + g + 8) * VP + i0];
      const float af[4] = {v0.x, v1.x, v0.y, v1.y};
      uint32_t ah[4], al[4];
      tf32_split4(af, ah, al);
#pragma unroll
      for (int j = 0; j < NJ; j++) {
        const int a = dq0 + 8 * j + g;
        mma3_frag(pr[j], ah, al, ks[i0 * KP + a], ks[(i0 + 1) * KP + a]);
      }
    }
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
      for (int r = 0; r < 4; r++)
        st[j][r] = el * st[j][r] + pr[j][r];
    store_ss(); /* read after the next chunk's first barrier */
  }
  if (sq.state_out) {
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
      for (int r = 0; r < 4; r++) {
        const int col = m0 + g + 8 * (r >> 1), a = dq0 + 8 * j + 2 * t + (r & 1);
        if (col < ncr)
          sq.state_out[((size_t)h * DK + a) * DV + cb + col] = st[j][r];
      }
  }
}

/* 3'. Output of `invf`: block (chunk, value head, column block of OC), 256 threads, 4×4 tiles:
 * out += A·V' on the rows < len that gdn_state_fused_kernel wrote. */
template <int OC> struct gdn_out_av_smem {
  static constexpr int TP = GDN_C + 4, CP = OC + 4;
  static constexpr int at = 0, vp = at + GDN_C * TP, total = vp + GDN_C * CP;
};

template <int DK, int DV, int OC>
__global__ __launch_bounds__(GDN_NT) static void gdn_out_av_kernel(
    const __grid_constant__ struct gdn_params p, const float *__restrict__ scratch,
    float *__restrict__ out, int hv) {
  using LY = gdn_layout<DK, DV>;
  using SM = gdn_out_av_smem<OC>;
  constexpr int TP = SM::TP, CP = SM::CP;
  extern __shared__ float4 smem4[];
  float *at = (float *)smem4 + SM::at, *vp = (float *)smem4 + SM::vp;
  int chunk = blockIdx.x, h = blockIdx.y, cb = blockIdx.z * OC, tid = threadIdx.x;
  int s = find_seq(p, chunk);
  const struct exc_gdn_seq sq = p.seqs[s];
  int c0 = (chunk - p.chunk_start[s]) * GDN_C;
  int len = min(GDN_C, sq.n - c0);
  size_t row0 = (size_t)sq.start + c0;
  const float *base = scratch + ((size_t)chunk * hv + h) * LY::total;
  for (int idx = tid; idx < GDN_C * GDN_C / 4; idx += GDN_NT) {
    int j = idx / (GDN_C / 4), i4 = (idx % (GDN_C / 4)) * 4;
    cp_async16(&at[j * TP + i4], base + LY::at + j * GDN_C + i4);
  }
  for (int idx = tid; idx < GDN_C * OC / 4; idx += GDN_NT) {
    int j = idx / (OC / 4), c4 = (idx % (OC / 4)) * 4;
    cp_async16(&vp[j * CP + c4], base + LY::u + j * DV + cb + c4);
  }
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();
  for (int tile = tid; tile < (GDN_C / 4) * (OC / 4); tile += GDN_NT) {
    int i4 = (tile / (OC / 4)) * 4, c4 = (tile % (OC / 4)) * 4;
    float acc[4][4];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
      for (int c = 0; c < 4; c++)
        acc[r][c] = 0.0f;
    for (int j = 0; j < i4 + 4; j++) {
      float4 av = *(const float4 *)&at[j * TP + i4];
      float4 vv = *(const float4 *)&vp[j * CP + c4];
      float avv[4] = {av.x, av.y, av.z, av.w}, vvv[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
      for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++)
          acc[r][c] += avv[r] * vvv[c];
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
      int i = i4 + r;
      if (i < len) {
        float4 *o = (float4 *)(out + ((row0 + i) * hv + h) * DV + cb + c4);
        float4 q = *o;
        *o = make_float4(q.x + acc[r][0], q.y + acc[r][1], q.z + acc[r][2], q.w + acc[r][3]);
      }
    }
  }
}

/* ---------------------------------------------------------------------------------------------
 * 3. Output kernel: block (chunk, value head, column block of OC), 256 threads, 4×4 tiles:
 * O = e^{Γ} ⊙ (Q·S_c) + A·V'. Qᵀ is transposed on the way into shared memory. */
template <int DK, int OC> struct gdn_out_smem {
  static constexpr int TP = GDN_C + 4, CP = OC + 4;
  static constexpr int qt = 0, sc = qt + DK * TP, at = sc + DK * CP, vp = at + GDN_C * TP,
                       eg = vp + GDN_C * CP, total = eg + GDN_C;
};

template <int DK, int DV, int OC>
__global__ __launch_bounds__(GDN_NT) static void gdn_out_kernel(
    const __grid_constant__ struct gdn_params p, const float *__restrict__ qkv, size_t ld,
    const float *__restrict__ scratch, float *__restrict__ out, int hk, int hv) {
  using LY = gdn_layout<DK, DV>;
  using SM = gdn_out_smem<DK, OC>;
  constexpr int TP = SM::TP, CP = SM::CP;
  extern __shared__ float4 smem4[];
  float *sm = (float *)smem4;
  float *qt = sm + SM::qt, *sc = sm + SM::sc, *at = sm + SM::at, *vp = sm + SM::vp;
  float *eg = sm + SM::eg;
  int chunk = blockIdx.x, h = blockIdx.y, cb = blockIdx.z * OC, tid = threadIdx.x;
  int s = find_seq(p, chunk);
  const struct exc_gdn_seq sq = p.seqs[s];
  int c0 = (chunk - p.chunk_start[s]) * GDN_C;
  int len = min(GDN_C, sq.n - c0);
  int kh = h / (hv / hk);
  size_t row0 = (size_t)sq.start + c0;
  const float *base = scratch + ((size_t)chunk * hv + h) * LY::total;

  for (int idx = tid; idx < DK * OC / 4; idx += GDN_NT) {
    int a = idx / (OC / 4), c4 = (idx % (OC / 4)) * 4;
    cp_async16(&sc[a * CP + c4], base + LY::hs + a * DV + cb + c4);
  }
  for (int idx = tid; idx < GDN_C * GDN_C / 4; idx += GDN_NT) {
    int j = idx / (GDN_C / 4), i4 = (idx % (GDN_C / 4)) * 4;
    cp_async16(&at[j * TP + i4], base + LY::at + j * GDN_C + i4);
  }
  for (int idx = tid; idx < GDN_C * OC / 4; idx += GDN_NT) {
    int j = idx / (OC / 4), c4 = (idx % (OC / 4)) * 4;
    cp_async16(&vp[j * CP + c4], base + LY::u + j * DV + cb + c4);
  }
  for (int idx = tid; idx < GDN_C / 4; idx += GDN_NT)
    cp_async16(&eg[idx * 4], base + LY::coef + idx * 4);
  cp_async_commit();
  /* Qᵀ: a warp takes 32 consecutive rows of one 4-column group, so the transposed stores are
   * conflict-free */
  for (int idx = tid; idx < GDN_C * DK / 4; idx += GDN_NT) {
    int i = idx % GDN_C, a4 = (idx / GDN_C) * 4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (i < len)
      v = *(const float4 *)(qkv + (row0 + i) * ld + (size_t)kh * DK + a4);
    qt[(a4 + 0) * TP + i] = v.x;
    qt[(a4 + 1) * TP + i] = v.y;
    qt[(a4 + 2) * TP + i] = v.z;
    qt[(a4 + 3) * TP + i] = v.w;
  }
  cp_async_wait_all();
  __syncthreads();
  for (int tile = tid; tile < (GDN_C / 4) * (OC / 4); tile += GDN_NT) {
    int i4 = (tile / (OC / 4)) * 4, c4 = (tile % (OC / 4)) * 4;
    float acc[4][4];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
      for (int c = 0; c < 4; c++)
        acc[r][c] = 0.0f;
#pragma unroll 8
    for (int a = 0; a < DK; a++) {
      float4 qv = *(const float4 *)&qt[a * TP + i4];
      float4 sv = *(const float4 *)&sc[a * CP + c4];
      float qvv[4] = {qv.x, qv.y, qv.z, qv.w}, svv[4] = {sv.x, sv.y, sv.z, sv.w};
#pragma unroll
      for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++)
          acc[r][c] += qvv[r] * svv[c];
    }
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
      for (int c = 0; c < 4; c++)
        acc[r][c] *= eg[i4 + r];
    for (int j = 0; j < i4 + 4; j++) {
      float4 av = *(const float4 *)&at[j * TP + i4];
      float4 vv = *(const float4 *)&vp[j * CP + c4];
      float avv[4] = {av.x, av.y, av.z, av.w}, vvv[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
      for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++)
          acc[r][c] += avv[r] * vvv[c];
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
      int i = i4 + r;
      if (i < len)
        *(float4 *)(out + ((row0 + i) * hv + h) * DV + cb + c4) =
            make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    }
  }
}

size_t exc_gdn_chunked_scratch_bytes(size_t total_tokens, int n_seqs,
                                     const struct ex_gdn_dims *dims) {
  size_t chunks = total_tokens / GDN_C + (size_t)n_seqs;
  return chunks * dims->n_v_heads * gdn_floats_per_chunk_head(dims->dk, dims->dv) * sizeof(float);
}

static int gdn_sm_count(void) {
  static int n_sm = 0; /* the device's; one device per process */
  if (n_sm == 0) {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      v = 132;
    n_sm = v;
  }
  return n_sm;
}

template <typename K> static int gdn_set_smem(K kernel, size_t bytes) {
  return EXC_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)bytes));
}

/* NCS: state column block for few blocks (one per SM), NCL: for many; OC: output column block.
 * KIND: enum exc_gdn_kernel (simt, invf, invt). */
template <int DK, int DV, int NCS, int NCL, int OC, int KIND>
static int gdn_launch(cudaStream_t stream, const struct gdn_params &p, int total_chunks,
                      const float *qkv, size_t ld, const float *beta, const float *g, float *out,
                      int hk, int hv, void *scratch) {
  constexpr bool INV = KIND != EXC_GDN_KERNEL_SIMT; /* intra per (chunk, key head), T blocked */
  constexpr bool TCW = KIND == EXC_GDN_KERNEL_INV_T; /* the walk on tensor cores */
  constexpr int NQ = DK >= 32 ? 4 : 2; /* invt: parts of dk and of [W; Q]'s rows per 16 columns */
  size_t intra_smem = INV ? (size_t)gdn_intra_inv_smem<DK, DV>::total * sizeof(float)
                          : (size_t)gdn_intra_smem<DK>::total * sizeof(float);
  size_t smem_s = (size_t)(TCW   ? gdn_state_tc_smem<DK, DV, NCS, NQ>::total
                           : INV ? gdn_state_fused_smem<DK, DV, NCS>::total
                                 : gdn_state_smem<DK, DV, NCS>::total) * sizeof(float);
  size_t smem_l = (size_t)(TCW   ? gdn_state_tc_smem<DK, DV, NCL, NQ>::total
                           : INV ? gdn_state_fused_smem<DK, DV, NCL>::total
                                 : gdn_state_smem<DK, DV, NCL>::total) * sizeof(float);
  size_t out_smem = (size_t)(INV ? gdn_out_av_smem<OC>::total : gdn_out_smem<DK, OC>::total) *
                    sizeof(float);
  static bool attr_done = false; /* per instantiation; the calls are idempotent */
  int rc = 0;
  if (!attr_done) {
    if constexpr (INV) {
      /* two intra blocks per SM need the whole shared-memory carveout */
      if ((rc = gdn_set_smem(gdn_intra_inv_kernel<DK, DV>, intra_smem)) ||
          (rc = EXC_CUDA(cudaFuncSetAttribute(gdn_intra_inv_kernel<DK, DV>,
                                              cudaFuncAttributePreferredSharedMemoryCarveout,
                                              (int)cudaSharedmemCarveoutMaxShared))) ||
          (rc = gdn_set_smem(gdn_out_av_kernel<DK, DV, OC>, out_smem)))
        return rc;
      if constexpr (TCW) {
        if ((rc = gdn_set_smem(gdn_state_tc_kernel<DK, DV, NCS, NQ>, smem_s)) ||
            (rc = gdn_set_smem(gdn_state_tc_kernel<DK, DV, NCL, NQ>, smem_l)))
          return rc;
      } else if ((rc = gdn_set_smem(gdn_state_fused_kernel<DK, DV, NCS>, smem_s)) ||
                 (rc = gdn_set_smem(gdn_state_fused_kernel<DK, DV, NCL>, smem_l)))
        return rc;
    } else if ((rc = gdn_set_smem(gdn_intra_kernel<DK, DV>, intra_smem)) ||
               (rc = gdn_set_smem(gdn_state_kernel<DK, DV, NCS>, smem_s)) ||
               (rc = gdn_set_smem(gdn_state_kernel<DK, DV, NCL>, smem_l)) ||
               (rc = gdn_set_smem(gdn_out_kernel<DK, DV, OC>, out_smem)))
      return rc;
    attr_done = true;
  }
  if constexpr (INV) {
    /* fewer (chunk, key head) blocks than SMs (short inputs): one block per value head instead,
     * each forming the key head's products itself */
    unsigned groups = (long)total_chunks * hk < gdn_sm_count() ? (unsigned)(hv / hk) : 1u;
    gdn_intra_inv_kernel<DK, DV><<<dim3((unsigned)total_chunks, (unsigned)hk, groups), GDN_NT,
                                   intra_smem, stream>>>(p, qkv, ld, beta, g, (float *)scratch,
                                                         hk, hv);
  } else
    gdn_intra_kernel<DK, DV><<<dim3((unsigned)total_chunks, (unsigned)hv), GDN_NT, intra_smem,
                               stream>>>(p, qkv, ld, beta, g, (float *)scratch, hk, hv);
  if ((rc = EXC_CUDA(cudaGetLastError())))
    return rc;
  constexpr unsigned nbs = (DV + NCS - 1) / NCS, nbl = (DV + NCL - 1) / NCL;
  const bool few = (long)hv * nbs * p.n_seqs <= gdn_sm_count();
  const dim3 grid_s(nbs, (unsigned)hv, (unsigned)p.n_seqs);
  const dim3 grid_l(nbl, (unsigned)hv, (unsigned)p.n_seqs);
  const dim3 grid_o((unsigned)total_chunks, (unsigned)hv, DV / OC);
  if constexpr (TCW) {
    if (few)
      gdn_state_tc_kernel<DK, DV, NCS, NQ><<<grid_s, NCS / 16 * NQ * 32, smem_s, stream>>>(
          p, qkv, ld, (float *)scratch, out, hk, hv);
    else
      gdn_state_tc_kernel<DK, DV, NCL, NQ><<<grid_l, NCL / 16 * NQ * 32, smem_l, stream>>>(
          p, qkv, ld, (float *)scratch, out, hk, hv);
  } else if constexpr (INV) {
    if (few)
      gdn_state_fused_kernel<DK, DV, NCS><<<grid_s, NCS * 8, smem_s, stream>>>(
          p, qkv, ld, (float *)scratch, out, hk, hv);
    else
      gdn_state_fused_kernel<DK, DV, NCL><<<grid_l, NCL * 8, smem_l, stream>>>(
          p, qkv, ld, (float *)scratch, out, hk, hv);
  } else {
    if (few)
      gdn_state_kernel<DK, DV, NCS><<<grid_s, NCS * 4, smem_s, stream>>>(
          p, qkv, ld, (float *)scratch, hk, hv);
    else
      gdn_state_kernel<DK, DV, NCL><<<grid_l, NCL * 4, smem_l, stream>>>(
          p, qkv, ld, (float *)scratch, hk, hv);
  }
  if ((rc = EXC_CUDA(cudaGetLastError())))
    return rc;
  if constexpr (INV)
    gdn_out_av_kernel<DK, DV, OC><<<grid_o, GDN_NT, out_smem, stream>>>(
        p, (const float *)scratch, out, hv);
  else
    gdn_out_kernel<DK, DV, OC><<<grid_o, GDN_NT, out_smem, stream>>>(
        p, qkv, ld, (const float *)scratch, out, hk, hv);
  return EXC_CUDA(cudaGetLastError());
}

extern "C" int exc_gdn_chunked(cudaStream_t stream, const float *qkv, size_t ld_qkv,
                               const float *beta, const float *g, float *out,
                               const struct exc_gdn_seq *seqs, int n_seqs,
                               const struct ex_gdn_dims *dims, void *scratch) {
  if (n_seqs < 1 || n_seqs > EXC_MAX_SEQS || !dims || dims->n_k_heads == 0 ||
      dims->n_v_heads % dims->n_k_heads != 0)
    return -EINVAL;
  /* 16-byte copies of q/k rows: the row pitch and bases must keep float4 alignment */
  if (ld_qkv % 4 != 0 || ((uintptr_t)qkv & 15) != 0 || ((uintptr_t)scratch & 15) != 0 ||
      ((uintptr_t)out & 15) != 0)
    return -EINVAL;
  struct gdn_params p; /* 7.2 KB, copied into the launch */
  memset(&p, 0, sizeof p);
  int total_chunks = 0;
  for (int i = 0; i < n_seqs; i++) {
    if (seqs[i].n < 1 || seqs[i].start < 0)
      return -EINVAL;
    p.seqs[i] = seqs[i];
    p.chunk_start[i] = total_chunks;
    total_chunks += (seqs[i].n + GDN_C - 1) / GDN_C;
  }
  p.chunk_start[n_seqs] = total_chunks;
  p.n_seqs = n_seqs;
  int hk = (int)dims->n_k_heads, hv = (int)dims->n_v_heads;
  enum exc_gdn_kernel kind = exc_gdn_kernel_get();
#define GDN_LAUNCH(DK, DV, NCS, NCL, OC, KIND)                                                     \
  gdn_launch<DK, DV, NCS, NCL, OC, KIND>(stream, p, total_chunks, qkv, ld_qkv, beta, g, out, hk,  \
                                         hv, scratch)
  /* invt: 16-column tiles, so dv = 24 takes one 32-column block with 8 zero columns */
  if (dims->dk == 128 && dims->dv == 128)
    return kind == EXC_GDN_KERNEL_INV_T   ? GDN_LAUNCH(128, 128, 32, 64, 64, EXC_GDN_KERNEL_INV_T)
           : kind == EXC_GDN_KERNEL_INV_F ? GDN_LAUNCH(128, 128, 32, 64, 64, EXC_GDN_KERNEL_INV_F)
                                          : GDN_LAUNCH(128, 128, 32, 64, 64, EXC_GDN_KERNEL_SIMT);
  if (dims->dk == 16 && dims->dv == 24)
    return kind == EXC_GDN_KERNEL_INV_T   ? GDN_LAUNCH(16, 24, 32, 32, 24, EXC_GDN_KERNEL_INV_T)
           : kind == EXC_GDN_KERNEL_INV_F ? GDN_LAUNCH(16, 24, 24, 24, 24, EXC_GDN_KERNEL_INV_F)
                                          : GDN_LAUNCH(16, 24, 24, 24, 24, EXC_GDN_KERNEL_SIMT);
#undef GDN_LAUNCH
  return -EINVAL;
}

/* -1 until chosen: by exc_gdn_kernel_set, else from S1_GDN_KERNEL on first use (default invf) */
static int gdn_kernel_choice = -1;

extern "C" void exc_gdn_kernel_set(enum exc_gdn_kernel k) {
  int v = (int)k;
  gdn_kernel_choice = (v >= 0 && v < (int)EXC_GDN_KERNEL_COUNT) ? v : (int)EXC_GDN_KERNEL_INV_F;
}

extern "C" enum exc_gdn_kernel exc_gdn_kernel_get(void) {
  if (gdn_kernel_choice < 0) {
    const char *env = getenv("S1_GDN_KERNEL");
    gdn_kernel_choice = !env                      ? EXC_GDN_KERNEL_INV_F
                        : strcmp(env, "simt") == 0 ? EXC_GDN_KERNEL_SIMT
                        : strcmp(env, "invt") == 0 ? EXC_GDN_KERNEL_INV_T
                                                   : EXC_GDN_KERNEL_INV_F;
  }
  return (enum exc_gdn_kernel)gdn_kernel_choice;
}
