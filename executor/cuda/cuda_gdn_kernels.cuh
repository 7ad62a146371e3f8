/* The pieces of the chunked Gated DeltaNet rule (cuda_gdn.cu) that its experimental variants
 * (tests/cuda/gdn_variants.cu, built only for the twin test and the kernel benchmark) reuse: the
 * launch parameters, the scratch layout, the copy helpers, the intra-chunk kernel (1'.) and the
 * A·V' output kernel (3'.) of the default path. Internal to executor/cuda: not an interface. */
#ifndef S1_EX_CUDA_GDN_KERNELS_CUH
#define S1_EX_CUDA_GDN_KERNELS_CUH

#include <errno.h>
#include <stdint.h>
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

static inline size_t gdn_floats_per_chunk_head(size_t dk, size_t dv) {
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

/* Checks a launch's arguments as exc_gdn_chunked documents them and fills p (the sequences and
 * the prefix sum of their chunks). Returns 0 with *ret_total_chunks set, or -EINVAL. */
static inline int gdn_params_fill(struct gdn_params *p, const float *qkv, size_t ld_qkv,
                                  const float *out, const struct exc_gdn_seq *seqs, int n_seqs,
                                  const struct ex_gdn_dims *dims, const void *scratch,
                                  int *ret_total_chunks) {
  if (n_seqs < 1 || n_seqs > EXC_MAX_SEQS || !dims || dims->n_k_heads == 0 ||
      dims->n_v_heads % dims->n_k_heads != 0)
    return -EINVAL;
  /* 16-byte copies of q/k rows: the row pitch and bases must keep float4 alignment */
  if (ld_qkv % 4 != 0 || ((uintptr_t)qkv & 15) != 0 || ((uintptr_t)scratch & 15) != 0 ||
      ((uintptr_t)out & 15) != 0)
    return -EINVAL;
  memset(p, 0, sizeof *p);
  int total_chunks = 0;
  for (int i = 0; i < n_seqs; i++) {
    if (seqs[i].n < 1 || seqs[i].start < 0)
      return -EINVAL;
    p->seqs[i] = seqs[i];
    p->chunk_start[i] = total_chunks;
    total_chunks += (seqs[i].n + GDN_C - 1) / GDN_C;
  }
  p->chunk_start[n_seqs] = total_chunks;
  p->n_seqs = n_seqs;
  *ret_total_chunks = total_chunks;
  return 0;
}

static inline int gdn_sm_count(void) {
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

#endif
