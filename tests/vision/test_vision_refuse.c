/* Refusals of the vision tower: bad vision_config values, weights that disagree with the config
 * (missing, wrong shape, extra tensors, wrong prefix) and bad grids or patch counts at forward
 * time. Each must return its code with a message naming the key, tensor or image, and leave the
 * output untouched. Usage: test_vision_refuse FIXTURE_DIR (uses tinyA.safetensors). */
#include <errno.h>
#include <json-c/json.h>

#include "ex_vision.h"
#include "vision_test_util.h"

#define TINY_A                                                                                     \
  "\"model_type\": \"qwen3_5_vision\", \"hidden_act\": \"gelu_pytorch_tanh\", \"in_channels\": "   \
  "3, \"patch_size\": 16, \"temporal_patch_size\": 2, \"spatial_merge_size\": 2, "                 \
  "\"num_position_embeddings\": 16, \"out_hidden_size\": 64, \"deepstack_visual_indexes\": []"

/* Parses `json` and expects `code` with `needle` in the message (code 0: success). */
static void expect_config(const char *json, int code, const char *needle,
                          struct ex_vision_config *ret_cfg) {
  struct json_object *o = json_tokener_parse(json);
  struct cm_diag d = {0};
  struct ex_vision_config cfg;
  CHECK(o != NULL, "test JSON does not parse: %s", json);
  int r = ex_vision_config_parse(o, &cfg, &d);
  CHECK(r == code, "config %s: got %d (%s), want %d", json, r, d.msg ? d.msg : "", code);
  if (needle)
    CHECK(d.msg && strstr(d.msg, needle), "config %s: message \"%s\" lacks \"%s\"", json,
          d.msg ? d.msg : "(none)", needle);
  if (r == 0 && ret_cfg)
    *ret_cfg = cfg;
  cm_diag_fini(&d);
  json_object_put(o);
}

static void test_config(void) {
  struct ex_vision_config c = {0};
  expect_config("{\"depth\": 2, \"hidden_size\": 48, \"num_heads\": 2, \"intermediate_size\": 96, "
                TINY_A "}", 0, NULL, &c);
  CHECK(c.depth == 2 && c.hidden_size == 48 && c.head_dim == 24 && c.intermediate_size == 96 &&
            c.out_hidden_size == 64 && c.pos_side == 4 && c.patch_dim == 1536 &&
            c.spatial_merge_size == 2 && c.block_act == EX_GELU_TANH && c.rope_theta == 10000.0f &&
            c.norm_eps == 1e-6f,
        "tiny-A config fields");
  /* The older spelling and the defaults of transformers (a 27B-like config). */
  expect_config("{\"model_type\": \"qwen3_5\", \"depth\": 27, \"hidden_size\": 1152, \"num_heads\": "
                "16, \"intermediate_size\": 4304, \"out_hidden_size\": 5120, \"hidden_act\": "
                "\"gelu\", \"rope_parameters\": {\"rope_type\": \"axial\", \"rope_theta\": 20000}}",
                0, NULL, &c);
  CHECK(c.head_dim == 72 && c.pos_side == 48 && c.patch_dim == 1536 && c.block_act == EX_GELU_ERF &&
            c.rope_theta == 20000.0f,
        "27B-like config fields");
  expect_config("{\"hidden_size\": 48, \"num_heads\": 2, \"intermediate_size\": 96, " TINY_A "}",
                -CM_EMISSING, "\"depth\"", NULL);
  expect_config("{\"depth\": \"2\", \"hidden_size\": 48, \"num_heads\": 2, \"intermediate_size\": "
                "96, " TINY_A "}", -CM_EFORMAT, "vision_config.depth", NULL);
  expect_config("{\"depth\": 2, \"hidden_size\": 48, \"num_heads\": 5, \"intermediate_size\": 96, "
                TINY_A "}", -CM_EFORMAT, "num_heads 5", NULL);
  expect_config("{\"depth\": 2, \"hidden_size\": 44, \"num_heads\": 2, \"intermediate_size\": 96, "
                TINY_A "}", -CM_EUNSUPPORTED, "head_dim 22", NULL);
  expect_config("{\"depth\": 2, \"hidden_size\": 48, \"num_heads\": 2, \"intermediate_size\": -1, "
                TINY_A "}", -CM_EFORMAT, "intermediate_size", NULL);
  expect_config("{\"depth\": 2, \"hidden_size\": 48, \"num_heads\": 2, \"intermediate_size\": 96, "
                "\"out_hidden_size\": 64, \"num_position_embeddings\": 15}",
                -CM_EFORMAT, "not a square", NULL);
  expect_config("{\"depth\": 2, \"hidden_size\": 48, \"num_heads\": 2, \"intermediate_size\": 96, "
                "\"out_hidden_size\": 64, \"hidden_act\": \"quick_gelu\"}",
                -CM_EUNSUPPORTED, "hidden_act", NULL);
  expect_config("{\"depth\": 2, \"hidden_size\": 48, \"num_heads\": 2, \"intermediate_size\": 96, "
                "\"out_hidden_size\": 64, \"deepstack_visual_indexes\": [1]}",
                -CM_EUNSUPPORTED, "deepstack", NULL);
  expect_config("{\"depth\": 2, \"hidden_size\": 48, \"num_heads\": 2, \"intermediate_size\": 96, "
                "\"out_hidden_size\": 64, \"rope_parameters\": {\"rope_type\": \"default\"}}",
                -CM_EUNSUPPORTED, "rope_type", NULL);
  expect_config("{\"model_type\": \"qwen2_vl\", \"depth\": 2, \"hidden_size\": 48, \"num_heads\": "
                "2, \"intermediate_size\": 96, \"out_hidden_size\": 64}",
                -CM_EUNSUPPORTED, "model_type", NULL);
  expect_config("[1, 2]", -CM_EFORMAT, "JSON object", NULL);
}

/* Loads tinyA.safetensors with a config built from `json`; expects `code` and `needle`. */
static void expect_load(struct cm_safetensors *st, const char *json, const char *prefix, int code,
                        const char *needle) {
  struct ex_vision_config cfg;
  struct json_object *o = json_tokener_parse(json);
  struct cm_diag d = {0};
  CHECK(o && ex_vision_config_parse(o, &cfg, &d) == 0, "config %s: %s", json, d.msg);
  json_object_put(o);
  if (d.code)
    return;
  struct ex_vision *v = NULL;
  int r = ex_vision_new(&cfg, st, prefix, &v, &d);
  CHECK(r == code, "load %s: got %d (%s), want %d", json, r, d.msg ? d.msg : "", code);
  CHECK((r == 0) == (v != NULL), "load %s: ret_v set on failure or unset on success", json);
  if (needle)
    CHECK(d.msg && strstr(d.msg, needle), "load %s: message \"%s\" lacks \"%s\"", json,
          d.msg ? d.msg : "(none)", needle);
  ex_vision_free(v);
  cm_diag_fini(&d);
}

#define A_HEAD "{\"num_heads\": 2, \"model_type\": \"qwen3_5_vision\", \"num_position_embeddings\": 16, "

static void test_forward(const struct ex_vision *v) {
  float *out = malloc(64 * 64 * sizeof(float));
  float *pix = calloc(24 * 1536, sizeof(float));
  if (!out || !pix) {
    CHECK(0, "out of memory");
    goto done;
  }
  for (int i = 0; i < 64 * 64; i++)
    out[i] = 12345.0f;
  struct {
    int32_t grid[6];
    int n_images;
    int64_t n_patches;
    int code;
    const char *needle;
  } bad[] = {
      {{1, 5, 6}, 1, 30, -CM_ESHAPE, "multiples of spatial_merge_size 2"},
      {{1, 4, 7}, 1, 28, -CM_ESHAPE, "image 0 has grid_thw (1, 4, 7)"},
      {{0, 4, 6}, 1, 0, -CM_ESHAPE, "must be >= 1"},
      {{1, 4, 6, 1, -2, 6}, 2, 24, -CM_ESHAPE, "image 1"},
      {{1, 4, 6}, 1, 23, -CM_ESHAPE, "23 rows but grid_thw describes 24"},
      {{1, 4, 6}, 0, 24, -EINVAL, "n_images 0"},
      {{1, 4, 6}, EX_VISION_MAX_IMAGES + 1, 24, -CM_ELIMIT, "images in one call"},
      {{1, 258, 256}, 1, 66048, -CM_ELIMIT, "patches per frame"},
      {{5, 256, 256}, 1, 327680, -CM_ELIMIT, "patches in one call"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct cm_diag d = {0};
    int r = ex_vision_forward(v, pix, bad[i].n_patches, bad[i].grid, bad[i].n_images, out, &d);
    CHECK(r == bad[i].code, "bad case %zu: got %d (%s), want %d", i, r, d.msg ? d.msg : "",
          bad[i].code);
    CHECK(d.msg && strstr(d.msg, bad[i].needle), "bad case %zu: message \"%s\" lacks \"%s\"", i,
          d.msg ? d.msg : "(none)", bad[i].needle);
    cm_diag_fini(&d);
  }
  int untouched = 1;
  for (int i = 0; i < 64 * 64; i++)
    untouched &= out[i] == 12345.0f;
  CHECK(untouched, "a refused forward wrote ret_embeds");
  struct cm_diag d = {0};
  int32_t g[3] = {1, 20, 14};
  int64_t np = 0, nm = 0;
  CHECK(ex_vision_count(v, g, 1, &np, &nm, &d) == 0 && np == 280 && nm == 70,
        "count (1, 20, 14): %lld patches, %lld rows", (long long)np, (long long)nm);
  CHECK(ex_vision_forward(v, NULL, 24, (int32_t[]){1, 4, 6}, 1, out, &d) == -EINVAL,
        "NULL pixel_values accepted");
  cm_diag_fini(&d);
  /* A valid call after all that works and writes finite values. */
  int r = ex_vision_forward(v, pix, 24, (int32_t[]){1, 4, 6}, 1, out, &d);
  CHECK(r == 0, "valid forward: %s", d.msg ? d.msg : "");
  int finite = 1;
  for (int i = 0; i < 6 * 64; i++)
    finite &= isfinite(out[i]) && out[i] != 12345.0f;
  CHECK(r != 0 || finite, "valid forward wrote non-finite or no values");
  cm_diag_fini(&d);
done:
  free(out);
  free(pix);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s FIXTURE_DIR\n", argv[0]);
    return 2;
  }
  test_config();

  char path[1024];
  snprintf(path, sizeof path, "%s/tinyA.safetensors", argv[1]);
  struct cm_safetensors *st = NULL;
  struct cm_diag d = {0};
  int r = cm_safetensors_open(path, &st, &d);
  CHECK(r == 0, "open %s: %s", path, d.msg ? d.msg : "");
  cm_diag_fini(&d);
  if (r)
    return 1;
  const char *good = A_HEAD "\"depth\": 2, \"hidden_size\": 48, \"intermediate_size\": 96, "
                            "\"out_hidden_size\": 64}";
  expect_load(st, good, NULL, 0, NULL);
  expect_load(st, good, "model.visual.", 0, NULL);
  expect_load(st, good, "visual.", -CM_EMISSING, "visual.patch_embed.proj.weight");
  expect_load(st, A_HEAD "\"depth\": 3, \"hidden_size\": 48, \"intermediate_size\": 96, "
                         "\"out_hidden_size\": 64}",
              NULL, -CM_EMISSING, "model.visual.blocks.2.norm1.weight");
  expect_load(st, A_HEAD "\"depth\": 1, \"hidden_size\": 48, \"intermediate_size\": 96, "
                         "\"out_hidden_size\": 64}",
              NULL, -CM_EFORMAT, "unexpected: model.visual.blocks.1.");
  expect_load(st, A_HEAD "\"depth\": 2, \"hidden_size\": 48, \"intermediate_size\": 95, "
                         "\"out_hidden_size\": 64}",
              NULL, -CM_ESHAPE, "model.visual.blocks.0.mlp.linear_fc1.weight has shape [96, 48]");
  expect_load(st, A_HEAD "\"depth\": 2, \"hidden_size\": 48, \"intermediate_size\": 96, "
                         "\"out_hidden_size\": 63}",
              NULL, -CM_ESHAPE, "merger.linear_fc2.weight");
  expect_load(st, A_HEAD "\"depth\": 2, \"hidden_size\": 48, \"intermediate_size\": 96, "
                         "\"out_hidden_size\": 64, \"temporal_patch_size\": 1}",
              NULL, -CM_ESHAPE, "patch_embed.proj.weight has shape [48, 3, 2, 16, 16]");

  struct ex_vision_config cfg;
  struct json_object *o = json_tokener_parse(good);
  struct ex_vision *v = NULL;
  r = ex_vision_config_parse(o, &cfg, &d) || ex_vision_new(&cfg, st, NULL, &v, &d);
  json_object_put(o);
  CHECK(r == 0, "load tiny-A: %s", d.msg ? d.msg : "");
  cm_diag_fini(&d);
  if (v)
    test_forward(v);
  ex_vision_free(v);
  cm_safetensors_close(st);
  printf("%s\n", g_fail ? "FAILED" : "ok");
  return g_fail ? 1 : 0;
}
