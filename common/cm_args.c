/* Command-line values (cm_args.h). */
#include "cm_args.h"

#include <errno.h>
#include <stdlib.h>

int cm_args_bytes(const char *s, size_t *ret_bytes) {
  if (!s || *s < '0' || *s > '9')
    return -EINVAL; /* strtoull alone would take a sign or leading space */
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  int shift = 0;
  if (*end) {
    if (end[1])
      return -EINVAL;
    shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : -1;
  }
  if (errno || shift < 0 || v > (1ull << 50) >> shift)
    return -EINVAL;
  *ret_bytes = (size_t)(v << shift);
  return 0;
}
