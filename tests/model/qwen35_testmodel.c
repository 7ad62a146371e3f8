/* Seeded random tiny Qwen3.5 models in memory (see qwen35_testmodel.h). */
#include "qwen35_testmodel.h"

#include <math.h>
#include <string.h>

float test_urand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

double test_rel_err(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    den += (double)b[i] * b[i];
  }
  return sqrt(num / (den > 0 ? den : 1));
}

void test_qwen35_tiny_config(struct ex_qwen35_config *c, int vocab, int hv, bool tied) {
  memset(c, 0, sizeof(*c));
  c->vocab_size = vocab;
  c->hidden_size = 64;
  c->intermediate_size = 96;
  c->n_layers = 4;
  c->full_attn[3] = true;
  c->n_heads = 4;
  c->n_kv_heads = 2;
  c->head_dim = 64;
  c->rot_dims = 16;
  c->mrope_section[0] = 3;
  c->mrope_section[1] = 3;
  c->mrope_section[2] = 2;
  c->rope_theta = 1e7;
  c->lin_k_heads = 2;
  c->lin_v_heads = hv;
  c->lin_dk = 16;
  c->lin_dv = 24;
  c->conv_kernel = 4;
  c->rms_eps = 1e-6f;
  c->tied = tied;
  c->image_token_id = -1;
  c->vision_start_token_id = -1;
}

static void fill(float *x, size_t n, float scale, float offset, uint64_t *s) {
  for (size_t i = 0; i < n; i++)
    x[i] = offset + scale * test_urand(s);
}

static void fill_lin(struct ex_linear *l, uint64_t *s) {
  fill(l->w, l->n_out * l->n_in, 1.0f / sqrtf((float)l->n_in), 0, s);
  if (l->rank) {
    fill(l->lora_a, l->rank * l->n_in, 1.0f / sqrtf((float)l->n_in), 0, s);
    fill(l->lora_b, l->n_out * l->rank, 0.5f, 0, s);
  }
}

int test_qwen35_random_model(const struct ex_qwen35_config *cfg, uint64_t seed, size_t lora_rank,
                             struct ex_qwen35_model **ret_model) {
  struct ex_qwen35_model *m = NULL;
  int r = ex_qwen35_model_alloc(cfg, lora_rank, &m);
  if (r)
    return r;
  uint64_t s = seed * 2654435761u + 0x1234567ull;
  const struct ex_qwen35_config *c = cfg;
  size_t h = (size_t)c->hidden_size;
  fill(m->embed, (size_t)c->vocab_size * h, 1.0f, 0, &s);
  if (!c->tied)
    fill((float *)m->lm_head, (size_t)c->vocab_size * h, 0.2f, 0, &s);
  fill(m->final_norm, h, 0.3f, 0, &s);
  for (int i = 0; i < c->n_layers; i++) {
    struct ex_qwen35_layer *l = &m->layers[i];
    fill(l->input_norm, h, 0.3f, 0, &s);
    fill(l->post_norm, h, 0.3f, 0, &s);
    fill_lin(&l->gate, &s);
    fill_lin(&l->up, &s);
    fill_lin(&l->down, &s);
    if (l->full_attn) {
      fill_lin(&l->q, &s);
      fill_lin(&l->k, &s);
      fill_lin(&l->v, &s);
      fill_lin(&l->o, &s);
      fill(l->q_norm, (size_t)c->head_dim, 0.3f, 0, &s);
      fill(l->k_norm, (size_t)c->head_dim, 0.3f, 0, &s);
    } else {
      fill_lin(&l->qkv, &s);
      fill_lin(&l->z, &s);
      fill_lin(&l->b, &s);
      fill_lin(&l->a, &s);
      fill_lin(&l->out, &s);
      size_t cd = l->qkv.n_out * (size_t)c->conv_kernel;
      fill(l->conv, cd, 0.5f, 0, &s);
      for (int j = 0; j < c->lin_v_heads; j++) {
        l->a_log[j] = logf(1.0f + 7.5f * (test_urand(&s) + 1.0f));
        l->dt_bias[j] = 1.0f + 0.5f * test_urand(&s);
      }
      fill(l->gdn_norm, (size_t)c->lin_dv, 0.3f, 1.0f, &s);
    }
  }
  if (lora_rank)
    m->lora_scale = 2.0f;
  *ret_model = m;
  return 0;
}
