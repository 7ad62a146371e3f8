/* Unit test of the diagnostic helpers: first error wins, messages are formatted, codes map to text. */
#include "cm_error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int failures;
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

int main(void) {
  struct cm_diag d = {0};
  CHECK(cm_diag_set(&d, -CM_ESHAPE, "tensor %s: [%d] != [%d]", "w", 3, 4) == -CM_ESHAPE);
  CHECK(d.code == -CM_ESHAPE);
  CHECK(d.msg && strcmp(d.msg, "tensor w: [3] != [4]") == 0);
  CHECK(cm_diag_set(&d, -CM_EHASH, "later") == -CM_EHASH);
  CHECK(d.code == -CM_ESHAPE && strcmp(d.msg, "tensor w: [3] != [4]") == 0);
  cm_diag_fini(&d);
  CHECK(d.code == 0 && d.msg == NULL);
  cm_diag_fini(NULL);
  CHECK(cm_diag_set(NULL, -EINVAL, "x") == -EINVAL);
  CHECK(strcmp(cm_strerror(-CM_EUTF8), "invalid UTF-8") == 0);
  CHECK(strcmp(cm_strerror(-ENOENT), strerror(ENOENT)) == 0);
  CHECK(strcmp(cm_strerror(0), "success") == 0);
  return failures ? 1 : 0;
}
