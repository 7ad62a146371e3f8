/* Reading a float32 array from a NumPy .npy file (format versions 1-3, little-endian '<f4', C
 * order), the stand-in for image pixel input until the image code lands and the format of test
 * fixtures, and writing one (version 1; s1-forward's layer dumps). Other dtypes are left out. */
#ifndef S1_EX_NPY_H
#define S1_EX_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"

#define EX_NPY_MAX_DIMS 4
#define EX_NPY_MAX_BYTES ((size_t)1 << 31) /* refuse arrays above 2 GiB */

/* Loads `path`. Shapes: *ret_data holds the product of ret_shape[0..*ret_n_dims) floats.
 * Ownership: *ret_data is malloc'd, the caller frees it.
 * Returns 0; -ENOENT / -EIO (file), -CM_EFORMAT (bad magic or header, size disagreeing with the
 * shape), -CM_EDTYPE (not '<f4'), -CM_EUNSUPPORTED (Fortran order, > EX_NPY_MAX_DIMS dims),
 * -CM_ELIMIT (> EX_NPY_MAX_BYTES), -ENOMEM. `diag` names the file.
 * Source: numpy/lib/format.py (NEP 1, the .npy format). */
int ex_npy_load_f32(const char *path, float **ret_data, int64_t ret_shape[EX_NPY_MAX_DIMS],
                    int *ret_n_dims, struct cm_diag *diag);

/* The same, from bytes already in memory (the fuzzed entry point).
 * Units: `name` only labels messages. Returns as ex_npy_load_f32, without the file errors. */
int ex_npy_parse_f32(const uint8_t *bytes, size_t n_bytes, const char *name, float **ret_data,
                     int64_t ret_shape[EX_NPY_MAX_DIMS], int *ret_n_dims, struct cm_diag *diag);

/* Writes data [shape[0], ..., shape[n_dims−1]] float32 to `path` as a version-1 .npy ('<f4', C
 * order; a little-endian host is assumed, as everywhere in s1serve). Returns 0; -EINVAL (n_dims
 * outside 1..EX_NPY_MAX_DIMS, a negative dim); -EIO (cannot write, named in diag). */
int ex_npy_save_f32(const char *path, const float *data, const int64_t *shape, int n_dims,
                    struct cm_diag *diag);

#endif
