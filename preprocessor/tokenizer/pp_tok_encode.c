/* Encoding: added-token splitting (leftmost-longest trie), normalization (utf8proc), the
 * pre-tokenizer steps (PCRE2 JIT, match iteration as the reference's Oniguruma iterator does) and
 * byte-level BPE with a merge-rank priority queue and a per-thread word cache. Decoding and the
 * UTF-8 helpers live here too: they share the per-thread scratch and the validity rules. */
#include "pp_tok_internal.h"
#include "pp_tok_unicode.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define CACHE_SLOTS (1u << 15)      /* hash slots of the word cache */
#define CACHE_MAX_WORDS (1u << 14)  /* words kept before the cache is cleared */
#define CACHE_MAX_WORD_BYTES 256    /* longer words are not cached */
#define CACHE_MAX_ID_ARENA (1u << 20)
#define MATCH_PAIRS 32              /* ovector pairs of the per-thread match data */

struct piece {
  size_t off;    /* byte offset in the step's subject */
  size_t len;    /* length in bytes */
  bool is_match; /* produced by a pattern match (before behaviours are applied) */
};

struct level {
  struct piece *v; /* [cap] matches and gaps of the current subject */
  size_t cap;      /* allocated pieces */
  char *buf;       /* [buf_cap] the subject with a prefix space (ByteLevel add_prefix_space) */
  size_t buf_cap;  /* allocated bytes */
};

struct sym {
  int32_t id;   /* token id; -1 once merged into its left neighbour */
  int32_t prev; /* index of the previous live symbol, -1 at the start */
  int32_t next; /* index of the next live symbol, -1 at the end */
};

struct heap_item {
  uint32_t rank;  /* merge rank (lower first) */
  uint32_t pos;   /* index of the left symbol (lower first on equal rank) */
  int32_t new_id; /* id the merge produces */
};

struct cache_slot {
  uint64_t hash;    /* full hash of the word */
  uint32_t key_off; /* word bytes in keys */
  uint32_t key_len; /* UINT32_MAX when empty */
  uint32_t ids_off; /* result ids in ids */
  uint32_t ids_len; /* number of ids */
};

struct tok_thread {
  struct tok_thread *next;   /* list of every scratch of the tokenizer */
  struct tok_thread **pprev; /* link pointing at this one */
  struct pp_tok *tok;        /* owner */
  pcre2_match_data *md;      /* regex match data */
  pcre2_jit_stack *jit;      /* JIT stack (grows to 16 MiB) */
  pcre2_match_context *mctx; /* holds the JIT stack */
  char *norm;                /* [norm_cap] normalized segment */
  size_t norm_cap;           /* bytes */
  char *norm2;               /* [norm2_cap] second buffer for multi-step normalizers */
  size_t norm2_cap;          /* bytes */
  int32_t *cps;              /* [cps_cap] code points during normalization */
  size_t cps_cap;            /* elements */
  struct level lvl[TOK_MAX_STAGES]; /* per pre-tokenizer step */
  struct sym *sym;           /* [sym_cap] BPE symbols */
  size_t sym_cap;            /* elements */
  struct heap_item *heap;    /* [heap_cap] BPE merge queue */
  size_t heap_cap;           /* elements */
  struct cache_slot *cache;  /* [CACHE_SLOTS] */
  size_t cache_words;        /* words stored */
  char *keys;                /* [keys_cap] cached words */
  size_t keys_len, keys_cap; /* bytes used / allocated */
  int32_t *ids;              /* [ids_cap] cached results */
  size_t ids_len, ids_cap;   /* elements used / allocated */
  char *dec;                 /* [dec_cap] raw bytes during decode */
  size_t dec_cap;            /* bytes */
};

struct enc {
  const struct pp_tok *tok; /* tokenizer */
  struct tok_thread *t;     /* this thread's scratch */
  struct pp_tok_ids *ids;   /* output */
  struct cm_diag *diag;     /* error sink */
};

/* ---- growable buffers --------------------------------------------------------------------- */

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need)
    c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q)
    return -ENOMEM;
  *p = q;
  *cap = c;
  return 0;
}

int pp_tok_ids_reserve(struct pp_tok_ids *ids, size_t extra) {
  if (extra > PP_TOK_MAX_IDS || ids->n > PP_TOK_MAX_IDS - extra)
    return -CM_ELIMIT;
  return grow((void **)&ids->ids, &ids->cap, ids->n + extra, sizeof(int32_t));
}

void pp_tok_ids_fini(struct pp_tok_ids *ids) {
  if (!ids)
    return;
  free(ids->ids);
  *ids = (struct pp_tok_ids){0};
}

int pp_tok_text_reserve(struct pp_tok_text *text, size_t extra) {
  if (text->n > SIZE_MAX / 2 - extra)
    return -CM_ELIMIT;
  return grow((void **)&text->bytes, &text->cap, text->n + extra + 1, 1);
}

void pp_tok_text_fini(struct pp_tok_text *text) {
  if (!text)
    return;
  free(text->bytes);
  *text = (struct pp_tok_text){0};
}

/* ---- UTF-8 -------------------------------------------------------------------------------- */

/* Length of the valid character at s (> 0), or minus the length of the maximal invalid subpart
 * (the rule of from_utf8_lossy and of the Unicode standard's "best practice"). */
static int utf8_step(const uint8_t *s, size_t n) {
  uint8_t b = s[0];
  if (b < 0x80)
    return 1;
  if (b >= 0xc2 && b <= 0xdf)
    return (n >= 2 && (s[1] & 0xc0) == 0x80) ? 2 : -1;
  if (b >= 0xe0 && b <= 0xef) {
    uint8_t lo = b == 0xe0 ? 0xa0 : 0x80, hi = b == 0xed ? 0x9f : 0xbf;
    if (n < 2 || s[1] < lo || s[1] > hi)
      return -1;
    if (n < 3 || (s[2] & 0xc0) != 0x80)
      return -2;
    return 3;
  }
  if (b >= 0xf0 && b <= 0xf4) {
    uint8_t lo = b == 0xf0 ? 0x90 : 0x80, hi = b == 0xf4 ? 0x8f : 0xbf;
    if (n < 2 || s[1] < lo || s[1] > hi)
      return -1;
    if (n < 3 || (s[2] & 0xc0) != 0x80)
      return -2;
    if (n < 4 || (s[3] & 0xc0) != 0x80)
      return -3;
    return 4;
  }
  return -1;
}

bool pp_tok_utf8_valid(const char *text, size_t n_bytes, size_t *ret_offset) {
  const uint8_t *s = (const uint8_t *)text;
  size_t i = 0;
  while (i < n_bytes) {
    /* ASCII run, eight bytes at a time */
    while (i + 8 <= n_bytes) {
      uint64_t w;
      memcpy(&w, s + i, 8);
      if (w & 0x8080808080808080ull)
        break;
      i += 8;
    }
    if (i >= n_bytes)
      break;
    int k = utf8_step(s + i, n_bytes - i);
    if (k < 0) {
      *ret_offset = i;
      return false;
    }
    i += (size_t)k;
  }
  return true;
}

static uint32_t decode_cp(const uint8_t *s, int k) {
  switch (k) {
  case 1:
    return s[0];
  case 2:
    return (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
  case 3:
    return (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
  default:
    return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 |
           (uint32_t)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
  }
}

/* Unicode White_Space (Rust's char::is_whitespace and regex \s). */
static bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

/* Regex \w: letters, marks, decimal and letter numbers, connector punctuation, joiners. */
static bool is_word_char(uint32_t c) {
  if (c == 0x200c || c == 0x200d)
    return true;
  switch (utf8proc_category((utf8proc_int32_t)c)) {
  case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
  case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
  case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
  case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
    return true;
  default:
    return false;
  }
}

/* The last character of s[0..n) (valid UTF-8, n > 0), and its start. */
static uint32_t last_cp(const char *s, size_t n, size_t *ret_start) {
  size_t i = n - 1;
  while (i > 0 && ((uint8_t)s[i] & 0xc0) == 0x80)
    i--;
  *ret_start = i;
  return decode_cp((const uint8_t *)s + i, (int)(n - i));
}

/* ---- per-thread scratch ------------------------------------------------------------------- */

void tok_thread_free(struct tok_thread *t) {
  if (!t)
    return;
  pthread_mutex_lock(&t->tok->lock);
  if (t->pprev) {
    *t->pprev = t->next;
    if (t->next)
      t->next->pprev = t->pprev;
  }
  pthread_mutex_unlock(&t->tok->lock);
  pcre2_match_data_free(t->md);
  pcre2_match_context_free(t->mctx);
  pcre2_jit_stack_free(t->jit);
  free(t->norm);
  free(t->norm2);
  free(t->cps);
  for (int i = 0; i < TOK_MAX_STAGES; i++) {
    free(t->lvl[i].v);
    free(t->lvl[i].buf);
  }
  free(t->sym);
  free(t->heap);
  free(t->cache);
  free(t->keys);
  free(t->ids);
  free(t->dec);
  free(t);
}

void tok_thread_destructor(void *p) { tok_thread_free(p); }

static struct tok_thread *thread_get(const struct pp_tok *ctok) {
  /* The scratch list and lock are the only mutable parts of a loaded tokenizer. */
  struct pp_tok *tok = (struct pp_tok *)ctok;
  struct tok_thread *t = pthread_getspecific(tok->key);
  if (t)
    return t;
  t = calloc(1, sizeof(*t));
  if (!t)
    return NULL;
  t->tok = tok;
  t->md = pcre2_match_data_create(MATCH_PAIRS, NULL);
  t->mctx = pcre2_match_context_create(NULL);
  t->jit = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, NULL);
  t->cache = malloc(sizeof(*t->cache) * CACHE_SLOTS);
  if (!t->md || !t->mctx || !t->jit || !t->cache) {
    free(t->cache);
    pcre2_match_data_free(t->md);
    pcre2_match_context_free(t->mctx);
    pcre2_jit_stack_free(t->jit);
    free(t);
    return NULL;
  }
  pcre2_jit_stack_assign(t->mctx, NULL, t->jit);
  for (size_t i = 0; i < CACHE_SLOTS; i++)
    t->cache[i].key_len = UINT32_MAX;
  pthread_mutex_lock(&tok->lock);
  t->next = tok->threads;
  if (t->next)
    t->next->pprev = &t->next;
  tok->threads = t;
  t->pprev = &tok->threads;
  pthread_mutex_unlock(&tok->lock);
  if (pthread_setspecific(tok->key, t)) {
    tok_thread_free(t);
    return NULL;
  }
  return t;
}

/* ---- output ------------------------------------------------------------------------------- */

static int emit(struct enc *e, const int32_t *v, size_t n) {
  struct pp_tok_ids *ids = e->ids;
  if (n == 0)
    return 0;
  if (ids->cap - ids->n < n) {
    int rc = pp_tok_ids_reserve(ids, n);
    if (rc)
      return cm_diag_set(e->diag, rc,
                         rc == -ENOMEM ? "tokenizer: out of memory"
                                       : "tokenizer: more than %zu ids",
                         PP_TOK_MAX_IDS);
  }
  memcpy(ids->ids + ids->n, v, n * sizeof(int32_t));
  ids->n += n;
  return 0;
}

/* ---- BPE ---------------------------------------------------------------------------------- */

static void heap_push(struct heap_item *h, size_t *n, struct heap_item it) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (h[p].rank < it.rank || (h[p].rank == it.rank && h[p].pos < it.pos))
      break;
    h[i] = h[p];
    i = p;
  }
  h[i] = it;
}

static struct heap_item heap_pop(struct heap_item *h, size_t *n) {
  struct heap_item top = h[0], last = h[--(*n)];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n)
      break;
    if (c + 1 < *n &&
        (h[c + 1].rank < h[c].rank || (h[c + 1].rank == h[c].rank && h[c + 1].pos < h[c].pos)))
      c++;
    if (last.rank < h[c].rank || (last.rank == h[c].rank && last.pos < h[c].pos))
      break;
    h[i] = h[c];
    i = c;
  }
  h[i] = last;
  return top;
}

static void try_pair(const struct pp_tok *tok, struct tok_thread *t, size_t *nh, int32_t left) {
  int32_t right = t->sym[left].next;
  if (left < 0 || right < 0)
    return;
  const struct tok_merge_slot *m = tok_merge_get(tok, t->sym[left].id, t->sym[right].id);
  if (m)
    heap_push(t->heap, nh, (struct heap_item){m->rank, (uint32_t)left, m->new_id});
}

/* Merges the symbols of word w[0..n) (raw bytes) and appends the resulting ids to `out`. */
static int bpe_word(struct enc *e, const uint8_t *w, size_t n) {
  const struct pp_tok *tok = e->tok;
  struct tok_thread *t = e->t;
  if (grow((void **)&t->sym, &t->sym_cap, n, sizeof(*t->sym)) ||
      grow((void **)&t->heap, &t->heap_cap, 2 * n + 2, sizeof(*t->heap)))
    return cm_diag_set(e->diag, -ENOMEM, "tokenizer: out of memory");
  /* Initial symbols: one per byte (a byte-level character); unknown bytes go to byte fallback,
   * then unk (fused when fuse_unk), else they are dropped, as the reference does. */
  int32_t ns = 0;
  int32_t pending_unk = 0; /* unk symbols waiting (count; 1 when fused) */
  for (size_t i = 0; i < n; i++) {
    int32_t id = tok->byte_id[w[i]];
    if (id < 0 && tok->byte_fallback_id[w[i]] >= 0)
      id = tok->byte_fallback_id[w[i]];
    if (id < 0) {
      if (tok->unk_id >= 0 && !(tok->fuse_unk && pending_unk))
        pending_unk++;
      continue;
    }
    for (; pending_unk; pending_unk--)
      t->sym[ns++].id = tok->unk_id;
    t->sym[ns++].id = id;
  }
  for (; pending_unk; pending_unk--)
    t->sym[ns++].id = tok->unk_id;
  for (int32_t i = 0; i < ns; i++) {
    t->sym[i].prev = i - 1;
    t->sym[i].next = i + 1 < ns ? i + 1 : -1;
  }
  size_t nh = 0;
  for (int32_t i = 0; i + 1 < ns; i++)
    try_pair(tok, t, &nh, i);
  while (nh) {
    struct heap_item it = heap_pop(t->heap, &nh);
    struct sym *l = &t->sym[it.pos];
    if (l->id < 0 || l->next < 0)
      continue;
    struct sym *r = &t->sym[l->next];
    const struct tok_merge_slot *m = tok_merge_get(tok, l->id, r->id);
    if (!m || m->new_id != it.new_id)
      continue; /* stale entry */
    l->id = it.new_id;
    r->id = -1;
    l->next = r->next;
    if (r->next >= 0)
      t->sym[r->next].prev = (int32_t)it.pos;
    if (l->prev >= 0)
      try_pair(tok, t, &nh, l->prev);
    try_pair(tok, t, &nh, (int32_t)it.pos);
  }
  /* Hand the live ids back in the heap's storage (it holds >= 2n + 2 items, so n ids fit). */
  int32_t k = 0;
  for (int32_t i = ns ? 0 : -1; i >= 0; i = t->sym[i].next)
    ((int32_t *)t->heap)[k++] = t->sym[i].id;
  return k;
}

static void cache_clear(struct tok_thread *t) {
  for (size_t i = 0; i < CACHE_SLOTS; i++)
    t->cache[i].key_len = UINT32_MAX;
  t->cache_words = 0;
  t->keys_len = 0;
  t->ids_len = 0;
}

/* Encodes one pre-token (raw bytes) with the cache in front of BPE. */
static int bpe(struct enc *e, const char *s, size_t n) {
  const struct pp_tok *tok = e->tok;
  struct tok_thread *t = e->t;
  if (n == 1 && tok->byte_id[(uint8_t)s[0]] >= 0)
    return emit(e, &tok->byte_id[(uint8_t)s[0]], 1);
  if (tok->ignore_merges) {
    int32_t id = tok_map_get(tok, &tok->vocab_raw, s, n);
    if (id >= 0)
      return emit(e, &id, 1);
  }
  bool cacheable = n <= CACHE_MAX_WORD_BYTES;
  uint64_t h = 0;
  size_t slot = 0;
  if (cacheable) {
    h = tok_hash(s, n);
    for (slot = h & (CACHE_SLOTS - 1);; slot = (slot + 1) & (CACHE_SLOTS - 1)) {
      struct cache_slot *c = &t->cache[slot];
      if (c->key_len == UINT32_MAX)
        break;
      if (c->hash == h && c->key_len == n && memcmp(t->keys + c->key_off, s, n) == 0)
        return emit(e, t->ids + c->ids_off, c->ids_len);
    }
  }
  int k = bpe_word(e, (const uint8_t *)s, n);
  if (k < 0)
    return k;
  const int32_t *res = (const int32_t *)t->heap;
  if (cacheable && k > 0) {
    if (t->cache_words >= CACHE_MAX_WORDS || t->ids_len + (size_t)k > CACHE_MAX_ID_ARENA) {
      cache_clear(t);
      for (slot = h & (CACHE_SLOTS - 1); t->cache[slot].key_len != UINT32_MAX;
           slot = (slot + 1) & (CACHE_SLOTS - 1)) {
      }
    }
    if (!grow((void **)&t->keys, &t->keys_cap, t->keys_len + n, 1) &&
        !grow((void **)&t->ids, &t->ids_cap, t->ids_len + (size_t)k, sizeof(int32_t))) {
      memcpy(t->keys + t->keys_len, s, n);
      memcpy(t->ids + t->ids_len, res, (size_t)k * sizeof(int32_t));
      t->cache[slot] = (struct cache_slot){h, (uint32_t)t->keys_len, (uint32_t)n,
                                           (uint32_t)t->ids_len, (uint32_t)k};
      t->keys_len += n;
      t->ids_len += (size_t)k;
      t->cache_words++;
    }
  }
  return emit(e, res, (size_t)k);
}

/* ---- pre-tokenizer ------------------------------------------------------------------------ */

static int pretok(struct enc *e, int k, const char *s, size_t n);

/* Finds matches and gaps of stage k's pattern in s[0..n) into lvl[k].v, in order; iteration
 * follows the reference's Oniguruma find_iter: an empty match right after the previous match is
 * skipped by advancing one character. Returns the count or a negative code. */
static int64_t find_matches(struct enc *e, int k, const char *s, size_t n) {
  struct tok_thread *t = e->t;
  struct level *L = &t->lvl[k];
  const pcre2_code *re = e->tok->stages[k].re;
  size_t cnt = 0, prev = 0, last_end = 0, last_match_end = SIZE_MAX;
  while (last_end <= n) {
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, last_end, PCRE2_NO_UTF_CHECK, t->md, t->mctx);
    if (rc == PCRE2_ERROR_NOMATCH)
      break;
    if (rc < 0) {
      PCRE2_UCHAR msg[120];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      return cm_diag_set(e->diag, rc == PCRE2_ERROR_NOMEMORY ? -ENOMEM : -CM_ELIMIT,
                         "tokenizer: pre_tokenizer regex failed: %s", (char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
    size_t ms = ov[0], me = ov[1];
    if (ms == me && last_match_end == last_end) {
      if (last_end >= n) {
        last_end++;
      } else {
        int step = utf8_step((const uint8_t *)s + last_end, n - last_end);
        last_end += step > 0 ? (size_t)step : 1;
      }
      continue;
    }
    last_end = me;
    last_match_end = me;
    if (grow((void **)&L->v, &L->cap, cnt + 2, sizeof(*L->v)))
      return cm_diag_set(e->diag, -ENOMEM, "tokenizer: out of memory");
    if (prev != ms)
      L->v[cnt++] = (struct piece){prev, ms - prev, false};
    L->v[cnt++] = (struct piece){ms, me - ms, true};
    prev = me;
  }
  if (grow((void **)&L->v, &L->cap, cnt + 1, sizeof(*L->v)))
    return cm_diag_set(e->diag, -ENOMEM, "tokenizer: out of memory");
  if (prev != n)
    L->v[cnt++] = (struct piece){prev, n - prev, false};
  return (int64_t)cnt;
}

/* Applies a Split behaviour in place: returns the number of pieces to keep (is_match false). */
static size_t apply_behavior(struct piece *v, size_t n, enum tok_split_behavior b, bool invert) {
  if (invert)
    for (size_t i = 0; i < n; i++)
      v[i].is_match = !v[i].is_match;
  size_t out = 0;
  bool prev_match = false;
  switch (b) {
  case TOK_SPLIT_ISOLATED:
    return n;
  case TOK_SPLIT_REMOVED:
    for (size_t i = 0; i < n; i++)
      if (!v[i].is_match)
        v[out++] = v[i];
    return out;
  case TOK_SPLIT_CONTIGUOUS:
    for (size_t i = 0; i < n; i++) {
      if (v[i].is_match == prev_match && out > 0)
        v[out - 1].len = v[i].off + v[i].len - v[out - 1].off;
      else
        v[out++] = v[i];
      prev_match = v[i].is_match;
    }
    return out;
  case TOK_SPLIT_MERGED_WITH_PREVIOUS:
    for (size_t i = 0; i < n; i++) {
      if (v[i].is_match && !prev_match && out > 0)
        v[out - 1].len = v[i].off + v[i].len - v[out - 1].off;
      else
        v[out++] = v[i];
      prev_match = v[i].is_match;
    }
    return out;
  case TOK_SPLIT_MERGED_WITH_NEXT: {
    /* The reference folds from the right; do the same, filling from the end. */
    size_t w = n;
    for (size_t i = n; i-- > 0;) {
      if (v[i].is_match && !prev_match && w < n) {
        v[w].len = v[w].off + v[w].len - v[i].off;
        v[w].off = v[i].off;
      } else {
        v[--w] = v[i];
      }
      prev_match = v[i].is_match;
    }
    memmove(v, v + w, (n - w) * sizeof(*v));
    return n - w;
  }
  }
  return n;
}

static int pretok(struct enc *e, int k, const char *s, size_t n) {
  if (n == 0)
    return 0;
  if (k == e->tok->n_stages)
    return bpe(e, s, n);
  const struct tok_stage *st = &e->tok->stages[k];
  struct level *L = &e->t->lvl[k];
  if (st->prefix_space && s[0] != ' ') {
    if (grow((void **)&L->buf, &L->buf_cap, n + 1, 1))
      return cm_diag_set(e->diag, -ENOMEM, "tokenizer: out of memory");
    L->buf[0] = ' ';
    memcpy(L->buf + 1, s, n);
    s = L->buf;
    n++;
  }
  if (!st->re)
    return pretok(e, k + 1, s, n);
  int64_t cnt = find_matches(e, k, s, n);
  if (cnt < 0)
    return (int)cnt;
  size_t keep = apply_behavior(L->v, (size_t)cnt, st->behavior, st->invert);
  for (size_t i = 0; i < keep; i++) {
    /* L->v is stable here: deeper steps use their own level. */
    int rc = pretok(e, k + 1, s + L->v[i].off, L->v[i].len);
    if (rc)
      return rc;
  }
  return 0;
}

/* ---- normalization and added tokens ------------------------------------------------------- */

static bool all_ascii(const char *s, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, s + i, 8);
    if (w & 0x8080808080808080ull)
      return false;
  }
  for (; i < n; i++)
    if ((uint8_t)s[i] & 0x80)
      return false;
  return true;
}

static bool nfc_unknown(uint32_t c) {
  size_t lo = 0, hi = sizeof(TOK_NFC_UNKNOWN) / sizeof(TOK_NFC_UNKNOWN[0]);
  if (c < TOK_NFC_UNKNOWN[0][0])
    return false;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c < TOK_NFC_UNKNOWN[mid][0])
      hi = mid;
    else if (c > TOK_NFC_UNKNOWN[mid][1])
      lo = mid + 1;
    else
      return true;
  }
  return false;
}

/* Normalizes s[0..n) with one utf8proc form and appends the UTF-8 result to out (grown). */
static int norm_append(struct enc *e, const char *s, size_t n, utf8proc_option_t opt, char **out,
                       size_t *out_n, size_t *out_cap) {
  struct tok_thread *t = e->t;
  utf8proc_ssize_t r;
  if (n == 0)
    return 0;
  for (;;) {
    r = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, t->cps,
                           (utf8proc_ssize_t)t->cps_cap, opt);
    if (r < 0)
      return cm_diag_set(e->diag, -CM_EUTF8, "tokenizer: normalization failed: %s",
                         utf8proc_errmsg(r));
    if ((size_t)r <= t->cps_cap)
      break;
    if (grow((void **)&t->cps, &t->cps_cap, (size_t)r, sizeof(int32_t)))
      return cm_diag_set(e->diag, -ENOMEM, "tokenizer: out of memory");
  }
  r = utf8proc_reencode(t->cps, r, opt);
  if (r < 0)
    return cm_diag_set(e->diag, -CM_EUTF8, "tokenizer: normalization failed: %s",
                       utf8proc_errmsg(r));
  if (grow((void **)out, out_cap, *out_n + (size_t)r + 1, 1))
    return cm_diag_set(e->diag, -ENOMEM, "tokenizer: out of memory");
  memcpy(*out + *out_n, t->cps, (size_t)r);
  *out_n += (size_t)r;
  return 0;
}

/* Normalizes s[0..n) into the thread's buffers; *ret_s, *ret_n give the result (s itself when
 * nothing changes). Code points the reference's tables do not know are kept in place and the
 * text between them is normalized on its own (they block reordering and composition there). */
static int normalize(struct enc *e, const char *s, size_t n, const char **ret_s, size_t *ret_n) {
  const struct pp_tok *tok = e->tok;
  struct tok_thread *t = e->t;
  *ret_s = s;
  *ret_n = n;
  if (!tok->n_norms || all_ascii(s, n)) /* every normal form leaves ASCII unchanged */
    return 0;
  static const int flags[] = {
      [TOK_NORM_NFC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE,
      [TOK_NORM_NFD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
      [TOK_NORM_NFKC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
      [TOK_NORM_NFKD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT,
  };
  for (int i = 0; i < tok->n_norms; i++) {
    utf8proc_option_t opt = (utf8proc_option_t)flags[tok->norms[i]];
    /* output goes to whichever buffer does not hold the input */
    bool into_a = s != t->norm;
    char **out = into_a ? &t->norm : &t->norm2;
    size_t *cap = into_a ? &t->norm_cap : &t->norm2_cap;
    size_t out_n = 0, seg = 0;
    int rc;
    for (size_t k = 0; k < n;) {
      int len = utf8_step((const uint8_t *)s + k, n - k);
      if (len <= 0)
        return cm_diag_set(e->diag, -CM_EUTF8, "tokenizer: invalid UTF-8 after normalization");
      if (len >= 2 && nfc_unknown(decode_cp((const uint8_t *)s + k, len))) {
        if ((rc = norm_append(e, s + seg, k - seg, opt, out, &out_n, cap)))
          return rc;
        if (grow((void **)out, cap, out_n + (size_t)len + 1, 1))
          return cm_diag_set(e->diag, -ENOMEM, "tokenizer: out of memory");
        memcpy(*out + out_n, s + k, (size_t)len);
        out_n += (size_t)len;
        seg = k + (size_t)len;
      }
      k += (size_t)len;
    }
    if ((rc = norm_append(e, s + seg, n - seg, opt, out, &out_n, cap)))
      return rc;
    s = *out;
    n = out_n;
  }
  *ret_s = s;
  *ret_n = n;
  return 0;
}

typedef int (*gap_fn)(struct enc *e, const char *s, size_t n);

/* Splits s[0..n) on the added tokens of `tr` (leftmost-longest, with single_word, lstrip and
 * rstrip as the reference applies them); gaps go to `gap`, matched tokens to the output. */
static int split_added(struct enc *e, const struct tok_trie *tr, const char *s, size_t n,
                       gap_fn gap) {
  const struct pp_tok *tok = e->tok;
  size_t start_offset = 0, pos = 0;
  int rc;
  if (!tr->nodes)
    return gap(e, s, n);
  while (pos < n) {
    uint8_t b0 = (uint8_t)s[pos];
    if (!(tr->first[b0 >> 3] & (1u << (b0 & 7)))) {
      pos++;
      continue;
    }
    int32_t node = 0, best = -1;
    size_t best_len = 0;
    for (size_t i = pos; i < n; i++) {
      int32_t c = tr->nodes[node].first_child;
      while (c >= 0 && tr->nodes[c].byte != (uint8_t)s[i])
        c = tr->nodes[c].next_sibling;
      if (c < 0)
        break;
      node = c;
      if (tr->nodes[c].added >= 0) {
        best = tr->nodes[c].added;
        best_len = i + 1 - pos;
      }
    }
    if (best < 0) {
      pos++;
      continue;
    }
    const struct tok_added *a = &tok->added[best];
    size_t start = pos, stop = pos + best_len;
    pos = stop;
    if (a->single_word) {
      size_t ls;
      bool start_ok = start == 0 || !is_word_char(last_cp(s, start, &ls));
      bool stop_ok = true;
      if (stop < n) {
        int k = utf8_step((const uint8_t *)s + stop, n - stop);
        stop_ok = !is_word_char(decode_cp((const uint8_t *)s + stop, k > 0 ? k : 1));
      }
      if (!start_ok || !stop_ok)
        continue;
    }
    if (a->lstrip) {
      size_t ns = start;
      while (ns > 0) {
        size_t ls;
        uint32_t c = last_cp(s, ns, &ls);
        if (!is_white_space(c))
          break;
        ns = ls;
      }
      start = ns > start_offset ? ns : start_offset;
    }
    if (a->rstrip) {
      while (stop < n) {
        int k = utf8_step((const uint8_t *)s + stop, n - stop);
        if (k <= 0 || !is_white_space(decode_cp((const uint8_t *)s + stop, k)))
          break;
        stop += (size_t)k;
      }
    }
    if (start_offset < start && (rc = gap(e, s + start_offset, start - start_offset)))
      return rc;
    if ((rc = emit(e, &a->id, 1)))
      return rc;
    start_offset = stop;
  }
  if (start_offset < n)
    return gap(e, s + start_offset, n - start_offset);
  return 0;
}

static int pretok_top(struct enc *e, const char *s, size_t n) { return pretok(e, 0, s, n); }

/* A piece of the input between non-normalized added tokens: normalize, then split on the
 * normalized added tokens, then pre-tokenize. */
static int segment(struct enc *e, const char *s, size_t n) {
  const char *ns;
  size_t nn;
  int rc = normalize(e, s, n, &ns, &nn);
  if (rc)
    return rc;
  return split_added(e, &e->tok->trie_norm, ns, nn, pretok_top);
}

int pp_tok_encode(const struct pp_tok *tok, const char *text, size_t n_bytes,
                  struct pp_tok_ids *ids, struct cm_diag *diag) {
  if (n_bytes > PP_TOK_MAX_TEXT_BYTES)
    return cm_diag_set(diag, -CM_ELIMIT, "tokenizer: input of %zu bytes exceeds the limit of %zu",
                       n_bytes, PP_TOK_MAX_TEXT_BYTES);
  size_t bad;
  if (!pp_tok_utf8_valid(text, n_bytes, &bad))
    return cm_diag_set(diag, -CM_EUTF8, "tokenizer: invalid UTF-8 at byte offset %zu", bad);
  struct tok_thread *t = thread_get(tok);
  if (!t)
    return cm_diag_set(diag, -ENOMEM, "tokenizer: out of memory");
  struct enc e = {tok, t, ids, diag};
  size_t n0 = ids->n;
  int rc = split_added(&e, &tok->trie_raw, text, n_bytes, segment);
  if (rc)
    ids->n = n0;
  return rc;
}

/* ---- decode ------------------------------------------------------------------------------- */

int pp_tok_decode(const struct pp_tok *tok, const int32_t *ids, size_t n_ids, bool skip_special,
                  struct pp_tok_text *out, struct cm_diag *diag) {
  if (n_ids > PP_TOK_MAX_IDS)
    return cm_diag_set(diag, -CM_ELIMIT, "tokenizer: %zu ids exceed the limit of %zu", n_ids,
                       PP_TOK_MAX_IDS);
  size_t raw = 0;
  for (size_t i = 0; i < n_ids; i++) {
    int32_t id = ids[i];
    if (id < 0 || id >= tok->n_ids || tok->by_id[id].len == UINT32_MAX)
      return cm_diag_set(diag, -EINVAL, "tokenizer: id %d (position %zu) is not in the vocabulary",
                         (int)id, i);
    raw += tok->by_id[id].raw_len;
  }
  /* Worst case every byte is invalid and becomes U+FFFD (3 bytes). */
  if (raw > (SIZE_MAX - 1) / 3 || pp_tok_text_reserve(out, raw * 3))
    return cm_diag_set(diag, -ENOMEM, "tokenizer: out of memory");
  char *buf = malloc(raw ? raw : 1);
  if (!buf)
    return cm_diag_set(diag, -ENOMEM, "tokenizer: out of memory");
  size_t nb = 0;
  for (size_t i = 0; i < n_ids; i++) {
    const struct tok_entry *en = &tok->by_id[ids[i]];
    if (skip_special && en->special)
      continue;
    memcpy(buf + nb, tok->pool + en->raw_off, en->raw_len);
    nb += en->raw_len;
  }
  char *o = out->bytes + out->n;
  for (size_t i = 0; i < nb;) {
    int k = utf8_step((const uint8_t *)buf + i, nb - i);
    if (k > 0) {
      memcpy(o, buf + i, (size_t)k);
      o += k;
      i += (size_t)k;
    } else {
      memcpy(o, "\xef\xbf\xbd", 3);
      o += 3;
      i += (size_t)-k;
    }
  }
  free(buf);
  out->n = (size_t)(o - out->bytes);
  out->bytes[out->n] = 0;
  return 0;
}
