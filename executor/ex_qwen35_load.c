/* Loading of Qwen3.5 text weights from safetensors into float32 (see ex_qwen35.h): key prefixes,
 * tied-head fallback, count and shape checks, dtype widening, and the optional kept LoRA adapter.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_qwen35_internal.h"

/* ---- loading from safetensors ---- */

struct loader {
  const struct cm_safetensors *st;      /* base weights */
  const struct cm_safetensors *adapter; /* kept LoRA factors or NULL */
  const char *prefix;                   /* resolved text prefix */
  size_t n_found;                       /* text tensors consumed */
  size_t n_lora;                        /* adapter tensors consumed */
  struct cm_diag *diag;                 /* error sink */
};

static int copy_tensor(struct loader *ld, const struct cm_safetensors *st, const char *key,
                       float *dst, int n_dims, const int64_t *shape) {
  struct cm_tensor_view v;
  if (cm_safetensors_find(st, key, &v) != 0)
    return cm_diag_set(ld->diag, -CM_EMISSING, "tensor %s missing", key);
  bool ok = v.n_dims == n_dims;
  for (int i = 0; ok && i < n_dims; i++)
    ok = v.shape[i] == shape[i];
  if (!ok) {
    char want[96] = "", got[96] = "";
    for (int i = 0; i < n_dims; i++)
      snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%lld", i ? "," : "",
               (long long)shape[i]);
    for (int i = 0; i < v.n_dims; i++)
      snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%lld", i ? "," : "",
               (long long)v.shape[i]);
    return cm_diag_set(ld->diag, -CM_ESHAPE, "%s: tensor %s has shape [%s], expected [%s]", v.file,
                       key, got, want);
  }
  return cm_tensor_to_f32(&v, dst);
}

static int load_vec(struct loader *ld, const char *rel, float *dst, int64_t n) {
  char key[256];
  snprintf(key, sizeof(key), "%s%s", ld->prefix, rel);
  int r = copy_tensor(ld, ld->st, key, dst, 1, &n);
  if (!r)
    ld->n_found++;
  return r;
}

static int load_lin(struct loader *ld, const char *rel, struct ex_linear *l,
                    struct ex_qwen35_model *m) {
  char key[256];
  snprintf(key, sizeof(key), "%s%s.weight", ld->prefix, rel);
  int64_t shape[2] = {(int64_t)l->n_out, (int64_t)l->n_in};
  int r = copy_tensor(ld, ld->st, key, l->w, 2, shape);
  if (r)
    return r;
  ld->n_found++;
  if (!ld->adapter)
    return 0;
  /* adapter keys use the canonical (ConditionalGeneration) text prefix */
  char ka[300], kb[300];
  snprintf(ka, sizeof(ka), "model.language_model.%s.lora_A", rel);
  snprintf(kb, sizeof(kb), "model.language_model.%s.lora_B", rel);
  struct cm_tensor_view va, vb;
  bool has_a = cm_safetensors_find(ld->adapter, ka, &va) == 0;
  bool has_b = cm_safetensors_find(ld->adapter, kb, &vb) == 0;
  if (!has_a && !has_b)
    return 0;
  if (!has_a || !has_b)
    return cm_diag_set(ld->diag, -CM_EMISSING, "adapter: %s without its partner factor",
                       has_a ? ka : kb);
  if (va.n_dims != 2 || vb.n_dims != 2 || va.shape[1] != (int64_t)l->n_in ||
      vb.shape[0] != (int64_t)l->n_out || va.shape[0] != vb.shape[1] || va.shape[0] <= 0)
    return cm_diag_set(ld->diag, -CM_ESHAPE, "%s: LoRA factors of %s have wrong shapes", va.file,
                       rel);
  size_t rank = (size_t)va.shape[0];
  l->rank = rank;
  l->lora_a = ex_qwen35_own_alloc(m, rank * l->n_in);
  l->lora_b = ex_qwen35_own_alloc(m, l->n_out * rank);
  if (!l->lora_a || !l->lora_b)
    return -ENOMEM;
  cm_tensor_to_f32(&va, l->lora_a);
  cm_tensor_to_f32(&vb, l->lora_b);
  ld->n_lora += 2;
  return 0;
}

static bool has_prefix(const char *s, const char *p) {
  return strncmp(s, p, strlen(p)) == 0;
}

int ex_qwen35_model_load(const struct ex_qwen35_config *cfg, const struct cm_safetensors *st,
                         const struct cm_safetensors *adapter, float lora_scale,
                         struct ex_qwen35_model **ret_model, struct cm_diag *diag) {
  static const char *const prefixes[] = {"model.language_model.", "model.", ""};
  struct loader ld = {.st = st, .adapter = adapter, .diag = diag};
  struct cm_tensor_view v;
  for (size_t i = 0; i < 3 && !ld.prefix; i++) {
    char key[128];
    snprintf(key, sizeof(key), "%sembed_tokens.weight", prefixes[i]);
    if (cm_safetensors_find(st, key, &v) == 0)
      ld.prefix = prefixes[i];
  }
  if (!ld.prefix)
    return cm_diag_set(diag, -CM_EMISSING,
                       "tensor embed_tokens.weight missing (tried prefixes "
                       "model.language_model., model., none)");
  struct ex_qwen35_model *m = NULL;
  int r = ex_qwen35_model_alloc(cfg, 0, &m);
  if (r)
    return r;
  const struct ex_qwen35_config *c = cfg;
  int64_t vh[2] = {c->vocab_size, c->hidden_size};
  char key[256];
  snprintf(key, sizeof(key), "%sembed_tokens.weight", ld.prefix);
  if ((r = copy_tensor(&ld, st, key, m->embed, 2, vh)))
    goto fail;
  ld.n_found++;
  if ((r = load_vec(&ld, "norm.weight", m->final_norm, c->hidden_size)))
    goto fail;
  size_t n_expect = 2;
  if (!c->tied) {
    if (cm_safetensors_find(st, "lm_head.weight", &v) != 0) {
      r = cm_diag_set(diag, -CM_EMISSING,
                      "tensor lm_head.weight missing and the config is not "
                      "tied (tie_word_embeddings false)");
      goto fail;
    }
    if ((r = copy_tensor(&ld, st, "lm_head.weight", (float *)m->lm_head, 2, vh)))
      goto fail;
    n_expect++;
  }
  int64_t kk = c->conv_kernel;
  int64_t conv_dim = 2 * c->lin_k_heads * c->lin_dk + c->lin_v_heads * c->lin_dv;
  for (int i = 0; i < c->n_layers; i++) {
    struct ex_qwen35_layer *l = &m->layers[i];
    char rel[128];
#define REL(name) (snprintf(rel, sizeof(rel), "layers.%d.%s", i, name), rel)
    if ((r = load_vec(&ld, REL("input_layernorm.weight"), l->input_norm, c->hidden_size)) ||
        (r = load_vec(&ld, REL("post_attention_layernorm.weight"), l->post_norm, c->hidden_size)) ||
        (r = load_lin(&ld, REL("mlp.gate_proj"), &l->gate, m)) ||
        (r = load_lin(&ld, REL("mlp.up_proj"), &l->up, m)) ||
        (r = load_lin(&ld, REL("mlp.down_proj"), &l->down, m)))
      goto fail;
    if (l->full_attn) {
      n_expect += 11;
      if ((r = load_lin(&ld, REL("self_attn.q_proj"), &l->q, m)) ||
          (r = load_lin(&ld, REL("self_attn.k_proj"), &l->k, m)) ||
          (r = load_lin(&ld, REL("self_attn.v_proj"), &l->v, m)) ||
          (r = load_lin(&ld, REL("self_attn.o_proj"), &l->o, m)) ||
          (r = load_vec(&ld, REL("self_attn.q_norm.weight"), l->q_norm, c->head_dim)) ||
          (r = load_vec(&ld, REL("self_attn.k_norm.weight"), l->k_norm, c->head_dim)))
        goto fail;
    } else {
      n_expect += 14;
      int64_t cshape[3] = {conv_dim, 1, kk};
      char ckey[256];
      if ((r = load_lin(&ld, REL("linear_attn.in_proj_qkv"), &l->qkv, m)) ||
          (r = load_lin(&ld, REL("linear_attn.in_proj_z"), &l->z, m)) ||
          (r = load_lin(&ld, REL("linear_attn.in_proj_b"), &l->b, m)) ||
          (r = load_lin(&ld, REL("linear_attn.in_proj_a"), &l->a, m)) ||
          (r = load_lin(&ld, REL("linear_attn.out_proj"), &l->out, m)) ||
          (r = load_vec(&ld, REL("linear_attn.A_log"), l->a_log, c->lin_v_heads)) ||
          (r = load_vec(&ld, REL("linear_attn.dt_bias"), l->dt_bias, c->lin_v_heads)) ||
          (r = load_vec(&ld, REL("linear_attn.norm.weight"), l->gdn_norm, c->lin_dv)))
        goto fail;
      snprintf(ckey, sizeof(ckey), "%s%s", ld.prefix, REL("linear_attn.conv1d.weight"));
      if ((r = copy_tensor(&ld, st, ckey, l->conv, 3, cshape)))
        goto fail;
      ld.n_found++;
    }
#undef REL
  }
  /* count check: every text tensor under the prefix must have been consumed */
  size_t n_text = 0;
  const char *extra = NULL;
  char layers_prefix[64];
  snprintf(layers_prefix, sizeof(layers_prefix), "%slayers.", ld.prefix);
  for (size_t i = 0; i < cm_safetensors_count(st); i++) {
    cm_safetensors_at(st, i, &v);
    if (has_prefix(v.name, layers_prefix)) {
      n_text++;
      if (!extra)
        extra = v.name;
    }
  }
  n_text += 2 + (c->tied ? 0 : 1);
  if (n_text != n_expect || ld.n_found + (c->tied ? 0 : 1) != n_expect) {
    r = cm_diag_set(diag, -CM_ESHAPE,
                    "%zu text tensors found, %zu expected for %d layers "
                    "(first layer key: %s)",
                    n_text, n_expect, c->n_layers, extra ? extra : "none");
    goto fail;
  }
  if (adapter) {
    size_t n_ad = 0;
    for (size_t i = 0; i < cm_safetensors_count(adapter); i++) {
      cm_safetensors_at(adapter, i, &v);
      if (!has_prefix(v.name, "model.visual."))
        n_ad++;
    }
    if (n_ad != ld.n_lora) {
      r = cm_diag_set(diag, -CM_EFORMAT,
                      "adapter: %zu text LoRA tensors, only %zu match a text "
                      "projection",
                      n_ad, ld.n_lora);
      goto fail;
    }
    m->lora_scale = lora_scale;
  }
  *ret_model = m;
  return 0;
fail:
  ex_qwen35_model_free(m);
  return r;
}

int ex_qwen35_set_embed_rows(struct ex_qwen35_model *m, const int32_t *ids,
                             const struct cm_tensor_view *rows, size_t n, bool round_bf16,
                             struct cm_diag *diag) {
  size_t h = (size_t)m->cfg.hidden_size;
  if (rows->dtype != CM_DTYPE_F32 || rows->n_dims != 2 || rows->shape[0] != (int64_t)n ||
      rows->shape[1] != (int64_t)h)
    return cm_diag_set(diag, -CM_ESHAPE, "%s: tensor %s must be F32 [%zu, %zu]", rows->file,
                       rows->name, n, h);
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= m->cfg.vocab_size)
      return cm_diag_set(diag, -EINVAL, "embedding row %d outside the vocabulary", ids[i]);
  float *f = malloc(n * h * sizeof *f);
  if (!f)
    return -ENOMEM;
  cm_tensor_to_f32(rows, f);
  for (size_t i = 0; i < n; i++) {
    float *dst = m->embed + (size_t)ids[i] * h;
    for (size_t j = 0; j < h; j++)
      dst[j] = round_bf16 ? cm_bf16_to_f32(cm_f32_to_bf16(f[i * h + j])) : f[i * h + j];
  }
  free(f);
  return 0;
}

void ex_qwen35_round_wide_params(struct ex_qwen35_model *m) {
  size_t hv = (size_t)m->cfg.lin_v_heads;
  for (int i = 0; i < m->cfg.n_layers; i++) {
    struct ex_qwen35_layer *l = &m->layers[i];
    if (l->full_attn)
      continue;
    for (size_t j = 0; j < hv; j++) {
      l->a_log[j] = cm_bf16_to_f32(cm_f32_to_bf16(l->a_log[j]));
      l->dt_bias[j] = cm_bf16_to_f32(cm_f32_to_bf16(l->dt_bias[j]));
    }
  }
}
