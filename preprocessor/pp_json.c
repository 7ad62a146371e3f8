/* Strict JSON check and parse (pp_json.h). The grammar pass keeps the unescaped keys of every open
 * object in one byte buffer and, when the object closes, sorts them to find duplicates. */
#include "pp_json.h"

#include <errno.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct key_ref {
  size_t off; /* offset of the unescaped key in keys */
  size_t len; /* its length */
};

/* Where the scanner is: one entry per open object or array (the field path of an error). */
struct level {
  bool array;   /* an array (index) or an object (key) */
  size_t index; /* array: the element being read */
  size_t key;   /* object: refs[] entry of the key being read */
};

struct scanner {
  const unsigned char *s; /* text */
  size_t n, i;            /* length, cursor */
  struct level path[PP_JSON_MAX_DEPTH + 1]; /* [depth] open containers, outermost first */
  int depth;              /* entries of path in use */
  char *keys;             /* unescaped keys of open objects */
  size_t n_keys_bytes, cap_keys_bytes;
  struct key_ref *refs;   /* keys of open objects, innermost last */
  size_t n_refs, cap_refs;
  struct cm_diag *diag;
};

static int fail(struct scanner *sc, const char *what) {
  return cm_diag_set(sc->diag, -CM_EJSON, "invalid JSON at byte %zu: %s", sc->i, what);
}

static void ws(struct scanner *sc) {
  while (sc->i < sc->n && (sc->s[sc->i] == ' ' || sc->s[sc->i] == '\t' || sc->s[sc->i] == '\n' ||
                           sc->s[sc->i] == '\r'))
    sc->i++;
}

static int put_key_bytes(struct scanner *sc, const void *b, size_t n) {
  if (!sc->keys && n == 0)
    return 0;
  if (sc->n_keys_bytes + n > sc->cap_keys_bytes) {
    size_t c = sc->cap_keys_bytes ? sc->cap_keys_bytes * 2 : 256;
    while (c < sc->n_keys_bytes + n)
      c *= 2;
    char *k = realloc(sc->keys, c);
    if (!k)
      return -ENOMEM;
    sc->keys = k;
    sc->cap_keys_bytes = c;
  }
  memcpy(sc->keys + sc->n_keys_bytes, b, n);
  sc->n_keys_bytes += n;
  return 0;
}

/* Length of a valid UTF-8 sequence at s[0..n), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80)
    return 1;
  size_t k;
  uint32_t cp;
  if (c >= 0xc2 && c <= 0xdf)
    k = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef)
    k = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4)
    k = 4, cp = c & 0x07;
  else
    return 0;
  if (n < k)
    return 0;
  for (size_t j = 1; j < k; j++) {
    if ((s[j] & 0xc0) != 0x80)
      return 0;
    cp = cp << 6 | (s[j] & 0x3f);
  }
  if ((k == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (k == 4 && (cp < 0x10000 ||
                                                                                 cp > 0x10ffff)))
    return 0;
  return k;
}

static int hex4(struct scanner *sc, uint32_t *ret) {
  if (sc->n - sc->i < 4)
    return fail(sc, "short \\u escape");
  uint32_t v = 0;
  for (int j = 0; j < 4; j++) {
    unsigned c = sc->s[sc->i + (size_t)j];
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if (c >= 'a' && c <= 'f')
      v |= c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      v |= c - 'A' + 10;
    else
      return fail(sc, "bad \\u escape");
  }
  sc->i += 4;
  *ret = v;
  return 0;
}

/* A string at sc->i (the opening quote). With `key`, appends its unescaped bytes to keys. */
/* Bytes from s[0] on that need no look in a string: printable ASCII other than '"' and '\\'
 * (8 at a time while a whole word is plain; the word tests are exact "any byte" tests). */
static size_t plain_run(const unsigned char *s, size_t n) {
  const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x, q, b;
    memcpy(&x, s + i, 8);
    q = x ^ (ones * '"');
    b = x ^ (ones * '\\');
    uint64_t special = ((x - ones * 0x20) & ~x) | ((q - ones) & ~q) | ((b - ones) & ~b) | x;
    if (special & highs)
      break;
  }
  while (i < n && s[i] >= 0x20 && s[i] < 0x80 && s[i] != '"' && s[i] != '\\')
    i++;
  return i;
}

static int string(struct scanner *sc, bool key) {
  sc->i++;
  for (;;) {
    size_t run = plain_run(sc->s + sc->i, sc->n - sc->i);
    if (run) {
      if (key && put_key_bytes(sc, sc->s + sc->i, run))
        return -ENOMEM;
      sc->i += run;
    }
    if (sc->i >= sc->n)
      return fail(sc, "unterminated string");
    unsigned c = sc->s[sc->i];
    if (c == '"') {
      sc->i++;
      return 0;
    }
    if (c < 0x20)
      return fail(sc, "control character in string");
    if (c == '\\') {
      if (++sc->i >= sc->n)
        return fail(sc, "unterminated escape");
      unsigned e = sc->s[sc->i++];
      char one = 0;
      switch (e) {
      case '"': one = '"'; break;
      case '\\': one = '\\'; break;
      case '/': one = '/'; break;
      case 'b': one = '\b'; break;
      case 'f': one = '\f'; break;
      case 'n': one = '\n'; break;
      case 'r': one = '\r'; break;
      case 't': one = '\t'; break;
      case 'u': {
        uint32_t u, lo;
        int r = hex4(sc, &u);
        if (r)
          return r;
        if (u >= 0xdc00 && u <= 0xdfff)
          return fail(sc, "lone low surrogate");
        if (u >= 0xd800 && u <= 0xdbff) {
          if (sc->n - sc->i < 6 || sc->s[sc->i] != '\\' || sc->s[sc->i + 1] != 'u')
            return fail(sc, "lone high surrogate");
          sc->i += 2;
          if ((r = hex4(sc, &lo)))
            return r;
          if (lo < 0xdc00 || lo > 0xdfff)
            return fail(sc, "lone high surrogate");
          u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
        }
        /* json-c cuts object keys at NUL, so such a key would silently merge with another one:
         * refuse it (valid JSON, so 422, not 400). */
        if (key && u == 0)
          return cm_diag_set(sc->diag, -CM_EREQUEST,
                             "object key at byte %zu contains U+0000, which is not supported",
                             sc->i);
        if (key) {
          unsigned char b[4];
          size_t k;
          if (u < 0x80)
            b[0] = (unsigned char)u, k = 1;
          else if (u < 0x800)
            b[0] = (unsigned char)(0xc0 | u >> 6), b[1] = (unsigned char)(0x80 | (u & 0x3f)), k = 2;
          else if (u < 0x10000)
            b[0] = (unsigned char)(0xe0 | u >> 12), b[1] = (unsigned char)(0x80 | (u >> 6 & 0x3f)),
            b[2] = (unsigned char)(0x80 | (u & 0x3f)), k = 3;
          else
            b[0] = (unsigned char)(0xf0 | u >> 18), b[1] = (unsigned char)(0x80 | (u >> 12 & 0x3f)),
            b[2] = (unsigned char)(0x80 | (u >> 6 & 0x3f)),
            b[3] = (unsigned char)(0x80 | (u & 0x3f)), k = 4;
          if (put_key_bytes(sc, b, k))
            return -ENOMEM;
        }
        continue;
      }
      default: return fail(sc, "bad escape");
      }
      if (key && put_key_bytes(sc, &one, 1))
        return -ENOMEM;
      continue;
    }
    size_t k = utf8_len(sc->s + sc->i, sc->n - sc->i);
    if (!k)
      return fail(sc, "invalid UTF-8");
    if (key && put_key_bytes(sc, sc->s + sc->i, k))
      return -ENOMEM;
    sc->i += k;
  }
}

/* The field path of the value being read ("questions.q.box[2]"; "" at the top), in buf. */
static void field_path(const struct scanner *sc, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = 0;
  for (int d = 0; d < sc->depth && n + 1 < cap; d++) {
    const struct level *l = &sc->path[d];
    int k;
    if (l->array) {
      k = snprintf(buf + n, cap - n, "[%zu]", l->index);
    } else {
      const struct key_ref *r = &sc->refs[l->key];
      k = snprintf(buf + n, cap - n, "%s%.*s", n ? "." : "", (int)(r->len > 48 ? 48 : r->len),
                   r->len ? sc->keys + r->off : "");
    }
    if (k < 0)
      break;
    n = (size_t)k < cap - n ? n + (size_t)k : cap - 1;
  }
}

static int number(struct scanner *sc) {
  size_t i = sc->i;
  const unsigned char *s = sc->s;
  bool neg = i < sc->n && s[i] == '-';
  if (neg)
    i++;
  if (i >= sc->n)
    return fail(sc, "bad number");
  size_t digits = i;
  if (s[i] == '0')
    i++;
  else if (s[i] >= '1' && s[i] <= '9')
    while (i < sc->n && s[i] >= '0' && s[i] <= '9')
      i++;
  else if (i < sc->n && (s[i] == 'N' || s[i] == 'n' || s[i] == 'I' || s[i] == 'i'))
    return fail(sc, "unexpected character (NaN and Infinity are not JSON)");
  else
    return fail(sc, i < sc->n && s[i] >= 0x20 && s[i] < 0x7f ? "unexpected character where a "
                "value should start" : "unexpected byte where a value should start");
  size_t nd = i - digits;
  bool integer = !(i < sc->n && (s[i] == '.' || s[i] == 'e' || s[i] == 'E'));
  /* json-c holds integers as int64 or uint64 and clamps wider ones to exactly -2**63 and
   * 2**64-1: those two are real values once every wider literal is refused here */
  const char *lim = neg ? "9223372036854775808" : "18446744073709551615";
  size_t nl = neg ? 19 : 20;
  if (integer && (nd > nl || (nd == nl && memcmp(s + digits, lim, nl) > 0))) {
    char where[256];
    field_path(sc, where, sizeof(where));
    return cm_diag_set(sc->diag, -CM_EREQUEST, "%s%sinteger %s%.*s%s is outside 64 bits (-2**63 "
                       "to 2**64-1 are supported)", where, *where ? ": " : "", neg ? "-" : "",
                       (int)(nd > 24 ? 24 : nd), (const char *)s + digits, nd > 24 ? "..." : "");
  }
  if (i < sc->n && s[i] == '.') {
    if (++i >= sc->n || s[i] < '0' || s[i] > '9')
      return fail(sc, "bad fraction");
    while (i < sc->n && s[i] >= '0' && s[i] <= '9')
      i++;
  }
  if (i < sc->n && (s[i] == 'e' || s[i] == 'E')) {
    i++;
    if (i < sc->n && (s[i] == '+' || s[i] == '-'))
      i++;
    if (i >= sc->n || s[i] < '0' || s[i] > '9')
      return fail(sc, "bad exponent");
    while (i < sc->n && s[i] >= '0' && s[i] <= '9')
      i++;
  }
  sc->i = i;
  return 0;
}

static int cmp_key(const void *a, const void *b, void *base) {
  const char *key_base = base;
  const struct key_ref *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  /* Only empty keys so far: the key buffer may not exist yet (NULL), and n is 0. */
  int c = n ? memcmp(key_base + x->off, key_base + y->off, n) : 0;
  return c ? c : (x->len > y->len) - (x->len < y->len);
}

static int value(struct scanner *sc, int depth);

static int object(struct scanner *sc, int depth) {
  size_t first_ref = sc->n_refs, first_byte = sc->n_keys_bytes;
  sc->i++;
  ws(sc);
  int r = 0;
  if (sc->i < sc->n && sc->s[sc->i] == '}') {
    sc->i++;
    return 0;
  }
  for (;;) {
    ws(sc);
    if (sc->i >= sc->n || sc->s[sc->i] != '"')
      return fail(sc, "expected a string key");
    size_t off = sc->n_keys_bytes;
    if ((r = string(sc, true)))
      return r;
    if (sc->n_refs == sc->cap_refs) {
      size_t c = sc->cap_refs ? sc->cap_refs * 2 : 64;
      struct key_ref *q = realloc(sc->refs, c * sizeof(*q));
      if (!q)
        return -ENOMEM;
      sc->refs = q;
      sc->cap_refs = c;
    }
    sc->refs[sc->n_refs++] = (struct key_ref){off, sc->n_keys_bytes - off};
    sc->path[sc->depth - 1].key = sc->n_refs - 1;
    ws(sc);
    if (sc->i >= sc->n || sc->s[sc->i] != ':')
      return fail(sc, "expected ':'");
    sc->i++;
    if ((r = value(sc, depth)))
      return r;
    ws(sc);
    if (sc->i < sc->n && sc->s[sc->i] == ',') {
      sc->i++;
      continue;
    }
    if (sc->i < sc->n && sc->s[sc->i] == '}') {
      size_t nk = sc->n_refs - first_ref;
      if (nk > 1) {
        qsort_r(sc->refs + first_ref, nk, sizeof(struct key_ref), cmp_key, sc->keys);
        for (size_t j = first_ref + 1; j < sc->n_refs; j++)
          if (cmp_key(&sc->refs[j - 1], &sc->refs[j], sc->keys) == 0) {
            const struct key_ref *d = &sc->refs[j];
            return cm_diag_set(sc->diag, -CM_EJSON, "invalid JSON: duplicate key \"%.*s\"",
                               (int)(d->len > 64 ? 64 : d->len), d->len ? sc->keys + d->off : "");
          }
      }
      sc->n_refs = first_ref;
      sc->n_keys_bytes = first_byte;
      sc->i++;
      return 0;
    }
    return fail(sc, "expected ',' or '}'");
  }
}

static int array(struct scanner *sc, int depth) {
  sc->i++;
  ws(sc);
  if (sc->i < sc->n && sc->s[sc->i] == ']') {
    sc->i++;
    return 0;
  }
  for (size_t k = 0;; k++) {
    sc->path[sc->depth - 1].index = k;
    int r = value(sc, depth);
    if (r)
      return r;
    ws(sc);
    if (sc->i < sc->n && sc->s[sc->i] == ',') {
      sc->i++;
      continue;
    }
    if (sc->i < sc->n && sc->s[sc->i] == ']') {
      sc->i++;
      return 0;
    }
    return fail(sc, "expected ',' or ']'");
  }
}

static int literal(struct scanner *sc, const char *lit) {
  size_t n = strlen(lit);
  if (sc->n - sc->i < n || memcmp(sc->s + sc->i, lit, n) != 0)
    return fail(sc, sc->n - sc->i >= 3 && strncasecmp((const char *)sc->s + sc->i, "nan", 3) == 0
                        ? "unexpected character (NaN and Infinity are not JSON)"
                        : "unexpected character");
  sc->i += n;
  return 0;
}

static int value(struct scanner *sc, int depth) {
  ws(sc);
  if (sc->i >= sc->n)
    return fail(sc, "unexpected end");
  switch (sc->s[sc->i]) {
  case '{':
  case '[':
    if (depth + 1 > PP_JSON_MAX_DEPTH)
      return cm_diag_set(sc->diag, -CM_EJSON, "invalid JSON at byte %zu: nesting deeper than %d",
                         sc->i, PP_JSON_MAX_DEPTH);
  {
    sc->path[sc->depth++] = (struct level){.array = sc->s[sc->i] == '['};
    int r = sc->s[sc->i] == '{' ? object(sc, depth + 1) : array(sc, depth + 1);
    if (!r)
      sc->depth--;
    return r;
  }
  case '"': return string(sc, false);
  case 't': return literal(sc, "true");
  case 'f': return literal(sc, "false");
  case 'n': return literal(sc, "null");
  default: return number(sc);
  }
}

int pp_json_check(const char *text, size_t n_bytes, struct cm_diag *diag) {
  struct scanner sc = {.s = (const unsigned char *)text, .n = n_bytes, .diag = diag};
  if (!text)
    return cm_diag_set(diag, -CM_EJSON, "invalid JSON: empty body");
  int r = value(&sc, 0);
  if (!r) {
    ws(&sc);
    if (sc.i != sc.n)
      r = fail(&sc, "trailing characters after the value");
  }
  free(sc.keys);
  free(sc.refs);
  return r;
}

int pp_json_parse(const char *text, size_t n_bytes, json_object **ret_root, struct cm_diag *diag) {
  int r = pp_json_check(text, n_bytes, diag);
  if (r)
    return r;
  if (n_bytes > INT32_MAX)
    return cm_diag_set(diag, -CM_EJSON, "invalid JSON: body over 2 GiB");
  json_tokener *tok = json_tokener_new_ex(PP_JSON_MAX_DEPTH + 1);
  if (!tok)
    return -ENOMEM;
  json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
  json_object *root = json_tokener_parse_ex(tok, text, (int)n_bytes);
  enum json_tokener_error e = json_tokener_get_error(tok);
  if (!root && e == json_tokener_continue) {
    /* a bare number at the end needs a delimiter to end: the checked text allows whitespace */
    root = json_tokener_parse_ex(tok, " ", 1);
    e = json_tokener_get_error(tok);
  }
  if (e != json_tokener_success) { /* root may be NULL on success: the JSON value null */
    r = cm_diag_set(diag, -CM_EJSON, "invalid JSON: %s", json_tokener_error_desc(e));
    json_object_put(root);
  }
  json_tokener_free(tok);
  if (!r)
    *ret_root = root;
  return r;
}

