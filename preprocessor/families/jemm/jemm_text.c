/* Python's text rules as the JEMM reference meets them (spec/jemm.md §3.5-3.8): the str.isspace
 * set, flat/strip, str() and repr() of JSON values, compact json.dumps, and tool-spec summaries.
 * Integers come from json-c as int64/uint64, exact (pp_json_check refused wider ones; a tool
 * description's literals are checked here). Tool descriptions must pass Python's json.loads grammar
 * (NaN/Infinity and duplicate keys included) before json-c parses them; a lone surrogate escape
 * inside one becomes U+FFFD there (Python keeps it), the one known difference. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jemm.h"
#include "pp_pyjson.h"

extern const uint32_t pp_jemm_unprintable[][2];
extern const size_t pp_jemm_n_unprintable;

bool pp_jemm_is_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool pp_jemm_is_printable(uint32_t c) {
  if (c < 0x80)
    return c >= 0x20 && c < 0x7F;
  size_t lo = 0, hi = pp_jemm_n_unprintable;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c < pp_jemm_unprintable[mid][0])
      hi = mid;
    else if (c > pp_jemm_unprintable[mid][1])
      lo = mid + 1;
    else
      return false;
  }
  return true;
}

/* Decodes the code point at s[*i] (valid UTF-8; json-c strings from the strict parser, or the
 * tokenizer-checked text) and advances *i. */
static uint32_t next_cp(const char *s, size_t n, size_t *i) {
  const unsigned char *u = (const unsigned char *)s + *i;
  size_t left = n - *i;
  if (u[0] < 0x80 || left < 2) {
    *i += 1;
    return u[0];
  }
  if (u[0] < 0xE0) {
    *i += 2;
    return ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
  }
  if (u[0] < 0xF0 || left < 4) {
    *i += left < 3 ? left : 3;
    return left < 3
               ? 0xFFFD
               : ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
  }
  *i += 4;
  return ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
         ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
}

/* Byte range [*ret_a, *ret_b) of t without leading and trailing W. */
static void trim(const char *t, size_t n, size_t *ret_a, size_t *ret_b) {
  size_t a = 0, b = 0, i = 0;
  bool seen = false;
  while (i < n) {
    size_t at = i;
    uint32_t c = next_cp(t, n, &i);
    if (!pp_jemm_is_space(c)) {
      if (!seen)
        a = at;
      seen = true;
      b = i;
    }
  }
  *ret_a = seen ? a : 0;
  *ret_b = seen ? b : 0;
}

int pp_jemm_strip(struct pp_buf *b, const char *t, size_t n) {
  size_t x, y;
  trim(t, n, &x, &y);
  return pp_buf_put(b, t + x, y - x);
}

int pp_jemm_flat(struct pp_buf *b, const char *t, size_t n) {
  size_t x, y, i;
  trim(t, n, &x, &y);
  i = x;
  int rc = 0;
  bool in_space = false;
  size_t run = i; /* start of the pending non-space bytes */
  while (i < y && !rc) {
    size_t at = i;
    uint32_t c = next_cp(t, y, &i);
    if (pp_jemm_is_space(c)) {
      if (!in_space)
        rc = pp_buf_put(b, t + run, at - run);
      in_space = true;
    } else if (in_space) {
      rc = pp_buf_put(b, " ", 1);
      in_space = false;
      run = at;
    }
  }
  if (!rc && !in_space)
    rc = pp_buf_put(b, t + run, y - run);
  return rc;
}

/* ---- str(), repr(), compact JSON ---- */

/* An integer, exact: the request was checked to hold none outside 64 bits (pp_json_check), a
 * tool description likewise (check_integers). */
static int put_int(struct pp_buf *b, json_object *v) {
  char num[24];
  return pp_buf_puts(b, pp_pyjson_int_text(v, num));
}

/* Python float repr, or json.dumps's spelling of non-finite values when `json`. */
static int put_double(struct pp_buf *b, double x, bool json) {
  if (isnan(x))
    return pp_buf_puts(b, json ? "NaN" : "nan");
  if (isinf(x))
    return pp_buf_puts(b, x > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf"));
  char num[PP_PYJSON_FLOAT_MAX];
  size_t n = pp_pyjson_float(x, num);
  return pp_buf_put(b, num, n);
}

/* Python repr(str): quote choice, backslash escapes, \xhh \uhhhh \Uhhhhhhhh for non-printables. */
static int put_repr_string(struct pp_buf *b, const char *s, size_t n) {
  bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
  char quote = sq && !dq ? '"' : '\'';
  int rc = pp_buf_put(b, &quote, 1);
  size_t i = 0;
  while (i < n && !rc) {
    size_t at = i;
    uint32_t c = next_cp(s, n, &i);
    char esc[12];
    if (c == (uint32_t)quote || c == '\\') {
      esc[0] = '\\', esc[1] = (char)c;
      rc = pp_buf_put(b, esc, 2);
    } else if (c == '\t' || c == '\n' || c == '\r') {
      esc[0] = '\\', esc[1] = c == '\t' ? 't' : c == '\n' ? 'n' : 'r';
      rc = pp_buf_put(b, esc, 2);
    } else if (pp_jemm_is_printable(c)) {
      rc = pp_buf_put(b, s + at, i - at);
    } else if (c < 0x100) {
      snprintf(esc, sizeof esc, "\\x%02x", c);
      rc = pp_buf_puts(b, esc);
    } else if (c < 0x10000) {
      snprintf(esc, sizeof esc, "\\u%04x", c);
      rc = pp_buf_puts(b, esc);
    } else {
      snprintf(esc, sizeof esc, "\\U%08x", c);
      rc = pp_buf_puts(b, esc);
    }
  }
  return rc ? rc : pp_buf_put(b, &quote, 1);
}

/* repr() inside containers (top == false) or str() at the top (top == true). */
static int py_text(struct pp_buf *b, json_object *v, bool top, int depth,
                   struct cm_diag *diag) {
  if (depth > 256)
    return cm_diag_set(diag, -CM_EREQUEST, "value nested too deeply");
  switch (json_object_get_type(v)) {
  case json_type_null:
    return pp_buf_puts(b, "None");
  case json_type_boolean:
    return pp_buf_puts(b, json_object_get_boolean(v) ? "True" : "False");
  case json_type_int:
    return put_int(b, v);
  case json_type_double:
    return put_double(b, json_object_get_double(v), false);
  case json_type_string: {
    const char *s = json_object_get_string(v);
    size_t n = (size_t)json_object_get_string_len(v);
    return top ? pp_buf_put(b, s, n) : put_repr_string(b, s, n);
  }
  case json_type_array: {
    int rc = pp_buf_puts(b, "[");
    size_t n = json_object_array_length(v);
    for (size_t i = 0; i < n && !rc; i++) {
      if (i)
        rc = pp_buf_puts(b, ", ");
      if (!rc)
        rc = py_text(b, json_object_array_get_idx(v, i), false, depth + 1, diag);
    }
    return rc ? rc : pp_buf_puts(b, "]");
  }
  case json_type_object: {
    int rc = pp_buf_puts(b, "{");
    bool first = true;
    json_object_object_foreach(v, k, val) {
      if (rc)
        break;
      if (!first)
        rc = pp_buf_puts(b, ", ");
      first = false;
      if (!rc)
        rc = put_repr_string(b, k, strlen(k));
      if (!rc)
        rc = pp_buf_puts(b, ": ");
      if (!rc)
        rc = py_text(b, val, false, depth + 1, diag);
    }
    return rc ? rc : pp_buf_puts(b, "}");
  }
  }
  return -EINVAL;
}

int pp_jemm_py_str(struct pp_buf *b, json_object *v, struct cm_diag *diag) {
  return py_text(b, v, true, 0, diag);
}

static int compact(struct pp_buf *b, json_object *v, int depth, struct cm_diag *diag) {
  if (depth > 256)
    return cm_diag_set(diag, -CM_EREQUEST, "value nested too deeply");
  switch (json_object_get_type(v)) {
  case json_type_null:
    return pp_buf_puts(b, "null");
  case json_type_boolean:
    return pp_buf_puts(b, json_object_get_boolean(v) ? "true" : "false");
  case json_type_int:
    return put_int(b, v);
  case json_type_double:
    return put_double(b, json_object_get_double(v), true);
  case json_type_string:
    return pp_pyjson_string(b, json_object_get_string(v), (size_t)json_object_get_string_len(v));
  case json_type_array: {
    int rc = pp_buf_puts(b, "[");
    size_t n = json_object_array_length(v);
    for (size_t i = 0; i < n && !rc; i++) {
      if (i)
        rc = pp_buf_puts(b, ",");
      if (!rc)
        rc = compact(b, json_object_array_get_idx(v, i), depth + 1, diag);
    }
    return rc ? rc : pp_buf_puts(b, "]");
  }
  case json_type_object: {
    int rc = pp_buf_puts(b, "{");
    bool first = true;
    json_object_object_foreach(v, k, val) {
      if (rc)
        break;
      if (!first)
        rc = pp_buf_puts(b, ",");
      first = false;
      if (!rc)
        rc = pp_pyjson_string(b, k, strlen(k));
      if (!rc)
        rc = pp_buf_puts(b, ":");
      if (!rc)
        rc = compact(b, val, depth + 1, diag);
    }
    return rc ? rc : pp_buf_puts(b, "}");
  }
  }
  return -EINVAL;
}

int pp_jemm_compact_json(struct pp_buf *b, json_object *v, struct cm_diag *diag) {
  return compact(b, v, 0, diag);
}

/* ---- tool specs ---- */

/* flat(str(v)) appended to b, for values of a tool spec whose integers check_integers passed. */
static int flat_str(struct pp_buf *b, json_object *v, struct cm_diag *diag) {
  struct pp_buf t = {0};
  int rc = py_text(&t, v, true, 0, diag);
  if (!rc)
    rc = pp_jemm_flat(b, t.bytes ? t.bytes : "", t.n);
  pp_buf_fini(&t);
  return rc;
}

/* Refuses integer literals outside int64/uint64 in JSON text (json-c would clamp them). */
static int check_integers(const char *s, size_t n, struct cm_diag *diag) {
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '"') {
      for (i++; i < n && s[i] != '"'; i++)
        if (s[i] == '\\')
          i++;
      continue;
    }
    if (s[i] != '-' && (s[i] < '0' || s[i] > '9'))
      continue;
    size_t a = i;
    bool neg = s[i] == '-', frac = false;
    if (neg)
      i++;
    size_t d = i;
    while (i < n && s[i] >= '0' && s[i] <= '9')
      i++;
    size_t nd = i - d;
    while (i < n && (s[i] == '.' || s[i] == 'e' || s[i] == 'E' || s[i] == '+' || s[i] == '-' ||
                     (s[i] >= '0' && s[i] <= '9')))
      frac = true, i++;
    i--;
    if (frac || nd < 19)
      continue;
    const char *lim = neg ? "9223372036854775808" : "18446744073709551615";
    size_t nl = strlen(lim);
    if (nd > nl || (nd == nl && memcmp(s + d, lim, nl) > 0))
      return cm_diag_set(diag, -CM_EREQUEST,
                         "integer %.*s%s in a tool description is outside "
                         "64 bits",
                         (int)(nd > 24 ? 24 : nd + neg), s + a, nd > 24 ? "..." : "");
  }
  return 0;
}

/* The parameter pieces of a tool's "parameters" (spec §3.5). */
static int put_params(struct pp_buf *b, json_object *params, struct cm_diag *diag) {
  if (!json_object_is_type(params, json_type_object))
    return 0;
  json_object *props = NULL, *req = NULL;
  if (!json_object_object_get_ex(params, "properties", &props) ||
      !json_object_is_type(props, json_type_object))
    props = params;
  if (json_object_object_get_ex(params, "required", &req) &&
      json_object_is_type(req, json_type_array)) {
    for (size_t i = 0; i < json_object_array_length(req); i++) {
      json_object *m = json_object_array_get_idx(req, i);
      if (json_object_is_type(m, json_type_array) || json_object_is_type(m, json_type_object))
        return cm_diag_set(diag, -CM_EREQUEST, "unhashable type: '%s'",
                           json_object_is_type(m, json_type_array) ? "list" : "dict");
    }
  } else {
    req = NULL;
  }
  int rc = 0;
  size_t n_pieces = 0;
  json_object_object_foreach(props, key, spec) {
    bool is_obj = json_object_is_type(spec, json_type_object);
    if (!is_obj && (!strcmp(key, "properties") || !strcmp(key, "required") || !strcmp(key, "type")))
      continue;
    rc = pp_buf_puts(b, n_pieces++ ? ", " : " | params: ");
    if (!rc)
      rc = pp_buf_puts(b, key);
    if (rc || !is_obj)
      continue;
    for (size_t i = 0; req && i < json_object_array_length(req) && !rc; i++) {
      json_object *m = json_object_array_get_idx(req, i);
      if (json_object_is_type(m, json_type_string) && !strcmp(json_object_get_string(m), key)) {
        rc = pp_buf_puts(b, "*");
        break;
      }
    }
    json_object *dflt = NULL;
    if (rc || !json_object_object_get_ex(spec, "default", &dflt) || !dflt ||
        (json_object_is_type(dflt, json_type_string) && json_object_get_string_len(dflt) == 0))
      continue;
    struct pp_buf t = {0};
    rc = flat_str(&t, dflt, diag);
    size_t cut = 0, cps = 0;
    while (!rc && cut < t.n && cps < 24) { /* the first 24 code points */
      next_cp(t.bytes, t.n, &cut);
      cps++;
    }
    if (!rc)
      rc = pp_buf_puts(b, "=");
    if (!rc)
      rc = pp_buf_put(b, t.bytes, cut);
    pp_buf_fini(&t);
    if (rc)
      break;
  }
  return rc;
}

/* Python json.loads whitespace: space, TAB, LF, CR. */
static bool json_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Grammar of Python's json.loads (strict=True): RFC 8259 plus NaN, Infinity, -Infinity; no raw
 * control characters in strings, no single quotes, comments or trailing commas (json-c's strict
 * mode lets some of those through). Duplicate keys are grammatical. Returns the end offset of
 * one value at s[i], or 0 when there is none. */
static size_t py_json_value(const char *s, size_t n, size_t i, int depth);

static size_t py_json_ws(const char *s, size_t n, size_t i) {
  while (i < n && json_ws(s[i]))
    i++;
  return i;
}

static size_t py_json_lit(const char *s, size_t n, size_t i, const char *lit) {
  size_t k = strlen(lit);
  return n - i >= k && memcmp(s + i, lit, k) == 0 ? i + k : 0;
}

static size_t py_json_string(const char *s, size_t n, size_t i) {
  for (i++; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"')
      return i + 1;
    if (c < 0x20)
      return 0;
    if (c == '\\') {
      if (++i >= n || !s[i] || !strchr("\"\\/bfnrtu", s[i]))
        return 0;
      if (s[i] == 'u')
        for (int k = 0; k < 4; k++)
          if (++i >= n || !s[i] || !strchr("0123456789abcdefABCDEF", s[i]))
            return 0;
    }
  }
  return 0;
}

static size_t py_json_number(const char *s, size_t n, size_t i) {
  size_t a = i;
  if (i < n && s[i] == '-')
    i++;
  if (i < n && s[i] == '0')
    i++;
  else if (i < n && s[i] >= '1' && s[i] <= '9')
    while (i < n && s[i] >= '0' && s[i] <= '9')
      i++;
  else
    return 0;
  if (i + 1 < n && s[i] == '.' && s[i + 1] >= '0' && s[i + 1] <= '9')
    for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++)
      ;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < n && (s[j] == '+' || s[j] == '-'))
      j++;
    if (j < n && s[j] >= '0' && s[j] <= '9') {
      for (i = j; i < n && s[i] >= '0' && s[i] <= '9'; i++)
        ;
    }
  }
  return i > a ? i : 0;
}

static size_t py_json_value(const char *s, size_t n, size_t i, int depth) {
  i = py_json_ws(s, n, i);
  if (i >= n || depth > 200)
    return 0;
  char c = s[i];
  if (c == '"')
    return py_json_string(s, n, i);
  if (c == '{' || c == '[') {
    char close = c == '{' ? '}' : ']';
    i = py_json_ws(s, n, i + 1);
    if (i < n && s[i] == close)
      return i + 1;
    for (;;) {
      if (c == '{') {
        if (i >= n || s[i] != '"' || !(i = py_json_string(s, n, i)))
          return 0;
        i = py_json_ws(s, n, i);
        if (i >= n || s[i] != ':')
          return 0;
        i++;
      }
      if (!(i = py_json_value(s, n, i, depth + 1)))
        return 0;
      i = py_json_ws(s, n, i);
      if (i < n && s[i] == close)
        return i + 1;
      if (i >= n || s[i] != ',')
        return 0;
      i = py_json_ws(s, n, i + 1);
    }
  }
  size_t e;
  if ((e = py_json_lit(s, n, i, "true")) || (e = py_json_lit(s, n, i, "false")) ||
      (e = py_json_lit(s, n, i, "null")) || (e = py_json_lit(s, n, i, "NaN")) ||
      (e = py_json_lit(s, n, i, "Infinity")) || (e = py_json_lit(s, n, i, "-Infinity")))
    return e;
  return py_json_number(s, n, i);
}

int pp_jemm_tool_text(struct pp_buf *b, const char *desc, size_t n, struct cm_diag *diag) {
  size_t a = 0, e = n;
  while (a < e && json_ws(desc[a]))
    a++;
  while (e > a && json_ws(desc[e - 1]))
    e--;
  json_object *tool = NULL;
  if (e > a && py_json_value(desc, e, a, 0) == e && memchr(desc + a, '\0', e - a) == NULL) {
    json_tokener *tk = json_tokener_new();
    if (!tk)
      return -ENOMEM;
    json_tokener_set_flags(tk, JSON_TOKENER_STRICT);
    tool = json_tokener_parse_ex(tk, desc + a, (int)(e - a));
    if (tool && (json_tokener_get_error(tk) != json_tokener_success ||
                 json_tokener_get_parse_end(tk) != e - a)) {
      json_object_put(tool);
      tool = NULL;
    }
    json_tokener_free(tk);
  }
  json_object *name = NULL, *summary = NULL, *params = NULL;
  if (!tool || !json_object_is_type(tool, json_type_object) ||
      !json_object_object_get_ex(tool, "name", &name)) {
    json_object_put(tool);
    return pp_jemm_flat(b, desc, n);
  }
  int rc = check_integers(desc + a, e - a, diag);
  if (!rc)
    rc = flat_str(b, name, diag);
  if (!rc && json_object_object_get_ex(tool, "description", &summary)) {
    struct pp_buf t = {0};
    rc = flat_str(&t, summary, diag);
    if (!rc && t.n) {
      rc = pp_buf_puts(b, " \xE2\x80\x94 ");
      if (!rc)
        rc = pp_buf_put(b, t.bytes, t.n);
    }
    pp_buf_fini(&t);
  }
  if (!rc && json_object_object_get_ex(tool, "parameters", &params))
    rc = put_params(b, params, diag);
  json_object_put(tool);
  return rc;
}
