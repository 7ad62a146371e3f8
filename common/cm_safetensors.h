/* Read-only access to safetensors checkpoints: one file or a sharded set, memory-mapped.
 * The header is validated strictly before any tensor is handed out (JSON shape, dtypes BF16/F16/F32
 * only, shape product x dtype size == byte size, offsets inside the data section, no overlap).
 * It leaves out writing (see cm_safetensors_writer in the same module) and dtype conversion beyond
 * the three float types. */
#ifndef S1_CM_SAFETENSORS_H
#define S1_CM_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"

enum cm_dtype {
  CM_DTYPE_F32,
  CM_DTYPE_F16,
  CM_DTYPE_BF16,
  CM_DTYPE_COUNT,
};

#define CM_TENSOR_MAX_DIMS 8

/* A tensor inside a mapped file. Valid while the owning struct cm_safetensors is open. */
struct cm_tensor_view {
  const char *name;                   /* key as stored, NUL-terminated; owned by the reader */
  const char *file;                   /* path of the shard holding it; owned by the reader */
  enum cm_dtype dtype;                /* element type as stored */
  int n_dims;                         /* 0..CM_TENSOR_MAX_DIMS */
  int64_t shape[CM_TENSOR_MAX_DIMS];  /* row-major (C order) sizes, elements */
  int64_t n_elems;                    /* product of shape (1 for a scalar) */
  const void *data;                   /* little-endian elements in the mapping; may be unaligned */
  size_t n_bytes;                     /* n_elems * element size */
};

struct cm_safetensors; /* opaque: one or more mapped shards and their merged, sorted index */

/* Largest header accepted, bytes (the format's own readers stop at 100 MB too). */
#define CM_SAFETENSORS_MAX_HEADER (100 * 1000 * 1000)

/* Opens `path`: a `.safetensors` file, a `model.safetensors.index.json` (shards resolved next to
 * it), or a directory holding either (index preferred). Every shard's header is validated.
 * Ownership: *ret_st is heap-owned by the caller, freed with cm_safetensors_close.
 * Returns: 0; -ENOENT (missing file), -EIO, -ENOMEM, -CM_EFORMAT (bad header, bad index, a tensor
 * named twice, offsets out of bounds or overlapping), -CM_EDTYPE (dtype not F32/F16/BF16),
 * -CM_ESHAPE (shape disagrees with byte size), -CM_ELIMIT (header over CM_SAFETENSORS_MAX_HEADER),
 * -CM_EMISSING (the index maps a tensor its shard lacks). The data section must be tiled exactly by
 * the tensors (no gap, no overlap, no trailing bytes), as the format requires. `diag` gets a message naming the file and tensor.
 * Source: the safetensors format (huggingface/safetensors, docs "Format"). */
int cm_safetensors_open(const char *path, struct cm_safetensors **ret_st, struct cm_diag *diag);

/* Validates one in-memory file image (8-byte length, JSON header, data section) with the same
 * rules as cm_safetensors_open, without mapping anything; `path` only names it in messages.
 * Used by the header fuzz target. Returns 0 and *ret_count (tensors), or open's error codes. */
int cm_safetensors_validate(const char *path, const void *bytes, size_t n_bytes,
                            size_t *ret_count, struct cm_diag *diag);

/* Unmaps everything; accepts NULL. */
void cm_safetensors_close(struct cm_safetensors *st);

/* Number of tensors over all shards, and the i-th in key order (0 <= i < count). */
size_t cm_safetensors_count(const struct cm_safetensors *st);
int cm_safetensors_at(const struct cm_safetensors *st, size_t i, struct cm_tensor_view *ret_view);

/* Looks a tensor up by exact key. Returns 0, or -CM_EMISSING (ret_view untouched). */
int cm_safetensors_find(const struct cm_safetensors *st, const char *name,
                        struct cm_tensor_view *ret_view);

/* Bytes per element of a dtype (4, 2, 2); name as written in headers ("F32", "F16", "BF16"). */
size_t cm_dtype_size(enum cm_dtype dtype);
const char *cm_dtype_name(enum cm_dtype dtype);

/* Converts a tensor's elements to float32, exactly (BF16/F16 widen without rounding).
 * Shapes: out has view->n_elems floats. Ownership: caller's buffer. Returns 0. */
int cm_tensor_to_f32(const struct cm_tensor_view *view, float *out);

/* Rounds float32 to bfloat16 with round-to-nearest-even (NaN stays NaN), as torch's .to(bfloat16). */
uint16_t cm_f32_to_bf16(float x);
float cm_bf16_to_f32(uint16_t x);

/* Parses a header dtype name. Returns 0; -CM_EDTYPE for another format dtype (I8, F64, ...);
 * -CM_EFORMAT for a name the format does not define. */
int cm_dtype_parse(const char *name, enum cm_dtype *ret_dtype);

/* ---- writer ----
 * Collects tensors, then writes one file: header keys in byte order of their names, header padded
 * with spaces so the data section starts 8-byte aligned, data ordered by element size (F32 first)
 * then name, with no gaps. Bytes come from a borrowed pointer or from a fill callback called once
 * per tensor at finish time (so a checkpoint larger than memory can be streamed). */
struct cm_safetensors_writer; /* opaque */

/* Produces the n_bytes little-endian bytes of tensor `name` into buf. Returns 0 or a negative code. */
typedef int (*cm_safetensors_fill_fn)(void *ctx, const char *name, void *buf, size_t n_bytes);

/* Ownership: *ret_w heap-owned, freed with cm_safetensors_writer_free (accepts NULL). */
int cm_safetensors_writer_new(struct cm_safetensors_writer **ret_w);
void cm_safetensors_writer_free(struct cm_safetensors_writer *w);

/* Adds a "__metadata__" string entry (copied). Returns 0 or -ENOMEM. */
int cm_safetensors_writer_set_metadata(struct cm_safetensors_writer *w, const char *key,
                                       const char *value);

/* Queues a tensor. Shapes: shape[n_dims]. Ownership: name and shape are copied; `data`
 * (product(shape) x element size bytes) is borrowed until cm_safetensors_writer_finish returns.
 * Returns 0; -EINVAL (bad dtype, dims or name); -EEXIST (name already queued); -ENOMEM. */
int cm_safetensors_writer_add(struct cm_safetensors_writer *w, const char *name,
                              enum cm_dtype dtype, int n_dims, const int64_t *shape,
                              const void *data);
/* As cm_safetensors_writer_add, with the bytes produced by fill(fill_ctx, ...) at finish time. */
int cm_safetensors_writer_add_fill(struct cm_safetensors_writer *w, const char *name,
                                   enum cm_dtype dtype, int n_dims, const int64_t *shape,
                                   cm_safetensors_fill_fn fill, void *fill_ctx);

/* Writes everything to `path` (created or truncated). The writer may then only be freed.
 * Returns 0; -errno (create/write); the first fill error. `diag` names the file and tensor. */
int cm_safetensors_writer_finish(struct cm_safetensors_writer *w, const char *path,
                                 struct cm_diag *diag);

#endif
