/* Unmerged (kept) LoRA on the CUDA engine: y += scale·((x·Aᵀ)·Bᵀ) for every projection an adapter
 * targets, in FP32 on the bf16 GEMM input widened to FP32 (the reference's PEFT numerics with FP32
 * factors, spec/jemm.md §6.3: PEFT casts x to lora_A's dtype, runs lora_A and lora_B as FP32
 * linears (TF32 off), multiplies by scaling and adds to the base output; BF16 factors are used at
 * their exact FP32 values), added to the output of the projection's GEMM before anything reads it.
 * Both products are cuBLASLt FP32 GEMMs (CUBLAS_COMPUTE_32F): the down products of a site's
 * projections as one GEMM over their stacked A factors, then one up GEMM per projection. Each GEMM
 * shape gets one pinned configuration (the heuristic's first at 256 rows; long reductions split
 * into up to 32 k ranges summed by cuBLASLt's compute-type reduction, never the atomic in-place
 * one) used for every row count, so a row's result does not depend on how many rows share the
 * launch. The scale is applied as PEFT rounds it: a power of two (OmniJev's and
 * JEMM's 2) as the GEMM's alpha with beta 1 (2^e·acc is exact, so y + 2^e·acc rounds once as
 * PEFT's y + round(acc·2^e)); any other scale through an FP32 product then a separate FP32 add.
 * Factors live on the device from start-up (one allocation, plus FP32 scratch for 2,048-row
 * chunks). Twin: ex_cpu_linear_lora_add (cpu_matmul.h) through ex_qwen35_model's unmerged adapter;
 * tests/cuda/test_lora.c. */
#ifndef S1_EX_CUDA_LORA_H
#define S1_EX_CUDA_LORA_H

#include <cuda_runtime.h>
#include <stddef.h>

#include "cm_error.h"
#include "cm_safetensors.h"
#include "ex_qwen35.h"
#include "exc_bf16.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The GEMM sites of a layer (each one GEMM of exc_qwen35.c, possibly several fused projections). */
enum exc_lora_site {
  EXC_LORA_ATTN_IN,  /* [q|gate, k, v] of self_attn (q_proj, k_proj, v_proj) */
  EXC_LORA_ATTN_OUT, /* self_attn.o_proj */
  EXC_LORA_GDN_QKV,  /* linear_attn.in_proj_qkv */
  EXC_LORA_GDN_ZBA,  /* [z | b | a] (in_proj_z, in_proj_b, in_proj_a) */
  EXC_LORA_GDN_OUT,  /* linear_attn.out_proj */
  EXC_LORA_MLP_IN,   /* [gate, up] (gate_proj, up_proj) */
  EXC_LORA_MLP_DOWN, /* down_proj */
  EXC_LORA_SITES,
};

#define EXC_LORA_MAX_SHAPES 64 /* distinct FP32 GEMM shapes (k, m, strides, alignment) cached */
#define EXC_LORA_CHUNK_ROWS 2048 /* rows per GEMM call: the FP32 scratch holds one chunk */

struct exc_lora; /* opaque: device factors, scratch, per-layer table */

/* Loads every lora_A / lora_B pair of `adapter` (keys model.language_model.layers.L.<module>.lora_A
 * as s1-export writes them, any float dtype, converted to FP32) onto the current device.
 * Shapes: A [r, in], B [out, r] with in/out of the module from cfg; r ≤ 256.
 * Ownership: *ret is freed with exc_lora_free; adapter is only read.
 * Returns 0; -CM_ESHAPE (wrong factor shapes, a factor without its partner); -CM_EUNSUPPORTED (a
 * factor for a module this engine has no site for); -ENOMEM; -CM_ECUDA. Source: PEFT LoraLayer
 * (lora_B(lora_A(x)) · scaling, dropout 0, no bias). */
int exc_lora_new(const struct ex_qwen35_config *cfg, const struct cm_safetensors *adapter,
                 float scale, size_t max_tokens, struct exc_lora **ret, struct cm_diag *diag);
void exc_lora_free(struct exc_lora *l); /* accepts NULL; synchronises the device */

/* Factor pairs loaded (for logs). */
size_t exc_lora_count(const struct exc_lora *l);

/* Adds the LoRA branches of layer `layer` at `site` into y: for each adapted projection of the
 * site, y[:, off .. off+out) += scale·((x·Aᵀ)·Bᵀ), off its column offset in the fused GEMM output.
 * Shapes: x [t, in] bf16 device (row stride ld_x), the site's GEMM input; y [t, ld_y] fp32 device,
 * the site's GEMM output. Enqueued on `stream`, no sync. A site without adapters does nothing.
 * The first call of each GEMM shape (and pointer alignment) asks cuBLASLt's heuristic on the host
 * and caches the algorithm (at most EXC_LORA_MAX_SHAPES shapes).
 * Returns 0; -EINVAL (t over max_tokens); -CM_ELIMIT (shape cache full); -CM_EUNSUPPORTED (no
 * FP32 algorithm that runs 1 and EXC_LORA_CHUNK_ROWS rows in the workspace); -CM_ECUDA. */
int exc_lora_apply(struct exc_lora *l, cudaStream_t stream, int layer, enum exc_lora_site site,
                   const __nv_bfloat16 *x, size_t ld_x, float *y, size_t ld_y, size_t t);

/* The elementwise kernels behind exc_lora_apply (cuda_lora.cu), enqueued on `stream`:
 * exc_lora_widen: xf [t, k] (dense) = float(x [t, k], row stride ld_x), exact.
 * exc_lora_scale_add: y[:, 0..m) = y + u·scale, the product and the sum each rounded to FP32 (no
 * fused multiply-add), u [t, ld_u], y [t, ld_y] FP32 device.
 * Returns 0, -EINVAL (a zero size, a stride under the width) or -CM_ECUDA (launch). */
int exc_lora_widen(cudaStream_t stream, const __nv_bfloat16 *x, size_t ld_x, float *xf, size_t k,
                   size_t t);
int exc_lora_scale_add(cudaStream_t stream, const float *u, size_t ld_u, float scale, float *y,
                       size_t ld_y, size_t m, size_t t);

#ifdef __cplusplus
}
#endif

#endif
