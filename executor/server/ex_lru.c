/* The LRU map of ex_lru.h: a chained hash table on the key's first 8 bytes (the keys are digests)
 * plus a doubly-linked recency list. */
#include "ex_lru.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct ex_lru_entry {
  uint8_t key[EX_LRU_KEY_BYTES];      /* digest */
  void *value;                        /* owned */
  size_t bytes;                       /* counted against the budget */
  int pins;                           /* uses that keep it from eviction */
  struct ex_lru_entry *prev, *next;   /* recency list: head most recent */
  struct ex_lru_entry *chain;         /* hash bucket chain */
};

struct ex_lru {
  size_t budget;                /* bytes at most */
  ex_lru_free_fn free_fn;       /* frees values, or NULL */
  void *ctx;                    /* its context */
  struct ex_lru_entry **bucket; /* [n_buckets] */
  size_t n_buckets;             /* a power of two */
  struct ex_lru_entry *head;    /* most recent */
  struct ex_lru_entry *tail;    /* least recent */
  struct ex_lru_stats st;       /* counters and gauges */
};

static size_t slot(const struct ex_lru *c, const uint8_t *key) {
  uint64_t h;
  memcpy(&h, key, sizeof(h));
  return (size_t)h & (c->n_buckets - 1);
}

int ex_lru_new(size_t budget_bytes, ex_lru_free_fn free_fn, void *ctx, struct ex_lru **ret) {
  struct ex_lru *c = calloc(1, sizeof(*c));
  if (!c)
    return -ENOMEM;
  c->budget = budget_bytes;
  c->free_fn = free_fn;
  c->ctx = ctx;
  c->n_buckets = 64;
  if (!(c->bucket = calloc(c->n_buckets, sizeof(*c->bucket)))) {
    free(c);
    return -ENOMEM;
  }
  *ret = c;
  return 0;
}

static void unlink_entry(struct ex_lru *c, struct ex_lru_entry *e) {
  if (e->prev)
    e->prev->next = e->next;
  else
    c->head = e->next;
  if (e->next)
    e->next->prev = e->prev;
  else
    c->tail = e->prev;
  e->prev = e->next = NULL;
}

static void push_front(struct ex_lru *c, struct ex_lru_entry *e) {
  e->prev = NULL;
  e->next = c->head;
  if (c->head)
    c->head->prev = e;
  c->head = e;
  if (!c->tail)
    c->tail = e;
}

static void drop(struct ex_lru *c, struct ex_lru_entry *e) {
  struct ex_lru_entry **pp = &c->bucket[slot(c, e->key)];
  while (*pp != e)
    pp = &(*pp)->chain;
  *pp = e->chain;
  unlink_entry(c, e);
  c->st.bytes -= e->bytes;
  c->st.entries--;
  if (c->free_fn)
    c->free_fn(c->ctx, e->value);
  free(e);
}

void ex_lru_free(struct ex_lru *c) {
  if (!c)
    return;
  while (c->head)
    drop(c, c->head);
  free(c->bucket);
  free(c);
}

static struct ex_lru_entry *find(const struct ex_lru *c, const uint8_t *key) {
  for (struct ex_lru_entry *e = c->bucket[slot(c, key)]; e; e = e->chain)
    if (memcmp(e->key, key, EX_LRU_KEY_BYTES) == 0)
      return e;
  return NULL;
}

struct ex_lru_entry *ex_lru_get(struct ex_lru *c, const uint8_t key[EX_LRU_KEY_BYTES], bool pin,
                                bool count) {
  struct ex_lru_entry *e = find(c, key);
  if (count)
    e ? c->st.hits++ : c->st.misses++;
  if (!e)
    return NULL;
  unlink_entry(c, e);
  push_front(c, e);
  if (pin)
    e->pins++;
  return e;
}

void *ex_lru_value(const struct ex_lru_entry *e) {
  return e->value;
}

size_t ex_lru_bytes(const struct ex_lru_entry *e) {
  return e->bytes;
}

void ex_lru_unpin(struct ex_lru *c, struct ex_lru_entry *e) {
  (void)c;
  if (e && e->pins > 0)
    e->pins--;
}

size_t ex_lru_evict(struct ex_lru *c, size_t need) {
  size_t freed = 0;
  for (struct ex_lru_entry *e = c->tail; e && freed < need;) {
    struct ex_lru_entry *prev = e->prev;
    if (!e->pins) {
      freed += e->bytes;
      drop(c, e);
      c->st.evictions++;
    }
    e = prev;
  }
  return freed;
}

/* Doubles the buckets when entries outnumber them (chains stay short). */
static void maybe_grow(struct ex_lru *c) {
  if (c->st.entries < c->n_buckets)
    return;
  size_t n = c->n_buckets * 2;
  struct ex_lru_entry **b = calloc(n, sizeof(*b));
  if (!b)
    return; /* longer chains, still correct */
  for (size_t i = 0; i < c->n_buckets; i++)
    for (struct ex_lru_entry *e = c->bucket[i], *next; e; e = next) {
      next = e->chain;
      uint64_t h;
      memcpy(&h, e->key, sizeof(h));
      e->chain = b[(size_t)h & (n - 1)];
      b[(size_t)h & (n - 1)] = e;
    }
  free(c->bucket);
  c->bucket = b;
  c->n_buckets = n;
}

bool ex_lru_try_put(struct ex_lru *c, const uint8_t key[EX_LRU_KEY_BYTES], void *value,
                    size_t bytes) {
  struct ex_lru_entry *e = NULL;
  if (find(c, key) || bytes > c->budget)
    return false;
  if (c->st.bytes + bytes > c->budget)
    ex_lru_evict(c, c->st.bytes + bytes - c->budget);
  if (c->st.bytes + bytes > c->budget || !(e = calloc(1, sizeof(*e))))
    return false;
  memcpy(e->key, key, EX_LRU_KEY_BYTES);
  e->value = value;
  e->bytes = bytes;
  size_t b = slot(c, key);
  e->chain = c->bucket[b];
  c->bucket[b] = e;
  push_front(c, e);
  c->st.bytes += bytes;
  c->st.entries++;
  c->st.inserts++;
  maybe_grow(c);
  return true;
}

bool ex_lru_put(struct ex_lru *c, const uint8_t key[EX_LRU_KEY_BYTES], void *value, size_t bytes) {
  if (ex_lru_try_put(c, key, value, bytes))
    return true;
  if (c->free_fn)
    c->free_fn(c->ctx, value);
  return false;
}

void ex_lru_stats(const struct ex_lru *c, struct ex_lru_stats *ret) {
  *ret = c->st;
}

size_t ex_lru_budget(const struct ex_lru *c) {
  return c->budget;
}
