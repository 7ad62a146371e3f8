/* .npy float32 reader (see ex_npy.h): magic, version, a Python-literal header dict parsed for its
 * three keys, then the raw little-endian data. */
#include "ex_npy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int ex_npy_load_f32(const char *path, float **ret_data, int64_t ret_shape[EX_NPY_MAX_DIMS],
                    int *ret_n_dims, struct cm_diag *diag) {
  int r = 0;
  char *hdr = NULL;
  float *data = NULL;
  FILE *f = fopen(path, "rb");
  if (!f)
    return cm_diag_set(diag, errno == ENOENT ? -ENOENT : -EIO, "%s: cannot open", path);
  unsigned char pre[10];
  if (fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0 || pre[6] < 1 || pre[6] > 3) {
    r = cm_diag_set(diag, -CM_EFORMAT, "%s: not a .npy file (magic or version)", path);
    goto out;
  }
  size_t hlen;
  if (pre[6] == 1) {
    if (fread(pre + 8, 1, 2, f) != 2)
      goto short_file;
    hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
  } else {
    unsigned char b[4];
    if (fread(b, 1, 4, f) != 4)
      goto short_file;
    hlen = (size_t)b[0] | (size_t)b[1] << 8 | (size_t)b[2] << 16 | (size_t)b[3] << 24;
    if (hlen > (1 << 20)) {
      r = cm_diag_set(diag, -CM_EFORMAT, "%s: header of %zu bytes", path, hlen);
      goto out;
    }
  }
  hdr = malloc(hlen + 1);
  if (!hdr) {
    r = -ENOMEM;
    goto out;
  }
  if (fread(hdr, 1, hlen, f) != hlen)
    goto short_file;
  hdr[hlen] = 0;
  const char *descr = find_value(hdr, "'descr'");
  const char *fo = find_value(hdr, "'fortran_order'");
  const char *sh = find_value(hdr, "'shape'");
  if (!descr || !fo || !sh || *sh != '(') {
    r = cm_diag_set(diag, -CM_EFORMAT, "%s: header lacks descr, fortran_order or shape", path);
    goto out;
  }
  if (strncmp(descr, "'<f4'", 5) != 0) {
    r = cm_diag_set(diag, -CM_EDTYPE, "%s: dtype %.8s, only '<f4' (float32)", path, descr);
    goto out;
  }
  if (strncmp(fo, "False", 5) != 0) {
    r = cm_diag_set(diag, -CM_EUNSUPPORTED, "%s: Fortran order is not supported", path);
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
                      "%s: bad or too many dims in shape", path);
      goto out;
    }
    shape[nd++] = v;
    if (v && n > EX_NPY_MAX_BYTES / 4 / (size_t)v) {
      r = cm_diag_set(diag, -CM_ELIMIT, "%s: array larger than %zu bytes", path,
                      EX_NPY_MAX_BYTES);
      goto out;
    }
    n *= (size_t)v;
    p = end;
  }
  data = malloc((n ? n : 1) * sizeof(float));
  if (!data) {
    r = -ENOMEM;
    goto out;
  }
  if (fread(data, sizeof(float), n, f) != n || fgetc(f) != EOF) {
    r = cm_diag_set(diag, -CM_EFORMAT, "%s: data size disagrees with shape", path);
    goto out;
  }
  *ret_data = data;
  data = NULL;
  memcpy(ret_shape, shape, (size_t)nd * sizeof(int64_t));
  *ret_n_dims = nd;
  goto out;
short_file:
  r = cm_diag_set(diag, -CM_EFORMAT, "%s: truncated .npy header", path);
out:
  free(data);
  free(hdr);
  fclose(f);
  return r;
}
