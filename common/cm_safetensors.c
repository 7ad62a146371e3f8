/* Safetensors checkpoints: a strict, memory-mapped reader (one file or an index of shards) and a
 * small writer (sorted header, 8-byte aligned data section, no holes) for s1-export and
 * s1-mkmodel. The reader trusts nothing in a header: every offset, size and dtype is checked
 * before a tensor view is handed out. It leaves out the non-float dtypes and any conversion but the
 * exact widening to float32. Source: huggingface/safetensors, docs "Format". */
#include "cm_safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* One mapped file. */
struct shard {
  char *path;       /* file path as opened, heap */
  void *map;        /* whole-file read-only mapping (NULL for an empty file) */
  size_t map_bytes; /* file size */
  size_t data_off;  /* 8 + header length: start of the data section */
};

/* One tensor of the merged index. */
struct entry {
  char *name;                         /* key, heap */
  int shard;                          /* index into shards */
  enum cm_dtype dtype;                /* stored element type */
  int n_dims;                         /* 0..CM_TENSOR_MAX_DIMS */
  int64_t shape[CM_TENSOR_MAX_DIMS];  /* sizes, elements */
  int64_t n_elems;                    /* product of shape */
  uint64_t begin;                     /* data-section offset of the first byte */
  uint64_t end;                       /* data-section offset one past the last byte */
};

struct cm_safetensors {
  struct shard *shards; /* [n_shards] */
  size_t n_shards;      /* number of mapped files */
  struct entry *ents;   /* [n_ents], sorted by name */
  size_t n_ents;        /* number of tensors over all shards */
  size_t cap_ents;      /* allocated entries */
};

static const char *const dtype_names[CM_DTYPE_COUNT] = {"F32", "F16", "BF16"};
static const size_t dtype_sizes[CM_DTYPE_COUNT] = {4, 2, 2};

/* The other dtypes of the format: recognised, refused with CM_EDTYPE. */
static const char *const other_dtypes[] = {"F64", "I64", "I32", "I16", "I8", "U64", "U32", "U16",
                                           "U8", "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4",
                                           "F6_E2M3", "F6_E3M2", "C64"};

size_t cm_dtype_size(enum cm_dtype dtype) {
  return (unsigned)dtype < CM_DTYPE_COUNT ? dtype_sizes[dtype] : 0;
}

const char *cm_dtype_name(enum cm_dtype dtype) {
  return (unsigned)dtype < CM_DTYPE_COUNT ? dtype_names[dtype] : "?";
}

int cm_dtype_parse(const char *name, enum cm_dtype *ret_dtype) {
  for (int i = 0; i < CM_DTYPE_COUNT; i++) {
    if (strcmp(name, dtype_names[i]) == 0) {
      *ret_dtype = (enum cm_dtype)i;
      return 0;
    }
  }
  for (size_t i = 0; i < sizeof other_dtypes / sizeof other_dtypes[0]; i++)
    if (strcmp(name, other_dtypes[i]) == 0)
      return -CM_EDTYPE;
  return -CM_EFORMAT;
}

uint16_t cm_f32_to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)
    return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN, sign kept */
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return (uint16_t)(u >> 16);
}

float cm_bf16_to_f32(uint16_t x) {
  uint32_t u = (uint32_t)x << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    u = sign;
  } else { /* subnormal: normalise */
    int e = -1;
    do {
      e++;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

int cm_tensor_to_f32(const struct cm_tensor_view *view, float *out) {
  const unsigned char *p = view->data;
  for (int64_t i = 0; i < view->n_elems; i++) {
    if (view->dtype == CM_DTYPE_F32) {
      memcpy(&out[i], p + 4 * i, 4);
    } else {
      uint16_t h = (uint16_t)(p[2 * i] | (p[2 * i + 1] << 8));
      out[i] = view->dtype == CM_DTYPE_BF16 ? cm_bf16_to_f32(h) : f16_to_f32(h);
    }
  }
  return 0;
}

/* ---- reader ---------------------------------------------------------------------------------- */

static int entry_cmp(const void *a, const void *b) {
  return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

static int grow_entries(struct cm_safetensors *st, size_t extra) {
  if (st->n_ents + extra <= st->cap_ents)
    return 0;
  size_t cap = st->cap_ents ? st->cap_ents : 64;
  while (cap < st->n_ents + extra)
    cap *= 2;
  struct entry *e = realloc(st->ents, cap * sizeof *e);
  if (!e)
    return -ENOMEM;
  st->ents = e;
  st->cap_ents = cap;
  return 0;
}

/* Reads a JSON integer >= 0 into *ret. */
static bool json_u64(json_object *v, uint64_t *ret) {
  if (!v || !json_object_is_type(v, json_type_int))
    return false;
  errno = 0;
  int64_t x = json_object_get_int64(v);
  if (x < 0 || (x == INT64_MAX && errno))
    return false;
  *ret = (uint64_t)x;
  return true;
}

/* Validates one header member and fills *e (name not set). */
static int parse_tensor(const char *path, const char *name, json_object *v, uint64_t data_len,
                        struct entry *e, struct cm_diag *diag) {
  json_object *jd, *js, *jo;
  if (!json_object_is_type(v, json_type_object))
    return cm_diag_set(diag, -CM_EFORMAT, "%s: tensor '%s': header entry is not an object", path,
                       name);
  if (!json_object_object_get_ex(v, "dtype", &jd) || !json_object_is_type(jd, json_type_string))
    return cm_diag_set(diag, -CM_EFORMAT, "%s: tensor '%s': missing or non-string \"dtype\"", path,
                       name);
  const char *ds = json_object_get_string(jd);
  int rc = cm_dtype_parse(ds, &e->dtype);
  if (rc == -CM_EDTYPE)
    return cm_diag_set(diag, rc, "%s: tensor '%s': unsupported dtype %s (F32, F16, BF16 only)",
                       path, name, ds);
  if (rc)
    return cm_diag_set(diag, rc, "%s: tensor '%s': unknown dtype \"%s\"", path, name, ds);
  if (!json_object_object_get_ex(v, "shape", &js) || !json_object_is_type(js, json_type_array))
    return cm_diag_set(diag, -CM_EFORMAT, "%s: tensor '%s': missing or non-array \"shape\"", path,
                       name);
  size_t nd = json_object_array_length(js);
  if (nd > CM_TENSOR_MAX_DIMS)
    return cm_diag_set(diag, -CM_EFORMAT, "%s: tensor '%s': %zu dimensions (at most %d)", path,
                       name, nd, CM_TENSOR_MAX_DIMS);
  e->n_dims = (int)nd;
  uint64_t n = 1;
  for (size_t i = 0; i < nd; i++) {
    uint64_t d;
    if (!json_u64(json_object_array_get_idx(js, i), &d) || d > (uint64_t)INT64_MAX)
      return cm_diag_set(diag, -CM_EFORMAT, "%s: tensor '%s': shape[%zu] is not an integer >= 0",
                         path, name, i);
    if (d != 0 && n > UINT64_MAX / 8 / d)
      return cm_diag_set(diag, -CM_ESHAPE, "%s: tensor '%s': shape product overflows", path, name);
    n *= d;
    e->shape[i] = (int64_t)d;
  }
  e->n_elems = (int64_t)n;
  if (!json_object_object_get_ex(v, "data_offsets", &jo) ||
      !json_object_is_type(jo, json_type_array) || json_object_array_length(jo) != 2 ||
      !json_u64(json_object_array_get_idx(jo, 0), &e->begin) ||
      !json_u64(json_object_array_get_idx(jo, 1), &e->end) || e->begin > e->end)
    return cm_diag_set(diag, -CM_EFORMAT,
                       "%s: tensor '%s': \"data_offsets\" must be [begin, end] with 0 <= begin <= end",
                       path, name);
  if (e->end > data_len)
    return cm_diag_set(diag, -CM_EFORMAT,
                       "%s: tensor '%s': data_offsets [%llu, %llu] out of bounds (data section has "
                       "%llu bytes)",
                       path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                       (unsigned long long)data_len);
  uint64_t want = n * dtype_sizes[e->dtype];
  if (e->end - e->begin != want)
    return cm_diag_set(diag, -CM_ESHAPE,
                       "%s: tensor '%s': shape needs %llu bytes of %s but data_offsets span %llu",
                       path, name, (unsigned long long)want, ds,
                       (unsigned long long)(e->end - e->begin));
  return 0;
}

static int begin_cmp(const void *a, const void *b) {
  const struct entry *x = *(const struct entry *const *)a, *y = *(const struct entry *const *)b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

/* Checks that the tensors [first, st->n_ents) tile the data section exactly: no overlap, no gap. */
static int check_layout(const char *path, struct cm_safetensors *st, size_t first,
                        uint64_t data_len, struct cm_diag *diag) {
  size_t n = st->n_ents - first;
  struct entry **by = malloc((n ? n : 1) * sizeof *by);
  if (!by)
    return -ENOMEM;
  for (size_t i = 0; i < n; i++)
    by[i] = &st->ents[first + i];
  qsort(by, n, sizeof *by, begin_cmp);
  uint64_t at = 0;
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    if (by[i]->begin < at)
      rc = cm_diag_set(diag, -CM_EFORMAT,
                       "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s'", path,
                       by[i]->name, (unsigned long long)by[i]->begin,
                       (unsigned long long)by[i]->end, by[i - 1]->name);
    else if (by[i]->begin > at)
      rc = cm_diag_set(diag, -CM_EFORMAT,
                       "%s: tensor '%s': gap of %llu unindexed bytes before its data", path,
                       by[i]->name, (unsigned long long)(by[i]->begin - at));
    at = by[i]->end;
  }
  if (!rc && at != data_len)
    rc = cm_diag_set(diag, -CM_EFORMAT, "%s: %llu bytes after the last tensor are not indexed",
                     path, (unsigned long long)(data_len - at));
  free(by);
  return rc;
}

/* Validates a whole file image (header + data) and appends its tensors to st as shard `shard`. */
static int parse_header(const char *path, const void *bytes, size_t n_bytes,
                        struct cm_safetensors *st, int shard, struct cm_diag *diag) {
  const unsigned char *p = bytes;
  if (n_bytes < 8)
    return cm_diag_set(diag, -CM_EFORMAT, "%s: file of %zu bytes is too short for a header", path,
                       n_bytes);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--)
    hlen = (hlen << 8) | p[i];
  if (hlen > n_bytes - 8)
    return cm_diag_set(diag, -CM_EFORMAT,
                       "%s: header length %llu runs past the end of the file (%zu bytes)", path,
                       (unsigned long long)hlen, n_bytes);
  if (hlen > CM_SAFETENSORS_MAX_HEADER)
    return cm_diag_set(diag, -CM_ELIMIT, "%s: header length %llu exceeds the limit of %d bytes",
                       path, (unsigned long long)hlen, CM_SAFETENSORS_MAX_HEADER);
  if (hlen < 2 || p[8] != '{')
    return cm_diag_set(diag, -CM_EFORMAT, "%s: header is not a JSON object", path);
  uint64_t data_len = n_bytes - 8 - hlen;

  json_tokener *tok = json_tokener_new_ex(16);
  if (!tok)
    return -ENOMEM;
  json_object *root = json_tokener_parse_ex(tok, (const char *)p + 8, (int)hlen);
  enum json_tokener_error jerr = json_tokener_get_error(tok);
  size_t used = json_tokener_get_parse_end(tok);
  json_tokener_free(tok);
  int rc = 0;
  if (!root || jerr != json_tokener_success) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "%s: header is not valid JSON (%s)", path,
                     jerr == json_tokener_continue ? "unexpected end of header"
                                                   : json_tokener_error_desc(jerr));
    goto out;
  }
  for (size_t i = used; i < hlen; i++) {
    if (p[8 + i] != ' ' && p[8 + i] != '\n' && p[8 + i] != '\r' && p[8 + i] != '\t') {
      rc = cm_diag_set(diag, -CM_EFORMAT, "%s: bytes after the header's JSON object", path);
      goto out;
    }
  }
  if (!json_object_is_type(root, json_type_object)) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "%s: header is not a JSON object", path);
    goto out;
  }
  size_t first = st->n_ents;
  rc = grow_entries(st, (size_t)json_object_object_length(root));
  if (rc)
    goto out;
  json_object_object_foreach(root, key, val) {
    if (strcmp(key, "__metadata__") == 0) {
      if (!json_object_is_type(val, json_type_object)) {
        rc = cm_diag_set(diag, -CM_EFORMAT, "%s: \"__metadata__\" is not an object", path);
        goto out;
      }
      continue;
    }
    struct entry *e = &st->ents[st->n_ents];
    memset(e, 0, sizeof *e);
    rc = parse_tensor(path, key, val, data_len, e, diag);
    if (rc)
      goto out;
    e->name = strdup(key);
    if (!e->name) {
      rc = -ENOMEM;
      goto out;
    }
    e->shard = shard;
    st->n_ents++;
  }
  rc = check_layout(path, st, first, data_len, diag);
out:
  json_object_put(root);
  return rc;
}

void cm_safetensors_close(struct cm_safetensors *st) {
  if (!st)
    return;
  for (size_t i = 0; i < st->n_shards; i++) {
    if (st->shards[i].map)
      munmap(st->shards[i].map, st->shards[i].map_bytes);
    free(st->shards[i].path);
  }
  for (size_t i = 0; i < st->n_ents; i++)
    free(st->ents[i].name);
  free(st->shards);
  free(st->ents);
  free(st);
}

/* Maps `path` as shard number st->n_shards and parses its header. */
static int add_shard(struct cm_safetensors *st, const char *path, struct cm_diag *diag) {
  struct shard *sh = realloc(st->shards, (st->n_shards + 1) * sizeof *sh);
  if (!sh)
    return -ENOMEM;
  st->shards = sh;
  sh = &st->shards[st->n_shards];
  memset(sh, 0, sizeof *sh);
  sh->path = strdup(path);
  if (!sh->path)
    return -ENOMEM;
  st->n_shards++;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = -errno;
    return cm_diag_set(diag, e, "%s: cannot open: %s", path, strerror(-e));
  }
  struct stat sb;
  int rc = 0;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    rc = cm_diag_set(diag, -EIO, "%s: not a regular file", path);
    goto out;
  }
  sh->map_bytes = (size_t)sb.st_size;
  if (sh->map_bytes > 0) {
    void *m = mmap(NULL, sh->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      rc = cm_diag_set(diag, -EIO, "%s: mmap failed: %s", path, strerror(errno));
      goto out;
    }
    sh->map = m;
  }
  rc = parse_header(path, sh->map, sh->map_bytes, st, (int)(st->n_shards - 1),
                                   diag);
  if (!rc) {
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
      hlen = (hlen << 8) | ((const unsigned char *)sh->map)[i];
    sh->data_off = 8 + (size_t)hlen;
  }
out:
  close(fd);
  return rc;
}

static char *join_path(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *s = malloc(a + b + 2);
  if (!s)
    return NULL;
  memcpy(s, dir, a);
  s[a] = '/';
  memcpy(s + a + 1, name, b + 1);
  return s;
}

static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    return strdup(".");
  if (slash == path)
    return strdup("/");
  return strndup(path, (size_t)(slash - path));
}

static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int shard_name_ok(const char *f) {
  return f[0] != '\0' && strchr(f, '/') == NULL && strcmp(f, ".") != 0 && strcmp(f, "..") != 0;
}

/* Opens every shard named by an index file and checks the weight map against the headers. */
static int open_index(struct cm_safetensors *st, const char *index_path, struct cm_diag *diag) {
  json_object *root = json_object_from_file(index_path);
  char *dir = NULL;
  int rc = 0;
  if (!root) {
    if (access(index_path, R_OK) != 0) {
      int e = -errno;
      return cm_diag_set(diag, e, "%s: cannot open: %s", index_path, strerror(-e));
    }
    return cm_diag_set(diag, -CM_EFORMAT, "%s: not valid JSON (%s)", index_path,
                       json_util_get_last_err() ? json_util_get_last_err() : "parse error");
  }
  json_object *wm;
  if (!json_object_is_type(root, json_type_object) ||
      !json_object_object_get_ex(root, "weight_map", &wm) ||
      !json_object_is_type(wm, json_type_object)) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "%s: key \"weight_map\" missing or not an object",
                     index_path);
    goto out;
  }
  dir = dir_of(index_path);
  if (!dir) {
    rc = -ENOMEM;
    goto out;
  }
  /* Distinct shard files, in first-seen order. */
  json_object_object_foreach(wm, key, val) {
    if (!json_object_is_type(val, json_type_string) || !shard_name_ok(json_object_get_string(val))) {
      rc = cm_diag_set(diag, -CM_EFORMAT, "%s: weight_map[\"%s\"] is not a plain file name",
                       index_path, key);
      goto out;
    }
    const char *f = json_object_get_string(val);
    bool seen = false;
    for (size_t i = 0; i < st->n_shards && !seen; i++)
      seen = strcmp(strrchr(st->shards[i].path, '/') + 1, f) == 0;
    if (seen)
      continue;
    char *sp = join_path(dir, f);
    if (!sp) {
      rc = -ENOMEM;
      goto out;
    }
    rc = add_shard(st, sp, diag);
    free(sp);
    if (rc)
      goto out;
  }
  /* Every header tensor must be mapped to its own shard, every mapped name must exist. */
  for (size_t i = 0; i < st->n_ents; i++) {
    json_object *v;
    const char *shard_file = strrchr(st->shards[st->ents[i].shard].path, '/') + 1;
    if (!json_object_object_get_ex(wm, st->ents[i].name, &v) ||
        strcmp(json_object_get_string(v), shard_file) != 0) {
      /* A duplicate across shards is reported by the caller's duplicate check when both are
       * mapped; here the name is in a shard the index does not assign it to. */
      bool dup = false;
      for (size_t j = 0; j < st->n_ents && !dup; j++)
        dup = j != i && strcmp(st->ents[j].name, st->ents[i].name) == 0;
      if (dup)
        continue;
      rc = cm_diag_set(diag, -CM_EFORMAT,
                       "%s: tensor '%s' is stored in %s but the index does not map it there",
                       index_path, st->ents[i].name, shard_file);
      goto out;
    }
  }
  if ((size_t)json_object_object_length(wm) > st->n_ents) {
    json_object_object_foreach(wm, key2, val2) {
      (void)val2;
      bool found = false;
      for (size_t i = 0; i < st->n_ents && !found; i++)
        found = strcmp(st->ents[i].name, key2) == 0;
      if (!found) {
        rc = cm_diag_set(diag, -CM_EMISSING, "%s: tensor '%s' is mapped to %s but not stored there",
                         index_path, key2, json_object_get_string(val2));
        goto out;
      }
    }
  }
out:
  free(dir);
  json_object_put(root);
  return rc;
}

int cm_safetensors_open(const char *path, struct cm_safetensors **ret_st, struct cm_diag *diag) {
  struct cm_safetensors *st = calloc(1, sizeof *st);
  char *tmp = NULL;
  int rc = 0;
  if (!st)
    return -ENOMEM;
  struct stat sb;
  if (stat(path, &sb) != 0) {
    int e = -errno;
    rc = cm_diag_set(diag, e, "%s: cannot open: %s", path, strerror(-e));
    goto fail;
  }
  if (S_ISDIR(sb.st_mode)) {
    tmp = join_path(path, "model.safetensors.index.json");
    if (!tmp) {
      rc = -ENOMEM;
      goto fail;
    }
    if (access(tmp, F_OK) == 0) {
      rc = open_index(st, tmp, diag);
    } else {
      free(tmp);
      tmp = join_path(path, "model.safetensors");
      rc = tmp ? add_shard(st, tmp, diag) : -ENOMEM;
    }
  } else if (ends_with(path, ".json")) {
    rc = open_index(st, path, diag);
  } else {
    rc = add_shard(st, path, diag);
  }
  if (rc)
    goto fail;
  if (st->n_ents > 1)
    qsort(st->ents, st->n_ents, sizeof *st->ents, entry_cmp);
  for (size_t i = 1; i < st->n_ents; i++) {
    if (strcmp(st->ents[i].name, st->ents[i - 1].name) == 0) {
      rc = cm_diag_set(diag, -CM_EFORMAT, "%s: tensor '%s' is stored twice (%s and %s)", path,
                       st->ents[i].name, st->shards[st->ents[i - 1].shard].path,
                       st->shards[st->ents[i].shard].path);
      goto fail;
    }
  }
  free(tmp);
  *ret_st = st;
  return 0;
fail:
  free(tmp);
  cm_safetensors_close(st);
  return rc;
}

size_t cm_safetensors_count(const struct cm_safetensors *st) {
  return st->n_ents;
}

static void fill_view(const struct cm_safetensors *st, const struct entry *e,
                      struct cm_tensor_view *v) {
  const struct shard *sh = &st->shards[e->shard];
  v->name = e->name;
  v->file = sh->path;
  v->dtype = e->dtype;
  v->n_dims = e->n_dims;
  memset(v->shape, 0, sizeof v->shape);
  memcpy(v->shape, e->shape, (size_t)e->n_dims * sizeof e->shape[0]);
  v->n_elems = e->n_elems;
  v->n_bytes = (size_t)(e->end - e->begin);
  v->data = (const unsigned char *)sh->map + sh->data_off + e->begin;
}

int cm_safetensors_at(const struct cm_safetensors *st, size_t i, struct cm_tensor_view *ret_view) {
  if (i >= st->n_ents)
    return -EINVAL;
  fill_view(st, &st->ents[i], ret_view);
  return 0;
}

int cm_safetensors_find(const struct cm_safetensors *st, const char *name,
                        struct cm_tensor_view *ret_view) {
  struct entry key = {.name = (char *)name};
  const struct entry *e = bsearch(&key, st->ents, st->n_ents, sizeof key, entry_cmp);
  if (!e)
    return -CM_EMISSING;
  fill_view(st, e, ret_view);
  return 0;
}

int cm_safetensors_validate(const char *path, const void *bytes, size_t n_bytes,
                            size_t *ret_count, struct cm_diag *diag) {
  struct cm_safetensors *st = calloc(1, sizeof *st);
  if (!st)
    return -ENOMEM;
  int rc = parse_header(path, bytes, n_bytes, st, 0, diag);
  if (!rc) {
    if (st->n_ents > 1)
      qsort(st->ents, st->n_ents, sizeof *st->ents, entry_cmp);
    *ret_count = st->n_ents;
  }
  cm_safetensors_close(st);
  return rc;
}

/* ---- writer ---------------------------------------------------------------------------------- */

/* One tensor queued for writing. */
struct wentry {
  char *name;                        /* key, heap */
  enum cm_dtype dtype;               /* stored type */
  int n_dims;                        /* dimensions */
  int64_t shape[CM_TENSOR_MAX_DIMS]; /* sizes */
  size_t n_bytes;                    /* product of shape x element size */
  const void *data;                  /* borrowed bytes, or NULL when fill is set */
  cm_safetensors_fill_fn fill;       /* producer of the bytes at write time, or NULL */
  void *fill_ctx;                    /* passed to fill */
  uint64_t begin;                    /* data-section offset, set at finish */
};

struct cm_safetensors_writer {
  struct wentry *ents;    /* [n_ents] */
  size_t n_ents;          /* queued tensors */
  size_t cap;             /* allocated */
  json_object *metadata;  /* "__metadata__" (string values), owned; NULL when none */
};

int cm_safetensors_writer_new(struct cm_safetensors_writer **ret_w) {
  struct cm_safetensors_writer *w = calloc(1, sizeof *w);
  if (!w)
    return -ENOMEM;
  *ret_w = w;
  return 0;
}

void cm_safetensors_writer_free(struct cm_safetensors_writer *w) {
  if (!w)
    return;
  for (size_t i = 0; i < w->n_ents; i++)
    free(w->ents[i].name);
  free(w->ents);
  json_object_put(w->metadata);
  free(w);
}

int cm_safetensors_writer_set_metadata(struct cm_safetensors_writer *w, const char *key,
                                       const char *value) {
  if (!w->metadata && !(w->metadata = json_object_new_object()))
    return -ENOMEM;
  json_object *s = json_object_new_string(value);
  if (!s)
    return -ENOMEM;
  return json_object_object_add(w->metadata, key, s) ? -ENOMEM : 0;
}

static int writer_push(struct cm_safetensors_writer *w, const char *name, enum cm_dtype dtype,
                       int n_dims, const int64_t *shape, const void *data,
                       cm_safetensors_fill_fn fill, void *fill_ctx) {
  if ((unsigned)dtype >= CM_DTYPE_COUNT || n_dims < 0 || n_dims > CM_TENSOR_MAX_DIMS ||
      strcmp(name, "__metadata__") == 0 || name[0] == '\0')
    return -EINVAL;
  for (size_t i = 0; i < w->n_ents; i++)
    if (strcmp(w->ents[i].name, name) == 0)
      return -EEXIST;
  if (w->n_ents == w->cap) {
    size_t cap = w->cap ? 2 * w->cap : 64;
    struct wentry *e = realloc(w->ents, cap * sizeof *e);
    if (!e)
      return -ENOMEM;
    w->ents = e;
    w->cap = cap;
  }
  struct wentry *e = &w->ents[w->n_ents];
  memset(e, 0, sizeof *e);
  size_t n = dtype_sizes[dtype];
  for (int i = 0; i < n_dims; i++) {
    if (shape[i] < 0)
      return -EINVAL;
    e->shape[i] = shape[i];
    n *= (size_t)shape[i];
  }
  e->name = strdup(name);
  if (!e->name)
    return -ENOMEM;
  e->dtype = dtype;
  e->n_dims = n_dims;
  e->n_bytes = n;
  e->data = data;
  e->fill = fill;
  e->fill_ctx = fill_ctx;
  w->n_ents++;
  return 0;
}

int cm_safetensors_writer_add(struct cm_safetensors_writer *w, const char *name,
                              enum cm_dtype dtype, int n_dims, const int64_t *shape,
                              const void *data) {
  return writer_push(w, name, dtype, n_dims, shape, data, NULL, NULL);
}

int cm_safetensors_writer_add_fill(struct cm_safetensors_writer *w, const char *name,
                                   enum cm_dtype dtype, int n_dims, const int64_t *shape,
                                   cm_safetensors_fill_fn fill, void *fill_ctx) {
  return writer_push(w, name, dtype, n_dims, shape, NULL, fill, fill_ctx);
}

static int wentry_name_cmp(const void *a, const void *b) {
  return strcmp(((const struct wentry *)a)->name, ((const struct wentry *)b)->name);
}

/* Data order: larger elements first (keeps every F32 tensor 4-byte aligned), then by name. */
static int wentry_data_cmp(const void *a, const void *b) {
  const struct wentry *x = *(const struct wentry *const *)a, *y = *(const struct wentry *const *)b;
  size_t sx = dtype_sizes[x->dtype], sy = dtype_sizes[y->dtype];
  if (sx != sy)
    return sx > sy ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int write_all(FILE *f, const void *p, size_t n) {
  return fwrite(p, 1, n, f) == n ? 0 : -EIO;
}

int cm_safetensors_writer_finish(struct cm_safetensors_writer *w, const char *path,
                                 struct cm_diag *diag) {
  int rc = 0;
  FILE *f = NULL;
  void *buf = NULL;
  struct wentry **order = NULL;
  json_object *hdr = json_object_new_object();
  if (!hdr)
    return -ENOMEM;
  if (w->n_ents > 1)
    qsort(w->ents, w->n_ents, sizeof *w->ents, wentry_name_cmp);
  order = malloc((w->n_ents ? w->n_ents : 1) * sizeof *order);
  if (!order) {
    rc = -ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < w->n_ents; i++)
    order[i] = &w->ents[i];
  qsort(order, w->n_ents, sizeof *order, wentry_data_cmp);
  uint64_t at = 0;
  for (size_t i = 0; i < w->n_ents; i++) {
    order[i]->begin = at;
    at += order[i]->n_bytes;
  }
  if (w->metadata)
    json_object_object_add(hdr, "__metadata__", json_object_get(w->metadata));
  for (size_t i = 0; i < w->n_ents; i++) { /* keys in name order */
    struct wentry *e = &w->ents[i];
    json_object *t = json_object_new_object(), *sh = json_object_new_array(),
                *off = json_object_new_array();
    if (!t || !sh || !off) {
      json_object_put(t);
      json_object_put(sh);
      json_object_put(off);
      rc = -ENOMEM;
      goto out;
    }
    json_object_object_add(t, "dtype", json_object_new_string(dtype_names[e->dtype]));
    for (int d = 0; d < e->n_dims; d++)
      json_object_array_add(sh, json_object_new_int64(e->shape[d]));
    json_object_object_add(t, "shape", sh);
    json_object_array_add(off, json_object_new_int64((int64_t)e->begin));
    json_object_array_add(off, json_object_new_int64((int64_t)(e->begin + e->n_bytes)));
    json_object_object_add(t, "data_offsets", off);
    json_object_object_add(hdr, e->name, t);
  }
  size_t jlen;
  const char *js = json_object_to_json_string_length(hdr, JSON_C_TO_STRING_PLAIN, &jlen);
  size_t hlen = (jlen + 7) & ~(size_t)7; /* data section starts 8-byte aligned */
  f = fopen(path, "wb");
  if (!f) {
    rc = cm_diag_set(diag, -errno, "%s: cannot create: %s", path, strerror(errno));
    goto out;
  }
  unsigned char len8[8];
  for (int i = 0; i < 8; i++)
    len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  rc = write_all(f, len8, 8);
  if (!rc)
    rc = write_all(f, js, jlen);
  for (size_t i = jlen; i < hlen && !rc; i++)
    rc = fputc(' ', f) == EOF ? -EIO : 0;
  size_t buf_bytes = 0;
  for (size_t i = 0; i < w->n_ents && !rc; i++) {
    struct wentry *e = order[i];
    if (e->fill) {
      if (e->n_bytes > buf_bytes) {
        void *nb = realloc(buf, e->n_bytes);
        if (!nb) {
          rc = -ENOMEM;
          break;
        }
        buf = nb;
        buf_bytes = e->n_bytes;
      }
      rc = e->fill(e->fill_ctx, e->name, buf, e->n_bytes);
      if (rc) {
        cm_diag_set(diag, rc, "%s: tensor '%s': producing its data failed", path, e->name);
        break;
      }
      rc = write_all(f, buf, e->n_bytes);
    } else if (e->n_bytes) {
      rc = write_all(f, e->data, e->n_bytes);
    }
  }
  if (fclose(f) != 0 && !rc)
    rc = -EIO;
  f = NULL;
  if (rc)
    cm_diag_set(diag, rc, "%s: write failed", path);
out:
  free(buf);
  free(order);
  json_object_put(hdr);
  return rc;
}
