/* transformers 5.17's reading of a release's tokenizer and image-processor files (export_hf.h):
 * the tokenizer class and its rebuild of tokenizer.json, the processor's effective settings. */
#include "export_hf.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "export_util.h"

enum tok_class {
  TOK_BACKEND, /* TokenizersBackend: tokenizer.json as it is */
  TOK_QWEN2,   /* Qwen2Tokenizer: rebuilt with the Qwen2 split regex */
  TOK_QWEN35,  /* Qwen3_5Tokenizer: rebuilt with the Qwen3.5 split regex (marks kept in words) */
};

static const char *const class_names[] = {"TokenizersBackend", "Qwen2Tokenizer",
                                          "Qwen3_5Tokenizer"};

/* The classes' own pre-tokenizer patterns (the regexes of tokenization_qwen2.py and
 * tokenization_qwen3_5.py, the same as in the Qwen2 / Qwen3.5 tokenizer.json files). */
static const char *const class_regex[] = {
    NULL,
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

/* tokenization_auto.py TOKENIZER_MAPPING_NAMES for the Qwen model types (transformers 5.17). */
static const struct {
  const char *model_type;
  enum tok_class cls;
} model_types[] = {
    {"qwen3_5", TOK_QWEN35},     {"qwen3_5_moe", TOK_QWEN35},   {"qwen3_5_text", TOK_QWEN35},
    {"qwen4_exp", TOK_QWEN35},   {"qwen2", TOK_QWEN2},          {"qwen2_moe", TOK_QWEN2},
    {"qwen2_vl", TOK_QWEN2},     {"qwen2_5_vl", TOK_QWEN2},     {"qwen2_5_omni", TOK_QWEN2},
    {"qwen2_audio", TOK_QWEN2},  {"colqwen2", TOK_QWEN2},       {"qwen3", TOK_QWEN2},
    {"qwen3_moe", TOK_QWEN2},    {"qwen3_next", TOK_QWEN2},     {"qwen3_vl", TOK_QWEN2},
    {"qwen3_vl_moe", TOK_QWEN2}, {"qwen3_omni_moe", TOK_QWEN2}, {"qwen3_asr", TOK_QWEN2},
};

static bool file_exists(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0;
}

/* An optional JSON object file: 0 (absent: *ret NULL) or -1 (unreadable, not an object). */
static int read_optional(const char *dir, const char *name, json_object **ret) {
  *ret = NULL;
  char *p = ex_export_path_join(dir, name);
  if (!p)
    return ex_export_fail("out of memory");
  int rc = 0;
  if (file_exists(p)) {
    *ret = json_object_from_file(p);
    if (!*ret || !json_object_is_type(*ret, json_type_object)) {
      json_object_put(*ret);
      *ret = NULL;
      rc = ex_export_fail("%s: not a JSON object (%s)", p, json_util_get_last_err());
    }
  }
  free(p);
  return rc;
}

static bool truthy_key(json_object *o, const char *k) {
  json_object *v = NULL;
  return o && json_object_object_get_ex(o, k, &v) && json_object_is_type(v, json_type_boolean) &&
         json_object_get_boolean(v);
}

/* The class AutoTokenizer picks. Returns 0 or -1 (refused). */
static int pick_class(const char *dir, json_object *cfg, json_object *config, enum tok_class *ret,
                      const char **ret_why) {
  json_object *v = NULL;
  if (cfg && json_object_object_get_ex(cfg, "tokenizer_class", &v) &&
      json_object_is_type(v, json_type_string)) {
    const char *n = json_object_get_string(v);
    static const struct {
      const char *name;
      enum tok_class cls;
    } names[] = {{"TokenizersBackend", TOK_BACKEND}, {"PreTrainedTokenizerFast", TOK_BACKEND},
                 {"Qwen2Tokenizer", TOK_QWEN2},      {"Qwen2TokenizerFast", TOK_QWEN2},
                 {"Qwen3_5Tokenizer", TOK_QWEN35},   {"Qwen3_5TokenizerFast", TOK_QWEN35}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
      if (strcmp(n, names[i].name) == 0) {
        *ret = names[i].cls;
        *ret_why = "tokenizer_config.json tokenizer_class";
        return 0;
      }
    return ex_export_fail("%s/tokenizer_config.json: tokenizer_class \"%s\" is not one s1-export "
                          "reproduces (TokenizersBackend, PreTrainedTokenizerFast, Qwen2Tokenizer, "
                          "Qwen3_5Tokenizer)",
                          dir, n);
  }
  if (cfg && v && !json_object_is_type(v, json_type_null))
    return ex_export_fail("%s/tokenizer_config.json: tokenizer_class must be a string", dir);
  if (config && json_object_object_get_ex(config, "model_type", &v) &&
      json_object_is_type(v, json_type_string)) {
    const char *mt = json_object_get_string(v);
    for (size_t i = 0; i < sizeof model_types / sizeof *model_types; i++)
      if (strcmp(mt, model_types[i].model_type) == 0) {
        *ret = model_types[i].cls;
        *ret_why = "config.json model_type";
        return 0;
      }
    return ex_export_fail("%s/config.json: model_type \"%s\" picks a tokenizer class s1-export "
                          "does not reproduce (no tokenizer_class in tokenizer_config.json)",
                          dir, mt);
  }
  *ret = TOK_BACKEND;
  *ret_why = "no tokenizer_class, no config.json model_type";
  return 0;
}

/* The content of a special-token value: a string or {"content": ...}; NULL for null. */
static const char *token_content(json_object *v) {
  json_object *c = NULL;
  if (json_object_is_type(v, json_type_string))
    return json_object_get_string(v);
  if (json_object_is_type(v, json_type_object) && json_object_object_get_ex(v, "content", &c) &&
      json_object_is_type(c, json_type_string))
    return json_object_get_string(c);
  return NULL;
}

static json_object *added_by_content(json_object *added, const char *content) {
  for (size_t i = 0; added && i < json_object_array_length(added); i++) {
    json_object *t = json_object_array_get_idx(added, i), *c = NULL;
    if (json_object_object_get_ex(t, "content", &c) &&
        strcmp(json_object_get_string(c), content) == 0)
      return t;
  }
  return NULL;
}

static int check_special(const char *dir, json_object *added, const char *what, const char *tok) {
  if (tok && !added_by_content(added, tok))
    return ex_export_fail("%s/tokenizer_config.json: %s \"%s\" is not an added token of "
                          "tokenizer.json (transformers would add it with a new id)",
                          dir, what, tok);
  return 0;
}

/* The settings of tokenizer_config.json that change ids, and the special tokens the class adds. */
static int check_config(const char *dir, json_object *cfg, json_object *tok, enum tok_class cls) {
  static const char *const off[] = {"split_special_tokens", "add_bos_token", "add_eos_token",
                                    "fix_mistral_regex"};
  for (size_t i = 0; i < sizeof off / sizeof *off; i++)
    if (truthy_key(cfg, off[i]))
      return ex_export_fail("%s/tokenizer_config.json: %s true is not reproduced", dir, off[i]);
  json_object *added = NULL, *v = NULL;
  json_object_object_get_ex(tok, "added_tokens", &added);
  if (cfg && json_object_object_get_ex(cfg, "added_tokens_decoder", &v)) {
    if (!json_object_is_type(v, json_type_object))
      return ex_export_fail("%s/tokenizer_config.json: added_tokens_decoder must be an object",
                            dir);
    json_object_object_foreach(v, id, entry) {
      bool same = false;
      for (size_t i = 0; added && i < json_object_array_length(added) && !same; i++) {
        json_object *t = json_object_array_get_idx(added, i), *tid = NULL;
        if (!json_object_object_get_ex(t, "id", &tid) ||
            strtoll(id, NULL, 10) != json_object_get_int64(tid))
          continue;
        static const char *const keys[] = {"content",    "lstrip",      "rstrip",
                                           "normalized", "single_word", "special"};
        same = true;
        for (size_t k = 0; k < sizeof keys / sizeof *keys && same; k++) {
          json_object *a = NULL, *b = NULL;
          json_object_object_get_ex(t, keys[k], &a);
          json_object_object_get_ex(entry, keys[k], &b);
          same = b == NULL || json_object_equal(a, b);
        }
      }
      if (!same)
        return ex_export_fail("%s/tokenizer_config.json: added_tokens_decoder[%s] is not the added "
                              "token %s of tokenizer.json",
                              dir, id, id);
    }
  }
  /* bos/eos/unk/pad with the class's defaults (Qwen2Tokenizer, Qwen3_5Tokenizer: unk, eos and pad
   * "<|endoftext|>"), then the additional / extra special tokens */
  static const char *const names[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
  for (size_t i = 0; i < 4; i++) {
    const char *t = NULL;
    if (cfg && json_object_object_get_ex(cfg, names[i], &v))
      t = token_content(v);
    else if (cls != TOK_BACKEND && i > 0)
      t = "<|endoftext|>";
    int rc = check_special(dir, added, names[i], t);
    if (rc)
      return rc;
  }
  static const char *const lists[] = {"additional_special_tokens", "extra_special_tokens"};
  for (size_t l = 0; l < 2; l++) {
    if (!cfg || !json_object_object_get_ex(cfg, lists[l], &v) || !v)
      continue;
    if (json_object_is_type(v, json_type_array)) {
      for (size_t i = 0; i < json_object_array_length(v); i++) {
        int rc =
            check_special(dir, added, lists[l], token_content(json_object_array_get_idx(v, i)));
        if (rc)
          return rc;
      }
    } else if (json_object_is_type(v, json_type_object)) {
      json_object_object_foreach(v, k, e) {
        (void)k;
        int rc = check_special(dir, added, lists[l], token_content(e));
        if (rc)
          return rc;
      }
    }
  }
  return 0;
}

static json_object *bytelevel(bool prefix, bool trim, bool regex) {
  json_object *b = json_object_new_object();
  json_object_object_add(b, "type", json_object_new_string("ByteLevel"));
  json_object_object_add(b, "add_prefix_space", json_object_new_boolean(prefix));
  json_object_object_add(b, "trim_offsets", json_object_new_boolean(trim));
  json_object_object_add(b, "use_regex", json_object_new_boolean(regex));
  return b;
}

/* The class's normalizer, pre-tokenizer and BPE options over tok (in place). Returns whether
 * anything changed, or -1 (not a BPE model). */
static int rebuild(const char *dir, json_object *tok, enum tok_class cls, bool add_prefix_space) {
  json_object *model = NULL, *type = NULL;
  if (!json_object_object_get_ex(tok, "model", &model) ||
      !json_object_object_get_ex(model, "type", &type) ||
      strcmp(json_object_get_string(type), "BPE") != 0)
    return ex_export_fail("%s/tokenizer.json: %s rebuilds a BPE model; this one is not BPE", dir,
                          class_names[cls]);
  int changed = 0;
  json_object *norm = json_object_new_object();
  json_object_object_add(norm, "type", json_object_new_string("NFC"));
  json_object *split = json_object_new_object(), *pat = json_object_new_object();
  json_object_object_add(pat, "Regex", json_object_new_string(class_regex[cls]));
  json_object_object_add(split, "type", json_object_new_string("Split"));
  json_object_object_add(split, "pattern", pat);
  json_object_object_add(split, "behavior", json_object_new_string("Isolated"));
  json_object_object_add(split, "invert", json_object_new_boolean(0));
  json_object *seq = json_object_new_array(), *pre = json_object_new_object();
  json_object_array_add(seq, split);
  json_object_array_add(seq, bytelevel(add_prefix_space, true, false));
  json_object_object_add(pre, "type", json_object_new_string("Sequence"));
  json_object_object_add(pre, "pretokenizers", seq);
  struct {
    json_object *parent;
    const char *key;
    json_object *want;
  } set[] = {
      {tok, "normalizer", norm},
      {tok, "pre_tokenizer", pre},
      {model, "dropout", NULL},
      {model, "unk_token", NULL},
      {model, "continuing_subword_prefix", json_object_new_string("")},
      {model, "end_of_word_suffix", json_object_new_string("")},
      {model, "fuse_unk", json_object_new_boolean(0)},
      {model, "byte_fallback", json_object_new_boolean(0)},
      {model, "ignore_merges", json_object_new_boolean(0)},
  };
  for (size_t i = 0; i < sizeof set / sizeof *set; i++) {
    json_object *cur = NULL;
    bool has = json_object_object_get_ex(set[i].parent, set[i].key, &cur);
    /* the pre-tokenizer's ByteLevel offsets flags do not change ids: compare without them */
    bool same = has && json_object_equal(cur, set[i].want);
    if (!same && has && set[i].want == pre && json_object_is_type(cur, json_type_object)) {
      json_object *c = NULL;
      if (json_object_object_get_ex(cur, "pretokenizers", &c) && json_object_array_length(c) == 2) {
        json_object *a0 = json_object_array_get_idx(c, 0), *a1 = json_object_array_get_idx(c, 1);
        json_object *p = NULL, *r = NULL;
        same = json_object_equal(a0, split) &&
               json_object_object_get_ex(a1, "add_prefix_space", &p) &&
               json_object_get_boolean(p) == add_prefix_space &&
               json_object_object_get_ex(a1, "use_regex", &r) && !json_object_get_boolean(r);
      }
    }
    if (same || (!has && set[i].want == NULL)) {
      json_object_put(set[i].want);
      continue;
    }
    json_object_object_add(set[i].parent, set[i].key, set[i].want);
    changed = 1;
  }
  if (changed)
    json_object_object_add(tok, "decoder", bytelevel(true, true, true)); /* as the class sets it */
  return changed;
}

static int copy_bytes(const char *from, const char *to) {
  FILE *a = fopen(from, "rb"), *b = a ? fopen(to, "wb") : NULL;
  char buf[1 << 16];
  size_t n;
  int rc = a && b ? 0 : ex_export_fail("cannot copy %s to %s", from, to);
  while (!rc && (n = fread(buf, 1, sizeof buf, a)) > 0)
    if (fwrite(buf, 1, n, b) != n)
      rc = ex_export_fail("%s: write failed", to);
  if (a)
    fclose(a);
  if (b && fclose(b) != 0 && !rc)
    rc = ex_export_fail("%s: write failed", to);
  return rc;
}

int ex_hf_export_tokenizer(const char *src_dir, const char *out_path, json_object **ret_info) {
  json_object *cfg = NULL, *config = NULL;
  char *tpath = ex_export_path_join(src_dir, "tokenizer.json");
  int rc = tpath ? 0 : ex_export_fail("out of memory");
  if (!rc && (rc = read_optional(src_dir, "tokenizer_config.json", &cfg)) == 0)
    rc = read_optional(src_dir, "config.json", &config);
  if (!rc)
    rc = ex_hf_export_tokenizer_files(src_dir, tpath, cfg, config, out_path, ret_info);
  json_object_put(cfg);
  json_object_put(config);
  free(tpath);
  return rc;
}

int ex_hf_export_tokenizer_files(const char *src_dir, const char *tpath, json_object *cfg,
                                 json_object *config, const char *out_path,
                                 json_object **ret_info) {
  json_object *tok = NULL;
  const char *why = NULL;
  enum tok_class cls = TOK_BACKEND;
  int changed = 0, rc = 0;
  if (!(tok = json_object_from_file(tpath)))
    rc = ex_export_fail("%s: cannot read JSON (%s)", tpath, json_util_get_last_err());
  if (!rc)
    rc = pick_class(src_dir, cfg, config, &cls, &why);
  if (!rc)
    rc = check_config(src_dir, cfg, tok, cls);
  json_object *aps = NULL;
  bool prefix = cfg && json_object_object_get_ex(cfg, "add_prefix_space", &aps) &&
                json_object_is_type(aps, json_type_boolean) && json_object_get_boolean(aps);
  if (!rc && cls != TOK_BACKEND && (changed = rebuild(src_dir, tok, cls, prefix)) < 0)
    rc = -1;
  if (!rc && changed) {
    if (json_object_to_file_ext(out_path, tok,
                                JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE) != 0)
      rc = ex_export_fail("%s: cannot write (%s)", out_path, json_util_get_last_err());
  } else if (!rc) {
    rc = copy_bytes(tpath, out_path);
  }
  if (!rc && ret_info) {
    json_object *info = json_object_new_object();
    json_object_object_add(info, "class", json_object_new_string(class_names[cls]));
    json_object_object_add(info, "chosen_by", json_object_new_string(why));
    json_object_object_add(info, "rebuilt", json_object_new_boolean(changed));
    *ret_info = info;
  }
  if (!rc && changed)
    printf("%s: tokenizer.json rebuilt as transformers' %s does (%s)\n", src_dir, class_names[cls],
           why);
  json_object_put(tok);
  return rc;
}

/* ---- image processor ------------------------------------------------------------------------ */

static bool number_is(json_object *o, const char *k, double want, double tol, bool absent_ok) {
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, k, &v) || json_object_is_type(v, json_type_null))
    return absent_ok;
  if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
    return false;
  return fabs(json_object_get_double(v) - want) <= tol;
}

static bool bool_is_true(json_object *o, const char *k) {
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, k, &v) || json_object_is_type(v, json_type_null))
    return true; /* the Qwen2-VL processor's defaults are on */
  return json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v);
}

static bool triple_is(json_object *o, const char *k, double want) {
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, k, &v))
    return false; /* the class default is CLIP's mean and std */
  if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) != 3)
    return false;
  for (size_t i = 0; i < 3; i++) {
    json_object *e = json_object_array_get_idx(v, i);
    if ((!json_object_is_type(e, json_type_int) && !json_object_is_type(e, json_type_double)) ||
        fabs(json_object_get_double(e) - want) > 1e-12)
      return false;
  }
  return true;
}

/* legacy key (min_pixels / max_pixels) over size[edge], as Qwen2VLImageProcessor reads them */
static int64_t pixels_of(json_object *o, const char *legacy, const char *edge) {
  json_object *v = NULL, *s = NULL;
  if (json_object_object_get_ex(o, legacy, &v) && json_object_is_type(v, json_type_int))
    return json_object_get_int64(v);
  if (json_object_object_get_ex(o, "size", &s) && json_object_is_type(s, json_type_object) &&
      json_object_object_get_ex(s, edge, &v) && json_object_is_type(v, json_type_int))
    return json_object_get_int64(v);
  return -1;
}

int ex_hf_check_processor(const char *src_dir, int64_t min_pixels, int64_t max_pixels,
                          int *ret_found, json_object **ret_effective) {
  json_object *pp = NULL, *pc = NULL, *o = NULL;
  const char *file = "preprocessor_config.json";
  *ret_found = 0;
  int rc = read_optional(src_dir, file, &pp);
  if (!rc && !pp && (rc = read_optional(src_dir, "processor_config.json", &pc)) == 0 && pc) {
    file = "processor_config.json";
    if (!json_object_object_get_ex(pc, "image_processor", &o) ||
        !json_object_is_type(o, json_type_object))
      o = NULL;
  }
  if (pp)
    o = pp;
  if (rc || !o) {
    json_object_put(pp);
    json_object_put(pc);
    return rc;
  }
  *ret_found = 1;
  json_object *t = NULL;
  const char *bad = NULL;
  if (json_object_object_get_ex(o, "image_processor_type", &t) &&
      strcmp(json_object_get_string(t), "Qwen2VLImageProcessor") != 0 &&
      strcmp(json_object_get_string(t), "Qwen2VLImageProcessorFast") != 0)
    bad = "image_processor_type (Qwen2VLImageProcessor or ...Fast)";
  else if (!number_is(o, "patch_size", 16, 0, false))
    bad = "patch_size (16)";
  else if (!number_is(o, "temporal_patch_size", 2, 0, false))
    bad = "temporal_patch_size (2)";
  else if (!number_is(o, "merge_size", 2, 0, false))
    bad = "merge_size (2)";
  else if (!triple_is(o, "image_mean", 0.5) || !triple_is(o, "image_std", 0.5))
    bad = "image_mean / image_std ([0.5, 0.5, 0.5])";
  else if (!number_is(o, "rescale_factor", 1.0 / 255.0, 1e-15, true))
    bad = "rescale_factor (1/255)";
  else if (!number_is(o, "resample", 3, 0, true))
    bad = "resample (3, bicubic)";
  else if (!bool_is_true(o, "do_resize") || !bool_is_true(o, "do_rescale") ||
           !bool_is_true(o, "do_normalize") || !bool_is_true(o, "do_convert_rgb"))
    bad = "do_resize / do_rescale / do_normalize / do_convert_rgb (true)";
  int64_t lo = pixels_of(o, "min_pixels", "shortest_edge"),
          hi = pixels_of(o, "max_pixels", "longest_edge");
  if (!bad && (lo < 0 || hi < 0))
    bad = "size.shortest_edge / size.longest_edge (or min_pixels / max_pixels)";
  if (bad)
    rc = ex_export_fail("%s/%s: %s is not what s1serve's image preparation reproduces", src_dir,
                        file, bad);
  else if ((min_pixels >= 0 && lo != min_pixels) || (max_pixels >= 0 && hi != max_pixels))
    rc = ex_export_fail("%s/%s: smart_resize bounds %lld .. %lld (min_pixels / max_pixels over "
                        "size); this family serves %lld .. %lld",
                        src_dir, file, (long long)lo, (long long)hi,
                        (long long)(min_pixels >= 0 ? min_pixels : lo),
                        (long long)(max_pixels >= 0 ? max_pixels : hi));
  if (!rc && ret_effective) {
    json_object *e = json_object_new_object();
    json_object_object_add(e, "file", json_object_new_string(file));
    json_object_object_add(e, "min_pixels", json_object_new_int64(lo));
    json_object_object_add(e, "max_pixels", json_object_new_int64(hi));
    *ret_effective = e;
  }
  json_object_put(pp);
  json_object_put(pc);
  return rc;
}
