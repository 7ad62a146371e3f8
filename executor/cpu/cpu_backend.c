/* The CPU backend table: every op of ex_backend.h bound to its float32 reference in cpu/. */
#include "ex_backend.h"

#include "cpu_act.h"
#include "cpu_attention.h"
#include "cpu_conv1d.h"
#include "cpu_embed.h"
#include "cpu_gdn.h"
#include "cpu_matmul.h"
#include "cpu_norm.h"
#include "cpu_rope.h"

const struct ex_backend ex_backend_cpu = {
    .name = "cpu",
    .linear = ex_cpu_linear,
    .linear_lora_add = ex_cpu_linear_lora_add,
    .embed = ex_cpu_embed,
    .rms_norm = ex_cpu_rms_norm,
    .gated_rms_norm = ex_cpu_gated_rms_norm,
    .gated_rms_norm_bf16 = ex_cpu_gated_rms_norm_bf16,
    .swiglu_bf16 = ex_cpu_swiglu_bf16,
    .rope_apply_bf16 = ex_cpu_rope_apply_bf16,
    .attention_gated_bf16 = ex_cpu_attention_gated_bf16,
    .causal_conv1d_silu_bf16 = ex_cpu_causal_conv1d_silu_bf16,
    .swiglu = ex_cpu_swiglu,
    .round_bf16 = ex_cpu_round_bf16,
    .mrope_tables = ex_cpu_mrope_tables,
    .rope_apply = ex_cpu_rope_apply,
    .attention_gated = ex_cpu_attention_gated,
    .causal_conv1d_silu = ex_cpu_causal_conv1d_silu,
    .gdn_prepare = ex_cpu_gdn_prepare,
    .gdn_recurrent = ex_cpu_gdn_recurrent,
    .gdn_chunked = ex_cpu_gdn_chunked,
};
