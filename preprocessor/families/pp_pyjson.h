/* Text exactly as Python's json.dumps(v, ensure_ascii=False, allow_nan=False) writes it, with or
 * without sort_keys: separators ", " and ": ", raw non-ASCII, floats in repr (shortest round-trip
 * digits), integers exact. Families use it to render structured prompt values and to write answer
 * bodies. It leaves out indentation and ensure_ascii=True. */
#ifndef S1_PP_PYJSON_H
#define S1_PP_PYJSON_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

#include "cm_error.h"

#define PP_PYJSON_FLOAT_MAX 32 /* bytes enough for any repr of a finite double, with NUL */

/* A growable byte buffer (zero-initialise; bytes is NUL-terminated after every append). */
struct pp_buf {
  char *bytes; /* [cap] text */
  size_t n;    /* bytes used, excluding the NUL */
  size_t cap;  /* bytes allocated */
};

/* Appends n bytes / a C string. Returns 0 or -ENOMEM (buffer unchanged). */
int pp_buf_put(struct pp_buf *b, const char *s, size_t n);
int pp_buf_puts(struct pp_buf *b, const char *s);
void pp_buf_fini(struct pp_buf *b);

/* Python repr(float(x)) of a finite double: "1.0", "0.0001", "1e-05", "1e+16", "-0.0".
 * Shapes: out has PP_PYJSON_FLOAT_MAX bytes. Returns the length written (NUL-terminated).
 * Source: CPython float_repr (dtoa mode 0, repr switch at exponents -4 and 16). */
size_t pp_pyjson_float(double x, char *out);

/* Appends a JSON string literal of text[n] (valid UTF-8): '"' + escapes + '"' with the escapes of
 * json.dumps(ensure_ascii=False): \" \\ \n \r \t \b \f and \u00hh for other C0 controls.
 * Returns 0 or -ENOMEM. */
int pp_pyjson_string(struct pp_buf *b, const char *text, size_t n);

/* The exact decimal text of a json-c integer parsed from checked text (int64 or uint64 range;
 * pp_json_check refuses wider literals, which json-c would clamp to -2**63 or 2**64-1): buf gets
 * at most 21 bytes with the NUL. Returns buf. */
char *pp_pyjson_int_text(json_object *v, char buf[24]);

/* Appends json.dumps(v) of a json-c value (NULL is JSON null). Objects keep their order, or are
 * sorted by code point (UTF-8 byte order) at every level when sort_keys.
 * Integers are exact (the values of checked text: pp_json_check refuses wider than 64 bits).
 * Returns 0; -ENOMEM; -CM_EREQUEST for a non-finite double (diag: "Out of range float values are
 * not JSON compliant", Python's ValueError text). */
int pp_pyjson_dump(struct pp_buf *b, json_object *v, bool sort_keys, struct cm_diag *diag);

#endif
