/* s1-forward: runs the float32 Qwen3.5 forward of a model directory on one input and writes the
 * final-norm hidden rows and top-20 logits at chosen positions (the tool the oracle tests and
 * humans use to check the reference). Input and output are JSON files; see the README. Token ids
 * come in ready (no tokenizer); images come as files (prepared by preprocessor/image), pixel rows
 * or merged embeddings (.npy). For parity layer by layer it also dumps the residual stream, runs
 * given decoder layers alone on given input rows, and dumps the vision tower's merged rows. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_version.h"
#include "cm_model_dir.h"
#include "cpu_act.h"
#include "ex_npy.h"
#include "ex_qwen35.h"
#include "pp_image.h"
#include "s1_forward_cuda.h"
#include "s1_forward_images.h"

#define TOP_K 20
#define MAX_TOKENS (1 << 20) /* tokens after image expansion */
#define MAX_IMAGES 256
#define MAX_JOBS 256 /* --input/--output pairs of one run */

struct image_in {
  float *pixels;    /* [n_patches, patch_dim] or NULL */
  float *embeds;    /* [n_merged, H] merged embeddings given directly, or NULL */
  int64_t n_rows;   /* rows in pixels or embeds */
  int32_t grid[3];  /* t, h, w in patches */
  int64_t n_merged; /* t·h·w / 4 */
};

struct input {
  int32_t *tokens;         /* [n_tokens] as given (one <|image_pad|> per image) */
  size_t n_tokens;         /* count */
  struct image_in *images; /* [n_images] */
  int n_images;            /* count */
  long prefix_len;         /* 0 = one pass */
  long *readout;           /* [n_readout] positions, negative from the end */
  size_t n_readout;        /* count */
  char *residual_out;      /* .npy path for the residual stream [L + 1, n, H], or NULL */
  char *layer_in;          /* .npy path of given layer inputs [K, n, H] (layer mode), or NULL */
  char *layer_out;         /* .npy path for the K layer outputs (with layer_in) */
  int *layers;             /* [n_layers_sel] decoder layers of layer_in's rows (default 0..K−1) */
  size_t n_layers_sel;     /* count; 0 = default */
  char *vision_out;        /* .npy path for the merged vision rows [n_merged, H], or NULL */
  bool vision_only;        /* run the vision tower only (no text forward, no text weights) */
};

static void usage(void) {
  fprintf(stderr,
          "usage: s1-forward --model DIR [--device cpu|cuda:N] --input IN.json --output "
          "OUT.json [--input IN2.json --output OUT2.json ...]\n"
          "       [--numerics MODE] [--gdn auto|chunked|recurrent] [--repeat K]\n"
          "  --numerics  cpu: fp32 or bf16 (default: the model directory's; --bf16-rounding\n"
          "              is bf16); cuda: bf16 (the default; also ref-bf16) or\n"
          "              bf16-fp32-residual (bf16 GEMMs over a float32 residual stream; also\n"
          "              fp32-residual)\n");
}

static char *join(const char *dir, const char *file) {
  if (file[0] == '/')
    return strdup(file);
  size_t n = strlen(dir) + strlen(file) + 2;
  char *p = malloc(n);
  if (p)
    snprintf(p, n, "%s/%s", dir, file);
  return p;
}

static char *dir_of(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? strndup(path, (size_t)(s - path)) : strdup(".");
}

static void input_fini(struct input *in) {
  free(in->tokens);
  free(in->residual_out);
  free(in->layer_in);
  free(in->layer_out);
  free(in->layers);
  free(in->vision_out);
  for (int i = 0; i < in->n_images; i++) {
    free(in->images[i].pixels);
    free(in->images[i].embeds);
  }
  free(in->images);
  free(in->readout);
}

/* An image file (PNG, JPEG, WebP) prepared as the reference processor does (preprocessor/image):
 * decode, smart_resize, exact resample, normalise, patchify. */
static int prepare_image_file(const char *base, const char *name, int index, struct image_in *x,
                              struct cm_diag *diag) {
  char *path = join(base, name);
  if (!path)
    return -ENOMEM;
  int r = 0;
  uint8_t *bytes = NULL;
  struct pp_image img = {0};
  struct pp_image_limits lim;
  pp_image_limits_default(&lim);
  FILE *f = fopen(path, "rb");
  long len = -1;
  if (f && fseek(f, 0, SEEK_END) == 0)
    len = ftell(f);
  if (!f || len < 0 || (uint64_t)len > lim.max_bytes || fseek(f, 0, SEEK_SET) != 0) {
    r = cm_diag_set(diag, f ? -CM_ELIMIT : -ENOENT, "%s: cannot read, or larger than %llu bytes",
                    path, (unsigned long long)lim.max_bytes);
    goto out;
  }
  bytes = malloc((size_t)len + 1);
  if (!bytes || fread(bytes, 1, (size_t)len, f) != (size_t)len) {
    r = bytes ? cm_diag_set(diag, -EIO, "%s: read error", path) : -ENOMEM;
    goto out;
  }
  if ((r = pp_image_prepare_bytes(bytes, (size_t)len, (uint32_t)index, &lim, &img, diag)))
    goto out;
  memcpy(x->grid, img.grid_thw, sizeof(x->grid));
  x->n_rows = img.n_patches;
  x->n_merged = img.n_tokens;
  x->pixels = img.pixel_values;
  img.pixel_values = NULL;
out:
  pp_image_fini(&img);
  if (f)
    fclose(f);
  free(bytes);
  free(path);
  return r;
}

static int read_input(const char *path, struct input *in, struct cm_diag *diag) {
  memset(in, 0, sizeof(*in));
  int r = 0;
  char *base = dir_of(path);
  json_object *root = json_object_from_file(path);
  json_object *v;
  if (!root || !json_object_is_type(root, json_type_object)) {
    r = cm_diag_set(diag, -CM_EFORMAT, "%s: not a JSON object", path);
    goto out;
  }
  if (!json_object_object_get_ex(root, "tokens", &v) || !json_object_is_type(v, json_type_array) ||
      json_object_array_length(v) == 0 || json_object_array_length(v) > MAX_TOKENS) {
    r = cm_diag_set(diag, -CM_EFORMAT,
                    "%s: \"tokens\" must be a non-empty array of ids (at "
                    "most %d)",
                    path, MAX_TOKENS);
    goto out;
  }
  in->n_tokens = json_object_array_length(v);
  in->tokens = malloc(in->n_tokens * sizeof(int32_t));
  if (!in->tokens) {
    r = -ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < in->n_tokens; i++) {
    json_object *t = json_object_array_get_idx(v, i);
    if (!json_object_is_type(t, json_type_int)) {
      r = cm_diag_set(diag, -CM_EFORMAT, "%s: tokens[%zu] is not an integer", path, i);
      goto out;
    }
    in->tokens[i] = (int32_t)json_object_get_int64(t);
  }
  if (json_object_object_get_ex(root, "prefix_len", &v)) {
    if (!json_object_is_type(v, json_type_int)) {
      r = cm_diag_set(diag, -CM_EFORMAT, "%s: prefix_len must be an integer", path);
      goto out;
    }
    in->prefix_len = (long)json_object_get_int64(v);
  }
  /* layer tools: output paths are relative to IN.json too */
  static const char *const paths[] = {"residual_out", "layer_in", "layer_out", "vision_out"};
  char **dst[] = {&in->residual_out, &in->layer_in, &in->layer_out, &in->vision_out};
  for (int i = 0; i < 4; i++) {
    if (!json_object_object_get_ex(root, paths[i], &v))
      continue;
    if (!json_object_is_type(v, json_type_string) || !json_object_get_string_len(v)) {
      r = cm_diag_set(diag, -CM_EFORMAT, "%s: %s must be a file path", path, paths[i]);
      goto out;
    }
    if (!(*dst[i] = join(base, json_object_get_string(v)))) {
      r = -ENOMEM;
      goto out;
    }
  }
  if (!in->layer_in != !in->layer_out) {
    r = cm_diag_set(diag, -CM_EFORMAT, "%s: layer_in and layer_out go together", path);
    goto out;
  }
  if (json_object_object_get_ex(root, "layers", &v)) {
    if (!in->layer_in || !json_object_is_type(v, json_type_array) ||
        json_object_array_length(v) == 0 || json_object_array_length(v) > EX_QWEN35_MAX_LAYERS) {
      r = cm_diag_set(diag, -CM_EFORMAT,
                      "%s: layers must be a non-empty array of at most %d layer indices (with "
                      "layer_in)",
                      path, EX_QWEN35_MAX_LAYERS);
      goto out;
    }
    in->n_layers_sel = json_object_array_length(v);
    if (!(in->layers = malloc(in->n_layers_sel * sizeof(int)))) {
      r = -ENOMEM;
      goto out;
    }
    for (size_t i = 0; i < in->n_layers_sel; i++) {
      json_object *t = json_object_array_get_idx(v, i);
      if (!json_object_is_type(t, json_type_int) || json_object_get_int64(t) < 0 ||
          json_object_get_int64(t) >= EX_QWEN35_MAX_LAYERS) {
        r = cm_diag_set(diag, -CM_EFORMAT, "%s: layers[%zu] is not a layer index", path, i);
        goto out;
      }
      in->layers[i] = (int)json_object_get_int64(t);
    }
  }
  if (json_object_object_get_ex(root, "vision_only", &v))
    in->vision_only = json_object_get_boolean(v);
  if ((in->layer_in != NULL) + (in->residual_out != NULL) + in->vision_only > 1 ||
      ((in->layer_in || in->residual_out || in->vision_only) && in->prefix_len)) {
    r = cm_diag_set(diag, -CM_EFORMAT,
                    "%s: layer_in, residual_out, vision_only and prefix_len exclude each other",
                    path);
    goto out;
  }
  if (json_object_object_get_ex(root, "readout", &v)) {
    if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) > MAX_TOKENS) {
      r = cm_diag_set(diag, -CM_EFORMAT, "%s: readout must be an array of positions", path);
      goto out;
    }
    in->n_readout = json_object_array_length(v);
    in->readout = malloc((in->n_readout + 1) * sizeof(long));
    if (!in->readout) {
      r = -ENOMEM;
      goto out;
    }
    for (size_t i = 0; i < in->n_readout; i++)
      in->readout[i] = (long)json_object_get_int64(json_object_array_get_idx(v, i));
  } else {
    in->n_readout = 1;
    in->readout = malloc(sizeof(long));
    if (!in->readout) {
      r = -ENOMEM;
      goto out;
    }
    in->readout[0] = -1;
  }
  if (json_object_object_get_ex(root, "images", &v)) {
    if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) > MAX_IMAGES) {
      r = cm_diag_set(diag, -CM_EFORMAT, "%s: images must be an array (at most %d)", path,
                      MAX_IMAGES);
      goto out;
    }
    in->n_images = (int)json_object_array_length(v);
    in->images = calloc((size_t)in->n_images + 1, sizeof(*in->images));
    if (!in->images) {
      r = -ENOMEM;
      goto out;
    }
    for (int i = 0; i < in->n_images; i++) {
      json_object *im = json_object_array_get_idx(v, (size_t)i), *f, *g;
      struct image_in *x = &in->images[i];
      if (json_object_is_type(im, json_type_string)) {
        r = prepare_image_file(base, json_object_get_string(im), i, x, diag);
        if (r)
          goto out;
        continue;
      }
      if (!json_object_object_get_ex(im, "grid_thw", &g) ||
          !json_object_is_type(g, json_type_array) || json_object_array_length(g) != 3) {
        r = cm_diag_set(diag, -CM_EFORMAT, "%s: images[%d].grid_thw must be [t, h, w]", path, i);
        goto out;
      }
      for (int d = 0; d < 3; d++) {
        int64_t gv = json_object_get_int64(json_object_array_get_idx(g, (size_t)d));
        if (gv < 1 || gv > 4096) {
          r = cm_diag_set(diag, -CM_EFORMAT, "%s: images[%d].grid_thw[%d] out of range", path, i,
                          d);
          goto out;
        }
        x->grid[d] = (int32_t)gv;
      }
      if (x->grid[0] != 1 || x->grid[1] % 2 || x->grid[2] % 2) {
        r = cm_diag_set(diag, -CM_EUNSUPPORTED,
                        "%s: images[%d]: grid_thw must be [1, even, "
                        "even]",
                        path, i);
        goto out;
      }
      x->n_merged = (int64_t)x->grid[1] * x->grid[2] / 4;
      bool px = json_object_object_get_ex(im, "pixels", &f);
      if (!px && !json_object_object_get_ex(im, "embeds", &f) && in->layer_in)
        continue; /* layer mode: the rows come in layer_in, only the grid is needed (positions) */
      if (!px && !json_object_object_get_ex(im, "embeds", &f)) {
        r = cm_diag_set(diag, -CM_EFORMAT, "%s: images[%d] needs \"pixels\" or \"embeds\"", path,
                        i);
        goto out;
      }
      char *file = join(base, json_object_get_string(f));
      int64_t shape[EX_NPY_MAX_DIMS];
      int nd = 0;
      float *data = NULL;
      r = file ? ex_npy_load_f32(file, &data, shape, &nd, diag) : -ENOMEM;
      free(file);
      if (r)
        goto out;
      int64_t want = px ? (int64_t)x->grid[1] * x->grid[2] : x->n_merged;
      if (nd != 2 || shape[0] != want) {
        free(data);
        r = cm_diag_set(diag, -CM_ESHAPE,
                        "%s: images[%d].%s must have %lld rows for grid "
                        "[1,%d,%d]",
                        path, i, px ? "pixels" : "embeds", (long long)want, x->grid[1], x->grid[2]);
        goto out;
      }
      x->n_rows = shape[0];
      if (px)
        x->pixels = data;
      else
        x->embeds = data;
      if (px && shape[1] != 1536) {
        r = cm_diag_set(diag, -CM_ESHAPE, "%s: images[%d].pixels must have 1536 columns", path, i);
        goto out;
      }
    }
  }
out:
  if (r)
    input_fini(in);
  json_object_put(root);
  free(base);
  return r;
}

static json_object *float_array(const float *x, size_t n) {
  json_object *a = json_object_new_array_ext((int)n);
  for (size_t i = 0; i < n; i++) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%.9g", x[i]);
    json_object_array_add(a, json_object_new_double_s((double)x[i], buf));
  }
  return a;
}

/* device < 0: the CPU forward in `numerics` ("fp32", "bf16" or NULL: the directory's); else the
 * CUDA engine on that device in bf16 (repeat: timing; fp32_residual: the bf16-fp32-residual
 * variant). */
static int run(const char *model_dir, const char *in_path, const char *out_path,
               const char *numerics, enum ex_gdn_mode gdn, int device, int repeat,
               bool fp32_residual, double t0_ms, struct cm_diag *diag) {
  struct cm_model_dir *dir = NULL;
  struct ex_qwen35_model *m = NULL;
  struct ex_qwen35_state *st = NULL, *cont = NULL;
  struct input in;
  int32_t *tok = NULL, *pos = NULL;
  float *emb = NULL, *hid = NULL, *logits = NULL, *pix = NULL, *vis = NULL;
  float *ro_hid = NULL, *ro_logits = NULL; /* device path: readout rows and their logits */
  float *lay_in = NULL, *lay_out = NULL, *resid = NULL; /* layer tools' buffers */
  int *lay_idx = NULL;
  size_t *ro_pos = NULL;                   /* resolved readout positions */
  json_object *out = NULL;
  bool have_in = false;
  struct ex_qwen35_config cfg;
  int r = cm_model_dir_open(model_dir, &dir, diag);
  if (r)
    goto done;
  enum cm_numerics nm = device < 0 ? dir->numerics : CM_NUMERICS_BF16;
  if (numerics && cm_numerics_parse(numerics, &nm) != 0) {
    r = cm_diag_set(diag, -EINVAL, "--numerics %s: fp32 or bf16", numerics);
    goto done;
  }
  bool bf16 = nm == CM_NUMERICS_BF16;
  if ((r = ex_qwen35_config_parse(dir->config, &cfg, diag)))
    goto done;
  float scale = 0.0f;
  json_object *sc = NULL;
  if (dir->adapter) {
    if (!dir->adapter_info || !json_object_object_get_ex(dir->adapter_info, "scale", &sc)) {
      r = cm_diag_set(diag, -CM_EFORMAT, "%s: manifest adapter has no scale", model_dir);
      goto done;
    }
    scale = (float)json_object_get_double(sc);
  }
  if ((r = read_input(in_path, &in, diag)))
    goto done;
  have_in = true;
  if (device < 0 && !in.vision_only) {
    if ((r = ex_qwen35_model_load(&cfg, dir->weights, dir->adapter, scale, &m, diag)))
      goto done;
    m->round_bf16 = bf16;
    m->gdn_mode = gdn;
    if (bf16) /* A_log / dt_bias stored in F32: the bf16 model holds them rounded */
      ex_qwen35_round_wide_params(m);
    /* the release's float32 embedding rows: kept in fp32, rounded in bf16 (cm_model_dir.h) */
    if (dir->n_f32_rows && (r = ex_qwen35_set_embed_rows(m, dir->f32_row_ids, &dir->f32_rows,
                                                         dir->n_f32_rows, bf16, diag)))
      goto done;
  }

  /* expand each <|image_pad|> to its merged-row count */
  size_t n = 0, n_pads = 0;
  for (size_t i = 0; i < in.n_tokens; i++) {
    if (in.tokens[i] == cfg.image_token_id && (int)n_pads < in.n_images)
      n += (size_t)in.images[n_pads++].n_merged;
    else
      n++;
  }
  size_t n_more = 0;
  for (size_t i = 0; i < in.n_tokens; i++)
    n_more += in.tokens[i] == cfg.image_token_id;
  if ((int)n_more != in.n_images || n > MAX_TOKENS) {
    r = cm_diag_set(diag, -CM_EFORMAT,
                    "%s: %zu <|image_pad|> tokens (id %d) for %d images, or "
                    "more than %d tokens",
                    in_path, n_more, cfg.image_token_id, in.n_images, MAX_TOKENS);
    goto done;
  }
  size_t h = (size_t)cfg.hidden_size;
  tok = malloc(n * sizeof(int32_t));
  pos = malloc(3 * n * sizeof(int32_t));
  emb = malloc(n * h * sizeof(float));
  hid = malloc(n * h * sizeof(float));
  logits = malloc((size_t)cfg.vocab_size * sizeof(float));
  if (!tok || !pos || !emb || !hid || !logits) {
    r = -ENOMEM;
    goto done;
  }
  size_t k = 0;
  for (size_t i = 0, img = 0; i < in.n_tokens; i++) {
    if (in.tokens[i] == cfg.image_token_id) {
      for (int64_t j = 0; j < in.images[img].n_merged; j++)
        tok[k++] = cfg.image_token_id;
      img++;
    } else
      tok[k++] = in.tokens[i];
  }
  if (m && !in.layer_in && (r = ex_qwen35_embed(m, tok, n, emb, diag)))
    goto done;

  /* image rows: pixels through the tower (all images in one call), or given embeddings */
  int64_t n_patches = 0, n_merged = 0;
  int n_pix = 0;
  for (int i = 0; i < in.n_images; i++) {
    n_merged += in.images[i].n_merged;
    if (in.images[i].pixels) {
      n_patches += in.images[i].n_rows;
      n_pix++;
    }
  }
  if (in.n_images && !in.layer_in) { /* layer mode: the image rows are inside layer_in */
    vis = malloc((size_t)n_merged * h * sizeof(float));
    pix = malloc(((size_t)n_patches * 1536 + 1) * sizeof(float));
    int32_t *grid = malloc(((size_t)n_pix + 1) * 3 * sizeof(int32_t));
    float *pout = malloc(((size_t)n_patches / 4 * h + 1) * sizeof(float));
    if (!vis || !pix || !grid || !pout) {
      free(grid), free(pout);
      r = -ENOMEM;
      goto done;
    }
    size_t off = 0;
    int gi = 0;
    for (int i = 0; i < in.n_images; i++)
      if (in.images[i].pixels) {
        memcpy(pix + off, in.images[i].pixels, (size_t)in.images[i].n_rows * 1536 * sizeof(float));
        off += (size_t)in.images[i].n_rows * 1536;
        memcpy(grid + 3 * gi++, in.images[i].grid, 3 * sizeof(int32_t));
      }
    if (n_pix && device >= 0)
      r = s1_forward_vision_cuda(dir, device, pix, n_patches, grid, n_pix, !fp32_residual, pout,
                                 diag);
    else if (n_pix)
      r = s1_forward_vision(dir, pix, n_patches, grid, n_pix, bf16, pout, diag);
    free(grid);
    if (r) {
      free(pout);
      goto done;
    }
    size_t vo = 0, po = 0;
    for (int i = 0; i < in.n_images; i++) {
      size_t rows = (size_t)in.images[i].n_merged;
      const float *src = in.images[i].pixels ? pout + po * h : in.images[i].embeds;
      if (in.images[i].pixels)
        po += rows;
      memcpy(vis + vo * h, src, rows * h * sizeof(float));
      vo += rows;
    }
    free(pout);
    if (in.vision_out) {
      int64_t shape[2] = {n_merged, (int64_t)h};
      if ((r = ex_npy_save_f32(in.vision_out, vis, shape, 2, diag)))
        goto done;
    }
    for (size_t i = 0, j = 0; m && i < n; i++)
      if (tok[i] == cfg.image_token_id) {
        memcpy(emb + i * h, vis + (j++) * h, h * sizeof(float));
        if (bf16) /* the bf16 reference's vision output is bf16 (as the engine's ref-bf16) */
          ex_cpu_round_bf16(emb + i * h, h);
      }
  }
  /* 3-axis positions as get_rope_index walks them (preprocessor/image) */
  struct pp_grid grids[MAX_IMAGES];
  for (int i = 0; i < in.n_images; i++)
    grids[i] = (struct pp_grid){in.images[i].grid[0], in.images[i].grid[1], in.images[i].grid[2]};
  int32_t next_pos = 0;
  if ((r = pp_mrope_positions(tok, n, cfg.image_token_id, grids, (size_t)in.n_images, 0, pos,
                              &next_pos, diag)))
    goto done;
  int64_t rope_delta = (int64_t)next_pos - (int64_t)n;

  /* readout positions, resolved before the forward */
  ro_pos = malloc((in.n_readout + 1) * sizeof(size_t));
  if (!ro_pos) {
    r = -ENOMEM;
    goto done;
  }
  for (size_t i = 0; i < in.n_readout; i++) {
    long q = in.readout[i] < 0 ? (long)n + in.readout[i] : in.readout[i];
    if (q < 0 || (size_t)q >= n) {
      r = cm_diag_set(diag, -CM_EFORMAT, "%s: readout[%zu] = %ld outside %zu tokens", in_path, i,
                      in.readout[i], n);
      goto done;
    }
    ro_pos[i] = (size_t)q;
  }
  out = json_object_new_object();
  json_object_object_add(out, "n_tokens", json_object_new_int64((int64_t)n));
  json_object_object_add(out, "rope_delta", json_object_new_int64(rope_delta));
  if (in.vision_only) {
    json_object_object_add(out, "vision_rows", json_object_new_int64(n_merged));
    goto write;
  }
  if (in.layer_in) { /* layer mode: each given layer alone on its given input rows */
    int64_t shape[EX_NPY_MAX_DIMS];
    int nd = 0;
    if ((r = ex_npy_load_f32(in.layer_in, &lay_in, shape, &nd, diag)))
      goto done;
    size_t kk = nd == 3 ? (size_t)shape[0] : 0;
    if (nd != 3 || (size_t)shape[1] != n || (size_t)shape[2] != h || kk == 0 ||
        (in.n_layers_sel && in.n_layers_sel != kk)) {
      r = cm_diag_set(diag, -CM_ESHAPE,
                      "%s: layer_in must be [K, %zu, %zu] with K the number of layers given",
                      in.layer_in, n, h);
      goto done;
    }
    lay_idx = malloc(kk * sizeof(int));
    lay_out = malloc(kk * n * h * sizeof(float));
    if (!lay_idx || !lay_out) {
      r = -ENOMEM;
      goto done;
    }
    json_object *la = json_object_new_array();
    json_object_object_add(out, "layers", la);
    for (size_t k = 0; k < kk; k++) {
      lay_idx[k] = in.n_layers_sel ? in.layers[k] : (int)k;
      if (lay_idx[k] >= cfg.n_layers) {
        r = cm_diag_set(diag, -EINVAL, "%s: layer %d outside the model's %d layers", in_path,
                        lay_idx[k], cfg.n_layers);
        goto done;
      }
      json_object_array_add(la, json_object_new_int(lay_idx[k]));
    }
    if (device >= 0) {
      struct s1_forward_job job = {.tokens = tok, .pos = pos, .n = n, .layer_in = lay_in,
                                   .layers = lay_idx, .n_layers = kk, .ret_layer_out = lay_out,
                                   .fp32_residual = fp32_residual, .t0_ms = t0_ms};
      if ((r = s1_forward_cuda(dir, &cfg, device, &job, NULL, NULL, diag)))
        goto done;
    } else {
      for (size_t k = 0; k < kk && !r; k++)
        r = ex_qwen35_layer_forward(m, lay_idx[k], lay_in + k * n * h, pos, n,
                                    lay_out + k * n * h, diag);
      if (r)
        goto done;
    }
    int64_t oshape[3] = {(int64_t)kk, (int64_t)n, (int64_t)h};
    if ((r = ex_npy_save_f32(in.layer_out, lay_out, oshape, 3, diag)))
      goto done;
    goto write;
  }
  if (in.residual_out &&
      !(resid = malloc(((size_t)cfg.n_layers + 1) * n * h * sizeof(float)))) {
    r = -ENOMEM;
    goto done;
  }
  /* the forward: one pass, or a prefix snapshot and a continuation from a clone of it */
  size_t p = in.prefix_len > 0 && (size_t)in.prefix_len < n ? (size_t)in.prefix_len : 0;
  if (device >= 0) {
    ro_hid = malloc((in.n_readout + 1) * h * sizeof(float));
    ro_logits = malloc((in.n_readout + 1) * (size_t)cfg.vocab_size * sizeof(float));
    if (!ro_hid || !ro_logits) {
      r = -ENOMEM;
      goto done;
    }
    struct s1_forward_job job = {.tokens = tok,
                                 .pos = pos,
                                 .n = n,
                                 .prefix_len = p,
                                 .image_rows = vis,
                                 .n_image_rows = vis ? (size_t)n_merged : 0,
                                 .readout = ro_pos,
                                 .n_read = in.n_readout,
                                 .repeat = repeat,
                                 .fp32_residual = fp32_residual,
                                 .ret_residual = resid,
                                 .t0_ms = t0_ms};
    if ((r = s1_forward_cuda(dir, &cfg, device, &job, ro_hid, ro_logits, diag)))
      goto done;
  } else {
    if ((r = ex_qwen35_state_new(m, &st)))
      goto done;
    if (!p) {
      r = ex_qwen35_forward_residual(m, st, emb, pos, n, hid, resid, diag);
    } else {
      int32_t *pp = malloc(3 * p * sizeof(int32_t)), *pc = malloc(3 * (n - p) * sizeof(int32_t));
      if (!pp || !pc) {
        free(pp), free(pc);
        r = -ENOMEM;
        goto done;
      }
      for (int a = 0; a < 3; a++) {
        memcpy(pp + a * p, pos + a * n, p * sizeof(int32_t));
        memcpy(pc + a * (n - p), pos + a * n + p, (n - p) * sizeof(int32_t));
      }
      r = ex_qwen35_forward(m, st, emb, pp, p, hid, diag);
      if (!r)
        r = ex_qwen35_state_clone(st, m, &cont);
      if (!r)
        r = ex_qwen35_forward(m, cont, emb + p * h, pc, n - p, hid + p * h, diag);
      free(pp), free(pc);
    }
    if (r)
      goto done;
  }

  if (resid) {
    int64_t shape[3] = {(int64_t)cfg.n_layers + 1, (int64_t)n, (int64_t)h};
    if ((r = ex_npy_save_f32(in.residual_out, resid, shape, 3, diag)))
      goto done;
  }
  json_object *ro = json_object_new_array(), *hs = json_object_new_array();
  json_object *tops = json_object_new_array();
  json_object_object_add(out, "readout", ro);
  json_object_object_add(out, "hidden", hs);
  json_object_object_add(out, "logits_top", tops);
  for (size_t i = 0; i < in.n_readout; i++) {
    size_t q = ro_pos[i];
    json_object_array_add(ro, json_object_new_int64((int64_t)q));
    const float *hrow = device >= 0 ? ro_hid + i * h : hid + q * h;
    json_object_array_add(hs, float_array(hrow, h));
    if (device >= 0)
      memcpy(logits, ro_logits + i * (size_t)cfg.vocab_size,
             (size_t)cfg.vocab_size * sizeof(float));
    else
      ex_qwen35_logits(m, hrow, 1, logits);
    int32_t ids[TOP_K];
    float vals[TOP_K];
    size_t kk = (size_t)cfg.vocab_size < TOP_K ? (size_t)cfg.vocab_size : TOP_K;
    ex_top_k(logits, (size_t)cfg.vocab_size, kk, ids, vals);
    json_object *t = json_object_new_object(), *ia = json_object_new_array();
    for (size_t j = 0; j < kk; j++)
      json_object_array_add(ia, json_object_new_int(ids[j]));
    json_object_object_add(t, "ids", ia);
    json_object_object_add(t, "logits", float_array(vals, kk));
    json_object_array_add(tops, t);
  }
write:
  if (json_object_to_file_ext(out_path, out, JSON_C_TO_STRING_PLAIN) != 0)
    r = cm_diag_set(diag, -EIO, "%s: cannot write", out_path);
done:
  json_object_put(out);
  if (have_in)
    input_fini(&in);
  free(tok), free(pos), free(emb), free(hid), free(logits), free(pix), free(vis);
  free(ro_pos), free(ro_hid), free(ro_logits);
  free(lay_in), free(lay_out), free(resid), free(lay_idx);
  ex_qwen35_state_free(st);
  ex_qwen35_state_free(cont);
  ex_qwen35_model_free(m);
  cm_model_dir_free(dir);
  return r;
}

int main(int argc, char **argv) {
  if (cm_version_requested(argc, argv, "s1-forward"))
    return 0;
  static const struct option opts[] = {
      {"model", required_argument, 0, 'm'},   {"device", required_argument, 0, 'd'},
      {"input", required_argument, 0, 'i'},   {"output", required_argument, 0, 'o'},
      {"bf16-rounding", no_argument, 0, 'b'}, {"gdn", required_argument, 0, 'g'},
      {"repeat", required_argument, 0, 'r'},  {"numerics", required_argument, 0, 'n'},
      {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
  struct timespec ts0;
  clock_gettime(CLOCK_MONOTONIC, &ts0);
  double t0_ms = (double)ts0.tv_sec * 1e3 + (double)ts0.tv_nsec / 1e6;
  const char *model = NULL, *inputs[MAX_JOBS], *outputs[MAX_JOBS], *device = "cpu";
  int n_in = 0, n_out = 0;
  long repeat = 0;
  bool fp32_residual = false;
  const char *numerics = NULL; /* cpu: fp32 / bf16, NULL for the directory's */
  enum ex_gdn_mode gdn = EX_GDN_AUTO;
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'm':
      model = optarg;
      break;
    case 'd':
      device = optarg;
      break;
    case 'i':
      if (n_in == MAX_JOBS) {
        fprintf(stderr, "s1-forward: at most %d --input files\n", MAX_JOBS);
        return 2;
      }
      inputs[n_in++] = optarg;
      break;
    case 'o':
      if (n_out == MAX_JOBS) {
        fprintf(stderr, "s1-forward: at most %d --output files\n", MAX_JOBS);
        return 2;
      }
      outputs[n_out++] = optarg;
      break;
    case 'b':
      numerics = "bf16";
      break;
    case 'g':
      if (strcmp(optarg, "chunked") == 0)
        gdn = EX_GDN_CHUNKED;
      else if (strcmp(optarg, "recurrent") == 0)
        gdn = EX_GDN_RECURRENT;
      else if (strcmp(optarg, "auto") != 0) {
        usage();
        return 2;
      }
      break;
    case 'n':
      numerics = optarg;
      break;
    case 'r': {
      char *end = NULL;
      repeat = strtol(optarg, &end, 10);
      if (*end || repeat < 1 || repeat > 10000) {
        usage();
        return 2;
      }
      break;
    }
    case 'h':
      usage();
      return 0;
    default:
      usage();
      return 2;
    }
  }
  if (!model || !n_in || n_in != n_out || optind != argc) {
    usage();
    return 2;
  }
  int dev = -1;
  if (strcmp(device, "cpu") != 0 && (dev = s1_forward_cuda_device(device)) < 0) {
    fprintf(stderr, "s1-forward: device \"%s\" is not cpu, cuda or cuda:N\n", device);
    return 2;
  }
  if (dev >= 0 && numerics) { /* cuda: bf16 and its float32-residual variant */
    if (strcmp(numerics, "bf16-fp32-residual") == 0 || strcmp(numerics, "fp32-residual") == 0)
      fp32_residual = true;
    else if (strcmp(numerics, "bf16") != 0 && strcmp(numerics, "ref-bf16") != 0) {
      fprintf(stderr,
              "s1-forward: --numerics %s: the cuda engine serves bf16 (or "
              "bf16-fp32-residual); fp32 runs with --device cpu\n",
              numerics);
      return 2;
    }
    numerics = NULL;
  } else if (numerics && strcmp(numerics, "fp32") != 0 && strcmp(numerics, "bf16") != 0) {
    fprintf(stderr, "s1-forward: --numerics %s: the CPU forward runs fp32 or bf16\n", numerics);
    return 2;
  }
  if (repeat && dev < 0) {
    fprintf(stderr, "s1-forward: --repeat times the cuda device only\n");
    return 2;
  }
  /* each pair in order; the CUDA engine is kept between pairs that fit its reservation */
  int r = 0;
  for (int j = 0; j < n_in && !r; j++) {
    struct cm_diag diag = {0};
    r = run(model, inputs[j], outputs[j], numerics, gdn, dev, (int)repeat, fp32_residual, t0_ms, &diag);
    if (r)
      fprintf(stderr, "s1-forward: %s (%s)\n", diag.msg ? diag.msg : cm_strerror(r), cm_strerror(r));
    cm_diag_fini(&diag);
  }
  s1_forward_cuda_release();
  return r ? 1 : 0;
}
