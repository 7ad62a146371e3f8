/* s1-export: turns a Hugging Face Qwen3.5 checkpoint (ConditionalGeneration or CausalLM key layout,
 * one file or shards) plus an optional PEFT LoRA adapter into an s1serve model directory: canonical
 * BF16 weights.safetensors, tokenizer.json, optional adapter.safetensors, and the s1-model.json
 * manifest with the SHA-256 of every file. It refuses what it does not implement (DoRA, rsLoRA,
 * LoRA bias, modules_to_save, rank/alpha patterns) instead of approximating it. */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cm_model_dir.h"
#include "cm_qwen35.h"
#include "cm_safetensors.h"
#include "cm_sha256.h"
#include "cm_version.h"
#include "export_hf.h"
#include "export_jemm.h"
#include "export_util.h"
#include "omnijev_export.h"
#include "open_jev_export.h"

#define EXPORT_VERSION "s1-export 0.1.0"

/* One tensor of the output, in canonical naming. */
struct item {
  char *canon;               /* canonical key, heap */
  struct cm_tensor_view src; /* source tensor (base checkpoint) */
  enum cm_dtype out_dtype;   /* BF16, or F32 for A_log / dt_bias stored wider */
  struct cm_tensor_view a;   /* LoRA A [r, in] when adapted (n_dims 0 otherwise) */
  struct cm_tensor_view b;   /* LoRA B [out, r] */
  bool merge;                /* write W + scale * B A instead of W */
  double scale;              /* alpha / r */
};

struct lora_cfg {
  int64_t r;         /* rank */
  double alpha;      /* lora_alpha */
  json_object *cfg;  /* adapter_config.json, owned */
};

static bool starts_with(const char *s, const char *p) {
  return strncmp(s, p, strlen(p)) == 0;
}

static bool ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}

static int item_cmp(const void *x, const void *y) {
  return strcmp(((const struct item *)x)->canon, ((const struct item *)y)->canon);
}

static struct item *find_item(struct item *items, size_t n, const char *canon) {
  struct item key = {.canon = (char *)canon};
  return bsearch(&key, items, n, sizeof key, item_cmp);
}

/* Maps a source key to its canonical name; NULL (and *skip) for mtp.* and a tied lm_head. */
static char *canonical(const char *key, const char *text_prefix, bool tied, bool *skip) {
  *skip = false;
  if (starts_with(key, "mtp.") || (tied && strcmp(key, "lm_head.weight") == 0)) {
    *skip = true;
    return NULL;
  }
  if (starts_with(key, "model.visual.") || strcmp(key, "lm_head.weight") == 0)
    return strdup(key);
  if (!starts_with(key, text_prefix))
    return NULL;
  size_t n = strlen("model.language_model.") + strlen(key) - strlen(text_prefix) + 1;
  char *c = malloc(n);
  if (c)
    snprintf(c, n, "model.language_model.%s", key + strlen(text_prefix));
  return c;
}

/* ---- tensor data ----------------------------------------------------------------------------- */

/* Rounds a double to bfloat16 once, round-to-nearest-even (not via a float rounding first). */
static uint16_t f64_to_bf16(double x) {
  float f = (float)x;
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0xffffu) == 0x8000u && (double)f != x && isfinite(f)) {
    /* f sits exactly on a bf16 midpoint only because of the float rounding: decide by x. */
    return fabs(x) > fabs((double)f) ? (uint16_t)((u >> 16) + 1) : (uint16_t)(u >> 16);
  }
  return cm_f32_to_bf16(f);
}

static void put16(unsigned char *o, size_t i, uint16_t v) {
  o[2 * i] = (unsigned char)v;
  o[2 * i + 1] = (unsigned char)(v >> 8);
}

static int fill_item(void *ctx, const char *name, void *buf, size_t n_bytes) {
  (void)name;
  (void)n_bytes;
  const struct item *it = ctx;
  size_t n = (size_t)it->src.n_elems;
  float *w = malloc(n * sizeof *w);
  if (!w)
    return -ENOMEM;
  cm_tensor_to_f32(&it->src, w);
  unsigned char *o = buf;
  if (it->out_dtype == CM_DTYPE_F32) {
    memcpy(o, w, n * 4);
  } else if (!it->merge) {
    for (size_t i = 0; i < n; i++)
      put16(o, i, cm_f32_to_bf16(w[i]));
  } else {
    /* W' = bf16( f32(W) + (alpha/r) * sum_k f32(B[o,k]) f32(A[k,i]) ): products and sum in double,
     * one rounding to bf16 at the end. */
    int64_t rows = it->src.shape[0], cols = it->src.shape[1], r = it->a.shape[0];
    float *a = malloc((size_t)(r * cols) * sizeof *a), *b = malloc((size_t)(rows * r) * sizeof *b);
    if (!a || !b) {
      free(a);
      free(b);
      free(w);
      return -ENOMEM;
    }
    cm_tensor_to_f32(&it->a, a);
    cm_tensor_to_f32(&it->b, b);
    for (int64_t i = 0; i < rows; i++) {
      for (int64_t j = 0; j < cols; j++) {
        double acc = 0.0;
        for (int64_t k = 0; k < r; k++)
          acc += (double)b[i * r + k] * (double)a[k * cols + j];
        put16(o, (size_t)(i * cols + j), f64_to_bf16((double)w[i * cols + j] + it->scale * acc));
      }
    }
    free(a);
    free(b);
  }
  free(w);
  return 0;
}

/* A LoRA factor widened to F32 for adapter.safetensors. */
static int fill_factor(void *ctx, const char *name, void *buf, size_t n_bytes) {
  (void)name;
  (void)n_bytes;
  return cm_tensor_to_f32(ctx, buf);
}

/* ---- adapter --------------------------------------------------------------------------------- */

static bool json_true(json_object *o, const char *k) {
  json_object *v;
  return json_object_object_get_ex(o, k, &v) && json_object_get_boolean(v);
}

/* Reads adapter_config.json and refuses every feature this exporter does not implement. */
static int read_lora_config(const char *dir, struct lora_cfg *lc) {
  char *p = ex_export_path_join(dir, "adapter_config.json");
  int rc = 0;
  json_object *c = json_object_from_file(p), *v;
  if (!c) {
    rc = ex_export_fail("%s: cannot read JSON (%s)", p, json_util_get_last_err());
    goto out;
  }
  lc->cfg = c;
  if (json_object_object_get_ex(c, "peft_type", &v) && strcmp(json_object_get_string(v), "LORA")) {
    rc = ex_export_fail("%s: peft_type \"%s\" is not supported (LORA only)", p, json_object_get_string(v));
  } else if (json_true(c, "use_dora")) {
    rc = ex_export_fail("%s: use_dora is true: DoRA adapters are not supported", p);
  } else if (json_true(c, "use_rslora")) {
    rc = ex_export_fail("%s: use_rslora is true: rank-stabilised LoRA (alpha/sqrt(r)) is not supported", p);
  } else if (json_object_object_get_ex(c, "bias", &v) && v &&
             strcmp(json_object_get_string(v), "none") != 0) {
    rc = ex_export_fail("%s: bias is \"%s\": trained biases are not supported (bias must be \"none\")", p,
              json_object_get_string(v));
  } else if (json_object_object_get_ex(c, "modules_to_save", &v) && v &&
             !(json_object_is_type(v, json_type_array) && json_object_array_length(v) == 0)) {
    rc = ex_export_fail("%s: modules_to_save is set: fully trained extra modules are not supported", p);
  } else if (json_object_object_get_ex(c, "rank_pattern", &v) && v &&
             !(json_object_is_type(v, json_type_object) && json_object_object_length(v) == 0)) {
    rc = ex_export_fail("%s: rank_pattern is not empty: per-module ranks are not supported", p);
  } else if (json_object_object_get_ex(c, "alpha_pattern", &v) && v &&
             !(json_object_is_type(v, json_type_object) && json_object_object_length(v) == 0)) {
    rc = ex_export_fail("%s: alpha_pattern is not empty: per-module alphas are not supported", p);
  } else if (json_true(c, "fan_in_fan_out")) {
    rc = ex_export_fail("%s: fan_in_fan_out is true: transposed (Conv1D) layers are not supported", p);
  } else if (!json_object_object_get_ex(c, "r", &v) || !json_object_is_type(v, json_type_int) ||
             json_object_get_int64(v) <= 0) {
    rc = ex_export_fail("%s: key 'r' missing or not a positive integer", p);
  } else {
    lc->r = json_object_get_int64(v);
    if (!json_object_object_get_ex(c, "lora_alpha", &v) ||
        !(json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)) ||
        !(json_object_get_double(v) > 0))
      rc = ex_export_fail("%s: key 'lora_alpha' missing or not a positive number", p);
    else
      lc->alpha = json_object_get_double(v);
    if (!rc && (!json_object_object_get_ex(c, "target_modules", &v) ||
                !(json_object_is_type(v, json_type_array) || json_object_is_type(v, json_type_string))))
      rc = ex_export_fail("%s: key 'target_modules' missing (a list of module names or a string)", p);
  }
out:
  free(p);
  return rc;
}

/* PEFT's list rule: a module is targeted when its name equals a target or ends with "." + target. */
static bool module_targeted(json_object *targets, const char *module) {
  for (size_t i = 0; i < json_object_array_length(targets); i++) {
    const char *t = json_object_get_string(json_object_array_get_idx(targets, i));
    size_t a = strlen(module), b = t ? strlen(t) : 0;
    if (t && (strcmp(t, module) == 0 || (a > b && module[a - b - 1] == '.' && ends_with(module, t))))
      return true;
  }
  return false;
}

/* Attaches each adapter factor pair to its base item; checks names, shapes and targets. */
static int attach_lora(struct cm_safetensors *ad, const char *ad_path, struct lora_cfg *lc,
                       struct item *items, size_t n_items, const char *text_prefix, bool tied,
                       bool merge) {
  json_object *targets;
  json_object_object_get_ex(lc->cfg, "target_modules", &targets);
  if (json_object_is_type(targets, json_type_string))
    return ex_export_fail("%s/adapter_config.json: target_modules is a regular expression; list the module "
                "names instead",
                ad_path);
  const char *pre = "base_model.model.";
  size_t n_pairs = 0;
  for (size_t i = 0; i < cm_safetensors_count(ad); i++) {
    struct cm_tensor_view v;
    cm_safetensors_at(ad, i, &v);
    const char *kind = NULL;
    if (ends_with(v.name, ".lora_A.weight"))
      kind = ".lora_A.weight";
    else if (ends_with(v.name, ".lora_B.weight"))
      continue; /* handled with its A */
    if (!kind || !starts_with(v.name, pre)) {
      return ex_export_fail("%s: tensor '%s' is not a LoRA factor (expected base_model.model.<module>."
                  "lora_A.weight / .lora_B.weight; DoRA magnitudes, embedding LoRA and biases are "
                  "not supported)",
                  v.file, v.name);
    }
    size_t mlen = strlen(v.name) - strlen(pre) - strlen(kind);
    char module[400], key[420], bkey[440];
    if (mlen >= sizeof module)
      return ex_export_fail("%s: tensor '%s': name too long", v.file, v.name);
    memcpy(module, v.name + strlen(pre), mlen);
    module[mlen] = '\0';
    snprintf(key, sizeof key, "%s.weight", module);
    snprintf(bkey, sizeof bkey, "%s%s.lora_B.weight", pre, module);
    struct cm_tensor_view b;
    if (cm_safetensors_find(ad, bkey, &b) != 0)
      return ex_export_fail("%s: tensor '%s' missing (its lora_A is present)", v.file, bkey);
    bool skip;
    char *canon = canonical(key, text_prefix, tied, &skip);
    struct item *it = canon ? find_item(items, n_items, canon) : NULL;
    if (!it) {
      free(canon);
      return ex_export_fail("%s: tensor '%s' adapts '%s', which is not a weight of the base model", v.file,
                  v.name, key);
    }
    free(canon);
    if (!module_targeted(targets, module))
      return ex_export_fail("%s: tensor '%s': module '%s' is not in target_modules", v.file, v.name, module);
    if (it->src.n_dims != 2 || strstr(it->canon, "embed_tokens"))
      return ex_export_fail("%s: tensor '%s': '%s' is not a linear weight", v.file, v.name, key);
    int64_t out = it->src.shape[0], in = it->src.shape[1];
    if (v.n_dims != 2 || v.shape[0] != lc->r || v.shape[1] != in)
      return ex_export_fail("%s: tensor '%s' has shape [%lld, %lld], expected [r=%lld, in=%lld]", v.file,
                  v.name, (long long)(v.n_dims > 0 ? v.shape[0] : 0),
                  (long long)(v.n_dims > 1 ? v.shape[1] : 0), (long long)lc->r, (long long)in);
    if (b.n_dims != 2 || b.shape[0] != out || b.shape[1] != lc->r)
      return ex_export_fail("%s: tensor '%s' has shape [%lld, %lld], expected [out=%lld, r=%lld]", b.file,
                  b.name, (long long)(b.n_dims > 0 ? b.shape[0] : 0),
                  (long long)(b.n_dims > 1 ? b.shape[1] : 0), (long long)out, (long long)lc->r);
    if (v.dtype == CM_DTYPE_F16 || b.dtype == CM_DTYPE_F16)
      return ex_export_fail("%s: tensor '%s': F16 factors are not supported (F32 or BF16)", v.file, v.name);
    if (it->a.n_dims)
      return ex_export_fail("%s: tensor '%s': module adapted twice", v.file, v.name);
    it->a = v;
    it->b = b;
    it->merge = merge;
    it->scale = lc->alpha / (double)lc->r;
    n_pairs++;
  }
  /* every B has its A */
  for (size_t i = 0; i < cm_safetensors_count(ad); i++) {
    struct cm_tensor_view v, a;
    cm_safetensors_at(ad, i, &v);
    if (!ends_with(v.name, ".lora_B.weight"))
      continue;
    char akey[440];
    snprintf(akey, sizeof akey, "%.*s.lora_A.weight",
             (int)(strlen(v.name) - strlen(".lora_B.weight")), v.name);
    if (cm_safetensors_find(ad, akey, &a) != 0)
      return ex_export_fail("%s: tensor '%s' missing (its lora_B is present)", v.file, akey);
  }
  if (n_pairs == 0)
    return ex_export_fail("%s: no LoRA factors found", ad_path);
  return 0;
}

/* ---- manifest helpers ------------------------------------------------------------------------ */

/* Records {"path", "sha256"} of a source file under upstream.sources. */
static int add_source(json_object *sources, const char *path) {
  uint8_t dg[CM_SHA256_BYTES];
  char hex[CM_SHA256_HEX];
  struct cm_diag d = {0};
  int rc = cm_sha256_file(path, dg, NULL, &d);
  if (rc) {
    ex_export_fail("%s", d.msg ? d.msg : path);
    cm_diag_fini(&d);
    return rc;
  }
  cm_sha256_hex(dg, hex);
  char *abs = realpath(path, NULL);
  json_object *e = json_object_new_object();
  json_object_object_add(e, "path", json_object_new_string(abs ? abs : path));
  json_object_object_add(e, "sha256", json_object_new_string(hex));
  json_object_array_add(sources, e);
  free(abs);
  return 0;
}

/* ---- main ------------------------------------------------------------------------------------ */

static void usage(FILE *f) {
  fprintf(
      f, "usage: s1-export --family qwen3_5|jemm --base HF_DIR [--adapter PEFT_DIR]\n"
         "                 [--lora merge|keep] [--chat CHAT.json] --out DIR\n"
         "  --lora: qwen3_5 merges by default; jemm keeps the adapter as fp32 factors\n"
         "  --chat: jemm's chat wrapper {prefix, suffix} (recipe/jemm/chat_wrapper.py)\n"
         "       s1-export --family open_jev --package PKG --base HF_DIR --out DIR\n"
         "       s1-export --family omnijev --base HF_DIR --checkpoint DIR --out DIR\n"
         "  (s1-export --family open_jev --help, --family omnijev --help: their options)\n"
         "  every family: [--numerics fp32|bf16] the directory's default numerics (fp32, the\n"
         "       float32 reference run, what the CPU serves; bf16 for a directory meant for\n"
         "       the bf16 numerics)\n");
}

static int export_main(int argc, char **argv);

/* The exporters by family: one line per family of common/cm_family.h (test family_tables). */
struct export_family {
  const char *name; /* manifest "family" */
  /* its own command line (argv as given, qwen_main for the base it wraps); NULL: export_main, the
   * Hugging Face base (+ PEFT adapter) with the family's blocks added there */
  int (*main)(int argc, char **argv, int (*qwen_main)(int, char **));
};

static const struct export_family export_families[] = {
    {.name = "qwen3_5", .main = NULL},
    {.name = "open_jev", .main = ex_export_open_jev_main}, /* open_jev/ */
    {.name = "omnijev", .main = ex_export_omnijev_main},   /* omnijev/ */
    {.name = "jemm", .main = NULL},                        /* jemm/: blocks in export_main */
};
#define N_EXPORT_FAMILIES (sizeof export_families / sizeof *export_families)

static const struct export_family *export_family_find(const char *name) {
  for (size_t i = 0; name && i < N_EXPORT_FAMILIES; i++)
    if (strcmp(export_families[i].name, name) == 0)
      return &export_families[i];
  return NULL;
}

/* The family names, ", "-separated, in buf[n]. */
static const char *export_family_list(char *buf, size_t n) {
  size_t at = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < N_EXPORT_FAMILIES && at < n; i++) {
    int w = snprintf(buf + at, n - at, "%s%s", i ? ", " : "", export_families[i].name);
    at += w > 0 ? (size_t)w : 0;
  }
  return buf;
}

/* s1-export: takes --numerics out of argv, runs the family's exporter and records the directory's
 * default numerics (manifest "numerics") in the manifest it wrote. */
int main(int argc, char **argv) {
  if (cm_version_requested(argc, argv, "s1-export"))
    return 0;
  const char *numerics = NULL, *out = NULL;
  char **av = calloc((size_t)argc + 1, sizeof *av);
  int ac = 0;
  if (!av)
    return 1;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--numerics") == 0 && i + 1 < argc) {
      numerics = argv[++i];
      continue;
    }
    if (strncmp(argv[i], "--numerics=", 11) == 0) {
      numerics = argv[i] + 11;
      continue;
    }
    if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
      out = argv[i + 1];
    av[ac++] = argv[i];
  }
  enum cm_numerics nm = CM_NUMERICS_FP32;
  if (numerics && cm_numerics_parse(numerics, &nm) != 0) {
    free(av);
    return ex_export_fail("--numerics must be fp32 or bf16"), 2;
  }
  int rc = export_main(ac, av);
  free(av);
  if (rc || !numerics || !out)
    return rc;
  char *mp = ex_export_path_join(out, CM_MODEL_MANIFEST);
  json_object *m = mp ? json_object_from_file(mp) : NULL;
  struct cm_diag d = {0};
  if (m) {
    json_object_object_add(m, "numerics", json_object_new_string(cm_numerics_name(nm)));
    rc = cm_model_dir_write_manifest(out, m, &d) ? 1 : 0;
  } else {
    rc = 1;
  }
  if (rc)
    ex_export_fail("%s: cannot record the numerics", mp ? mp : out);
  cm_diag_fini(&d);
  json_object_put(m);
  free(mp);
  return rc;
}

static int export_main(int argc, char **argv) {
  const char *family = NULL, *base = NULL, *adapter_dir = NULL, *lora_mode = NULL, *out = NULL;
  const char *chat_path = NULL; /* jemm: --chat */
  static const struct option lo[] = {{"family", required_argument, 0, 'f'},
                                     {"base", required_argument, 0, 'b'},
                                     {"adapter", required_argument, 0, 'a'},
                                     {"lora", required_argument, 0, 'l'},
                                     {"out", required_argument, 0, 'o'},
                                     {"chat", required_argument, 0, 'c'},
                                     {"help", no_argument, 0, 'h'},
                                     {0, 0, 0, 0}};
  for (int i = 1; i + 1 < argc; i++) /* a family with its own command line */
    if (strcmp(argv[i], "--family") == 0) {
      const struct export_family *f = export_family_find(argv[i + 1]);
      if (f && f->main)
        return f->main(argc, argv, export_main);
    }
  int c;
  while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    switch (c) {
    case 'f': family = optarg; break;
    case 'b': base = optarg; break;
    case 'a': adapter_dir = optarg; break;
    case 'l': lora_mode = optarg; break;
    case 'o': out = optarg; break;
    case 'c': chat_path = optarg; break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (!family || !base || !out || optind != argc) {
    usage(stderr);
    return 2;
  }
  bool jemm = strcmp(family, "jemm") == 0; /* jemm/export_jemm.c adds its checks and blocks */
  if (!export_family_find(family)) {
    char known[128];
    return ex_export_fail("--family \"%s\" is not supported (%s)", family,
                          export_family_list(known, sizeof known)), 2;
  }
  if (chat_path && !jemm)
    return ex_export_fail("--chat is for --family jemm"), 2;
  if (lora_mode && strcmp(lora_mode, "merge") != 0 && strcmp(lora_mode, "keep") != 0)
    return ex_export_fail("--lora must be merge or keep"), 2;
  if (lora_mode && !adapter_dir)
    return ex_export_fail("--lora needs --adapter"), 2;
  bool merge = lora_mode ? strcmp(lora_mode, "merge") == 0 : !jemm;

  int rc = 0;
  struct cm_diag d = {0};
  struct cm_safetensors *st = NULL, *ad = NULL;
  struct cm_qwen35_dims dims = {0};
  struct cm_qwen35_tensor *inv = NULL;
  struct item *items = NULL;
  size_t n_items = 0, n_inv = 0;
  struct lora_cfg lc = {0};
  struct cm_safetensors_writer *w = NULL, *aw = NULL;
  json_object *config = NULL, *pre = NULL, *manifest = NULL;
  json_object *tinfo = NULL; /* the tokenizer class transformers picks (export_hf.h) */
  char *cpath = ex_export_path_join(base, "config.json"), *tpath = ex_export_path_join(base, "tokenizer.json");
  char *ppath = ex_export_path_join(base, "preprocessor_config.json"), *tmp = NULL;

  config = json_object_from_file(cpath);
  if (!config) {
    rc = ex_export_fail("%s: cannot read JSON (%s)", cpath, json_util_get_last_err());
    goto out;
  }
  rc = cm_qwen35_dims_read(config, cpath, &dims, &d);
  if (rc) {
    ex_export_fail("%s", d.msg);
    goto out;
  }
  rc = cm_safetensors_open(base, &st, &d);
  if (rc) {
    ex_export_fail("%s", d.msg);
    goto out;
  }
  /* Text prefix (spec §2.1): the first of these under which embed_tokens.weight exists. */
  const char *prefixes[] = {"model.language_model.", "model.", ""};
  const char *tp = NULL;
  for (int i = 0; i < 3 && !tp; i++) {
    char k[64];
    struct cm_tensor_view v;
    snprintf(k, sizeof k, "%sembed_tokens.weight", prefixes[i]);
    if (cm_safetensors_find(st, k, &v) == 0)
      tp = prefixes[i];
  }
  if (!tp) {
    rc = ex_export_fail("%s: tensor 'model.language_model.embed_tokens.weight' missing (also tried "
              "'model.embed_tokens.weight' and 'embed_tokens.weight')",
              base);
    goto out;
  }
  /* Map every source tensor to its canonical name. */
  size_t n_src = cm_safetensors_count(st);
  items = calloc(n_src ? n_src : 1, sizeof *items);
  if (!items) {
    rc = ex_export_fail("out of memory");
    goto out;
  }
  bool with_vision = false;
  for (size_t i = 0; i < n_src; i++) {
    struct cm_tensor_view v;
    bool skip;
    cm_safetensors_at(st, i, &v);
    char *canon = canonical(v.name, tp, dims.tied, &skip);
    if (skip)
      continue;
    if (!canon) {
      rc = ex_export_fail("%s: unexpected tensor '%s' (not under the text prefix '%s', model.visual., "
                "lm_head or mtp)",
                v.file, v.name, tp);
      goto out;
    }
    with_vision |= starts_with(canon, "model.visual.");
    items[n_items].canon = canon;
    items[n_items].src = v;
    items[n_items].out_dtype = CM_DTYPE_BF16;
    if (v.dtype != CM_DTYPE_BF16 && (ends_with(canon, ".A_log") || ends_with(canon, ".dt_bias")))
      items[n_items].out_dtype = CM_DTYPE_F32; /* kept exact (spec §2.2) */
    n_items++;
  }
  qsort(items, n_items, sizeof *items, item_cmp);
  for (size_t i = 1; i < n_items; i++) {
    if (strcmp(items[i].canon, items[i - 1].canon) == 0) {
      rc = ex_export_fail("%s: tensors '%s' and '%s' both map to '%s'", base, items[i - 1].src.name,
                items[i].src.name, items[i].canon);
      goto out;
    }
  }
  if (with_vision && !dims.has_vision_config) {
    rc = ex_export_fail("%s: the weights hold model.visual.* but the config has no vision_config", cpath);
    goto out;
  }
  /* Counts and shapes against the inventory (spec §2.3-2.6). */
  rc = cm_qwen35_inventory(&dims, with_vision, &inv, &n_inv);
  if (rc)
    goto out;
  for (size_t i = 0; i < n_inv; i++) {
    struct item *it = find_item(items, n_items, inv[i].name);
    if (!it) {
      rc = ex_export_fail("%s: tensor '%s' missing (layout prefix '%s')", base, inv[i].name, tp);
      goto out;
    }
    bool same = it->src.n_dims == inv[i].n_dims;
    for (int k = 0; same && k < inv[i].n_dims; k++)
      same = it->src.shape[k] == inv[i].shape[k];
    if (!same) {
      char got[160], want[160];
      cm_shape_str(it->src.shape, it->src.n_dims, got, sizeof got);
      cm_shape_str(inv[i].shape, inv[i].n_dims, want, sizeof want);
      rc = ex_export_fail("%s: tensor '%s' has shape %s, config needs %s", it->src.file, it->src.name, got,
                want);
      goto out;
    }
  }
  if (n_items != n_inv) {
    for (size_t i = 0; i < n_items; i++) {
      bool known = false;
      for (size_t j = 0; j < n_inv && !known; j++)
        known = strcmp(inv[j].name, items[i].canon) == 0;
      if (!known) {
        rc = ex_export_fail("%s: unexpected tensor '%s' (%zu expected, %zu found)", items[i].src.file,
                  items[i].src.name, n_inv, n_items);
        goto out;
      }
    }
  }
  if (adapter_dir) {
    rc = read_lora_config(adapter_dir, &lc);
    if (rc)
      goto out;
    tmp = ex_export_path_join(adapter_dir, "adapter_model.safetensors");
    rc = cm_safetensors_open(tmp, &ad, &d);
    if (rc) {
      ex_export_fail("%s", d.msg);
      goto out;
    }
    rc = attach_lora(ad, adapter_dir, &lc, items, n_items, tp, dims.tied, merge);
    if (rc)
      goto out;
  }

  /* Output. */
  if (mkdir(out, 0755) != 0 && errno != EEXIST) {
    rc = ex_export_fail("%s: %s", out, strerror(errno));
    goto out;
  }
  rc = cm_safetensors_writer_new(&w);
  for (size_t i = 0; i < n_items && !rc; i++) {
    struct item *it = &items[i];
    if (it->src.dtype == it->out_dtype && !it->merge)
      rc = cm_safetensors_writer_add(w, it->canon, it->out_dtype, it->src.n_dims, it->src.shape,
                                     it->src.data);
    else
      rc = cm_safetensors_writer_add_fill(w, it->canon, it->out_dtype, it->src.n_dims,
                                          it->src.shape, fill_item, it);
  }
  free(tmp);
  tmp = ex_export_path_join(out, "weights.safetensors");
  if (!rc)
    rc = cm_safetensors_writer_finish(w, tmp, &d);
  if (rc) {
    ex_export_fail("%s", d.msg ? d.msg : strerror(-rc));
    goto out;
  }
  if (adapter_dir && !merge) {
    rc = cm_safetensors_writer_new(&aw);
    for (size_t i = 0; i < n_items && !rc; i++) {
      struct item *it = &items[i];
      if (!it->a.n_dims)
        continue;
      char ka[300], kb[300];
      size_t base_len = strlen(it->canon) - strlen(".weight");
      snprintf(ka, sizeof ka, "%.*s.lora_A", (int)base_len, it->canon);
      snprintf(kb, sizeof kb, "%.*s.lora_B", (int)base_len, it->canon);
      rc = cm_safetensors_writer_add_fill(aw, ka, CM_DTYPE_F32, 2, it->a.shape, fill_factor,
                                          &it->a);
      if (!rc)
        rc = cm_safetensors_writer_add_fill(aw, kb, CM_DTYPE_F32, 2, it->b.shape, fill_factor,
                                            &it->b);
    }
    free(tmp);
    tmp = ex_export_path_join(out, "adapter.safetensors");
    if (!rc)
      rc = cm_safetensors_writer_finish(aw, tmp, &d);
    if (rc) {
      ex_export_fail("%s", d.msg ? d.msg : strerror(-rc));
      goto out;
    }
  }
  free(tmp);
  tmp = ex_export_path_join(out, "tokenizer.json");
  /* the tokenizer as transformers' AutoTokenizer loads the base (export_hf.h) */
  rc = ex_hf_export_tokenizer(base, tmp, &tinfo);
  if (rc)
    goto out;
  /* the image processor as transformers reads it, against what the preprocessor does: JEMM's
   * bounds are the spec's (65,536 .. 16,777,216) */
  int have_proc = 0;
  if (with_vision &&
      (rc = ex_hf_check_processor(base, jemm ? 65536 : -1, jemm ? 16777216 : -1, &have_proc, NULL)))
    goto out;

  /* Manifest. */
  struct stat sb;
  if (stat(ppath, &sb) == 0) {
    pre = json_object_from_file(ppath);
    if (!pre) {
      rc = ex_export_fail("%s: cannot read JSON (%s)", ppath, json_util_get_last_err());
      goto out;
    }
  }
  manifest = cm_model_dir_manifest_new("qwen3_5", config, with_vision, "tokenizer.json", pre);
  if (!manifest) {
    rc = ex_export_fail("out of memory");
    goto out;
  }
  json_object *mtok = NULL;
  if (json_object_object_get_ex(manifest, "tokenizer", &mtok)) {
    json_object_object_add(mtok, "transformers", tinfo); /* class, chosen_by, rebuilt */
    tinfo = NULL;
  }

  json_object *up = json_object_new_object(), *src = json_object_new_array();
  json_object_object_add(up, "exporter", json_object_new_string(EXPORT_VERSION));
  json_object_object_add(up, "text_prefix", json_object_new_string(tp));
  json_object_object_add(up, "sources", src);
  json_object_object_add(manifest, "upstream", up);
  rc = add_source(src, cpath);
  for (size_t i = 0; i < n_items && !rc; i++) { /* each shard once */
    bool seen = false;
    for (size_t j = 0; j < i && !seen; j++)
      seen = strcmp(items[j].src.file, items[i].src.file) == 0;
    if (!seen)
      rc = add_source(src, items[i].src.file);
  }
  if (!rc)
    rc = add_source(src, tpath);
  if (!rc && pre)
    rc = add_source(src, ppath);
  if (!rc && adapter_dir) {
    free(tmp);
    tmp = ex_export_path_join(adapter_dir, "adapter_config.json");
    rc = add_source(src, tmp);
    free(tmp);
    tmp = ex_export_path_join(adapter_dir, "adapter_model.safetensors");
    if (!rc)
      rc = add_source(src, tmp);
  }
  if (rc)
    goto out;
  if (adapter_dir) {
    json_object *a = json_object_new_object();
    json_object_object_add(a, "rank", json_object_new_int64(lc.r));
    json_object_object_add(a, "alpha", json_object_new_double(lc.alpha));
    json_object_object_add(a, "scale", json_object_new_double(lc.alpha / (double)lc.r));
    if (merge) {
      json_object_object_add(a, "merged", json_object_new_boolean(true));
      json_object_object_add(a, "rounding",
                             json_object_new_string("bf16(f32(W) + scale * B.A), products and sum "
                                                    "in double, one round-to-nearest-even"));
      json_object_object_add(manifest, "lora_merged", a);
    } else {
      json_object_object_add(a, "file", json_object_new_string("adapter.safetensors"));
      json_object_object_add(manifest, "adapter", a);
    }
  }
  json_object *files = json_object_new_object();
  json_object_object_add(manifest, "files", files);
  if (jemm) {
    json_object *jc = NULL;
    struct export_jemm_in ji = {.base = base, .adapter_dir = adapter_dir, .out = out,
                                .chat_path = chat_path, .merged = merge, .rank = lc.r,
                                .alpha = lc.alpha, .dims = &dims, .image_token_id = -1};
    for (size_t i = 0; i < n_items; i++)
      if (items[i].a.n_dims) {
        bool lang = !starts_with(items[i].canon, "model.visual.") &&
                    !starts_with(items[i].canon, "lm_head");
        ji.n_pairs += lang;
        ji.n_other_pairs += !lang;
      }
    if (json_object_object_get_ex(config, "image_token_id", &jc))
      ji.image_token_id = json_object_get_int64(jc);
    if (export_jemm(&ji, manifest, src) != 0) {
      rc = -1;
      goto out;
    }
  }
  rc = cm_model_dir_add_file(files, out, "weights.safetensors", &d);
  if (!rc)
    rc = cm_model_dir_add_file(files, out, "tokenizer.json", &d);
  if (!rc && adapter_dir && !merge)
    rc = cm_model_dir_add_file(files, out, "adapter.safetensors", &d);
  if (!rc)
    rc = cm_model_dir_write_manifest(out, manifest, &d);
  if (rc)
    ex_export_fail("%s", d.msg ? d.msg : strerror(-rc));
  else
    printf("s1-export: wrote %s (%zu tensors%s%s)\n", out, n_items, with_vision ? ", vision" : "",
           adapter_dir ? (merge ? ", LoRA merged" : ", LoRA kept") : "");
out:
  cm_diag_fini(&d);
  for (size_t i = 0; i < n_items; i++)
    free(items[i].canon);
  free(items);
  free(inv);
  cm_qwen35_dims_fini(&dims);
  cm_safetensors_writer_free(w);
  cm_safetensors_writer_free(aw);
  cm_safetensors_close(st);
  cm_safetensors_close(ad);
  json_object_put(lc.cfg);
  json_object_put(config);
  json_object_put(pre);
  json_object_put(manifest);
  json_object_put(tinfo);
  free(cpath);
  free(tpath);
  free(ppath);
  free(tmp);
  return rc ? 1 : 0;
}
