/* The exact byte-level BPE tokenizer: loads a Hugging Face tokenizer.json and encodes UTF-8 text to
 * ids the way `Tokenizer.encode(text, add_special_tokens=False)` of the Python `tokenizers` library
 * does (added-token splitting, normalizer, pre-tokenizer, BPE), and decodes ids back to UTF-8.
 * It leaves out training, offsets, truncation/padding and post-processor templates (with
 * add_special_tokens=False they add nothing). Unsupported components are refused at load time. */
#ifndef S1_PP_TOK_H
#define S1_PP_TOK_H

#include "cm_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits, checked before any work starts (error -CM_ELIMIT). */
#define PP_TOK_MAX_TEXT_BYTES ((size_t)64 << 20) /* one pp_tok_encode input: 64 MiB */
#define PP_TOK_MAX_FILE_BYTES ((size_t)256 << 20) /* one tokenizer.json: 256 MiB */
#define PP_TOK_MAX_IDS ((size_t)1 << 28)          /* ids in one pp_tok_ids / pp_tok_decode call */
#define PP_TOK_MAX_VOCAB ((int32_t)1 << 24)       /* highest token id + 1 in a tokenizer.json */

/* A loaded tokenizer. Immutable after load: every function below may be called from any number of
 * threads at once (each thread gets its own BPE cache and regex scratch, made on first use and
 * freed by pp_tok_free or when the thread exits). */
struct pp_tok;

/* A caller-owned, growable id buffer. Zero-initialise it; encode appends to it. */
struct pp_tok_ids {
  int32_t *ids; /* [cap] token ids; ids[0..n) are valid */
  size_t n;     /* ids written so far */
  size_t cap;   /* allocated capacity of ids, in elements */
};

/* A caller-owned, growable byte buffer for decoded text. Zero-initialise it; decode appends. */
struct pp_tok_text {
  char *bytes; /* [cap] UTF-8 bytes, always NUL-terminated after a successful decode */
  size_t n;    /* bytes written so far (excluding the terminating NUL) */
  size_t cap;  /* allocated capacity, in bytes */
};

/* Loads a tokenizer.json from a file path (mapped read-only while loading, read where mapping
 * fails). A file of 1 MiB or more is loaded on two threads (this one and one it starts and joins):
 * json-c parses model.vocab and model.merges in pieces, and any surprise falls back to one parse
 * of the whole document, so the result and the errors are those of that parse.
 * Ownership: *ret_tok is heap-owned by the caller, freed with pp_tok_free.
 * Returns 0; -ENOENT/-EIO if the file cannot be read; -CM_ELIMIT if it exceeds
 * PP_TOK_MAX_FILE_BYTES or an id reaches PP_TOK_MAX_VOCAB; -CM_EFORMAT for malformed JSON or
 * fields; -CM_EUNSUPPORTED naming the component (e.g. "normalizer Lowercase") this implementation
 * refuses; -ENOMEM.
 * Source: tokenizers 0.23.2 TokenizerImpl::from_file. */
int pp_tok_load_file(const char *path, struct pp_tok **ret_tok, struct cm_diag *diag);

/* Same as pp_tok_load_file, from an in-memory buffer of n_bytes (need not be NUL-terminated). */
int pp_tok_load_buffer(const char *json, size_t n_bytes, struct pp_tok **ret_tok,
                       struct cm_diag *diag);

/* Frees the tokenizer and every per-thread scratch made for it. No other call on `tok` may run
 * concurrently. Accepts NULL. */
void pp_tok_free(struct pp_tok *tok);

/* Encodes UTF-8 text and appends its ids to `ids` (existing ids are kept, so prompts can be built
 * by concatenation). Special-token text inside the input becomes the special id.
 * Shapes: text[n_bytes] (need not be NUL-terminated; NUL bytes are ordinary characters).
 * Ownership: ids->ids may be reallocated; on error ids->n is left as it was on entry.
 * Returns 0; -CM_EUTF8 (message gives the byte offset) for invalid UTF-8; -CM_ELIMIT if n_bytes >
 * PP_TOK_MAX_TEXT_BYTES or the ids would exceed PP_TOK_MAX_IDS; -ENOMEM.
 * Source: tokenizers 0.23.2 Tokenizer.encode(text, add_special_tokens=False).ids. */
int pp_tok_encode(const struct pp_tok *tok, const char *text, size_t n_bytes,
                  struct pp_tok_ids *ids, struct cm_diag *diag);

/* Decodes ids and appends the UTF-8 text to `out`. Byte sequences that are not valid UTF-8 become
 * U+FFFD per maximal invalid subpart; with skip_special, special added tokens are left out.
 * Returns 0; -EINVAL naming the first id that is not in the vocabulary; -CM_ELIMIT if n_ids >
 * PP_TOK_MAX_IDS; -ENOMEM. On error out->n is unchanged.
 * Source: tokenizers 0.23.2 Tokenizer.decode (ByteLevel decoder, from_utf8_lossy). */
int pp_tok_decode(const struct pp_tok *tok, const int32_t *ids, size_t n_ids, bool skip_special,
                  struct pp_tok_text *out, struct cm_diag *diag);

/* The id of a token given in its tokenizer.json spelling (byte-level form for vocabulary entries,
 * content for added tokens; added tokens win), or -1 when absent. */
int32_t pp_tok_token_to_id(const struct pp_tok *tok, const char *token, size_t n_bytes);

/* The tokenizer.json spelling of an id (not NUL-terminated; length in *ret_n_bytes), or NULL when
 * the id is not in the vocabulary. The pointer lives as long as `tok`. */
const char *pp_tok_id_to_token(const struct pp_tok *tok, int32_t id, size_t *ret_n_bytes);

/* Number of distinct tokens: the model vocabulary alone, or with the added tokens (like
 * get_vocab_size(with_added_tokens)). */
size_t pp_tok_vocab_size(const struct pp_tok *tok, bool with_added);

/* Whether `id` is an added token marked special. */
bool pp_tok_is_special(const struct pp_tok *tok, int32_t id);

/* Growable-buffer helpers: make room for `extra` more elements (bytes); free the storage. */
int pp_tok_ids_reserve(struct pp_tok_ids *ids, size_t extra);
void pp_tok_ids_fini(struct pp_tok_ids *ids);
int pp_tok_text_reserve(struct pp_tok_text *text, size_t extra);
void pp_tok_text_fini(struct pp_tok_text *text);

/* Checks that text[n_bytes] is valid UTF-8 (no overlongs, surrogates or code points > U+10FFFF).
 * Returns true if valid; otherwise false and *ret_offset is the byte offset of the first bad byte. */
bool pp_tok_utf8_valid(const char *text, size_t n_bytes, size_t *ret_offset);

#endif
