/* The strict pre-scan of pp_json_strict.h: one pass over the bytes with a stack of open objects
 * whose decoded keys are compared when the object closes. Syntax errors it does not need to
 * understand (stray characters, bad literals) are left to json-c, which reports them after. */
#include "pp_json_strict.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct key {
  char *bytes; /* decoded UTF-8 key, heap */
  size_t n;    /* bytes in the key */
};

struct scan {
  const char *s;       /* input */
  size_t n;            /* input bytes */
  size_t i;            /* cursor */
  struct key *keys;    /* stack of keys of every open object, innermost last */
  size_t n_keys;       /* keys in use */
  size_t cap_keys;     /* capacity of keys */
  size_t *obj_start;   /* [depth] index in keys where each open object's keys start (-1: array) */
  int depth;           /* open containers */
  struct cm_diag *diag;
};

static int hexval(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

static int read_u4(struct scan *sc, size_t at, unsigned *ret) {
  if (at + 4 > sc->n)
    return -1;
  unsigned v = 0;
  for (int k = 0; k < 4; k++) {
    int h = hexval(sc->s[at + k]);
    if (h < 0)
      return -1;
    v = v * 16 + (unsigned)h;
  }
  *ret = v;
  return 0;
}

static size_t put_utf8(char *o, unsigned cp) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xc0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xe0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  o[0] = (char)(0xf0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  o[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* Scans a string starting at the opening quote; decodes it into *ret (heap) when ret != NULL.
 * Returns 0, 1 when the string is malformed in a way json-c reports itself, or a negative code. */
static int scan_string(struct scan *sc, char **ret, size_t *ret_n) {
  size_t start = ++sc->i;
  char *out = NULL;
  size_t o = 0;
  if (ret) {
    /* decoded length never exceeds the raw length */
    size_t end = start;
    while (end < sc->n && sc->s[end] != '"')
      end += sc->s[end] == '\\' ? 2 : 1;
    out = malloc(end - start + 4);
    if (!out)
      return -ENOMEM;
  }
  while (sc->i < sc->n) {
    unsigned char c = (unsigned char)sc->s[sc->i];
    if (c == '"') {
      sc->i++;
      if (ret) {
        *ret = out;
        *ret_n = o;
      }
      return 0;
    }
    if (c != '\\') {
      if (out)
        out[o++] = (char)c;
      sc->i++;
      continue;
    }
    if (sc->i + 1 >= sc->n)
      break;
    char e = sc->s[sc->i + 1];
    if (e != 'u') {
      static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
      const char *p = strchr(from, e);
      if (!p || e == '\0')
        break;
      if (out)
        out[o++] = to[p - from];
      sc->i += 2;
      continue;
    }
    unsigned u, lo;
    if (read_u4(sc, sc->i + 2, &u) != 0)
      break;
    sc->i += 6;
    if (u >= 0xdc00 && u <= 0xdfff)
      goto lone;
    if (u >= 0xd800 && u <= 0xdbff) {
      if (sc->i + 1 >= sc->n || sc->s[sc->i] != '\\' || sc->s[sc->i + 1] != 'u' ||
          read_u4(sc, sc->i + 2, &lo) != 0 || lo < 0xdc00 || lo > 0xdfff)
        goto lone;
      sc->i += 6;
      u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
    }
    if (out)
      o += put_utf8(out + o, u);
  }
  free(out);
  return 1; /* unterminated or bad escape: json-c reports it */
lone:
  free(out);
  return cm_diag_set(sc->diag, -CM_EFORMAT, "lone surrogate in a JSON string");
}

/* Digits of an integer literal compared against 2^63 (negative) or 2^64 - 1 (positive). */
static bool int_fits(const char *d, size_t n, bool neg) {
  static const char max_pos[] = "18446744073709551615", max_neg[] = "9223372036854775808";
  const char *lim = neg ? max_neg : max_pos;
  size_t ln = strlen(lim);
  if (n != ln)
    return n < ln;
  return memcmp(d, lim, n) <= 0;
}

static int key_cmp(const void *a, const void *b) {
  const struct key *x = a, *y = b;
  size_t m = x->n < y->n ? x->n : y->n;
  int c = memcmp(x->bytes, y->bytes, m);
  return c ? c : (x->n > y->n) - (x->n < y->n);
}

static int close_object(struct scan *sc, size_t start) {
  size_t k = sc->n_keys - start;
  int rc = 0;
  if (k > 1) {
    qsort(sc->keys + start, k, sizeof *sc->keys, key_cmp);
    for (size_t j = start + 1; j < sc->n_keys && !rc; j++)
      if (key_cmp(&sc->keys[j - 1], &sc->keys[j]) == 0)
        rc = cm_diag_set(sc->diag, -CM_EFORMAT, "duplicate JSON key");
  }
  for (size_t j = start; j < sc->n_keys; j++)
    free(sc->keys[j].bytes);
  sc->n_keys = start;
  return rc;
}

/* Returns 0 when the pre-scan found nothing (json-c still judges the syntax), or an error. */
static int prescan(struct scan *sc) {
  bool expect_key = false; /* the next string in the innermost object is a key */
  while (sc->i < sc->n) {
    char c = sc->s[sc->i];
    switch (c) {
    case '{':
    case '[':
      if (sc->depth >= PP_JSON_MAX_DEPTH)
        return cm_diag_set(sc->diag, -CM_EFORMAT, "JSON nesting deeper than %d levels",
                           PP_JSON_MAX_DEPTH);
      sc->obj_start[sc->depth++] = c == '{' ? sc->n_keys : SIZE_MAX;
      expect_key = c == '{';
      sc->i++;
      break;
    case '}':
    case ']':
      if (sc->depth == 0)
        return 0; /* json-c reports it */
      sc->depth--;
      if (sc->obj_start[sc->depth] != SIZE_MAX) {
        int rc = close_object(sc, sc->obj_start[sc->depth]);
        if (rc)
          return rc;
      }
      expect_key = false;
      sc->i++;
      break;
    case ',':
      expect_key = sc->depth > 0 && sc->obj_start[sc->depth - 1] != SIZE_MAX;
      sc->i++;
      break;
    case '"': {
      if (expect_key) {
        if (sc->n_keys == sc->cap_keys) {
          size_t nc = sc->cap_keys ? 2 * sc->cap_keys : 64;
          struct key *nk = realloc(sc->keys, nc * sizeof *nk);
          if (!nk)
            return -ENOMEM;
          sc->keys = nk;
          sc->cap_keys = nc;
        }
        struct key *k = &sc->keys[sc->n_keys];
        int rc = scan_string(sc, &k->bytes, &k->n);
        if (rc < 0)
          return rc;
        if (rc > 0)
          return 0;
        sc->n_keys++;
        expect_key = false;
        if (memchr(k->bytes, '\0', k->n))
          return cm_diag_set(sc->diag, -CM_EUNSUPPORTED,
                             "object keys containing U+0000 are not supported (byte %zu)",
                             sc->i);
      } else {
        int rc = scan_string(sc, NULL, NULL);
        if (rc)
          return rc < 0 ? rc : 0;
      }
      break;
    }
    case 'N':
    case 'I':
      return cm_diag_set(sc->diag, -CM_EFORMAT, "non-finite JSON number");
    case '-':
    case '0':
    case '1':
    case '2':
    case '3':
    case '4':
    case '5':
    case '6':
    case '7':
    case '8':
    case '9': {
      bool neg = c == '-';
      size_t at = sc->i;
      if (neg) {
        sc->i++;
        if (sc->i < sc->n && sc->s[sc->i] == 'I')
          return cm_diag_set(sc->diag, -CM_EFORMAT, "non-finite JSON number");
      }
      size_t d0 = sc->i;
      while (sc->i < sc->n && sc->s[sc->i] >= '0' && sc->s[sc->i] <= '9')
        sc->i++;
      size_t d1 = sc->i;
      bool is_int = true;
      while (sc->i < sc->n && sc->s[sc->i] != '\0' &&
             (strchr(".eE+-", sc->s[sc->i]) || (sc->s[sc->i] >= '0' && sc->s[sc->i] <= '9'))) {
        is_int = false; /* a fraction or exponent follows: a float */
        sc->i++;
      }
      /* leading zeros are a syntax error json-c reports; skip them here */
      size_t z = d0;
      while (z + 1 < d1 && sc->s[z] == '0')
        z++;
      if (is_int && d1 > d0 && !int_fits(sc->s + z, d1 - z, neg))
        return cm_diag_set(sc->diag, -CM_ELIMIT,
                           "integer at byte %zu is outside the 64-bit range this server accepts",
                           at);
      break;
    }
    default:
      sc->i++;
      break;
    }
  }
  return 0;
}

int pp_json_parse_strict(const char *bytes, size_t n_bytes, json_object **ret_root,
                         struct cm_diag *diag) {
  if (n_bytes > PP_JSON_MAX_BYTES)
    return cm_diag_set(diag, -CM_ELIMIT, "JSON text of %zu bytes exceeds %zu", n_bytes,
                       PP_JSON_MAX_BYTES);
  if (n_bytes > INT32_MAX)
    return cm_diag_set(diag, -CM_ELIMIT, "JSON text too large");
  struct scan sc = {.s = bytes, .n = n_bytes, .diag = diag};
  json_tokener *tok = NULL;
  json_object *root = NULL;
  int rc = 0;
  sc.obj_start = malloc((PP_JSON_MAX_DEPTH + 1) * sizeof *sc.obj_start);
  if (!sc.obj_start) {
    rc = -ENOMEM;
    goto out;
  }
  rc = prescan(&sc);
  if (rc)
    goto out;
  tok = json_tokener_new_ex(PP_JSON_MAX_DEPTH + 1);
  if (!tok) {
    rc = -ENOMEM;
    goto out;
  }
  json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
  root = json_tokener_parse_ex(tok, bytes, (int)n_bytes);
  enum json_tokener_error e = json_tokener_get_error(tok);
  if (e == json_tokener_continue) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "invalid JSON: unexpected end of input");
    goto out;
  }
  if (e != json_tokener_success) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "invalid JSON: %s at byte %zu", json_tokener_error_desc(e),
                     json_tokener_get_parse_end(tok));
    goto out;
  }
  for (size_t i = json_tokener_get_parse_end(tok); i < n_bytes; i++) {
    char c = bytes[i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
      rc = cm_diag_set(diag, -CM_EFORMAT, "invalid JSON: extra data at byte %zu", i);
      goto out;
    }
  }
  *ret_root = root;
  root = NULL;
out:
  if (sc.keys) {
    for (size_t j = 0; j < sc.n_keys; j++)
      free(sc.keys[j].bytes);
    free(sc.keys);
  }
  free(sc.obj_start);
  json_object_put(root);
  if (tok)
    json_tokener_free(tok);
  return rc;
}
