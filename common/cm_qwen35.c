/* The config.json reader, the Qwen3.5 tensor inventory and the weights check (see cm_qwen35.h).
 * Names and shapes follow spec qwen3_5.md §2.3-2.5; the key layout is the ConditionalGeneration one
 * (model.language_model.*, model.visual.*, lm_head.weight). */
#include "cm_qwen35.h"

#include <errno.h>
#include <math.h>
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

static json_object *member(json_object *obj, const char *key) {
  json_object *v = NULL;
  if (obj && json_object_is_type(obj, json_type_object) && json_object_object_get_ex(obj, key, &v))
    return v;
  return NULL;
}

/* obj[key] as a number (int or double) into *ret; false when absent or another type. */
static bool get_number(json_object *obj, const char *key, double *ret) {
  json_object *v = member(obj, key);
  if (!v || !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
    return false;
  *ret = json_object_get_double(v);
  return true;
}

/* A token id from the top level, else the text config; -1 when absent or not an integer. */
static int64_t get_token_id(json_object *top, json_object *text, const char *key) {
  json_object *v = member(top, key);
  if (!v)
    v = member(text, key);
  if (!v || !json_object_is_type(v, json_type_int))
    return -1;
  return json_object_get_int64(v);
}

/* ---------- vision_config ---------- */

/* Messages name the file when there is one: "FILE: vision_config...", else "vision_config...". */
#define VFILE(file) (file) ? (file) : "", (file) ? ": " : ""

static int vision_int(json_object *obj, const char *file, const char *key, bool required,
                      int64_t def, int64_t lo, int64_t hi, int64_t *ret, struct cm_diag *diag) {
  json_object *val;
  if (!json_object_object_get_ex(obj, key, &val) || json_object_is_type(val, json_type_null)) {
    if (required)
      return cm_diag_set(diag, -CM_EMISSING, "%s%svision_config: missing \"%s\"", VFILE(file),
                         key);
    *ret = def;
    return 0;
  }
  if (!json_object_is_type(val, json_type_int))
    return cm_diag_set(diag, -CM_EFORMAT, "%s%svision_config.%s: expected an integer, got %s",
                       VFILE(file), key, json_object_to_json_string(val));
  int64_t x = json_object_get_int64(val);
  if (x < lo || x > hi)
    return cm_diag_set(diag, -CM_EFORMAT, "%s%svision_config.%s = %lld: outside [%lld, %lld]",
                       VFILE(file), key, (long long)x, (long long)lo, (long long)hi);
  *ret = x;
  return 0;
}

/* The keys of vision_config that decide tensor shapes (the inventory's part). */
static int vision_dims(json_object *obj, const char *file, struct cm_qwen35_dims *c,
                       struct cm_diag *diag) {
  int r;
  if ((r = vision_int(obj, file, "depth", true, 0, 0, 256, &c->v_depth, diag)) ||
      (r = vision_int(obj, file, "hidden_size", true, 0, 1, 65536, &c->v_hidden, diag)) ||
      (r = vision_int(obj, file, "intermediate_size", true, 0, 1, 262144, &c->v_intermediate,
                      diag)) ||
      (r = vision_int(obj, file, "out_hidden_size", true, 0, 1, 65536, &c->v_out_hidden, diag)) ||
      (r = vision_int(obj, file, "in_channels", false, 3, 1, 16, &c->v_in_channels, diag)) ||
      (r = vision_int(obj, file, "patch_size", false, 16, 1, 64, &c->v_patch, diag)) ||
      (r = vision_int(obj, file, "temporal_patch_size", false, 2, 1, 16, &c->v_temporal, diag)) ||
      (r = vision_int(obj, file, "spatial_merge_size", false, 2, 1, 8, &c->v_merge, diag)) ||
      (r = vision_int(obj, file, "num_position_embeddings", false, 2304, 1, 1 << 20, &c->v_n_pos,
                      diag)))
    return r;
  c->v_patch_dim = c->v_in_channels * c->v_temporal * c->v_patch * c->v_patch;
  c->has_vision_config = true;
  return 0;
}

static int vision_rope(json_object *obj, double *ret_theta, struct cm_diag *diag) {
  json_object *rp, *val;
  *ret_theta = 10000.0;
  if (!json_object_object_get_ex(obj, "rope_parameters", &rp) ||
      json_object_is_type(rp, json_type_null))
    return 0;
  if (!json_object_is_type(rp, json_type_object))
    return cm_diag_set(diag, -CM_EFORMAT, "vision_config.rope_parameters: expected an object");
  if (json_object_object_get_ex(rp, "rope_type", &val)) {
    const char *t = json_object_get_string(val);
    if (!json_object_is_type(val, json_type_string) || strcmp(t, "axial") != 0)
      return cm_diag_set(diag, -CM_EUNSUPPORTED,
                         "vision_config.rope_parameters.rope_type %s: only \"axial\" is supported",
                         json_object_to_json_string(val));
  }
  if (json_object_object_get_ex(rp, "rope_theta", &val)) {
    if (!json_object_is_type(val, json_type_int) && !json_object_is_type(val, json_type_double))
      return cm_diag_set(diag, -CM_EFORMAT, "vision_config.rope_parameters.rope_theta: expected a "
                                            "number");
    double th = json_object_get_double(val);
    if (!(th > 1.0 && th < 1e12))
      return cm_diag_set(diag, -CM_EFORMAT, "vision_config.rope_parameters.rope_theta = %g: out of "
                                            "range", th);
    *ret_theta = th;
  }
  return 0;
}

int cm_qwen35_vision_read(json_object *obj, struct cm_qwen35_dims *dims, struct cm_diag *diag) {
  struct cm_qwen35_dims c = *dims;
  json_object *val;
  int r;
  if (!obj || !json_object_is_type(obj, json_type_object))
    return cm_diag_set(diag, -CM_EFORMAT, "vision_config: expected a JSON object");
  if (json_object_object_get_ex(obj, "model_type", &val)) {
    const char *t = json_object_get_string(val);
    if (!json_object_is_type(val, json_type_string) ||
        (strcmp(t, "qwen3_5_vision") != 0 && strcmp(t, "qwen3_5") != 0))
      return cm_diag_set(diag, -CM_EUNSUPPORTED, "vision_config.model_type %s: expected "
                         "\"qwen3_5_vision\" or \"qwen3_5\"", json_object_to_json_string(val));
  }
  if ((r = vision_dims(obj, NULL, &c, diag)) ||
      (r = vision_int(obj, NULL, "num_heads", true, 0, 1, 4096, &c.v_num_heads, diag)))
    return r;
  if (c.v_hidden % c.v_num_heads != 0)
    return cm_diag_set(diag, -CM_EFORMAT, "vision_config: hidden_size %lld is not a multiple of "
                       "num_heads %lld", (long long)c.v_hidden, (long long)c.v_num_heads);
  c.v_head_dim = c.v_hidden / c.v_num_heads;
  if (c.v_head_dim % 4 != 0)
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "vision_config: head_dim %lld (hidden_size / "
                       "num_heads) is not a multiple of 4, which the 2-D rotary needs",
                       (long long)c.v_head_dim);
  c.v_pos_side = lround(sqrt((double)c.v_n_pos));
  if (c.v_pos_side * c.v_pos_side != c.v_n_pos)
    return cm_diag_set(diag, -CM_EFORMAT, "vision_config.num_position_embeddings %lld is not a "
                       "square", (long long)c.v_n_pos);
  c.v_gelu_erf = false;
  if (json_object_object_get_ex(obj, "hidden_act", &val)) {
    const char *a = json_object_get_string(val);
    if (json_object_is_type(val, json_type_string) && strcmp(a, "gelu_pytorch_tanh") == 0)
      c.v_gelu_erf = false;
    else if (json_object_is_type(val, json_type_string) && strcmp(a, "gelu") == 0)
      c.v_gelu_erf = true;
    else
      return cm_diag_set(diag, -CM_EUNSUPPORTED, "vision_config.hidden_act %s: supported are "
                         "\"gelu_pytorch_tanh\" and \"gelu\"", json_object_to_json_string(val));
  }
  if (json_object_object_get_ex(obj, "deepstack_visual_indexes", &val) &&
      !json_object_is_type(val, json_type_null) &&
      (!json_object_is_type(val, json_type_array) || json_object_array_length(val) != 0))
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "vision_config.deepstack_visual_indexes %s: "
                       "Qwen3.5 has no deepstack; only [] is supported",
                       json_object_to_json_string(val));
  if ((r = vision_rope(obj, &c.v_rope_theta, diag)))
    return r;
  *dims = c;
  return 0;
}

/* ---------- config.json ---------- */

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
#undef DIM
  if (rc)
    return rc;
  if (vc && (rc = vision_dims(vc, file, dims, diag)))
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
  dims->rot_dims = (int64_t)((double)dims->head_dim * prf);
  int64_t half_rd = dims->rot_dims / 2, sum = 0;
  if (!json_object_object_get_ex(rope, "mrope_section", &sec) ||
      !json_object_is_type(sec, json_type_array) || json_object_array_length(sec) != 3) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "%s: key '%s%s.mrope_section' must list 3 sizes", file, tp,
                     rope_key);
    goto fail;
  }
  for (size_t i = 0; i < 3; i++) {
    dims->mrope_section[i] = json_object_get_int64(json_object_array_get_idx(sec, i));
    sum += dims->mrope_section[i];
  }
  if (sum != half_rd) {
    rc = cm_diag_set(diag, -CM_EUNSUPPORTED,
                     "%s: key '%s%s.mrope_section' sums to %lld, rotary dims / 2 is %lld", file, tp,
                     rope_key, (long long)sum, (long long)half_rd);
    goto fail;
  }
  json_object *rt = member(rope, "rope_type");
  if (!rt)
    rt = member(rope, "type");
  dims->rope_type = rt ? json_object_get_string(rt) : NULL;
  dims->has_rope_theta =
      get_number(rope, "rope_theta", &dims->rope_theta) || get_number(tc, "rope_theta", &dims->rope_theta);
  dims->rms_eps = 1e-6;
  get_number(tc, "rms_norm_eps", &dims->rms_eps);
  json_object *act = member(tc, "hidden_act");
  dims->hidden_act = act ? json_object_get_string(act) : NULL;
  json_object *bias = member(tc, "attention_bias");
  dims->attention_bias = bias && json_object_get_boolean(bias);
  dims->image_token_id = get_token_id(config, tc, "image_token_id");
  dims->vision_start_token_id = get_token_id(config, tc, "vision_start_token_id");
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
