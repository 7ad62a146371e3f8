/* Programs and results (proto_program.h): builders, the structural check, encode and validating
 * decode. Arrays travel as msgpack bin (little-endian int32 / float32). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto_internal.h"
#include "proto_program.h"

static int grow(void **arr, uint32_t *cap, uint32_t n, size_t elem) {
  if (n < *cap)
    return 0;
  uint32_t c = *cap ? *cap * 2 : 8;
  void *p = realloc(*arr, (size_t)c * elem);
  if (!p)
    return -ENOMEM;
  memset((char *)p + (size_t)*cap * elem, 0, (size_t)(c - *cap) * elem);
  *arr = p;
  *cap = c;
  return 0;
}

static void *dup_mem(const void *src, size_t n_bytes) {
  void *p = malloc(n_bytes ? n_bytes : 1);
  if (p && n_bytes)
    memcpy(p, src, n_bytes);
  return p;
}

/* One past the largest position over the prefix chain ending at `prefix` (0 for -1). */
static int32_t next_position(const struct proto_program *p, int32_t prefix) {
  int64_t top = -1;
  for (int32_t i = prefix; i >= 0; i = p->prefixes[i].parent) {
    const struct proto_prefix *x = &p->prefixes[i];
    for (size_t j = 0; j < 3 * (size_t)x->n_tokens; j++)
      top = x->pos[j] > top ? x->pos[j] : top;
  }
  return (int32_t)(top + 1);
}

static int32_t *make_pos(const struct proto_program *p, const int32_t *pos, uint32_t n,
                         int32_t prefix) {
  if (pos)
    return dup_mem(pos, 3 * (size_t)n * sizeof(int32_t));
  int32_t *q = malloc(3 * (size_t)n * sizeof(int32_t));
  if (!q)
    return NULL;
  int32_t s = next_position(p, prefix);
  for (int a = 0; a < 3; a++)
    for (uint32_t t = 0; t < n; t++)
      q[(size_t)a * n + t] = s + (int32_t)t;
  return q;
}

/* add_image and take_image: `owned` set: *owned moves in (then NULL), else `pixels` is copied. */
static int put_image(struct proto_program *p, const float *pixels, float **owned,
                     uint32_t n_patches, const int32_t grid_thw[3], uint32_t *ret_index) {
  if (!pixels || n_patches == 0 || n_patches > PROTO_MAX_PATCHES ||
      p->n_images >= PROTO_MAX_IMAGES)
    return -EINVAL;
  if (grow((void **)&p->images, &p->cap_images, p->n_images, sizeof(*p->images)))
    return -ENOMEM;
  struct proto_image *im = &p->images[p->n_images];
  if (owned) {
    im->pixels = *owned;
    *owned = NULL;
  } else if (!(im->pixels = dup_mem(pixels, (size_t)n_patches * PROTO_PATCH_DIM * sizeof(float)))) {
    return -ENOMEM;
  }
  im->n_patches = n_patches;
  memcpy(im->grid_thw, grid_thw, sizeof(im->grid_thw));
  if (ret_index)
    *ret_index = p->n_images;
  p->n_images++;
  return 0;
}

int proto_program_add_image(struct proto_program *p, const float *pixels, uint32_t n_patches,
                            const int32_t grid_thw[3], uint32_t *ret_index) {
  return put_image(p, pixels, NULL, n_patches, grid_thw, ret_index);
}

int proto_program_take_image(struct proto_program *p, float **pixels, uint32_t n_patches,
                             const int32_t grid_thw[3], uint32_t *ret_index) {
  return put_image(p, pixels ? *pixels : NULL, pixels, n_patches, grid_thw, ret_index);
}

int proto_program_add_prefix(struct proto_program *p, const int32_t *ids, const int32_t *pos,
                             uint32_t n, int32_t parent, const uint32_t *images,
                             uint32_t n_images, uint32_t *ret_index) {
  if (!ids || n == 0 || parent < -1 || parent >= (int32_t)p->n_prefixes ||
      p->n_prefixes >= PROTO_MAX_PREFIXES || n_images > PROTO_MAX_IMAGES ||
      (n_images && !images))
    return -EINVAL;
  if (grow((void **)&p->prefixes, &p->cap_prefixes, p->n_prefixes, sizeof(*p->prefixes)))
    return -ENOMEM;
  struct proto_prefix *x = &p->prefixes[p->n_prefixes];
  x->ids = dup_mem(ids, (size_t)n * sizeof(int32_t));
  x->pos = make_pos(p, pos, n, parent);
  x->images = dup_mem(images, (size_t)n_images * sizeof(uint32_t));
  if (!x->ids || !x->pos || !x->images) {
    free(x->ids), free(x->pos), free(x->images);
    memset(x, 0, sizeof(*x));
    return -ENOMEM;
  }
  x->n_tokens = n;
  x->parent = parent;
  x->n_images = n_images;
  if (ret_index)
    *ret_index = p->n_prefixes;
  p->n_prefixes++;
  return 0;
}

int proto_program_add_row(struct proto_program *p, const int32_t *ids, const int32_t *pos,
                          uint32_t n, int32_t prefix, uint32_t *ret_index) {
  if (!ids || n == 0 || prefix < -1 || prefix >= (int32_t)p->n_prefixes ||
      p->n_rows >= PROTO_MAX_ROWS)
    return -EINVAL;
  if (grow((void **)&p->rows, &p->cap_rows, p->n_rows, sizeof(*p->rows)))
    return -ENOMEM;
  struct proto_row *x = &p->rows[p->n_rows];
  x->ids = dup_mem(ids, (size_t)n * sizeof(int32_t));
  x->pos = make_pos(p, pos, n, prefix);
  if (!x->ids || !x->pos) {
    free(x->ids), free(x->pos);
    memset(x, 0, sizeof(*x));
    return -ENOMEM;
  }
  x->n_tokens = n;
  x->prefix = prefix;
  if (ret_index)
    *ret_index = p->n_rows;
  p->n_rows++;
  return 0;
}

int proto_program_add_readout(struct proto_program *p, enum proto_readout_kind kind, uint32_t row,
                              int32_t position, const int32_t *ids, uint32_t n_ids,
                              const char *head, uint32_t *ret_index) {
  if ((unsigned)kind >= PROTO_READOUT_COUNT || row >= p->n_rows ||
      p->n_readouts >= PROTO_MAX_READOUTS || n_ids > PROTO_MAX_READOUT_IDS || (n_ids && !ids) ||
      (kind == PROTO_READOUT_HEAD) != (head != NULL))
    return -EINVAL;
  if (grow((void **)&p->readouts, &p->cap_readouts, p->n_readouts, sizeof(*p->readouts)))
    return -ENOMEM;
  struct proto_readout *x = &p->readouts[p->n_readouts];
  x->ids = dup_mem(ids, (size_t)n_ids * sizeof(int32_t));
  x->head = head ? strdup(head) : NULL;
  if (!x->ids || (head && !x->head)) {
    free(x->ids), free(x->head);
    memset(x, 0, sizeof(*x));
    return -ENOMEM;
  }
  x->kind = kind;
  x->row = row;
  x->position = position;
  x->n_ids = n_ids;
  if (ret_index)
    *ret_index = p->n_readouts;
  p->n_readouts++;
  return 0;
}

int proto_program_set_ids(struct proto_program *p, const char *model_id, const char *request_id) {
  char *m = model_id ? strdup(model_id) : NULL, *r = request_id ? strdup(request_id) : NULL;
  if ((model_id && !m) || (request_id && !r)) {
    free(m), free(r);
    return -ENOMEM;
  }
  free(p->model_id), free(p->request_id);
  p->model_id = m;
  p->request_id = r;
  return 0;
}

int proto_program_check(const struct proto_program *p, struct cm_diag *diag) {
  if (p->n_images > PROTO_MAX_IMAGES || p->n_prefixes > PROTO_MAX_PREFIXES ||
      p->n_rows > PROTO_MAX_ROWS || p->n_readouts > PROTO_MAX_READOUTS)
    return cm_diag_set(diag, -CM_EFORMAT, "program: too many images, prefixes, rows or readouts");
  if (p->n_rows == 0 || p->n_readouts == 0)
    return cm_diag_set(diag, -CM_EFORMAT, "program: needs at least one row and one readout");
  if ((p->model_id && strlen(p->model_id) > PROTO_MAX_ID_BYTES) ||
      (p->request_id && strlen(p->request_id) > PROTO_MAX_ID_BYTES) || p->deadline_us < 0)
    return cm_diag_set(diag, -CM_EFORMAT, "program: model_id, request_id or deadline invalid");
  for (uint32_t i = 0; i < p->n_images; i++) {
    const struct proto_image *im = &p->images[i];
    int64_t t = im->grid_thw[0], h = im->grid_thw[1], w = im->grid_thw[2];
    if (t < 1 || h < 2 || w < 2 || h % 2 || w % 2 || t * h * w != (int64_t)im->n_patches ||
        im->n_patches > PROTO_MAX_PATCHES || !im->pixels)
      return cm_diag_set(diag, -CM_EFORMAT, "program.images[%u]: grid_thw (%lld, %lld, %lld) "
                         "does not fit %u patches (h, w even)", i, (long long)t, (long long)h,
                         (long long)w, im->n_patches);
  }
  uint64_t tokens = 0;
  uint8_t *used = calloc(p->n_images + 1, 1);
  if (!used)
    return -ENOMEM;
  int r = 0;
  for (uint32_t i = 0; i < p->n_prefixes && !r; i++) {
    const struct proto_prefix *x = &p->prefixes[i];
    tokens += x->n_tokens;
    if (x->n_tokens == 0 || !x->ids || !x->pos || x->parent < -1 || x->parent >= (int32_t)i)
      r = cm_diag_set(diag, -CM_EFORMAT, "program.prefixes[%u]: empty, or parent %d not an "
                      "earlier prefix", i, x->parent);
    for (uint32_t j = 0; j < x->n_images && !r; j++) {
      if (x->images[j] >= p->n_images || used[x->images[j]]++)
        r = cm_diag_set(diag, -CM_EFORMAT, "program.prefixes[%u].images[%u]: image %u out of "
                        "range or used twice", i, j, x->images[j]);
    }
  }
  free(used);
  if (r)
    return r;
  for (uint32_t i = 0; i < p->n_rows; i++) {
    const struct proto_row *x = &p->rows[i];
    tokens += x->n_tokens;
    if (x->n_tokens == 0 || !x->ids || !x->pos || x->prefix < -1 ||
        x->prefix >= (int32_t)p->n_prefixes)
      return cm_diag_set(diag, -CM_EFORMAT, "program.rows[%u]: empty, or prefix %d out of range",
                         i, x->prefix);
  }
  if (tokens > PROTO_MAX_TOKENS)
    return cm_diag_set(diag, -CM_EFORMAT, "program: %llu tokens, at most %d",
                       (unsigned long long)tokens, PROTO_MAX_TOKENS);
  for (uint32_t i = 0; i < p->n_readouts; i++) {
    const struct proto_readout *x = &p->readouts[i];
    if ((unsigned)x->kind >= PROTO_READOUT_COUNT || x->row >= p->n_rows)
      return cm_diag_set(diag, -CM_EFORMAT, "program.readouts[%u]: kind or row out of range", i);
    int64_t n = p->rows[x->row].n_tokens;
    if (x->position < -n || x->position >= n)
      return cm_diag_set(diag, -CM_EFORMAT, "program.readouts[%u]: position %d outside row %u "
                         "of %lld tokens", i, x->position, x->row, (long long)n);
    bool want_ids = x->kind == PROTO_READOUT_LABEL_LOGITS || x->kind == PROTO_READOUT_TOKEN_LOGPROB;
    bool head_args = x->kind == PROTO_READOUT_HEAD; /* a group head's integer arguments */
    if ((want_ids && !x->n_ids) || (!want_ids && !head_args && x->n_ids) ||
        x->n_ids > PROTO_MAX_READOUT_IDS || (x->n_ids && !x->ids))
      return cm_diag_set(diag, -CM_EFORMAT, "program.readouts[%u]: ids required exactly for "
                         "LABEL_LOGITS and TOKEN_LOGPROB (at most %d)", i, PROTO_MAX_READOUT_IDS);
    bool want_head = x->kind == PROTO_READOUT_HEAD;
    if (want_head != (x->head != NULL) ||
        (x->head && (!x->head[0] || strlen(x->head) > PROTO_MAX_ID_BYTES)))
      return cm_diag_set(diag, -CM_EFORMAT, "program.readouts[%u]: a head name exactly for HEAD",
                         i);
  }
  return 0;
}

/* Packs the program through w (any writer; run once to count, once to fill). */
static void pack_program(struct wr *w, const struct proto_program *p) {
  wr_begin(w, 7, PROTO_KIND_PROGRAM);
  wr_key(w, "model");
  wr_str(w, p->model_id);
  wr_key(w, "rid");
  wr_str(w, p->request_id);
  wr_key(w, "deadline_us");
  msgpack_pack_int64(&w->pk, p->deadline_us);
  wr_key(w, "images");
  msgpack_pack_array(&w->pk, p->n_images);
  for (uint32_t i = 0; i < p->n_images; i++) {
    const struct proto_image *im = &p->images[i];
    msgpack_pack_array(&w->pk, 5);
    msgpack_pack_uint32(&w->pk, im->n_patches);
    for (int a = 0; a < 3; a++)
      msgpack_pack_int32(&w->pk, im->grid_thw[a]);
    wr_bin(w, im->pixels, (size_t)im->n_patches * PROTO_PATCH_DIM * sizeof(float));
  }
  wr_key(w, "prefixes");
  msgpack_pack_array(&w->pk, p->n_prefixes);
  for (uint32_t i = 0; i < p->n_prefixes; i++) {
    const struct proto_prefix *x = &p->prefixes[i];
    msgpack_pack_array(&w->pk, 5);
    msgpack_pack_uint32(&w->pk, x->n_tokens);
    msgpack_pack_int32(&w->pk, x->parent);
    wr_bin(w, x->ids, (size_t)x->n_tokens * 4);
    wr_bin(w, x->pos, (size_t)x->n_tokens * 12);
    wr_bin(w, x->images, (size_t)x->n_images * 4);
  }
  wr_key(w, "rows");
  msgpack_pack_array(&w->pk, p->n_rows);
  for (uint32_t i = 0; i < p->n_rows; i++) {
    const struct proto_row *x = &p->rows[i];
    msgpack_pack_array(&w->pk, 4);
    msgpack_pack_uint32(&w->pk, x->n_tokens);
    msgpack_pack_int32(&w->pk, x->prefix);
    wr_bin(w, x->ids, (size_t)x->n_tokens * 4);
    wr_bin(w, x->pos, (size_t)x->n_tokens * 12);
  }
  wr_key(w, "readouts");
  msgpack_pack_array(&w->pk, p->n_readouts);
  for (uint32_t i = 0; i < p->n_readouts; i++) {
    const struct proto_readout *x = &p->readouts[i];
    msgpack_pack_array(&w->pk, 5);
    msgpack_pack_uint32(&w->pk, (uint32_t)x->kind);
    msgpack_pack_uint32(&w->pk, x->row);
    msgpack_pack_int32(&w->pk, x->position);
    wr_bin(w, x->ids, (size_t)x->n_ids * 4);
    wr_str(w, x->head);
  }
}

int proto_program_encode_into(const struct proto_program *p, void *(*alloc)(void *arg, size_t n),
                              void *arg, size_t *ret_len) {
  if (proto_program_check(p, NULL))
    return -EINVAL;
  struct wr w;
  wr_init_count(&w);
  pack_program(&w, p);
  size_t n = w.len;
  void *buf = alloc(arg, n);
  if (!buf)
    return -ENOMEM;
  wr_init_fixed(&w, buf, n);
  pack_program(&w, p);
  if (w.failed || w.len != n)
    return -EINVAL; /* cannot happen: both passes pack the same program */
  *ret_len = n;
  return 0;
}

static void *alloc_heap(void *arg, size_t n) {
  void **ret = arg;
  return *ret = malloc(n ? n : 1);
}

int proto_program_encode(const struct proto_program *p, struct proto_bytes *ret_bytes) {
  void *buf = NULL;
  size_t n = 0;
  int r = proto_program_encode_into(p, alloc_heap, &buf, &n);
  if (r) {
    free(buf);
    return r;
  }
  ret_bytes->data = buf;
  ret_bytes->len = n;
  return 0;
}

/* Reads the fixed-size array element `o` as [count] entries. */
static int rd_tuple(const msgpack_object *o, uint32_t count, const char *where,
                    const msgpack_object **ret, struct cm_diag *diag) {
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != count)
    return cm_diag_set(diag, -CM_EFORMAT, "%s: not an array of %u", where, count);
  *ret = o->via.array.ptr;
  return 0;
}

static int read_images(const msgpack_object *o, struct proto_program *p, struct cm_diag *diag) {
  const msgpack_object_array *a;
  int r = rd_array(o, PROTO_MAX_IMAGES, "program.images", &a, diag);
  if (r)
    return r;
  if (!(p->images = calloc(a->size + 1, sizeof(*p->images))))
    return -ENOMEM;
  p->cap_images = a->size + 1;
  for (uint32_t i = 0; i < a->size; i++) {
    const msgpack_object *e = NULL;
    struct proto_image *im = &p->images[i];
    uint64_t np;
    int64_t g[3];
    if ((r = rd_tuple(&a->ptr[i], 5, "program.images[]", &e, diag)) ||
        (r = rd_u64(&e[0], PROTO_MAX_PATCHES, "program.images[].n_patches", &np, diag)))
      return r;
    for (int d = 0; d < 3; d++)
      if ((r = rd_i64(&e[1 + d], 1, 4096, "program.images[].grid_thw", &g[d], diag)))
        return r;
    if (e[4].type != MSGPACK_OBJECT_BIN || e[4].via.bin.size != np * PROTO_PATCH_DIM * 4)
      return cm_diag_set(diag, -CM_EFORMAT, "program.images[%u].pixels: not %llu float32 bytes",
                         i, (unsigned long long)np * PROTO_PATCH_DIM * 4);
    if ((r = rd_bin4(&e[4], (size_t)np * PROTO_PATCH_DIM, "program.images[].pixels",
                     (void **)&im->pixels, diag)))
      return r;
    im->n_patches = (uint32_t)np;
    for (int d = 0; d < 3; d++)
      im->grid_thw[d] = (int32_t)g[d];
    p->n_images = i + 1;
  }
  return 0;
}

static int read_prefixes(const msgpack_object *o, struct proto_program *p, struct cm_diag *diag) {
  const msgpack_object_array *a;
  int r = rd_array(o, PROTO_MAX_PREFIXES, "program.prefixes", &a, diag);
  if (r)
    return r;
  if (!(p->prefixes = calloc(a->size + 1, sizeof(*p->prefixes))))
    return -ENOMEM;
  p->cap_prefixes = a->size + 1;
  for (uint32_t i = 0; i < a->size; i++) {
    const msgpack_object *e = NULL;
    struct proto_prefix *x = &p->prefixes[i];
    uint64_t n;
    int64_t parent;
    p->n_prefixes = i + 1;
    if ((r = rd_tuple(&a->ptr[i], 5, "program.prefixes[]", &e, diag)) ||
        (r = rd_u64(&e[0], PROTO_MAX_TOKENS, "program.prefixes[].n_tokens", &n, diag)) ||
        (r = rd_i64(&e[1], -1, PROTO_MAX_PREFIXES, "program.prefixes[].parent", &parent, diag)) ||
        (r = rd_bin4(&e[2], n, "program.prefixes[].ids", (void **)&x->ids, diag)) ||
        (r = rd_bin4(&e[3], 3 * n, "program.prefixes[].pos", (void **)&x->pos, diag)))
      return r;
    if (e[4].type != MSGPACK_OBJECT_BIN || e[4].via.bin.size % 4 ||
        e[4].via.bin.size / 4 > PROTO_MAX_IMAGES)
      return cm_diag_set(diag, -CM_EFORMAT, "program.prefixes[%u].images: not a bin of at most "
                         "%d uint32", i, PROTO_MAX_IMAGES);
    x->n_images = e[4].via.bin.size / 4;
    if ((r = rd_bin4(&e[4], x->n_images, "program.prefixes[].images", (void **)&x->images, diag)))
      return r;
    x->n_tokens = (uint32_t)n;
    x->parent = (int32_t)parent;
  }
  return 0;
}

static int read_rows(const msgpack_object *o, struct proto_program *p, struct cm_diag *diag) {
  const msgpack_object_array *a;
  int r = rd_array(o, PROTO_MAX_ROWS, "program.rows", &a, diag);
  if (r)
    return r;
  if (!(p->rows = calloc(a->size + 1, sizeof(*p->rows))))
    return -ENOMEM;
  p->cap_rows = a->size + 1;
  for (uint32_t i = 0; i < a->size; i++) {
    const msgpack_object *e = NULL;
    struct proto_row *x = &p->rows[i];
    uint64_t n;
    int64_t prefix;
    p->n_rows = i + 1;
    if ((r = rd_tuple(&a->ptr[i], 4, "program.rows[]", &e, diag)) ||
        (r = rd_u64(&e[0], PROTO_MAX_TOKENS, "program.rows[].n_tokens", &n, diag)) ||
        (r = rd_i64(&e[1], -1, PROTO_MAX_PREFIXES, "program.rows[].prefix", &prefix, diag)) ||
        (r = rd_bin4(&e[2], n, "program.rows[].ids", (void **)&x->ids, diag)) ||
        (r = rd_bin4(&e[3], 3 * n, "program.rows[].pos", (void **)&x->pos, diag)))
      return r;
    x->n_tokens = (uint32_t)n;
    x->prefix = (int32_t)prefix;
  }
  return 0;
}

static int read_readouts(const msgpack_object *o, struct proto_program *p, struct cm_diag *diag) {
  const msgpack_object_array *a;
  int r = rd_array(o, PROTO_MAX_READOUTS, "program.readouts", &a, diag);
  if (r)
    return r;
  if (!(p->readouts = calloc(a->size + 1, sizeof(*p->readouts))))
    return -ENOMEM;
  p->cap_readouts = a->size + 1;
  for (uint32_t i = 0; i < a->size; i++) {
    const msgpack_object *e = NULL;
    struct proto_readout *x = &p->readouts[i];
    uint64_t kind, row;
    int64_t pos;
    p->n_readouts = i + 1;
    if ((r = rd_tuple(&a->ptr[i], 5, "program.readouts[]", &e, diag)) ||
        (r = rd_u64(&e[0], PROTO_READOUT_COUNT - 1, "program.readouts[].kind", &kind, diag)) ||
        (r = rd_u64(&e[1], PROTO_MAX_ROWS, "program.readouts[].row", &row, diag)) ||
        (r = rd_i64(&e[2], -PROTO_MAX_TOKENS, PROTO_MAX_TOKENS, "program.readouts[].position",
                    &pos, diag)))
      return r;
    if (e[3].type != MSGPACK_OBJECT_BIN || e[3].via.bin.size % 4 ||
        e[3].via.bin.size / 4 > PROTO_MAX_READOUT_IDS)
      return cm_diag_set(diag, -CM_EFORMAT, "program.readouts[%u].ids: not a bin of int32", i);
    x->n_ids = e[3].via.bin.size / 4;
    if ((r = rd_bin4(&e[3], x->n_ids, "program.readouts[].ids", (void **)&x->ids, diag)) ||
        (r = rd_str(&e[4], PROTO_MAX_ID_BYTES, true, "program.readouts[].head", &x->head, diag)))
      return r;
    x->kind = (enum proto_readout_kind)kind;
    x->row = (uint32_t)row;
    x->position = (int32_t)pos;
  }
  return 0;
}

int proto_program_decode(const void *data, size_t n_bytes, struct proto_program *ret,
                         struct cm_diag *diag) {
  msgpack_unpacked up;
  int r = rd_message(data, n_bytes, PROTO_KIND_PROGRAM, &up, diag);
  if (r)
    return r;
  struct proto_program p = {0};
  struct rd_field f[] = {{"model", true, NULL},    {"rid", true, NULL},
                         {"deadline_us", true, NULL}, {"images", true, NULL},
                         {"prefixes", true, NULL}, {"rows", true, NULL},
                         {"readouts", true, NULL}};
  int64_t dl = 0;
  if (!(r = rd_map(&up.data, f, 7, true, "program", diag)) &&
      !(r = rd_str(f[0].val, PROTO_MAX_ID_BYTES, true, "program.model", &p.model_id, diag)) &&
      !(r = rd_str(f[1].val, PROTO_MAX_ID_BYTES, true, "program.rid", &p.request_id, diag)) &&
      !(r = rd_i64(f[2].val, 0, INT64_MAX, "program.deadline_us", &dl, diag)) &&
      !(r = read_images(f[3].val, &p, diag)) && !(r = read_prefixes(f[4].val, &p, diag)) &&
      !(r = read_rows(f[5].val, &p, diag)) && !(r = read_readouts(f[6].val, &p, diag))) {
    p.deadline_us = dl;
    r = proto_program_check(&p, diag);
  }
  msgpack_unpacked_destroy(&up);
  if (r) {
    proto_program_fini(&p);
    return r;
  }
  *ret = p;
  return 0;
}

void proto_program_fini(struct proto_program *p) {
  if (!p)
    return;
  for (uint32_t i = 0; p->images && i < p->n_images; i++)
    free(p->images[i].pixels);
  for (uint32_t i = 0; p->prefixes && i < p->n_prefixes; i++) {
    free(p->prefixes[i].ids);
    free(p->prefixes[i].pos);
    free(p->prefixes[i].images);
  }
  for (uint32_t i = 0; p->rows && i < p->n_rows; i++) {
    free(p->rows[i].ids);
    free(p->rows[i].pos);
  }
  for (uint32_t i = 0; p->readouts && i < p->n_readouts; i++) {
    free(p->readouts[i].ids);
    free(p->readouts[i].head);
  }
  free(p->images), free(p->prefixes), free(p->rows), free(p->readouts);
  free(p->model_id), free(p->request_id);
  memset(p, 0, sizeof(*p));
}

static void result_clear(struct proto_result *r) {
  for (uint32_t i = 0; r->outputs && i < r->n_outputs; i++)
    free(r->outputs[i]);
  free(r->outputs);
  free(r->n_floats);
  r->outputs = NULL;
  r->n_floats = NULL;
  r->n_outputs = 0;
}

int proto_result_alloc(struct proto_result *r, uint32_t n_outputs, const uint32_t *n_floats) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < n_outputs; i++)
    total += n_floats[i];
  if (total > PROTO_MAX_OUT_FLOATS || n_outputs > PROTO_MAX_READOUTS)
    return -EINVAL;
  result_clear(r);
  r->outputs = calloc(n_outputs + 1, sizeof(float *));
  r->n_floats = calloc(n_outputs + 1, sizeof(uint32_t));
  if (!r->outputs || !r->n_floats) {
    result_clear(r);
    return -ENOMEM;
  }
  r->n_outputs = n_outputs;
  for (uint32_t i = 0; i < n_outputs; i++) {
    r->n_floats[i] = n_floats[i];
    if (!(r->outputs[i] = calloc((size_t)n_floats[i] + 1, sizeof(float)))) {
      result_clear(r);
      return -ENOMEM;
    }
  }
  return 0;
}

int proto_result_set_error(struct proto_result *r, int status, const char *message) {
  result_clear(r);
  free(r->message);
  r->message = message ? strndup(message, PROTO_MAX_TEXT_BYTES) : NULL;
  r->status = status;
  return status;
}

int proto_result_encode(const struct proto_result *r, struct proto_bytes *ret_bytes) {
  if (r->status > 0 || r->status < -100000 ||
      (r->message && strlen(r->message) > PROTO_MAX_TEXT_BYTES))
    return -EINVAL;
  struct wr w;
  wr_init(&w);
  if (r->numerics && strlen(r->numerics) > PROTO_MAX_ID_BYTES)
    return -EINVAL;
  wr_begin(&w, 5, PROTO_KIND_RESULT);
  wr_key(&w, "status");
  msgpack_pack_int32(&w.pk, r->status);
  wr_key(&w, "message");
  wr_str(&w, r->message);
  wr_key(&w, "outputs");
  msgpack_pack_array(&w.pk, r->n_outputs);
  for (uint32_t i = 0; i < r->n_outputs; i++)
    wr_bin(&w, r->outputs[i], (size_t)r->n_floats[i] * sizeof(float));
  wr_key(&w, "t");
  const struct proto_exec_timings *t = &r->timings;
  int64_t tv[PROTO_EXEC_TIMINGS] = {t->queue_us,   t->vision_us, t->prefix_us,
                                    t->rows_us,    t->readout_us, t->heads_us,
                                    t->wait_us,    t->total_us,  t->steps};
  msgpack_pack_array(&w.pk, PROTO_EXEC_TIMINGS);
  for (int i = 0; i < PROTO_EXEC_TIMINGS; i++)
    msgpack_pack_int64(&w.pk, tv[i]);
  wr_key(&w, "numerics");
  wr_str(&w, r->numerics);
  return wr_finish(&w, ret_bytes);
}

int proto_result_decode(const void *data, size_t n_bytes, struct proto_result *ret,
                        struct cm_diag *diag) {
  msgpack_unpacked up;
  int r = rd_message(data, n_bytes, PROTO_KIND_RESULT, &up, diag);
  if (r)
    return r;
  struct proto_result res = {0};
  struct rd_field f[] = {{"status", true, NULL},
                         {"message", true, NULL},
                         {"outputs", true, NULL},
                         {"t", true, NULL},
                         {"numerics", true, NULL}};
  int64_t st = 0, tv[PROTO_EXEC_TIMINGS] = {0};
  const msgpack_object_array *o = NULL, *t = NULL;
  if (!(r = rd_map(&up.data, f, 5, true, "result", diag)) &&
      !(r = rd_str(f[4].val, PROTO_MAX_ID_BYTES, true, "result.numerics", &res.numerics, diag)) &&
      !(r = rd_i64(f[0].val, -100000, 0, "result.status", &st, diag)) &&
      !(r = rd_str(f[1].val, PROTO_MAX_TEXT_BYTES, true, "result.message", &res.message, diag)) &&
      !(r = rd_array(f[2].val, PROTO_MAX_READOUTS, "result.outputs", &o, diag)) &&
      !(r = rd_array(f[3].val, PROTO_EXEC_TIMINGS, "result.t", &t, diag))) {
    if (t->size != PROTO_EXEC_TIMINGS)
      r = cm_diag_set(diag, -CM_EFORMAT, "result.t: needs %d timings", PROTO_EXEC_TIMINGS);
    for (uint32_t i = 0; !r && i < PROTO_EXEC_TIMINGS; i++)
      r = rd_i64(&t->ptr[i], 0, INT64_MAX / 8, "result.t[]", &tv[i], diag);
    uint64_t total = 0;
    for (uint32_t i = 0; !r && i < o->size; i++) {
      if (o->ptr[i].type != MSGPACK_OBJECT_BIN || o->ptr[i].via.bin.size % 4)
        r = cm_diag_set(diag, -CM_EFORMAT, "result.outputs[%u]: not a bin of float32", i);
      else
        total += o->ptr[i].via.bin.size / 4;
    }
    if (!r && total > PROTO_MAX_OUT_FLOATS)
      r = cm_diag_set(diag, -CM_EFORMAT, "result.outputs: more than %u floats",
                      PROTO_MAX_OUT_FLOATS);
    if (!r && st != 0 && o->size != 0)
      r = cm_diag_set(diag, -CM_EFORMAT, "result.outputs: must be empty with an error status");
    if (!r && o->size) {
      res.outputs = calloc(o->size + 1, sizeof(float *));
      res.n_floats = calloc(o->size + 1, sizeof(uint32_t));
      if (!res.outputs || !res.n_floats)
        r = -ENOMEM;
      for (uint32_t i = 0; !r && i < o->size; i++) {
        res.n_outputs = i + 1;
        res.n_floats[i] = o->ptr[i].via.bin.size / 4;
        r = rd_bin4(&o->ptr[i], res.n_floats[i], "result.outputs[]", (void **)&res.outputs[i],
                    diag);
      }
    }
  }
  msgpack_unpacked_destroy(&up);
  if (r) {
    proto_result_fini(&res);
    return r;
  }
  res.status = (int)st;
  res.timings = (struct proto_exec_timings){tv[0], tv[1], tv[2], tv[3], tv[4],
                                            tv[5], tv[6], tv[7], tv[8]};
  *ret = res;
  return 0;
}

void proto_result_fini(struct proto_result *r) {
  if (!r)
    return;
  result_clear(r);
  free(r->message);
  free(r->numerics);
  memset(r, 0, sizeof(*r));
}
