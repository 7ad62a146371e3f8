/* Loading a tokenizer.json (json-c) into the flat tables the encoder uses: vocabulary and added
 * token maps, the merge-rank table, the added-token tries, normalizer and pre-tokenizer steps.
 * Anything the encoder would not reproduce exactly is refused here, with the component named. */
#include "pp_tok_internal.h"
#include "pp_tok_unicode.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
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

/* Code points 256..323 stand for the non-printable bytes, in byte order. */
static const uint8_t NONPRINTABLE_BYTES[68] = {
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d,
    0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b,
    0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x7f, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87,
    0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x95,
    0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f, 0xa0, 0xad};

static inline int cp_byte(uint32_t cp) {
  if (cp < 256)
    return byte_is_printable(cp) ? (int)cp : -1;
  return cp < 256 + 68 ? NONPRINTABLE_BYTES[cp - 256] : -1;
}

int tok_cp_to_byte(uint32_t cp) {
  return cp_byte(cp);
}

/* The bytes of spelling s[n] when every character in it is a byte-level one (s is then valid
 * UTF-8 too): writes them to out (n bytes at most) and returns their count; -1 when a character
 * is not byte-level or not valid UTF-8. Byte-level characters are U+0021..U+0143, one or two
 * UTF-8 bytes. */
static ptrdiff_t byte_level_decode(const uint8_t *s, size_t n, uint8_t *out) {
  size_t nb = 0;
  for (size_t i = 0; i < n;) {
    int b;
    if (s[i] < 0x80) {
      b = cp_byte(s[i]);
      i++;
    } else if (s[i] >= 0xc2 && s[i] <= 0xdf && i + 1 < n && (s[i + 1] & 0xc0) == 0x80) {
      b = cp_byte((uint32_t)(s[i] & 0x1f) << 6 | (s[i + 1] & 0x3f));
      i += 2;
    } else {
      return -1;
    }
    if (b < 0)
      return -1;
    out[nb++] = (uint8_t)b;
  }
  return (ptrdiff_t)nb;
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

/* Doubles a map's capacity. */
static int map_grow(struct tok_map *m) {
  size_t cap = (m->mask + 1) * 2;
  struct tok_map_slot *slots = malloc(cap * sizeof(*slots));
  if (!slots)
    return -ENOMEM;
  for (size_t i = 0; i < cap; i++)
    slots[i].len = UINT32_MAX;
  for (size_t k = 0; k <= m->mask; k++) {
    if (m->slots[k].len == UINT32_MAX)
      continue;
    size_t i = m->slots[k].hash & (cap - 1); /* capacity < 2^32: the stored bits suffice */
    while (slots[i].len != UINT32_MAX)
      i = (i + 1) & (cap - 1);
    slots[i] = m->slots[k];
  }
  free(m->slots);
  m->slots = slots;
  m->mask = cap - 1;
  return 0;
}

/* Inserts key (already in the pool at off, hash h = tok_hash of it) -> value; *ret_prev gets the
 * value it replaced, or -1. The map keeps at most half its slots full, growing when needed. */
static int map_put_hashed(struct pp_tok *tok, struct tok_map *m, uint64_t off, uint32_t len,
                          uint64_t h, int32_t value, int32_t *ret_prev) {
  if ((m->n + 1) * 2 > m->mask + 1 && map_grow(m))
    return -ENOMEM;
  const char *s = tok->pool + off;
  for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
    struct tok_map_slot *sl = &m->slots[i];
    if (sl->len == UINT32_MAX) {
      *sl = (struct tok_map_slot){.hash = (uint32_t)h, .len = len, .off = off, .value = value};
      m->n++;
      *ret_prev = -1;
      return 0;
    }
    if (sl->hash == (uint32_t)h && sl->len == len && memcmp(tok->pool + sl->off, s, len) == 0) {
      *ret_prev = sl->value;
      sl->value = value;
      return 0;
    }
  }
}

static int map_put(struct pp_tok *tok, struct tok_map *m, uint64_t off, uint32_t len, int32_t value,
                   int32_t *ret_prev) {
  return map_put_hashed(tok, m, off, len, tok_hash(tok->pool + off, len), value, ret_prev);
}

/* Keys waiting to be inserted: hashed and their home slots prefetched first, so that the cache
 * misses of a batch overlap (the tables are larger than the caches). */
#define MAP_BATCH 64
struct map_batch {
  size_t n;                 /* keys waiting */
  uint64_t off[MAP_BATCH];  /* key offsets in tok->pool */
  uint32_t len[MAP_BATCH];  /* key lengths */
  uint64_t hash[MAP_BATCH]; /* tok_hash of each key */
  int32_t value[MAP_BATCH]; /* values */
};

/* Inserts the waiting keys in order (a key already present takes the new value). With `unique`,
 * the first such key stops it with -EEXIST and its old value in *ret_prev. */
static int map_batch_flush(struct pp_tok *tok, struct tok_map *m, struct map_batch *b, bool unique,
                           int32_t *ret_prev) {
  size_t n = b->n;
  b->n = 0;
  for (size_t k = 0; k < n; k++) {
    int32_t prev;
    int rc = map_put_hashed(tok, m, b->off[k], b->len[k], b->hash[k], b->value[k], &prev);
    if (rc)
      return rc;
    if (prev >= 0 && unique) {
      *ret_prev = prev;
      return -EEXIST;
    }
  }
  return 0;
}

static void map_batch_add(const struct pp_tok *tok, const struct tok_map *m, struct map_batch *b,
                          uint64_t off, uint32_t len, int32_t value) {
  uint64_t h = tok_hash(tok->pool + off, len);
  __builtin_prefetch(&m->slots[h & m->mask], 1);
  b->off[b->n] = off;
  b->len[b->n] = len;
  b->hash[b->n] = h;
  b->value[b->n++] = value;
}

/* Looks up n keys (s[k], len[k]) in m: ret[k] = value or -1. The same as tok_map_get each, with
 * the home slots and then the pool bytes they point to prefetched for the whole batch first. */
static void map_get_batch(const struct pp_tok *tok, const struct tok_map *m, size_t n,
                          const char *const *s, const uint32_t *len, int32_t *ret) {
  uint64_t h[3 * MAP_BATCH];
  for (size_t k = 0; k < n; k++) {
    h[k] = tok_hash(s[k], len[k]);
    __builtin_prefetch(&m->slots[h[k] & m->mask]);
  }
  for (size_t k = 0; k < n; k++) {
    const struct tok_map_slot *sl = &m->slots[h[k] & m->mask];
    if (sl->len != UINT32_MAX)
      __builtin_prefetch(tok->pool + sl->off);
  }
  for (size_t k = 0; k < n; k++) {
    ret[k] = -1;
    for (size_t i = h[k] & m->mask;; i = (i + 1) & m->mask) {
      const struct tok_map_slot *sl = &m->slots[i];
      if (sl->len == UINT32_MAX)
        break;
      if (sl->hash == (uint32_t)h[k] && sl->len == len[k] &&
          memcmp(tok->pool + sl->off, s[k], len[k]) == 0) {
        ret[k] = sl->value;
        break;
      }
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
    bool use_regex = true;
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
    int32_t prev;
    if (map_put(tok, &tok->added_map, off, (uint32_t)len, a->id, &prev))
      return -ENOMEM;
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
 * any other character decodes to its own UTF-8 (as the ByteLevel decoder does). raw[nb] are its
 * bytes from byte_level_decode, nb < 0 when it is not all byte-level. */
static int set_raw(struct pp_tok *tok, struct tok_entry *e, const uint8_t *raw, ptrdiff_t nb) {
  if (nb < 0) {
    e->raw_off = e->off;
    e->raw_len = e->len;
    return 0;
  }
  e->raw_len = (uint32_t)nb;
  return pool_add(tok, (const char *)raw, (size_t)nb, &e->raw_off);
}

static int spelling_to_raw(struct pp_tok *tok, struct tok_entry *e) {
  uint8_t small[256];
  uint8_t *buf = e->len <= sizeof(small) ? small : malloc(e->len);
  if (!buf)
    return -ENOMEM;
  ptrdiff_t nb = byte_level_decode((const uint8_t *)tok->pool + e->off, e->len, buf);
  int rc = set_raw(tok, e, buf, nb);
  if (buf != small)
    free(buf);
  return rc;
}

/* ---- model.vocab and model.merges, one json-c object (a "piece") at a time ----------------
 * The whole-document parse hands each container over as one piece; the fast path below cuts them
 * into many. Both go through these functions, so both build the same tables. */

/* Makes by_id cover ids [0, id]; new entries are unused. */
static int by_id_reserve(struct pp_tok *tok, int32_t id) {
  if (id < tok->n_ids)
    return 0;
  if ((size_t)id >= tok->by_id_cap) {
    size_t cap = tok->by_id_cap ? tok->by_id_cap : 256;
    while (cap <= (size_t)id)
      cap *= 2;
    struct tok_entry *p = realloc(tok->by_id, cap * sizeof(*p));
    if (!p)
      return -ENOMEM;
    tok->by_id = p;
    tok->by_id_cap = cap;
  }
  for (int32_t i = tok->n_ids; i <= id; i++)
    tok->by_id[i] = (struct tok_entry){.len = UINT32_MAX};
  tok->n_ids = id + 1;
  return 0;
}

/* Sizes the pool, by_id and the vocabulary map for n_entries vocabulary entries. */
static int vocab_begin(struct pp_tok *tok, size_t n_entries) {
  /* spellings plus decoded bytes fit in twice the JSON text of the vocabulary */
  size_t want = 2 * n_entries * 16 + (1 << 16);
  if (want > tok->pool_cap) {
    char *p = realloc(tok->pool, want);
    if (!p)
      return -ENOMEM;
    tok->pool = p;
    tok->pool_cap = want;
  }
  size_t cap = n_entries + 1024;
  tok->by_id = malloc(cap * sizeof(*tok->by_id));
  if (!tok->by_id)
    return -ENOMEM;
  tok->by_id_cap = cap;
  return map_init(&tok->vocab, n_entries);
}

/* Adds one vocabulary entry (spelling key[len] -> id) with its decoded bytes; the map insert waits
 * in batch b (vocab_flush). A spelling added twice is an error: one json-c object would have kept
 * the last id silently, so the fast path gives up and the whole document is parsed. */
static int vocab_add(struct pp_tok *tok, struct map_batch *b, const char *key, size_t len,
                     int32_t id, struct cm_diag *diag);

static int vocab_flush(struct pp_tok *tok, struct map_batch *b, struct cm_diag *diag) {
  int32_t prev = -1;
  int rc = map_batch_flush(tok, &tok->vocab, b, true, &prev);
  if (rc == -EEXIST)
    return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: model.vocab key of id %d given twice",
                       (int)prev);
  return rc;
}

static int vocab_add(struct pp_tok *tok, struct map_batch *b, const char *key, size_t len,
                     int32_t id, struct cm_diag *diag) {
  uint8_t small[256];
  uint8_t *raw = len <= sizeof(small) ? small : malloc(len);
  size_t bad;
  int rc;
  if (!raw)
    return -ENOMEM;
  /* a spelling of byte-level characters only (nearly all) is valid UTF-8 already */
  ptrdiff_t nb = byte_level_decode((const uint8_t *)key, len, raw);
  struct tok_entry *e = NULL;
  if (id >= PP_TOK_MAX_VOCAB)
    rc = cm_diag_set(diag, -CM_ELIMIT, "tokenizer.json: id %d exceeds the limit of %d", (int)id,
                     (int)PP_TOK_MAX_VOCAB - 1);
  else if (nb < 0 && !pp_tok_utf8_valid(key, len, &bad))
    rc = cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: vocabulary entry is not UTF-8");
  else if (!(rc = by_id_reserve(tok, id)) && (e = &tok->by_id[id])->len != UINT32_MAX)
    rc = cm_diag_set(diag, -CM_EUNSUPPORTED, "tokenizer.json: vocabulary id %d given twice",
                     (int)id);
  if (!rc && !(rc = pool_add(tok, key, len, &e->off))) {
    e->len = (uint32_t)len;
    rc = set_raw(tok, e, raw, nb);
  }
  if (raw != small)
    free(raw);
  if (rc)
    return rc;
  tok->n_model++;
  map_batch_add(tok, &tok->vocab, b, e->off, e->len, id);
  return b->n == MAP_BATCH ? vocab_flush(tok, b, diag) : 0;
}

/* Adds the entries of one piece of model.vocab, in order. */
static int vocab_add_piece(struct pp_tok *tok, json_object *piece, struct cm_diag *diag) {
  struct map_batch b;
  b.n = 0;
  json_object_object_foreach(piece, key, val) {
    int32_t id;
    int rc;
    if (get_id(val, &id))
      return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: model.vocab[\"%s\"] is not an id",
                         key);
    if ((rc = vocab_add(tok, &b, key, strlen(key), id, diag)))
      return rc;
  }
  return vocab_flush(tok, &b, diag);
}

/* A piece of model.vocab parsed by one thread for another to add: spellings back to back. */
struct vocab_staged_entry {
  uint64_t off; /* spelling offset in vocab_staged.bytes */
  uint32_t len; /* its length */
  int32_t id;   /* its id */
};
struct vocab_staged {
  char *bytes;                  /* the spellings */
  size_t n_bytes;               /* used */
  struct vocab_staged_entry *e; /* [n] entries, in order */
  size_t n;                     /* entries */
};

static void vocab_staged_fini(struct vocab_staged *st) {
  free(st->bytes);
  free(st->e);
  *st = (struct vocab_staged){0};
}

/* Copies one piece of model.vocab into st (ids are checked now, the rest when added). */
static int vocab_stage_piece(void *ctx, json_object *piece, struct cm_diag *diag) {
  struct vocab_staged *st = ctx;
  size_t n = (size_t)json_object_object_length(piece), cap_bytes = 1024;
  st->e = malloc((n ? n : 1) * sizeof(*st->e));
  st->bytes = malloc(cap_bytes);
  if (!st->e || !st->bytes)
    return -ENOMEM;
  json_object_object_foreach(piece, key, val) {
    size_t len = strlen(key);
    int32_t id;
    if (get_id(val, &id))
      return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: model.vocab[\"%s\"] is not an id",
                         key);
    if (st->n_bytes + len > cap_bytes) {
      while (st->n_bytes + len > cap_bytes)
        cap_bytes *= 2;
      char *p = realloc(st->bytes, cap_bytes);
      if (!p)
        return -ENOMEM;
      st->bytes = p;
    }
    memcpy(st->bytes + st->n_bytes, key, len);
    st->e[st->n].off = st->n_bytes;
    st->e[st->n].len = (uint32_t)len;
    st->e[st->n++].id = id;
    st->n_bytes += len;
  }
  return 0;
}

static int vocab_add_staged(struct pp_tok *tok, const struct vocab_staged *st,
                            struct cm_diag *diag) {
  struct map_batch b;
  b.n = 0;
  for (size_t k = 0; k < st->n; k++) {
    int rc = vocab_add(tok, &b, st->bytes + st->e[k].off, st->e[k].len, st->e[k].id, diag);
    if (rc)
      return rc;
  }
  return vocab_flush(tok, &b, diag);
}

/* The decoded-bytes map of the vocabulary (for ignore_merges). Reads the vocabulary map and the
 * pool without changing them, so it may run while other threads look words up. */
static int vocab_raw_build(struct pp_tok *tok) {
  struct map_batch b;
  int32_t prev;
  int rc = 0;
  b.n = 0;
  if (map_init(&tok->vocab_raw, tok->n_model))
    return -ENOMEM;
  for (int32_t i = 0; i < tok->n_ids && !rc; i++) {
    const struct tok_entry *e = &tok->by_id[i];
    if (e->len == UINT32_MAX || e->raw_off == e->off)
      continue;
    map_batch_add(tok, &tok->vocab_raw, &b, e->raw_off, e->raw_len, i);
    if (b.n == MAP_BATCH)
      rc = map_batch_flush(tok, &tok->vocab_raw, &b, false, &prev);
  }
  /* two spellings with the same bytes: the later id wins, as in one map filled in id order */
  return rc ? rc : map_batch_flush(tok, &tok->vocab_raw, &b, false, &prev);
}

/* The merges as text, a then b back to back, before their tokens are looked up. */
struct merge_text {
  uint64_t off; /* offset of a in merge_list.bytes; b follows it */
  uint32_t na;  /* bytes of a */
  uint32_t nb;  /* bytes of b */
};
struct merge_list {
  struct merge_text *m; /* [n] in rank order */
  size_t n;             /* merges */
  size_t cap;           /* allocated m */
  char *bytes;          /* a and b of every merge */
  size_t n_bytes;       /* used */
  size_t cap_bytes;     /* allocated */
};

static int merge_list_add(struct merge_list *l, const char *a, size_t na, const char *b,
                          size_t nb) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 4096;
    struct merge_text *p = realloc(l->m, cap * sizeof(*p));
    if (!p)
      return -ENOMEM;
    l->m = p;
    l->cap = cap;
  }
  if (l->n_bytes + na + nb > l->cap_bytes) {
    size_t cap = l->cap_bytes ? l->cap_bytes * 2 : 1 << 16;
    while (cap < l->n_bytes + na + nb)
      cap *= 2;
    char *p = realloc(l->bytes, cap);
    if (!p)
      return -ENOMEM;
    l->bytes = p;
    l->cap_bytes = cap;
  }
  memcpy(l->bytes + l->n_bytes, a, na);
  memcpy(l->bytes + l->n_bytes + na, b, nb);
  l->m[l->n++] = (struct merge_text){.off = l->n_bytes, .na = (uint32_t)na, .nb = (uint32_t)nb};
  l->n_bytes += na + nb;
  return 0;
}

/* Room for n merges of n_bytes of text in all (a hint: the list still grows past it). */
static int merge_list_reserve(struct merge_list *l, size_t n, size_t n_bytes) {
  l->m = malloc((n ? n : 1) * sizeof(*l->m));
  l->bytes = malloc(n_bytes ? n_bytes : 1);
  if (!l->m || !l->bytes)
    return -ENOMEM;
  l->cap = n ? n : 1;
  l->cap_bytes = n_bytes ? n_bytes : 1;
  return 0;
}

static void merge_list_fini(struct merge_list *l) {
  free(l->m);
  free(l->bytes);
}

/* Appends the merges of one piece of model.merges: "a b" strings or ["a", "b"] pairs. The rank
 * of a merge is its position over all pieces (pieces come in file order). */
static int merges_add_piece(struct merge_list *l, json_object *piece, struct cm_diag *diag) {
  size_t n = json_object_array_length(piece);
  for (size_t k = 0; k < n; k++) {
    json_object *mo = json_object_array_get_idx(piece, k);
    const char *a, *b;
    size_t na, nb;
    if (json_object_is_type(mo, json_type_string)) {
      size_t len = (size_t)json_object_get_string_len(mo);
      a = json_object_get_string(mo);
      const char *sp = memchr(a, ' ', len);
      if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - a)))
        return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: merges[%zu] is not \"a b\"", l->n);
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
      return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: merges[%zu] is malformed", l->n);
    }
    if (merge_list_add(l, a, na, b, nb))
      return -ENOMEM;
  }
  return 0;
}

/* Resolving the merges' tokens to ids, in chunks that any number of threads take from a shared
 * counter. The vocabulary is read-only meanwhile. */
#define RESOLVE_CHUNK 4096 /* merges per chunk */
#define RESOLVE_BATCH 32   /* merges whose lookups are prefetched together */
struct resolve {
  const struct pp_tok *tok;   /* the vocabulary */
  const struct merge_list *l; /* the merges as text */
  int32_t *res;               /* [l->n][3]: left id, right id, merged id */
  atomic_size_t next;         /* first merge of the next chunk to take */
};

/* Resolves chunks until none is left. Returns SIZE_MAX, or the first merge using a token not in
 * the vocabulary in the chunks this call took (chunks are taken in order, so the smallest such
 * return over all callers is the first bad merge of all). a and b lie back to back in the text,
 * so a + b needs no copy. */
static size_t resolve_chunks(struct resolve *r) {
  const struct merge_list *l = r->l;
  const char *s[3 * RESOLVE_BATCH];
  uint32_t len[3 * RESOLVE_BATCH];
  int32_t ids[3 * RESOLVE_BATCH];
  for (;;) {
    size_t from = atomic_fetch_add(&r->next, RESOLVE_CHUNK);
    if (from >= l->n)
      return SIZE_MAX;
    size_t to = l->n - from > RESOLVE_CHUNK ? from + RESOLVE_CHUNK : l->n;
    for (size_t b = from; b < to; b += RESOLVE_BATCH) {
      size_t nb = to - b > RESOLVE_BATCH ? RESOLVE_BATCH : to - b;
      for (size_t k = 0; k < nb; k++) {
        const struct merge_text *m = &l->m[b + k];
        const char *a = l->bytes + m->off;
        s[3 * k] = a;
        len[3 * k] = m->na;
        s[3 * k + 1] = a + m->na;
        len[3 * k + 1] = m->nb;
        s[3 * k + 2] = a;
        len[3 * k + 2] = m->na + m->nb;
      }
      map_get_batch(r->tok, &r->tok->vocab, 3 * nb, s, len, ids);
      for (size_t k = 0; k < 3 * nb; k++)
        if (ids[k] < 0)
          return b + k / 3;
      memcpy(r->res + 3 * b, ids, 3 * nb * sizeof(int32_t));
    }
  }
}

struct resolve_thread {
  struct resolve *r; /* shared work */
  size_t bad;        /* resolve_chunks' result */
};

static void *resolve_thread_run(void *p) {
  struct resolve_thread *t = p;
  t->bad = resolve_chunks(t->r);
  return NULL;
}

/* Builds the merge-rank table from the resolved ids (rank = position); bad is the first
 * unresolvable merge or SIZE_MAX. */
static int merges_table(struct pp_tok *tok, size_t n_merges, const int32_t *res, size_t bad,
                        struct cm_diag *diag) {
  if (bad != SIZE_MAX)
    return cm_diag_set(diag, -CM_EFORMAT,
                       "tokenizer.json: merges[%zu] uses a token not in the vocabulary", bad);
  size_t cap = 16;
  while (cap < n_merges * 2 + 16)
    cap <<= 1;
  tok->merges = malloc(cap * sizeof(*tok->merges));
  if (!tok->merges)
    return -ENOMEM;
  for (size_t i = 0; i < cap; i++)
    tok->merges[i].key = UINT64_MAX;
  tok->merge_mask = cap - 1;
  size_t home[MAP_BATCH];
  for (size_t b = 0; b < n_merges; b += MAP_BATCH) {
    size_t nb = n_merges - b > MAP_BATCH ? MAP_BATCH : n_merges - b;
    for (size_t k = 0; k < nb; k++) {
      uint64_t key = (uint64_t)(uint32_t)res[3 * (b + k)] << 32 | (uint32_t)res[3 * (b + k) + 1];
      home[k] = merge_slot_hash(key) & tok->merge_mask;
      __builtin_prefetch(&tok->merges[home[k]], 1);
    }
    for (size_t k = 0; k < nb; k++) {
      size_t i = b + k, j = home[k];
      uint64_t key = (uint64_t)(uint32_t)res[3 * i] << 32 | (uint32_t)res[3 * i + 1];
      while (tok->merges[j].key != UINT64_MAX && tok->merges[j].key != key)
        j = (j + 1) & tok->merge_mask;
      /* A repeated pair keeps the last rank, as the reference's map does. */
      tok->merges[j] =
          (struct tok_merge_slot){.key = key, .rank = (uint32_t)i, .new_id = res[3 * i + 2]};
    }
  }
  return 0;
}

/* Resolves the merges on two threads and builds the merge-rank table. */
static int merges_finish(struct pp_tok *tok, const struct merge_list *l, struct cm_diag *diag) {
  int32_t *res = malloc(sizeof(int32_t) * 3 * (l->n ? l->n : 1));
  if (!res)
    return -ENOMEM;
  struct resolve r = {.tok = tok, .l = l, .res = res};
  atomic_init(&r.next, 0);
  struct resolve_thread t = {&r, SIZE_MAX};
  pthread_t th;
  bool threaded =
      l->n > 2 * RESOLVE_CHUNK && pthread_create(&th, NULL, resolve_thread_run, &t) == 0;
  size_t bad = resolve_chunks(&r);
  if (threaded)
    pthread_join(th, NULL);
  int rc = merges_table(tok, l->n, res, bad < t.bad ? bad : t.bad, diag);
  free(res);
  return rc;
}

/* ---- the document: model fields, then the other components ------------------------------- */

struct model_head {
  json_object *model;  /* the model object */
  json_object *added;  /* added_tokens, NULL if absent */
  json_object *vocab;  /* model.vocab (an empty stand-in on the fast path) */
  json_object *merges; /* model.merges (an empty stand-in on the fast path) */
  bool byte_fallback;  /* model.byte_fallback */
};

/* Checks the top level and the model's small fields; finds vocab and merges. */
static int load_head(struct pp_tok *tok, json_object *doc, struct model_head *h,
                     struct cm_diag *diag) {
  if (!json_object_is_type(doc, json_type_object))
    return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: top level is not an object");
  json_object *m, *v;
  int rc;
  *h = (struct model_head){0};
  if (!json_object_object_get_ex(doc, "model", &m))
    return cm_diag_set(diag, -CM_EMISSING, "tokenizer.json: no model");
  json_object_object_get_ex(doc, "added_tokens", &h->added);
  if (json_object_object_get_ex(doc, "truncation", &v) && v)
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "tokenizer.json: unsupported component truncation");
  if (json_object_object_get_ex(doc, "padding", &v) && v)
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "tokenizer.json: unsupported component padding");
  const char *t = type_of(m);
  if (!t || strcmp(t, "BPE") != 0)
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "tokenizer.json: unsupported component model %s",
                       t ? t : "(no type)");
  h->model = m;
  if (!json_object_object_get_ex(m, "vocab", &h->vocab) ||
      !json_object_is_type(h->vocab, json_type_object))
    return cm_diag_set(diag, -CM_EMISSING, "tokenizer.json: model.vocab missing");
  if (!json_object_object_get_ex(m, "merges", &h->merges) ||
      !json_object_is_type(h->merges, json_type_array))
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
      (rc = get_bool(m, "byte_fallback", false, &h->byte_fallback, diag, "model")) ||
      (rc = get_bool(m, "ignore_merges", false, &tok->ignore_merges, diag, "model")))
    return rc;
  /* added token ids count towards the limit before anything is allocated */
  if (h->added && json_object_is_type(h->added, json_type_array)) {
    for (size_t i = 0; i < json_object_array_length(h->added); i++) {
      json_object *o = json_object_array_get_idx(h->added, i);
      int32_t id;
      if (json_object_object_get_ex(o, "id", &v) && !get_id(v, &id) && id >= PP_TOK_MAX_VOCAB)
        return cm_diag_set(diag, -CM_ELIMIT, "tokenizer.json: id %d exceeds the limit of %d",
                           (int)id, (int)PP_TOK_MAX_VOCAB - 1);
    }
  }
  return 0;
}

/* After the vocabulary: room for the added ids, the decoded-bytes map (unless built already),
 * byte and unk ids. */
static int vocab_finish(struct pp_tok *tok, const struct model_head *h, bool build_raw,
                        struct cm_diag *diag) {
  json_object *v;
  int rc;
  if (h->added && json_object_is_type(h->added, json_type_array)) {
    for (size_t i = 0; i < json_object_array_length(h->added); i++) {
      json_object *o = json_object_array_get_idx(h->added, i);
      int32_t id;
      if (json_object_object_get_ex(o, "id", &v) && !get_id(v, &id) &&
          (rc = by_id_reserve(tok, id)))
        return rc;
    }
  }
  tok->n_distinct = tok->n_model;
  if (build_raw && tok->ignore_merges && (rc = vocab_raw_build(tok)))
    return rc;
  for (int b = 0; b < 256; b++) {
    char u[4];
    utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)tok_byte_to_cp((uint8_t)b),
                                              (utf8proc_uint8_t *)u);
    tok->byte_id[b] = tok_map_get(tok, &tok->vocab, u, (size_t)k);
    tok->byte_fallback_id[b] = -1;
    if (h->byte_fallback) {
      char hex[8];
      snprintf(hex, sizeof(hex), "<0x%02X>", b);
      tok->byte_fallback_id[b] = tok_map_get(tok, &tok->vocab, hex, 6);
    }
  }
  tok->unk_id = -1;
  const char *s;
  size_t sl;
  if ((rc = get_str(h->model, "unk_token", &s, &sl, diag, "model")))
    return rc;
  if (s) {
    tok->unk_id = tok_map_get(tok, &tok->vocab, s, sl);
    if (tok->unk_id < 0)
      return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: unk_token is not in the vocabulary");
  }
  return 0;
}

/* The components after the model: normalizer, pre-tokenizer, decoder, post-processor, added. */
static int load_rest(struct pp_tok *tok, json_object *doc, const struct model_head *h,
                     struct cm_diag *diag) {
  json_object *v = NULL;
  int rc;
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
  if ((rc = load_added(tok, h->added, diag)) || (rc = finish_added(tok, diag)))
    return rc;
  return 0;
}

/* ---- JSON text: scanning and parsing -------------------------------------------------------- */

struct parse_job {
  const char *s;    /* text to parse */
  size_t n;         /* its length */
  size_t base;      /* its offset in the file (for messages) */
  int depth;        /* json-c nesting limit */
  json_object *obj; /* result, NULL on error */
  size_t err_at;    /* file offset of the error */
  const char *err;  /* json-c's description */
};

static void parse_job_run(struct parse_job *j) {
  json_tokener *jt = json_tokener_new_ex(j->depth);
  if (!jt) {
    j->err = "out of memory";
    return;
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
}

/* The plain path: json-c parses the whole document; vocab and merges are one piece each. */
static int load_whole(struct pp_tok *tok, const char *json, size_t n, struct cm_diag *diag) {
  struct parse_job pj = {.s = json, .n = n, .depth = JSON_MAX_DEPTH};
  struct merge_list ml = {0};
  struct model_head h;
  parse_job_run(&pj);
  if (!pj.obj)
    return cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: JSON error at byte %zu: %s", pj.err_at,
                       pj.err);
  int rc;
  if (!(rc = load_head(tok, pj.obj, &h, diag)) &&
      !(rc = vocab_begin(tok, (size_t)json_object_object_length(h.vocab))) &&
      !(rc = vocab_add_piece(tok, h.vocab, diag)) && !(rc = vocab_finish(tok, &h, true, diag)) &&
      !(rc = merges_add_piece(&ml, h.merges, diag)) && !(rc = merges_finish(tok, &ml, diag)))
    rc = load_rest(tok, pj.obj, &h, diag);
  merge_list_fini(&ml);
  json_object_put(pj.obj);
  return rc;
}

/* ---- the fast path: model.vocab and model.merges cut into pieces ----------------------------
 * Parsing and freeing one json-c tree of 248k vocabulary entries and one of 248k merges was most
 * of a load (the trees outgrow the caches, json-c's hash table rehashes as it grows, and freeing
 * a million small objects costs as much again). A scan that follows only strings and nesting
 * finds the two containers and cuts them at top-level commas into pieces of a few members;
 * json-c parses each piece, wrapped in its own brackets, as a document; its entries go into our
 * tables and the piece is freed while it is still in cache. Two threads share the work (struct
 * pieces_sync).
 * Exactness: pieces that each parse on their own as strict JSON join, with the cut commas, into
 * exactly the container's text, so they hold the same members in the same order. Anything
 * unexpected (a layout the scan does not know, a piece json-c refuses or finds empty, a key that
 * json-c would read as another, a vocabulary key in two pieces, any other error) makes the caller
 * start again with load_whole, so errors and their messages are always those of the plain path.
 * tests/tokenizer/test_tok_unit.c (documents made to trip the scan), fuzz_tok_load.c and the
 * golden tests (the real files, table by table) check that both paths agree. */

/* Members per piece. With up to 11 vocabulary entries json-c's hash table of a piece never grows,
 * and with up to 32 merges its array never does: every allocation of a piece stays small, so
 * glibc serves it from its per-thread caches (a large one would first consolidate every small
 * chunk freed by the previous piece). Fewer members only add per-parse costs (json-c sets up a
 * locale on each call). Instructions per load of the 248k file (callgrind): 2.24 G at 10 / 32,
 * 2.28 G at 10 / 10, 2.33 G at 64 / 64, 2.51 G at 256 / 256. */
#define VOCAB_PIECE_ENTRIES 10
#define MERGES_PIECE_ENTRIES 32
#define PIECES_MIN_BYTES ((size_t)1 << 20) /* smaller files take the plain path */

struct span {
  size_t off; /* first byte of the value */
  size_t len; /* its length in bytes */
};

struct pieces {
  size_t *bounds;   /* [n + 1]: piece k is the text [bounds[k], bounds[k + 1] - 1) */
  size_t n;         /* pieces */
  size_t cap;       /* allocated bounds */
  size_t entries;   /* top-level commas + 1: at least the members */
  struct span span; /* the whole container, brackets included */
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

/* Moves *i past the value at s[*i]. With `p`, the value must be an object or array, and it is cut
 * after every `per_piece` top-level members into p. */
static bool scan_value(const char *s, size_t n, size_t *i, size_t per_piece, struct pieces *p) {
  size_t k = *i;
  if (k >= n)
    return false;
  if (s[k] == '"' && !p)
    return skip_string(s, n, i);
  if (s[k] == '{' || s[k] == '[') {
    static const char special[256] = {
        ['"'] = 1, ['{'] = 1, ['['] = 1, ['}'] = 1, [']'] = 1, [','] = 1};
    size_t depth = 0, commas = 0;
    if (p) {
      p->n = 0;
      if (!p->cap) {
        p->bounds = malloc(256 * sizeof(*p->bounds));
        if (!p->bounds)
          return false;
        p->cap = 256;
      }
      p->bounds[0] = k + 1;
    }
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
      if (c == ',') {
        if (p && depth == 1 && ++commas % per_piece == 0) {
          if (p->n + 2 >= p->cap) {
            size_t *b = realloc(p->bounds, 2 * p->cap * sizeof(*b));
            if (!b)
              return false;
            p->bounds = b;
            p->cap *= 2;
          }
          p->bounds[++p->n] = k + 1;
        }
      } else if (c == '{' || c == '[') {
        depth++;
      } else if (--depth == 0) {
        if (p) {
          p->bounds[++p->n] = k + 1;
          p->span = (struct span){*i, k + 1 - *i};
          p->entries = commas + 1;
        }
        *i = k + 1;
        return true;
      }
      k++;
    }
    return false;
  }
  if (p)
    return false;
  size_t start = k;
  while (k < n && s[k] && !strchr(",}] \t\r\n", s[k]))
    k++;
  *i = k;
  return k > start;
}

/* Walks the members of the object at s[*i] == '{'; for each, `fn` gets the raw key and must move
 * *i past the value. */
typedef bool (*member_fn)(void *ctx, const char *key, size_t key_len, size_t *i);
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
    if (!fn(ctx, s + key, key_len, &k) || k == v)
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

struct layout {
  const char *doc;                    /* the whole document */
  size_t n;                           /* its length */
  size_t vocab_per_piece;             /* members per piece of model.vocab */
  size_t merges_per_piece;            /* members per piece of model.merges */
  struct pieces vocab;                /* model.vocab */
  struct pieces merges;               /* model.merges */
  int n_model;                        /* "model" keys seen at the top level */
  int n_vocab, n_merges;              /* "vocab" and "merges" keys seen inside model */
  size_t n_top, n_in_model;           /* keys at the top level and inside model, as written */
  bool (*on_vocab)(struct layout *L); /* called once model.vocab is cut (may start its work) */
  void *ctx;                          /* for on_vocab */
};

static bool on_model_member(void *ctx, const char *key, size_t len, size_t *i) {
  struct layout *L = ctx;
  L->n_in_model++;
  if (*i >= L->n)
    return false;
  if (len == 5 && memcmp(key, "vocab", 5) == 0 && L->n_vocab++ == 0)
    return L->doc[*i] == '{' && scan_value(L->doc, L->n, i, L->vocab_per_piece, &L->vocab) &&
           (!L->on_vocab || L->on_vocab(L));
  if (len == 6 && memcmp(key, "merges", 6) == 0 && L->n_merges++ == 0)
    return L->doc[*i] == '[' && scan_value(L->doc, L->n, i, L->merges_per_piece, &L->merges);
  return scan_value(L->doc, L->n, i, 0, NULL);
}

static bool on_top_member(void *ctx, const char *key, size_t len, size_t *i) {
  struct layout *L = ctx;
  L->n_top++;
  if (len == 5 && memcmp(key, "model", 5) == 0 && L->n_model++ == 0)
    return walk_object(L->doc, L->n, i, on_model_member, L);
  return scan_value(L->doc, L->n, i, 0, NULL);
}

/* Finds and cuts model.vocab (an object) and model.merges (an array), vocab first. */
static bool find_layout(struct layout *L) {
  size_t i = 0;
  return walk_object(L->doc, L->n, &i, on_top_member, L) && L->n_model == 1 && L->n_vocab == 1 &&
         L->n_merges == 1 && L->vocab.span.off + L->vocab.span.len <= L->merges.span.off;
}

/* One thread's json-c tokener (strict, reused) and the buffer a piece is wrapped in. */
struct piece_parser {
  json_tokener *jt; /* strict JSON only */
  char *buf;        /* '{' or '[', the piece, '}' or ']' */
  size_t cap;       /* allocated buf */
};

static int piece_parser_init(struct piece_parser *pp) {
  /* a piece sits two levels down in the document: allow no deeper nesting than the plain path */
  pp->jt = json_tokener_new_ex(JSON_MAX_DEPTH - 2);
  if (!pp->jt)
    return -ENOMEM;
  /* strict JSON only: json-c's leniencies (a trailing comma above all) could let a piece parse
   * that is no valid part of the whole */
  json_tokener_set_flags(pp->jt, JSON_TOKENER_STRICT);
  return 0;
}

static void piece_parser_fini(struct piece_parser *pp) {
  if (pp->jt)
    json_tokener_free(pp->jt);
  free(pp->buf);
}

/* Parses piece k of p, wrapped in `open` and its closing bracket, and hands it to consume. Any
 * piece json-c refuses, does not end at the closing bracket, or finds empty (beside others) is an
 * error. */
static int piece_parse(struct piece_parser *pp, const char *doc, const struct pieces *p, size_t k,
                       char open, int (*consume)(void *, json_object *, struct cm_diag *),
                       void *ctx, struct cm_diag *diag) {
  size_t from = p->bounds[k], len = p->bounds[k + 1] - 1 - from;
  if (len + 2 > pp->cap) {
    size_t c = pp->cap ? pp->cap : 1 << 16;
    while (c < len + 2)
      c *= 2;
    char *b = realloc(pp->buf, c);
    if (!b)
      return -ENOMEM;
    pp->buf = b;
    pp->cap = c;
  }
  pp->buf[0] = open;
  memcpy(pp->buf + 1, doc + from, len);
  pp->buf[len + 1] = open == '{' ? '}' : ']';
  json_tokener_reset(pp->jt);
  json_object *o = json_tokener_parse_ex(pp->jt, pp->buf, (int)(len + 2));
  bool ok = o && json_tokener_get_error(pp->jt) == json_tokener_success &&
            json_tokener_get_parse_end(pp->jt) == len + 2;
  /* an empty piece between two commas would hide a syntax error of the whole */
  if (ok && p->n > 1)
    ok = open == '{' ? json_object_object_length(o) > 0 : json_object_array_length(o) > 0;
  int rc = ok ? consume(ctx, o, diag)
              : cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: piece %zu at byte %zu", k, from);
  json_object_put(o);
  return rc;
}

static int consume_vocab(void *ctx, json_object *piece, struct cm_diag *diag) {
  return vocab_add_piece(ctx, piece, diag);
}

static int consume_merges(void *ctx, json_object *piece, struct cm_diag *diag) {
  return merges_add_piece(ctx, piece, diag);
}

/* The fast path's two threads. The second one sizes the tables and adds vocabulary pieces from the
 * front; this one parses the merges, then takes vocabulary pieces from the back and stages them
 * (json-c parse, spellings copied) for the second one to add. The second one then builds the
 * decoded-bytes map while this one starts resolving the merges, and both finish that. Only the
 * second thread writes the vocabulary tables; everything it reads afterwards is read-only. */
struct pieces_sync {
  pthread_mutex_t mu;          /* guards the fields up to `ready` */
  pthread_cond_t cv;           /* broadcast on every change of them */
  bool failed;                 /* a step failed: both threads stop */
  bool head_done;              /* the small fields are loaded (tok->ignore_merges is set) */
  bool vocab_done;             /* every vocabulary piece is added */
  bool merges_done;            /* the merges are listed and r.res is allocated */
  size_t front, back;          /* vocabulary pieces [front, back) are not taken yet */
  size_t n_added_staged;       /* staged pieces the second thread has added */
  size_t n_ready;              /* staged pieces waiting in ready */
  size_t *ready;               /* [vocab pieces] indices of staged pieces to add */
  struct vocab_staged *staged; /* [vocab pieces] */
  const char *doc;             /* the file */
  const struct pieces *vocab;  /* model.vocab's pieces */
  size_t n_entries;            /* its members as counted by the scan (sizes the tables) */
  struct pp_tok *tok;          /* the tokenizer being built */
  struct resolve r;            /* the merges' resolution */
  size_t bad;                  /* the second thread's resolve_chunks result */
  int rc;                      /* the second thread's first error */
  bool spawned;                /* the second thread runs */
  pthread_t th;                /* it */
};

static void sync_fail(struct pieces_sync *y) {
  pthread_mutex_lock(&y->mu);
  y->failed = true;
  pthread_cond_broadcast(&y->cv);
  pthread_mutex_unlock(&y->mu);
}

/* Sets *flag (and failed when `failed`); wakes the other thread. */
static void sync_set(struct pieces_sync *y, bool *flag, bool failed) {
  pthread_mutex_lock(&y->mu);
  *flag = true;
  y->failed |= failed;
  pthread_cond_broadcast(&y->cv);
  pthread_mutex_unlock(&y->mu);
}

/* Waits for *flag or a failure; true when nothing has failed. */
static bool sync_wait(struct pieces_sync *y, const bool *flag) {
  pthread_mutex_lock(&y->mu);
  while (!*flag && !y->failed)
    pthread_cond_wait(&y->cv, &y->mu);
  bool ok = !y->failed;
  pthread_mutex_unlock(&y->mu);
  return ok;
}

static void *vocab_side_run(void *arg) {
  struct pieces_sync *y = arg;
  struct piece_parser pp = {0};
  struct cm_diag quiet = {0}; /* the fast path's messages are never shown */
  int rc = vocab_begin(y->tok, y->n_entries);
  if (!rc)
    rc = piece_parser_init(&pp);
  pthread_mutex_lock(&y->mu);
  while (!rc && !y->failed) {
    if (y->front < y->back) {
      size_t k = y->front++;
      pthread_mutex_unlock(&y->mu);
      rc = piece_parse(&pp, y->doc, y->vocab, k, '{', consume_vocab, y->tok, &quiet);
      pthread_mutex_lock(&y->mu);
    } else if (y->n_ready) {
      size_t k = y->ready[--y->n_ready];
      pthread_mutex_unlock(&y->mu);
      rc = vocab_add_staged(y->tok, &y->staged[k], &quiet);
      vocab_staged_fini(&y->staged[k]);
      pthread_mutex_lock(&y->mu);
      y->n_added_staged++;
    } else if (y->n_added_staged == y->vocab->n - y->back) {
      break; /* every piece was taken, and the other thread's are added */
    } else {
      pthread_cond_wait(&y->cv, &y->mu);
    }
  }
  pthread_mutex_unlock(&y->mu);
  piece_parser_fini(&pp);
  sync_set(y, &y->vocab_done, rc != 0);
  /* the merges may still be parsing; their resolution below only reads the vocabulary */
  if (!rc && sync_wait(y, &y->head_done) && y->tok->ignore_merges && (rc = vocab_raw_build(y->tok)))
    sync_fail(y);
  if (!rc && sync_wait(y, &y->merges_done))
    y->bad = resolve_chunks(&y->r);
  y->rc = rc;
  cm_diag_fini(&quiet);
  return NULL;
}

/* on_vocab of the layout scan: starts the second thread as soon as model.vocab is cut. */
static bool start_vocab(struct layout *L) {
  struct pieces_sync *y = L->ctx;
  size_t n = L->vocab.n;
  y->staged = calloc(n, sizeof(*y->staged));
  y->ready = malloc(n * sizeof(*y->ready));
  if (!y->staged || !y->ready)
    return false;
  y->vocab = &L->vocab;
  y->n_entries = L->vocab.entries;
  y->front = 0;
  y->back = n;
  y->spawned = pthread_create(&y->th, NULL, vocab_side_run, y) == 0;
  return y->spawned;
}

/* Loads with the containers cut into pieces of per_piece members. Returns 1 when the layout does
 * not allow it and tok is untouched, 0 on success, or a negative code (tok is then half-built). */
static int load_pieces(struct pp_tok *tok, const char *json, size_t n, size_t vocab_per_piece,
                       size_t merges_per_piece, struct cm_diag *diag) {
  struct pieces_sync y = {.doc = json, .tok = tok, .bad = SIZE_MAX, .r = {.tok = tok}};
  struct layout L = {.doc = json,
                     .n = n,
                     .vocab_per_piece = vocab_per_piece,
                     .merges_per_piece = merges_per_piece,
                     .on_vocab = start_vocab,
                     .ctx = &y};
  struct merge_list ml = {0};
  struct parse_job pj = {.depth = JSON_MAX_DEPTH};
  struct piece_parser pp = {0};
  char *rest = NULL;
  int rc;
  pthread_mutex_init(&y.mu, NULL);
  pthread_cond_init(&y.cv, NULL);
  atomic_init(&y.r.next, 0);
  y.r.l = &ml;
  if (!find_layout(&L)) {
    rc = y.spawned ? -EAGAIN : 1;
    goto out;
  }
  /* the rest of the document, with {} and [] standing in for the two containers */
  struct span v = L.vocab.span, m = L.merges.span;
  size_t v_end = v.off + v.len, m_end = m.off + m.len;
  size_t rest_n = v.off + 2 + (m.off - v_end) + 2 + (n - m_end), k = 0;
  rc = -ENOMEM;
  if (!(rest = malloc(rest_n)))
    goto out;
  memcpy(rest, json, v.off);
  k += v.off;
  memcpy(rest + k, "{}", 2);
  k += 2;
  memcpy(rest + k, json + v_end, m.off - v_end);
  k += m.off - v_end;
  memcpy(rest + k, "[]", 2);
  k += 2;
  memcpy(rest + k, json + m_end, n - m_end);
  pj.s = rest;
  pj.n = rest_n;
  parse_job_run(&pj);
  if (!pj.obj) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: JSON error: %s", pj.err);
    goto out;
  }
  /* a key that json-c reads as another (escapes, U+0000) would make the stand-ins ambiguous */
  json_object *model;
  if (!json_object_object_get_ex(pj.obj, "model", &model) ||
      (size_t)json_object_object_length(pj.obj) != L.n_top ||
      !json_object_is_type(model, json_type_object) ||
      (size_t)json_object_object_length(model) != L.n_in_model) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "tokenizer.json: keys differ after unescaping");
    goto out;
  }
  struct model_head h;
  rc = load_head(tok, pj.obj, &h, diag);
  sync_set(&y, &y.head_done, rc != 0);
  /* the decoded strings are no longer than the text they come from */
  if (rc || (rc = piece_parser_init(&pp)) ||
      (rc = merge_list_reserve(&ml, L.merges.entries, L.merges.span.len)))
    goto out;
  for (size_t i = 0; i < L.merges.n && !rc; i++)
    rc = piece_parse(&pp, json, &L.merges, i, '[', consume_merges, &ml, diag);
  if (!rc && !(y.r.res = malloc(sizeof(int32_t) * 3 * (ml.n ? ml.n : 1))))
    rc = -ENOMEM;
  sync_set(&y, &y.merges_done, rc != 0);
  /* take vocabulary pieces from the back while the second thread works from the front */
  pthread_mutex_lock(&y.mu);
  while (!rc && !y.failed && y.front < y.back) {
    size_t i = --y.back;
    pthread_mutex_unlock(&y.mu);
    rc = piece_parse(&pp, json, &L.vocab, i, '{', vocab_stage_piece, &y.staged[i], diag);
    pthread_mutex_lock(&y.mu);
    if (rc)
      y.failed = true;
    else
      y.ready[y.n_ready++] = i;
    pthread_cond_broadcast(&y.cv);
  }
  pthread_mutex_unlock(&y.mu);
  size_t bad = SIZE_MAX;
  if (!rc && sync_wait(&y, &y.vocab_done))
    bad = resolve_chunks(&y.r);
  pthread_join(y.th, NULL);
  y.spawned = false;
  if (rc || (rc = y.rc) || (y.failed && (rc = -EAGAIN)) ||
      (rc = vocab_finish(tok, &h, false, diag)) ||
      (rc = merges_table(tok, ml.n, y.r.res, bad < y.bad ? bad : y.bad, diag)) ||
      (rc = load_rest(tok, pj.obj, &h, diag)))
    goto out;
out:
  if (y.spawned) {
    sync_fail(&y);
    pthread_join(y.th, NULL);
  }
  for (size_t i = 0; y.staged && i < L.vocab.n; i++)
    vocab_staged_fini(&y.staged[i]);
  free(y.staged);
  free(y.ready);
  free(y.r.res);
  pthread_mutex_destroy(&y.mu);
  pthread_cond_destroy(&y.cv);
  piece_parser_fini(&pp);
  merge_list_fini(&ml);
  json_object_put(pj.obj);
  free(rest);
  free(L.vocab.bounds);
  free(L.merges.bounds);
  return rc;
}

/* ---- entry points ------------------------------------------------------------------------- */

static struct pp_tok *tok_new(void) {
  struct pp_tok *tok = calloc(1, sizeof(*tok));
  if (tok)
    pthread_mutex_init(&tok->lock, NULL);
  return tok;
}

int tok_load_buffer(const char *json, size_t n_bytes, size_t vocab_per_piece,
                    size_t merges_per_piece, struct pp_tok **ret_tok, struct cm_diag *diag) {
  if (n_bytes > PP_TOK_MAX_FILE_BYTES)
    return cm_diag_set(diag, -CM_ELIMIT, "tokenizer.json: %zu bytes exceeds the limit of %zu",
                       n_bytes, PP_TOK_MAX_FILE_BYTES);
  struct pp_tok *tok = tok_new();
  int rc = -ENOMEM;
  if (!tok)
    goto fail;
  rc = 1;
  if (vocab_per_piece && merges_per_piece) {
    struct cm_diag quiet = {0}; /* the plain path reports errors */
    rc = load_pieces(tok, json, n_bytes, vocab_per_piece, merges_per_piece, &quiet);
    cm_diag_fini(&quiet);
    if (rc < 0) {
      pp_tok_free(tok);
      if (!(tok = tok_new())) {
        rc = -ENOMEM;
        goto fail;
      }
    }
  }
  tok->in_pieces = rc == 0;
  if (rc && (rc = load_whole(tok, json, n_bytes, diag)))
    goto fail;
  if (pthread_key_create(&tok->key, tok_thread_destructor)) {
    rc = cm_diag_set(diag, -ENOMEM, "tokenizer: no thread key left");
    goto fail;
  }
  tok->key_made = true;
  *ret_tok = tok;
  return 0;
fail:
  if (rc == -ENOMEM)
    cm_diag_set(diag, -ENOMEM, "tokenizer.json: out of memory");
  pp_tok_free(tok);
  return rc;
}

int pp_tok_load_buffer(const char *json, size_t n_bytes, struct pp_tok **ret_tok,
                       struct cm_diag *diag) {
  bool pieces = n_bytes >= PIECES_MIN_BYTES;
  return tok_load_buffer(json, n_bytes, pieces ? VOCAB_PIECE_ENTRIES : 0,
                         pieces ? MERGES_PIECE_ENTRIES : 0, ret_tok, diag);
}

int pp_tok_load_file(const char *path, struct pp_tok **ret_tok, struct cm_diag *diag) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return cm_diag_set(diag, errno == ENOENT ? -ENOENT : -EIO, "%s: cannot open", path);
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    close(fd);
    return cm_diag_set(diag, -EIO, "%s: not a regular file", path);
  }
  if ((size_t)st.st_size > PP_TOK_MAX_FILE_BYTES) {
    close(fd);
    return cm_diag_set(diag, -CM_ELIMIT, "%s: %lld bytes exceeds the limit of %zu", path,
                       (long long)st.st_size, PP_TOK_MAX_FILE_BYTES);
  }
  size_t n = (size_t)st.st_size;
  /* Mapped with its pages populated: no copy, no page faults while scanning (a read() of a 20 MB
   * file costs more than the rest of the scan). Read into memory where mapping fails. */
  void *map = n ? mmap(NULL, n, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0) : MAP_FAILED;
  char *buf = NULL;
  if (map == MAP_FAILED) {
    buf = malloc(n ? n : 1);
    size_t got = 0;
    while (buf && got < n) {
      ssize_t r = read(fd, buf + got, n - got);
      if (r <= 0 && !(r < 0 && errno == EINTR))
        break;
      got += r > 0 ? (size_t)r : 0;
    }
    if (!buf || got != n) {
      close(fd);
      free(buf);
      return cm_diag_set(diag, buf ? -EIO : -ENOMEM, "%s: %s", path,
                         buf ? "short read" : "out of memory");
    }
  }
  close(fd);
  int rc = pp_tok_load_buffer(map != MAP_FAILED ? map : buf, n, ret_tok, diag);
  if (map != MAP_FAILED)
    munmap(map, n);
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
