/* Parsing of the Hugging Face Qwen3.5 config.json into struct ex_qwen35_config (see ex_qwen35.h).
 * Values come from text_config when present, else from the top level (text-only configs); rotary
 * settings from rope_parameters, with the older top-level rope_theta / rope_scaling as fallback. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "ex_qwen35.h"

static json_object *get(json_object *o, const char *key) {
  json_object *v = NULL;
  if (o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, key, &v))
    return v;
  return NULL;
}

/* Reads a positive int from the first object that has the key. */
static int get_int(json_object *o, json_object *fallback, const char *key, int *ret,
                   struct cm_diag *diag) {
  json_object *v = get(o, key);
  if (!v)
    v = get(fallback, key);
  if (!v)
    return cm_diag_set(diag, -CM_EMISSING, "config: key \"%s\" missing", key);
  if (!json_object_is_type(v, json_type_int))
    return cm_diag_set(diag, -CM_EFORMAT, "config: \"%s\" is not an integer", key);
  int64_t x = json_object_get_int64(v);
  if (x <= 0 || x > (1 << 24))
    return cm_diag_set(diag, -CM_EFORMAT, "config: \"%s\" = %lld out of range", key, (long long)x);
  *ret = (int)x;
  return 0;
}

static bool get_double(json_object *o, const char *key, double *ret) {
  json_object *v = get(o, key);
  if (!v || !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
    return false;
  *ret = json_object_get_double(v);
  return true;
}

static int32_t get_id(json_object *top, json_object *text, const char *key) {
  json_object *v = get(top, key);
  if (!v)
    v = get(text, key);
  if (!v || !json_object_is_type(v, json_type_int))
    return -1;
  return (int32_t)json_object_get_int64(v);
}

int ex_qwen35_config_parse(json_object *cfg, struct ex_qwen35_config *ret_cfg,
                           struct cm_diag *diag) {
  struct ex_qwen35_config c;
  memset(&c, 0, sizeof(c));
  if (!cfg || !json_object_is_type(cfg, json_type_object))
    return cm_diag_set(diag, -CM_EFORMAT, "config: not a JSON object");
  json_object *text = get(cfg, "text_config");
  if (!text)
    text = cfg;
  int r;
  if ((r = get_int(text, NULL, "vocab_size", &c.vocab_size, diag)) ||
      (r = get_int(text, NULL, "hidden_size", &c.hidden_size, diag)) ||
      (r = get_int(text, NULL, "intermediate_size", &c.intermediate_size, diag)) ||
      (r = get_int(text, NULL, "num_hidden_layers", &c.n_layers, diag)) ||
      (r = get_int(text, NULL, "num_attention_heads", &c.n_heads, diag)) ||
      (r = get_int(text, NULL, "num_key_value_heads", &c.n_kv_heads, diag)) ||
      (r = get_int(text, NULL, "head_dim", &c.head_dim, diag)) ||
      (r = get_int(text, NULL, "linear_num_key_heads", &c.lin_k_heads, diag)) ||
      (r = get_int(text, NULL, "linear_num_value_heads", &c.lin_v_heads, diag)) ||
      (r = get_int(text, NULL, "linear_key_head_dim", &c.lin_dk, diag)) ||
      (r = get_int(text, NULL, "linear_value_head_dim", &c.lin_dv, diag)) ||
      (r = get_int(text, NULL, "linear_conv_kernel_dim", &c.conv_kernel, diag)))
    return r;
  if (c.n_layers > EX_QWEN35_MAX_LAYERS)
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "config: %d layers, at most %d supported",
                       c.n_layers, EX_QWEN35_MAX_LAYERS);
  if (c.n_heads % c.n_kv_heads)
    return cm_diag_set(diag, -CM_EFORMAT,
                       "config: num_attention_heads %d not a multiple of "
                       "num_key_value_heads %d",
                       c.n_heads, c.n_kv_heads);
  if (c.lin_v_heads % c.lin_k_heads)
    return cm_diag_set(diag, -CM_EUNSUPPORTED,
                       "config: linear_num_value_heads %d not a multiple "
                       "of linear_num_key_heads %d",
                       c.lin_v_heads, c.lin_k_heads);
  if (c.conv_kernel < 1 || c.conv_kernel > 16)
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "config: linear_conv_kernel_dim %d unsupported",
                       c.conv_kernel);

  double eps = 1e-6;
  get_double(text, "rms_norm_eps", &eps);
  c.rms_eps = (float)eps;

  json_object *act = get(text, "hidden_act");
  if (act && strcmp(json_object_get_string(act), "silu") != 0)
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "config: hidden_act \"%s\" (only silu)",
                       json_object_get_string(act));
  json_object *bias = get(text, "attention_bias");
  if (bias && json_object_get_boolean(bias))
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "config: attention_bias true is not implemented");

  /* layer kinds */
  json_object *lt = get(text, "layer_types");
  if (lt) {
    if (!json_object_is_type(lt, json_type_array) ||
        json_object_array_length(lt) != (size_t)c.n_layers)
      return cm_diag_set(diag, -CM_EFORMAT, "config: layer_types must list %d layers", c.n_layers);
    for (int i = 0; i < c.n_layers; i++) {
      const char *s = json_object_get_string(json_object_array_get_idx(lt, (size_t)i));
      if (s && strcmp(s, "full_attention") == 0)
        c.full_attn[i] = true;
      else if (s && strcmp(s, "linear_attention") == 0)
        c.full_attn[i] = false;
      else
        return cm_diag_set(diag, -CM_EUNSUPPORTED, "config: layer_types[%d] = \"%s\"", i,
                           s ? s : "(null)");
    }
  } else {
    int interval = 4;
    json_object *fi = get(text, "full_attention_interval");
    if (fi && json_object_is_type(fi, json_type_int) && json_object_get_int(fi) > 0)
      interval = json_object_get_int(fi);
    for (int i = 0; i < c.n_layers; i++)
      c.full_attn[i] = (i + 1) % interval == 0;
  }

  /* rotary */
  json_object *rp = get(text, "rope_parameters");
  if (!rp)
    rp = get(text, "rope_scaling");
  double theta = 0.0;
  if (!get_double(rp, "rope_theta", &theta) && !get_double(text, "rope_theta", &theta))
    return cm_diag_set(diag, -CM_EMISSING, "config: rope_theta missing");
  c.rope_theta = theta;
  double prf = 0.25;
  if (!get_double(rp, "partial_rotary_factor", &prf))
    get_double(text, "partial_rotary_factor", &prf);
  c.rot_dims = (int)((double)c.head_dim * prf);
  json_object *rtype = get(rp, "rope_type");
  if (!rtype)
    rtype = get(rp, "type");
  if (rtype && strcmp(json_object_get_string(rtype), "default") != 0)
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "config: rope_type \"%s\" (only default)",
                       json_object_get_string(rtype));
  json_object *inter = get(rp, "mrope_interleaved");
  if (!inter || !json_object_get_boolean(inter))
    return cm_diag_set(diag, -CM_EUNSUPPORTED,
                       "config: rope_parameters.mrope_interleaved must be true (only the "
                       "interleaved mRoPE layout is implemented)");
  json_object *sec = get(rp, "mrope_section");
  if (!sec || !json_object_is_type(sec, json_type_array) || json_object_array_length(sec) != 3)
    return cm_diag_set(diag, -CM_EFORMAT,
                       "config: rope_parameters.mrope_section must have 3 "
                       "entries");
  int sum = 0;
  for (int i = 0; i < 3; i++) {
    c.mrope_section[i] = json_object_get_int(json_object_array_get_idx(sec, (size_t)i));
    if (c.mrope_section[i] < 0)
      return cm_diag_set(diag, -CM_EFORMAT, "config: negative mrope_section");
    sum += c.mrope_section[i];
  }
  if (c.rot_dims <= 0 || c.rot_dims % 2 || c.rot_dims > c.head_dim || sum != c.rot_dims / 2)
    return cm_diag_set(diag, -CM_EUNSUPPORTED,
                       "config: mrope_section sums to %d, rotary dims "
                       "%d need %d",
                       sum, c.rot_dims, c.rot_dims / 2);

  /* tying: the top-level flag decides for the composite model; else the text config's */
  json_object *tie = get(cfg, "tie_word_embeddings");
  if (!tie)
    tie = get(text, "tie_word_embeddings");
  c.tied = tie && json_object_get_boolean(tie);
  c.image_token_id = get_id(cfg, text, "image_token_id");
  c.vision_start_token_id = get_id(cfg, text, "vision_start_token_id");
  *ret_cfg = c;
  return 0;
}
