/* s1-export --family omnijev (spec/omnijev.md §11): the Qwen3.5 base plus the OmniJev checkpoint
 * (adapter_config.json + adapter_model.safetensors, head.pt, ord.pt, new_tok_emb.pt,
 * head_meta.json, optional tokenizer.json) into an s1serve model directory. The backbone and LoRA
 * go through the qwen3_5 exporter; this file adds the option tokens to the tokenizer (verifying
 * their ids), resizes the tied embedding to the tokenizer's length with the two option rows from
 * new_tok_emb.pt (bf16-rounded in the BF16 table, and kept in float32 as the release has them in
 * embed_f32_rows.safetensors: the fp32 numerics use those, the bf16 numerics round them), writes
 * heads.safetensors (fp32 head.* and ord.*) and the family's manifest. */
#include "omnijev_export.h"
#include "export_hf.h"
#include "export_util.h"

#include <errno.h>
#include <getopt.h>
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
#include "pp_tok.h"

#define EMBED "model.language_model.embed_tokens.weight"
#define F32_ROWS_FILE "embed_f32_rows.safetensors"
#define F32_ROWS_TENSOR "embed_tokens.f32_rows" /* new_tok_emb.pt [2, H] as stored: float32 */
#define OPT "<|opt|>"
#define OPT_END "<|/opt|>"

static void usage(FILE *f) {
  fprintf(f, "usage: s1-export --family omnijev --base QWEN35_DIR --checkpoint OMNIJEV_DIR\n"
             "                 [--lora keep|merge] --out DIR\n"
             "  QWEN35_DIR   Qwen/Qwen3.5-4B (config.json, safetensors, tokenizer.json)\n"
             "  OMNIJEV_DIR  adapter_config.json, adapter_model.safetensors, head.pt, ord.pt,\n"
             "               new_tok_emb.pt, head_meta.json, optionally tokenizer.json\n"
             "  --lora keep  the fp32 adapter runs unmerged, as the reference (default)\n");
}

/* ---- head_meta.json ------------------------------------------------------------------------- */

static bool is_number(json_object *v) {
  return json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int);
}

int ex_omnijev_check_meta(json_object *meta, json_object **ret_calib, struct cm_diag *diag) {
  json_object *v = NULL, *t = NULL, *b = NULL;
  if (!json_object_is_type(meta, json_type_object))
    return cm_diag_set(diag, -CM_EFORMAT, "head_meta.json: not an object");
  if (!json_object_object_get_ex(meta, "norm", &v) || !json_object_is_type(v, json_type_string) ||
      strcmp(json_object_get_string(v), "softmax") != 0)
    return cm_diag_set(diag, -CM_EFORMAT, "head_meta.json: norm must be \"softmax\"");
  static const char *const flags[] = {"lm_feats", "ordinal", "branch"};
  for (int i = 0; i < 3; i++)
    if (!json_object_object_get_ex(meta, flags[i], &v) ||
        !json_object_is_type(v, json_type_boolean) || !json_object_get_boolean(v))
      return cm_diag_set(diag, -CM_EFORMAT, "head_meta.json: %s must be true", flags[i]);
  json_object *cal = json_object_new_object(), *temps = json_object_new_object();
  json_object_object_add(cal, "norm", json_object_new_string("softmax"));
  for (int i = 0; i < 3; i++)
    json_object_object_add(cal, flags[i], json_object_new_boolean(1));
  int rc = 0;
  json_object *fallback = NULL;
  if (json_object_object_get_ex(meta, "temperature", &v)) {
    if (!is_number(v) || !(json_object_get_double(v) > 0.0) || !isfinite(json_object_get_double(v)))
      rc = cm_diag_set(diag, -CM_EFORMAT, "head_meta.json: temperature must be a positive number");
    fallback = v;
  }
  json_object_object_add(cal, "temperature",
                         fallback ? json_object_get(fallback) : json_object_new_double(1.0));
  static const char *const types[] = {"noul", "choice", "score"};
  bool has_t = json_object_object_get_ex(meta, "temperatures", &t);
  if (!rc && has_t && !json_object_is_type(t, json_type_object))
    rc = cm_diag_set(diag, -CM_EFORMAT, "head_meta.json: temperatures must be an object");
  for (int i = 0; i < 3 && !rc; i++) {
    if (has_t && json_object_object_get_ex(t, types[i], &v)) {
      if (!is_number(v) || !(json_object_get_double(v) > 0.0) || !isfinite(json_object_get_double(v)))
        rc = cm_diag_set(diag, -CM_EFORMAT, "head_meta.json: temperatures.%s must be a positive "
                         "number", types[i]);
      else
        json_object_object_add(temps, types[i], json_object_get(v)); /* full precision, as read */
    }
  }
  json_object_object_add(cal, "temperatures", temps);
  json_object *biases = json_object_new_object();
  json_object_object_add(cal, "biases", biases);
  if (!rc && json_object_object_get_ex(meta, "biases", &b)) {
    if (!json_object_is_type(b, json_type_object)) {
      rc = cm_diag_set(diag, -CM_EFORMAT, "head_meta.json: biases must be an object");
    } else {
      json_object_object_foreach(b, key, val) {
        if (strcmp(key, "noul") != 0) {
          rc = cm_diag_set(diag, -CM_EFORMAT, "head_meta.json: biases.%s: only noul is allowed",
                           key);
          break;
        }
        if (!is_number(val) || !isfinite(json_object_get_double(val))) {
          rc = cm_diag_set(diag, -CM_EFORMAT, "head_meta.json: biases.noul must be a number");
          break;
        }
        json_object_object_add(biases, "noul", json_object_get(val));
      }
    }
  }
  if (rc) {
    json_object_put(cal);
    return rc;
  }
  *ret_calib = cal;
  return 0;
}

/* ---- heads ------------------------------------------------------------------------------------ */

/* Expected head.pt / ord.pt tensors: name, then the two dims (−1: the second is absent); sizes
 * 'H' hidden, 'D' OptionScorer width, 'O' ordinal width, digits literal. */
static const struct {
  const char *file, *name, *d0, *d1;
} head_tensors[] = {
    {"head.pt", "opt.0.weight", "D", "H"},  {"head.pt", "opt.0.bias", "D", ""},
    {"head.pt", "opt.2.weight", "D", "D"},  {"head.pt", "opt.2.bias", "D", ""},
    {"head.pt", "que.0.weight", "D", "H"},  {"head.pt", "que.0.bias", "D", ""},
    {"head.pt", "que.2.weight", "D", "D"},  {"head.pt", "que.2.bias", "D", ""},
    {"head.pt", "score.weight", "1", "D"},  {"head.pt", "score.bias", "1", ""},
    {"head.pt", "log_tau", "3", ""},        {"head.pt", "abstain.weight", "1", "D"},
    {"head.pt", "abstain.bias", "1", ""},   {"head.pt", "feat.weight", "D", "6"},
    {"head.pt", "feat.bias", "D", ""},      {"head.pt", "feat_lin.weight", "1", "6"},
    {"head.pt", "feat_lin.bias", "1", ""},  {"ord.pt", "z.0.weight", "O", "H"},
    {"ord.pt", "z.0.bias", "O", ""},        {"ord.pt", "z.2.weight", "1", "O"},
    {"ord.pt", "z.2.bias", "1", ""},        {"ord.pt", "cut.0.weight", "O", "H"},
    {"ord.pt", "cut.0.bias", "O", ""},      {"ord.pt", "cut.2.weight", "1", "O"},
    {"ord.pt", "cut.2.bias", "1", ""},
};

static int64_t dim_of(const char *s, int64_t h, int64_t d, int64_t o) {
  return *s == 'H' ? h : *s == 'D' ? d : *s == 'O' ? o : *s ? strtoll(s, NULL, 10) : -1;
}

/* Checks both state dicts exactly (names, F32, shapes) and queues them as head.* / ord.*. */
static int add_heads(const struct ex_pt_state *head, const struct ex_pt_state *ord, int64_t hidden,
                     struct cm_safetensors_writer *w) {
  const struct ex_pt_tensor *o0 = ex_pt_find(head, "opt.0.weight"), *z0 = ex_pt_find(ord, "z.0.weight");
  if (!o0 || o0->n_dims != 2 || !z0 || z0->n_dims != 2)
    return ex_export_fail("head.pt / ord.pt: opt.0.weight or z.0.weight missing");
  int64_t dh = o0->shape[0], dord = z0->shape[0];
  size_t n_head = 0, n_ord = 0;
  for (size_t i = 0; i < sizeof head_tensors / sizeof *head_tensors; i++) {
    bool is_head = strcmp(head_tensors[i].file, "head.pt") == 0;
    const struct ex_pt_tensor *t = ex_pt_find(is_head ? head : ord, head_tensors[i].name);
    n_head += is_head, n_ord += !is_head;
    int64_t a = dim_of(head_tensors[i].d0, hidden, dh, dord);
    int64_t b = dim_of(head_tensors[i].d1, hidden, dh, dord);
    if (!t)
      return ex_export_fail("%s: tensor '%s' missing", head_tensors[i].file, head_tensors[i].name);
    if (t->dtype != CM_DTYPE_F32)
      return ex_export_fail("%s: tensor '%s' is not float32", head_tensors[i].file, head_tensors[i].name);
    if (t->n_dims != (b < 0 ? 1 : 2) || t->shape[0] != a || (b >= 0 && t->shape[1] != b))
      return ex_export_fail("%s: tensor '%s' has the wrong shape (hidden %lld, widths %lld / %lld)",
                  head_tensors[i].file, head_tensors[i].name, (long long)hidden, (long long)dh,
                  (long long)dord);
    char key[64];
    snprintf(key, sizeof key, "%s.%s", is_head ? "head" : "ord", head_tensors[i].name);
    if (cm_safetensors_writer_add(w, key, CM_DTYPE_F32, t->n_dims, t->shape, t->data))
      return ex_export_fail("heads.safetensors: cannot add %s", key);
  }
  if (head->n_tensors != n_head || ord->n_tensors != n_ord)
    return ex_export_fail("head.pt has %zu tensors (want %zu), ord.pt %zu (want %zu): strict key match",
                head->n_tensors, n_head, ord->n_tensors, n_ord);
  return 0;
}

/* ---- tokenizer -------------------------------------------------------------------------------- */

static json_object *added_token(int64_t id, const char *content) {
  json_object *t = json_object_new_object();
  json_object_object_add(t, "id", json_object_new_int64(id));
  json_object_object_add(t, "content", json_object_new_string(content));
  json_object_object_add(t, "single_word", json_object_new_boolean(0));
  json_object_object_add(t, "lstrip", json_object_new_boolean(0));
  json_object_object_add(t, "rstrip", json_object_new_boolean(0));
  json_object_object_add(t, "normalized", json_object_new_boolean(0));
  json_object_object_add(t, "special", json_object_new_boolean(1));
  return t;
}

/* Makes `path` hold the option tokens as special added tokens (records.add_option_tokens: the
 * next two ids), verifies them with the project's tokenizer and returns the vocabulary length
 * and the ids. */
int ex_omnijev_option_tokens(const char *path, size_t *ret_vocab, int32_t ret_ids[2]) {
  struct cm_diag d = {0};
  struct pp_tok *tok = NULL;
  int rc = pp_tok_load_file(path, &tok, &d);
  if (rc) {
    ex_export_fail("%s: %s", path, d.msg ? d.msg : "cannot load");
    cm_diag_fini(&d);
    return rc;
  }
  int32_t a = pp_tok_token_to_id(tok, OPT, strlen(OPT)), b = pp_tok_token_to_id(tok, OPT_END, strlen(OPT_END));
  size_t n = pp_tok_vocab_size(tok, true);
  pp_tok_free(tok);
  tok = NULL;
  if (a < 0 && b < 0) { /* the base tokenizer: add them */
    json_object *j = json_object_from_file(path), *added = NULL;
    if (!j || !json_object_object_get_ex(j, "added_tokens", &added) ||
        !json_object_is_type(added, json_type_array)) {
      json_object_put(j);
      return ex_export_fail("%s: no added_tokens array", path);
    }
    json_object_array_add(added, added_token((int64_t)n, OPT));
    json_object_array_add(added, added_token((int64_t)n + 1, OPT_END));
    rc = json_object_to_file_ext(path, j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    json_object_put(j);
    if (rc)
      return ex_export_fail("%s: cannot write", path);
    if ((rc = pp_tok_load_file(path, &tok, &d))) {
      ex_export_fail("%s: %s", path, d.msg ? d.msg : "cannot load");
      cm_diag_fini(&d);
      return rc;
    }
    a = pp_tok_token_to_id(tok, OPT, strlen(OPT));
    b = pp_tok_token_to_id(tok, OPT_END, strlen(OPT_END));
    n = pp_tok_vocab_size(tok, true);
  } else if ((rc = pp_tok_load_file(path, &tok, &d))) {
    cm_diag_fini(&d);
    return ex_export_fail("%s: cannot reload", path);
  }
  bool ok = a >= 0 && b == a + 1 && (size_t)b + 1 == n && pp_tok_is_special(tok, a) &&
            pp_tok_is_special(tok, b);
  pp_tok_free(tok);
  if (!ok)
    return ex_export_fail("%s: <|opt|> = %d and <|/opt|> = %d must be special tokens with the last two ids "
                "of %zu", path, a, b, n);
  *ret_vocab = n;
  ret_ids[0] = a;
  ret_ids[1] = b;
  return 0;
}

/* ---- embedding resize -------------------------------------------------------------------------- */

struct embed_fill {
  const struct cm_tensor_view *src; /* the exported [V0, H] BF16 table */
  const float *rows;                /* new_tok_emb [2, H] fp32 */
  int32_t ids[2];                   /* rows it overwrites */
  size_t vocab, hidden;             /* output rows, H */
};

static int fill_embed(void *ctx, const char *name, void *buf, size_t n_bytes) {
  (void)name;
  const struct embed_fill *f = ctx;
  if (n_bytes != f->vocab * f->hidden * 2)
    return -EINVAL;
  memcpy(buf, f->src->data, n_bytes); /* rows 0..vocab−1 of the base table */
  unsigned char *o = buf;
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < f->hidden; i++) {
      uint16_t v = cm_f32_to_bf16(f->rows[(size_t)k * f->hidden + i]);
      size_t at = ((size_t)f->ids[k] * f->hidden + i) * 2;
      o[at] = (unsigned char)v;
      o[at + 1] = (unsigned char)(v >> 8);
    }
  return 0;
}

/* Rewrites dir/weights.safetensors with the embedding cut to `vocab` rows and the option rows. */
static int resize_embedding(const char *dir, size_t vocab, const int32_t ids[2],
                            const struct ex_pt_tensor *emb) {
  struct cm_diag d = {0};
  struct cm_safetensors *st = NULL;
  struct cm_safetensors_writer *w = NULL;
  char *path = ex_export_path_join(dir, "weights.safetensors"), *tmp = ex_export_path_join(dir, ".weights.omnijev.tmp");
  int rc = cm_safetensors_open(path, &st, &d);
  struct cm_tensor_view e;
  if (!rc && cm_safetensors_find(st, "lm_head.weight", &e) == 0)
    rc = ex_export_fail("%s: the base has a separate lm_head; OmniJev needs the tied embedding", path);
  else if (!rc && (cm_safetensors_find(st, EMBED, &e) != 0 || e.dtype != CM_DTYPE_BF16 ||
                   e.n_dims != 2))
    rc = ex_export_fail("%s: no BF16 %s", path, EMBED);
  else if (!rc && (e.shape[0] < (int64_t)vocab || e.shape[1] != emb->shape[1]))
    rc = ex_export_fail("%s: embedding [%lld, %lld] cannot hold %zu rows of new_tok_emb [2, %lld]", path,
              (long long)e.shape[0], (long long)e.shape[1], vocab, (long long)emb->shape[1]);
  struct embed_fill f = {&e, emb->data, {ids[0], ids[1]}, vocab, rc ? 0 : (size_t)e.shape[1]};
  if (!rc)
    rc = cm_safetensors_writer_new(&w);
  for (size_t i = 0; !rc && i < cm_safetensors_count(st); i++) {
    struct cm_tensor_view v;
    cm_safetensors_at(st, i, &v);
    if (strcmp(v.name, EMBED) == 0) {
      int64_t shape[2] = {(int64_t)vocab, e.shape[1]};
      rc = cm_safetensors_writer_add_fill(w, EMBED, CM_DTYPE_BF16, 2, shape, fill_embed, &f);
    } else {
      rc = cm_safetensors_writer_add(w, v.name, v.dtype, v.n_dims, v.shape, v.data);
    }
  }
  if (!rc && (rc = cm_safetensors_writer_finish(w, tmp, &d)))
    ex_export_fail("%s", d.msg ? d.msg : tmp);
  if (!rc && rename(tmp, path) != 0)
    rc = ex_export_fail("%s: %s", path, strerror(errno));
  if (rc && st)
    unlink(tmp);
  cm_safetensors_writer_free(w);
  cm_safetensors_close(st);
  cm_diag_fini(&d);
  free(path), free(tmp);
  return rc;
}

/* ---- main -------------------------------------------------------------------------------------- */

static int add_source(json_object *src, const char *path) {
  uint8_t dg[CM_SHA256_BYTES];
  char hex[CM_SHA256_HEX];
  struct cm_diag d = {0};
  if (cm_sha256_file(path, dg, NULL, &d) != 0) {
    cm_diag_fini(&d);
    return ex_export_fail("%s: cannot hash", path);
  }
  cm_sha256_hex(dg, hex);
  json_object *e = json_object_new_object();
  char *abs = realpath(path, NULL);
  json_object_object_add(e, "path", json_object_new_string(abs ? abs : path));
  json_object_object_add(e, "sha256", json_object_new_string(hex));
  json_object_array_add(src, e);
  free(abs);
  return 0;
}

int ex_export_omnijev_main(int argc, char **argv, int (*qwen_main)(int, char **)) {
  const char *base = NULL, *ckpt = NULL, *out = NULL, *lora = "keep";
  static const struct option lo[] = {{"family", required_argument, 0, 'f'},
                                     {"base", required_argument, 0, 'b'},
                                     {"checkpoint", required_argument, 0, 'c'},
                                     {"out", required_argument, 0, 'o'},
                                     {"lora", required_argument, 0, 'l'},
                                     {"help", no_argument, 0, 'h'},
                                     {0, 0, 0, 0}};
  int c;
  optind = 0;
  while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    switch (c) {
    case 'f': break;
    case 'b': base = optarg; break;
    case 'c': ckpt = optarg; break;
    case 'o': out = optarg; break;
    case 'l': lora = optarg; break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (!base || !ckpt || !out || optind != argc) {
    usage(stderr);
    return 2;
  }
  if (strcmp(lora, "keep") != 0 && strcmp(lora, "merge") != 0)
    return ex_export_fail("--lora must be keep or merge"), 2;
  struct ex_pt_state head = {0}, ord = {0}, emb = {0};
  struct cm_diag d = {0};
  struct cm_safetensors_writer *w = NULL;
  json_object *meta = NULL, *calib = NULL, *manifest = NULL, *acfg = NULL;
  char *p_meta = ex_export_path_join(ckpt, "head_meta.json"),
       *p_head = ex_export_path_join(ckpt, "head.pt"), *p_ord = ex_export_path_join(ckpt, "ord.pt"),
       *p_emb = ex_export_path_join(ckpt, "new_tok_emb.pt"),
       *p_tok = ex_export_path_join(ckpt, "tokenizer.json"),
       *p_acfg = ex_export_path_join(ckpt, "adapter_config.json"),
       *o_tok = ex_export_path_join(out, "tokenizer.json"),
       *o_heads = ex_export_path_join(out, "heads.safetensors"),
       *o_man = ex_export_path_join(out, CM_MODEL_MANIFEST),
       *o_rows = ex_export_path_join(out, F32_ROWS_FILE);
  int rc = 0;
  /* everything from the checkpoint is read and checked before any output is written */
  if (!(meta = json_object_from_file(p_meta)))
    rc = ex_export_fail("%s: cannot read JSON", p_meta);
  if (!rc && (rc = ex_omnijev_check_meta(meta, &calib, &d)))
    ex_export_fail("%s", d.msg);
  if (!rc && (rc = ex_pt_read_file(p_head, &head, &d)))
    ex_export_fail("%s: %s", p_head, d.msg ? d.msg : "unreadable");
  if (!rc && (rc = ex_pt_read_file(p_ord, &ord, &d)))
    ex_export_fail("%s: %s", p_ord, d.msg ? d.msg : "unreadable");
  if (!rc && (rc = ex_pt_read_file(p_emb, &emb, &d)))
    ex_export_fail("%s: %s (expected a torch.save'd [2, hidden] tensor, or a state dict holding one)",
         p_emb, d.msg ? d.msg : "unreadable");
  if (!rc && (emb.n_tensors != 1 || emb.tensors[0].n_dims != 2 || emb.tensors[0].shape[0] != 2))
    rc = ex_export_fail("%s: must hold one tensor of shape [2, hidden]", p_emb);
  json_object *v = NULL;
  if (!rc && (!(acfg = json_object_from_file(p_acfg)) ||
              !json_object_object_get_ex(acfg, "r", &v)))
    rc = ex_export_fail("%s: cannot read the LoRA rank", p_acfg);
  int64_t rank = rc ? 0 : json_object_get_int64(v);
  double alpha = 0.0;
  if (!rc && (!json_object_object_get_ex(acfg, "lora_alpha", &v) || !is_number(v)))
    rc = ex_export_fail("%s: lora_alpha missing", p_acfg);
  if (!rc)
    alpha = json_object_get_double(v);
  if (!rc) {
    char *qargv[12] = {argv[0], "--family", "qwen3_5", "--base",    (char *)base, "--adapter",
                       (char *)ckpt, "--lora", (char *)lora, "--out", (char *)out, NULL};
    optind = 0;
    if (qwen_main(11, qargv) != 0)
      rc = ex_export_fail("the qwen3_5 export of %s with the adapter of %s failed", base, ckpt);
  }
  if (rc)
    goto out;
  /* tokenizer: the checkpoint's own when it ships one (AutoProcessor.from_pretrained(ckpt): its
   * tokenizer_config.json decides the class, export_hf.h), with <|opt|> / <|/opt|> verified */
  struct stat sb;
  json_object *tinfo = NULL;
  if (stat(p_tok, &sb) == 0 && (rc = ex_hf_export_tokenizer(ckpt, o_tok, &tinfo)))
    goto out;
  /* the processor: the checkpoint's config, else the base's; min_pixels 65,536 from it, max_pixels
   * overridden by MSO1 (602,112) whatever it says */
  int have_proc = 0;
  if ((rc = ex_hf_check_processor(ckpt, 65536, -1, &have_proc, NULL)) ||
      (!have_proc && (rc = ex_hf_check_processor(base, 65536, -1, &have_proc, NULL)))) {
    json_object_put(tinfo);
    goto out;
  }
  size_t vocab = 0;
  int32_t ids[2] = {-1, -1};
  if ((rc = ex_omnijev_option_tokens(o_tok, &vocab, ids)))
    goto out;
  /* manifest and config */
  json_object *config = NULL, *tc = NULL, *hs = NULL, *files = NULL, *up = NULL, *src = NULL;
  if (!(manifest = json_object_from_file(o_man)) ||
      !json_object_object_get_ex(manifest, "config", &config)) {
    json_object_put(tinfo);
    rc = ex_export_fail("%s: cannot read the manifest the qwen3_5 export wrote", o_man);
    goto out;
  }
  json_object *mtok = NULL;
  if (tinfo && json_object_object_get_ex(manifest, "tokenizer", &mtok))
    json_object_object_add(mtok, "transformers", tinfo); /* the checkpoint's, not the base's */
  else
    json_object_put(tinfo);
  if (!json_object_object_get_ex(config, "text_config", &tc))
    tc = config;
  int64_t hidden = json_object_object_get_ex(tc, "hidden_size", &hs) ? json_object_get_int64(hs) : 0;
  if (emb.tensors[0].shape[1] != hidden) {
    rc = ex_export_fail("%s: [2, %lld] but the base's hidden_size is %lld", p_emb,
              (long long)emb.tensors[0].shape[1], (long long)hidden);
    goto out;
  }
  if ((rc = resize_embedding(out, vocab, ids, &emb.tensors[0])))
    goto out;
  json_object_object_add(tc, "vocab_size", json_object_new_int64((int64_t)vocab));
  /* heads.safetensors */
  if ((rc = cm_safetensors_writer_new(&w)) || (rc = add_heads(&head, &ord, hidden, w)))
    goto out;
  if ((rc = cm_safetensors_writer_finish(w, o_heads, &d))) {
    ex_export_fail("%s", d.msg ? d.msg : o_heads);
    goto out;
  }
  /* the option rows as the release stores them (float32), for the fp32 numerics */
  cm_safetensors_writer_free(w);
  w = NULL;
  if ((rc = cm_safetensors_writer_new(&w)) ||
      (rc = cm_safetensors_writer_add(w, F32_ROWS_TENSOR, CM_DTYPE_F32, 2, emb.tensors[0].shape,
                                      emb.tensors[0].data))) {
    ex_export_fail("%s: cannot add %s", o_rows, F32_ROWS_TENSOR);
    goto out;
  }
  if ((rc = cm_safetensors_writer_finish(w, o_rows, &d))) {
    ex_export_fail("%s", d.msg ? d.msg : o_rows);
    goto out;
  }
  json_object_object_add(manifest, "family", json_object_new_string("omnijev"));
  json_object_object_add(manifest, "model_id", json_object_new_string("tinnel123/OmniJev"));
  json_object *lr = json_object_new_object(), *oi = json_object_new_array(),
              *proc = json_object_new_object();
  json_object_object_add(lr, "rank", json_object_new_int64(rank));
  json_object_object_add(lr, "alpha", json_object_new_double(alpha));
  json_object_object_add(lr, "mode", json_object_new_string(lora));
  json_object_object_add(calib, "lora", lr);
  json_object_array_add(oi, json_object_new_int(ids[0]));
  json_object_array_add(oi, json_object_new_int(ids[1]));
  json_object_object_add(calib, "option_token_ids", oi);
  json_object_object_add(calib, "vocab_size", json_object_new_int64((int64_t)vocab));
  json_object_object_add(proc, "min_pixels", json_object_new_int(65536));
  json_object_object_add(proc, "max_pixels", json_object_new_int(602112)); /* the MSO1 override */
  json_object_object_add(calib, "processor", proc);
  json_object_object_add(calib, "heads", json_object_new_string("heads.safetensors"));
  json_object_object_add(manifest, "omnijev", calib);
  json_object *fr = json_object_new_object(), *fri = json_object_new_array();
  json_object_object_add(fr, "file", json_object_new_string(F32_ROWS_FILE));
  json_object_object_add(fr, "tensor", json_object_new_string(F32_ROWS_TENSOR));
  json_object_array_add(fri, json_object_new_int(ids[0]));
  json_object_array_add(fri, json_object_new_int(ids[1]));
  json_object_object_add(fr, "ids", fri);
  json_object_object_add(manifest, "embed_f32_rows", fr);
  json_object *kinds = json_object_new_array(); /* the executor loads only these heads */
  json_object_array_add(kinds, json_object_new_string("omnijev"));
  json_object_object_add(manifest, "head_kinds", kinds);
  calib = NULL;
  if (json_object_object_get_ex(manifest, "upstream", &up) &&
      json_object_object_get_ex(up, "sources", &src)) {
    char *const extra[] = {p_meta, p_head, p_ord, p_emb};
    for (int i = 0; i < 4 && !rc; i++)
      rc = add_source(src, extra[i]);
    if (!rc && stat(p_tok, &sb) == 0)
      rc = add_source(src, p_tok);
  }
  if (!rc && !json_object_object_get_ex(manifest, "files", &files))
    rc = ex_export_fail("%s: no files", o_man);
  if (!rc)
    rc = cm_model_dir_add_file(files, out, "weights.safetensors", &d);
  if (!rc)
    rc = cm_model_dir_add_file(files, out, "tokenizer.json", &d);
  if (!rc)
    rc = cm_model_dir_add_file(files, out, "heads.safetensors", &d);
  if (!rc)
    rc = cm_model_dir_add_file(files, out, F32_ROWS_FILE, &d);
  if (!rc)
    rc = cm_model_dir_write_manifest(out, manifest, &d);
  if (rc)
    ex_export_fail("%s", d.msg ? d.msg : out);
  else
    printf("s1-export: %s is an omnijev model (vocabulary %zu, option ids %d/%d, LoRA r%lld "
           "alpha %g %s, heads %zu + %zu tensors)\n", out, vocab, ids[0], ids[1], (long long)rank,
           alpha, lora, head.n_tensors, ord.n_tensors);
out:
  cm_diag_fini(&d);
  cm_safetensors_writer_free(w);
  ex_pt_state_fini(&head);
  ex_pt_state_fini(&ord);
  ex_pt_state_fini(&emb);
  json_object_put(meta);
  json_object_put(calib);
  json_object_put(manifest);
  json_object_put(acfg);
  free(p_meta), free(p_head), free(p_ord), free(p_emb), free(p_tok), free(p_acfg);
  free(o_tok), free(o_heads), free(o_man), free(o_rows);
  return rc ? 1 : 0;
}
