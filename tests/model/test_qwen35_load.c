/* Loading Qwen3.5 text weights: a random model written with the safetensors writer (BF16 in the
 * ConditionalGeneration layout, F32 in the CausalLM layout) loads back to the same float32 values
 * and the same forward; a kept LoRA adapter equals the merged weights; missing, misshapen and
 * extra tensors are refused with the tensor named; config.json parsing accepts tiny-A and refuses
 * non-interleaved mRoPE and bad sections. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cm_safetensors.h"
#include "qwen35_testmodel.h"

static int failures;
static char tmpdir[] = "/tmp/s1_qwen35_load_XXXXXX";

#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("FAIL " __VA_ARGS__);                                                                 \
      printf("\n");                                                                                \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

struct item {
  char name[128];   /* key */
  const float *src; /* float32 values */
  int n_dims;       /* dims */
  int64_t shape[3]; /* sizes */
};

struct plan {
  struct item items[128]; /* tensors to write */
  size_t n;               /* count */
  void *bufs[128];        /* converted bytes */
};

static void add(struct plan *p, const char *prefix, const char *rel, const float *src, int nd,
                int64_t a, int64_t b, int64_t c) {
  struct item *it = &p->items[p->n++];
  int w = snprintf(it->name, sizeof(it->name), "%s%s", prefix, rel);
  if (w < 0 || (size_t)w >= sizeof(it->name))
    abort(); /* a tensor name longer than the plan holds: the test itself is wrong */
  it->src = src;
  it->n_dims = nd;
  it->shape[0] = a;
  it->shape[1] = b;
  it->shape[2] = c;
}

static void add_lin(struct plan *p, const char *prefix, int layer, const char *name,
                    const struct ex_linear *l) {
  char rel[128];
  snprintf(rel, sizeof(rel), "layers.%d.%s.weight", layer, name);
  add(p, prefix, rel, l->w, 2, (int64_t)l->n_out, (int64_t)l->n_in, 0);
}

static void model_plan(const struct ex_qwen35_model *m, const char *prefix, struct plan *p) {
  const struct ex_qwen35_config *c = &m->cfg;
  p->n = 0;
  add(p, prefix, "embed_tokens.weight", m->embed, 2, c->vocab_size, c->hidden_size, 0);
  add(p, prefix, "norm.weight", m->final_norm, 1, c->hidden_size, 0, 0);
  if (!c->tied)
    add(p, "", "lm_head.weight", m->lm_head, 2, c->vocab_size, c->hidden_size, 0);
  for (int i = 0; i < c->n_layers; i++) {
    const struct ex_qwen35_layer *l = &m->layers[i];
    char rel[128];
#define R(x) (snprintf(rel, sizeof(rel), "layers.%d.%s", i, x), rel)
    add(p, prefix, R("input_layernorm.weight"), l->input_norm, 1, c->hidden_size, 0, 0);
    add(p, prefix, R("post_attention_layernorm.weight"), l->post_norm, 1, c->hidden_size, 0, 0);
    add_lin(p, prefix, i, "mlp.gate_proj", &l->gate);
    add_lin(p, prefix, i, "mlp.up_proj", &l->up);
    add_lin(p, prefix, i, "mlp.down_proj", &l->down);
    if (l->full_attn) {
      add_lin(p, prefix, i, "self_attn.q_proj", &l->q);
      add_lin(p, prefix, i, "self_attn.k_proj", &l->k);
      add_lin(p, prefix, i, "self_attn.v_proj", &l->v);
      add_lin(p, prefix, i, "self_attn.o_proj", &l->o);
      add(p, prefix, R("self_attn.q_norm.weight"), l->q_norm, 1, c->head_dim, 0, 0);
      add(p, prefix, R("self_attn.k_norm.weight"), l->k_norm, 1, c->head_dim, 0, 0);
    } else {
      add_lin(p, prefix, i, "linear_attn.in_proj_qkv", &l->qkv);
      add_lin(p, prefix, i, "linear_attn.in_proj_z", &l->z);
      add_lin(p, prefix, i, "linear_attn.in_proj_b", &l->b);
      add_lin(p, prefix, i, "linear_attn.in_proj_a", &l->a);
      add_lin(p, prefix, i, "linear_attn.out_proj", &l->out);
      add(p, prefix, R("linear_attn.conv1d.weight"), l->conv, 3, (int64_t)l->qkv.n_out, 1,
          c->conv_kernel);
      add(p, prefix, R("linear_attn.A_log"), l->a_log, 1, c->lin_v_heads, 0, 0);
      add(p, prefix, R("linear_attn.dt_bias"), l->dt_bias, 1, c->lin_v_heads, 0, 0);
      add(p, prefix, R("linear_attn.norm.weight"), l->gdn_norm, 1, c->lin_dv, 0, 0);
    }
#undef R
  }
}

/* Writes the plan; skip = index to leave out (or -1); bad_shape = index written one row short. */
static int write_plan(struct plan *p, const char *path, enum cm_dtype dt, long skip, long bad_shape,
                      const char *extra) {
  struct cm_safetensors_writer *w = NULL;
  struct cm_diag diag = {0};
  if (cm_safetensors_writer_new(&w))
    return -ENOMEM;
  for (size_t i = 0; i < p->n; i++) {
    struct item *it = &p->items[i];
    p->bufs[i] = NULL;
    if ((long)i == skip)
      continue;
    int64_t shape[3] = {it->shape[0], it->shape[1], it->shape[2]};
    size_t n = 1;
    for (int d = 0; d < it->n_dims; d++)
      n *= (size_t)shape[d];
    if ((long)i == bad_shape)
      shape[0] -= 1;
    size_t nw = 1;
    for (int d = 0; d < it->n_dims; d++)
      nw *= (size_t)shape[d];
    if (dt == CM_DTYPE_BF16) {
      uint16_t *b = malloc(n * 2);
      for (size_t j = 0; j < n; j++)
        b[j] = cm_f32_to_bf16(it->src[j]);
      p->bufs[i] = b;
    } else {
      float *b = malloc(n * 4);
      memcpy(b, it->src, n * 4);
      p->bufs[i] = b;
    }
    (void)nw;
    cm_safetensors_writer_add(w, it->name, dt, it->n_dims, shape, p->bufs[i]);
  }
  static const float extra_val[1] = {1};
  int64_t one = 1;
  if (extra)
    cm_safetensors_writer_add(w, extra, CM_DTYPE_F32, 1, &one, extra_val);
  int r = cm_safetensors_writer_finish(w, path, &diag);
  cm_safetensors_writer_free(w);
  for (size_t i = 0; i < p->n; i++)
    free(p->bufs[i]);
  cm_diag_fini(&diag);
  return r;
}

static int load(const struct ex_qwen35_config *cfg, const char *path, const char *adapter,
                float scale, struct ex_qwen35_model **ret, struct cm_diag *diag) {
  struct cm_safetensors *st = NULL, *ad = NULL;
  int r = cm_safetensors_open(path, &st, diag);
  if (!r && adapter)
    r = cm_safetensors_open(adapter, &ad, diag);
  if (!r)
    r = ex_qwen35_model_load(cfg, st, ad, scale, ret, diag);
  cm_safetensors_close(st);
  cm_safetensors_close(ad);
  return r;
}

static float *forward(struct ex_qwen35_model *m, size_t n) {
  size_t h = (size_t)m->cfg.hidden_size;
  int32_t tok[80];
  for (size_t i = 0; i < n; i++)
    tok[i] = (int32_t)((i * 37 + 5) % (size_t)m->cfg.vocab_size);
  float *emb = malloc(n * h * 4), *hid = malloc(n * h * 4);
  struct ex_qwen35_state *st = NULL;
  struct cm_diag diag = {0};
  if (ex_qwen35_state_new(m, &st) || ex_qwen35_embed(m, tok, n, emb, &diag) ||
      ex_qwen35_forward(m, st, emb, NULL, n, hid, &diag))
    exit(1);
  ex_qwen35_state_free(st);
  free(emb);
  return hid;
}

static void round_model(struct ex_qwen35_model *m) {
  struct plan p;
  model_plan(m, "", &p);
  for (size_t i = 0; i < p.n; i++) {
    size_t n = 1;
    for (int d = 0; d < p.items[i].n_dims; d++)
      n *= (size_t)p.items[i].shape[d];
    float *x = (float *)p.items[i].src;
    for (size_t j = 0; j < n; j++)
      x[j] = cm_bf16_to_f32(cm_f32_to_bf16(x[j]));
  }
}

static void test_round_trip(void) {
  struct ex_qwen35_config cfg;
  struct ex_qwen35_model *m = NULL, *got = NULL;
  struct cm_diag diag = {0};
  char path[256];
  test_qwen35_tiny_config(&cfg, 97, 4, false);
  test_qwen35_random_model(&cfg, 5, 0, &m);
  round_model(m);
  struct plan p;
  model_plan(m, "model.language_model.", &p);
  snprintf(path, sizeof(path), "%s/w.safetensors", tmpdir);
  EXPECT(write_plan(&p, path, CM_DTYPE_BF16, -1, -1, "model.visual.blocks.0.norm1.weight") == 0,
         "write bf16");
  int r = load(&cfg, path, NULL, 0, &got, &diag);
  EXPECT(r == 0, "load bf16: %s", diag.msg ? diag.msg : "");
  if (!r) {
    float *a = forward(m, 33), *b = forward(got, 33);
    EXPECT(memcmp(a, b, 33 * 64 * 4) == 0, "bf16 round trip forward differs");
    free(a), free(b);
    ex_qwen35_model_free(got);
  }
  /* CausalLM layout, F32 */
  model_plan(m, "model.", &p);
  EXPECT(write_plan(&p, path, CM_DTYPE_F32, -1, -1, NULL) == 0, "write f32");
  r = load(&cfg, path, NULL, 0, &got, &diag);
  EXPECT(r == 0, "load f32 causal: %s", diag.msg ? diag.msg : "");
  if (!r)
    ex_qwen35_model_free(got);
  /* refusals: a missing tensor, a short one, an extra layer tensor, an untied head missing */
  struct {
    long skip, bad;
    const char *extra;
    int code;
    const char *needle;
  } cases[] = {
      {5, -1, NULL, -CM_EMISSING, p.items[5].name},
      {-1, 7, NULL, -CM_ESHAPE, p.items[7].name},
      {-1, -1, "model.layers.2.linear_attn.bogus", -CM_ESHAPE, "text tensors"},
      {2, -1, NULL, -CM_EMISSING, "lm_head.weight"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct cm_diag d = {0};
    model_plan(m, "model.", &p);
    char needle[160];
    snprintf(needle, sizeof(needle), "%s", cases[i].needle);
    write_plan(&p, path, CM_DTYPE_F32, cases[i].skip, cases[i].bad, cases[i].extra);
    r = load(&cfg, path, NULL, 0, &got, &d);
    EXPECT(r == cases[i].code && d.msg && strstr(d.msg, needle), "refusal %zu: rc %d msg %s", i, r,
           d.msg ? d.msg : "(none)");
    if (!r)
      ex_qwen35_model_free(got);
    cm_diag_fini(&d);
  }
  ex_qwen35_model_free(m);
  cm_diag_fini(&diag);
}

static void test_lora(void) {
  /* a model with rank-4 factors; the adapter file holds them under canonical keys; loading
   * base + adapter must equal (a) the in-memory model and (b) merged weights, within fp32 */
  struct ex_qwen35_config cfg;
  struct ex_qwen35_model *m = NULL, *got = NULL, *merged = NULL;
  struct cm_diag diag = {0};
  char path[256], apath[256];
  test_qwen35_tiny_config(&cfg, 97, 4, true);
  test_qwen35_random_model(&cfg, 6, 4, &m);
  test_qwen35_random_model(&cfg, 6, 4, &merged); /* same draws; factors folded below */
  struct plan p;
  model_plan(m, "model.language_model.", &p);
  snprintf(path, sizeof(path), "%s/base.safetensors", tmpdir);
  snprintf(apath, sizeof(apath), "%s/adapter.safetensors", tmpdir);
  write_plan(&p, path, CM_DTYPE_F32, -1, -1, NULL);
  struct cm_safetensors_writer *w = NULL;
  cm_safetensors_writer_new(&w);
  size_t n_fact = 0;
  for (int i = 0; i < cfg.n_layers; i++) {
    struct ex_qwen35_layer *l = &m->layers[i], *lm = &merged->layers[i];
    struct ex_linear *ls[] = {&l->gate, &l->up,  &l->down, &l->q, &l->k, &l->v,
                              &l->o,    &l->qkv, &l->z,    &l->b, &l->a, &l->out};
    struct ex_linear *lms[] = {&lm->gate, &lm->up,  &lm->down, &lm->q, &lm->k, &lm->v,
                               &lm->o,    &lm->qkv, &lm->z,    &lm->b, &lm->a, &lm->out};
    const char *names[] = {"mlp.gate_proj",         "mlp.up_proj",
                           "mlp.down_proj",         "self_attn.q_proj",
                           "self_attn.k_proj",      "self_attn.v_proj",
                           "self_attn.o_proj",      "linear_attn.in_proj_qkv",
                           "linear_attn.in_proj_z", "linear_attn.in_proj_b",
                           "linear_attn.in_proj_a", "linear_attn.out_proj"};
    for (size_t j = 0; j < 12; j++) {
      struct ex_linear *x = ls[j];
      if (!x->w)
        continue;
      lms[j]->rank = 0;
      /* only some projections carry an adapter: drop the others from m */
      if ((i + j) % 3 == 2) {
        x->rank = 0;
        continue;
      }
      char key[160];
      int64_t sa[2] = {(int64_t)x->rank, (int64_t)x->n_in};
      int64_t sb[2] = {(int64_t)x->n_out, (int64_t)x->rank};
      snprintf(key, sizeof(key), "model.language_model.layers.%d.%s.lora_A", i, names[j]);
      cm_safetensors_writer_add(w, key, CM_DTYPE_F32, 2, sa, x->lora_a);
      snprintf(key, sizeof(key), "model.language_model.layers.%d.%s.lora_B", i, names[j]);
      cm_safetensors_writer_add(w, key, CM_DTYPE_F32, 2, sb, x->lora_b);
      n_fact += 2;
      for (size_t o = 0; o < x->n_out; o++)
        for (size_t in = 0; in < x->n_in; in++) {
          double s = 0;
          for (size_t r = 0; r < x->rank; r++)
            s += (double)x->lora_b[o * x->rank + r] * x->lora_a[r * x->n_in + in];
          lms[j]->w[o * x->n_in + in] = (float)(x->w[o * x->n_in + in] + m->lora_scale * s);
        }
    }
  }
  int r = cm_safetensors_writer_finish(w, apath, &diag);
  cm_safetensors_writer_free(w);
  EXPECT(r == 0 && n_fact > 0, "adapter write");
  r = load(&cfg, path, apath, m->lora_scale, &got, &diag);
  EXPECT(r == 0, "load with adapter: %s", diag.msg ? diag.msg : "");
  if (!r) {
    float *a = forward(m, 40), *b = forward(got, 40), *c = forward(merged, 40);
    double e1 = test_rel_err(b, a, 40 * 64), e2 = test_rel_err(b, c, 40 * 64);
    EXPECT(e1 <= 1e-6, "kept adapter vs in-memory: %.3e", e1);
    EXPECT(e2 <= 1e-5, "kept adapter vs merged: %.3e", e2);
    printf("lora kept vs in-memory %.3e, kept vs merged %.3e\n", e1, e2);
    free(a), free(b), free(c);
    ex_qwen35_model_free(got);
  }
  ex_qwen35_model_free(m);
  ex_qwen35_model_free(merged);
  cm_diag_fini(&diag);
}

static const char *tiny_a_json =
    "{\"architectures\":[\"Qwen3_5ForConditionalGeneration\"],\"model_type\":\"qwen3_5\","
    "\"image_token_id\":248056,\"vision_start_token_id\":248053,\"tie_word_embeddings\":false,"
    "\"text_config\":{\"vocab_size\":248320,\"hidden_size\":64,\"intermediate_size\":96,"
    "\"num_hidden_layers\":4,\"layer_types\":[\"linear_attention\",\"linear_attention\","
    "\"linear_attention\",\"full_attention\"],\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"head_dim\":64,\"linear_num_key_heads\":2,"
    "\"linear_num_value_heads\":4,\"linear_key_head_dim\":16,\"linear_value_head_dim\":24,"
    "\"linear_conv_kernel_dim\":4,\"hidden_act\":\"silu\",\"rms_norm_eps\":1e-6,"
    "\"attention_bias\":false,\"partial_rotary_factor\":0.25,"
    "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000000,"
    "\"partial_rotary_factor\":0.25,\"mrope_interleaved\":%s,\"mrope_section\":[3,3,%d]}}}";

static int parse(const char *inter, int last, struct ex_qwen35_config *c, struct cm_diag *d) {
  char buf[2048];
  snprintf(buf, sizeof(buf), tiny_a_json, inter, last);
  json_object *o = json_tokener_parse(buf);
  int r = ex_qwen35_config_parse(o, c, d);
  json_object_put(o);
  return r;
}

static void test_config(void) {
  struct ex_qwen35_config c;
  struct cm_diag d = {0};
  int r = parse("true", 2, &c, &d);
  EXPECT(r == 0, "tiny-A config: %s", d.msg ? d.msg : "");
  EXPECT(c.vocab_size == 248320 && c.rot_dims == 16 && c.full_attn[3] && !c.full_attn[2] &&
             c.lin_dv == 24 && !c.tied && c.image_token_id == 248056 && c.rope_theta == 1e7 &&
             c.mrope_section[1] == 3,
         "tiny-A fields");
  cm_diag_fini(&d);
  r = parse("false", 2, &c, &d);
  EXPECT(r == -CM_EUNSUPPORTED && strstr(d.msg, "mrope_interleaved"), "non-interleaved refused");
  cm_diag_fini(&d);
  r = parse("true", 3, &c, &d);
  EXPECT(r == -CM_EUNSUPPORTED && strstr(d.msg, "mrope_section"), "bad section sum refused");
  cm_diag_fini(&d);
}

int main(void) {
  if (!mkdtemp(tmpdir))
    return 1;
  test_config();
  test_round_trip();
  test_lora();
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
  if (system(cmd) != 0)
    return 1;
  if (failures) {
    printf("%d failures\n", failures);
    return 1;
  }
  printf("ok\n");
  return 0;
}
