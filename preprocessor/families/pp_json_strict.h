/* Strict request-JSON parsing on top of json-c: a pre-scan over the raw bytes rejects what json-c
 * silently accepts or alters (duplicate keys, NaN / Infinity literals, lone surrogate escapes,
 * integers outside 64 bits, nesting of 128 levels or more), then json-c builds the tree.
 * It leaves out any schema: families validate the parsed tree themselves. */
#ifndef S1_PP_JSON_STRICT_H
#define S1_PP_JSON_STRICT_H

#include <json-c/json.h>
#include <stddef.h>

#include "cm_error.h"

#define PP_JSON_MAX_DEPTH 127               /* deepest accepted nesting of arrays and objects */
#define PP_JSON_MAX_BYTES ((size_t)64 << 20) /* largest input accepted by pp_json_parse_strict */

/* Parses one JSON text (RFC 8259, UTF-8, nothing but whitespace after the value) into a json-c tree.
 * Shapes: bytes[n_bytes], need not be NUL-terminated.
 * Ownership: *ret_root is a new reference (json_object_put it); written only on success.
 * Returns: 0; -CM_EFORMAT (invalid JSON; diag: "duplicate JSON key", "non-finite JSON number",
 * "lone surrogate in a JSON string", "JSON nesting deeper than 127 levels", or json-c's message
 * with the byte offset); -CM_ELIMIT (more than PP_JSON_MAX_BYTES, or an integer outside
 * [-2^63, 2^64 - 1]: json-c would clamp it); -CM_EUNSUPPORTED (an object key containing U+0000,
 * which json-c would truncate); -ENOMEM.
 * Source: Python json.loads with duplicate keys and NaN literals refused (spec/open_jev.md §2.2,
 * §8.1 step 5), and the invalid_json row of spec/wire.md. */
int pp_json_parse_strict(const char *bytes, size_t n_bytes, json_object **ret_root,
                         struct cm_diag *diag);

#endif
