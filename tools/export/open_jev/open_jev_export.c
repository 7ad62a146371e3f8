/* s1-export --family open_jev: turns an upstream Open-Jev package (`package/checkpoint`:
 * model.json, temperature.json, head.pt, adapter/) plus its base Hugging Face checkpoint into an
 * s1serve model directory. The backbone and LoRA go through the qwen3_5 exporter (the adapter's
 * keys, saved on the bare text model, are re-rooted at the base's text prefix first); this file
 * adds heads.safetensors (fp32), the chat wrapper and the family's manifest fields. */
#include "export_util.h"
#include "open_jev_export.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cm_model_dir.h"
#include "cm_safetensors.h"
#include "cm_sha256.h"
#include "open_jev_pt.h"

#define OJ_MAX_FILES 100000 /* files hashed under a package checkpoint directory */

/* spec/open_jev.md §4.1: Qwen chat template, one user message, generation prompt, thinking off */
static const char chat_prefix[] = "<|im_start|>user\n";
static const char chat_suffix[] = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

/* spec §9.1 pins: base id, base revision, port alias */
static const struct {
  const char *model_id, *revision, *alias;
} pins[] = {
    {"Qwen/Qwen3.8-27B", "1d4bf0f2ff6012fd82039f2fa52739d0dd7c60c0", "open-jev-27b-v1.1"},
    {"Qwen/Qwen3.5-9B", "c202236235762e1c871ad0ccb60c8ee5ba337b9a", "open-jev-9b"},
};

/* ---- checkpoint hash (upstream serving.py: sorted rglob, relpath NUL bytes) ------------------ */

struct flist {
  char **paths;  /* relative paths, heap */
  size_t n, cap; /* used / allocated */
};

static int walk(const char *root, const char *rel, struct flist *fl) {
  char *dir = rel[0] ? ex_export_path_join(root, rel) : strdup(root);
  if (!dir)
    return -ENOMEM;
  DIR *d = opendir(dir);
  int rc = 0;
  if (!d) {
    rc = ex_export_fail("%s: %s", dir, strerror(errno));
    free(dir);
    return rc;
  }
  struct dirent *de;
  while (!rc && (de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    char *r = rel[0] ? ex_export_path_join(rel, de->d_name) : strdup(de->d_name);
    char *full = r ? ex_export_path_join(root, r) : NULL;
    struct stat sb, lsb;
    if (!r || !full) {
      rc = -ENOMEM;
    } else if (stat(full, &sb) != 0) {
      rc = ex_export_fail("%s: %s", full, strerror(errno));
    } else if (S_ISDIR(sb.st_mode) && lstat(full, &lsb) == 0 && !S_ISLNK(lsb.st_mode)) {
      rc = walk(root, r, fl);
    } else if (S_ISREG(sb.st_mode)) {
      if (fl->n >= OJ_MAX_FILES) {
        rc = ex_export_fail("%s: more than %d files", root, OJ_MAX_FILES);
      } else if (fl->n == fl->cap) {
        size_t nc = fl->cap ? 2 * fl->cap : 64;
        char **np = realloc(fl->paths, nc * sizeof *np);
        if (!np)
          rc = -ENOMEM;
        else
          fl->paths = np, fl->cap = nc;
      }
      if (!rc) {
        fl->paths[fl->n++] = r;
        r = NULL;
      }
    }
    free(r);
    free(full);
  }
  closedir(d);
  free(dir);
  return rc;
}

/* Python Path order: component-wise, so '/' sorts below every other byte. */
static int path_cmp(const void *a, const void *b) {
  const unsigned char *x = *(unsigned char *const *)a, *y = *(unsigned char *const *)b;
  for (;; x++, y++) {
    unsigned cx = *x == '/' ? 1 : *x ? (unsigned)*x + 1 : 0;
    unsigned cy = *y == '/' ? 1 : *y ? (unsigned)*y + 1 : 0;
    if (cx != cy)
      return cx < cy ? -1 : 1;
    if (!cx)
      return 0;
  }
}

int ex_open_jev_checkpoint_sha256(const char *dir, char ret_hex[CM_SHA256_HEX]) {
  struct flist fl = {0};
  struct cm_sha256 h = {0};
  int rc = walk(dir, "", &fl);
  if (!rc)
    rc = cm_sha256_init(&h);
  if (!rc && fl.n > 1)
    qsort(fl.paths, fl.n, sizeof *fl.paths, path_cmp);
  char *buf = rc ? NULL : malloc(1 << 20);
  if (!rc && !buf)
    rc = -ENOMEM;
  for (size_t i = 0; i < fl.n && !rc; i++) {
    rc = cm_sha256_update(&h, fl.paths[i], strlen(fl.paths[i]) + 1); /* path + NUL */
    char *full = ex_export_path_join(dir, fl.paths[i]);
    FILE *f = full ? fopen(full, "rb") : NULL;
    if (!f)
      rc = rc ? rc : ex_export_fail("%s: cannot read", full ? full : dir);
    size_t n;
    while (!rc && (n = fread(buf, 1, 1 << 20, f)) > 0)
      rc = cm_sha256_update(&h, buf, n);
    if (f && ferror(f))
      rc = ex_export_fail("%s: read error", full);
    if (f)
      fclose(f);
    free(full);
  }
  uint8_t dg[CM_SHA256_BYTES];
  if (!rc)
    rc = cm_sha256_final(&h, dg);
  if (!rc)
    cm_sha256_hex(dg, ret_hex);
  cm_sha256_fini(&h);
  free(buf);
  for (size_t i = 0; i < fl.n; i++)
    free(fl.paths[i]);
  free(fl.paths);
  return rc;
}

/* ---- package --------------------------------------------------------------------------------- */

struct package {
  json_object *model;    /* model.json, owned */
  const char *model_id;  /* model.json model_id (the base id), borrowed */
  const char *revision;  /* model.json revision (the base revision), borrowed */
  int64_t max_length;    /* model.json max_length, or --max-length */
  double temperature;    /* temperature.json */
  struct ex_pt_state head; /* head.pt: weight [1, H], bias [1] */
};

static int read_package(const char *pkg, int64_t max_length_override, struct package *p) {
  char *mp = ex_export_path_join(pkg, "model.json"), *tp = ex_export_path_join(pkg, "temperature.json"),
       *hp = ex_export_path_join(pkg, "head.pt");
  json_object *t = NULL, *v;
  struct cm_diag d = {0};
  int rc = 0;
  if (!mp || !tp || !hp) {
    rc = -ENOMEM;
    goto out;
  }
  p->model = json_object_from_file(mp);
  if (!p->model || !json_object_is_type(p->model, json_type_object)) {
    rc = ex_export_fail("%s: cannot read a JSON object (%s)", mp, json_util_get_last_err());
    goto out;
  }
  if (!json_object_object_get_ex(p->model, "model_id", &v) ||
      !json_object_is_type(v, json_type_string)) {
    rc = ex_export_fail("%s: key 'model_id' missing or not a string", mp);
    goto out;
  }
  p->model_id = json_object_get_string(v);
  if (!json_object_object_get_ex(p->model, "revision", &v) ||
      !json_object_is_type(v, json_type_string)) {
    rc = ex_export_fail("%s: key 'revision' missing or not a string", mp);
    goto out;
  }
  p->revision = json_object_get_string(v);
  for (size_t i = 0; i < sizeof pins / sizeof *pins; i++)
    if (strcmp(p->model_id, pins[i].model_id) == 0 && strcmp(p->revision, pins[i].revision) != 0) {
      rc = ex_export_fail("%s: base %s must be at revision %s (got %s)", mp, p->model_id, pins[i].revision,
                p->revision);
      goto out;
    }
  p->max_length = 4096; /* the port's export default (spec §4.4) */
  if (json_object_object_get_ex(p->model, "max_length", &v)) {
    if (!json_object_is_type(v, json_type_int)) {
      rc = ex_export_fail("%s: key 'max_length' must be an integer", mp);
      goto out;
    }
    p->max_length = json_object_get_int64(v);
  }
  if (max_length_override > 0)
    p->max_length = max_length_override;
  if (p->max_length < 1 || p->max_length > 16384) {
    rc = ex_export_fail("max_length %lld is outside 1..16384", (long long)p->max_length);
    goto out;
  }
  t = json_object_from_file(tp);
  if (!t || !json_object_object_get_ex(t, "temperature", &v) ||
      !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int))) {
    rc = ex_export_fail("%s: key 'temperature' missing or not a number", tp);
    goto out;
  }
  p->temperature = json_object_get_double(v);
  if (!(isfinite(p->temperature) && p->temperature > 0)) {
    rc = ex_export_fail("%s: temperature must be finite and positive", tp);
    goto out;
  }
  rc = ex_pt_read_file(hp, &p->head, &d);
  if (rc) {
    ex_export_fail("%s", d.msg ? d.msg : hp);
    goto out;
  }
  const struct ex_pt_tensor *w = ex_pt_find(&p->head, "weight"), *b = ex_pt_find(&p->head, "bias");
  if (!w || !b || p->head.n_tensors != 2 || w->n_dims != 2 || w->shape[0] != 1 ||
      b->n_dims != 1 || b->shape[0] != 1 || w->dtype != CM_DTYPE_F32 ||
      b->dtype != CM_DTYPE_F32) {
    rc = ex_export_fail("%s: expected exactly {weight: F32 [1, H], bias: F32 [1]}", hp);
    goto out;
  }
  for (int64_t i = 0; i < w->n_elems; i++)
    if (!isfinite(w->data[i]))
      rc = -1;
  if (rc || !isfinite(b->data[0])) {
    rc = ex_export_fail("%s: the head holds a non-finite value", hp);
    goto out;
  }
out:
  cm_diag_fini(&d);
  json_object_put(t);
  free(mp);
  free(tp);
  free(hp);
  return rc;
}

/* ---- adapter re-rooting ---------------------------------------------------------------------- */

static int copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
  int rc = 0;
  if (!in || !out)
    rc = ex_export_fail("cannot copy %s to %s: %s", from, to, strerror(errno));
  char buf[1 << 16];
  size_t n;
  while (!rc && (n = fread(buf, 1, sizeof buf, in)) > 0)
    if (fwrite(buf, 1, n, out) != n)
      rc = ex_export_fail("%s: write failed", to);
  if (in)
    fclose(in);
  if (out && fclose(out) != 0 && !rc)
    rc = ex_export_fail("%s: write failed", to);
  return rc;
}

/* The base's text prefix: where embed_tokens.weight lives. */
static const char *text_prefix(const char *base) {
  static const char *const prefixes[] = {"model.language_model.", "model.", ""};
  struct cm_safetensors *st = NULL;
  struct cm_diag d = {0};
  const char *tp = NULL;
  if (cm_safetensors_open(base, &st, &d) == 0) {
    for (int i = 0; i < 3 && !tp; i++) {
      char k[64];
      struct cm_tensor_view v;
      snprintf(k, sizeof k, "%sembed_tokens.weight", prefixes[i]);
      if (cm_safetensors_find(st, k, &v) == 0)
        tp = prefixes[i];
    }
  }
  cm_safetensors_close(st);
  cm_diag_fini(&d);
  return tp;
}

/* The upstream adapter wraps the bare text model (`full.model.language_model`), so its keys are
 * base_model.model.layers.N...; the qwen3_5 exporter expects them under the base's text prefix.
 * Writes a re-rooted copy in tmp_dir (adapter_config.json + adapter_model.safetensors). */
static int reroot_adapter(const char *adapter, const char *base, const char *tmp_dir) {
  const char *tp = text_prefix(base);
  if (!tp)
    return ex_export_fail("%s: no embed_tokens.weight found", base);
  char *src = ex_export_path_join(adapter, "adapter_model.safetensors"), *dst = ex_export_path_join(tmp_dir,
                                                                       "adapter_model.safetensors");
  char *csrc = ex_export_path_join(adapter, "adapter_config.json"), *cdst = ex_export_path_join(tmp_dir, "adapter_config.json");
  struct cm_safetensors *st = NULL;
  struct cm_safetensors_writer *w = NULL;
  struct cm_diag d = {0};
  int rc = (!src || !dst || !csrc || !cdst) ? -ENOMEM : 0;
  if (!rc && mkdir(tmp_dir, 0755) != 0)
    rc = ex_export_fail("%s: %s", tmp_dir, strerror(errno));
  if (!rc)
    rc = copy_file(csrc, cdst);
  if (!rc && (rc = cm_safetensors_open(src, &st, &d)) != 0)
    ex_export_fail("%s", d.msg ? d.msg : src);
  if (!rc)
    rc = cm_safetensors_writer_new(&w);
  const char *pre = "base_model.model.";
  for (size_t i = 0; !rc && i < cm_safetensors_count(st); i++) {
    struct cm_tensor_view v;
    cm_safetensors_at(st, i, &v);
    if (strncmp(v.name, pre, strlen(pre)) != 0) {
      rc = ex_export_fail("%s: tensor '%s' is not under '%s'", src, v.name, pre);
      break;
    }
    const char *rest = v.name + strlen(pre);
    bool rooted = tp[0] && strncmp(rest, tp, strlen(tp)) == 0;
    char key[600];
    if (snprintf(key, sizeof key, "%s%s%s", pre, rooted ? "" : tp, rest) >= (int)sizeof key) {
      rc = ex_export_fail("%s: tensor name '%s' too long", src, v.name);
      break;
    }
    rc = cm_safetensors_writer_add(w, key, v.dtype, v.n_dims, v.shape, v.data);
  }
  if (!rc && (rc = cm_safetensors_writer_finish(w, dst, &d)) != 0)
    ex_export_fail("%s", d.msg ? d.msg : dst);
  cm_safetensors_writer_free(w);
  cm_safetensors_close(st);
  cm_diag_fini(&d);
  free(src);
  free(dst);
  free(csrc);
  free(cdst);
  return rc;
}

static void remove_tmp(const char *tmp_dir) {
  char *a = ex_export_path_join(tmp_dir, "adapter_model.safetensors"), *c = ex_export_path_join(tmp_dir, "adapter_config.json");
  if (a)
    unlink(a);
  if (c)
    unlink(c);
  rmdir(tmp_dir);
  free(a);
  free(c);
}

/* ---- chat template check --------------------------------------------------------------------- */

/* The base's chat template must be the Qwen one whose rendering spec §4.1 gives. */
static int check_template(const char *base) {
  char *p = ex_export_path_join(base, "tokenizer_config.json");
  struct stat sb;
  int rc = 0;
  if (!p)
    return -ENOMEM;
  if (stat(p, &sb) == 0) {
    json_object *c = json_object_from_file(p), *t;
    const char *s = c && json_object_object_get_ex(c, "chat_template", &t) &&
                            json_object_is_type(t, json_type_string)
                        ? json_object_get_string(t)
                        : NULL;
    if (s && (!strstr(s, "<|im_start|>") || !strstr(s, "</think>") ||
              !(strstr(s, "<think>\\n\\n</think>\\n\\n") || strstr(s, "<think>\n\n</think>\n\n"))))
      rc = ex_export_fail("%s: chat_template is not the Qwen template with an empty think block; the chat "
                "prefix/suffix of spec/open_jev.md §4.1 would not match it",
                p);
    json_object_put(c);
  }
  free(p);
  return rc;
}

/* ---- main ------------------------------------------------------------------------------------ */

static void usage(FILE *f) {
  fprintf(f, "usage: s1-export --family open_jev --package PKG_CHECKPOINT_DIR --base HF_DIR\n"
             "                 --out DIR [--lora keep|merge] [--max-length N] [--alias NAME]...\n"
             "  --lora        keep the package's adapter as fp32 factors (default) or merge it\n"
             "                into the bf16 weights\n"
             "  --max-length  longest accepted sequence in tokens, 1 to 16384 (default: the\n"
             "                package's model.json; never truncated)\n"
             "  --alias       one more request \"model\" name for this directory (repeatable)\n"
             "  (recipe/open_jev/README.md)\n");
}

int ex_open_jev_manifest_add(json_object *m, const char *model_id, const char *base_revision,
                             const char *package_hex, double temperature, int64_t max_length,
                             bool has_adapter, const char *const *aliases, int n_aliases) {
  json_object *chat, *lim;
  json_object_object_add(m, "family", json_object_new_string("open_jev"));
  json_object_object_add(m, "model_id", json_object_new_string(model_id));
  json_object_object_add(m, "revision", json_object_new_string(package_hex)); /* the package hash */
  chat = json_object_new_object();
  json_object_object_add(chat, "prefix", json_object_new_string(chat_prefix));
  json_object_object_add(chat, "suffix", json_object_new_string(chat_suffix));
  json_object_object_add(m, "chat", chat);
  char trepr[40];
  snprintf(trepr, sizeof trepr, "%.17g", temperature);
  json_object *cal = json_object_new_object();
  json_object_object_add(cal, "temperature", json_object_new_double_s(temperature, trepr));
  json_object_object_add(m, "calibration", cal);
  json_object *oj = json_object_new_object(), *al = json_object_new_array(),
              *meta = json_object_new_object(), *dt = json_object_new_array(),
              *head = json_object_new_object();
  json_object_object_add(oj, "model_id", json_object_new_string(model_id));
  json_object_array_add(al, json_object_new_string("open-jev"));
  json_object_array_add(al, json_object_new_string("jev-latest"));
  for (size_t i = 0; i < sizeof pins / sizeof *pins; i++)
    if (strcmp(model_id, pins[i].model_id) == 0)
      json_object_array_add(al, json_object_new_string(pins[i].alias));
  for (int i = 0; i < n_aliases; i++)
    json_object_array_add(al, json_object_new_string(aliases[i]));
  json_object_object_add(oj, "aliases", al);
  json_object_object_add(oj, "temperature", json_object_new_double_s(temperature, trepr));
  json_object_object_add(oj, "max_length", json_object_new_int64(max_length));
  json_object_object_add(oj, "method", json_object_new_string("lora_decision_head"));
  json_object_object_add(head, "file", json_object_new_string("heads.safetensors"));
  json_object_object_add(head, "weight", json_object_new_string("open_jev.head.weight"));
  json_object_object_add(head, "bias", json_object_new_string("open_jev.head.bias"));
  json_object_object_add(oj, "head", head);
  json_object_object_add(meta, "checkpoint_sha256", json_object_new_string(package_hex));
  json_object_object_add(meta, "base_revision", json_object_new_string(base_revision));
  json_object_object_add(meta, "max_length", json_object_new_int64(max_length));
  json_object_array_add(dt, json_object_new_string("torch.bfloat16"));
  if (has_adapter)
    json_object_array_add(dt, json_object_new_string("torch.float32"));
  json_object_object_add(meta, "backbone_parameter_dtypes", dt);
  json_object_object_add(meta, "code_commit", NULL);
  json_object_object_add(oj, "metadata", meta);
  json_object_object_add(m, "open_jev", oj);
  if (json_object_object_get_ex(m, "limits", &lim)) {
    json_object_object_add(lim, "max_body_bytes", json_object_new_int(4 << 20));
    json_object_object_add(lim, "max_questions", json_object_new_int(4096));
    json_object_object_add(lim, "max_candidate_sequences", json_object_new_int(65536));
    json_object_object_add(lim, "max_choice_options", json_object_new_int(255));
    json_object_object_add(lim, "max_score_levels", json_object_new_int(10));
    json_object_object_add(lim, "max_prompt_tokens", json_object_new_int64(max_length));
  }
  return 0;
}

int ex_export_open_jev_main(int argc, char **argv, int (*qwen_main)(int, char **)) {
  const char *pkg = NULL, *base = NULL, *out = NULL, *lora = "keep";
  const char *aliases[16];
  int n_aliases = 0;
  int64_t max_length = 0;
  static const struct option lo[] = {{"family", required_argument, 0, 'f'},
                                     {"package", required_argument, 0, 'p'},
                                     {"base", required_argument, 0, 'b'},
                                     {"out", required_argument, 0, 'o'},
                                     {"lora", required_argument, 0, 'l'},
                                     {"max-length", required_argument, 0, 'm'},
                                     {"alias", required_argument, 0, 'a'},
                                     {"help", no_argument, 0, 'h'},
                                     {0, 0, 0, 0}};
  int c;
  char *end;
  optind = 0;
  while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    switch (c) {
    case 'f': break;
    case 'p': pkg = optarg; break;
    case 'b': base = optarg; break;
    case 'o': out = optarg; break;
    case 'l': lora = optarg; break;
    case 'm':
      max_length = strtoll(optarg, &end, 10);
      if (*end || max_length < 1 || max_length > 16384)
        return ex_export_fail("--max-length must be 1..16384"), 2;
      break;
    case 'a':
      if (n_aliases == 8)
        return ex_export_fail("at most 8 --alias"), 2;
      aliases[n_aliases++] = optarg;
      break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (!pkg || !base || !out || optind != argc) {
    usage(stderr);
    return 2;
  }
  if (strcmp(lora, "keep") != 0 && strcmp(lora, "merge") != 0)
    return ex_export_fail("--lora must be keep or merge"), 2;
  struct package p = {0};
  json_object *manifest = NULL;
  struct cm_safetensors_writer *w = NULL;
  struct cm_diag d = {0};
  char *adapter = ex_export_path_join(pkg, "adapter"), *tmp = NULL, *hpath = NULL, *mpath = NULL;
  char hex[CM_SHA256_HEX];
  int rc = read_package(pkg, max_length, &p);
  if (!rc)
    rc = check_template(base);
  if (!rc)
    rc = ex_open_jev_checkpoint_sha256(pkg, hex);
  struct stat sb;
  bool has_adapter = !rc && stat(adapter, &sb) == 0 && S_ISDIR(sb.st_mode);
  if (!rc && mkdir(out, 0755) != 0 && errno != EEXIST)
    rc = ex_export_fail("%s: %s", out, strerror(errno));
  if (!rc && has_adapter) {
    tmp = ex_export_path_join(out, ".open_jev-adapter.tmp");
    remove_tmp(tmp);
    rc = reroot_adapter(adapter, base, tmp);
  }
  if (!rc) {
    /* the backbone (+ LoRA) through the qwen3_5 exporter */
    char *qargv[12];
    int qargc = 0;
    qargv[qargc++] = argv[0];
    qargv[qargc++] = "--family";
    qargv[qargc++] = "qwen3_5";
    qargv[qargc++] = "--base";
    qargv[qargc++] = (char *)base;
    if (has_adapter) {
      qargv[qargc++] = "--adapter";
      qargv[qargc++] = tmp;
      qargv[qargc++] = "--lora";
      qargv[qargc++] = (char *)lora;
    }
    qargv[qargc++] = "--out";
    qargv[qargc++] = (char *)out;
    qargv[qargc] = NULL;
    optind = 0;
    if (qwen_main(qargc, qargv) != 0)
      rc = ex_export_fail("the qwen3_5 export of %s failed", base);
  }
  if (tmp)
    remove_tmp(tmp);
  if (rc)
    goto out;
  /* heads.safetensors */
  const struct ex_pt_tensor *hw = ex_pt_find(&p.head, "weight"), *hb = ex_pt_find(&p.head, "bias");
  hpath = ex_export_path_join(out, "heads.safetensors");
  mpath = ex_export_path_join(out, CM_MODEL_MANIFEST);
  manifest = json_object_from_file(mpath);
  json_object *config, *tc, *hs;
  if (!manifest || !json_object_object_get_ex(manifest, "config", &config)) {
    rc = ex_export_fail("%s: cannot read the manifest the qwen3_5 export wrote", mpath);
    goto out;
  }
  if (!json_object_object_get_ex(config, "text_config", &tc))
    tc = config;
  if (!json_object_object_get_ex(tc, "hidden_size", &hs) ||
      json_object_get_int64(hs) != hw->shape[1]) {
    rc = ex_export_fail("head.pt: weight is [1, %lld] but the base's hidden_size is %lld",
              (long long)hw->shape[1], (long long)json_object_get_int64(hs));
    goto out;
  }
  rc = cm_safetensors_writer_new(&w);
  if (!rc)
    rc = cm_safetensors_writer_add(w, "open_jev.head.weight", CM_DTYPE_F32, 2, hw->shape, hw->data);
  if (!rc)
    rc = cm_safetensors_writer_add(w, "open_jev.head.bias", CM_DTYPE_F32, 1, hb->shape, hb->data);
  if (!rc && (rc = cm_safetensors_writer_finish(w, hpath, &d)) != 0)
    ex_export_fail("%s", d.msg ? d.msg : hpath);
  if (rc)
    goto out;
  /* manifest */
  json_object *m = manifest, *files, *up, *src;
  char trepr[40];
  snprintf(trepr, sizeof trepr, "%.17g", p.temperature);
  ex_open_jev_manifest_add(m, p.model_id, p.revision, hex, p.temperature, p.max_length,
                           has_adapter, (const char *const *)aliases, n_aliases);
  if (json_object_object_get_ex(m, "upstream", &up) &&
      json_object_object_get_ex(up, "sources", &src)) {
    const char *names[] = {"model.json", "temperature.json", "head.pt"};
    for (int i = 0; i < 3; i++) {
      char *sp = ex_export_path_join(pkg, names[i]);
      uint8_t dg[CM_SHA256_BYTES];
      char h2[CM_SHA256_HEX];
      if (sp && cm_sha256_file(sp, dg, NULL, &d) == 0) {
        cm_sha256_hex(dg, h2);
        json_object *e = json_object_new_object();
        char *abs = realpath(sp, NULL);
        json_object_object_add(e, "path", json_object_new_string(abs ? abs : sp));
        json_object_object_add(e, "sha256", json_object_new_string(h2));
        json_object_array_add(src, e);
        free(abs);
      }
      free(sp);
    }
    json_object_object_add(up, "open_jev_package_sha256", json_object_new_string(hex));
  }
  if (!json_object_object_get_ex(m, "files", &files)) {
    rc = ex_export_fail("%s: no files", mpath);
    goto out;
  }
  rc = cm_model_dir_add_file(files, out, "heads.safetensors", &d);
  if (!rc)
    rc = cm_model_dir_write_manifest(out, m, &d);
  if (rc)
    ex_export_fail("%s", d.msg ? d.msg : out);
  else
    printf("s1-export: %s is an open_jev model (%s, T=%s, max_length %lld, head [1, %lld])\n", out,
           p.model_id, trepr, (long long)p.max_length, (long long)hw->shape[1]);
out:
  cm_diag_fini(&d);
  cm_safetensors_writer_free(w);
  json_object_put(manifest);
  json_object_put(p.model);
  ex_pt_state_fini(&p.head);
  free(adapter);
  free(tmp);
  free(hpath);
  free(mpath);
  return rc ? 1 : 0;
}
