/* Unit test of the strict request JSON check (wire.md 400 invalid_json): what json-c alone would
 * accept (duplicates, NaN, lone surrogates, trailing bytes, depth) is refused; valid JSON parses. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pp_json.h"

static int failures;
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static int check(const char *s) {
  struct cm_diag d = {0};
  int r = pp_json_check(s, strlen(s), &d);
  cm_diag_fini(&d);
  return r;
}

int main(void) {
  const char *good[] = {
      "{}", "[]", "0", "-0.5e+3", "\"\\u00e9\\ud83d\\ude00\"", "{\"a\":{\"a\":1},\"b\":[1,{\"a\":2}]}",
      " {\"a\" : [ true , false , null ] } \n", "{\"\\u0061\":1,\"b\":2}", "\"é😀\"",
      "{\"a\":1,\"ab\":2,\"b\":3}", "12345678901234567890", "{\"\":1,\"a\":2}", "{\"\":{\"\":1}}",
  };
  for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++) {
    int r = check(good[i]);
    if (r)
      fprintf(stderr, "refused: %s\n", good[i]);
    CHECK(r == 0);
  }
  const char *bad[] = {
      "", "{", "{\"a\":1,\"a\":2}", "{\"a\":1,\"\\u0061\":2}", "{\"x\":{\"k\":1,\"k\":1}}",
      "NaN", "[Infinity]", "[-Infinity]", "[nan]", "\"\\ud800\"", "\"\\udc00\"",
      "\"\\ud800\\u0041\"", "{\"a\":1} x", "{\"a\":1,}", "[1,]", "'a'", "[01]", "[1.]", "[.5]",
      "\"\x01\"", "\"\xff\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "{a:1}", "[1 2]", "\"\\x\"",
      "tru", "[+1]", "{\"\":1,\"\":2}", /* only empty keys: a fuzz find (NULL key buffer) */
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
    int r = check(bad[i]);
    if (r != -CM_EJSON)
      fprintf(stderr, "accepted: %s\n", bad[i]);
    CHECK(r == -CM_EJSON);
  }
  /* the NaN/Infinity hint only where a NaN or Infinity literal starts (attack finding S3) */
  static const struct {
    const char *json, *message;
  } why[] = {{"NaN", "invalid JSON at byte 0: unexpected character (NaN and Infinity are not JSON)"},
             {"[nan]", "at byte 1: unexpected character (NaN and Infinity are not JSON)"},
             {"[-Infinity]", "at byte 1: unexpected character (NaN and Infinity are not JSON)"},
             {"[inf]", "(NaN and Infinity are not JSON)"},
             {"[.5]", "at byte 1: unexpected character where a value should start"},
             {"[+1]", "at byte 1: unexpected character where a value should start"},
             {"{\"a\":@}", "at byte 5: unexpected character where a value should start"},
             {"[-]", "at byte 1: unexpected character where a value should start"},
             {"[nul]", "at byte 1: unexpected character"},
             {"\xef\xbb\xbf{}", "at byte 0: unexpected byte where a value should start"}};
  for (size_t i = 0; i < sizeof(why) / sizeof(*why); i++) {
    struct cm_diag d = {0};
    int r = pp_json_check(why[i].json, strlen(why[i].json), &d);
    if (r != -CM_EJSON || !d.msg || !strstr(d.msg, why[i].message))
      fprintf(stderr, "%s: %d \"%s\", want \"%s\"\n", why[i].json, r, d.msg ? d.msg : "",
              why[i].message);
    CHECK(r == -CM_EJSON && d.msg && strstr(d.msg, why[i].message));
    cm_diag_fini(&d);
  }
  /* long strings (the scanner skips plain ASCII 8 bytes at a time): one special byte at every
   * offset of a 40-byte string must be seen there; plain strings of every length pass, also as
   * keys, whose duplicates are still found */
  static const struct {
    const char *ins; /* bytes put at the offset */
    int want;        /* the check's result */
  } at[] = {{"\x01", -CM_EJSON}, {"\x1f", -CM_EJSON}, {"\xff", -CM_EJSON}, {"\xc3", -CM_EJSON},
            {"\"", -CM_EJSON}, {"\\", -CM_EJSON}, {"\\n", 0}, {"\xc3\xa9", 0}, {"\x7f", 0},
            {" ", 0}};
  for (size_t k = 0; k < sizeof(at) / sizeof(*at); k++) {
    for (size_t off = 0; off < 40; off++) {
      char str[64];
      size_t n = strlen(at[k].ins);
      str[0] = '"';
      memset(str + 1, 'a', 40);
      memcpy(str + 1 + off, at[k].ins, n);
      str[1 + (off + n > 40 ? off + n : 40)] = '"';
      str[2 + (off + n > 40 ? off + n : 40)] = 0;
      int r = check(str);
      if (r != at[k].want)
        fprintf(stderr, "string with 0x%02x at %zu: %d, want %d\n", (unsigned char)at[k].ins[0],
                off, r, at[k].want);
      CHECK(r == at[k].want);
    }
  }
  for (size_t len = 1; len < 40; len++) {
    char key[48], obj[128];
    memset(key, 'k', len);
    key[len] = 0;
    snprintf(obj, sizeof(obj), "{\"%s\":1,\"%s\":2}", key, key);
    CHECK(check(obj) == -CM_EJSON); /* the same key twice */
    key[len - 1] = 'j';
    snprintf(obj, sizeof(obj), "{\"%s\":1,\"%s\":2}", key, key + 1);
    CHECK(check(obj) == 0);
  }
  /* nesting: 127 levels pass, 128 are refused */
  char deep[600];
  for (int levels = 127; levels <= 128; levels++) {
    memset(deep, '[', (size_t)levels);
    memset(deep + levels, ']', (size_t)levels);
    deep[2 * levels] = 0;
    CHECK(check(deep) == (levels == 127 ? 0 : -CM_EJSON));
  }
  struct cm_diag d = {0};
  json_object *root = NULL;
  const char *doc = "{\"q\":{\"type\":\"choice\"},\"n\":1.5}";
  CHECK(pp_json_parse(doc, strlen(doc), &root, &d) == 0);
  json_object *q = NULL, *t = NULL;
  CHECK(root && json_object_object_get_ex(root, "q", &q) && json_object_object_get_ex(q, "type", &t));
  CHECK(t && strcmp(json_object_get_string(t), "choice") == 0);
  json_object_put(root);
  /* bare scalars at the top level end at the end of the text; null is json-c's NULL */
  root = (json_object *)1;
  CHECK(pp_json_parse("null", 4, &root, &d) == 0 && root == NULL);
  CHECK(pp_json_parse("true", 4, &root, &d) == 0 && json_object_get_boolean(root));
  json_object_put(root);
  CHECK(pp_json_parse("3", 1, &root, &d) == 0 && json_object_get_int(root) == 3);
  json_object_put(root);
  CHECK(pp_json_parse("-2.5e1 ", 7, &root, &d) == 0 && json_object_get_double(root) == -25.0);
  json_object_put(root);
  /* a NUL inside a key would be cut by json-c (two keys merged): refused as an invalid request */
  const char *nul_key = "{\"a\\u0000x\":1,\"a\\u0000y\":2}";
  CHECK(pp_json_parse(nul_key, strlen(nul_key), &root, &d) == -CM_EREQUEST);
  CHECK(d.msg && strstr(d.msg, "U+0000"));
  cm_diag_fini(&d);
  const char *nul_val = "{\"a\":\"x\\u0000y\"}";
  CHECK(pp_json_parse(nul_val, strlen(nul_val), &root, &d) == 0);
  json_object_put(root);
  CHECK(pp_json_parse("{\"a\":1,\"a\":1}", 13, &root, &d) == -CM_EJSON);
  CHECK(d.msg && strstr(d.msg, "duplicate key \"a\""));
  cm_diag_fini(&d);
  /* integers: the 64-bit bounds are values, exact in json-c; wider is 422 naming the field */
  const char *bounds = "[-9223372036854775808, 18446744073709551615, -0, 1e30, 1.5e19, "
                       "99999999999999999999.5]";
  CHECK(pp_json_parse(bounds, strlen(bounds), &root, &d) == 0);
  CHECK(root && json_object_get_int64(json_object_array_get_idx(root, 0)) == INT64_MIN);
  CHECK(root && json_object_get_uint64(json_object_array_get_idx(root, 1)) == UINT64_MAX);
  json_object_put(root);
  struct {
    const char *doc, *msg;
  } wide[] = {
      {"18446744073709551616", "integer 18446744073709551616 is outside 64 bits"},
      {"[-9223372036854775809]", "[0]: integer -9223372036854775809 is outside 64 bits"},
      {"{\"a\": {\"b\": [0, {\"c\": 100000000000000000000}]}}",
       "a.b[1].c: integer 100000000000000000000 is outside 64 bits"},
      {"{\"x\": [1], \"y\": 123456789012345678901234567890}",
       "y: integer 123456789012345678901234... is outside 64 bits"},
  };
  for (size_t i = 0; i < sizeof(wide) / sizeof(*wide); i++) {
    CHECK(pp_json_parse(wide[i].doc, strlen(wide[i].doc), &root, &d) == -CM_EREQUEST);
    CHECK(d.msg && strncmp(d.msg, wide[i].msg, strlen(wide[i].msg)) == 0);
    if (d.msg && strncmp(d.msg, wide[i].msg, strlen(wide[i].msg)) != 0)
      fprintf(stderr, "  got \"%s\"\n", d.msg);
    cm_diag_fini(&d);
  }
  if (failures)
    fprintf(stderr, "%d failures\n", failures);
  return failures ? 1 : 0;
}
