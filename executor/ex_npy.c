/* .npy float32 reader (see ex_npy.h): magic, version, a Python-literal header dict parsed for its
 * three keys, then the raw little-endian data. The file is read whole, then parsed from memory. */
#include "ex_npy.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value after `key:` inside the header dict, or NULL. */
static const char *find_value(const char *hdr, const char *key) {
  const char *p = strstr(hdr, key);
  if (!p)
    return NULL;
  p = strchr(p + strlen(key), ':');
  if (!p)
    return NULL;
  p++;
  while (*p == ' ')
    p++;
  return p;
}

int ex_npy_parse_f32(const uint8_t *bytes, size_t n_bytes, const char *name, float **ret_data,
                     int64_t ret_shape[EX_NPY_MAX_DIMS], int *ret_n_dims, struct cm_diag *diag) {
  if (n_bytes < 10 || memcmp(bytes, "\x93NUMPY", 6) != 0 || bytes[6] < 1 || bytes[6] > 3)
    return cm_diag_set(diag, -CM_EFORMAT, "%s: not a .npy file (magic or version)", name);
  size_t hlen, off;
  if (bytes[6] == 1) {
    hlen = (size_t)bytes[8] | (size_t)bytes[9] << 8;
    off = 10;
  } else {
    if (n_bytes < 12)
      return cm_diag_set(diag, -CM_EFORMAT, "%s: truncated .npy header", name);
    hlen = (size_t)bytes[8] | (size_t)bytes[9] << 8 | (size_t)bytes[10] << 16 |
           (size_t)bytes[11] << 24;
    off = 12;
  }
  if (hlen > n_bytes - off || hlen > (1u << 20))
    return cm_diag_set(diag, -CM_EFORMAT, "%s: truncated .npy header", name);
  char *hdr = malloc(hlen + 1);
  if (!hdr)
    return -ENOMEM;
  memcpy(hdr, bytes + off, hlen);
  hdr[hlen] = 0;
  int r = 0;
  const char *descr = find_value(hdr, "'descr'");
  const char *fo = find_value(hdr, "'fortran_order'");
  const char *sh = find_value(hdr, "'shape'");
  if (!descr || !fo || !sh || *sh != '(') {
    r = cm_diag_set(diag, -CM_EFORMAT, "%s: header lacks descr, fortran_order or shape", name);
    goto out;
  }
  if (strncmp(descr, "'<f4'", 5) != 0) {
    r = cm_diag_set(diag, -CM_EDTYPE, "%s: dtype is not '<f4' (float32)", name);
    goto out;
  }
  if (strncmp(fo, "False", 5) != 0) {
    r = cm_diag_set(diag, -CM_EUNSUPPORTED, "%s: Fortran order is not supported", name);
    goto out;
  }
  int nd = 0;
  int64_t shape[EX_NPY_MAX_DIMS];
  size_t n = 1;
  const char *p = sh + 1;
  for (;;) {
    while (*p == ' ' || *p == ',')
      p++;
    if (*p == ')')
      break;
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end == p || v < 0 || nd == EX_NPY_MAX_DIMS) {
      r = cm_diag_set(diag, nd == EX_NPY_MAX_DIMS ? -CM_EUNSUPPORTED : -CM_EFORMAT,
                      "%s: bad or too many dims in shape", name);
      goto out;
    }
    if (v && n > EX_NPY_MAX_BYTES / 4 / (unsigned long long)v) {
      r = cm_diag_set(diag, -CM_ELIMIT, "%s: array larger than %zu bytes", name, EX_NPY_MAX_BYTES);
      goto out;
    }
    shape[nd++] = v;
    n *= (size_t)v;
    p = end;
  }
  if (n_bytes - off - hlen != n * sizeof(float)) {
    r = cm_diag_set(diag, -CM_EFORMAT, "%s: %zu data bytes for a shape of %zu floats", name,
                    n_bytes - off - hlen, n);
    goto out;
  }
  float *data = malloc((n ? n : 1) * sizeof(float));
  if (!data) {
    r = -ENOMEM;
    goto out;
  }
  memcpy(data, bytes + off + hlen, n * sizeof(float));
  *ret_data = data;
  memcpy(ret_shape, shape, (size_t)nd * sizeof(int64_t));
  *ret_n_dims = nd;
out:
  free(hdr);
  return r;
}

int ex_npy_load_f32(const char *path, float **ret_data, int64_t ret_shape[EX_NPY_MAX_DIMS],
                    int *ret_n_dims, struct cm_diag *diag) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return cm_diag_set(diag, errno == ENOENT ? -ENOENT : -EIO, "%s: cannot open", path);
  int r = 0;
  uint8_t *buf = NULL;
  long len = -1;
  if (fseek(f, 0, SEEK_END) == 0)
    len = ftell(f);
  if (len < 0 || fseek(f, 0, SEEK_SET) != 0) {
    r = cm_diag_set(diag, -EIO, "%s: cannot read", path);
    goto out;
  }
  if ((unsigned long)len > EX_NPY_MAX_BYTES + (1u << 20)) {
    r = cm_diag_set(diag, -CM_ELIMIT, "%s: larger than %zu bytes", path, EX_NPY_MAX_BYTES);
    goto out;
  }
  buf = malloc((size_t)len + 1);
  if (!buf) {
    r = -ENOMEM;
    goto out;
  }
  if (fread(buf, 1, (size_t)len, f) != (size_t)len) {
    r = cm_diag_set(diag, -EIO, "%s: read error", path);
    goto out;
  }
  r = ex_npy_parse_f32(buf, (size_t)len, path, ret_data, ret_shape, ret_n_dims, diag);
out:
  free(buf);
  fclose(f);
  return r;
}

int ex_npy_save_f32(const char *path, const float *data, const int64_t *shape, int n_dims,
                    struct cm_diag *diag) {
  if (n_dims < 1 || n_dims > EX_NPY_MAX_DIMS)
    return cm_diag_set(diag, -EINVAL, "%s: %d dims (1..%d)", path, n_dims, EX_NPY_MAX_DIMS);
  char hdr[256];
  int len = snprintf(hdr, sizeof(hdr), "{'descr': '<f4', 'fortran_order': False, 'shape': (");
  size_t n = 1;
  for (int i = 0; i < n_dims; i++) {
    if (shape[i] < 0)
      return cm_diag_set(diag, -EINVAL, "%s: negative dim", path);
    n *= (size_t)shape[i];
    len += snprintf(hdr + len, sizeof(hdr) - (size_t)len, "%lld%s", (long long)shape[i],
                    n_dims == 1 ? "," : i + 1 < n_dims ? ", " : "");
  }
  len += snprintf(hdr + len, sizeof(hdr) - (size_t)len, "), }");
  /* pad with spaces to a multiple of 64 bytes including the 10-byte preamble, then '\n' */
  int total = (10 + len + 1 + 63) / 64 * 64;
  while (10 + len + 1 < total)
    hdr[len++] = ' ';
  hdr[len++] = '\n';
  unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(len & 0xff),
                           (unsigned char)(len >> 8)};
  FILE *f = fopen(path, "wb");
  bool ok = f && fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)len, f) == (size_t)len &&
            (n == 0 || fwrite(data, sizeof(float), n, f) == n);
  if (f && fclose(f) != 0)
    ok = false;
  return ok ? 0 : cm_diag_set(diag, -EIO, "%s: cannot write", path);
}
