/* Unit test of SHA-256: FIPS 180-4 / NIST example vectors, streamed vs one-shot, a copied state
 * finished midway, and a file read across the 1 MiB block boundary. */
#include "cm_sha256.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static void expect_buf(const void *p, size_t n, const char *hex) {
  uint8_t d[CM_SHA256_BYTES];
  char h[CM_SHA256_HEX];
  CHECK(cm_sha256_buf(p, n, d) == 0);
  cm_sha256_hex(d, h);
  if (strcmp(h, hex) != 0) {
    fprintf(stderr, "sha256 of %zu bytes: %s, want %s\n", n, h, hex);
    failures++;
  }
}

int main(void) {
  expect_buf("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  expect_buf("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *m2 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  expect_buf(m2, strlen(m2), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  /* one million 'a' (FIPS 180-2 appendix B.3), also streamed in odd pieces and from a file */
  size_t n = 1000000;
  char *a = malloc(n);
  memset(a, 'a', n);
  const char *want = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  expect_buf(a, n, want);
  struct cm_sha256 h = {0};
  uint8_t d[CM_SHA256_BYTES];
  char hex[CM_SHA256_HEX];
  CHECK(cm_sha256_init(&h) == 0);
  for (size_t at = 0; at < n;) {
    size_t k = n - at < 777 ? n - at : 777;
    CHECK(cm_sha256_update(&h, a + at, k) == 0);
    at += k;
  }
  CHECK(cm_sha256_final(&h, d) == 0);
  cm_sha256_fini(&h);
  cm_sha256_hex(d, hex);
  CHECK(strcmp(hex, want) == 0);
  /* a copy finishes the digest of what was seen so far while the original goes on: "abc" then
   * "abc" + m2 from one stream */
  struct cm_sha256 s = {0}, c = {0};
  CHECK(cm_sha256_init(&s) == 0 && cm_sha256_update(&s, "abc", 3) == 0);
  CHECK(cm_sha256_copy(&c, &s) == 0 && cm_sha256_final(&c, d) == 0);
  cm_sha256_hex(d, hex);
  CHECK(strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
  CHECK(cm_sha256_update(&s, m2, strlen(m2)) == 0 && cm_sha256_copy(&c, &s) == 0);
  CHECK(cm_sha256_final(&c, d) == 0);
  uint8_t d3[CM_SHA256_BYTES];
  char *cat = malloc(3 + strlen(m2));
  memcpy(cat, "abc", 3);
  memcpy(cat + 3, m2, strlen(m2));
  CHECK(cm_sha256_buf(cat, 3 + strlen(m2), d3) == 0 && memcmp(d, d3, sizeof d) == 0);
  free(cat);
  cm_sha256_fini(&c);
  cm_sha256_fini(&s);

  char path[] = "/tmp/s1-sha-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  /* 2.5 MiB of 'a' crosses two read blocks: compare against the streamed buffer digest */
  size_t big = (5u << 20) / 2;
  char *b = malloc(big);
  memset(b, 'a', big);
  CHECK(write(fd, b, big) == (ssize_t)big);
  close(fd);
  uint8_t d1[CM_SHA256_BYTES], d2[CM_SHA256_BYTES];
  uint64_t size = 0;
  struct cm_diag diag = {0};
  CHECK(cm_sha256_file(path, d1, &size, &diag) == 0 && size == big);
  CHECK(cm_sha256_buf(b, big, d2) == 0 && memcmp(d1, d2, sizeof d1) == 0);
  unlink(path);
  CHECK(cm_sha256_file(path, d1, &size, &diag) < 0);
  CHECK(diag.msg && strstr(diag.msg, "cannot open: No such file or directory") != NULL);
  cm_diag_fini(&diag);
  free(a);
  free(b);
  if (failures)
    fprintf(stderr, "%d failures\n", failures);
  return failures ? 1 : 0;
}
