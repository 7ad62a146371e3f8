/* The forward's view of a Qwen3.5 config.json (see ex_qwen35.h): the values are read by the one
 * config reader, cm_qwen35_dims_read (common/cm_qwen35.h: text_config when present, else the top
 * level; rotary settings from rope_parameters, with rope_scaling / top-level rope_theta as
 * fallback); here they are copied into struct ex_qwen35_config and checked against what this
 * forward implements. */
#include <string.h>

#include "cm_qwen35.h"
#include "ex_qwen35.h"

/* The forward's limits on a config value read by cm_qwen35_dims_read: int-sized, positive. */
static int fits(const char *key, int64_t x, int *ret, struct cm_diag *diag) {
  if (x <= 0 || x > (1 << 24))
    return cm_diag_set(diag, -CM_EFORMAT, "config: \"%s\" = %lld out of range", key, (long long)x);
  *ret = (int)x;
  return 0;
}

int ex_qwen35_config_parse(json_object *cfg, struct ex_qwen35_config *ret_cfg,
                           struct cm_diag *diag) {
  struct ex_qwen35_config c;
  memset(&c, 0, sizeof(c));
  if (!cfg || !json_object_is_type(cfg, json_type_object))
    return cm_diag_set(diag, -CM_EFORMAT, "config: not a JSON object");
  struct cm_qwen35_dims d;
  int r = cm_qwen35_dims_read(cfg, "config", &d, diag);
  if (r)
    return r;
  if ((r = fits("vocab_size", d.vocab, &c.vocab_size, diag)) ||
      (r = fits("hidden_size", d.hidden, &c.hidden_size, diag)) ||
      (r = fits("intermediate_size", d.intermediate, &c.intermediate_size, diag)) ||
      (r = fits("num_hidden_layers", d.n_layers, &c.n_layers, diag)) ||
      (r = fits("num_attention_heads", d.n_heads, &c.n_heads, diag)) ||
      (r = fits("num_key_value_heads", d.n_kv_heads, &c.n_kv_heads, diag)) ||
      (r = fits("head_dim", d.head_dim, &c.head_dim, diag)) ||
      (r = fits("linear_num_key_heads", d.lin_k_heads, &c.lin_k_heads, diag)) ||
      (r = fits("linear_num_value_heads", d.lin_v_heads, &c.lin_v_heads, diag)) ||
      (r = fits("linear_key_head_dim", d.lin_k_dim, &c.lin_dk, diag)) ||
      (r = fits("linear_value_head_dim", d.lin_v_dim, &c.lin_dv, diag)) ||
      (r = fits("linear_conv_kernel_dim", d.conv_kernel, &c.conv_kernel, diag)))
    goto out;
  if (c.n_layers > EX_QWEN35_MAX_LAYERS) {
    r = cm_diag_set(diag, -CM_EUNSUPPORTED, "config: %d layers, at most %d supported", c.n_layers,
                    EX_QWEN35_MAX_LAYERS);
    goto out;
  }
  if (c.conv_kernel < 1 || c.conv_kernel > 16) {
    r = cm_diag_set(diag, -CM_EUNSUPPORTED, "config: linear_conv_kernel_dim %d unsupported",
                    c.conv_kernel);
    goto out;
  }
  c.rms_eps = (float)d.rms_eps;
  if (d.hidden_act && strcmp(d.hidden_act, "silu") != 0) {
    r = cm_diag_set(diag, -CM_EUNSUPPORTED, "config: hidden_act \"%s\" (only silu)", d.hidden_act);
    goto out;
  }
  if (d.attention_bias) {
    r = cm_diag_set(diag, -CM_EUNSUPPORTED, "config: attention_bias true is not implemented");
    goto out;
  }
  for (int i = 0; i < c.n_layers; i++)
    c.full_attn[i] = d.is_full[i];

  /* rotary: cm_qwen35_dims_read has refused non-interleaved mRoPE and sections not summing to
   * rot_dims / 2 */
  if (!d.has_rope_theta) {
    r = cm_diag_set(diag, -CM_EMISSING, "config: rope_theta missing");
    goto out;
  }
  c.rope_theta = d.rope_theta;
  c.rot_dims = (int)d.rot_dims;
  if (d.rope_type && strcmp(d.rope_type, "default") != 0) {
    r = cm_diag_set(diag, -CM_EUNSUPPORTED, "config: rope_type \"%s\" (only default)", d.rope_type);
    goto out;
  }
  for (int i = 0; i < 3; i++) {
    if (d.mrope_section[i] < 0) {
      r = cm_diag_set(diag, -CM_EFORMAT, "config: negative mrope_section");
      goto out;
    }
    c.mrope_section[i] = (int)d.mrope_section[i];
  }
  if (c.rot_dims <= 0 || c.rot_dims % 2 || c.rot_dims > c.head_dim) {
    r = cm_diag_set(diag, -CM_EUNSUPPORTED, "config: rotary dims %d (head_dim %d) unsupported",
                    c.rot_dims, c.head_dim);
    goto out;
  }
  c.tied = d.tied;
  c.image_token_id = d.image_token_id >= INT32_MIN && d.image_token_id <= INT32_MAX
                         ? (int32_t)d.image_token_id : -1;
  c.vision_start_token_id =
      d.vision_start_token_id >= INT32_MIN && d.vision_start_token_id <= INT32_MAX
          ? (int32_t)d.vision_start_token_id : -1;
  *ret_cfg = c;
out:
  cm_qwen35_dims_fini(&d);
  return r;
}
