/* Unit test of the Qwen3.5 tensor inventory against spec qwen3_5.md §2.5 (counts) and §2.6
 * (shapes) for tiny-A, 4B, 9B and 27B configs, and of the config errors (missing key, layer_types,
 * non-interleaved or mis-sized mRoPE). */
#include "cm_qwen35.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

/* A ConditionalGeneration config; layer_types from full_attention_interval 4 (HF default rule). */
static json_object *config(int H, int I, int L, int Hq, int D, int Hk, int Hv, int dk, int dv,
                           bool tied, int vdepth, int V, int F, int O, const char *mrope) {
  char buf[2048];
  snprintf(buf, sizeof buf,
           "{\"tie_word_embeddings\": %s, \"text_config\": {\"vocab_size\": 248320, "
           "\"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d, "
           "\"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, "
           "\"linear_num_key_heads\": %d, \"linear_num_value_heads\": %d, "
           "\"linear_key_head_dim\": %d, \"linear_value_head_dim\": %d, "
           "\"rope_parameters\": {\"mrope_interleaved\": true, \"mrope_section\": %s, "
           "\"partial_rotary_factor\": 0.25}}, "
           "\"vision_config\": {\"depth\": %d, \"hidden_size\": %d, \"intermediate_size\": %d, "
           "\"num_position_embeddings\": 2304, \"out_hidden_size\": %d}}",
           tied ? "true" : "false", H, I, L, Hq, Hq == 4 ? 2 : 4, D, Hk, Hv, dk, dv, mrope, vdepth,
           V, F, O);
  return json_tokener_parse(buf);
}

static const struct cm_qwen35_tensor *find(const struct cm_qwen35_tensor *l, size_t n,
                                           const char *name) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(l[i].name, name) == 0)
      return &l[i];
  return NULL;
}

static bool shape_is(const struct cm_qwen35_tensor *t, int64_t a, int64_t b) {
  return t && t->n_dims == 2 && t->shape[0] == a && t->shape[1] == b;
}

struct size_case {
  const char *name;
  json_object *cfg;
  size_t text, vision;                  /* §2.5 */
  int64_t q[2], qkv[2], z[2], down[2];  /* §2.6: q_proj, in_proj_qkv, in_proj_z, down_proj */
  int64_t vqkv[2], mfc1[2], mfc2[2];    /* vision qkv, merger fc1, merger fc2 */
};

int main(void) {
  const char *m11 = "[11, 11, 10]";
  struct size_case cases[] = {
      {"tiny-A", config(64, 96, 4, 4, 64, 2, 4, 16, 24, false, 2, 48, 96, 64, "[3, 3, 2]"), 56, 33,
       {512, 64}, {160, 64}, {96, 64}, {64, 96}, {144, 48}, {192, 192}, {64, 192}},
      {"4B", config(2560, 9216, 32, 16, 256, 16, 32, 128, 128, true, 24, 1024, 4096, 2560, m11),
       426, 297, {8192, 2560}, {8192, 2560}, {4096, 2560}, {2560, 9216}, {3072, 1024},
       {4096, 4096}, {2560, 4096}},
      {"9B", config(4096, 12288, 32, 16, 256, 16, 32, 128, 128, false, 27, 1152, 4304, 4096, m11),
       427, 333, {8192, 4096}, {8192, 4096}, {4096, 4096}, {4096, 12288}, {3456, 1152},
       {4608, 4608}, {4096, 4608}},
      {"27B", config(5120, 17408, 64, 24, 256, 16, 48, 128, 128, false, 27, 1152, 4304, 5120, m11),
       851, 333, {12288, 5120}, {10240, 5120}, {6144, 5120}, {5120, 17408}, {3456, 1152},
       {4608, 4608}, {5120, 4608}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    struct size_case *k = &cases[c];
    struct cm_qwen35_dims d;
    struct cm_diag diag = {0};
    CHECK(k->cfg != NULL);
    int rc = cm_qwen35_dims_read(k->cfg, "config.json", &d, &diag);
    if (rc) {
      fprintf(stderr, "%s: %s\n", k->name, diag.msg);
      failures++;
      continue;
    }
    struct cm_qwen35_tensor *l = NULL, *lt = NULL;
    size_t n = 0, nt = 0;
    CHECK(cm_qwen35_inventory(&d, true, &l, &n) == 0);
    CHECK(cm_qwen35_inventory(&d, false, &lt, &nt) == 0);
    if (nt != k->text || n != k->text + k->vision) {
      fprintf(stderr, "%s: %zu text + %zu vision, want %zu + %zu\n", k->name, nt, n - nt, k->text,
              k->vision);
      failures++;
    }
    const char *P = "model.language_model.layers.";
    char name[128];
    int full = d.n_layers == 4 ? 3 : 7; /* a full-attention layer (i % 4 == 3) */
    snprintf(name, sizeof name, "%s%d.self_attn.q_proj.weight", P, full);
    CHECK(shape_is(find(l, n, name), k->q[0], k->q[1]));
    snprintf(name, sizeof name, "%s0.linear_attn.in_proj_qkv.weight", P);
    CHECK(shape_is(find(l, n, name), k->qkv[0], k->qkv[1]));
    snprintf(name, sizeof name, "%s1.linear_attn.in_proj_z.weight", P);
    CHECK(shape_is(find(l, n, name), k->z[0], k->z[1]));
    snprintf(name, sizeof name, "%s2.mlp.down_proj.weight", P);
    CHECK(shape_is(find(l, n, name), k->down[0], k->down[1]));
    CHECK(shape_is(find(l, n, "model.visual.blocks.1.attn.qkv.weight"), k->vqkv[0], k->vqkv[1]));
    CHECK(shape_is(find(l, n, "model.visual.merger.linear_fc1.weight"), k->mfc1[0], k->mfc1[1]));
    CHECK(shape_is(find(l, n, "model.visual.merger.linear_fc2.weight"), k->mfc2[0], k->mfc2[1]));
    CHECK((find(l, n, "lm_head.weight") == NULL) == d.tied);
    snprintf(name, sizeof name, "%s0.linear_attn.A_log", P);
    CHECK(find(l, n, name) && find(l, n, name)->f32_ok);
    snprintf(name, sizeof name, "%s0.linear_attn.conv1d.weight", P);
    const struct cm_qwen35_tensor *cv = find(l, n, name);
    CHECK(cv && cv->n_dims == 3 && cv->shape[0] == k->qkv[0] && cv->shape[1] == 1 &&
          cv->shape[2] == 4);
    CHECK(find(l, n, "model.visual.patch_embed.proj.weight")->n_dims == 5);
    free(l);
    free(lt);
    cm_qwen35_dims_fini(&d);
    json_object_put(k->cfg);
  }

  /* config errors: one message naming the file and key */
  struct {
    const char *json, *msg;
  } bad[] = {
      {"{\"text_config\": {}}", "c.json: key 'text_config.vocab_size' missing"},
      {"{\"vocab_size\": 8, \"hidden_size\": 0}", "c.json: key 'hidden_size' must be a positive integer"},
      {"{\"vocab_size\": 8, \"hidden_size\": 4, \"intermediate_size\": 4, \"num_hidden_layers\": 2, "
       "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"linear_num_key_heads\": 1, "
       "\"linear_num_value_heads\": 2, \"linear_key_head_dim\": 4, \"linear_value_head_dim\": 4, "
       "\"layer_types\": [\"linear_attention\"]}",
       "c.json: key 'layer_types' must list num_hidden_layers = 2 entries"},
      {"{\"vocab_size\": 8, \"hidden_size\": 4, \"intermediate_size\": 4, \"num_hidden_layers\": 1, "
       "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"linear_num_key_heads\": 1, "
       "\"linear_num_value_heads\": 2, \"linear_key_head_dim\": 4, \"linear_value_head_dim\": 4, "
       "\"head_dim\": 64, \"rope_parameters\": {\"mrope_interleaved\": false}}",
       "c.json: key 'rope_parameters.mrope_interleaved' must be true (only interleaved mRoPE is "
       "implemented)"},
      {"{\"vocab_size\": 8, \"hidden_size\": 4, \"intermediate_size\": 4, \"num_hidden_layers\": 1, "
       "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"linear_num_key_heads\": 1, "
       "\"linear_num_value_heads\": 2, \"linear_key_head_dim\": 4, \"linear_value_head_dim\": 4, "
       "\"head_dim\": 64, \"rope_scaling\": {\"mrope_interleaved\": true, \"mrope_section\": [3, 3, 3]}}",
       "c.json: key 'rope_scaling.mrope_section' sums to 9, rotary dims / 2 is 8"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    json_object *c = json_tokener_parse(bad[i].json);
    struct cm_qwen35_dims d;
    struct cm_diag diag = {0};
    CHECK(c != NULL);
    int rc = cm_qwen35_dims_read(c, "c.json", &d, &diag);
    if (rc == 0 || !diag.msg || strcmp(diag.msg, bad[i].msg) != 0) {
      fprintf(stderr, "bad config %zu: got %s\n  want %s\n", i, diag.msg ? diag.msg : "(ok)",
              bad[i].msg);
      failures++;
      if (rc == 0)
        cm_qwen35_dims_fini(&d);
    }
    cm_diag_fini(&diag);
    json_object_put(c);
  }
  if (failures)
    fprintf(stderr, "%d failures\n", failures);
  return failures ? 1 : 0;
}
