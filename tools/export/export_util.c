/* Shared helpers of the s1-export sources (see export_util.h). */
#include "export_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ex_export_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("s1-export: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return -1;
}

char *ex_export_path_join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  if (p)
    snprintf(p, n, "%s/%s", dir, name);
  return p;
}
