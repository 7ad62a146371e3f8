/* Gated causal GQA attention on CUDA (see cuda_attention.h): a flash-style kernel with bf16
 * tensor-core mma (m16n8k16, fp32 accumulation) and an fp32 online softmax, never materialising
 * the score matrix. A block of 4 warps takes 64 "packed" query rows of one kv head, row r being
 * (token r / G, query head r % G of the group), so the K/V tiles it loads serve all G heads.
 * Keys stream in tiles of 64 from absolute key 0 (prefix first), so the reduction order does not
 * depend on where a prefix ended; tiles past the block's last visible key are skipped.
 * As sdpa's flash path: P rounded to bf16 before P·V, one rounding of o; then the gate as the
 * reference: out = R(R(o) · R(sigmoid(gate))). Leaves out: dropout, non-causal masks. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cm_error.h"
#include "cuda_attention.h"
#include "cuda_check.h"

#define ATT_BN 64 /* keys per tile; a block has BM/16 warps of 16 packed query rows each */

struct attn_params {
  struct exc_attn_seq seqs[EXC_MAX_SEQS]; /* host copy */
  int32_t tile_start[EXC_MAX_SEQS + 1];   /* prefix sum of ⌈n_q·G / BM⌉ */
  int32_t n_seqs;
  int32_t n_heads;
  int32_t n_kv;
  int32_t group;     /* n_heads / n_kv */
  float scale_log2;  /* scale · log2(e) */
};

__device__ __forceinline__ static void cp_async16_zfill(void *smem, const void *gmem, bool valid) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ static void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
__device__ __forceinline__ static void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
__device__ __forceinline__ static void ldsm_x4(unsigned &r0, unsigned &r1, unsigned &r2,
                                               unsigned &r3, const void *p) {
  unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(s));
}
__device__ __forceinline__ static void ldsm_x4_t(unsigned &r0, unsigned &r1, unsigned &r2,
                                                 unsigned &r3, const void *p) {
  unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(s));
}
__device__ __forceinline__ static void mma_bf16(float *c, unsigned a0, unsigned a1, unsigned a2,
                                                unsigned a3, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ static unsigned pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *(unsigned *)&v;
}

__device__ static int find_seq(const struct attn_params &p, int tile) {
  int lo = 0, hi = p.n_seqs - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (p.tile_start[mid] <= tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

template <int D, int ATT_BM>
__global__ __launch_bounds__(ATT_BM * 2, 128 / ATT_BM) static void attn_kernel(
    const __grid_constant__ struct attn_params p, const __nv_bfloat16 *__restrict__ q,
    const __nv_bfloat16 *__restrict__ gate, __nv_bfloat16 *__restrict__ out) {
  constexpr int P = D + 8; /* smem row pitch in elements: 16 bytes of padding, no ldmatrix conflicts */
  constexpr int CH = D / 8; /* 16-byte chunks per row */
  extern __shared__ float4 smem4[];
  __nv_bfloat16 *qs = (__nv_bfloat16 *)smem4;
  __nv_bfloat16 *ks = qs + ATT_BM * P;
  __nv_bfloat16 *vs = ks + ATT_BN * P;

  int total_tiles = p.tile_start[p.n_seqs];
  int tile = total_tiles - 1 - (int)blockIdx.x; /* late tiles (most keys) first */
  int kvh = blockIdx.y;
  int s = find_seq(p, tile);
  const struct exc_attn_seq sq = p.seqs[s];
  const int G = p.group, H = p.n_heads, NKV = p.n_kv;
  int r0 = (tile - p.tile_start[s]) * ATT_BM;
  int t_hi = min((r0 + ATT_BM - 1) / G, sq.n_q - 1);
  int t_lo = r0 / G;
  int n_keys = sq.n_prefix + t_hi + 1;
  int n_kt = (n_keys + ATT_BN - 1) / ATT_BN;
  constexpr int ATT_NT = ATT_BM * 2;
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

  /* Q tile: packed rows */
  for (int idx = tid; idx < ATT_BM * CH; idx += ATT_NT) {
    int lr = idx / CH, ch = idx % CH;
    int r = r0 + lr, t = r / G, hq = kvh * G + r % G;
    bool ok = t < sq.n_q;
    const __nv_bfloat16 *src = ok ? q + ((size_t)(sq.q_start + t) * H + hq) * D + ch * 8 : q;
    cp_async16_zfill(qs + lr * P + ch * 8, src, ok);
  }
  auto load_kv = [&](__nv_bfloat16 *dst, const __nv_bfloat16 *pre, const __nv_bfloat16 *nw,
                     int kt) {
    for (int idx = tid; idx < ATT_BN * CH; idx += ATT_NT) {
      int lr = idx / CH, ch = idx % CH;
      int key = kt * ATT_BN + lr;
      const __nv_bfloat16 *src = q;
      bool ok = true;
      if (key < sq.n_prefix)
        src = pre + ((size_t)key * NKV + kvh) * D + ch * 8;
      else if (key < n_keys)
        src = nw + ((size_t)(key - sq.n_prefix) * NKV + kvh) * D + ch * 8;
      else
        ok = false;
      cp_async16_zfill(dst + lr * P + ch * 8, src, ok);
    }
    cp_async_commit();
  };
  load_kv(ks, sq.k_prefix, sq.k_new, 0);

  /* per thread: rows g and g+8 of the warp's 16 */
  const int g = lane >> 2, tig = lane & 3;
  int lr0 = warp * 16 + g, lr1 = lr0 + 8;
  int tok0 = (r0 + lr0) / G, tok1 = (r0 + lr1) / G;
  /* the last visible key per row; padded rows see what the block's last token sees */
  int lim0 = sq.n_prefix + min(tok0, sq.n_q - 1), lim1 = sq.n_prefix + min(tok1, sq.n_q - 1);
  int lim_lo = sq.n_prefix + t_lo; /* tiles wholly ≤ this need no mask */

  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++)
    o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

  /* ldmatrix lane addresses */
  const int a_row = (lane & 7) + ((lane >> 3) & 1) * 8, a_col = (lane >> 4) * 8; /* Q: A operand */
  const int b_row = (lane & 7) + (lane >> 4) * 8, b_col = ((lane >> 3) & 1) * 8;  /* K: B, 2 n-tiles */
  const int v_row = (lane & 7) + ((lane >> 3) & 1) * 8, v_col = (lane >> 4) * 8; /* V: B trans */

  for (int kt = 0; kt < n_kt; kt++) {
    cp_async_wait_all();
    __syncthreads();
    load_kv(vs, sq.v_prefix, sq.v_new, kt);

    float sc[ATT_BN / 8][4];
#pragma unroll
    for (int n = 0; n < ATT_BN / 8; n++)
      sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
      unsigned a0, a1, a2, a3;
      ldsm_x4(a0, a1, a2, a3, qs + (warp * 16 + a_row) * P + kk * 16 + a_col);
#pragma unroll
      for (int np = 0; np < ATT_BN / 16; np++) {
        unsigned b0, b1, b2, b3;
        ldsm_x4(b0, b1, b2, b3, ks + (np * 16 + b_row) * P + kk * 16 + b_col);
        mma_bf16(sc[2 * np], a0, a1, a2, a3, b0, b1);
        mma_bf16(sc[2 * np + 1], a0, a1, a2, a3, b2, b3);
      }
    }
    /* scale, mask, online softmax (rows g: elements 0,1; row g+8: elements 2,3) */
    int kb = kt * ATT_BN;
    bool need_mask = kb + ATT_BN - 1 > lim_lo;
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int n = 0; n < ATT_BN / 8; n++) {
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int key = kb + n * 8 + 2 * tig + (e & 1);
        float v = sc[n][e] * p.scale_log2;
        if (need_mask && key > ((e < 2) ? lim0 : lim1))
          v = -INFINITY;
        sc[n][e] = v;
      }
      mx0 = fmaxf(mx0, fmaxf(sc[n][0], sc[n][1]));
      mx1 = fmaxf(mx1, fmaxf(sc[n][2], sc[n][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    float al0 = exp2f(m0 - mx0), al1 = exp2f(m1 - mx1);
    m0 = mx0;
    m1 = mx1;
    l0 *= al0;
    l1 *= al1;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      o[n][0] *= al0;
      o[n][1] *= al0;
      o[n][2] *= al1;
      o[n][3] *= al1;
    }
    unsigned pa[ATT_BN / 16][4];
#pragma unroll
    for (int n = 0; n < ATT_BN / 8; n++) {
      float p0 = exp2f(sc[n][0] - m0), p1 = exp2f(sc[n][1] - m0);
      float p2 = exp2f(sc[n][2] - m1), p3 = exp2f(sc[n][3] - m1);
      l0 += p0 + p1;
      l1 += p2 + p3;
      pa[n / 2][(n & 1) * 2 + 0] = pack_bf16(p0, p1);
      pa[n / 2][(n & 1) * 2 + 1] = pack_bf16(p2, p3);
    }
    cp_async_wait_all();
    __syncthreads();
    if (kt + 1 < n_kt)
      load_kv(ks, sq.k_prefix, sq.k_new, kt + 1);
#pragma unroll
    for (int kk = 0; kk < ATT_BN / 16; kk++) {
#pragma unroll
      for (int dp = 0; dp < D / 16; dp++) {
        unsigned b0, b1, b2, b3;
        ldsm_x4_t(b0, b1, b2, b3, vs + (kk * 16 + v_row) * P + dp * 16 + v_col);
        mma_bf16(o[2 * dp], pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3], b0, b1);
        mma_bf16(o[2 * dp + 1], pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3], b2, b3);
      }
    }
  }

  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
#pragma unroll
  for (int half = 0; half < 2; half++) {
    int lr = half ? lr1 : lr0;
    int r = r0 + lr, t = r / G, hq = kvh * G + r % G;
    if (t >= sq.n_q)
      continue;
    float inv = half ? inv1 : inv0;
    size_t row = (size_t)(sq.q_start + t) * H + hq;
    const __nv_bfloat16 *gp = gate + row * D;
    __nv_bfloat16 *op = out + row * D;
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      int d = n * 8 + 2 * tig;
      __nv_bfloat162 gv = *(const __nv_bfloat162 *)(gp + d);
      float2 gf = __bfloat1622float2(gv);
      float sg0 = __bfloat162float(__float2bfloat16_rn(1.0f / (1.0f + expf(-gf.x))));
      float sg1 = __bfloat162float(__float2bfloat16_rn(1.0f / (1.0f + expf(-gf.y))));
      float v0 = __bfloat162float(__float2bfloat16_rn(o[n][half * 2 + 0] * inv));
      float v1 = __bfloat162float(__float2bfloat16_rn(o[n][half * 2 + 1] * inv));
      *(__nv_bfloat162 *)(op + d) = __floats2bfloat162_rn(v0 * sg0, v1 * sg1);
    }
  }
}

template <int D, int BM>
static int attn_launch(cudaStream_t stream, struct attn_params &p, int n_kv,
                       const __nv_bfloat16 *q, const __nv_bfloat16 *gate, __nv_bfloat16 *out) {
  size_t smem = (size_t)(BM + 2 * ATT_BN) * (D + 8) * sizeof(__nv_bfloat16);
  static bool attr_done = false; /* idempotent; a race only repeats the call */
  if (!attr_done) {
    int rc = EXC_CUDA(cudaFuncSetAttribute(attn_kernel<D, BM>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    if (rc)
      return rc;
    attr_done = true;
  }
  int tiles = 0;
  for (int i = 0; i < p.n_seqs; i++) {
    p.tile_start[i] = tiles;
    tiles += (int)(((int64_t)p.seqs[i].n_q * p.group + BM - 1) / BM);
  }
  p.tile_start[p.n_seqs] = tiles;
  attn_kernel<D, BM><<<dim3((unsigned)tiles, (unsigned)n_kv), BM * 2, smem, stream>>>(p, q, gate,
                                                                                     out);
  return EXC_CUDA(cudaGetLastError());
}

/* 128 packed rows per block halve the K/V tile traffic per FLOP (the kernel is bound by L2 →
 * shared memory at 64); 64 keeps more blocks in flight when there are few rows. */
template <int D>
static int attn_dispatch(cudaStream_t stream, struct attn_params &p, int n_kv, int64_t rows,
                         const __nv_bfloat16 *q, const __nv_bfloat16 *gate, __nv_bfloat16 *out) {
  const char *force = getenv("S1_ATTN_BM"); /* benchmark override: 64 or 128 */
  int bm = force ? atoi(force) : (rows / 128 * n_kv >= 264 ? 128 : 64);
  if (bm == 128)
    return attn_launch<D, 128>(stream, p, n_kv, q, gate, out);
  return attn_launch<D, 64>(stream, p, n_kv, q, gate, out);
}

extern "C" int exc_attention_gated(cudaStream_t stream, const __nv_bfloat16 *q,
                                   const __nv_bfloat16 *gate, __nv_bfloat16 *out,
                                   const struct exc_attn_seq *seqs, int n_seqs, int n_heads,
                                   int n_kv, int head_dim, float scale) {
  if (n_seqs < 1 || n_seqs > EXC_MAX_SEQS || n_kv < 1 || n_heads < n_kv || n_heads % n_kv != 0)
    return -EINVAL;
  struct attn_params p; /* 13 KB, copied into the launch */
  memset(&p, 0, sizeof p);
  int group = n_heads / n_kv;
  int64_t rows = 0;
  for (int i = 0; i < n_seqs; i++) {
    const struct exc_attn_seq *sq = &seqs[i];
    if (sq->n_q < 1 || sq->n_prefix < 0 || sq->q_start < 0 || !sq->k_new || !sq->v_new ||
        (sq->n_prefix > 0 && (!sq->k_prefix || !sq->v_prefix)))
      return -EINVAL;
    p.seqs[i] = *sq;
    rows += (int64_t)sq->n_q * group;
  }
  p.n_seqs = n_seqs;
  p.n_heads = n_heads;
  p.n_kv = n_kv;
  p.group = group;
  p.scale_log2 = scale * 1.4426950408889634f;
  switch (head_dim) {
  case 64:
    return attn_dispatch<64>(stream, p, n_kv, rows, q, gate, out);
  case 128:
    return attn_dispatch<128>(stream, p, n_kv, rows, q, gate, out);
  case 256:
    return attn_dispatch<256>(stream, p, n_kv, rows, q, gate, out);
  default:
    return -EINVAL;
  }
}
