/* The Gated DeltaNet chunked implementations that are not the engine's (cuda_gdn.cu runs `invf`),
 * kept to be measured against it: built only into the twin test (test_cuda_gdn) and the kernel
 * benchmark (bench_cuda_kernels). `simt`, the first implementation: three launches,
 * 1. intra: every (chunk, value head) in parallel: Γ, L = β(KKᵀ)⊙D, A = (QKᵀ)⊙D and the
 *    unit-triangular solves for U and W, per column;
 * 2. state: one block per (sequence, value head, column block of the state) walks its chunks in
 *    order with its [dk, nc] slice of S: it keeps S at each chunk start, V' = U − W·S and
 *    S ← e^{ΓC}S + Kᵀ(e^{ΓC−Γ}⊙V');
 * 3. output: every (chunk, value head, column half) in parallel: O = e^{Γ}⊙(Q·S_c) + A·V';
 * in fp32 FMAs (4×4 / 8×4 register tiles). `invt`: invf's intra (1'.) and A·V' (3'.) launches
 * around a walk that forms its products on tensor cores in 3xTF32 (x = hi + lo,
 * lo·hi + hi·lo + hi·hi with fp32 accumulation, ≈ fp32 accuracy; plain TF32 would cost ~3e-4
 * relative, over the 1e-4 budget) with S in registers (2''.). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_gdn_kernels.cuh"
#include "gdn_variants.h"


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

/* NCS: state column block for few blocks (one per SM), NCL: for many; OC: output column block.
 * TCW: false for simt (kernels 1., 2., 3.), true for invt (1'., 2''., 3'.). */
template <int DK, int DV, int NCS, int NCL, int OC, bool TCW>
static int gdn_launch(cudaStream_t stream, const struct gdn_params &p, int total_chunks,
                      const float *qkv, size_t ld, const float *beta, const float *g, float *out,
                      int hk, int hv, void *scratch) {
  constexpr int NQ = DK >= 32 ? 4 : 2; /* invt: parts of dk and of [W; Q]'s rows per 16 columns */
  size_t intra_smem = TCW ? (size_t)gdn_intra_inv_smem<DK, DV>::total * sizeof(float)
                          : (size_t)gdn_intra_smem<DK>::total * sizeof(float);
  size_t smem_s = (size_t)(TCW ? gdn_state_tc_smem<DK, DV, NCS, NQ>::total
                               : gdn_state_smem<DK, DV, NCS>::total) * sizeof(float);
  size_t smem_l = (size_t)(TCW ? gdn_state_tc_smem<DK, DV, NCL, NQ>::total
                               : gdn_state_smem<DK, DV, NCL>::total) * sizeof(float);
  size_t out_smem = (size_t)(TCW ? gdn_out_av_smem<OC>::total : gdn_out_smem<DK, OC>::total) *
                    sizeof(float);
  static bool attr_done = false; /* per instantiation; the calls are idempotent */
  int rc = 0;
  if (!attr_done) {
    if constexpr (TCW) {
      /* two intra blocks per SM need the whole shared-memory carveout */
      if ((rc = gdn_set_smem(gdn_intra_inv_kernel<DK, DV>, intra_smem)) ||
          (rc = EXC_CUDA(cudaFuncSetAttribute(gdn_intra_inv_kernel<DK, DV>,
                                              cudaFuncAttributePreferredSharedMemoryCarveout,
                                              (int)cudaSharedmemCarveoutMaxShared))) ||
          (rc = gdn_set_smem(gdn_out_av_kernel<DK, DV, OC>, out_smem)) ||
          (rc = gdn_set_smem(gdn_state_tc_kernel<DK, DV, NCS, NQ>, smem_s)) ||
          (rc = gdn_set_smem(gdn_state_tc_kernel<DK, DV, NCL, NQ>, smem_l)))
        return rc;
    } else if ((rc = gdn_set_smem(gdn_intra_kernel<DK, DV>, intra_smem)) ||
               (rc = gdn_set_smem(gdn_state_kernel<DK, DV, NCS>, smem_s)) ||
               (rc = gdn_set_smem(gdn_state_kernel<DK, DV, NCL>, smem_l)) ||
               (rc = gdn_set_smem(gdn_out_kernel<DK, DV, OC>, out_smem)))
      return rc;
    attr_done = true;
  }
  if constexpr (TCW) {
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
  if constexpr (TCW)
    gdn_out_av_kernel<DK, DV, OC><<<grid_o, GDN_NT, out_smem, stream>>>(
        p, (const float *)scratch, out, hv);
  else
    gdn_out_kernel<DK, DV, OC><<<grid_o, GDN_NT, out_smem, stream>>>(
        p, qkv, ld, (const float *)scratch, out, hk, hv);
  return EXC_CUDA(cudaGetLastError());
}

extern "C" int gdn_simt_chunked(cudaStream_t stream, const float *qkv, size_t ld_qkv,
                                const float *beta, const float *g, float *out,
                                const struct exc_gdn_seq *seqs, int n_seqs,
                                const struct ex_gdn_dims *dims, void *scratch) {
  struct gdn_params p;
  int total_chunks = 0;
  int rc = gdn_params_fill(&p, qkv, ld_qkv, out, seqs, n_seqs, dims, scratch, &total_chunks);
  if (rc)
    return rc;
  int hk = (int)dims->n_k_heads, hv = (int)dims->n_v_heads;
  if (dims->dk == 128 && dims->dv == 128)
    return gdn_launch<128, 128, 32, 64, 64, false>(stream, p, total_chunks, qkv, ld_qkv, beta, g,
                                                   out, hk, hv, scratch);
  if (dims->dk == 16 && dims->dv == 24)
    return gdn_launch<16, 24, 24, 24, 24, false>(stream, p, total_chunks, qkv, ld_qkv, beta, g,
                                                 out, hk, hv, scratch);
  return -EINVAL;
}

extern "C" int gdn_invt_chunked(cudaStream_t stream, const float *qkv, size_t ld_qkv,
                                const float *beta, const float *g, float *out,
                                const struct exc_gdn_seq *seqs, int n_seqs,
                                const struct ex_gdn_dims *dims, void *scratch) {
  struct gdn_params p;
  int total_chunks = 0;
  int rc = gdn_params_fill(&p, qkv, ld_qkv, out, seqs, n_seqs, dims, scratch, &total_chunks);
  if (rc)
    return rc;
  int hk = (int)dims->n_k_heads, hv = (int)dims->n_v_heads;
  /* 16-column tiles, so dv = 24 takes one 32-column block with 8 zero columns */
  if (dims->dk == 128 && dims->dv == 128)
    return gdn_launch<128, 128, 32, 64, 64, true>(stream, p, total_chunks, qkv, ld_qkv, beta, g,
                                                  out, hk, hv, scratch);
  if (dims->dk == 16 && dims->dv == 24)
    return gdn_launch<16, 24, 32, 32, 24, true>(stream, p, total_chunks, qkv, ld_qkv, beta, g,
                                                out, hk, hv, scratch);
  return -EINVAL;
}
