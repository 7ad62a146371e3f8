/* Gated DeltaNet core on CUDA (see cuda_gdn.h): the one implementation the engine runs. The
 * chunked rule runs in three launches (fp32 SIMT):
 * 1'. intra: one block per (chunk, key head) forms KKᵀ and QKᵀ once for the Hv/Hk value heads that
 *    share them, then per value head Γ, L = β(KKᵀ)⊙D, A = (QKᵀ)⊙D, T = (I + L)⁻¹ by 16×16 blocks
 *    and U = T·(β⊙V), W = T·(βe^Γ⊙K) as triangular products (the state-free part);
 * 2'. state: one block per (sequence, value head, column block of the state) walks its chunks in
 *    order with its [dk, nc] slice of S: V' = U − W·S, the output's e^{Γ}⊙(Q·S), then
 *    S ← e^{ΓC}S + Kᵀ(e^{ΓC−Γ}⊙V') — the only sequential work;
 * 3'. output: every (chunk, value head, column block) in parallel adds A·V'.
 * Kernels 1'. and 3'. are in cuda_gdn_kernels.cuh (shared with the variants measured against this
 * one, tests/cuda/gdn_variants.cu: `simt`, the first implementation, and `invt`, this one with the
 * walk on tensor cores; notes/cuda-kernels.md has their history and timings). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_gdn_kernels.cuh"

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

size_t exc_gdn_chunked_scratch_bytes(size_t total_tokens, int n_seqs,
                                     const struct ex_gdn_dims *dims) {
  size_t chunks = total_tokens / GDN_C + (size_t)n_seqs;
  return chunks * dims->n_v_heads * gdn_floats_per_chunk_head(dims->dk, dims->dv) * sizeof(float);
}

/* NCS: state column block for few blocks (one per SM), NCL: for many; OC: output column block. */
template <int DK, int DV, int NCS, int NCL, int OC>
static int gdn_launch(cudaStream_t stream, const struct gdn_params &p, int total_chunks,
                      const float *qkv, size_t ld, const float *beta, const float *g, float *out,
                      int hk, int hv, void *scratch) {
  size_t intra_smem = (size_t)gdn_intra_inv_smem<DK, DV>::total * sizeof(float);
  size_t smem_s = (size_t)gdn_state_fused_smem<DK, DV, NCS>::total * sizeof(float);
  size_t smem_l = (size_t)gdn_state_fused_smem<DK, DV, NCL>::total * sizeof(float);
  size_t out_smem = (size_t)gdn_out_av_smem<OC>::total * sizeof(float);
  static bool attr_done = false; /* per instantiation; the calls are idempotent */
  int rc = 0;
  if (!attr_done) {
    /* two intra blocks per SM need the whole shared-memory carveout */
    if ((rc = gdn_set_smem(gdn_intra_inv_kernel<DK, DV>, intra_smem)) ||
        (rc = EXC_CUDA(cudaFuncSetAttribute(gdn_intra_inv_kernel<DK, DV>,
                                            cudaFuncAttributePreferredSharedMemoryCarveout,
                                            (int)cudaSharedmemCarveoutMaxShared))) ||
        (rc = gdn_set_smem(gdn_out_av_kernel<DK, DV, OC>, out_smem)) ||
        (rc = gdn_set_smem(gdn_state_fused_kernel<DK, DV, NCS>, smem_s)) ||
        (rc = gdn_set_smem(gdn_state_fused_kernel<DK, DV, NCL>, smem_l)))
      return rc;
    attr_done = true;
  }
  /* fewer (chunk, key head) blocks than SMs (short inputs): one block per value head instead,
   * each forming the key head's products itself */
  unsigned groups = (long)total_chunks * hk < gdn_sm_count() ? (unsigned)(hv / hk) : 1u;
  gdn_intra_inv_kernel<DK, DV><<<dim3((unsigned)total_chunks, (unsigned)hk, groups), GDN_NT,
                                 intra_smem, stream>>>(p, qkv, ld, beta, g, (float *)scratch, hk,
                                                       hv);
  if ((rc = EXC_CUDA(cudaGetLastError())))
    return rc;
  constexpr unsigned nbs = (DV + NCS - 1) / NCS, nbl = (DV + NCL - 1) / NCL;
  const bool few = (long)hv * nbs * p.n_seqs <= gdn_sm_count();
  const dim3 grid_s(nbs, (unsigned)hv, (unsigned)p.n_seqs);
  const dim3 grid_l(nbl, (unsigned)hv, (unsigned)p.n_seqs);
  const dim3 grid_o((unsigned)total_chunks, (unsigned)hv, DV / OC);
  if (few)
    gdn_state_fused_kernel<DK, DV, NCS><<<grid_s, NCS * 8, smem_s, stream>>>(
        p, qkv, ld, (float *)scratch, out, hk, hv);
  else
    gdn_state_fused_kernel<DK, DV, NCL><<<grid_l, NCL * 8, smem_l, stream>>>(
        p, qkv, ld, (float *)scratch, out, hk, hv);
  if ((rc = EXC_CUDA(cudaGetLastError())))
    return rc;
  gdn_out_av_kernel<DK, DV, OC><<<grid_o, GDN_NT, out_smem, stream>>>(p, (const float *)scratch,
                                                                      out, hv);
  return EXC_CUDA(cudaGetLastError());
}

extern "C" int exc_gdn_chunked(cudaStream_t stream, const float *qkv, size_t ld_qkv,
                               const float *beta, const float *g, float *out,
                               const struct exc_gdn_seq *seqs, int n_seqs,
                               const struct ex_gdn_dims *dims, void *scratch) {
  struct gdn_params p; /* 7.2 KB, copied into the launch */
  int total_chunks = 0;
  int rc = gdn_params_fill(&p, qkv, ld_qkv, out, seqs, n_seqs, dims, scratch, &total_chunks);
  if (rc)
    return rc;
  int hk = (int)dims->n_k_heads, hv = (int)dims->n_v_heads;
  if (dims->dk == 128 && dims->dv == 128)
    return gdn_launch<128, 128, 32, 64, 64>(stream, p, total_chunks, qkv, ld_qkv, beta, g, out, hk,
                                            hv, scratch);
  if (dims->dk == 16 && dims->dv == 24)
    return gdn_launch<16, 24, 24, 24, 24>(stream, p, total_chunks, qkv, ld_qkv, beta, g, out, hk,
                                          hv, scratch);
  return -EINVAL;
}
