/* Unit tests of the tokenizer on a small hand-built tokenizer.json (all 256 byte symbols plus a
 * few merges in both spellings): merge order, lookups, appending, invalid UTF-8 offsets, refused
 * components named in the message, lossy decode, limits, and a 1 MiB whitespace run through the
 * Qwen split regex (JIT stack). The loader's fast path (vocab and merges parsed in pieces) is
 * checked against the plain one on documents made to trip it: it must give the same tokenizer or
 * the same error, and fall back where the pieces could disagree with one json-c parse. */
#include "pp_tok.h"
#include "tok_compare.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static const char QWEN_RE[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                              "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* GPT-2 byte-level spelling of byte b as UTF-8. */
static void byte_spelling(int b, char *out) {
  int printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int i = 0; i < b; i++)
      n += !((i >= 0x21 && i <= 0x7e) || (i >= 0xa1 && i <= 0xac) || (i >= 0xae));
    cp = 256 + n;
  }
  if (cp < 0x80) {
    out[0] = (char)cp;
    out[1] = 0;
  } else {
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    out[2] = 0;
  }
}

/* Builds the small tokenizer as a json-c document; ids 0..255 are bytes, then merged tokens. */
static json_object *tiny_doc(void) {
  json_object *vocab = json_object_new_object();
  char s[8];
  for (int b = 0; b < 256; b++) {
    byte_spelling(b, s);
    json_object_object_add(vocab, s, json_object_new_int(b));
  }
  /* "ab" 256, "bc" 257, "abc" 258, "ĠĠ" 259 ("Ġ" is the space byte) */
  json_object_object_add(vocab, "ab", json_object_new_int(256));
  json_object_object_add(vocab, "bc", json_object_new_int(257));
  json_object_object_add(vocab, "abc", json_object_new_int(258));
  json_object_object_add(vocab, "\xc4\xa0\xc4\xa0", json_object_new_int(259));
  json_object *merges = json_object_new_array();
  /* "b c" outranks "a b": "abc" must become a + bc, never ab + c; the pair form is accepted too */
  json_object_array_add(merges, json_object_new_string("b c"));
  json_object *pair = json_object_new_array();
  json_object_array_add(pair, json_object_new_string("a"));
  json_object_array_add(pair, json_object_new_string("bc"));
  json_object_array_add(merges, pair);
  json_object_array_add(merges, json_object_new_string("a b"));
  json_object_array_add(merges, json_object_new_string("\xc4\xa0 \xc4\xa0"));
  json_object *model = json_object_new_object();
  json_object_object_add(model, "type", json_object_new_string("BPE"));
  json_object_object_add(model, "vocab", vocab);
  json_object_object_add(model, "merges", merges);
  json_object *doc = json_object_new_object();
  json_object_object_add(doc, "model", model);
  json_object *added = json_object_new_array();
  json_object *a = json_object_new_object();
  json_object_object_add(a, "id", json_object_new_int(300));
  json_object_object_add(a, "content", json_object_new_string("<|end|>"));
  json_object_object_add(a, "normalized", json_object_new_boolean(0));
  json_object_object_add(a, "special", json_object_new_boolean(1));
  json_object_array_add(added, a);
  json_object_object_add(doc, "added_tokens", added);
  json_object_object_add(doc, "normalizer",
                         json_tokener_parse("{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"}]}"));
  json_object *split = json_object_new_object();
  json_object_object_add(split, "type", json_object_new_string("Split"));
  json_object *pat = json_object_new_object();
  json_object_object_add(pat, "Regex", json_object_new_string(QWEN_RE));
  json_object_object_add(split, "pattern", pat);
  json_object_object_add(split, "behavior", json_object_new_string("Isolated"));
  json_object *bl = json_tokener_parse("{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}");
  json_object *pre = json_object_new_object();
  json_object_object_add(pre, "type", json_object_new_string("Sequence"));
  json_object *steps = json_object_new_array();
  json_object_array_add(steps, split);
  json_object_array_add(steps, bl);
  json_object_object_add(pre, "pretokenizers", steps);
  json_object_object_add(doc, "pre_tokenizer", pre);
  json_object_object_add(doc, "decoder", json_tokener_parse("{\"type\":\"ByteLevel\"}"));
  return doc;
}

static int load_doc(json_object *doc, struct pp_tok **tok, struct cm_diag *d) {
  size_t n;
  const char *s = json_object_to_json_string_length(doc, JSON_C_TO_STRING_PLAIN, &n);
  return pp_tok_load_buffer(s, n, tok, d);
}

static bool ids_eq(const struct pp_tok_ids *ids, const int32_t *want, size_t n) {
  return ids->n == n && memcmp(ids->ids, want, n * sizeof(int32_t)) == 0;
}

/* Loads doc with `key` replaced by the JSON text `value` and expects a refusal naming `needle`. */
static void expect_refused(const char *key, const char *value, int code, const char *needle) {
  json_object *doc = tiny_doc();
  json_object *v = json_tokener_parse(value);
  if (strncmp(key, "model.", 6) == 0)
    json_object_object_add(json_object_object_get(doc, "model"), key + 6, v);
  else
    json_object_object_add(doc, key, v);
  struct pp_tok *tok = NULL;
  struct cm_diag d = {0};
  int rc = load_doc(doc, &tok, &d);
  if (rc != code || !d.msg || !strstr(d.msg, needle)) {
    fprintf(stderr, "refusal of %s=%s: rc %d msg %s\n", key, value, rc, d.msg ? d.msg : "-");
    failures++;
  }
  CHECK(tok == NULL);
  cm_diag_fini(&d);
  json_object_put(doc);
}

/* A small document around the given vocab and merges texts. */
static char *small_doc(const char *vocab, const char *merges, const char *model_extra) {
  static const char fmt[] =
      "{\n  \"model\": {\"type\": \"BPE\", \"vocab\": %s,\n \"merges\": %s%s},\n"
      "  \"added_tokens\": [{\"id\": 9, \"content\": \"<|x|>\", \"special\": true}],\n"
      "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
      "\"use_regex\": false},\n  \"decoder\": {\"type\": \"ByteLevel\"}\n}\n";
  size_t n = sizeof(fmt) + strlen(vocab) + strlen(merges) + strlen(model_extra);
  char *s = malloc(n);
  snprintf(s, n, fmt, vocab, merges, model_extra);
  return s;
}

/* Loads json both ways (pieces of per_piece members, and one parse) and checks that they agree:
 * same code, same message or same tables; `pieces` says whether the fast path must hold (1), must
 * fall back (0), or may do either (-1). Returns the plain path's code. */
static int both_ways(const char *json, size_t n, size_t per_piece, int pieces, const char *what) {
  struct pp_tok *fast = NULL, *plain = NULL;
  struct cm_diag df = {0}, dp = {0};
  int rf = tok_load_buffer(json, n, per_piece, per_piece, &fast, &df);
  int rp = tok_load_buffer(json, n, 0, 0, &plain, &dp);
  const char *diff = NULL;
  if (rf != rp || (rf && strcmp(df.msg, dp.msg) != 0))
    diff = "result";
  else if (!rf && (diff = tok_tables_differ(fast, plain)) == NULL && pieces >= 0 &&
           fast->in_pieces != (pieces == 1))
    diff = pieces ? "path (fell back)" : "path (pieces kept)";
  if (!rp && plain->in_pieces)
    diff = "plain path";
  if (diff) {
    fprintf(stderr, "%s, %zu per piece: %s differs (fast %d %s / plain %d %s)\n", what, per_piece,
            diff, rf, df.msg ? df.msg : "", rp, dp.msg ? dp.msg : "");
    failures++;
  }
  pp_tok_free(fast);
  pp_tok_free(plain);
  cm_diag_fini(&df);
  cm_diag_fini(&dp);
  return rp;
}

static void fast_path_cases(void) {
  static const char V[] = "{\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"bc\": 4, \"abc\": 5}";
  static const char M[] = "[[\"a\", \"b\"], \"b c\", [\"a\", \"bc\"]]";
#define V2 "{\"a\": 5, \"b\": 4, \"c\": 3, \"ab\": 2, \"bc\": 1, \"abc\": 0}"
  static const struct {
    const char *what, *vocab, *merges, *extra;
    int pieces; /* at 1 member per piece: 1 fast path, 0 falls back, -1 either */
    int ok;     /* the plain path loads it */
  } cases[] = {
      {"plain", V, M, "", 1, 1},
      {"string merges", V, "[\"a b\", \"b c\", \"a bc\"]", "", 1, 1},
      {"escapes and commas in keys", "{\"a\": 0, \"b\": 1, \"a\\\"b,\": 2, \"\\u0062\\\\\": 3}",
       "[[\"a\", \"b\"]]", "", 1, 0},
      {"empty containers", "{}", "[ ]", "", 1, 1},
      {"vocab key in two pieces (last wins)", "{\"a\": 0, \"b\": 1, \"ab\": 3, \"a\": 7}",
       "[[\"a\", \"b\"]]", "", 0, 1},
      {"vocab again as an escaped key", V, M, ", \"voc\\u0061b\": " V2, 0, 1},
      {"merges again as an escaped key", V, M, ", \"merge\\u0073\": []", 0, 1},
      {"key cut by U+0000", V, M, ", \"vocab\\u0000x\": " V2, 0, 1},
      {"comment with a comma", "{\"a\": 0, /* , */ \"b\": 1, \"ab\": 3}", "[[\"a\", \"b\"]]", "", 0,
       -1},
      {"trailing comma", "{\"a\": 0, \"b\": 1, \"ab\": 3,}", "[[\"a\", \"b\"]]", "", 0, -1},
      {"two commas", "{\"a\": 0,, \"b\": 1, \"ab\": 3}", "[[\"a\", \"b\"]]", "", 0, 0},
      {"missing comma", "{\"a\": 0 \"b\": 1, \"ab\": 3}", "[[\"a\", \"b\"]]", "", 0, 0},
      {"bracket closes early", "{\"a\": 0}, \"b\": {\"ab\": 3}", "[[\"a\", \"b\"]]", "", 0, 0},
      {"single-quoted key", "{'a': 0, \"b\": 1, \"ab\": 3}", "[[\"a\", \"b\"]]", "", -1, -1},
      {"single-quoted key with a comma", "{'a,\"': 0, \"b\": 1, \"ab\": 3}", "[[\"a\", \"b\"]]", "",
       0, -1},
      {"trailing comma inside a piece", "{\"a\": 0,, \"b\": 1, \"ab\": 3, \"c\": 4}",
       "[[\"a\", \"b\"]]", "", 0, 0},
      {"trailing comma in a merge", V, "[[\"a\", \"b\",], \"b c\"]", "", 0, -1},
      {"NaN id", "{\"a\": 0, \"b\": NaN}", "[]", "", 0, 0},
      {"unknown merge token", V, "[[\"a\", \"b\"], [\"x\", \"b\"]]", "", 0, 0},
      {"malformed merge", V, "[[\"a\", \"b\"], [\"b\"]]", "", 0, 0},
      {"vocab id twice", "{\"a\": 0, \"b\": 0}", "[]", "", 0, 0},
      {"id not a number", "{\"a\": 0, \"b\": \"1\"}", "[]", "", 0, 0},
      {"nested value", "{\"a\": 0, \"b\": [[[1]]]}", "[]", "", 0, 0},
      {"model type", V, M, ", \"type\": \"WordPiece\"", 0, 0},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char *doc = small_doc(cases[i].vocab, cases[i].merges, cases[i].extra);
    for (size_t per = 1; per <= 4; per++) {
      int rc = both_ways(doc, strlen(doc), per, per == 1 ? cases[i].pieces : -1, cases[i].what);
      if (cases[i].ok >= 0 && (rc == 0) != (cases[i].ok == 1)) {
        fprintf(stderr, "%s: plain load gave %d\n", cases[i].what, rc);
        failures++;
      }
    }
    free(doc);
  }
  /* a long vocabulary with few merges (the merges thread then stages most vocabulary pieces for
   * the other to add) and the reverse (a repeated pair: the last rank counts) */
  {
    size_t cap = 64 * 4000, n = 0;
    char *vocab = malloc(cap), *merges = malloc(cap);
    n += (size_t)snprintf(vocab + n, cap - n, "{\"a\": 0, \"b\": 1, \"ab\": 2");
    for (int i = 10; i < 4000; i++) /* id 9 is the added token's */
      n += (size_t)snprintf(vocab + n, cap - n, ", \"w%d\": %d", i, i);
    snprintf(vocab + n, cap - n, "}");
    char *doc = small_doc(vocab, "[[\"a\", \"b\"]]", "");
    for (size_t per = 1; per <= 64; per *= 4)
      CHECK(both_ways(doc, strlen(doc), per, 1, "long vocabulary") == 0);
    free(doc);
    n = 0;
    n += (size_t)snprintf(merges + n, cap - n, "[\"a b\"");
    for (int i = 1; i < 4000; i++)
      n += (size_t)snprintf(merges + n, cap - n, i % 2 ? ", [\"a\", \"b\"]" : ", \"a b\"");
    snprintf(merges + n, cap - n, "]");
    doc = small_doc("{\"a\": 0, \"b\": 1, \"ab\": 2}", merges, "");
    for (size_t per = 1; per <= 64; per *= 4)
      CHECK(both_ways(doc, strlen(doc), per, 1, "long merges") == 0);
    free(doc);
    free(vocab);
    free(merges);
  }
  /* layouts the scan does not take: merges before vocab, model twice, trailing bytes */
  static const char *const odd[] = {
      "{\"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {\"a\": 0}}, "
      "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"decoder\": {\"type\": \"ByteLevel\"}}",
      "{\"model\": 1, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
      "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"decoder\": {\"type\": \"ByteLevel\"}}",
      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
      "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"decoder\": {\"type\": \"ByteLevel\"}} x",
  };
  for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++)
    both_ways(odd[i], strlen(odd[i]), 1, 0, "odd layout");
  /* the tiny document of this file, pretty-printed and compact */
  json_object *doc = tiny_doc();
  for (int pretty = 0; pretty < 2; pretty++) {
    size_t n;
    const char *s = json_object_to_json_string_length(
        doc, pretty ? JSON_C_TO_STRING_PRETTY : JSON_C_TO_STRING_PLAIN, &n);
    for (size_t per = 1; per <= 300; per = per * 3 + 1)
      CHECK(both_ways(s, n, per, 1, pretty ? "tiny pretty" : "tiny compact") == 0);
  }
  json_object_put(doc);
}

int main(void) {
  fast_path_cases();
  json_object *doc = tiny_doc();
  struct pp_tok *tok = NULL;
  struct cm_diag d = {0};
  CHECK(load_doc(doc, &tok, &d) == 0);
  json_object_put(doc);
  if (!tok) {
    fprintf(stderr, "load: %s\n", d.msg);
    return 1;
  }
  struct pp_tok_ids ids = {0};

  /* merges by rank: b+c first, then a+bc; "ab" alone uses a+b */
  CHECK(pp_tok_encode(tok, "abc", 3, &ids, &d) == 0);
  CHECK(ids_eq(&ids, (int32_t[]){258}, 1));
  CHECK(pp_tok_encode(tok, " ab", 3, &ids, &d) == 0); /* appends */
  CHECK(ids_eq(&ids, (int32_t[]){258, ' ', 256}, 3));
  ids.n = 0;
  /* "   x": the split regex gives "  " + " x"; "  " merges to id 259 */
  CHECK(pp_tok_encode(tok, "   x", 4, &ids, &d) == 0);
  CHECK(ids_eq(&ids, (int32_t[]){259, ' ', 'x'}, 3));
  ids.n = 0;
  CHECK(pp_tok_encode(tok, "a<|end|>b", 9, &ids, &d) == 0);
  CHECK(ids_eq(&ids, (int32_t[]){'a', 300, 'b'}, 3));
  ids.n = 0;
  CHECK(pp_tok_encode(tok, "", 0, &ids, &d) == 0 && ids.n == 0);
  /* NUL is an ordinary character (byte-level id 0) */
  CHECK(pp_tok_encode(tok, "\0", 1, &ids, &d) == 0 && ids_eq(&ids, (int32_t[]){0}, 1));

  /* lookups */
  size_t n;
  const char *s = pp_tok_id_to_token(tok, 259, &n);
  CHECK(s && n == 4 && memcmp(s, "\xc4\xa0\xc4\xa0", 4) == 0);
  CHECK(pp_tok_token_to_id(tok, "abc", 3) == 258);
  CHECK(pp_tok_token_to_id(tok, "<|end|>", 7) == 300);
  CHECK(pp_tok_token_to_id(tok, "zzz", 3) == -1);
  CHECK(pp_tok_id_to_token(tok, 299, &n) == NULL && pp_tok_id_to_token(tok, -1, &n) == NULL);
  CHECK(pp_tok_vocab_size(tok, false) == 260 && pp_tok_vocab_size(tok, true) == 261);
  CHECK(pp_tok_is_special(tok, 300) && !pp_tok_is_special(tok, 258));

  /* invalid UTF-8: error with the byte offset, ids untouched */
  static const struct {
    const char *s;
    size_t n;
    const char *offset;
  } bad[] = {{"ab\xff" "cd", 5, "offset 2"},     {"\xc0\xaf", 2, "offset 0"},
             {"x\xed\xa0\x80", 4, "offset 1"},   {"xy\xe4\xbd", 4, "offset 2"},
             {"\xf4\x90\x80\x80", 4, "offset 0"}, {"ok\x80", 3, "offset 2"}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    struct cm_diag e = {0};
    size_t before = ids.n;
    CHECK(pp_tok_encode(tok, bad[i].s, bad[i].n, &ids, &e) == -CM_EUTF8);
    CHECK(e.msg && strstr(e.msg, bad[i].offset));
    CHECK(ids.n == before);
    cm_diag_fini(&e);
  }
  /* limit checked before reading the text */
  {
    struct cm_diag e = {0};
    CHECK(pp_tok_encode(tok, "x", PP_TOK_MAX_TEXT_BYTES + 1, &ids, &e) == -CM_ELIMIT);
    cm_diag_fini(&e);
  }

  /* decode: lossy per maximal invalid subpart, specials kept or skipped, unknown ids refused */
  struct pp_tok_text text = {0};
  int32_t dec1[] = {0xe4, 0xbd, 'a', 0xff, 0xff, 300, 258};
  CHECK(pp_tok_decode(tok, dec1, 7, false, &text, &d) == 0);
  CHECK(text.n == 20 && memcmp(text.bytes, "\xef\xbf\xbd" "a\xef\xbf\xbd\xef\xbf\xbd<|end|>abc", 20) == 0);
  text.n = 0;
  CHECK(pp_tok_decode(tok, dec1, 7, true, &text, &d) == 0);
  CHECK(text.n == 13 && memcmp(text.bytes, "\xef\xbf\xbd" "a\xef\xbf\xbd\xef\xbf\xbd" "abc", 13) == 0);
  {
    struct cm_diag e = {0};
    size_t before = text.n;
    CHECK(pp_tok_decode(tok, (int32_t[]){1, 299}, 2, false, &text, &e) == -EINVAL);
    CHECK(e.msg && strstr(e.msg, "299") && text.n == before);
    cm_diag_fini(&e);
  }

  /* 1 MiB of spaces then a word: one long match of \s+(?!\S), no JIT stack failure */
  size_t big = (size_t)1 << 20;
  char *sp = malloc(big + 1);
  memset(sp, ' ', big);
  sp[big] = 'x';
  ids.n = 0;
  CHECK(pp_tok_encode(tok, sp, big + 1, &ids, &d) == 0);
  /* (2^20 - 1) spaces: 2^19 - 1 pairs and one single space; then " x" */
  CHECK(ids.n == big / 2 + 2 && ids.ids[0] == 259 && ids.ids[ids.n - 3] == ' ' &&
        ids.ids[ids.n - 2] == ' ' && ids.ids[ids.n - 1] == 'x');
  text.n = 0;
  CHECK(pp_tok_decode(tok, ids.ids, ids.n, false, &text, &d) == 0);
  CHECK(text.n == big + 1 && memcmp(text.bytes, sp, big + 1) == 0);
  free(sp);
  pp_tok_text_fini(&text);
  pp_tok_ids_fini(&ids);
  pp_tok_free(tok);
  cm_diag_fini(&d);

  /* refused components, each named */
  expect_refused("normalizer", "{\"type\":\"Lowercase\"}", -CM_EUNSUPPORTED, "normalizer Lowercase");
  expect_refused("pre_tokenizer", "{\"type\":\"Whitespace\"}", -CM_EUNSUPPORTED,
                 "pre_tokenizer Whitespace");
  expect_refused("pre_tokenizer", "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"x\"},\"behavior\":\"Isolated\"}",
                 -CM_EUNSUPPORTED, "without ByteLevel");
  expect_refused("decoder", "null", -CM_EUNSUPPORTED, "decoder null");
  expect_refused("decoder", "{\"type\":\"WordPiece\"}", -CM_EUNSUPPORTED, "decoder WordPiece");
  expect_refused("truncation", "{\"max_length\":5}", -CM_EUNSUPPORTED, "truncation");
  expect_refused("model.type", "\"WordPiece\"", -CM_EUNSUPPORTED, "model WordPiece");
  expect_refused("model.dropout", "0.1", -CM_EUNSUPPORTED, "dropout");
  expect_refused("model.continuing_subword_prefix", "\"##\"", -CM_EUNSUPPORTED,
                 "continuing_subword_prefix");
  expect_refused("post_processor", "{\"type\":\"Mystery\"}", -CM_EUNSUPPORTED,
                 "post_processor Mystery");
  expect_refused("pre_tokenizer", "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[\\\\S]\"},\"behavior\":\"Isolated\"}",
                 -CM_EUNSUPPORTED, "inside a class");
  expect_refused("pre_tokenizer", "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"}",
                 -CM_EUNSUPPORTED, "rejected by PCRE2");
  expect_refused("model.merges", "[\"a zz\"]", -CM_EFORMAT, "merges[0]");
  {
    /* an added token id past the vocabulary limit is refused before anything is allocated */
    char big_added[160];
    snprintf(big_added, sizeof(big_added),
             "[{\"id\": %d, \"content\": \"<x>\", \"special\": true}]", (int)PP_TOK_MAX_VOCAB);
    expect_refused("added_tokens", big_added, -CM_ELIMIT, "exceeds the limit");
  }

  /* malformed JSON, trailing bytes, size limit */
  static const char *const broken[] = {"{\"model\": ", "{} x", "[1, 2]", "{\"model\": {\"type\": \"BPE\"}}"};
  for (size_t i = 0; i < sizeof(broken) / sizeof(broken[0]); i++) {
    struct cm_diag e = {0};
    struct pp_tok *t2 = NULL;
    int rc = pp_tok_load_buffer(broken[i], strlen(broken[i]), &t2, &e);
    CHECK(rc == -CM_EFORMAT || rc == -CM_EMISSING);
    CHECK(t2 == NULL && e.msg);
    cm_diag_fini(&e);
  }
  {
    struct cm_diag e = {0};
    struct pp_tok *t2 = NULL;
    CHECK(pp_tok_load_buffer("{}", PP_TOK_MAX_FILE_BYTES + 1, &t2, &e) == -CM_ELIMIT);
    cm_diag_fini(&e);
    CHECK(pp_tok_load_file("/nonexistent/tokenizer.json", &t2, &e) == -ENOENT);
    cm_diag_fini(&e);
  }
  return failures ? 1 : 0;
}
