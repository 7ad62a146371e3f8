/* Allocation and release of Qwen3.5 text weights (see ex_qwen35.h): every float32 buffer sized
 * from the config and recorded in model->owned, so that one free releases a half-built model.
 * Loading from safetensors is ex_qwen35_load.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ex_qwen35_internal.h"

float *ex_qwen35_own_alloc(struct ex_qwen35_model *m, size_t n) {
  if (m->n_owned == m->cap_owned) {
    size_t cap = m->cap_owned ? m->cap_owned * 2 : 64;
    void **p = realloc(m->owned, cap * sizeof(*p));
    if (!p)
      return NULL;
    m->owned = p;
    m->cap_owned = cap;
  }
  float *buf = calloc(n ? n : 1, sizeof(float));
  if (buf)
    m->owned[m->n_owned++] = buf;
  return buf;
}

void ex_qwen35_model_free(struct ex_qwen35_model *model) {
  if (!model)
    return;
  for (size_t i = 0; i < model->n_owned; i++)
    free(model->owned[i]);
  free(model->owned);
  free(model->layers);
  free(model);
}

static int lin_alloc(struct ex_qwen35_model *m, struct ex_linear *l, size_t n_out, size_t n_in,
                     size_t rank) {
  l->n_in = n_in;
  l->n_out = n_out;
  l->w = ex_qwen35_own_alloc(m, n_out * n_in);
  if (!l->w)
    return -ENOMEM;
  if (rank) {
    l->rank = rank;
    l->lora_a = ex_qwen35_own_alloc(m, rank * n_in);
    l->lora_b = ex_qwen35_own_alloc(m, n_out * rank);
    if (!l->lora_a || !l->lora_b)
      return -ENOMEM;
  }
  return 0;
}

int ex_qwen35_model_alloc(const struct ex_qwen35_config *cfg, size_t lora_rank,
                          struct ex_qwen35_model **ret_model) {
  const struct ex_qwen35_config *c = cfg;
  struct ex_qwen35_model *m = calloc(1, sizeof(*m));
  if (!m)
    return -ENOMEM;
  m->cfg = *cfg;
  m->be = &ex_backend_cpu;
  m->gdn_mode = EX_GDN_AUTO;
  size_t h = (size_t)c->hidden_size, in = (size_t)c->intermediate_size;
  size_t d = (size_t)c->head_dim;
  size_t kd = (size_t)(c->lin_k_heads * c->lin_dk), vd = (size_t)(c->lin_v_heads * c->lin_dv);
  size_t hv = (size_t)c->lin_v_heads, r = lora_rank;
  int ret = -ENOMEM;
  m->layers = calloc((size_t)c->n_layers, sizeof(*m->layers));
  m->embed = ex_qwen35_own_alloc(m, (size_t)c->vocab_size * h);
  m->final_norm = ex_qwen35_own_alloc(m, h);
  if (!m->layers || !m->embed || !m->final_norm)
    goto fail;
  if (c->tied) {
    m->lm_head = m->embed;
  } else {
    float *head = ex_qwen35_own_alloc(m, (size_t)c->vocab_size * h);
    if (!head)
      goto fail;
    m->lm_head = head;
  }
  for (int i = 0; i < c->n_layers; i++) {
    struct ex_qwen35_layer *l = &m->layers[i];
    l->full_attn = c->full_attn[i];
    l->input_norm = ex_qwen35_own_alloc(m, h);
    l->post_norm = ex_qwen35_own_alloc(m, h);
    if (!l->input_norm || !l->post_norm)
      goto fail;
    if ((ret = lin_alloc(m, &l->gate, in, h, r)) || (ret = lin_alloc(m, &l->up, in, h, r)) ||
        (ret = lin_alloc(m, &l->down, h, in, r)))
      goto fail;
    if (l->full_attn) {
      size_t hq = (size_t)c->n_heads, hkv = (size_t)c->n_kv_heads;
      if ((ret = lin_alloc(m, &l->q, hq * 2 * d, h, r)) ||
          (ret = lin_alloc(m, &l->k, hkv * d, h, r)) ||
          (ret = lin_alloc(m, &l->v, hkv * d, h, r)) || (ret = lin_alloc(m, &l->o, h, hq * d, r)))
        goto fail;
      ret = -ENOMEM;
      l->q_norm = ex_qwen35_own_alloc(m, d);
      l->k_norm = ex_qwen35_own_alloc(m, d);
      if (!l->q_norm || !l->k_norm)
        goto fail;
    } else {
      if ((ret = lin_alloc(m, &l->qkv, 2 * kd + vd, h, r)) ||
          (ret = lin_alloc(m, &l->z, vd, h, r)) || (ret = lin_alloc(m, &l->b, hv, h, r)) ||
          (ret = lin_alloc(m, &l->a, hv, h, r)) || (ret = lin_alloc(m, &l->out, h, vd, r)))
        goto fail;
      ret = -ENOMEM;
      l->conv = ex_qwen35_own_alloc(m, (2 * kd + vd) * (size_t)c->conv_kernel);
      l->a_log = ex_qwen35_own_alloc(m, hv);
      l->dt_bias = ex_qwen35_own_alloc(m, hv);
      l->gdn_norm = ex_qwen35_own_alloc(m, (size_t)c->lin_dv);
      if (!l->conv || !l->a_log || !l->dt_bias || !l->gdn_norm)
        goto fail;
    }
  }
  *ret_model = m;
  return 0;
fail:
  ex_qwen35_model_free(m);
  return ret;
}
