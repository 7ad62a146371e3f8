/* Python-compatible JSON text (see pp_pyjson.h). Floats: the shortest precision whose correctly
 * rounded digits read back to the same double (glibc printf/strtod are exact), then CPython's
 * layout rules. Integers come from json-c as int64 or uint64 (pp_json_check refuses wider). */
#include "pp_pyjson.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pp_buf_put(struct pp_buf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->n + n + 1)
      nc *= 2;
    char *nb = realloc(b->bytes, nc);
    if (!nb)
      return -ENOMEM;
    b->bytes = nb;
    b->cap = nc;
  }
  if (n)
    memcpy(b->bytes + b->n, s, n);
  b->n += n;
  b->bytes[b->n] = '\0';
  return 0;
}

int pp_buf_puts(struct pp_buf *b, const char *s) {
  return pp_buf_put(b, s, strlen(s));
}

void pp_buf_fini(struct pp_buf *b) {
  free(b->bytes);
  b->bytes = NULL;
  b->n = b->cap = 0;
}

size_t pp_pyjson_float(double x, char *out) {
  if (x == 0.0)
    return (size_t)snprintf(out, PP_PYJSON_FLOAT_MAX, "%s", signbit(x) ? "-0.0" : "0.0");
  char tmp[40];
  int p;
  for (p = 1; p < 17; p++) {
    snprintf(tmp, sizeof tmp, "%.*e", p - 1, x);
    if (strtod(tmp, NULL) == x)
      break;
  }
  if (p == 17)
    snprintf(tmp, sizeof tmp, "%.16e", x);
  /* tmp = [-]d[.ddd]e(+|-)XX */
  char digits[20];
  size_t nd = 0;
  const char *s = tmp;
  bool neg = *s == '-';
  if (neg)
    s++;
  for (; *s && *s != 'e'; s++)
    if (*s != '.')
      digits[nd++] = *s;
  int e10 = atoi(s + 1);
  while (nd > 1 && digits[nd - 1] == '0')
    nd--;
  char *o = out;
  if (neg)
    *o++ = '-';
  if (e10 >= -4 && e10 < 16) {
    if (e10 < 0) {
      *o++ = '0';
      *o++ = '.';
      for (int k = 0; k < -e10 - 1; k++)
        *o++ = '0';
      memcpy(o, digits, nd);
      o += nd;
    } else {
      size_t int_digits = (size_t)e10 + 1;
      for (size_t k = 0; k < int_digits; k++)
        *o++ = k < nd ? digits[k] : '0';
      *o++ = '.';
      if (nd > int_digits) {
        memcpy(o, digits + int_digits, nd - int_digits);
        o += nd - int_digits;
      } else {
        *o++ = '0';
      }
    }
    *o = '\0';
  } else {
    *o++ = digits[0];
    if (nd > 1) {
      *o++ = '.';
      memcpy(o, digits + 1, nd - 1);
      o += nd - 1;
    }
    snprintf(o, (size_t)(out + PP_PYJSON_FLOAT_MAX - o), "e%c%02d", e10 < 0 ? '-' : '+',
             e10 < 0 ? -e10 : e10);
    o += strlen(o);
  }
  return (size_t)(o - out);
}

int pp_pyjson_string(struct pp_buf *b, const char *text, size_t n) {
  int rc = pp_buf_put(b, "\"", 1);
  size_t run = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    unsigned char c = (unsigned char)text[i];
    const char *esc = NULL;
    char u[8];
    switch (c) {
    case '"': esc = "\\\""; break;
    case '\\': esc = "\\\\"; break;
    case '\n': esc = "\\n"; break;
    case '\r': esc = "\\r"; break;
    case '\t': esc = "\\t"; break;
    case '\b': esc = "\\b"; break;
    case '\f': esc = "\\f"; break;
    default:
      if (c < 0x20) {
        snprintf(u, sizeof u, "\\u%04x", c);
        esc = u;
      }
    }
    if (!esc)
      continue;
    rc = pp_buf_put(b, text + run, i - run);
    if (!rc)
      rc = pp_buf_puts(b, esc);
    run = i + 1;
  }
  if (!rc)
    rc = pp_buf_put(b, text + run, n - run);
  if (!rc)
    rc = pp_buf_put(b, "\"", 1);
  return rc;
}

struct member {
  const char *key; /* borrowed from the json-c object */
  size_t n;        /* key bytes */
  json_object *v;  /* value, borrowed */
};

static int member_cmp(const void *a, const void *b) {
  const struct member *x = a, *y = b;
  size_t m = x->n < y->n ? x->n : y->n;
  int c = memcmp(x->key, y->key, m);
  return c ? c : (x->n > y->n) - (x->n < y->n);
}

int pp_pyjson_dump(struct pp_buf *b, json_object *v, bool sort_keys, struct cm_diag *diag) {
  char num[PP_PYJSON_FLOAT_MAX];
  switch (json_object_get_type(v)) {
  case json_type_null: return pp_buf_puts(b, "null");
  case json_type_boolean: return pp_buf_puts(b, json_object_get_boolean(v) ? "true" : "false");
  case json_type_double: {
    double x = json_object_get_double(v);
    if (!isfinite(x))
      return cm_diag_set(diag, -CM_EREQUEST, "Out of range float values are not JSON compliant");
    size_t len = pp_pyjson_float(x, num);
    return pp_buf_put(b, num, len);
  }
  case json_type_int: /* exact: pp_json_check refused integers outside 64 bits */
    return pp_buf_puts(b, pp_pyjson_int_text(v, num));
  case json_type_string:
    return pp_pyjson_string(b, json_object_get_string(v), (size_t)json_object_get_string_len(v));
  case json_type_array: {
    size_t n = json_object_array_length(v);
    int rc = pp_buf_put(b, "[", 1);
    for (size_t i = 0; i < n && !rc; i++) {
      if (i)
        rc = pp_buf_put(b, ", ", 2);
      if (!rc)
        rc = pp_pyjson_dump(b, json_object_array_get_idx(v, i), sort_keys, diag);
    }
    return rc ? rc : pp_buf_put(b, "]", 1);
  }
  case json_type_object: {
    size_t n = (size_t)json_object_object_length(v), k = 0;
    struct member *m = malloc((n ? n : 1) * sizeof *m);
    if (!m)
      return -ENOMEM;
    json_object_object_foreach(v, key, val) {
      m[k].key = key;
      m[k].n = strlen(key);
      m[k].v = val;
      k++;
    }
    if (sort_keys)
      qsort(m, n, sizeof *m, member_cmp);
    int rc = pp_buf_put(b, "{", 1);
    for (size_t i = 0; i < n && !rc; i++) {
      if (i)
        rc = pp_buf_put(b, ", ", 2);
      if (!rc)
        rc = pp_pyjson_string(b, m[i].key, m[i].n);
      if (!rc)
        rc = pp_buf_put(b, ": ", 2);
      if (!rc)
        rc = pp_pyjson_dump(b, m[i].v, sort_keys, diag);
    }
    free(m);
    return rc ? rc : pp_buf_put(b, "}", 1);
  }
  }
  return cm_diag_set(diag, -EINVAL, "unknown JSON value type");
}

char *pp_pyjson_int_text(json_object *v, char buf[24]) {
  int64_t i = json_object_get_int64(v);
  if (i == INT64_MAX) /* json-c's int64 view of a uint64 above it */
    snprintf(buf, 24, "%" PRIu64, json_object_get_uint64(v));
  else
    snprintf(buf, 24, "%" PRId64, i);
  return buf;
}
