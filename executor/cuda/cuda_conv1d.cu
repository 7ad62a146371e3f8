/* Depthwise causal conv1d + SiLU on CUDA (see cuda_conv1d.h). Memory-bound: one thread per
 * channel walks 16 rows of one sequence with the last K−1 inputs in registers, so each input is
 * read about once; taps accumulate in ascending j as the twin does. A second small launch writes
 * the carried windows. Kernels up to 8 taps (Qwen3.5 uses 4). */
#include <cuda_bf16.h>
#include <errno.h>
#include <string.h>

#include "cm_error.h"
#include "cuda_attention.h" /* EXC_MAX_SEQS */
#include "cuda_check.h"
#include "cuda_conv1d.h"

#define CONV_ROWS 16  /* rows per thread */
#define CONV_NT 256   /* channels per block */
#define CONV_MAX_K 8

struct conv_params {
  struct exc_conv_seq seqs[EXC_MAX_SEQS]; /* host copy */
  int32_t tile_start[EXC_MAX_SEQS + 1];   /* prefix sum of ⌈n / CONV_ROWS⌉ */
  int32_t n_seqs;
  int32_t rounded; /* the bf16 reference's R(silu(R(sum))) (spec §4.2) */
};

__device__ static int find_seq(const struct conv_params &p, int tile) {
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

/* X: float, or __nv_bfloat16 (a GEMM's bf16 output; read as its float32 value) */
template <int K, typename X>
__global__ __launch_bounds__(CONV_NT) static void conv_kernel(const __grid_constant__ struct conv_params p,
                                                              const X *__restrict__ x,
                                                              const float *__restrict__ w,
                                                              float *__restrict__ y, int c) {
  int ch = blockIdx.x * CONV_NT + threadIdx.x;
  if (ch >= c)
    return;
  int tile = blockIdx.y;
  int s = find_seq(p, tile);
  const struct exc_conv_seq sq = p.seqs[s];
  int t0 = (tile - p.tile_start[s]) * CONV_ROWS;
  int t1 = min(t0 + CONV_ROWS, sq.n);
  float wv[K], hist[K]; /* hist[K−1] is the current input */
#pragma unroll
  for (int j = 0; j < K; j++)
    wv[j] = w[(size_t)ch * K + j];
#pragma unroll
  for (int j = 0; j < K - 1; j++) {
    int t = t0 - (K - 1) + j; /* may be negative: the window */
    float v;
    if (t >= 0)
      v = (float)x[((size_t)sq.start + t) * c + ch];
    else
      v = sq.window_in ? sq.window_in[(size_t)(K - 1 + t) * c + ch] : 0.0f;
    hist[j] = v;
  }
  for (int t = t0; t < t1; t++) {
    hist[K - 1] = (float)x[((size_t)sq.start + t) * c + ch];
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < K; j++)
      acc += wv[j] * hist[j];
    if (p.rounded) {
      acc = __bfloat162float(__float2bfloat16_rn(acc));
      y[((size_t)sq.start + t) * c + ch] =
          __bfloat162float(__float2bfloat16_rn(acc / (1.0f + expf(-acc))));
    } else {
      y[((size_t)sq.start + t) * c + ch] = acc / (1.0f + expf(-acc));
    }
#pragma unroll
    for (int j = 0; j < K - 1; j++)
      hist[j] = hist[j + 1];
  }
}

/* window_out = last K−1 rows of (window_in ++ x rows); blockIdx.y = sequence */
template <typename X>
__global__ static void conv_window_kernel(const __grid_constant__ struct conv_params p,
                                          const X *__restrict__ x, int c, int k) {
  const struct exc_conv_seq sq = p.seqs[blockIdx.y];
  if (!sq.window_out)
    return;
  int hist = k - 1;
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < hist * c;
       idx += gridDim.x * blockDim.x) {
    int i = idx / c, ch = idx % c;
    int m = sq.n + i; /* index in (window ++ x) */
    float v;
    if (m >= hist)
      v = (float)x[((size_t)sq.start + m - hist) * c + ch];
    else
      v = sq.window_in ? sq.window_in[(size_t)m * c + ch] : 0.0f;
    sq.window_out[(size_t)i * c + ch] = v;
  }
}

template <int K, typename X>
static int conv_launch(cudaStream_t stream, const struct conv_params &p, const X *x,
                       const float *w, float *y, int c) {
  int tiles = p.tile_start[p.n_seqs];
  conv_kernel<K, X><<<dim3((unsigned)((c + CONV_NT - 1) / CONV_NT), (unsigned)tiles), CONV_NT, 0,
                   stream>>>(p, x, w, y, c);
  return EXC_CUDA(cudaGetLastError());
}

template <typename X>
static int conv1d_silu(cudaStream_t stream, const X *x, const float *w, float *y,
                       const struct exc_conv_seq *seqs, int n_seqs, size_t c, size_t kernel,
                       bool rounded) {
  if (n_seqs < 1 || n_seqs > EXC_MAX_SEQS || c == 0 || c > (1u << 24) || kernel < 2 ||
      kernel > CONV_MAX_K)
    return -EINVAL;
  struct conv_params p; /* 7 KB, copied into the launch */
  memset(&p, 0, sizeof p);
  int tiles = 0;
  for (int i = 0; i < n_seqs; i++) {
    if (seqs[i].n < 1 || seqs[i].start < 0)
      return -EINVAL;
    p.seqs[i] = seqs[i];
    p.tile_start[i] = tiles;
    tiles += (seqs[i].n + CONV_ROWS - 1) / CONV_ROWS;
  }
  p.tile_start[n_seqs] = tiles;
  p.n_seqs = n_seqs;
  p.rounded = rounded;
  int rc;
  switch (kernel) {
  case 2: rc = conv_launch<2, X>(stream, p, x, w, y, (int)c); break;
  case 3: rc = conv_launch<3, X>(stream, p, x, w, y, (int)c); break;
  case 4: rc = conv_launch<4, X>(stream, p, x, w, y, (int)c); break;
  case 5: rc = conv_launch<5, X>(stream, p, x, w, y, (int)c); break;
  case 6: rc = conv_launch<6, X>(stream, p, x, w, y, (int)c); break;
  case 7: rc = conv_launch<7, X>(stream, p, x, w, y, (int)c); break;
  default: rc = conv_launch<8, X>(stream, p, x, w, y, (int)c); break;
  }
  if (rc)
    return rc;
  size_t hist_elems = (kernel - 1) * c;
  unsigned blocks = (unsigned)((hist_elems + 255) / 256);
  conv_window_kernel<X><<<dim3(blocks, (unsigned)n_seqs), 256, 0, stream>>>(p, x, (int)c,
                                                                           (int)kernel);
  return EXC_CUDA(cudaGetLastError());
}

extern "C" int exc_causal_conv1d_silu(cudaStream_t stream, const float *x, const float *w,
                                      float *y, const struct exc_conv_seq *seqs, int n_seqs,
                                      size_t c, size_t kernel) {
  return conv1d_silu(stream, x, w, y, seqs, n_seqs, c, kernel, false);
}

extern "C" int exc_causal_conv1d_silu_rounded(cudaStream_t stream, const float *x, const float *w,
                                              float *y, const struct exc_conv_seq *seqs,
                                              int n_seqs, size_t c, size_t kernel) {
  return conv1d_silu(stream, x, w, y, seqs, n_seqs, c, kernel, true);
}

extern "C" int exc_causal_conv1d_silu_bf16(cudaStream_t stream, const __nv_bfloat16 *x,
                                           const float *w, float *y,
                                           const struct exc_conv_seq *seqs, int n_seqs, size_t c,
                                           size_t kernel) {
  return conv1d_silu(stream, x, w, y, seqs, n_seqs, c, kernel, true);
}
