/* A least-recently-used map from 32-byte keys (SHA-256 digests of what determines a value) to
 * owned values in a byte budget, with pins: a pinned entry is never evicted. The executor's
 * prefix-snapshot cache, vision-output cache and the set of grid points seen once are three of
 * them. Keys are cryptographic digests, so equal keys mean equal inputs; nothing compares the
 * inputs again. Not thread-safe: the compute thread only. */
#ifndef S1_EX_LRU_H
#define S1_EX_LRU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EX_LRU_KEY_BYTES 32

/* Counters of one cache (since it was made) and its gauges. */
struct ex_lru_stats {
  uint64_t hits;      /* lookups that found their key */
  uint64_t misses;    /* lookups that did not */
  uint64_t evictions; /* entries dropped to make room */
  uint64_t inserts;   /* entries stored */
  size_t bytes;       /* bytes held now */
  size_t entries;     /* entries held now */
};

struct ex_lru;
struct ex_lru_entry;

/* Frees a value the cache owns (evicted, replaced or at ex_lru_free); ctx as given to new. */
typedef void (*ex_lru_free_fn)(void *ctx, void *value);

/* A cache holding at most budget_bytes. Ownership: *ret heap, ex_lru_free.
 * Returns 0 or -ENOMEM. */
int ex_lru_new(size_t budget_bytes, ex_lru_free_fn free_fn, void *ctx, struct ex_lru **ret);
/* Frees every value (pinned ones too: the caller has dropped its uses) and the cache; NULL-safe. */
void ex_lru_free(struct ex_lru *c);

/* The entry of `key`, made most recent and pinned once more when `pin`, or NULL; a lookup with
 * `count` adds a hit or a miss to the counters. */
struct ex_lru_entry *ex_lru_get(struct ex_lru *c, const uint8_t key[EX_LRU_KEY_BYTES], bool pin,
                                bool count);
void *ex_lru_value(const struct ex_lru_entry *e);
size_t ex_lru_bytes(const struct ex_lru_entry *e);
/* Drops one pin of an entry ex_lru_get pinned. */
void ex_lru_unpin(struct ex_lru *c, struct ex_lru_entry *e);

/* Stores value under key as the most recent entry, evicting unpinned entries from the least recent
 * until it fits the budget. Ownership: the value becomes the cache's in every case: when the key
 * is already held or the entry cannot fit (over the budget, or pinned entries hold the rest) it is
 * freed at once. Returns true when stored. */
bool ex_lru_put(struct ex_lru *c, const uint8_t key[EX_LRU_KEY_BYTES], void *value, size_t bytes);

/* As ex_lru_put, but a value that is not stored stays the caller's (not freed). */
bool ex_lru_try_put(struct ex_lru *c, const uint8_t key[EX_LRU_KEY_BYTES], void *value,
                    size_t bytes);

/* Evicts unpinned entries from the least recent until `need` bytes are freed or none is left.
 * Returns the bytes freed. */
size_t ex_lru_evict(struct ex_lru *c, size_t need);

void ex_lru_stats(const struct ex_lru *c, struct ex_lru_stats *ret);
size_t ex_lru_budget(const struct ex_lru *c);

#endif
