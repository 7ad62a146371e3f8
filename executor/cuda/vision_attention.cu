/* Varlen non-causal attention of the vision tower on CUDA (see cuda_vision_ops.h). Flash-style
 * (FA2 layout): a block of 4 warps owns one 64-row query tile of one head and walks the 64-key
 * tiles of its segment, the next tile's cp.async copies in flight during each step. Each warp
 * keeps its 16 rows' scores, probabilities and output in registers as mma.sync m16n8k16 fragments
 * (bf16 operands via ldmatrix, fp32 accumulate), online softmax in fp32 with exp2. head_dim is
 * zero-padded to a multiple of 16 in shared memory. A first WMMA version with S and O in shared
 * memory ran at 32 TFLOP/s (notes/cuda-vision.md). Left out: causal masks, GQA, dropout (the
 * vision tower has none). Twin: cpu/vision_attention.c. */
#include <errno.h>

#include "cuda_vision_ops.h"
#include "vision_common.cuh"

#define BM EXC_VISION_ATTN_TILE /* query rows per block */
#define BN EXC_VISION_ATTN_TILE /* keys per step */
#define N_WARPS 4

/* Copies rows [r0, r0 + 64) of one head's q, k or v slice into dst [64][LDH], zero outside the
 * segment (r ≥ r_end) and in the pad columns hd .. HDP. */
template <int HDP>
static __device__ __forceinline__ void load_tile(__nv_bfloat16 *dst, const __nv_bfloat16 *src,
                                                 size_t row_stride, int r0, int r_end, int hd) {
  constexpr int LDH = HDP + 8, CH = HDP / 8;
  for (int c = threadIdx.x; c < 64 * CH; c += blockDim.x) {
    int r = c / CH, col = (c % CH) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r0 + r < r_end && col < hd)
      v = *reinterpret_cast<const uint4 *>(src + (size_t)(r0 + r) * row_stride + col);
    *reinterpret_cast<uint4 *>(dst + r * LDH + col) = v;
  }
}

/* load_tile through cp.async (16-byte copies, zero-filled outside the segment and in the pad
 * columns); completes at the next cp.async.wait_group that covers its commit group. */
template <int HDP>
static __device__ __forceinline__ void load_tile_async(__nv_bfloat16 *dst,
                                                       const __nv_bfloat16 *src,
                                                       size_t row_stride, int r0, int r_end,
                                                       int hd) {
  constexpr int LDH = HDP + 8, CH = HDP / 8;
  for (int c = threadIdx.x; c < 64 * CH; c += blockDim.x) {
    const int r = c / CH, col = (c % CH) * 8;
    const bool ok = r0 + r < r_end && col < hd;
    const __nv_bfloat16 *gp = ok ? src + (size_t)(r0 + r) * row_stride + col : src;
    const uint32_t sp = (uint32_t)__cvta_generic_to_shared(dst + r * LDH + col);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sp), "l"(gp),
                 "r"(ok ? 16 : 0));
  }
}

static __device__ __forceinline__ void cp_async_commit(void) {
  asm volatile("cp.async.commit_group;\n" ::);
}

template <int N> static __device__ __forceinline__ void cp_async_wait(void) {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* d += a·b on bf16 tensor cores, fp32 accumulate: a 16×16 (row), b 16×8 (col), d 16×8. */
static __device__ __forceinline__ void mma_bf16(float *d, const uint32_t *a, uint32_t b0,
                                                uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ void ldsm_x4(uint32_t *r, const void *p) {
  uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

static __device__ __forceinline__ void ldsm_x4_trans(uint32_t *r, const void *p) {
  uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

/* Shared memory: the q tile and two stages of k and v tiles, [64][HDP + 8] bf16 each (16-byte row
 * pad: conflict-free ldmatrix). */
template <int HDP> struct mma_smem {
  static constexpr int LDH = HDP + 8;
  static constexpr size_t bytes = 5 * (size_t)64 * LDH * 2;
};

template <int HDP>
static __global__ void __launch_bounds__(N_WARPS * 32)
    vision_attention_mma_kernel(const __nv_bfloat16 *qkv, const struct exc_vision_tile *tiles,
                                int heads, int hd, float scale_log2, __nv_bfloat16 *out) {
  constexpr int LDH = mma_smem<HDP>::LDH, KD = HDP / 16, ND = HDP / 8, NS = BN / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16 *qs = reinterpret_cast<__nv_bfloat16 *>(smem);
  __nv_bfloat16 *ks0 = qs + 64 * LDH, *vs0 = ks0 + 64 * LDH; /* stage 0 */
  __nv_bfloat16 *ks1 = vs0 + 64 * LDH, *vs1 = ks1 + 64 * LDH; /* stage 1 */

  const struct exc_vision_tile t = tiles[blockIdx.x];
  const int h = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, tq = lane & 3; /* row group and thread-in-quad of the mma layouts */
  const size_t dim = (size_t)heads * hd, stride = 3 * dim;
  const __nv_bfloat16 *qg = qkv + (size_t)h * hd, *kg = qg + dim, *vg = qg + 2 * dim;
  const int q_end = t.q0 + BM < t.seg_end ? t.q0 + BM : t.seg_end;

  load_tile<HDP>(qs, qg, stride, t.q0, q_end, hd);
  __syncthreads();
  uint32_t qf[KD][4];
  {
    const int r = warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1), c = 8 * (lane >> 4);
#pragma unroll
    for (int kk = 0; kk < KD; kk++)
      ldsm_x4(qf[kk], qs + r * LDH + kk * 16 + c);
  }

  float oacc[ND][4];
#pragma unroll
  for (int n = 0; n < ND; n++)
    oacc[n][0] = oacc[n][1] = oacc[n][2] = oacc[n][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; /* rows g and g + 8 */

  /* Two-stage pipeline: the k/v tile of step it + 1 is in flight while step it computes. */
  const int n_it = (t.seg_end - t.seg_start + BN - 1) / BN;
  load_tile_async<HDP>(ks0, kg, stride, t.seg_start, t.seg_end, hd);
  load_tile_async<HDP>(vs0, vg, stride, t.seg_start, t.seg_end, hd);
  cp_async_commit();
  for (int it = 0; it < n_it; it++) {
    const int k0 = t.seg_start + it * BN;
    const __nv_bfloat16 *ks = it & 1 ? ks1 : ks0, *vs = it & 1 ? vs1 : vs0;
    if (it + 1 < n_it) {
      load_tile_async<HDP>(it & 1 ? ks0 : ks1, kg, stride, k0 + BN, t.seg_end, hd);
      load_tile_async<HDP>(it & 1 ? vs0 : vs1, vg, stride, k0 + BN, t.seg_end, hd);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads(); /* step it's tiles are visible to every warp */

    float sacc[NS][4];
#pragma unroll
    for (int j = 0; j < NS; j++)
      sacc[j][0] = sacc[j][1] = sacc[j][2] = sacc[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KD; kk++) {
#pragma unroll
      for (int j = 0; j < NS; j += 2) {
        uint32_t b[4];
        const int key = 8 * j + (lane & 7) + 8 * (lane >> 4), c = kk * 16 + 8 * ((lane >> 3) & 1);
        ldsm_x4(b, ks + key * LDH + c);
        mma_bf16(sacc[j], qf[kk], b[0], b[1]);
        mma_bf16(sacc[j + 1], qf[kk], b[2], b[3]);
      }
    }

    const int n_keys = t.seg_end - k0;
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int j = 0; j < NS; j++) {
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int key = 8 * j + 2 * tq + (e & 1);
        float s = key < n_keys ? sacc[j][e] * scale_log2 : -INFINITY;
        sacc[j][e] = s;
      }
      mx0 = fmaxf(mx0, fmaxf(sacc[j][0], sacc[j][1]));
      mx1 = fmaxf(mx1, fmaxf(sacc[j][2], sacc[j][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1); /* finite: key k0 is valid */
    const float al0 = exp2f(m0 - mn0), al1 = exp2f(m1 - mn1);
    m0 = mn0;
    m1 = mn1;
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int j = 0; j < NS; j++) {
      sacc[j][0] = exp2f(sacc[j][0] - mn0);
      sacc[j][1] = exp2f(sacc[j][1] - mn0);
      sacc[j][2] = exp2f(sacc[j][2] - mn1);
      sacc[j][3] = exp2f(sacc[j][3] - mn1);
      s0 += sacc[j][0] + sacc[j][1];
      s1 += sacc[j][2] + sacc[j][3];
    }
    l0 = l0 * al0 + s0; /* per-thread partial sums; the quad adds them at the end */
    l1 = l1 * al1 + s1;
#pragma unroll
    for (int n = 0; n < ND; n++) {
      oacc[n][0] *= al0;
      oacc[n][1] *= al0;
      oacc[n][2] *= al1;
      oacc[n][3] *= al1;
    }
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
      uint32_t pa[4] = {pack_bf16(sacc[2 * kk][0], sacc[2 * kk][1]),
                        pack_bf16(sacc[2 * kk][2], sacc[2 * kk][3]),
                        pack_bf16(sacc[2 * kk + 1][0], sacc[2 * kk + 1][1]),
                        pack_bf16(sacc[2 * kk + 1][2], sacc[2 * kk + 1][3])};
#pragma unroll
      for (int n = 0; n < ND; n += 2) {
        uint32_t b[4];
        const int key = kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1), c = 8 * n + 8 * (lane >> 4);
        ldsm_x4_trans(b, vs + key * LDH + c);
        mma_bf16(oacc[n], pa, b[0], b[1]);
        mma_bf16(oacc[n + 1], pa, b[2], b[3]);
      }
    }
    __syncthreads(); /* every warp is done with this stage before step it + 1 refills it */
  }

  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float i0 = 1.0f / l0, i1 = 1.0f / l1;
  const int r0 = t.q0 + warp * 16 + g, r1 = r0 + 8;
#pragma unroll
  for (int n = 0; n < ND; n++) {
    const int c = 8 * n + 2 * tq;
    if (c >= hd)
      continue;
    if (r0 < q_end)
      *reinterpret_cast<__nv_bfloat162 *>(out + (size_t)r0 * dim + (size_t)h * hd + c) =
          __floats2bfloat162_rn(oacc[n][0] * i0, oacc[n][1] * i0);
    if (r1 < q_end)
      *reinterpret_cast<__nv_bfloat162 *>(out + (size_t)r1 * dim + (size_t)h * hd + c) =
          __floats2bfloat162_rn(oacc[n][2] * i1, oacc[n][3] * i1);
  }
}

template <int HDP>
static int launch(cudaStream_t stream, const __nv_bfloat16 *qkv,
                  const struct exc_vision_tile *tiles, int n_tiles, int heads, int hd,
                  float scale_log2, __nv_bfloat16 *out) {
  dim3 grid((unsigned)n_tiles, (unsigned)heads);
  constexpr size_t bytes = mma_smem<HDP>::bytes;
  int r = EXC_CUDA(cudaFuncSetAttribute(vision_attention_mma_kernel<HDP>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  if (r)
    return r;
  vision_attention_mma_kernel<HDP><<<grid, N_WARPS * 32, bytes, stream>>>(qkv, tiles, heads, hd,
                                                                          scale_log2, out);
  return VIS_LAUNCHED();
}

extern "C" int exc_vision_attention_tiles(const int32_t *cu_seqlens, int n_segs,
                                          struct exc_vision_tile *tiles, int cap) {
  if (!cu_seqlens || n_segs < 0 || cu_seqlens[0] != 0)
    return -EINVAL;
  int n = 0;
  for (int s = 0; s < n_segs; s++) {
    int32_t a = cu_seqlens[s], b = cu_seqlens[s + 1];
    if (b < a)
      return -EINVAL;
    for (int32_t q = a; q < b; q += BM) {
      if (n >= cap)
        return -EINVAL;
      tiles[n].q0 = q;
      tiles[n].seg_start = a;
      tiles[n].seg_end = b;
      tiles[n].pad_ = 0;
      n++;
    }
  }
  return n;
}

extern "C" int exc_vision_attention(cudaStream_t stream, const __nv_bfloat16 *qkv,
                                    const struct exc_vision_tile *tiles, int n_tiles, int heads,
                                    int head_dim, float scale, __nv_bfloat16 *out) {
  if (heads < 1 || heads > 65535 || head_dim < 8 || head_dim > 128 || head_dim % 8 != 0 ||
      n_tiles < 0)
    return -EINVAL;
  if (n_tiles == 0)
    return 0;
  const float scale_log2 = scale * 1.4426950408889634f;
  switch ((head_dim + 15) / 16) {
  case 1: return launch<16>(stream, qkv, tiles, n_tiles, heads, head_dim, scale_log2, out);
  case 2: return launch<32>(stream, qkv, tiles, n_tiles, heads, head_dim, scale_log2, out);
  case 3: return launch<48>(stream, qkv, tiles, n_tiles, heads, head_dim, scale_log2, out);
  case 4: return launch<64>(stream, qkv, tiles, n_tiles, heads, head_dim, scale_log2, out);
  case 5: return launch<80>(stream, qkv, tiles, n_tiles, heads, head_dim, scale_log2, out);
  case 6: return launch<96>(stream, qkv, tiles, n_tiles, heads, head_dim, scale_log2, out);
  case 7: return launch<112>(stream, qkv, tiles, n_tiles, heads, head_dim, scale_log2, out);
  default: return launch<128>(stream, qkv, tiles, n_tiles, heads, head_dim, scale_log2, out);
  }
}
