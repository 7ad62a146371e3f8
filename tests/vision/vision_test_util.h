/* Helpers shared by the vision tests: a CHECK that counts failures, fixture file reading, the
 * deterministic pixel generator of tests/oracle/vision_fixtures.py, and the error metric.
 * Test-only; nothing here is linked into the executor. */
#ifndef S1_TESTS_VISION_UTIL_H
#define S1_TESTS_VISION_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_fail;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      g_fail++;                                                                                    \
    }                                                                                              \
  } while (0)

/* Reads exactly n float32 (little-endian host assumed) from path into a new buffer, or NULL. */
static inline float *read_f32(const char *path, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  float *buf = malloc(n * sizeof(float) + 1);
  size_t got = buf ? fread(buf, sizeof(float), n, f) : 0;
  int extra = fgetc(f);
  fclose(f);
  if (!buf || got != n || extra != EOF) {
    free(buf);
    return NULL;
  }
  return buf;
}

static inline uint32_t fmix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}

/* The fixture pixels: element i of [n_rows, dim] is ((fmix32(i·0x9E3779B9 + seed) >> 24) − 128)/128. */
static inline void gen_pixels(uint32_t seed, size_t n_rows, size_t dim, float *out) {
  for (size_t i = 0; i < n_rows * dim; i++) {
    uint32_t h = fmix32((uint32_t)i * 0x9E3779B9u + seed);
    out[i] = (float)((int)(h >> 24) - 128) / 128.0f;
  }
}

/* max|a − b| / max|b| (b is the reference). */
static inline double rel_err(const float *a, const float *b, size_t n) {
  double md = 0.0, mb = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (d > md || d != d)
      md = d != d ? INFINITY : d;
    if (fabs((double)b[i]) > mb)
      mb = fabs((double)b[i]);
  }
  return mb > 0.0 ? md / mb : md;
}

#endif
