/* libFuzzer target: JEMM's Python text rules on arbitrary bytes. Valid UTF-8 input is rendered as
 * a tool description (Python json.loads grammar, then json-c) and flattened; strict JSON input is
 * also rendered through str() and compact json.dumps. Every output must be valid UTF-8, and flat
 * text never starts or ends with whitespace nor holds two spaces in a row. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jemm.h"
#include "pp_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void valid(const struct pp_buf *b) {
  size_t off;
  if (b->n && !pp_tok_utf8_valid(b->bytes, b->n, &off))
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *s = (const char *)data;
  size_t off;
  struct cm_diag d = {0};
  if (size > (1 << 16) || !pp_tok_utf8_valid(s, size, &off))
    return 0;
  struct pp_buf b = {0}, f = {0};
  if (pp_jemm_tool_text(&b, s, size, &d) == 0)
    valid(&b);
  cm_diag_fini(&d);
  if (pp_jemm_flat(&f, s, size) == 0 && f.n) {
    valid(&f);
    if (f.bytes[0] == ' ' || f.bytes[f.n - 1] == ' ' || strstr(f.bytes, "  "))
      abort();
  }
  json_object *root = NULL;
  if (pp_json_parse(s, size, &root, &d) == 0) {
    struct pp_buf p = {0}, c = {0};
    if (pp_jemm_py_str(&p, root, &d) == 0)
      valid(&p);
    if (pp_jemm_compact_json(&c, root, &d) == 0)
      valid(&c);
    pp_buf_fini(&p);
    pp_buf_fini(&c);
  }
  json_object_put(root);
  cm_diag_fini(&d);
  pp_buf_fini(&b);
  pp_buf_fini(&f);
  return 0;
}
