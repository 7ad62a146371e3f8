/* libFuzzer target for pp_tok_encode on the real Qwen3 tokenizer: arbitrary bytes must give ids
 * or a clean error (invalid UTF-8 with its offset), never a crash; valid input must decode to
 * text whose NFC equals the input's NFC, with every id inside the vocabulary.
 * The tokenizer path is compiled in (TOK_FUZZ_JSON) and may be overridden by $S1_SHARED. */
#include "pp_tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static struct pp_tok *tok;

static void load(void) {
  const char *shared = getenv("S1_SHARED");
  char path[4096];
  if (shared)
    snprintf(path, sizeof(path), "%s/tokenizers/qwen3/tokenizer.json", shared);
  else
    snprintf(path, sizeof(path), "%s", TOK_FUZZ_JSON);
  struct cm_diag d = {0};
  if (pp_tok_load_file(path, &tok, &d)) {
    fprintf(stderr, "fuzz_tok_encode: %s\n", d.msg);
    abort();
  }
}

static char *nfc(const char *s, size_t n, size_t *ret_n) {
  utf8proc_uint8_t *out = NULL;
  utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &out,
                                    UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (r < 0)
    abort();
  *ret_n = (size_t)r;
  return (char *)out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!tok)
    load();
  struct pp_tok_ids ids = {0};
  struct cm_diag d = {0};
  int rc = pp_tok_encode(tok, (const char *)data, size, &ids, &d);
  size_t bad;
  bool valid = pp_tok_utf8_valid((const char *)data, size, &bad);
  if (rc) {
    if (valid || rc != -CM_EUTF8 || !d.msg || !strstr(d.msg, "offset"))
      abort();
  } else {
    if (!valid)
      abort();
    struct pp_tok_text text = {0};
    if (pp_tok_decode(tok, ids.ids, ids.n, false, &text, &d))
      abort();
    size_t na, nb;
    char *a = nfc((const char *)data, size, &na), *b = nfc(text.bytes, text.n, &nb);
    if (na != nb || memcmp(a, b, na) != 0)
      abort();
    free(a);
    free(b);
    pp_tok_text_fini(&text);
  }
  cm_diag_fini(&d);
  pp_tok_ids_fini(&ids);
  return 0;
}
