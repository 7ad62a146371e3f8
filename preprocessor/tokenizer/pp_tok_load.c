/* Loading a tokenizer.json (json-c) into the flat tables the encoder uses: vocabulary and added
 * token maps, the merge-rank table, the added-token tries, normalizer and pre-tokenizer steps.
 * Anything the encoder would not reproduce exactly is refused here, with the component named. */
#include "pp_tok_internal.h"
#include "pp_tok_unicode.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#define JSON_MAX_DEPTH 64

/* ---- GPT-2 byte <-> character table ------------------------------------------------------- */

static bool byte_is_printable(unsigned b) {
  return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

uint32_t tok_byte_to_cp(uint8_t b) {
  if (byte_is_printable(b))
    return b;
  unsigned n = 0;
  for (unsigned i = 0; i < b; i++)
    n += !byte_is_printable(i);
  return 256 + n;
}

int tok_cp_to_byte(uint32_t cp) {
  /* code points 256..323 stand for the non-printable bytes, in byte order */
  static const uint8_t table[68] = {
      0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d,
      0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b,
      0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x7f, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87,
      0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x95,
      0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f, 0xa0, 0xad};
  if (cp < 256)
    return byte_is_printable(cp) ? (int)cp : -1;
  return cp < 256 + 68 ? table[cp - 256] : -1;
}

/* ---- hashing and maps --------------------------------------------------------------------- */

uint64_t tok_hash(const void *p, size_t n) {
  /* FNV-1a over 8-byte words with a final avalanche; fast enough for short tokens. */
  const unsigned char *s = p;
  uint64_t h = 0xcbf29ce484222325ull ^ (n * 0x9e3779b97f4a7c15ull);
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, s, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
    s += 8;
    n -= 8;
  }
  uint64_t w = 0;
  memcpy(&w, s, n);
  h = (h ^ w) * 0x100000001b3ull;
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  return h;
}

static int map_init(struct tok_map *m, size_t n_keys) {
  size_t cap = 16;
  while (cap < n_keys * 2 + 16)
    cap <<= 1;
  m->slots = malloc(cap * sizeof(*m->slots));
  if (!m->slots)
    return -ENOMEM;
  for (size_t i = 0; i < cap; i++)
    m->slots[i].len = UINT32_MAX;
  m->mask = cap - 1;
  m->n = 0;
  return 0;
}

int32_t tok_map_get(const struct pp_tok *tok, const struct tok_map *m, const char *s, size_t n) {
  if (!m->slots)
    return -1;
  uint64_t h = tok_hash(s, n);
  for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
    const struct tok_map_slot *sl = &m->slots[i];
    if (sl->len == UINT32_MAX)
      return -1;
    if (sl->hash == (uint32_t)h && sl->len == n && memcmp(tok->pool + sl->off, s, n) == 0)
      return sl->value;
  }
}

/* Inserts key (already in the pool at off) -> value; returns the previous value or -1. */
static int32_t map_put(struct pp_tok *tok, struct tok_map *m, uint64_t off, uint32_t len,
                       int32_t value) {
  const char *s = tok->pool + off;
  uint64_t h = tok_hash(s, len);
  for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
    struct tok_map_slot *sl = &m->slots[i];
    if (sl->len == UINT32_MAX) {
      *sl = (struct tok_map_slot){.hash = (uint32_t)h, .len = len, .off = off, .value = value};
      m->n++;
      return -1;
    }
    if (sl->hash == (uint32_t)h && sl->len == len && memcmp(tok->pool + sl->off, s, len) == 0) {
      int32_t old = sl->value;
      sl->value = value;
      return old;
    }
  }
}

static uint64_t merge_slot_hash(uint64_t key) {
  key ^= key >> 31;
  key *= 0x9e3779b97f4a7c15ull;
  key ^= key >> 29;
  return key;
}

const struct tok_merge_slot *tok_merge_get(const struct pp_tok *tok, int32_t left, int32_t right) {
  uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
  for (size_t i = merge_slot_hash(key) & tok->merge_mask;; i = (i + 1) & tok->merge_mask) {
    const struct tok_merge_slot *sl = &tok->merges[i];
    if (sl->key == key)
      return sl;
    if (sl->key == UINT64_MAX)
      return NULL;
  }
}

/* ---- pool --------------------------------------------------------------------------------- */

static int pool_add(struct pp_tok *tok, const char *s, size_t n, uint64_t *ret_off) {
  if (tok->pool_len + n + 1 > tok->pool_cap) {
    size_t cap = tok->pool_cap ? tok->pool_cap : 1 << 16;
    while (cap < tok->pool_len + n + 1)
      cap *= 2;
    char *p = realloc(tok->pool, cap);
    if (!p)
      return -ENOMEM;
    tok->pool = p;
    tok->pool_cap = cap;
  }
  memcpy(tok->pool + tok->pool_len, s, n);
  tok->pool[tok->pool_len + n] = 0;
  *ret_off = tok->pool_len;
  tok->pool_len += n + 1;
  return 0;
}

/* ---- JSON helpers ------------------------------------------------------------------------- */

static const char *type_of(json_object *o) {
  json_object *t;
  if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, "type", &t) ||
      !json_object_is_type(t, json_type_string))
    return NULL;
  return json_object_get_string(t);
}

/* Reads an optional boolean field; absent or null gives `dflt`. */
static int get_bool(json_object *o, const char *key, bool dflt, bool *ret, struct cm_diag *diag,
                    const char *where) {
  json_object *v;
  if (!json_object_object_get_ex(o, key, &v) || !v) {
    *ret = dflt;
    return 0;
  }
  if (!json_object_is_type(v, json_type_boolean))
    return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: %s.%s is not a boolean", where, key);
  *ret = json_object_get_boolean(v);
  return 0;
}

/* An optional string field: NULL when absent or null. */
static int get_str(json_object *o, const char *key, const char **ret, size_t *ret_len,
                   struct cm_diag *diag, const char *where) {
  json_object *v;
  *ret = NULL;
  *ret_len = 0;
  if (!json_object_object_get_ex(o, key, &v) || !v)
    return 0;
  if (!json_object_is_type(v, json_type_string))
    return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: %s.%s is not a string", where, key);
  *ret = json_object_get_string(v);
  *ret_len = (size_t)json_object_get_string_len(v);
  return 0;
}

static int get_id(json_object *v, int32_t *ret) {
  if (!v || !json_object_is_type(v, json_type_int))
    return -1;
  int64_t x = json_object_get_int64(v);
  if (x < 0 || x >= INT32_MAX / 2)
    return -1;
  *ret = (int32_t)x;
  return 0;
}

/* ---- components --------------------------------------------------------------------------- */

static int load_normalizer(struct pp_tok *tok, json_object *o, struct cm_diag *diag) {
  if (!o)
    return 0;
  const char *t = type_of(o);
  if (!t)
    return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: normalizer has no type");
  if (strcmp(t, "Sequence") == 0) {
    json_object *list;
    if (!json_object_object_get_ex(o, "normalizers", &list) ||
        !json_object_is_type(list, json_type_array))
      return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: normalizer Sequence without list");
    for (size_t i = 0; i < json_object_array_length(list); i++) {
      int rc = load_normalizer(tok, json_object_array_get_idx(list, i), diag);
      if (rc)
        return rc;
    }
    return 0;
  }
  static const struct {
    const char *name;
    enum tok_norm norm;
  } known[] = {{"NFC", TOK_NORM_NFC}, {"NFD", TOK_NORM_NFD}, {"NFKC", TOK_NORM_NFKC},
               {"NFKD", TOK_NORM_NFKD}};
  for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
    if (strcmp(t, known[i].name) == 0) {
      if (tok->n_norms == TOK_MAX_STAGES)
        return cm_diag_set(diag, -CM_EUNSUPPORTED, "tokenizer.json: more than %d normalizers",
                           TOK_MAX_STAGES);
      tok->norms[tok->n_norms++] = known[i].norm;
      return 0;
    }
  }
  return cm_diag_set(diag, -CM_EUNSUPPORTED, "tokenizer.json: unsupported component normalizer %s",
                     t);
}

/* The reference compiles Split regexes with Oniguruma (Ruby syntax, Unicode 16). PCRE2 with UCP
 * agrees on lookarounds, (?i) and alternation order, but not on every class: PCRE2's \s also
 * matches U+180E (Oniguruma's is Unicode White_Space), \h and \v mean hex digit and vertical tab
 * in Ruby, \w differs in marks and No, and PCRE2 10.42's Unicode 14 tables lack the letters,
 * marks and numbers added since (pp_tok_unicode.h, measured). Those are rewritten to explicit
 * classes; a negated shorthand inside a class has no such rewrite and is refused. */
#define WS_CLASS "\\t\\n\\x0b\\f\\r\\x20\\x85\\xa0\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
#define WORD_CLASS "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200c}\\x{200d}"
#define HEX_CLASS "0-9a-fA-F"

struct strbuf {
  char *p;    /* bytes */
  size_t n;   /* used */
  size_t cap; /* allocated */
  bool oom;   /* an append failed */
};

static void sb_add(struct strbuf *b, const char *s, size_t n) {
  if (b->oom)
    return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < b->n + n + 1)
      cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
}

static void sb_str(struct strbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

/* The extra ranges of general category `name` (name_len bytes), or NULL. */
static const char *unicode_extra(const char *name, size_t name_len) {
  for (size_t i = 0; i < sizeof(TOK_UNICODE_EXTRA) / sizeof(TOK_UNICODE_EXTRA[0]); i++)
    if (strlen(TOK_UNICODE_EXTRA[i].name) == name_len &&
        memcmp(TOK_UNICODE_EXTRA[i].name, name, name_len) == 0)
      return TOK_UNICODE_EXTRA[i].extra;
  return NULL;
}

static int translate_pattern(const char *pat, size_t n, char **ret, size_t *ret_n,
                             struct cm_diag *diag) {
  struct strbuf b = {0};
  bool in_class = false;
  size_t class_start = 0;
  for (size_t i = 0; i < n; i++) {
    char c = pat[i];
    if (c == '\\' && i + 1 < n) {
      char e = pat[i + 1];
      const char *base = NULL, *extra = NULL;
      size_t skip = 2; /* pattern bytes consumed */
      char prop[16];
      bool negated = false;
      switch (e) {
      case 's': case 'S': base = WS_CLASS; negated = e == 'S'; break;
      case 'w': case 'W': base = WORD_CLASS; negated = e == 'W'; break;
      case 'h': case 'H': base = HEX_CLASS; negated = e == 'H'; break;
      case 'v': base = "\\x0b"; break;
      case 'p': case 'P': {
        const char *name = pat + i + 2;
        size_t len = 0;
        if (i + 2 < n && pat[i + 2] == '{') {
          const char *close = memchr(pat + i + 3, '}', n - i - 3);
          if (close) {
            name = pat + i + 3;
            len = (size_t)(close - name);
            skip = 3 + len + 1;
          }
        } else if (i + 2 < n) {
          len = 1;
          skip = 3;
        }
        extra = len ? unicode_extra(name, len) : NULL;
        if (extra && len < sizeof(prop) - 6) {
          snprintf(prop, sizeof(prop), "\\p{%.*s}", (int)len, name);
          base = prop;
          negated = e == 'P';
        } else {
          extra = NULL;
        }
        break;
      }
      case 'Q':
        free(b.p);
        return cm_diag_set(diag, -CM_EUNSUPPORTED,
                           "tokenizer.json: unsupported component Split regex with \\Q");
      default:
        break;
      }
      if (!base) {
        sb_add(&b, pat + i, 2);
        i++;
        continue;
      }
      i += skip - 1;
      if (in_class) {
        if (negated) {
          free(b.p);
          return cm_diag_set(diag, -CM_EUNSUPPORTED,
                             "tokenizer.json: unsupported component Split regex with \\%c "
                             "inside a class", e);
        }
        sb_str(&b, base);
        if (extra)
          sb_str(&b, extra);
      } else {
        sb_str(&b, negated ? "[^" : "[");
        sb_str(&b, base);
        if (extra)
          sb_str(&b, extra);
        sb_str(&b, "]");
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      class_start = b.n + 1;
    } else if (in_class && c == ']') {
      /* a ']' right after '[' or '[^' is a literal */
      bool first = b.n == class_start || (b.n == class_start + 1 && b.p[class_start] == '^');
      if (!first)
        in_class = false;
    }
    sb_add(&b, &c, 1);
  }
  if (b.oom) {
    free(b.p);
    return -ENOMEM;
  }
  *ret = b.p;
  *ret_n = b.n;
  return 0;
}

static int compile_stage(struct tok_stage *st, const char *pat, size_t n, bool literal,
                         struct cm_diag *diag) {
  int err;
  PCRE2_SIZE off;
  uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP | PCRE2_MULTILINE);
  char *tr = NULL;
  if (!literal) {
    int rc = translate_pattern(pat, n, &tr, &n, diag);
    if (rc)
      return rc;
    pat = tr;
  }
  st->re = pcre2_compile((PCRE2_SPTR)pat, n, opts, &err, &off, NULL);
  free(tr);
  if (!st->re) {
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return cm_diag_set(diag, -CM_EUNSUPPORTED,
                       "tokenizer.json: pre_tokenizer Split pattern rejected by PCRE2 at %zu: %s",
                       (size_t)off, (char *)msg);
  }
  /* JIT is an accelerator: without it (unsupported CPU) the interpreter gives the same matches. */
  (void)pcre2_jit_compile(st->re, PCRE2_JIT_COMPLETE);
  return 0;
}

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int load_pre_tokenizer(struct pp_tok *tok, json_object *o, bool *seen_byte_level,
                              struct cm_diag *diag) {
  const char *t = type_of(o);
  if (!t)
    return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: pre_tokenizer has no type");
  if (*seen_byte_level)
    return cm_diag_set(diag, -CM_EUNSUPPORTED,
                       "tokenizer.json: unsupported component pre_tokenizer %s after ByteLevel", t);
  if (strcmp(t, "Sequence") == 0) {
    json_object *list;
    if (!json_object_object_get_ex(o, "pretokenizers", &list) ||
        !json_object_is_type(list, json_type_array))
      return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: pre_tokenizer Sequence without list");
    for (size_t i = 0; i < json_object_array_length(list); i++) {
      int rc = load_pre_tokenizer(tok, json_object_array_get_idx(list, i), seen_byte_level, diag);
      if (rc)
        return rc;
    }
    return 0;
  }
  if (tok->n_stages == TOK_MAX_STAGES)
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "tokenizer.json: more than %d pre_tokenizers",
                       TOK_MAX_STAGES);
  struct tok_stage *st = &tok->stages[tok->n_stages];
  memset(st, 0, sizeof(*st));
  int rc;
  if (strcmp(t, "Split") == 0) {
    json_object *pat, *v;
    const char *beh;
    size_t beh_len;
    if (!json_object_object_get_ex(o, "pattern", &pat) ||
        !json_object_is_type(pat, json_type_object))
      return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: pre_tokenizer Split has no pattern");
    bool literal;
    if (json_object_object_get_ex(pat, "Regex", &v) && json_object_is_type(v, json_type_string))
      literal = false;
    else if (json_object_object_get_ex(pat, "String", &v) &&
             json_object_is_type(v, json_type_string))
      literal = true;
    else
      return cm_diag_set(diag, -CM_EFORMAT,
                         "tokenizer.json: pre_tokenizer Split pattern is neither Regex nor String");
    if ((rc = get_str(o, "behavior", &beh, &beh_len, diag, "Split")) ||
        (rc = get_bool(o, "invert", false, &st->invert, diag, "Split")))
      return rc;
    static const struct {
      const char *name;
      enum tok_split_behavior b;
    } behs[] = {{"Removed", TOK_SPLIT_REMOVED},
                {"Isolated", TOK_SPLIT_ISOLATED},
                {"MergedWithPrevious", TOK_SPLIT_MERGED_WITH_PREVIOUS},
                {"MergedWithNext", TOK_SPLIT_MERGED_WITH_NEXT},
                {"Contiguous", TOK_SPLIT_CONTIGUOUS}};
    size_t k = 0;
    for (; beh && k < sizeof(behs) / sizeof(behs[0]); k++)
      if (strcmp(beh, behs[k].name) == 0)
        break;
    if (!beh || k == sizeof(behs) / sizeof(behs[0]))
      return cm_diag_set(diag, -CM_EUNSUPPORTED,
                         "tokenizer.json: unsupported component pre_tokenizer Split behavior %s",
                         beh ? beh : "(missing)");
    st->behavior = behs[k].b;
    if (literal && json_object_get_string_len(v) == 0) {
      /* An empty literal never matches: the step passes pieces through unchanged. */
      st->behavior = TOK_SPLIT_ISOLATED;
      st->invert = false;
      st->re = NULL;
    } else if ((rc = compile_stage(st, json_object_get_string(v),
                                   (size_t)json_object_get_string_len(v), literal, diag))) {
      return rc;
    }
    tok->n_stages++;
    return 0;
  }
  if (strcmp(t, "ByteLevel") == 0) {
    bool use_regex;
    if ((rc = get_bool(o, "add_prefix_space", true, &st->prefix_space, diag, "ByteLevel")) ||
        (rc = get_bool(o, "use_regex", true, &use_regex, diag, "ByteLevel")))
      return rc;
    st->behavior = TOK_SPLIT_ISOLATED;
    if (use_regex && (rc = compile_stage(st, GPT2_PATTERN, sizeof(GPT2_PATTERN) - 1, false, diag)))
      return rc;
    *seen_byte_level = true;
    if (st->re || st->prefix_space)
      tok->n_stages++;
    return 0;
  }
  return cm_diag_set(diag, -CM_EUNSUPPORTED,
                     "tokenizer.json: unsupported component pre_tokenizer %s", t);
}

static int load_decoder(json_object *o, struct cm_diag *diag) {
  const char *t = o ? type_of(o) : "null";
  if (t && strcmp(t, "ByteLevel") == 0)
    return 0;
  return cm_diag_set(diag, -CM_EUNSUPPORTED, "tokenizer.json: unsupported component decoder %s",
                     t ? t : "(no type)");
}

static int load_post_processor(json_object *o, struct cm_diag *diag) {
  if (!o)
    return 0;
  const char *t = type_of(o);
  /* With add_special_tokens=False these only touch offsets or add nothing. */
  static const char *const ok[] = {"ByteLevel", "TemplateProcessing", "RobertaProcessing",
                                   "BertProcessing"};
  for (size_t i = 0; t && i < sizeof(ok) / sizeof(ok[0]); i++)
    if (strcmp(t, ok[i]) == 0)
      return 0;
  if (t && strcmp(t, "Sequence") == 0) {
    json_object *list;
    if (!json_object_object_get_ex(o, "processors", &list) ||
        !json_object_is_type(list, json_type_array))
      return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: post_processor Sequence without list");
    for (size_t i = 0; i < json_object_array_length(list); i++) {
      int rc = load_post_processor(json_object_array_get_idx(list, i), diag);
      if (rc)
        return rc;
    }
    return 0;
  }
  return cm_diag_set(diag, -CM_EUNSUPPORTED,
                     "tokenizer.json: unsupported component post_processor %s",
                     t ? t : "(no type)");
}

/* Normalizes s with the tokenizer's normalizer steps into a malloc'd string. */
static int normalize_alloc(const struct pp_tok *tok, const char *s, size_t n, char **ret,
                           size_t *ret_n) {
  char *cur = malloc(n + 1);
  if (!cur)
    return -ENOMEM;
  memcpy(cur, s, n);
  cur[n] = 0;
  size_t len = n;
  for (int i = 0; i < tok->n_norms; i++) {
    static const int flags[] = {
        [TOK_NORM_NFC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE,
        [TOK_NORM_NFD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
        [TOK_NORM_NFKC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
        [TOK_NORM_NFKD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT,
    };
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)cur, (utf8proc_ssize_t)len, &out,
                                      (utf8proc_option_t)flags[tok->norms[i]]);
    free(cur);
    if (r < 0)
      return r == UTF8PROC_ERROR_NOMEM ? -ENOMEM : -CM_EUTF8;
    cur = (char *)out;
    len = (size_t)r;
  }
  *ret = cur;
  *ret_n = len;
  return 0;
}

static int trie_add(struct tok_trie *tr, const char *s, size_t n, int32_t added_index) {
  if (!tr->nodes) {
    tr->nodes = malloc(sizeof(*tr->nodes) * 64);
    if (!tr->nodes)
      return -ENOMEM;
    tr->nodes[0] = (struct tok_trie_node){-1, -1, -1, 0};
    tr->n = 1;
  }
  tr->first[(uint8_t)s[0] >> 3] |= (uint8_t)(1u << ((uint8_t)s[0] & 7));
  int32_t cur = 0;
  for (size_t i = 0; i < n; i++) {
    uint8_t b = (uint8_t)s[i];
    int32_t c = tr->nodes[cur].first_child;
    while (c >= 0 && tr->nodes[c].byte != b)
      c = tr->nodes[c].next_sibling;
    if (c < 0) {
      if ((tr->n & (tr->n - 1)) == 0 && tr->n >= 64) {
        struct tok_trie_node *p = realloc(tr->nodes, sizeof(*p) * tr->n * 2);
        if (!p)
          return -ENOMEM;
        tr->nodes = p;
      }
      c = (int32_t)tr->n++;
      tr->nodes[c] = (struct tok_trie_node){-1, tr->nodes[cur].first_child, -1, b};
      tr->nodes[cur].first_child = c;
    }
    cur = c;
  }
  /* A later duplicate content wins, as in the reference's map from content to id. */
  tr->nodes[cur].added = added_index;
  return 0;
}

static int load_added(struct pp_tok *tok, json_object *list, struct cm_diag *diag) {
  if (!list)
    return 0;
  if (!json_object_is_type(list, json_type_array))
    return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: added_tokens is not an array");
  size_t n = json_object_array_length(list);
  tok->added = calloc(n ? n : 1, sizeof(*tok->added));
  if (!tok->added || map_init(&tok->added_map, n))
    return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    json_object *o = json_object_array_get_idx(list, i), *v;
    struct tok_added *a = &tok->added[tok->n_added];
    const char *content;
    size_t len;
    int rc;
    if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, "id", &v) ||
        get_id(v, &a->id))
      return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: added_tokens[%zu] has no valid id",
                         i);
    if ((rc = get_str(o, "content", &content, &len, diag, "added_tokens")) ||
        (rc = get_bool(o, "single_word", false, &a->single_word, diag, "added_tokens")) ||
        (rc = get_bool(o, "lstrip", false, &a->lstrip, diag, "added_tokens")) ||
        (rc = get_bool(o, "rstrip", false, &a->rstrip, diag, "added_tokens")) ||
        (rc = get_bool(o, "normalized", true, &a->normalized, diag, "added_tokens")) ||
        (rc = get_bool(o, "special", false, &a->special, diag, "added_tokens")))
      return rc;
    if (!content || len == 0)
      return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: added_tokens[%zu] has no content", i);
    size_t bad;
    if (!pp_tok_utf8_valid(content, len, &bad))
      return cm_diag_set(diag, -CM_EFORMAT,
                         "tokenizer.json: added_tokens[%zu] content is not UTF-8 (byte %zu)", i,
                         bad);
    uint64_t off;
    if (pool_add(tok, content, len, &off))
      return -ENOMEM;
    int32_t prev = map_put(tok, &tok->added_map, off, (uint32_t)len, a->id);
    if (prev >= 0 && prev != a->id)
      return cm_diag_set(diag, -CM_EUNSUPPORTED,
                         "tokenizer.json: added token content given twice with ids %d and %d",
                         (int)prev, (int)a->id);
    if (prev >= 0)
      continue;
    a->off = off;
    a->len = (uint32_t)len;
    tok->n_added++;
  }
  return 0;
}

static int spelling_to_raw(struct pp_tok *tok, struct tok_entry *e);

/* Second half of the added tokens: ids, matching strings and tries (needs normalizer, by_id). */
static int finish_added(struct pp_tok *tok, struct cm_diag *diag) {
  for (size_t i = 0; i < tok->n_added; i++) {
    struct tok_added *a = &tok->added[i];
    struct tok_entry *e = &tok->by_id[a->id];
    if (e->len == UINT32_MAX) {
      e->off = a->off;
      e->len = a->len;
      tok->n_distinct++;
      if (spelling_to_raw(tok, e)) /* the ByteLevel decoder maps added tokens too */
        return -ENOMEM;
    } else if (e->len != a->len || memcmp(tok->pool + e->off, tok->pool + a->off, a->len) != 0) {
      return cm_diag_set(diag, -CM_EUNSUPPORTED,
                         "tokenizer.json: added token id %d collides with another token",
                         (int)a->id);
    }
    e->added = 1;
    e->special = a->special;
    const char *match = tok->pool + a->off;
    size_t match_len = a->len;
    char *norm = NULL;
    if (a->normalized && tok->n_norms) {
      int rc = normalize_alloc(tok, match, match_len, &norm, &match_len);
      if (rc)
        return rc == -ENOMEM ? rc : cm_diag_set(diag, -CM_EFORMAT, "added token not UTF-8");
      uint64_t off;
      rc = pool_add(tok, norm, match_len, &off);
      free(norm);
      if (rc)
        return rc;
      a->off = off;
      a->len = (uint32_t)match_len;
    }
    if (a->len && trie_add(a->normalized ? &tok->trie_norm : &tok->trie_raw, tok->pool + a->off,
                           a->len, (int32_t)i))
      return -ENOMEM;
  }
  return 0;
}

/* Decoded bytes of a vocabulary spelling: byte-level characters back to bytes; a spelling with
 * any other character decodes to its own UTF-8 (as the ByteLevel decoder does). */
static int spelling_to_raw(struct pp_tok *tok, struct tok_entry *e) {
  const uint8_t *s = (const uint8_t *)tok->pool + e->off;
  size_t n = e->len, nb = 0;
  uint8_t small[256];
  uint8_t *buf = n <= sizeof(small) ? small : malloc(n);
  if (!buf)
    return -ENOMEM;
  bool all = true;
  for (size_t i = 0; i < n && all;) {
    /* byte-level characters are U+0021..U+0143: one or two UTF-8 bytes */
    int b = -1;
    if (s[i] < 0x80) {
      b = tok_cp_to_byte(s[i]);
      i++;
    } else if ((s[i] & 0xe0) == 0xc0 && i + 1 < n) {
      b = tok_cp_to_byte((uint32_t)(s[i] & 0x1f) << 6 | (s[i + 1] & 0x3f));
      i += 2;
    }
    if (b < 0)
      all = false;
    else
      buf[nb++] = (uint8_t)b;
  }
  int rc = 0;
  if (all) {
    rc = pool_add(tok, (const char *)buf, nb, &e->raw_off);
    e->raw_len = (uint32_t)nb;
  } else {
    e->raw_off = e->off;
    e->raw_len = e->len;
  }
  if (buf != small)
    free(buf);
  return rc;
}

struct merge_job {
  const struct pp_tok *tok; /* vocabulary (read-only here) */
  json_object *merges;      /* model.merges */
  size_t from, to;          /* range of merges to resolve */
  int32_t *res;             /* [n_merges][3]: left id, right id, merged id */
  size_t bad;               /* first bad merge index, SIZE_MAX if none */
  const char *bad_why;      /* what is wrong with it (NULL: out of memory) */
};

/* Resolves merges [from, to) to ids. */
static void *resolve_merges(void *p) {
  struct merge_job *j = p;
  char small[512];
  for (size_t i = j->from; i < j->to; i++) {
    json_object *mo = json_object_array_get_idx(j->merges, i);
    const char *a, *b;
    size_t na, nb;
    if (json_object_is_type(mo, json_type_string)) {
      size_t len = (size_t)json_object_get_string_len(mo);
      a = json_object_get_string(mo);
      const char *sp = memchr(a, ' ', len);
      if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - a))) {
        j->bad = i;
        j->bad_why = "is not \"a b\"";
        return NULL;
      }
      na = (size_t)(sp - a);
      b = sp + 1;
      nb = len - na - 1;
    } else if (json_object_is_type(mo, json_type_array) && json_object_array_length(mo) == 2 &&
               json_object_is_type(json_object_array_get_idx(mo, 0), json_type_string) &&
               json_object_is_type(json_object_array_get_idx(mo, 1), json_type_string)) {
      json_object *ao = json_object_array_get_idx(mo, 0), *bo = json_object_array_get_idx(mo, 1);
      a = json_object_get_string(ao);
      na = (size_t)json_object_get_string_len(ao);
      b = json_object_get_string(bo);
      nb = (size_t)json_object_get_string_len(bo);
    } else {
      j->bad = i;
      j->bad_why = "is malformed";
      return NULL;
    }
    int32_t ia = tok_map_get(j->tok, &j->tok->vocab, a, na);
    int32_t ib = tok_map_get(j->tok, &j->tok->vocab, b, nb);
    char *cat = na + nb <= sizeof(small) ? small : malloc(na + nb);
    if (!cat) {
      j->bad = i;
      j->bad_why = NULL;
      return NULL;
    }
    memcpy(cat, a, na);
    memcpy(cat + na, b, nb);
    int32_t inew = tok_map_get(j->tok, &j->tok->vocab, cat, na + nb);
    if (cat != small)
      free(cat);
    if (ia < 0 || ib < 0 || inew < 0) {
      j->bad = i;
      j->bad_why = "uses a token not in the vocabulary";
      return NULL;
    }
    j->res[3 * i] = ia;
    j->res[3 * i + 1] = ib;
    j->res[3 * i + 2] = inew;
  }
  return NULL;
}

static int load_model(struct pp_tok *tok, json_object *m, json_object *added_list,
                      struct cm_diag *diag) {
  const char *t = type_of(m);
  if (!t || strcmp(t, "BPE") != 0)
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "tokenizer.json: unsupported component model %s",
                       t ? t : "(no type)");
  json_object *vocab, *merges, *v;
  int rc;
  bool byte_fallback;
  if (!json_object_object_get_ex(m, "vocab", &vocab) ||
      !json_object_is_type(vocab, json_type_object))
    return cm_diag_set(diag, -CM_EMISSING, "tokenizer.json: model.vocab missing");
  if (!json_object_object_get_ex(m, "merges", &merges) ||
      !json_object_is_type(merges, json_type_array))
    return cm_diag_set(diag, -CM_EMISSING, "tokenizer.json: model.merges missing");
  if (json_object_object_get_ex(m, "dropout", &v) && v)
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "tokenizer.json: unsupported component BPE dropout");
  const char *s;
  size_t sl;
  if ((rc = get_str(m, "continuing_subword_prefix", &s, &sl, diag, "model")))
    return rc;
  if (sl)
    return cm_diag_set(diag, -CM_EUNSUPPORTED,
                       "tokenizer.json: unsupported component BPE continuing_subword_prefix");
  if ((rc = get_str(m, "end_of_word_suffix", &s, &sl, diag, "model")))
    return rc;
  if (sl)
    return cm_diag_set(diag, -CM_EUNSUPPORTED,
                       "tokenizer.json: unsupported component BPE end_of_word_suffix");
  if ((rc = get_bool(m, "fuse_unk", false, &tok->fuse_unk, diag, "model")) ||
      (rc = get_bool(m, "byte_fallback", false, &byte_fallback, diag, "model")) ||
      (rc = get_bool(m, "ignore_merges", false, &tok->ignore_merges, diag, "model")))
    return rc;

  /* ids: the vocabulary, then the added tokens. */
  size_t n_vocab = (size_t)json_object_object_length(vocab);
  int32_t max_id = -1;
  {
    json_object_object_foreach(vocab, key, val) {
      int32_t id;
      (void)key;
      if (get_id(val, &id))
        return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: model.vocab[\"%s\"] is not an id",
                           key);
      if (id > max_id)
        max_id = id;
    }
  }
  if (added_list && json_object_is_type(added_list, json_type_array)) {
    for (size_t i = 0; i < json_object_array_length(added_list); i++) {
      json_object *o = json_object_array_get_idx(added_list, i);
      int32_t id;
      if (json_object_object_get_ex(o, "id", &v) && !get_id(v, &id) && id > max_id)
        max_id = id;
    }
  }
  if (max_id >= PP_TOK_MAX_VOCAB)
    return cm_diag_set(diag, -CM_ELIMIT, "tokenizer.json: id %d exceeds the limit of %d",
                       (int)max_id, (int)PP_TOK_MAX_VOCAB - 1);
  tok->n_ids = max_id + 1;
  {
    /* spellings plus decoded bytes fit in twice the JSON text of the vocabulary */
    size_t want = 2 * (size_t)json_object_object_length(vocab) * 16 + (1 << 16);
    char *p = want > tok->pool_cap ? realloc(tok->pool, want) : tok->pool;
    if (!p)
      return -ENOMEM;
    tok->pool = p;
    tok->pool_cap = want > tok->pool_cap ? want : tok->pool_cap;
  }
  tok->by_id = malloc(sizeof(*tok->by_id) * (size_t)(tok->n_ids ? tok->n_ids : 1));
  if (!tok->by_id || map_init(&tok->vocab, n_vocab))
    return -ENOMEM;
  for (int32_t i = 0; i < tok->n_ids; i++)
    tok->by_id[i] = (struct tok_entry){.len = UINT32_MAX};
  {
    json_object_object_foreach(vocab, key, val) {
      int32_t id = 0;
      (void)get_id(val, &id); /* checked in the first pass */
      size_t len = strlen(key);
      size_t bad;
      if (!pp_tok_utf8_valid(key, len, &bad))
        return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: vocabulary entry is not UTF-8");
      struct tok_entry *e = &tok->by_id[id];
      if (e->len != UINT32_MAX)
        return cm_diag_set(diag, -CM_EUNSUPPORTED, "tokenizer.json: vocabulary id %d given twice",
                           (int)id);
      if ((rc = pool_add(tok, key, len, &e->off)))
        return rc;
      e->len = (uint32_t)len;
      map_put(tok, &tok->vocab, e->off, e->len, id);
    }
  }
  tok->n_model = n_vocab;
  tok->n_distinct = n_vocab;
  for (int32_t i = 0; i < tok->n_ids; i++)
    if (tok->by_id[i].len != UINT32_MAX && (rc = spelling_to_raw(tok, &tok->by_id[i])))
      return rc;
  if (tok->ignore_merges) {
    if (map_init(&tok->vocab_raw, n_vocab))
      return -ENOMEM;
    for (int32_t i = 0; i < tok->n_ids; i++) {
      struct tok_entry *e = &tok->by_id[i];
      if (e->len != UINT32_MAX && e->raw_off != e->off)
        map_put(tok, &tok->vocab_raw, e->raw_off, e->raw_len, i);
    }
  }
  for (int b = 0; b < 256; b++) {
    char u[4];
    utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)tok_byte_to_cp((uint8_t)b),
                                              (utf8proc_uint8_t *)u);
    tok->byte_id[b] = tok_map_get(tok, &tok->vocab, u, (size_t)k);
    tok->byte_fallback_id[b] = -1;
    if (byte_fallback) {
      char hex[8];
      snprintf(hex, sizeof(hex), "<0x%02X>", b);
      tok->byte_fallback_id[b] = tok_map_get(tok, &tok->vocab, hex, 6);
    }
  }
  tok->unk_id = -1;
  if ((rc = get_str(m, "unk_token", &s, &sl, diag, "model")))
    return rc;
  if (s) {
    tok->unk_id = tok_map_get(tok, &tok->vocab, s, sl);
    if (tok->unk_id < 0)
      return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: unk_token is not in the vocabulary");
  }

  /* merges: "a b" strings or ["a", "b"] pairs; rank = position. The three vocabulary lookups of
   * each merge are read-only, so two threads resolve one half each. */
  size_t n_merges = json_object_array_length(merges);
  size_t cap = 16;
  while (cap < n_merges * 2 + 16)
    cap <<= 1;
  tok->merges = malloc(cap * sizeof(*tok->merges));
  int32_t *res = malloc(sizeof(int32_t) * 3 * (n_merges ? n_merges : 1));
  if (!tok->merges || !res) {
    free(res);
    return -ENOMEM;
  }
  for (size_t i = 0; i < cap; i++)
    tok->merges[i].key = UINT64_MAX;
  tok->merge_mask = cap - 1;
  struct merge_job jobs[2] = {{tok, merges, 0, n_merges / 2, res, SIZE_MAX, NULL},
                              {tok, merges, n_merges / 2, n_merges, res, SIZE_MAX, NULL}};
  pthread_t th;
  bool threaded = n_merges > 4096 && pthread_create(&th, NULL, resolve_merges, &jobs[0]) == 0;
  if (!threaded)
    resolve_merges(&jobs[0]);
  resolve_merges(&jobs[1]);
  if (threaded)
    pthread_join(th, NULL);
  for (int k = 0; k < 2; k++) {
    if (jobs[k].bad != SIZE_MAX) {
      free(res);
      return jobs[k].bad_why ? cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: merges[%zu] %s",
                                           jobs[k].bad, jobs[k].bad_why)
                             : -ENOMEM;
    }
  }
  for (size_t i = 0; i < n_merges; i++) {
    int32_t ia = res[3 * i], ib = res[3 * i + 1], inew = res[3 * i + 2];
    uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
    size_t j = merge_slot_hash(key) & tok->merge_mask;
    while (tok->merges[j].key != UINT64_MAX && tok->merges[j].key != key)
      j = (j + 1) & tok->merge_mask;
    /* A repeated pair keeps the last rank, as the reference's map does. */
    tok->merges[j] = (struct tok_merge_slot){.key = key, .rank = (uint32_t)i, .new_id = inew};
  }
  free(res);
  return 0;
}

/* ---- entry points ------------------------------------------------------------------------- */

static int load_doc(struct pp_tok *tok, json_object *doc, struct cm_diag *diag) {
  if (!json_object_is_type(doc, json_type_object))
    return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: top level is not an object");
  json_object *model, *added = NULL, *v;
  int rc;
  if (!json_object_object_get_ex(doc, "model", &model))
    return cm_diag_set(diag, -CM_EMISSING, "tokenizer.json: no model");
  json_object_object_get_ex(doc, "added_tokens", &added);
  if (json_object_object_get_ex(doc, "truncation", &v) && v)
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "tokenizer.json: unsupported component truncation");
  if (json_object_object_get_ex(doc, "padding", &v) && v)
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "tokenizer.json: unsupported component padding");
  if ((rc = load_model(tok, model, added, diag)))
    return rc;
  v = NULL;
  json_object_object_get_ex(doc, "normalizer", &v);
  if ((rc = load_normalizer(tok, v, diag)))
    return rc;
  v = NULL;
  json_object_object_get_ex(doc, "pre_tokenizer", &v);
  bool seen_byte_level = false;
  if (v && (rc = load_pre_tokenizer(tok, v, &seen_byte_level, diag)))
    return rc;
  if (!seen_byte_level)
    return cm_diag_set(diag, -CM_EUNSUPPORTED,
                       "tokenizer.json: unsupported component pre_tokenizer without ByteLevel "
                       "(only byte-level BPE is supported)");
  v = NULL;
  json_object_object_get_ex(doc, "decoder", &v);
  if ((rc = load_decoder(v, diag)))
    return rc;
  v = NULL;
  json_object_object_get_ex(doc, "post_processor", &v);
  if ((rc = load_post_processor(v, diag)))
    return rc;
  if ((rc = load_added(tok, added, diag)) || (rc = finish_added(tok, diag)))
    return rc;
  return 0;
}

/* ---- parsing: the two big containers in parallel ------------------------------------------
 * model.vocab and model.merges are nearly all of a tokenizer.json. A boundary scan (strings and
 * nesting only) finds their byte ranges; json-c then parses each of them and the rest of the
 * document as three documents, the vocabulary on a second thread, and the trees are freed on two
 * threads too. Any layout the scan does not expect falls back to one plain parse. */

struct span {
  size_t off; /* first byte of the value */
  size_t len; /* its length in bytes */
};

static size_t skip_ws(const char *s, size_t n, size_t i) {
  while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
    i++;
  return i;
}

/* s[*i] == '"': moves *i past the closing quote (a quote after an even run of backslashes). */
static bool skip_string(const char *s, size_t n, size_t *i) {
  size_t k = *i + 1;
  while (k < n) {
    const char *q = memchr(s + k, '"', n - k);
    if (!q)
      return false;
    size_t at = (size_t)(q - s), bs = 0;
    while (at - bs > k && s[at - bs - 1] == '\\')
      bs++;
    if (bs % 2 == 0) {
      *i = at + 1;
      return true;
    }
    k = at + 1;
  }
  return false;
}

static bool skip_value(const char *s, size_t n, size_t *i) {
  size_t k = *i;
  if (k >= n)
    return false;
  if (s[k] == '"')
    return skip_string(s, n, i);
  if (s[k] == '{' || s[k] == '[') {
    static const char special[256] = {['"'] = 1, ['{'] = 1, ['['] = 1, ['}'] = 1, [']'] = 1};
    int depth = 0;
    while (k < n) {
      char c = s[k];
      if (!special[(uint8_t)c]) {
        k++;
        continue;
      }
      if (c == '"') {
        if (!skip_string(s, n, &k))
          return false;
        continue;
      }
      if (c == '{' || c == '[')
        depth++;
      else if (--depth == 0) {
        *i = k + 1;
        return true;
      }
      k++;
    }
    return false;
  }
  size_t start = k;
  while (k < n && s[k] && !strchr(",}] \t\r\n", s[k]))
    k++;
  *i = k;
  return k > start;
}

/* Walks the members of the object at s[*i] == '{'; calls back with each raw key and value span. */
typedef bool (*member_fn)(void *ctx, const char *key, size_t key_len, struct span value);
static bool walk_object(const char *s, size_t n, size_t *i, member_fn fn, void *ctx) {
  size_t k = skip_ws(s, n, *i);
  if (k >= n || s[k] != '{')
    return false;
  k = skip_ws(s, n, k + 1);
  if (k < n && s[k] == '}') {
    *i = k + 1;
    return true;
  }
  for (;;) {
    if (k >= n || s[k] != '"')
      return false;
    size_t key = k + 1;
    if (!skip_string(s, n, &k))
      return false;
    size_t key_len = k - 1 - key;
    k = skip_ws(s, n, k);
    if (k >= n || s[k] != ':')
      return false;
    k = skip_ws(s, n, k + 1);
    size_t v = k;
    if (!skip_value(s, n, &k) || k == v)
      return false;
    if (!fn(ctx, s + key, key_len, (struct span){v, k - v}))
      return false;
    k = skip_ws(s, n, k);
    if (k < n && s[k] == ',') {
      k = skip_ws(s, n, k + 1);
      continue;
    }
    if (k < n && s[k] == '}') {
      *i = k + 1;
      return true;
    }
    return false;
  }
}

struct big_spans {
  const char *doc;      /* the whole document */
  size_t n;             /* its length */
  struct span model;    /* top-level "model" value */
  struct span vocab;    /* model.vocab value */
  struct span merges;   /* model.merges value */
  int n_model;          /* "model" keys seen */
  int n_vocab, n_merges;/* keys seen inside model */
};

static bool on_model_member(void *ctx, const char *key, size_t len, struct span v) {
  struct big_spans *b = ctx;
  if (len == 5 && memcmp(key, "vocab", 5) == 0) {
    b->vocab = v;
    b->n_vocab++;
  } else if (len == 6 && memcmp(key, "merges", 6) == 0) {
    b->merges = v;
    b->n_merges++;
  }
  return true;
}

static bool on_top_member(void *ctx, const char *key, size_t len, struct span v) {
  struct big_spans *b = ctx;
  if (len == 5 && memcmp(key, "model", 5) == 0) {
    b->model = v;
    b->n_model++;
    size_t i = v.off;
    return walk_object(b->doc, b->n, &i, on_model_member, b) && i == v.off + v.len;
  }
  return true;
}

/* Finds model.vocab (an object) and model.merges (an array), vocab first; false otherwise. */
static bool find_big_spans(const char *s, size_t n, struct big_spans *b) {
  *b = (struct big_spans){.doc = s, .n = n};
  size_t i = 0;
  if (!walk_object(s, n, &i, on_top_member, b) || b->n_model != 1 || b->n_vocab != 1 ||
      b->n_merges != 1)
    return false;
  return s[b->vocab.off] == '{' && s[b->merges.off] == '[' &&
         b->vocab.off + b->vocab.len <= b->merges.off;
}

struct parse_job {
  const char *s;       /* text to parse */
  size_t n;            /* its length */
  size_t base;         /* its offset in the file (for messages) */
  json_object *obj;    /* result, NULL on error */
  size_t err_at;       /* file offset of the error */
  const char *err;     /* json-c's description */
  pthread_t th;        /* thread, when run on one */
};

static void *parse_job_run(void *p) {
  struct parse_job *j = p;
  json_tokener *jt = json_tokener_new_ex(JSON_MAX_DEPTH);
  if (!jt) {
    j->err = "out of memory";
    return NULL;
  }
  j->obj = json_tokener_parse_ex(jt, j->s, (int)j->n);
  enum json_tokener_error e = json_tokener_get_error(jt);
  size_t end = json_tokener_get_parse_end(jt);
  if (!j->obj || e != json_tokener_success) {
    j->err = json_tokener_error_desc(e);
    j->err_at = j->base + end;
    json_object_put(j->obj);
    j->obj = NULL;
  } else {
    for (size_t i = end; i < j->n; i++) {
      if (j->s[i] != ' ' && j->s[i] != '\t' && j->s[i] != '\r' && j->s[i] != '\n') {
        j->err = "trailing bytes";
        j->err_at = j->base + i;
        json_object_put(j->obj);
        j->obj = NULL;
        break;
      }
    }
  }
  json_tokener_free(jt);
  return NULL;
}

static void *put_run(void *p) {
  json_object_put(p);
  return NULL;
}

/* Parses the document; the big containers on their own (in parallel) when the layout allows.
 * *ret_big gets the vocab and merges objects (also linked into the document) for parallel free. */
static int parse_doc(const char *json, size_t n, json_object **ret_doc, json_object *ret_big[2],
                     struct cm_diag *diag) {
  struct big_spans b;
  ret_big[0] = ret_big[1] = NULL;
  if (n < ((size_t)1 << 20) || !find_big_spans(json, n, &b)) {
    struct parse_job j = {.s = json, .n = n};
    parse_job_run(&j);
    if (!j.obj)
      return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: JSON error at byte %zu: %s",
                         j.err_at, j.err);
    *ret_doc = j.obj;
    return 0;
  }
  /* the rest of the document, with {} and [] standing in for the two containers */
  size_t v_end = b.vocab.off + b.vocab.len, m_end = b.merges.off + b.merges.len;
  size_t rest_n = b.vocab.off + 2 + (b.merges.off - v_end) + 2 + (n - m_end);
  char *rest = malloc(rest_n);
  if (!rest)
    return -ENOMEM;
  size_t k = 0;
  memcpy(rest, json, b.vocab.off);
  k += b.vocab.off;
  memcpy(rest + k, "{}", 2);
  k += 2;
  memcpy(rest + k, json + v_end, b.merges.off - v_end);
  k += b.merges.off - v_end;
  memcpy(rest + k, "[]", 2);
  k += 2;
  memcpy(rest + k, json + m_end, n - m_end);
  struct parse_job jobs[3] = {
      {.s = json + b.vocab.off, .n = b.vocab.len, .base = b.vocab.off},
      {.s = json + b.merges.off, .n = b.merges.len, .base = b.merges.off},
      {.s = rest, .n = rest_n, .base = 0},
  };
  bool threaded = pthread_create(&jobs[0].th, NULL, parse_job_run, &jobs[0]) == 0;
  if (!threaded)
    parse_job_run(&jobs[0]);
  parse_job_run(&jobs[1]);
  parse_job_run(&jobs[2]);
  if (threaded)
    pthread_join(jobs[0].th, NULL);
  free(rest);
  int rc = 0;
  for (int i = 0; i < 3 && !rc; i++)
    if (!jobs[i].obj)
      rc = cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: JSON error at byte %zu: %s",
                       jobs[i].err_at, jobs[i].err);
  json_object *model = NULL;
  if (!rc && (!json_object_object_get_ex(jobs[2].obj, "model", &model) ||
              !json_object_is_type(model, json_type_object)))
    rc = cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: model is not an object");
  if (rc) {
    for (int i = 0; i < 3; i++)
      json_object_put(jobs[i].obj);
    return rc;
  }
  json_object_object_add(model, "vocab", jobs[0].obj);
  json_object_object_add(model, "merges", jobs[1].obj);
  ret_big[0] = json_object_get(jobs[0].obj);
  ret_big[1] = json_object_get(jobs[1].obj);
  *ret_doc = jobs[2].obj;
  return 0;
}

/* Frees the document, the two big trees on two threads. */
static void free_doc(json_object *doc, json_object *big[2]) {
  json_object_put(doc);
  pthread_t th;
  bool threaded = big[0] && pthread_create(&th, NULL, put_run, big[0]) == 0;
  if (!threaded)
    json_object_put(big[0]);
  json_object_put(big[1]);
  if (threaded)
    pthread_join(th, NULL);
}

int pp_tok_load_buffer(const char *json, size_t n_bytes, struct pp_tok **ret_tok,
                       struct cm_diag *diag) {
  if (n_bytes > PP_TOK_MAX_FILE_BYTES)
    return cm_diag_set(diag, -CM_ELIMIT, "tokenizer.json: %zu bytes exceeds the limit of %zu",
                       n_bytes, PP_TOK_MAX_FILE_BYTES);
  struct pp_tok *tok = calloc(1, sizeof(*tok));
  json_object *doc = NULL, *big[2] = {NULL, NULL};
  int rc = -ENOMEM;
  if (!tok)
    goto fail;
  pthread_mutex_init(&tok->lock, NULL);
  if ((rc = parse_doc(json, n_bytes, &doc, big, diag)))
    goto fail;
  if ((rc = load_doc(tok, doc, diag)))
    goto fail;
  if (pthread_key_create(&tok->key, tok_thread_destructor)) {
    rc = cm_diag_set(diag, -ENOMEM, "tokenizer: no thread key left");
    goto fail;
  }
  tok->key_made = true;
  free_doc(doc, big);
  *ret_tok = tok;
  return 0;
fail:
  if (rc == -ENOMEM)
    cm_diag_set(diag, -ENOMEM, "tokenizer.json: out of memory");
  free_doc(doc, big);
  pp_tok_free(tok);
  return rc;
}

int pp_tok_load_file(const char *path, struct pp_tok **ret_tok, struct cm_diag *diag) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return cm_diag_set(diag, errno == ENOENT ? -ENOENT : -EIO, "%s: cannot open", path);
  struct stat st;
  if (fstat(fileno(f), &st) || !S_ISREG(st.st_mode)) {
    fclose(f);
    return cm_diag_set(diag, -EIO, "%s: not a regular file", path);
  }
  if ((size_t)st.st_size > PP_TOK_MAX_FILE_BYTES) {
    fclose(f);
    return cm_diag_set(diag, -CM_ELIMIT, "%s: %lld bytes exceeds the limit of %zu", path,
                       (long long)st.st_size, PP_TOK_MAX_FILE_BYTES);
  }
  size_t n = (size_t)st.st_size;
  char *buf = malloc(n ? n : 1);
  if (!buf) {
    fclose(f);
    return cm_diag_set(diag, -ENOMEM, "%s: out of memory", path);
  }
  size_t got = fread(buf, 1, n, f);
  fclose(f);
  if (got != n) {
    free(buf);
    return cm_diag_set(diag, -EIO, "%s: short read", path);
  }
  int rc = pp_tok_load_buffer(buf, n, ret_tok, diag);
  free(buf);
  return rc;
}

void pp_tok_free(struct pp_tok *tok) {
  if (!tok)
    return;
  if (tok->key_made)
    pthread_key_delete(tok->key);
  while (tok->threads) {
    struct tok_thread *t = tok->threads;
    tok_thread_free(t); /* unlinks itself */
  }
  pthread_mutex_destroy(&tok->lock);
  for (int i = 0; i < tok->n_stages; i++)
    pcre2_code_free(tok->stages[i].re);
  free(tok->pool);
  free(tok->by_id);
  free(tok->vocab.slots);
  free(tok->vocab_raw.slots);
  free(tok->added_map.slots);
  free(tok->merges);
  free(tok->added);
  free(tok->trie_raw.nodes);
  free(tok->trie_norm.nodes);
  free(tok);
}

int32_t pp_tok_token_to_id(const struct pp_tok *tok, const char *token, size_t n_bytes) {
  int32_t id = tok_map_get(tok, &tok->added_map, token, n_bytes);
  return id >= 0 ? id : tok_map_get(tok, &tok->vocab, token, n_bytes);
}

const char *pp_tok_id_to_token(const struct pp_tok *tok, int32_t id, size_t *ret_n_bytes) {
  if (id < 0 || id >= tok->n_ids || tok->by_id[id].len == UINT32_MAX)
    return NULL;
  *ret_n_bytes = tok->by_id[id].len;
  return tok->pool + tok->by_id[id].off;
}

size_t pp_tok_vocab_size(const struct pp_tok *tok, bool with_added) {
  return with_added ? tok->n_distinct : tok->n_model;
}

bool pp_tok_is_special(const struct pp_tok *tok, int32_t id) {
  return id >= 0 && id < tok->n_ids && tok->by_id[id].special;
}
