/* libFuzzer target for the tokenizer.json loader's fast path: the first byte picks how many
 * members go in a piece of model.vocab (1..4) and of model.merges (1..4), the rest is the
 * document. Loading it in pieces and in one json-c
 * parse must give the same code and message, or the same tables (tok_compare.h); any crash or
 * sanitizer report in the boundary scan fails too. Seeds: tests/fixtures/tokenizer/fuzz_load. */
#include "pp_tok.h"
#include "tok_compare.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  size_t vocab_per_piece = 1 + data[0] % 4, merges_per_piece = 1 + data[0] / 4 % 4;
  const char *json = (const char *)data + 1;
  size_t n = size - 1;
  struct pp_tok *fast = NULL, *plain = NULL;
  struct cm_diag df = {0}, dp = {0};
  int rf = tok_load_buffer(json, n, vocab_per_piece, merges_per_piece, &fast, &df);
  int rp = tok_load_buffer(json, n, 0, 0, &plain, &dp);
  if (rf != rp) {
    fprintf(stderr, "codes differ: pieces %d (%s), plain %d (%s)\n", rf, df.msg, rp, dp.msg);
    abort();
  }
  if (rf && (!df.msg || !dp.msg || strcmp(df.msg, dp.msg) != 0)) {
    fprintf(stderr, "messages differ: pieces \"%s\", plain \"%s\"\n", df.msg, dp.msg);
    abort();
  }
  if (!rf) {
    const char *diff = tok_tables_differ(fast, plain);
    if (diff || plain->in_pieces) {
      fprintf(stderr, "tables differ: %s\n", diff ? diff : "plain took pieces");
      abort();
    }
  }
  pp_tok_free(fast);
  pp_tok_free(plain);
  cm_diag_fini(&df);
  cm_diag_fini(&dp);
  return 0;
}
