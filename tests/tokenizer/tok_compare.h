/* Table-by-table comparison of two loaded tokenizers, for the tests that check the loader's fast
 * path (vocab and merges parsed in pieces) against the plain one (the whole document at once).
 * Reads the internals (pp_tok_internal.h); compares what the tables mean, not pool offsets. */
#ifndef S1_TESTS_TOK_COMPARE_H
#define S1_TESTS_TOK_COMPARE_H

#include "pp_tok_internal.h"

#include <stdio.h>
#include <string.h>

static bool tok_bytes_eq(const struct pp_tok *a, uint64_t off_a, const struct pp_tok *b,
                         uint64_t off_b, size_t n) {
  return memcmp(a->pool + off_a, b->pool + off_b, n) == 0;
}

/* Every key of map `ma` (in a) maps to the same value in `mb` (in b), and the counts agree. */
static bool tok_map_same(const struct pp_tok *a, const struct tok_map *ma, const struct pp_tok *b,
                         const struct tok_map *mb) {
  if ((ma->slots == NULL) != (mb->slots == NULL) || ma->n != mb->n)
    return false;
  for (size_t i = 0; ma->slots && i <= ma->mask; i++) {
    const struct tok_map_slot *sl = &ma->slots[i];
    if (sl->len != UINT32_MAX && tok_map_get(b, mb, a->pool + sl->off, sl->len) != sl->value)
      return false;
  }
  return true;
}

static bool tok_trie_same(const struct tok_trie *a, const struct tok_trie *b) {
  if (a->n != b->n || memcmp(a->first, b->first, sizeof(a->first)) != 0)
    return false;
  for (size_t i = 0; i < a->n; i++) {
    const struct tok_trie_node *x = &a->nodes[i], *y = &b->nodes[i];
    if (x->first_child != y->first_child || x->next_sibling != y->next_sibling ||
        x->added != y->added || x->byte != y->byte)
      return false;
  }
  return true;
}

/* NULL when a and b hold the same tokenizer, else the name of the first table that differs. */
static const char *tok_tables_differ(const struct pp_tok *a, const struct pp_tok *b) {
  if (a->n_ids != b->n_ids || a->n_model != b->n_model || a->n_distinct != b->n_distinct)
    return "id counts";
  for (int32_t id = 0; id < a->n_ids; id++) {
    const struct tok_entry *x = &a->by_id[id], *y = &b->by_id[id];
    if (x->len != y->len)
      return "by_id";
    if (x->len == UINT32_MAX)
      continue;
    if (x->raw_len != y->raw_len || x->added != y->added || x->special != y->special ||
        !tok_bytes_eq(a, x->off, b, y->off, x->len) ||
        !tok_bytes_eq(a, x->raw_off, b, y->raw_off, x->raw_len))
      return "by_id";
  }
  if (!tok_map_same(a, &a->vocab, b, &b->vocab))
    return "vocab";
  if (!tok_map_same(a, &a->vocab_raw, b, &b->vocab_raw))
    return "vocab_raw";
  if (!tok_map_same(a, &a->added_map, b, &b->added_map))
    return "added_map";
  size_t n_merges_a = 0, n_merges_b = 0;
  for (size_t i = 0; i <= a->merge_mask; i++) {
    const struct tok_merge_slot *sl = &a->merges[i];
    if (sl->key == UINT64_MAX)
      continue;
    n_merges_a++;
    const struct tok_merge_slot *o =
        tok_merge_get(b, (int32_t)(sl->key >> 32), (int32_t)(uint32_t)sl->key);
    if (!o || o->rank != sl->rank || o->new_id != sl->new_id)
      return "merges";
  }
  for (size_t i = 0; i <= b->merge_mask; i++)
    n_merges_b += b->merges[i].key != UINT64_MAX;
  if (n_merges_a != n_merges_b)
    return "merge count";
  if (memcmp(a->byte_id, b->byte_id, sizeof(a->byte_id)) != 0 ||
      memcmp(a->byte_fallback_id, b->byte_fallback_id, sizeof(a->byte_fallback_id)) != 0)
    return "byte ids";
  if (a->unk_id != b->unk_id || a->fuse_unk != b->fuse_unk || a->ignore_merges != b->ignore_merges)
    return "model flags";
  if (a->n_added != b->n_added)
    return "added count";
  for (size_t i = 0; i < a->n_added; i++) {
    const struct tok_added *x = &a->added[i], *y = &b->added[i];
    if (x->id != y->id || x->len != y->len || x->single_word != y->single_word ||
        x->lstrip != y->lstrip || x->rstrip != y->rstrip || x->normalized != y->normalized ||
        x->special != y->special || !tok_bytes_eq(a, x->off, b, y->off, x->len))
      return "added";
  }
  if (!tok_trie_same(&a->trie_raw, &b->trie_raw) || !tok_trie_same(&a->trie_norm, &b->trie_norm))
    return "added tries";
  if (a->n_norms != b->n_norms || memcmp(a->norms, b->norms, sizeof(a->norms[0]) * a->n_norms))
    return "normalizers";
  if (a->n_stages != b->n_stages)
    return "pre-tokenizers";
  for (int i = 0; i < a->n_stages; i++) {
    const struct tok_stage *x = &a->stages[i], *y = &b->stages[i];
    if ((x->re == NULL) != (y->re == NULL) || x->behavior != y->behavior ||
        x->invert != y->invert || x->prefix_space != y->prefix_space)
      return "pre-tokenizers";
  }
  return NULL;
}

#endif
