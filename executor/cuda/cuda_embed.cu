/* Embedding gather (cuda_embed.h): one thread per output element, rows read as bf16. */
#include <errno.h>
#include <math.h>

#include "cm_error.h"
#include "cuda_check.h"
#include "cuda_embed.h"
#include "exc_kernel.cuh"

static __global__ void embed_kernel(const __nv_bfloat16 *table, size_t vocab, const int32_t *ids,
                                    float *out, size_t n, size_t d) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * d)
    return;
  size_t t = i / d, c = i % d;
  int32_t id = ids[t];
  out[i] = (id >= 0 && (size_t)id < vocab) ? __bfloat162float(table[(size_t)id * d + c]) : NAN;
}

int exc_embed(cudaStream_t stream, const __nv_bfloat16 *table, size_t vocab, const int32_t *ids,
              float *out, size_t n, size_t d) {
  if (!n || !d)
    return -EINVAL;
  embed_kernel<<<exc_blocks(n * d, 256), 256, 0, stream>>>(table, vocab, ids, out, n, d);
  return EXC_CUDA(cudaGetLastError());
}
