/* Internal layout of struct pp_tok, shared by the loader, the encoder and the decoder.
 * Not installed: only files of preprocessor/tokenizer/ include it. */
#ifndef S1_PP_TOK_INTERNAL_H
#define S1_PP_TOK_INTERNAL_H

#include "pp_tok.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>

#define TOK_MAX_STAGES 8 /* pre-tokenizer steps after flattening Sequence */

/* One string hash table: bytes -> int32 value, open addressing, keys in the tokenizer's pool. */
struct tok_map {
  struct tok_map_slot *slots; /* [mask + 1] */
  size_t mask;                /* capacity - 1 (capacity is a power of two) */
  size_t n;                   /* keys stored */
};
struct tok_map_slot {
  uint32_t hash;  /* low 32 bits of the key hash; slot empty when len == UINT32_MAX */
  uint32_t len;   /* key length in bytes */
  uint64_t off;   /* key offset in tok->pool */
  int32_t value;  /* the mapped value */
};

/* id -> (rank, merged id) for BPE merges, keyed by (left << 32 | right). */
struct tok_merge_slot {
  uint64_t key;   /* (uint64)left << 32 | right; UINT64_MAX marks an empty slot */
  uint32_t rank;  /* merge priority: the line number in `merges` (lower merges first) */
  int32_t new_id; /* id of the merged token */
};

/* One entry per id. */
struct tok_entry {
  uint64_t off;     /* offset of the tokenizer.json spelling in tok->pool */
  uint32_t len;     /* its length in bytes; UINT32_MAX when the id is unused */
  uint64_t raw_off; /* offset of the decoded bytes in tok->pool */
  uint32_t raw_len; /* their length */
  uint8_t added;    /* 1 for an added token */
  uint8_t special;  /* 1 for an added token marked special */
};

/* An added token. */
struct tok_added {
  int32_t id;         /* its id */
  uint64_t off;       /* content (as matched: normalized form when `normalized`) in tok->pool */
  uint32_t len;       /* content length in bytes */
  bool single_word;   /* only match when not inside a word */
  bool lstrip;        /* swallow whitespace on the left */
  bool rstrip;        /* swallow whitespace on the right */
  bool normalized;    /* matched against normalized text (second pass) */
  bool special;       /* special token (decode may skip it) */
};

/* A trie over added-token contents for leftmost-longest matching. */
struct tok_trie_node {
  int32_t first_child; /* index of the first child, -1 if none */
  int32_t next_sibling;/* index of the next sibling, -1 if none */
  int32_t added;       /* index into tok->added of the token ending here, -1 if none */
  uint8_t byte;        /* edge byte from the parent */
};
struct tok_trie {
  struct tok_trie_node *nodes; /* [n]; node 0 is the root */
  size_t n;                    /* nodes used */
  uint8_t first[32];           /* bitmap of first bytes of any token (fast skip) */
};

enum tok_split_behavior {
  TOK_SPLIT_REMOVED,
  TOK_SPLIT_ISOLATED,
  TOK_SPLIT_MERGED_WITH_PREVIOUS,
  TOK_SPLIT_MERGED_WITH_NEXT,
  TOK_SPLIT_CONTIGUOUS,
};

/* One pre-tokenizer step. */
struct tok_stage {
  pcre2_code *re;                    /* the Split (or ByteLevel use_regex) pattern, JIT-compiled */
  enum tok_split_behavior behavior;  /* how matches become pieces */
  bool invert;                       /* Split invert: the non-matches are the delimiters */
  bool prefix_space;                 /* ByteLevel add_prefix_space: prepend ' ' to each piece */
};

enum tok_norm { TOK_NORM_NFC, TOK_NORM_NFD, TOK_NORM_NFKC, TOK_NORM_NFKD };

struct tok_thread; /* per-thread scratch, in pp_tok_encode.c */

struct pp_tok {
  char *pool;              /* all token strings (spelling and decoded bytes) */
  size_t pool_len;         /* bytes used in pool */
  size_t pool_cap;         /* bytes allocated */
  struct tok_entry *by_id; /* [n_ids] */
  int32_t n_ids;           /* highest id + 1 */
  size_t by_id_cap;        /* entries allocated in by_id (grows while loading) */
  bool in_pieces;          /* loaded by the fast path (vocab and merges parsed in pieces) */
  size_t n_model;          /* entries in the model vocabulary */
  size_t n_distinct;       /* distinct tokens with the added ones */
  struct tok_map vocab;    /* model vocabulary: spelling -> id */
  struct tok_map vocab_raw;/* model vocabulary: decoded bytes -> id (ignore_merges only) */
  struct tok_map added_map;/* added tokens: content -> id */
  struct tok_merge_slot *merges; /* [merge_mask + 1] */
  size_t merge_mask;       /* capacity - 1 */
  int32_t byte_id[256];    /* id of each single byte symbol, -1 if absent */
  int32_t byte_fallback_id[256]; /* id of "<0xHH>" when byte_fallback, else -1 */
  int32_t unk_id;          /* unk_token id, -1 if none */
  bool fuse_unk;           /* merge consecutive unknowns */
  bool ignore_merges;      /* a word found whole in the vocabulary skips merging */
  struct tok_added *added; /* [n_added] */
  size_t n_added;          /* number of added tokens */
  struct tok_trie trie_raw;   /* added tokens with normalized == false */
  struct tok_trie trie_norm;  /* added tokens with normalized == true */
  enum tok_norm norms[TOK_MAX_STAGES]; /* normalizer steps, in order */
  int n_norms;             /* number of normalizer steps (0: none) */
  struct tok_stage stages[TOK_MAX_STAGES]; /* pre-tokenizer steps */
  int n_stages;            /* number of pre-tokenizer steps */
  pthread_key_t key;       /* per-thread scratch */
  bool key_made;           /* key was created */
  pthread_mutex_t lock;    /* guards `threads` */
  struct tok_thread *threads; /* every scratch made for this tokenizer */
};

/* pp_tok_load_buffer with the fast path's piece sizes chosen: members of model.vocab and of
 * model.merges per json-c parse (0 and 0: parse the whole document at once). Whatever the sizes,
 * the result or the error is the plain path's; tok->in_pieces tells which path built it. */
int tok_load_buffer(const char *json, size_t n_bytes, size_t vocab_per_piece,
                    size_t merges_per_piece, struct pp_tok **ret_tok, struct cm_diag *diag);

/* Hash of a byte string (also used by the encoder's cache). */
uint64_t tok_hash(const void *p, size_t n);
/* Looks a byte string up in a map; returns the value or -1. */
int32_t tok_map_get(const struct pp_tok *tok, const struct tok_map *m, const char *s, size_t n);
/* Looks up the merge of (left, right): returns its slot or NULL. */
const struct tok_merge_slot *tok_merge_get(const struct pp_tok *tok, int32_t left, int32_t right);

/* The GPT-2 byte <-> character table: the code point standing for byte b, and its inverse
 * (-1 when a code point stands for no byte). */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);

/* Encoder per-thread scratch destructor (pp_tok_encode.c), called from pp_tok_free. */
void tok_thread_free(struct tok_thread *t);
void tok_thread_destructor(void *p);

#endif
