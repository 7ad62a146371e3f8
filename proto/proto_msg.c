/* Message envelope and shared readers/writers (proto_internal.h): version and kind, bounded
 * pre-scan, strict map matching, typed copies. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto_internal.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "bin tensors are little-endian");

static const char *const kind_names[PROTO_KIND_COUNT] = {
    "ask", "job", "status", "ack", "program", "result", "health", "health_reply", "cancel",
};

const char *proto_kind_name(enum proto_kind kind) {
  return (unsigned)kind < PROTO_KIND_COUNT ? kind_names[kind] : "?";
}

int64_t proto_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void proto_bytes_free(struct proto_bytes *b) {
  if (!b)
    return;
  free(b->data);
  b->data = NULL;
  b->len = 0;
}

/* Pre-scan: walks the msgpack bytes without allocating; every container count must fit in the
 * bytes left (each element takes ≥ 1 byte), depth ≤ 16. Returns bytes consumed or -1. */
static long scan(const uint8_t *p, size_t n, int depth) {
  if (n == 0 || depth > 16)
    return -1;
  uint8_t b = p[0];
  size_t hdr = 1, body = 0, count = 0;
  const size_t left = n;
#define NEED(k)                                                                                    \
  do {                                                                                             \
    if (left < (k))                                                                                \
      return -1;                                                                                   \
  } while (0)
#define BE16(q) ((size_t)(q)[0] << 8 | (q)[1])
#define BE32(q) ((size_t)(q)[0] << 24 | (size_t)(q)[1] << 16 | (size_t)(q)[2] << 8 | (q)[3])
  if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
    return 1;
  } else if ((b & 0xf0) == 0x80) {
    count = 2 * (size_t)(b & 0x0f);
  } else if ((b & 0xf0) == 0x90) {
    count = b & 0x0f;
  } else if ((b & 0xe0) == 0xa0) {
    body = b & 0x1f;
  } else {
    switch (b) {
    case 0xc4: case 0xd9: NEED(2); hdr = 2; body = p[1]; break;
    case 0xc5: case 0xda: NEED(3); hdr = 3; body = BE16(p + 1); break;
    case 0xc6: case 0xdb: NEED(5); hdr = 5; body = BE32(p + 1); break;
    case 0xc7: NEED(3); hdr = 3; body = p[1]; break;
    case 0xc8: NEED(4); hdr = 4; body = BE16(p + 1); break;
    case 0xc9: NEED(6); hdr = 6; body = BE32(p + 1); break;
    case 0xca: body = 4; break;
    case 0xcb: body = 8; break;
    case 0xcc: case 0xd0: body = 1; break;
    case 0xcd: case 0xd1: body = 2; break;
    case 0xce: case 0xd2: body = 4; break;
    case 0xcf: case 0xd3: body = 8; break;
    case 0xd4: body = 2; break;
    case 0xd5: body = 3; break;
    case 0xd6: body = 5; break;
    case 0xd7: body = 9; break;
    case 0xd8: body = 17; break;
    case 0xdc: NEED(3); hdr = 3; count = BE16(p + 1); break;
    case 0xdd: NEED(5); hdr = 5; count = BE32(p + 1); break;
    case 0xde: NEED(3); hdr = 3; count = 2 * BE16(p + 1); break;
    case 0xdf: NEED(5); hdr = 5; count = 2 * BE32(p + 1); break;
    default: return -1; /* 0xc1 */
    }
  }
  if (body)
    return left - hdr >= body ? (long)(hdr + body) : -1;
  if (count > left - hdr)
    return -1;
  size_t off = hdr;
  for (size_t i = 0; i < count; i++) {
    long k = scan(p + off, n - off, depth + 1);
    if (k < 0)
      return -1;
    off += (size_t)k;
  }
  return (long)off;
#undef NEED
#undef BE16
#undef BE32
}

static bool key_is(const msgpack_object *k, const char *s) {
  size_t n = strlen(s);
  return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n && memcmp(k->via.str.ptr, s, n) == 0;
}

static int unpack_top(const void *data, size_t n, msgpack_unpacked *up, enum proto_kind *ret_kind,
                      struct cm_diag *diag) {
  if (!data || n == 0 || n > ((size_t)1 << 31) || scan(data, n, 0) != (long)n)
    return cm_diag_set(diag, -CM_EFORMAT, "message: not one well-formed msgpack value");
  size_t off = 0;
  msgpack_unpacked_init(up);
  msgpack_unpack_return ur = msgpack_unpack_next(up, data, n, &off);
  if (ur == MSGPACK_UNPACK_NOMEM_ERROR) {
    msgpack_unpacked_destroy(up);
    return -ENOMEM;
  }
  if (ur != MSGPACK_UNPACK_SUCCESS || off != n || up->data.type != MSGPACK_OBJECT_MAP) {
    msgpack_unpacked_destroy(up);
    return cm_diag_set(diag, -CM_EFORMAT, "message: not a msgpack map");
  }
  const msgpack_object_map *m = &up->data.via.map;
  const msgpack_object *v = NULL, *k = NULL;
  for (uint32_t i = 0; i < m->size; i++) {
    const msgpack_object *key = &m->ptr[i].key;
    if (key_is(key, "v"))
      v = v ? (const msgpack_object *)1 : &m->ptr[i].val;
    else if (key_is(key, "k"))
      k = k ? (const msgpack_object *)1 : &m->ptr[i].val;
  }
  int r = 0;
  if (!v || v == (const msgpack_object *)1 || v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
    r = cm_diag_set(diag, -CM_EFORMAT, "message: \"v\" missing, duplicated or not an integer");
  else if (v->via.u64 != PROTO_VERSION)
    r = cm_diag_set(diag, -CM_EVERSION, "message: proto version %llu, expected %d",
                    (unsigned long long)v->via.u64, PROTO_VERSION);
  else if (!k || k == (const msgpack_object *)1 || k->type != MSGPACK_OBJECT_STR)
    r = cm_diag_set(diag, -CM_EFORMAT, "message: \"k\" missing, duplicated or not a string");
  if (!r) {
    int i = 0;
    while (i < PROTO_KIND_COUNT && !key_is(k, kind_names[i]))
      i++;
    if (i == PROTO_KIND_COUNT)
      r = cm_diag_set(diag, -CM_EFORMAT, "message: unknown kind \"%.*s\"",
                      (int)(k->via.str.size > 32 ? 32 : k->via.str.size), k->via.str.ptr);
    else
      *ret_kind = (enum proto_kind)i;
  }
  if (r)
    msgpack_unpacked_destroy(up);
  return r;
}

int proto_peek(const void *data, size_t n_bytes, enum proto_kind *ret_kind, struct cm_diag *diag) {
  msgpack_unpacked up;
  enum proto_kind kind;
  int r = unpack_top(data, n_bytes, &up, &kind, diag);
  if (r)
    return r;
  msgpack_unpacked_destroy(&up);
  *ret_kind = kind;
  return 0;
}

int rd_message(const void *data, size_t n, enum proto_kind kind, msgpack_unpacked *ret_up,
               struct cm_diag *diag) {
  enum proto_kind got;
  int r = unpack_top(data, n, ret_up, &got, diag);
  if (r)
    return r;
  if (got != kind) {
    msgpack_unpacked_destroy(ret_up);
    return cm_diag_set(diag, -CM_EFORMAT, "message: kind \"%s\", expected \"%s\"",
                       proto_kind_name(got), proto_kind_name(kind));
  }
  return 0;
}

int rd_map(const msgpack_object *o, struct rd_field *f, size_t n_f, bool top, const char *where,
           struct cm_diag *diag) {
  if (o->type != MSGPACK_OBJECT_MAP)
    return cm_diag_set(diag, -CM_EFORMAT, "%s: not a map", where);
  for (size_t j = 0; j < n_f; j++)
    f[j].val = NULL;
  const msgpack_object_map *m = &o->via.map;
  for (uint32_t i = 0; i < m->size; i++) {
    const msgpack_object *key = &m->ptr[i].key;
    if (key->type != MSGPACK_OBJECT_STR)
      return cm_diag_set(diag, -CM_EFORMAT, "%s: a key is not a string", where);
    if (top && (key_is(key, "v") || key_is(key, "k")))
      continue;
    size_t j = 0;
    while (j < n_f && !key_is(key, f[j].key))
      j++;
    if (j == n_f)
      return cm_diag_set(diag, -CM_EFORMAT, "%s: unknown key \"%.*s\"", where,
                         (int)(key->via.str.size > 32 ? 32 : key->via.str.size),
                         key->via.str.ptr);
    if (f[j].val)
      return cm_diag_set(diag, -CM_EFORMAT, "%s.%s: duplicate key", where, f[j].key);
    f[j].val = &m->ptr[i].val;
  }
  for (size_t j = 0; j < n_f; j++)
    if (f[j].required && !f[j].val)
      return cm_diag_set(diag, -CM_EFORMAT, "%s.%s: missing", where, f[j].key);
  return 0;
}

int rd_u64(const msgpack_object *o, uint64_t max, const char *where, uint64_t *ret,
           struct cm_diag *diag) {
  if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > max)
    return cm_diag_set(diag, -CM_EFORMAT, "%s: not an integer in [0, %llu]", where,
                       (unsigned long long)max);
  *ret = o->via.u64;
  return 0;
}

int rd_i64(const msgpack_object *o, int64_t min, int64_t max, const char *where, int64_t *ret,
           struct cm_diag *diag) {
  int64_t v;
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= (uint64_t)INT64_MAX)
    v = (int64_t)o->via.u64;
  else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
    v = o->via.i64;
  else
    return cm_diag_set(diag, -CM_EFORMAT, "%s: not an integer", where);
  if (v < min || v > max)
    return cm_diag_set(diag, -CM_EFORMAT, "%s: %lld outside [%lld, %lld]", where, (long long)v,
                       (long long)min, (long long)max);
  *ret = v;
  return 0;
}

int rd_str(const msgpack_object *o, size_t max, bool allow_nil, const char *where, char **ret,
           struct cm_diag *diag) {
  if (allow_nil && o->type == MSGPACK_OBJECT_NIL) {
    *ret = NULL;
    return 0;
  }
  if (o->type != MSGPACK_OBJECT_STR || o->via.str.size > max ||
      memchr(o->via.str.ptr, 0, o->via.str.size))
    return cm_diag_set(diag, -CM_EFORMAT, "%s: not a string of at most %zu bytes without NUL",
                       where, max);
  char *s = malloc((size_t)o->via.str.size + 1);
  if (!s)
    return -ENOMEM;
  memcpy(s, o->via.str.ptr, o->via.str.size);
  s[o->via.str.size] = 0;
  *ret = s;
  return 0;
}

int rd_bin(const msgpack_object *o, size_t max, const char *where, char **ret, size_t *ret_n,
           struct cm_diag *diag) {
  if (o->type != MSGPACK_OBJECT_BIN || o->via.bin.size > max)
    return cm_diag_set(diag, -CM_EFORMAT, "%s: not a bin of at most %zu bytes", where, max);
  char *s = malloc((size_t)o->via.bin.size + 1);
  if (!s)
    return -ENOMEM;
  if (o->via.bin.size)
    memcpy(s, o->via.bin.ptr, o->via.bin.size);
  s[o->via.bin.size] = 0;
  *ret = s;
  *ret_n = o->via.bin.size;
  return 0;
}

int rd_bin4(const msgpack_object *o, size_t count, const char *where, void **ret,
            struct cm_diag *diag) {
  if (o->type != MSGPACK_OBJECT_BIN || (size_t)o->via.bin.size != count * 4)
    return cm_diag_set(diag, -CM_EFORMAT, "%s: not a bin of %zu 4-byte elements", where, count);
  void *s = malloc(count * 4 + 4);
  if (!s)
    return -ENOMEM;
  if (count)
    memcpy(s, o->via.bin.ptr, count * 4); /* bin payloads may be misaligned: copy */
  *ret = s;
  return 0;
}

int rd_array(const msgpack_object *o, size_t max, const char *where,
             const msgpack_object_array **ret, struct cm_diag *diag) {
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > max)
    return cm_diag_set(diag, -CM_EFORMAT, "%s: not an array of at most %zu elements", where, max);
  *ret = &o->via.array;
  return 0;
}

static int wr_write(void *data, const char *buf, size_t len) {
  struct wr *w = data;
  if (w->failed)
    return 0;
  if (w->count_only) {
    w->len += len;
  } else if (w->fixed) {
    if (len > w->cap - w->len) {
      w->failed = true;
      return 0;
    }
    memcpy(w->fixed + w->len, buf, len);
    w->len += len;
  } else if (msgpack_sbuffer_write(&w->sb, buf, len) != 0) {
    w->failed = true;
  }
  return 0;
}

void wr_init(struct wr *w) {
  memset(w, 0, sizeof(*w));
  msgpack_sbuffer_init(&w->sb);
  msgpack_packer_init(&w->pk, w, wr_write);
}

void wr_init_count(struct wr *w) {
  wr_init(w);
  w->count_only = true;
}

void wr_init_fixed(struct wr *w, void *buf, size_t cap) {
  wr_init(w);
  w->fixed = buf;
  w->cap = cap;
}

void wr_key(struct wr *w, const char *key) {
  msgpack_pack_str_with_body(&w->pk, key, strlen(key));
}

void wr_begin(struct wr *w, size_t n_fields, enum proto_kind kind) {
  msgpack_pack_map(&w->pk, n_fields + 2);
  wr_key(w, "v");
  msgpack_pack_uint32(&w->pk, PROTO_VERSION);
  wr_key(w, "k");
  wr_key(w, kind_names[kind]);
}

void wr_str(struct wr *w, const char *s) {
  if (s)
    msgpack_pack_str_with_body(&w->pk, s, strlen(s));
  else
    msgpack_pack_nil(&w->pk);
}

void wr_bin(struct wr *w, const void *data, size_t n) {
  msgpack_pack_bin_with_body(&w->pk, data, n);
}

int wr_finish(struct wr *w, struct proto_bytes *ret) {
  if (w->failed) {
    msgpack_sbuffer_destroy(&w->sb);
    return -ENOMEM;
  }
  ret->len = w->sb.size;
  ret->data = msgpack_sbuffer_release(&w->sb);
  return 0;
}

int proto_simple_encode(enum proto_kind kind, struct proto_bytes *ret_bytes) {
  if ((unsigned)kind >= PROTO_KIND_COUNT)
    return -EINVAL;
  struct wr w;
  wr_init(&w);
  wr_begin(&w, 0, kind);
  return wr_finish(&w, ret_bytes);
}

int proto_simple_decode(const void *data, size_t n_bytes, enum proto_kind kind,
                        struct cm_diag *diag) {
  msgpack_unpacked up;
  int r = rd_message(data, n_bytes, kind, &up, diag);
  if (r)
    return r;
  r = rd_map(&up.data, NULL, 0, true, proto_kind_name(kind), diag);
  msgpack_unpacked_destroy(&up);
  return r;
}
