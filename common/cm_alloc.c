/* cm_alloc.h: glibc malloc tuned so the request path's large buffers are reused. */
#include "cm_alloc.h"

#include <errno.h>
#include <malloc.h>

int cm_alloc_keep_large(void) {
  int ok = mallopt(M_MMAP_THRESHOLD, CM_ALLOC_MMAP_MAX_BYTES);
  ok &= mallopt(M_TRIM_THRESHOLD, CM_ALLOC_KEEP_BYTES);
  ok &= mallopt(M_TOP_PAD, CM_ALLOC_TOP_PAD_BYTES);
  return ok == 1 ? 0 : -ENOTSUP;
}
