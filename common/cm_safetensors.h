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

/* Opens `path`: a `.safetensors` file, a `model.safetensors.index.json` (shards resolved next to
 * it), or a directory holding either (index preferred). Every shard's header is validated.
 * Ownership: *ret_st is heap-owned by the caller, freed with cm_safetensors_close.
 * Returns: 0; -ENOENT (missing file), -EIO, -ENOMEM, -CM_EFORMAT (bad header, bad index, a tensor
 * named twice, offsets out of bounds or overlapping), -CM_EDTYPE (dtype not F32/F16/BF16),
 * -CM_ESHAPE (shape disagrees with byte size). `diag` gets a message naming the file and tensor.
 * Source: the safetensors format (huggingface/safetensors, docs "Format"). */
int cm_safetensors_open(const char *path, struct cm_safetensors **ret_st, struct cm_diag *diag);

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

#endif
