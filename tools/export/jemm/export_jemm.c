/* s1-export --family jemm (see export_jemm.h): adapter shape, calibration, label ids, the chat
 * wrapper, and the manifest blocks the JEMM family reads (preprocessor/families/jemm/jemm.c). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "export_util.h"
#include "cm_sha256.h"
#include "export_jemm.h"
#include "pp_tok.h"

#define JEMM_RANK 16
#define JEMM_ALPHA 32.0
#define JEMM_TEMPERATURE 1.3480874159655591 /* jemm/model.py TEMPERATURE */
#define JEMM_THRESHOLD 0.9872681877423998   /* jemm/model.py THRESHOLD */
#define JEMM_LABELS "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"
#define JEMM_SYSTEM                                                                                \
  "Choose the best available candidate for the question using only the supplied state. "           \
  "Return exactly one candidate label."
/* The Qwen3.5 template rendered for [system, user] with add_generation_prompt, thinking off. */
#define JEMM_PREFIX "<|im_start|>system\n" JEMM_SYSTEM "<|im_end|>\n<|im_start|>user\n"
#define JEMM_SUFFIX "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("s1-export: jemm: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return -1;
}

static int add_source(json_object *sources, const char *path) {
  uint8_t dg[CM_SHA256_BYTES];
  char hex[CM_SHA256_HEX];
  struct cm_diag d = {0};
  if (cm_sha256_file(path, dg, NULL, &d) != 0) {
    fail("%s", d.msg ? d.msg : path);
    cm_diag_fini(&d);
    return -1;
  }
  cm_sha256_hex(dg, hex);
  json_object *e = json_object_new_object();
  json_object_object_add(e, "path", json_object_new_string(path));
  json_object_object_add(e, "sha256", json_object_new_string(hex));
  json_object_array_add(sources, e);
  return 0;
}

/* decision_config.json: model.py reads temperature, mm_temperature (default: temperature) and
 * threshold; without the file its constants apply. */
static int calibration(const struct export_jemm_in *in, json_object *jm, json_object *sources) {
  char *path = ex_export_path_join(in->adapter_dir, "decision_config.json");
  double t = JEMM_TEMPERATURE, th = JEMM_THRESHOLD, mm = NAN;
  struct stat sb;
  int rc = 0;
  json_object *dc = NULL;
  if (path && stat(path, &sb) == 0) {
    dc = json_object_from_file(path);
    if (!dc || !json_object_is_type(dc, json_type_object))
      rc = fail("%s: cannot read a JSON object", path);
    json_object *v;
    const char *keys[] = {"temperature", "mm_temperature", "threshold"};
    double *dst[] = {&t, &mm, &th};
    for (int k = 0; k < 3 && !rc; k++) {
      if (!json_object_object_get_ex(dc, keys[k], &v))
        continue;
      if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        rc = fail("%s: '%s' is not a number", path, keys[k]);
      else
        *dst[k] = json_object_get_double(v);
    }
    if (!rc)
      rc = add_source(sources, path);
  }
  if (isnan(mm))
    mm = t;
  if (!rc && !(isfinite(t) && t > 0 && isfinite(mm) && mm > 0 && isfinite(th)))
    rc = fail("decision_config.json: temperatures must be finite and positive");
  if (!rc) {
    json_object_object_add(jm, "temperature", json_object_new_double(t));
    json_object_object_add(jm, "mm_temperature", json_object_new_double(mm));
    json_object_object_add(jm, "threshold", json_object_new_double(th));
  }
  json_object_put(dc);
  free(path);
  return rc;
}

/* Label ids as the reference takes them (first id of each label's encoding), but each label must
 * be one token and the 32 ids distinct (the port's export check). */
static int labels(const struct export_jemm_in *in, const struct pp_tok *tok, json_object *jm) {
  json_object *ids = json_object_new_array(), *names = json_object_new_array();
  json_object_object_add(jm, "labels", names);
  json_object_object_add(jm, "label_token_ids", ids);
  int32_t got[32];
  struct cm_diag d = {0};
  for (int i = 0; i < 32; i++) {
    struct pp_tok_ids e = {0};
    int rc = pp_tok_encode(tok, &JEMM_LABELS[i], 1, &e, &d);
    if (rc || e.n != 1) {
      pp_tok_ids_fini(&e);
      rc = fail("label '%c' is %zu tokens in the tokenizer (%s)", JEMM_LABELS[i], e.n,
                d.msg ? d.msg : "one expected");
      cm_diag_fini(&d);
      return rc;
    }
    got[i] = e.ids[0];
    pp_tok_ids_fini(&e);
    for (int j = 0; j < i; j++)
      if (got[j] == got[i])
        return fail("labels '%c' and '%c' share token id %d", JEMM_LABELS[j], JEMM_LABELS[i],
                    got[i]);
    char s[2] = {JEMM_LABELS[i], 0};
    json_object_array_add(names, json_object_new_string(s));
    json_object_array_add(ids, json_object_new_int(got[i]));
  }
  int32_t pad = pp_tok_token_to_id(tok, "<|image_pad|>", strlen("<|image_pad|>"));
  if (pad < 0 || !pp_tok_is_special(tok, pad))
    return fail("the tokenizer has no special <|image_pad|> token");
  if (in->image_token_id >= 0 && pad != in->image_token_id)
    return fail("<|image_pad|> is id %d in the tokenizer but image_token_id %lld in config.json",
                pad, (long long)in->image_token_id);
  if (in->dims->vocab < (int64_t)pp_tok_vocab_size(tok, true))
    return fail("the tokenizer has %zu tokens, the embedding %lld rows",
                pp_tok_vocab_size(tok, true), (long long)in->dims->vocab);
  return 0;
}

/* Does the template source hold `piece` as a Jinja string literal ("\n" written as \n)? */
static bool template_has(const char *tmpl, const char *piece) {
  char esc[256];
  size_t k = 0;
  for (const char *p = piece; *p && k + 2 < sizeof esc; p++) {
    if (*p == '\n') {
      esc[k++] = '\\';
      esc[k++] = 'n';
    } else {
      esc[k++] = *p;
    }
  }
  esc[k] = 0;
  return strstr(tmpl, esc) != NULL;
}

/* The base's chat template text (tokenizer_config.json "chat_template" or chat_template.jinja),
 * heap, or NULL when it has none. */
static char *read_template(const char *base) {
  char *path = ex_export_path_join(base, "tokenizer_config.json"), *out = NULL;
  json_object *tc = path ? json_object_from_file(path) : NULL, *v;
  if (tc && json_object_object_get_ex(tc, "chat_template", &v) &&
      json_object_is_type(v, json_type_string))
    out = strdup(json_object_get_string(v));
  json_object_put(tc);
  free(path);
  if (out)
    return out;
  path = ex_export_path_join(base, "chat_template.jinja");
  FILE *f = path ? fopen(path, "rb") : NULL;
  free(path);
  if (!f)
    return NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long n = ftell(f);
    if (n > 0 && n < (16L << 20) && fseek(f, 0, SEEK_SET) == 0 && (out = malloc((size_t)n + 1))) {
      if (fread(out, 1, (size_t)n, f) != (size_t)n) {
        free(out);
        out = NULL;
      } else {
        out[n] = 0;
      }
    }
  }
  fclose(f);
  return out;
}

static int chat(const struct export_jemm_in *in, const struct pp_tok *tok, json_object *manifest,
                json_object *jm, json_object *sources) {
  const char *prefix = JEMM_PREFIX, *suffix = JEMM_SUFFIX, *source;
  json_object *cf = NULL, *p = NULL, *s = NULL;
  char *tmpl = NULL;
  int rc = 0;
  if (in->chat_path) {
    cf = json_object_from_file(in->chat_path);
    if (!cf || !json_object_object_get_ex(cf, "prefix", &p) ||
        !json_object_object_get_ex(cf, "suffix", &s) || !json_object_is_type(p, json_type_string) ||
        !json_object_is_type(s, json_type_string)) {
      json_object_put(cf);
      return fail("%s: needs string keys \"prefix\" and \"suffix\"", in->chat_path);
    }
    prefix = json_object_get_string(p);
    suffix = json_object_get_string(s);
    source = "--chat (the tokenizer's template rendered around a sentinel user message)";
    rc = add_source(sources, in->chat_path);
  } else {
    tmpl = read_template(in->base);
    const char *pieces[] = {"<|im_start|>", "<|im_end|>\n", "<|im_start|>assistant\n",
                            "<think>\n\n</think>\n\n", "enable_thinking"};
    for (size_t i = 0; tmpl && i < sizeof pieces / sizeof *pieces && !rc; i++)
      if (!template_has(tmpl, pieces[i]))
        rc = fail("the base's chat template lacks \"%s\"; render the wrapper with "
                  "recipe/jemm/chat_wrapper.py and pass --chat",
                  pieces[i]);
    source = tmpl ? "built-in Qwen3.5 wrapper (spec/jemm.md 3.11), checked against the base's "
                    "chat template"
                  : "built-in Qwen3.5 wrapper (spec/jemm.md 3.11); the base has no chat template";
  }
  size_t ns = strlen(suffix), k = strlen("<think>\n\n</think>\n\n");
  if (!rc && !strstr(prefix, JEMM_SYSTEM))
    rc = fail("chat prefix lacks the JEMM system message");
  if (!rc && (ns < k || strcmp(suffix + ns - k, "<think>\n\n</think>\n\n") != 0))
    rc = fail("chat suffix must end in \"<think>\\n\\n</think>\\n\\n\"");
  /* the scored position: the suffix's last token is "\n\n" on its own */
  struct pp_tok_ids a = {0}, b = {0};
  struct cm_diag d = {0};
  if (!rc && (pp_tok_encode(tok, suffix, ns, &a, &d) || pp_tok_encode(tok, "\n\n", 2, &b, &d) ||
              b.n != 1 || a.n < 1 || a.ids[a.n - 1] != b.ids[0]))
    rc = fail("the chat suffix does not end in the \"\\n\\n\" token (%s)", d.msg ? d.msg : "ids");
  if (!rc) {
    json_object *c = json_object_new_object();
    json_object_object_add(c, "prefix", json_object_new_string(prefix));
    json_object_object_add(c, "suffix", json_object_new_string(suffix));
    json_object_object_add(manifest, "chat", c);
    json_object_object_add(jm, "chat_source", json_object_new_string(source));
    json_object_object_add(jm, "readout_token_id", json_object_new_int(b.ids[0]));
  }
  pp_tok_ids_fini(&a);
  pp_tok_ids_fini(&b);
  cm_diag_fini(&d);
  json_object_put(cf);
  free(tmpl);
  return rc;
}

int export_jemm(const struct export_jemm_in *in, json_object *manifest, json_object *sources) {
  if (!in->adapter_dir)
    return fail("--family jemm needs --adapter (the JEMM LoRA adapter)");
  if (in->rank != JEMM_RANK || in->alpha != JEMM_ALPHA)
    return fail("adapter r = %lld, lora_alpha = %g; JEMM is r = %d, alpha = %g",
                (long long)in->rank, in->alpha, JEMM_RANK, JEMM_ALPHA);
  size_t n_attn = 0;
  for (int64_t i = 0; i < in->dims->n_layers; i++)
    n_attn += in->dims->is_full[i];
  size_t want = 8 * ((size_t)in->dims->n_layers - n_attn) + 7 * n_attn;
  if (in->n_pairs != want || in->n_other_pairs)
    return fail("adapter has %zu language pairs and %zu elsewhere; JEMM adapts every language "
                "projection (%zu pairs: 8 per Gated DeltaNet layer, 7 per attention layer) and "
                "nothing else",
                in->n_pairs, in->n_other_pairs, want);
  if (in->dims->tied)
    return fail("tie_word_embeddings is true; JEMM reads an untied LM head");
  char *tpath = ex_export_path_join(in->out, "tokenizer.json");
  struct pp_tok *tok = NULL;
  struct cm_diag d = {0};
  int rc = tpath ? pp_tok_load_file(tpath, &tok, &d) : -ENOMEM;
  if (rc)
    rc = fail("%s: %s", tpath, d.msg ? d.msg : "cannot load");
  json_object *jm = json_object_new_object();
  json_object_object_add(manifest, "jemm", jm);
  json_object_object_add(jm, "model_id", json_object_new_string("JEMM"));
  json_object *al = json_object_new_array();
  json_object_array_add(al, json_object_new_string("jemm"));
  json_object_array_add(al, json_object_new_string("MaestroYan/JEMM"));
  json_object_object_add(jm, "aliases", al);
  if (!rc)
    rc = calibration(in, jm, sources);
  if (!rc)
    rc = labels(in, tok, jm);
  if (!rc)
    rc = chat(in, tok, manifest, jm, sources);
  if (!rc) {
    json_object_object_add(jm, "lora_mode",
                           json_object_new_string(in->merged ? "merged_bf16" : "unmerged_fp32"));
    json_object_object_add(jm, "lora_rank", json_object_new_int64(in->rank));
    json_object_object_add(jm, "lora_alpha", json_object_new_double(in->alpha));
    json_object_object_add(jm, "lora_pairs", json_object_new_int64((int64_t)in->n_pairs));
    json_object_object_add(jm, "untied_lm_head", json_object_new_boolean(true));
    json_object_object_add(jm, "max_tokens", json_object_new_int(8192));
    json_object_object_add(jm, "max_mm_tokens", json_object_new_int(3072));
    json_object_object_add(manifest, "family", json_object_new_string("jemm"));
  }
  pp_tok_free(tok);
  cm_diag_fini(&d);
  free(tpath);
  return rc ? -1 : 0;
}
