/* Unmerged (kept) LoRA on the CUDA engine: y += scale·((x·Aᵀ)·Bᵀ) for every projection an adapter
 * targets, in FP32 on the bf16 GEMM input converted to FP32 (the reference's PEFT numerics with
 * FP32 factors, spec/jemm.md §6.3; BF16 factors are used at their exact FP32 values, the branch
 * still runs in FP32), added to the FP32 output of the projection's GEMM before anything reads it.
 * Factors live on the device from start-up (one allocation, plus FP32 scratch [max_tokens, rank]).
 * Twin: ex_cpu_linear_lora_add (cpu_matmul.h) through ex_qwen35_model's unmerged adapter. */
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
 * Returns 0; -EINVAL (t over max_tokens); -CM_ECUDA. */
int exc_lora_apply(struct exc_lora *l, cudaStream_t stream, int layer, enum exc_lora_site site,
                   const __nv_bfloat16 *x, size_t ld_x, float *y, size_t ld_y, size_t t);

/* The kernel pair behind exc_lora_apply (cuda_lora.cu): tmp [t, r] = float(x)·Aᵀ; then
 * y[:, 0..m) += scale·tmp·Bᵀ. Shapes: x [t, k] (ld_x), a [r, k], b [m, r] fp32, y [t, ld_y] fp32.
 * Returns 0, -EINVAL (a zero size) or -CM_ECUDA (launch). */
int exc_lora_add(cudaStream_t stream, const __nv_bfloat16 *x, size_t ld_x, const float *a,
                 const float *b, size_t r, size_t k, size_t m, float scale, float *tmp, float *y,
                 size_t ld_y, size_t t);

#ifdef __cplusplus
}
#endif

#endif
