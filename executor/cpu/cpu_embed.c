/* Embedding gather (see cpu_embed.h). */
#include "cpu_embed.h"

#include <errno.h>
#include <string.h>

int ex_cpu_embed(const float *table, size_t vocab, const int32_t *ids, float *out, size_t n,
                 size_t d) {
  for (size_t t = 0; t < n; t++) {
    if (ids[t] < 0 || (size_t)ids[t] >= vocab)
      return -EINVAL;
    memcpy(out + t * d, table + (size_t)ids[t] * d, d * sizeof(float));
  }
  return 0;
}
