/* The elementwise kernels of the kept LoRA (cuda_lora.h): the exact bf16 → float32 widening of a
 * site's GEMM input and PEFT's separately rounded `y + u·scale`. The two products themselves are
 * cuBLASLt float32 GEMMs (cuda_lora.c). */
#include <errno.h>

#include "cm_error.h"
#include "cuda_check.h"
#include "cuda_lora.h"
#include "exc_kernel.cuh"

/* xf[row, c] = float(x[row, c]) (exact), rows of k values, xf dense (ld k). */
static __global__ void widen_kernel(const __nv_bfloat16 *x, size_t ld_x, float *xf, size_t k,
                                    size_t t) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= t * k)
    return;
  size_t row = i / k, c = i % k;
  xf[i] = __bfloat162float(x[row * ld_x + c]);
}

/* y[row, o] = y[row, o] + u[row, o]·scale, each step rounded to float32 (no fused multiply-add:
 * PEFT's `result + lora_B(...) * scaling` is two float32 operations). */
static __global__ void scale_add_kernel(const float *u, size_t ld_u, float scale, float *y,
                                        size_t ld_y, size_t m, size_t t) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= t * m)
    return;
  size_t row = i / m, o = i % m;
  float *yo = y + row * ld_y + o;
  *yo = __fadd_rn(*yo, __fmul_rn(u[row * ld_u + o], scale));
}

int exc_lora_widen(cudaStream_t stream, const __nv_bfloat16 *x, size_t ld_x, float *xf, size_t k,
                   size_t t) {
  if (!k || !t || ld_x < k)
    return -EINVAL;
  widen_kernel<<<exc_blocks(t * k, 256), 256, 0, stream>>>(x, ld_x, xf, k, t);
  return EXC_CUDA(cudaGetLastError());
}

int exc_lora_scale_add(cudaStream_t stream, const float *u, size_t ld_u, float scale, float *y,
                       size_t ld_y, size_t m, size_t t) {
  if (!m || !t || ld_u < m || ld_y < m)
    return -EINVAL;
  scale_add_kernel<<<exc_blocks(t * m, 256), 256, 0, stream>>>(u, ld_u, scale, y, ld_y, m, t);
  return EXC_CUDA(cudaGetLastError());
}
