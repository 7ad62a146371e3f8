/* Makes the CUDA headers' bf16 element type usable from C: cuda_bf16.h defines the class
 * __nv_bfloat16 only for C++, and for C just the layout-identical __nv_bfloat16_raw (one uint16).
 * C files include this before any executor/cuda header that names __nv_bfloat16 in a signature. */
#ifndef S1_EX_CUDA_BF16_H
#define S1_EX_CUDA_BF16_H

#include <cuda_bf16.h>

#ifndef __cplusplus
typedef __nv_bfloat16_raw __nv_bfloat16; /* 2 bytes, bit pattern of a bfloat16 */
#endif

#endif
