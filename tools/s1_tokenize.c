/* s1-tokenize --tokenizer FILE [--decode] [--skip-special]: JSON lines in, JSON lines out.
 * Encoding reads one JSON string per line and writes one JSON array of ids; --decode reads one
 * JSON array of ids per line and writes one JSON string. It exists for tests, the benchmark and
 * debugging; the service links the library directly. A bad line stops the tool with exit 1. */
#include "cm_version.h"
#include "pp_tok.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hexval(int c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

static long u_escape(const char *s, size_t n, size_t i) {
  /* s[i] == '\\', s[i + 1] == 'u': the 4-hex-digit value or -1. */
  if (i + 6 > n)
    return -1;
  long v = 0;
  for (size_t k = i + 2; k < i + 6; k++) {
    int h = hexval((unsigned char)s[k]);
    if (h < 0)
      return -1;
    v = v * 16 + h;
  }
  return v;
}

/* json-c turns a lone surrogate escape into U+FFFD silently; refuse it instead (the reference
 * cannot encode such a string either). Returns the offset of the bad escape or -1. */
static long lone_surrogate(const char *s, size_t n) {
  bool in_str = false;
  for (size_t i = 0; i < n; i++) {
    if (!in_str) {
      in_str = s[i] == '"';
      continue;
    }
    if (s[i] == '"') {
      in_str = false;
    } else if (s[i] == '\\' && i + 1 < n) {
      if (s[i + 1] == 'u') {
        long v = u_escape(s, n, i);
        if (v >= 0xdc00 && v <= 0xdfff)
          return (long)i;
        if (v >= 0xd800 && v <= 0xdbff) {
          long w = i + 7 < n && s[i + 6] == '\\' && s[i + 7] == 'u' ? u_escape(s, n, i + 6) : -1;
          if (w < 0xdc00 || w > 0xdfff)
            return (long)i;
          i += 6;
        }
        i += 5;
      } else {
        i++;
      }
    }
  }
  return -1;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: s1-tokenize --tokenizer FILE [--decode] [--skip-special] < lines\n"
          "  Encodes like tokenizers' Tokenizer.encode(text, add_special_tokens=False).\n"
          "  --tokenizer FILE  a Hugging Face tokenizer.json (byte-level BPE)\n"
          "  (default)         stdin: one JSON string per line; stdout: one JSON array of ids each\n"
          "  --decode          stdin: one JSON array of ids per line; stdout: the decoded JSON strings\n"
          "  --skip-special    with --decode: leave special tokens out\n"
          "  --help, --version\n");
}

int main(int argc, char **argv) {
  if (cm_version_requested(argc, argv, "s1-tokenize"))
    return 0;
  const char *path = NULL;
  bool decode = false, skip_special = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc)
      path = argv[++i];
    else if (strcmp(argv[i], "--decode") == 0)
      decode = true;
    else if (strcmp(argv[i], "--skip-special") == 0)
      skip_special = true;
    else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      usage(stderr);
      return 2;
    }
  }
  if (!path) {
    usage(stderr);
    return 2;
  }
  struct cm_diag diag = {0};
  struct pp_tok *tok = NULL;
  if (pp_tok_load_file(path, &tok, &diag)) {
    fprintf(stderr, "s1-tokenize: %s\n", diag.msg ? diag.msg : "load failed");
    cm_diag_fini(&diag);
    return 1;
  }
  json_tokener *jt = json_tokener_new_ex(4);
  struct pp_tok_ids ids = {0};
  struct pp_tok_text text = {0};
  char *line = NULL, *out = NULL;
  size_t line_cap = 0, out_cap = 0, lineno = 0;
  ssize_t got;
  int status = 0;
  if (!jt) {
    fprintf(stderr, "s1-tokenize: out of memory\n");
    status = 1;
    goto done;
  }
  while ((got = getline(&line, &line_cap, stdin)) >= 0) {
    size_t n = (size_t)got;
    lineno++;
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
      n--;
    json_tokener_reset(jt);
    json_object *o = json_tokener_parse_ex(jt, line, (int)n);
    size_t end = json_tokener_get_parse_end(jt);
    while (o && end < n && strchr(" \t", line[end]))
      end++;
    if (!o || end != n) {
      fprintf(stderr, "s1-tokenize: line %zu: not one JSON value (%s at byte %zu)\n", lineno,
              json_tokener_error_desc(json_tokener_get_error(jt)), end);
      json_object_put(o);
      status = 1;
      break;
    }
    int rc = 0;
    if (!decode) {
      long bad = lone_surrogate(line, n);
      if (!json_object_is_type(o, json_type_string) || bad >= 0) {
        fprintf(stderr, "s1-tokenize: line %zu: %s\n", lineno,
                bad >= 0 ? "lone surrogate escape" : "expected a JSON string");
        json_object_put(o);
        status = 1;
        break;
      }
      ids.n = 0;
      rc = pp_tok_encode(tok, json_object_get_string(o), (size_t)json_object_get_string_len(o),
                         &ids, &diag);
      if (!rc) {
        /* at most 11 bytes per id plus brackets */
        if (ids.n * 12 + 4 > out_cap) {
          out_cap = ids.n * 12 + 4;
          char *p = realloc(out, out_cap);
          if (!p) {
            rc = -ENOMEM;
            goto fail_line;
          }
          out = p;
        }
        size_t k = 0;
        out[k++] = '[';
        for (size_t i = 0; i < ids.n; i++)
          k += (size_t)sprintf(out + k, i ? ",%d" : "%d", (int)ids.ids[i]);
        out[k++] = ']';
        out[k++] = '\n';
        fwrite(out, 1, k, stdout);
      }
    } else {
      if (!json_object_is_type(o, json_type_array)) {
        fprintf(stderr, "s1-tokenize: line %zu: expected a JSON array of ids\n", lineno);
        json_object_put(o);
        status = 1;
        break;
      }
      size_t m = json_object_array_length(o);
      ids.n = 0;
      if (pp_tok_ids_reserve(&ids, m)) {
        rc = -ENOMEM;
        goto fail_line;
      }
      for (size_t i = 0; i < m; i++) {
        json_object *v = json_object_array_get_idx(o, i);
        int64_t x = json_object_get_int64(v);
        if (!json_object_is_type(v, json_type_int) || x < 0 || x > INT32_MAX) {
          rc = cm_diag_set(&diag, -EINVAL, "element %zu is not an id", i);
          goto fail_line;
        }
        ids.ids[ids.n++] = (int32_t)x;
      }
      text.n = 0;
      rc = pp_tok_decode(tok, ids.ids, ids.n, skip_special, &text, &diag);
      if (!rc) {
        json_object *s = json_object_new_string_len(text.bytes, (int)text.n);
        if (!s) {
          rc = -ENOMEM;
          goto fail_line;
        }
        fputs(json_object_to_json_string_ext(s, JSON_C_TO_STRING_PLAIN |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE),
              stdout);
        fputc('\n', stdout);
        json_object_put(s);
      }
    }
  fail_line:
    json_object_put(o);
    if (rc) {
      fprintf(stderr, "s1-tokenize: line %zu: %s\n", lineno,
              diag.msg ? diag.msg : cm_strerror(rc));
      status = 1;
      break;
    }
  }
done:
  if (fflush(stdout))
    status = 1;
  free(line);
  free(out);
  pp_tok_ids_fini(&ids);
  pp_tok_text_fini(&text);
  if (jt)
    json_tokener_free(jt);
  cm_diag_fini(&diag);
  pp_tok_free(tok);
  return status;
}
