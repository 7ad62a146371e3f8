/* RMSNorm kernels (cuda_norm.h): one block per normalised vector of the hidden size (a block-wide
 * float32 sum of squares), one warp per head vector of the gated norm; 1/sqrtf as the CPU twin
 * (PyTorch's CUDA rsqrt differs by a few ulp, well inside bf16). */
#include <errno.h>

#include "cm_error.h"
#include "cuda_check.h"
#include "cuda_norm.h"
#include "exc_kernel.cuh"

enum { NORM_THREADS = 256 };

static __global__ void rms_norm_kernel(float *x, const float *add, size_t ld_x, bool write_x,
                                       const float *w, float eps, float *y_f32,
                                       __nv_bfloat16 *y_bf16, size_t ld_bf16, size_t d) {
  __shared__ float red[33];
  size_t r = blockIdx.x;
  float *xr = x + r * ld_x;
  const float *ar = add ? add + r * d : NULL;
  float ss = 0.0f;
  for (size_t i = threadIdx.x; i < d; i += blockDim.x) {
    float v = xr[i];
    if (ar) {
      v += ar[i];
      if (write_x)
        xr[i] = v;
    }
    ss += v * v;
  }
  ss = exc_block_sum(ss, red);
  float inv = 1.0f / sqrtf(ss / (float)d + eps);
  for (size_t i = threadIdx.x; i < d; i += blockDim.x) {
    float v = ar ? (write_x ? xr[i] : xr[i] + ar[i]) : xr[i];
    float o = (v * inv) * (1.0f + w[i]);
    if (y_f32)
      y_f32[r * d + i] = o;
    if (y_bf16)
      y_bf16[r * ld_bf16 + i] = __float2bfloat16_rn(o);
  }
}

int exc_rms_norm(cudaStream_t stream, float *x, const float *add, const float *w, float eps,
                 float *y_f32, __nv_bfloat16 *y_bf16, size_t ld_bf16, size_t n, size_t d) {
  if (!n || !d || n > 0x7fffffffu || (!y_f32 && !y_bf16) || (y_bf16 && ld_bf16 < d))
    return -EINVAL;
  rms_norm_kernel<<<(unsigned)n, NORM_THREADS, 0, stream>>>(x, add, d, true, w, eps, y_f32, y_bf16,
                                                            ld_bf16, d);
  return EXC_CUDA(cudaGetLastError());
}

/* One warp per (token, head) row of dv values, eight rows per block: the sum of squares is a
 * lane-strided partial sum then a shuffle tree (no shared memory, no block barrier). */
enum { GATED_WARPS = 8 };

static __global__ void gated_norm_kernel(const float *x, const float *z, size_t ld_z,
                                         const float *w, float eps, __nv_bfloat16 *y,
                                         size_t n_rows, size_t n_heads, size_t dv, bool rounded) {
  size_t row = (size_t)blockIdx.x * GATED_WARPS + threadIdx.x / 32;
  if (row >= n_rows)
    return;
  unsigned lane = threadIdx.x & 31u;
  size_t t = row / n_heads, h = row % n_heads;
  const float *xr = x + row * dv;
  const float *zr = z + t * ld_z + h * dv;
  /* rounded: x is read as R(x) (the reference's bf16 core_attn_out; the GDN output needs no
   * separate rounding pass) */
  float ss = 0.0f;
  for (size_t i = lane; i < dv; i += 32) {
    float xv = rounded ? exc_r16(xr[i]) : xr[i];
    ss += xv * xv;
  }
  for (int o = 16; o > 0; o >>= 1)
    ss += __shfl_xor_sync(0xffffffffu, ss, o);
  float inv = 1.0f / sqrtf(ss / (float)dv + eps);
  for (size_t i = lane; i < dv; i += 32) {
    float zv = zr[i];
    float s = zv / (1.0f + expf(-zv));
    float xv = rounded ? exc_r16(xr[i]) : xr[i];
    /* the bf16 reference rounds the normalised value and its product with w (spec §4.8) */
    float nrm = rounded ? exc_r16(exc_r16(xv * inv) * w[i]) : w[i] * (xv * inv);
    y[row * dv + i] = __float2bfloat16_rn(nrm * s);
  }
}

static int gated_rms_norm(cudaStream_t stream, const float *x, const float *z, size_t ld_z,
                          const float *w, float eps, __nv_bfloat16 *y, size_t n, size_t n_heads,
                          size_t dv, bool rounded) {
  if (!n || !n_heads || !dv || n * n_heads > 0x7fffffffu || ld_z < n_heads * dv)
    return -EINVAL;
  size_t rows = n * n_heads;
  gated_norm_kernel<<<(unsigned)((rows + GATED_WARPS - 1) / GATED_WARPS), 32 * GATED_WARPS, 0,
                      stream>>>(x, z, ld_z, w, eps, y, rows, n_heads, dv, rounded);
  return EXC_CUDA(cudaGetLastError());
}

int exc_gated_rms_norm(cudaStream_t stream, const float *x, const float *z, size_t ld_z,
                       const float *w, float eps, __nv_bfloat16 *y, size_t n, size_t n_heads,
                       size_t dv) {
  return gated_rms_norm(stream, x, z, ld_z, w, eps, y, n, n_heads, dv, false);
}

int exc_gated_rms_norm_rounded(cudaStream_t stream, const float *x, const float *z, size_t ld_z,
                               const float *w, float eps, __nv_bfloat16 *y, size_t n,
                               size_t n_heads, size_t dv) {
  return gated_rms_norm(stream, x, z, ld_z, w, eps, y, n, n_heads, dv, true);
}
