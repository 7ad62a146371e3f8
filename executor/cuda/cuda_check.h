/* One error check for CUDA runtime and cuBLAS(Lt) calls: it reports the failing call, function and
 * line once on stderr and turns the status into a project error code, so that callers keep their
 * own forward-only cleanup (the macro never returns or jumps for them). */
#ifndef S1_EX_CUDA_CHECK_H
#define S1_EX_CUDA_CHECK_H

#include <cublasLt.h>
#include <stdbool.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 when e is cudaSuccess; else prints "cuda: <call> failed in <func>:<line>: <name>: <text>" and
 * returns -CM_ECUDA (sticky errors included: see exc_cuda_sticky). */
int exc_cuda_status(cudaError_t e, const char *call, const char *func, int line);
/* 0 when s is CUBLAS_STATUS_SUCCESS; else prints the call and status, returns -CM_ECUDA. */
int exc_cublas_status(cublasStatus_t s, const char *call, const char *func, int line);
/* True when the device is in a sticky error state (the context is lost: the executor retires). */
bool exc_cuda_sticky(void);

#ifdef __cplusplus
}
#endif

#define EXC_CUDA(call) exc_cuda_status((call), #call, __func__, __LINE__)
#define EXC_CUBLAS(call) exc_cublas_status((call), #call, __func__, __LINE__)

#endif
