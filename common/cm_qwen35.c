/* Qwen3.5 tensor inventory from config.json and the weights check (see cm_qwen35.h).
 * Names and shapes follow spec qwen3_5.md §2.3-2.5; the key layout is the ConditionalGeneration one
 * (model.language_model.*, model.visual.*, lm_head.weight). */
#include "cm_qwen35.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cm_shape_str(const int64_t *shape, int n_dims, char *buf, size_t n_buf) {
  size_t at = 0;
  at += (size_t)snprintf(buf, n_buf, "[");
  for (int i = 0; i < n_dims && at < n_buf; i++)
    at += (size_t)snprintf(buf + at, n_buf - at, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (at < n_buf)
    snprintf(buf + at, n_buf - at, "]");
}

/* Reads obj[key] as an integer > 0 into *ret; absent -> def (or an error when def < 0). */
static int get_dim(json_object *obj, const char *prefix, const char *key, int64_t def,
                   const char *file, int64_t *ret, struct cm_diag *diag) {
  json_object *v;
  if (!obj || !json_object_object_get_ex(obj, key, &v)) {
    if (def < 0)
      return cm_diag_set(diag, -CM_EMISSING, "%s: key '%s%s' missing", file, prefix, key);
    *ret = def;
    return 0;
  }
  if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) <= 0 ||
      json_object_get_int64(v) > ((int64_t)1 << 40))
    return cm_diag_set(diag, -CM_EFORMAT, "%s: key '%s%s' must be a positive integer", file,
                       prefix, key);
  *ret = json_object_get_int64(v);
  return 0;
}

static bool get_bool(json_object *obj, const char *key, bool *ret) {
  json_object *v;
  if (!obj || !json_object_object_get_ex(obj, key, &v) || !json_object_is_type(v, json_type_boolean))
    return false;
  *ret = json_object_get_boolean(v);
  return true;
}

void cm_qwen35_dims_fini(struct cm_qwen35_dims *dims) {
  if (!dims)
    return;
  free(dims->is_full);
  dims->is_full = NULL;
}

int cm_qwen35_dims_read(json_object *config, const char *file, struct cm_qwen35_dims *dims,
                        struct cm_diag *diag) {
  memset(dims, 0, sizeof *dims);
  if (!json_object_is_type(config, json_type_object))
    return cm_diag_set(diag, -CM_EFORMAT, "%s: config is not a JSON object", file);
  json_object *tc = config, *vc = NULL;
  const char *tp = "";
  json_object *v;
  if (json_object_object_get_ex(config, "text_config", &v)) {
    if (!json_object_is_type(v, json_type_object))
      return cm_diag_set(diag, -CM_EFORMAT, "%s: key 'text_config' is not an object", file);
    tc = v;
    tp = "text_config.";
  }
  if (json_object_object_get_ex(config, "vision_config", &vc) &&
      !json_object_is_type(vc, json_type_object))
    return cm_diag_set(diag, -CM_EFORMAT, "%s: key 'vision_config' is not an object", file);
  int rc = 0;
#define DIM(obj, pre, key, def, field)                                                             \
  if (!rc)                                                                                         \
  rc = get_dim(obj, pre, key, def, file, &dims->field, diag)
  DIM(tc, tp, "vocab_size", -1, vocab);
  DIM(tc, tp, "hidden_size", -1, hidden);
  DIM(tc, tp, "intermediate_size", -1, intermediate);
  DIM(tc, tp, "num_hidden_layers", -1, n_layers);
  DIM(tc, tp, "num_attention_heads", -1, n_heads);
  DIM(tc, tp, "num_key_value_heads", -1, n_kv_heads);
  DIM(tc, tp, "head_dim", 256, head_dim);
  DIM(tc, tp, "linear_num_key_heads", -1, lin_k_heads);
  DIM(tc, tp, "linear_num_value_heads", -1, lin_v_heads);
  DIM(tc, tp, "linear_key_head_dim", -1, lin_k_dim);
  DIM(tc, tp, "linear_value_head_dim", -1, lin_v_dim);
  DIM(tc, tp, "linear_conv_kernel_dim", 4, conv_kernel);
  if (vc) {
    dims->has_vision_config = true;
    DIM(vc, "vision_config.", "depth", -1, v_depth);
    DIM(vc, "vision_config.", "hidden_size", -1, v_hidden);
    DIM(vc, "vision_config.", "intermediate_size", -1, v_intermediate);
    DIM(vc, "vision_config.", "in_channels", 3, v_in_channels);
    DIM(vc, "vision_config.", "patch_size", 16, v_patch);
    DIM(vc, "vision_config.", "temporal_patch_size", 2, v_temporal);
    DIM(vc, "vision_config.", "spatial_merge_size", 2, v_merge);
    DIM(vc, "vision_config.", "num_position_embeddings", -1, v_n_pos);
    DIM(vc, "vision_config.", "out_hidden_size", -1, v_out_hidden);
  }
#undef DIM
  if (rc)
    return rc;
  if (dims->n_heads % dims->n_kv_heads || dims->lin_v_heads % dims->lin_k_heads)
    return cm_diag_set(diag, -CM_EFORMAT,
                       "%s: head counts must divide (num_attention_heads %% num_key_value_heads, "
                       "linear_num_value_heads %% linear_num_key_heads)",
                       file);
  dims->is_full = calloc((size_t)dims->n_layers, sizeof *dims->is_full);
  if (!dims->is_full)
    return -ENOMEM;
  json_object *lt;
  if (json_object_object_get_ex(tc, "layer_types", &lt)) {
    if (!json_object_is_type(lt, json_type_array) ||
        (int64_t)json_object_array_length(lt) != dims->n_layers) {
      rc = cm_diag_set(diag, -CM_EFORMAT,
                       "%s: key '%slayer_types' must list num_hidden_layers = %lld entries", file,
                       tp, (long long)dims->n_layers);
      goto fail;
    }
    for (int64_t i = 0; i < dims->n_layers; i++) {
      const char *s = json_object_get_string(json_object_array_get_idx(lt, (size_t)i));
      if (s && strcmp(s, "full_attention") == 0) {
        dims->is_full[i] = true;
      } else if (!s || strcmp(s, "linear_attention") != 0) {
        rc = cm_diag_set(diag, -CM_EFORMAT, "%s: key '%slayer_types[%lld]' is \"%s\"", file, tp,
                         (long long)i, s ? s : "?");
        goto fail;
      }
    }
  } else {
    int64_t every = 4;
    rc = get_dim(tc, tp, "full_attention_interval", 4, file, &every, diag);
    if (rc)
      goto fail;
    for (int64_t i = 0; i < dims->n_layers; i++)
      dims->is_full[i] = (i + 1) % every == 0;
  }
  /* Loader rule 9 (spec §2.7): only interleaved mRoPE whose sections sum to rd / 2. */
  json_object *rope = NULL, *sec, *jf;
  const char *rope_key = "rope_parameters";
  if (!json_object_object_get_ex(tc, rope_key, &rope)) {
    rope_key = "rope_scaling";
    json_object_object_get_ex(tc, rope_key, &rope);
  }
  if (!rope || !json_object_is_type(rope, json_type_object)) {
    rc = cm_diag_set(diag, -CM_EMISSING, "%s: key '%srope_parameters' missing", file, tp);
    goto fail;
  }
  bool interleaved = false;
  if (!get_bool(rope, "mrope_interleaved", &interleaved) || !interleaved) {
    rc = cm_diag_set(diag, -CM_EUNSUPPORTED,
                     "%s: key '%s%s.mrope_interleaved' must be true (only interleaved mRoPE is "
                     "implemented)",
                     file, tp, rope_key);
    goto fail;
  }
  double prf = 0.25;
  if (json_object_object_get_ex(rope, "partial_rotary_factor", &jf) ||
      json_object_object_get_ex(tc, "partial_rotary_factor", &jf))
    prf = json_object_get_double(jf);
  int64_t half_rd = (int64_t)(dims->head_dim * prf) / 2, sum = 0;
  if (!json_object_object_get_ex(rope, "mrope_section", &sec) ||
      !json_object_is_type(sec, json_type_array) || json_object_array_length(sec) != 3) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "%s: key '%s%s.mrope_section' must list 3 sizes", file, tp,
                     rope_key);
    goto fail;
  }
  for (size_t i = 0; i < 3; i++)
    sum += json_object_get_int64(json_object_array_get_idx(sec, i));
  if (sum != half_rd) {
    rc = cm_diag_set(diag, -CM_EFORMAT,
                     "%s: key '%s%s.mrope_section' sums to %lld, rotary dims / 2 is %lld", file, tp,
                     rope_key, (long long)sum, (long long)half_rd);
    goto fail;
  }
  bool tied = false;
  if (!get_bool(config, "tie_word_embeddings", &tied))
    get_bool(tc, "tie_word_embeddings", &tied);
  dims->tied = tied;
  return 0;
fail:
  cm_qwen35_dims_fini(dims);
  return rc;
}

/* Appends one tensor; the shape is given as n values. */
static void add(struct cm_qwen35_tensor *list, size_t *n, bool f32_ok, int n_dims,
                const int64_t *shape, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void add(struct cm_qwen35_tensor *list, size_t *n, bool f32_ok, int n_dims,
                const int64_t *shape, const char *fmt, ...) {
  struct cm_qwen35_tensor *t = &list[(*n)++];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->name, sizeof t->name, fmt, ap);
  va_end(ap);
  t->n_dims = n_dims;
  t->f32_ok = f32_ok;
  memset(t->shape, 0, sizeof t->shape);
  memcpy(t->shape, shape, (size_t)n_dims * sizeof *shape);
}

#define S(...) ((const int64_t[]){__VA_ARGS__})
#define NS(...) (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), S(__VA_ARGS__)

int cm_qwen35_inventory(const struct cm_qwen35_dims *d, bool with_vision,
                        struct cm_qwen35_tensor **ret_list, size_t *ret_n) {
  size_t cap = 3 + 14 * (size_t)d->n_layers + (with_vision ? 9 + 12 * (size_t)d->v_depth : 0);
  struct cm_qwen35_tensor *l = calloc(cap, sizeof *l);
  if (!l)
    return -ENOMEM;
  size_t n = 0;
  const char *P = "model.language_model.";
  const int64_t H = d->hidden, I = d->intermediate, D = d->head_dim;
  const int64_t key_dim = d->lin_k_heads * d->lin_k_dim, value_dim = d->lin_v_heads * d->lin_v_dim;
  const int64_t conv_dim = 2 * key_dim + value_dim, Hv = d->lin_v_heads;
  add(l, &n, false, NS(d->vocab, H), "%sembed_tokens.weight", P);
  for (int64_t i = 0; i < d->n_layers; i++) {
    long long N = (long long)i;
    add(l, &n, false, NS(H), "%slayers.%lld.input_layernorm.weight", P, N);
    add(l, &n, false, NS(H), "%slayers.%lld.post_attention_layernorm.weight", P, N);
    add(l, &n, false, NS(I, H), "%slayers.%lld.mlp.gate_proj.weight", P, N);
    add(l, &n, false, NS(I, H), "%slayers.%lld.mlp.up_proj.weight", P, N);
    add(l, &n, false, NS(H, I), "%slayers.%lld.mlp.down_proj.weight", P, N);
    if (d->is_full[i]) {
      const char *A = "self_attn";
      add(l, &n, false, NS(d->n_heads * D * 2, H), "%slayers.%lld.%s.q_proj.weight", P, N, A);
      add(l, &n, false, NS(d->n_kv_heads * D, H), "%slayers.%lld.%s.k_proj.weight", P, N, A);
      add(l, &n, false, NS(d->n_kv_heads * D, H), "%slayers.%lld.%s.v_proj.weight", P, N, A);
      add(l, &n, false, NS(H, d->n_heads * D), "%slayers.%lld.%s.o_proj.weight", P, N, A);
      add(l, &n, false, NS(D), "%slayers.%lld.%s.q_norm.weight", P, N, A);
      add(l, &n, false, NS(D), "%slayers.%lld.%s.k_norm.weight", P, N, A);
    } else {
      const char *A = "linear_attn";
      add(l, &n, false, NS(conv_dim, H), "%slayers.%lld.%s.in_proj_qkv.weight", P, N, A);
      add(l, &n, false, NS(value_dim, H), "%slayers.%lld.%s.in_proj_z.weight", P, N, A);
      add(l, &n, false, NS(Hv, H), "%slayers.%lld.%s.in_proj_b.weight", P, N, A);
      add(l, &n, false, NS(Hv, H), "%slayers.%lld.%s.in_proj_a.weight", P, N, A);
      add(l, &n, false, NS(conv_dim, 1, d->conv_kernel), "%slayers.%lld.%s.conv1d.weight", P, N,
          A);
      add(l, &n, true, NS(Hv), "%slayers.%lld.%s.A_log", P, N, A);
      add(l, &n, true, NS(Hv), "%slayers.%lld.%s.dt_bias", P, N, A);
      add(l, &n, false, NS(d->lin_v_dim), "%slayers.%lld.%s.norm.weight", P, N, A);
      add(l, &n, false, NS(H, value_dim), "%slayers.%lld.%s.out_proj.weight", P, N, A);
    }
  }
  add(l, &n, false, NS(H), "%snorm.weight", P);
  if (!d->tied)
    add(l, &n, false, NS(d->vocab, H), "lm_head.weight");
  if (with_vision) {
    const char *V = "model.visual.";
    const int64_t Vh = d->v_hidden, F = d->v_intermediate, M = Vh * d->v_merge * d->v_merge;
    add(l, &n, false, NS(Vh, d->v_in_channels, d->v_temporal, d->v_patch, d->v_patch),
        "%spatch_embed.proj.weight", V);
    add(l, &n, false, NS(Vh), "%spatch_embed.proj.bias", V);
    add(l, &n, false, NS(d->v_n_pos, Vh), "%spos_embed.weight", V);
    for (int64_t i = 0; i < d->v_depth; i++) {
      long long B = (long long)i;
      add(l, &n, false, NS(Vh), "%sblocks.%lld.norm1.weight", V, B);
      add(l, &n, false, NS(Vh), "%sblocks.%lld.norm1.bias", V, B);
      add(l, &n, false, NS(Vh), "%sblocks.%lld.norm2.weight", V, B);
      add(l, &n, false, NS(Vh), "%sblocks.%lld.norm2.bias", V, B);
      add(l, &n, false, NS(3 * Vh, Vh), "%sblocks.%lld.attn.qkv.weight", V, B);
      add(l, &n, false, NS(3 * Vh), "%sblocks.%lld.attn.qkv.bias", V, B);
      add(l, &n, false, NS(Vh, Vh), "%sblocks.%lld.attn.proj.weight", V, B);
      add(l, &n, false, NS(Vh), "%sblocks.%lld.attn.proj.bias", V, B);
      add(l, &n, false, NS(F, Vh), "%sblocks.%lld.mlp.linear_fc1.weight", V, B);
      add(l, &n, false, NS(F), "%sblocks.%lld.mlp.linear_fc1.bias", V, B);
      add(l, &n, false, NS(Vh, F), "%sblocks.%lld.mlp.linear_fc2.weight", V, B);
      add(l, &n, false, NS(Vh), "%sblocks.%lld.mlp.linear_fc2.bias", V, B);
    }
    add(l, &n, false, NS(Vh), "%smerger.norm.weight", V);
    add(l, &n, false, NS(Vh), "%smerger.norm.bias", V);
    add(l, &n, false, NS(M, M), "%smerger.linear_fc1.weight", V);
    add(l, &n, false, NS(M), "%smerger.linear_fc1.bias", V);
    add(l, &n, false, NS(d->v_out_hidden, M), "%smerger.linear_fc2.weight", V);
    add(l, &n, false, NS(d->v_out_hidden), "%smerger.linear_fc2.bias", V);
  }
  *ret_list = l;
  *ret_n = n;
  return 0;
}

int cm_qwen35_check(const struct cm_qwen35_dims *dims, bool with_vision,
                    const struct cm_safetensors *weights, const char *file, struct cm_diag *diag) {
  struct cm_qwen35_tensor *list = NULL;
  size_t n = 0;
  int rc = cm_qwen35_inventory(dims, with_vision, &list, &n);
  if (rc)
    return rc;
  char got[160], want[160];
  for (size_t i = 0; i < n && !rc; i++) {
    struct cm_tensor_view v;
    const struct cm_qwen35_tensor *t = &list[i];
    if (cm_safetensors_find(weights, t->name, &v) != 0) {
      rc = cm_diag_set(diag, -CM_EMISSING, "%s: tensor '%s' missing", file, t->name);
      break;
    }
    bool same = v.n_dims == t->n_dims;
    for (int k = 0; same && k < t->n_dims; k++)
      same = v.shape[k] == t->shape[k];
    if (!same) {
      cm_shape_str(v.shape, v.n_dims, got, sizeof got);
      cm_shape_str(t->shape, t->n_dims, want, sizeof want);
      rc = cm_diag_set(diag, -CM_ESHAPE, "%s: tensor '%s' has shape %s, config needs %s", file,
                       t->name, got, want);
    } else if (v.dtype != CM_DTYPE_BF16 && !(t->f32_ok && v.dtype == CM_DTYPE_F32)) {
      rc = cm_diag_set(diag, -CM_EDTYPE, "%s: tensor '%s' has dtype %s, expected BF16%s", file,
                       t->name, cm_dtype_name(v.dtype), t->f32_ok ? " or F32" : "");
    }
  }
  if (!rc && cm_safetensors_count(weights) != n) {
    /* Something extra: name the first tensor the inventory does not know. */
    for (size_t i = 0; i < cm_safetensors_count(weights); i++) {
      struct cm_tensor_view v;
      cm_safetensors_at(weights, i, &v);
      bool known = false;
      for (size_t j = 0; j < n && !known; j++)
        known = strcmp(list[j].name, v.name) == 0;
      if (!known) {
        rc = cm_diag_set(diag, -CM_EFORMAT, "%s: unexpected tensor '%s' (%zu expected, %zu stored)",
                         file, v.name, n, cm_safetensors_count(weights));
        break;
      }
    }
  }
  free(list);
  return rc;
}
