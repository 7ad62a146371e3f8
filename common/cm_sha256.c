/* SHA-256 via libcrypto's EVP interface (see cm_sha256.h); no digest code of our own. */
#include "cm_sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cm_sha256_init(struct cm_sha256 *h) {
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  h->evp = c;
  if (!c)
    return -ENOMEM;
  return EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1 ? 0 : -EIO;
}

int cm_sha256_update(struct cm_sha256 *h, const void *data, size_t n) {
  return EVP_DigestUpdate(h->evp, data, n) == 1 ? 0 : -EIO;
}

int cm_sha256_copy(struct cm_sha256 *dst, const struct cm_sha256 *src) {
  if (!dst->evp && !(dst->evp = EVP_MD_CTX_new()))
    return -ENOMEM;
  return EVP_MD_CTX_copy_ex(dst->evp, src->evp) == 1 ? 0 : -EIO;
}

int cm_sha256_final(struct cm_sha256 *h, uint8_t ret_digest[CM_SHA256_BYTES]) {
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(h->evp, ret_digest, &len) != 1 || len != CM_SHA256_BYTES)
    return -EIO;
  return 0;
}

void cm_sha256_fini(struct cm_sha256 *h) {
  if (!h)
    return;
  EVP_MD_CTX_free(h->evp);
  h->evp = NULL;
}

int cm_sha256_buf(const void *data, size_t n, uint8_t ret_digest[CM_SHA256_BYTES]) {
  struct cm_sha256 h = {0};
  int rc = cm_sha256_init(&h);
  if (!rc)
    rc = cm_sha256_update(&h, data, n);
  if (!rc)
    rc = cm_sha256_final(&h, ret_digest);
  cm_sha256_fini(&h);
  return rc;
}

int cm_sha256_fd(int fd, const char *name, uint8_t ret_digest[CM_SHA256_BYTES],
                 uint64_t *ret_n_bytes, struct cm_diag *diag) {
  enum { block = 1 << 20 };
  struct cm_sha256 h = {0};
  uint64_t total = 0;
  unsigned char *buf = malloc(block);
  int rc = buf ? cm_sha256_init(&h) : -ENOMEM;
  while (!rc) {
    ssize_t n = read(fd, buf, block);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int e = -errno;
      rc = cm_diag_set(diag, e, "%s: read failed: %s", name, strerror(-e));
      break;
    }
    if (n == 0)
      break;
    total += (uint64_t)n;
    rc = cm_sha256_update(&h, buf, (size_t)n);
  }
  if (!rc)
    rc = cm_sha256_final(&h, ret_digest);
  if (!rc && ret_n_bytes)
    *ret_n_bytes = total;
  cm_sha256_fini(&h);
  free(buf);
  return rc;
}

int cm_sha256_file(const char *path, uint8_t ret_digest[CM_SHA256_BYTES], uint64_t *ret_n_bytes,
                   struct cm_diag *diag) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = -errno;
    return cm_diag_set(diag, e, "%s: cannot open: %s", path, strerror(-e));
  }
  int rc = cm_sha256_fd(fd, path, ret_digest, ret_n_bytes, diag);
  close(fd);
  return rc;
}

void cm_sha256_hex(const uint8_t digest[CM_SHA256_BYTES], char out[CM_SHA256_HEX]) {
  static const char hexd[] = "0123456789abcdef";
  for (int i = 0; i < CM_SHA256_BYTES; i++) {
    out[2 * i] = hexd[digest[i] >> 4];
    out[2 * i + 1] = hexd[digest[i] & 15];
  }
  out[64] = '\0';
}
