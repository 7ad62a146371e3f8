/* Helpers shared by the image tests: a CHECK that counts failures, whole-file reads, SHA-256 in
 * hex, and synth(), the C twin of `synth()` in tests/oracle/image_fixtures.py (the oracle feeds
 * the same pixels to transformers; the two must stay identical). */
#ifndef S1_TESTS_IMAGE_TEST_H
#define S1_TESTS_IMAGE_TEST_H

#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

/* Reads a whole file (malloc'd, NUL-terminated); NULL on failure. */
static inline uint8_t *test_read(const char *path, size_t *ret_n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  if (b) {
    b[n] = 0;
    *ret_n = (size_t)n;
  }
  return b;
}

/* SHA-256 of p[0..n) as 64 lowercase hex digits into hex[65]. */
static inline void test_sha256(const void *p, size_t n, char hex[65]) {
  unsigned char md[32];
  unsigned int len = 0;
  EVP_Digest(p, n, md, &len, EVP_sha256(), NULL);
  for (int i = 0; i < 32; i++)
    snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

/* uint8 [h][w][3]. kind 0: noise; 1: sawtooth ramps + 5 bits of noise; 2: smooth + 2 bits.
 * All arithmetic is uint32 with wrap-around, as numpy's uint32 arrays do it. */
static inline uint8_t *synth(uint32_t h, uint32_t w, uint32_t seed, int kind) {
  uint8_t *a = malloc((size_t)h * w * 3);
  if (!a)
    return NULL;
  uint32_t s = seed * 0x9E3779B9u;
  uint32_t dw = w > 1 ? w - 1 : 1, dh = h > 1 ? h - 1 : 1;
  for (uint32_t y = 0; y < h; y++)
    for (uint32_t x = 0; x < w; x++)
      for (uint32_t c = 0; c < 3; c++) {
        uint32_t n = ((y * w + x) * 3u + c + s) * 2654435761u;
        n ^= n >> 15;
        n *= 2246822519u;
        n ^= n >> 13;
        uint32_t noise = n >> 24, v;
        if (kind == 0)
          v = noise;
        else if (kind == 1)
          v = x * 7u + y * 5u + c * 85u + (noise & 31u);
        else
          v = (x * 255u) / dw + (y * 128u) / dh + c * 60u + (noise & 3u);
        a[((size_t)y * w + x) * 3 + c] = (uint8_t)(v & 255u);
      }
  return a;
}

#endif
