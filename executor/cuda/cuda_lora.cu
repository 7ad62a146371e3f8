/* The LoRA kernel pair (cuda_lora.h): a block-reduced down projection per (row, rank index) and
 * one thread per output element for the up projection; FP32 throughout. */
#include <errno.h>

#include "cm_error.h"
#include "cuda_check.h"
#include "cuda_lora.h"
#include "exc_kernel.cuh"

enum { DOWN_THREADS = 128, MAX_GRID_Y = 65535 };

/* tmp[row, j] = Σ_c float(x[row, c]) · a[j, c]; grid (r, rows in strides of gridDim.y). */
static __global__ void lora_down_kernel(const __nv_bfloat16 *x, size_t ld_x, const float *a,
                                        size_t k, float *tmp, size_t r, size_t t) {
  __shared__ float sh[DOWN_THREADS];
  size_t j = blockIdx.x;
  const float *aj = a + j * k;
  for (size_t row = blockIdx.y; row < t; row += gridDim.y) {
    const __nv_bfloat16 *xr = x + row * ld_x;
    float s = 0.0f;
    for (size_t c = threadIdx.x; c < k; c += DOWN_THREADS)
      s = fmaf(__bfloat162float(xr[c]), aj[c], s);
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int w = DOWN_THREADS / 2; w > 0; w >>= 1) {
      if (threadIdx.x < w)
        sh[threadIdx.x] += sh[threadIdx.x + w];
      __syncthreads();
    }
    if (threadIdx.x == 0)
      tmp[row * r + j] = sh[0];
    __syncthreads();
  }
}

/* y[row, o] += scale · Σ_j tmp[row, j] · b[o, j]. */
static __global__ void lora_up_kernel(const float *tmp, size_t r, const float *b, size_t m,
                                      float scale, float *y, size_t ld_y, size_t t) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= t * m)
    return;
  size_t row = i / m, o = i % m;
  const float *tr = tmp + row * r, *bo = b + o * r;
  float s = 0.0f;
  for (size_t j = 0; j < r; j++)
    s = fmaf(tr[j], bo[j], s);
  y[row * ld_y + o] += scale * s;
}

int exc_lora_add(cudaStream_t stream, const __nv_bfloat16 *x, size_t ld_x, const float *a,
                 const float *b, size_t r, size_t k, size_t m, float scale, float *tmp, float *y,
                 size_t ld_y, size_t t) {
  if (!r || !k || !m || !t || ld_x < k || ld_y < m)
    return -EINVAL;
  size_t gy = t < (size_t)MAX_GRID_Y ? t : (size_t)MAX_GRID_Y;
  dim3 grid((unsigned)r, (unsigned)gy);
  lora_down_kernel<<<grid, DOWN_THREADS, 0, stream>>>(x, ld_x, a, k, tmp, r, t);
  int rc = EXC_CUDA(cudaGetLastError());
  if (rc)
    return rc;
  lora_up_kernel<<<exc_blocks(t * m, 256), 256, 0, stream>>>(tmp, r, b, m, scale, y, ld_y, t);
  return EXC_CUDA(cudaGetLastError());
}
