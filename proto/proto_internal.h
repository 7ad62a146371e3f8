/* Helpers shared by the proto encoders and decoders (not installed): a bounded pre-scan of the
 * msgpack bytes, a map-field matcher that refuses unknown and duplicate keys, and typed readers
 * that copy into heap memory. */
#ifndef S1_PROTO_INTERNAL_H
#define S1_PROTO_INTERNAL_H

#include <msgpack.h>
#include <stdbool.h>

#include "proto.h"

/* One expected key of a map. */
struct rd_field {
  const char *key;           /* key text */
  bool required;             /* missing → -CM_EFORMAT */
  const msgpack_object *val; /* set by rd_map, NULL when absent */
};

/* Unpacks one whole message (nothing may trail) after a pre-scan that bounds every container
 * count by the bytes left and the nesting depth by 16. Checks the top level is a map with
 * "v" == PROTO_VERSION and "k" == kind. On success *ret_up must be destroyed by the caller.
 * Returns 0, -CM_EFORMAT, -CM_EVERSION, -ENOMEM. */
int rd_message(const void *data, size_t n, enum proto_kind kind, msgpack_unpacked *ret_up,
               struct cm_diag *diag);
/* Matches a map's keys to `f` (the two keys "v" and "k" at the top level are skipped when `top`).
 * Returns 0 or -CM_EFORMAT (not a map, non-string key, unknown, duplicate, missing required). */
int rd_map(const msgpack_object *o, struct rd_field *f, size_t n_f, bool top, const char *where,
           struct cm_diag *diag);
int rd_u64(const msgpack_object *o, uint64_t max, const char *where, uint64_t *ret,
           struct cm_diag *diag);
int rd_i64(const msgpack_object *o, int64_t min, int64_t max, const char *where, int64_t *ret,
           struct cm_diag *diag);
/* A str (or nil when allow_nil: *ret = NULL) copied and NUL-terminated; embedded NULs refused. */
int rd_str(const msgpack_object *o, size_t max, bool allow_nil, const char *where, char **ret,
           struct cm_diag *diag);
/* A bin copied to heap (n + 1 bytes allocated, NUL-terminated). */
int rd_bin(const msgpack_object *o, size_t max, const char *where, char **ret, size_t *ret_n,
           struct cm_diag *diag);
/* A bin of exactly `count` little-endian 4-byte elements, copied aligned. count may be 0. */
int rd_bin4(const msgpack_object *o, size_t count, const char *where, void **ret,
            struct cm_diag *diag);
/* An array with at most max elements. */
int rd_array(const msgpack_object *o, size_t max, const char *where,
             const msgpack_object_array **ret, struct cm_diag *diag);

/* Writer: an sbuffer whose allocation failures are remembered (msgpack's packer ignores them). */
struct wr {
  msgpack_sbuffer sb; /* growing output (wr_init) */
  msgpack_packer pk;  /* packer writing through wr_write */
  bool failed;        /* an allocation failed (or the fixed buffer overflowed) */
  uint8_t *fixed;     /* wr_init_fixed: the caller's buffer of `cap` bytes; NULL otherwise */
  size_t cap, len;    /* fixed buffer size; bytes written (or counted, wr_init_count) */
  bool count_only;    /* wr_init_count: nothing is stored, len counts the bytes */
};
void wr_init(struct wr *w);
/* A writer that only counts (w->len), and one that fills buf[cap] (w->failed when it would
 * overflow): together an exact-size encode in one allocation, no growing buffer. */
void wr_init_count(struct wr *w);
void wr_init_fixed(struct wr *w, void *buf, size_t cap);
void wr_begin(struct wr *w, size_t n_fields, enum proto_kind kind); /* map header + v + k */
void wr_key(struct wr *w, const char *key);
void wr_str(struct wr *w, const char *s); /* nil for NULL */
void wr_bin(struct wr *w, const void *data, size_t n);
/* Moves the bytes into ret, or frees them after a failure. Returns 0 or -ENOMEM. */
int wr_finish(struct wr *w, struct proto_bytes *ret);

#endif
