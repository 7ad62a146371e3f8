/* The CUDA / cuBLAS status check of cuda_check.h: one line on stderr naming the failed call, then
 * a project error code. Library code never exits; the executor loop retires on a sticky error. */
#include <stdbool.h>
#include <stdio.h>

#include "cm_error.h"
#include "cuda_check.h"

int exc_cuda_status(cudaError_t e, const char *call, const char *func, int line) {
  if (e == cudaSuccess)
    return 0;
  fprintf(stderr, "cuda: %s failed in %s:%d: %s: %s\n", call, func, line, cudaGetErrorName(e),
          cudaGetErrorString(e));
  return -CM_ECUDA;
}

int exc_cublas_status(cublasStatus_t s, const char *call, const char *func, int line) {
  if (s == CUBLAS_STATUS_SUCCESS)
    return 0;
  fprintf(stderr, "cublas: %s failed in %s:%d: status %d\n", call, func, line, (int)s);
  return -CM_ECUDA;
}

bool exc_cuda_sticky(void) {
  /* A sticky error stays on every later call; a non-sticky one is cleared by cudaGetLastError. */
  cudaError_t e = cudaPeekAtLastError();
  if (e == cudaSuccess)
    return false;
  (void)cudaGetLastError();
  return cudaPeekAtLastError() != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess;
}
