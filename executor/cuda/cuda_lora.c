/* Loading and applying kept LoRA adapters on the device (cuda_lora.h): a per-layer table of the
 * adapted projections of each GEMM site with their column offset in the site's fused output. */
#include "cuda_lora.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"

#define MAX_RANK 256

/* A projection an adapter may target: its module name, site, column offset in the site's GEMM
 * output and its in/out widths. */
struct module {
  const char *name;
  enum exc_lora_site site;
  size_t off, in, out;
};

/* One loaded factor pair on the device. */
struct pair {
  enum exc_lora_site site;
  size_t off, in, out, rank;
  float *a, *b; /* [rank, in], [out, rank] device, inside the one allocation */
};

struct exc_lora {
  float scale;
  size_t max_tokens, max_rank;
  void *buf;          /* one device allocation: factors then scratch */
  float *tmp;         /* [max_tokens, max_rank] */
  struct pair *pairs; /* [n_pairs], ordered by layer */
  size_t n_pairs;
  size_t *first; /* [n_layers + 1] first pair of each layer */
};

enum { N_MODULES = 12 };

static void modules(const struct ex_qwen35_config *c, struct module *m) {
  size_t h = (size_t)c->hidden_size, in = (size_t)c->intermediate_size;
  size_t qw = (size_t)c->n_heads * 2 * (size_t)c->head_dim;
  size_t kw = (size_t)c->n_kv_heads * (size_t)c->head_dim;
  size_t ow = (size_t)c->n_heads * (size_t)c->head_dim;
  size_t hv = (size_t)c->lin_v_heads, vd = hv * (size_t)c->lin_dv;
  size_t cd = 2 * (size_t)c->lin_k_heads * (size_t)c->lin_dk + vd;
  struct module t[N_MODULES] = {
      {"self_attn.q_proj", EXC_LORA_ATTN_IN, 0, h, qw},
      {"self_attn.k_proj", EXC_LORA_ATTN_IN, qw, h, kw},
      {"self_attn.v_proj", EXC_LORA_ATTN_IN, qw + kw, h, kw},
      {"self_attn.o_proj", EXC_LORA_ATTN_OUT, 0, ow, h},
      {"linear_attn.in_proj_qkv", EXC_LORA_GDN_QKV, 0, h, cd},
      {"linear_attn.in_proj_z", EXC_LORA_GDN_ZBA, 0, h, vd},
      {"linear_attn.in_proj_b", EXC_LORA_GDN_ZBA, vd, h, hv},
      {"linear_attn.in_proj_a", EXC_LORA_GDN_ZBA, vd + hv, h, hv},
      {"linear_attn.out_proj", EXC_LORA_GDN_OUT, 0, vd, h},
      {"mlp.gate_proj", EXC_LORA_MLP_IN, 0, h, in},
      {"mlp.up_proj", EXC_LORA_MLP_IN, in, h, in},
      {"mlp.down_proj", EXC_LORA_MLP_DOWN, 0, in, h},
  };
  memcpy(m, t, sizeof(t));
}

size_t exc_lora_count(const struct exc_lora *l) {
  return l ? l->n_pairs : 0;
}

void exc_lora_free(struct exc_lora *l) {
  if (!l)
    return;
  if (l->buf) {
    cudaDeviceSynchronize();
    cudaFree(l->buf);
  }
  free(l->pairs);
  free(l->first);
  free(l);
}

int exc_lora_new(const struct ex_qwen35_config *cfg, const struct cm_safetensors *adapter,
                 float scale, size_t max_tokens, struct exc_lora **ret, struct cm_diag *diag) {
  struct module mods[N_MODULES];
  modules(cfg, mods);
  size_t nl = (size_t)cfg->n_layers;
  struct exc_lora *l = calloc(1, sizeof(*l));
  struct cm_tensor_view va, vb;
  float *host = NULL;
  int r = 0;
  if (!l)
    return -ENOMEM;
  l->scale = scale;
  l->max_tokens = max_tokens;
  l->pairs = calloc(nl * N_MODULES + 1, sizeof(*l->pairs));
  l->first = calloc(nl + 1, sizeof(*l->first));
  if (!l->pairs || !l->first) {
    r = -ENOMEM;
    goto fail;
  }
  /* pass 1: find and check every pair, size the allocation */
  size_t floats = 0, biggest = 0;
  for (size_t li = 0; li < nl; li++) {
    l->first[li] = l->n_pairs;
    for (int mi = 0; mi < N_MODULES; mi++) {
      char ka[200], kb[200];
      snprintf(ka, sizeof(ka), "model.language_model.layers.%zu.%s.lora_A", li, mods[mi].name);
      snprintf(kb, sizeof(kb), "model.language_model.layers.%zu.%s.lora_B", li, mods[mi].name);
      bool has_a = cm_safetensors_find(adapter, ka, &va) == 0;
      bool has_b = cm_safetensors_find(adapter, kb, &vb) == 0;
      if (!has_a && !has_b)
        continue;
      if (!has_a || !has_b) {
        r = cm_diag_set(diag, -CM_ESHAPE, "adapter: %s without its partner factor",
                        has_a ? ka : kb);
        goto fail;
      }
      if (va.n_dims != 2 || vb.n_dims != 2 || va.shape[1] != (int64_t)mods[mi].in ||
          vb.shape[0] != (int64_t)mods[mi].out || va.shape[0] != vb.shape[1] || va.shape[0] <= 0 ||
          va.shape[0] > MAX_RANK) {
        r = cm_diag_set(diag, -CM_ESHAPE,
                        "adapter: LoRA factors of layers.%zu.%s have wrong "
                        "shapes (rank 1 .. %d)",
                        li, mods[mi].name, MAX_RANK);
        goto fail;
      }
      struct pair *p = &l->pairs[l->n_pairs++];
      p->site = mods[mi].site;
      p->off = mods[mi].off;
      p->in = mods[mi].in;
      p->out = mods[mi].out;
      p->rank = (size_t)va.shape[0];
      floats += p->rank * (p->in + p->out);
      biggest = p->rank * (p->in > p->out ? p->in : p->out) > biggest
                    ? p->rank * (p->in > p->out ? p->in : p->out)
                    : biggest;
      l->max_rank = p->rank > l->max_rank ? p->rank : l->max_rank;
    }
  }
  l->first[nl] = l->n_pairs;
  size_t n_text = 0; /* tensors outside the vision tower, as the CPU loader counts them */
  for (size_t i = 0; i < cm_safetensors_count(adapter); i++) {
    cm_safetensors_at(adapter, i, &va);
    n_text += strncmp(va.name, "model.visual.", 13) != 0;
  }
  if (n_text != 2 * l->n_pairs) {
    r = cm_diag_set(diag, -CM_EUNSUPPORTED,
                    "adapter: %zu text tensors, %zu of them LoRA factors "
                    "of projections the CUDA engine adapts",
                    n_text, 2 * l->n_pairs);
    goto fail;
  }
  if (!l->n_pairs) {
    *ret = l;
    return 0;
  }
  size_t bytes = (floats + max_tokens * l->max_rank) * sizeof(float);
  if ((r = EXC_CUDA(cudaMalloc(&l->buf, bytes)))) {
    r = cm_diag_set(diag, r, "cuda: LoRA factors and scratch (%zu bytes)", bytes);
    goto fail;
  }
  if (!(host = malloc(biggest * sizeof(float) + 16))) {
    r = -ENOMEM;
    goto fail;
  }
  /* pass 2: convert and upload */
  float *at = l->buf;
  for (size_t li = 0, pi = 0; li < nl; li++) {
    for (int mi = 0; mi < N_MODULES; mi++) {
      char ka[200], kb[200];
      snprintf(ka, sizeof(ka), "model.language_model.layers.%zu.%s.lora_A", li, mods[mi].name);
      snprintf(kb, sizeof(kb), "model.language_model.layers.%zu.%s.lora_B", li, mods[mi].name);
      if (cm_safetensors_find(adapter, ka, &va) != 0 || cm_safetensors_find(adapter, kb, &vb) != 0)
        continue;
      struct pair *p = &l->pairs[pi++];
      p->a = at;
      at += p->rank * p->in;
      p->b = at;
      at += p->rank * p->out;
      if ((r = cm_tensor_to_f32(&va, host)) ||
          (r = EXC_CUDA(
               cudaMemcpy(p->a, host, p->rank * p->in * sizeof(float), cudaMemcpyHostToDevice))) ||
          (r = cm_tensor_to_f32(&vb, host)) ||
          (r = EXC_CUDA(
               cudaMemcpy(p->b, host, p->rank * p->out * sizeof(float), cudaMemcpyHostToDevice)))) {
        r = cm_diag_set(diag, r, "adapter: upload of layers.%zu.%s failed", li, mods[mi].name);
        goto fail;
      }
    }
  }
  l->tmp = at;
  free(host);
  *ret = l;
  return 0;
fail:
  free(host);
  exc_lora_free(l);
  return r;
}

int exc_lora_apply(struct exc_lora *l, cudaStream_t stream, int layer, enum exc_lora_site site,
                   const __nv_bfloat16 *x, size_t ld_x, float *y, size_t ld_y, size_t t) {
  if (!l || !l->n_pairs)
    return 0;
  if (t > l->max_tokens || layer < 0)
    return -EINVAL;
  int r = 0;
  for (size_t i = l->first[layer]; i < l->first[layer + 1] && !r; i++) {
    const struct pair *p = &l->pairs[i];
    if (p->site == site)
      r = exc_lora_add(stream, x, ld_x, p->a, p->b, p->rank, p->in, p->out, l->scale, l->tmp,
                       y + p->off, ld_y, t);
  }
  return r;
}
