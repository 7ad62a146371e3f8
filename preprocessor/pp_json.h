/* Strict request JSON for every family (spec/wire.md 400 invalid_json): json-c parses, but it
 * keeps the last of duplicate keys, accepts NaN/Infinity outside strict mode, replaces lone
 * surrogates and accepts trailing bytes, so a grammar pass that refuses those runs first. */
#ifndef S1_PP_JSON_H
#define S1_PP_JSON_H

#include <json-c/json.h>
#include <stddef.h>

#include "cm_error.h"

#define PP_JSON_MAX_DEPTH 127 /* nesting ≥ 128 is refused */

/* Checks `text` is one RFC 8259 JSON value (whitespace around it only), valid UTF-8, no
 * duplicate keys in any object (compared after unescaping), no lone surrogate escapes, nesting
 * depth ≤ PP_JSON_MAX_DEPTH, and every integer literal within -2**63 .. 2**64-1 (json-c clamps a
 * wider one to exactly these bounds, so once wider ones are refused the bounds are real values:
 * read a json-c integer with pp_pyjson_int_text). Returns 0, -CM_EJSON with diag giving the byte
 * offset, or -CM_EREQUEST (422) for an integer outside 64 bits (diag names its field path, e.g.
 * "questions.q.instructions[0]") or an object key holding U+0000 (json-c would cut the key). */
int pp_json_check(const char *text, size_t n_bytes, struct cm_diag *diag);

/* pp_json_check, then json-c parse. Ownership: *ret_root is owned (json_object_put); it is NULL
 * for the JSON value null (json-c's representation).
 * Returns 0, -CM_EJSON, -CM_EREQUEST (U+0000 in a key), -ENOMEM. */
int pp_json_parse(const char *text, size_t n_bytes, json_object **ret_root, struct cm_diag *diag);

#endif
