/* SHA-256 through OpenSSL libcrypto (EVP): streamed updates, whole buffers and whole files, plus
 * the lowercase hex form used in manifests. It leaves out every other digest. */
#ifndef S1_CM_SHA256_H
#define S1_CM_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"

#define CM_SHA256_BYTES 32
#define CM_SHA256_HEX 65 /* 64 hex digits + NUL */

/* A streaming digest. Embedded by the caller; init before use, fini always (after final too). */
struct cm_sha256 {
  void *evp; /* EVP_MD_CTX *, owned */
};

/* Starts a digest. Returns 0 or -ENOMEM. */
int cm_sha256_init(struct cm_sha256 *h);
/* Adds n bytes. Returns 0 or -EIO (libcrypto failure). */
int cm_sha256_update(struct cm_sha256 *h, const void *data, size_t n);
/* dst ← a copy of src's state (dst initialised or zeroed; a digest of what src has seen so far
 * can then be finished while src goes on). Returns 0, -ENOMEM or -EIO. */
int cm_sha256_copy(struct cm_sha256 *dst, const struct cm_sha256 *src);
/* Writes the 32-byte digest. Returns 0 or -EIO. */
int cm_sha256_final(struct cm_sha256 *h, uint8_t ret_digest[CM_SHA256_BYTES]);
/* Frees the context; accepts a zeroed or finished one. */
void cm_sha256_fini(struct cm_sha256 *h);

/* One-shot digest of a buffer. Returns 0, -ENOMEM or -EIO. Source: FIPS 180-4. */
int cm_sha256_buf(const void *data, size_t n, uint8_t ret_digest[CM_SHA256_BYTES]);

/* Digest of a whole file, read in 1 MiB blocks. Units: ret_n_bytes is the file size.
 * Returns 0; -errno (open/read, message names the file); -ENOMEM; -EIO. */
int cm_sha256_file(const char *path, uint8_t ret_digest[CM_SHA256_BYTES], uint64_t *ret_n_bytes,
                   struct cm_diag *diag);

/* Digest of everything read from an open descriptor (from its current offset to the end), in
 * 1 MiB blocks; `name` only labels the message. Units: ret_n_bytes is the bytes read.
 * Ownership: fd stays the caller's (not closed). Returns 0; -errno (read); -ENOMEM; -EIO. */
int cm_sha256_fd(int fd, const char *name, uint8_t ret_digest[CM_SHA256_BYTES],
                 uint64_t *ret_n_bytes, struct cm_diag *diag);

/* Lowercase hex of a digest into out (65 bytes with the NUL). */
void cm_sha256_hex(const uint8_t digest[CM_SHA256_BYTES], char out[CM_SHA256_HEX]);

#endif
