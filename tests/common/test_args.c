/* Unit test of cm_args_bytes: digits with an optional K/M/G suffix, nothing else, at most 2^50. */
#include "cm_args.h"

#include <errno.h>
#include <stdio.h>

static int failures;
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static size_t bytes(const char *s) {
  size_t v = 12345;
  CHECK(cm_args_bytes(s, &v) == 0);
  return v;
}

int main(void) {
  CHECK(bytes("0") == 0);
  CHECK(bytes("0K") == 0);
  CHECK(bytes("4096") == 4096);
  CHECK(bytes("1k") == 1024 && bytes("1K") == 1024);
  CHECK(bytes("256M") == (size_t)256 << 20);
  CHECK(bytes("2G") == (size_t)2 << 30);
  CHECK(bytes("1048576G") == (size_t)1 << 50);
  const char *bad[] = {"",   "-1",  "+1",  " 1",   "1 ",  "1Q",   "1KB", "K",
                       "1m", "0x10", "1.5G", "1048577G", "1125899906842625", "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    size_t v = 7;
    int rc = cm_args_bytes(bad[i], &v);
    if (rc != -EINVAL || v != 7) {
      fprintf(stderr, "\"%s\": rc %d, value %zu (want -EINVAL, unchanged)\n", bad[i], rc, v);
      failures++;
    }
  }
  CHECK(cm_args_bytes(NULL, &(size_t){0}) == -EINVAL);
  printf("cm_args: %d failures\n", failures);
  return failures != 0;
}
