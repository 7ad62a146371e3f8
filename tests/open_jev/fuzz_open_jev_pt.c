/* libFuzzer target: the torch .pt reader (untrusted zip + pickle bytes) must fail cleanly. */
#include <stddef.h>
#include <stdint.h>

#include "open_jev_pt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct ex_pt_state st = {0};
  struct cm_diag d = {0};
  if (ex_pt_read(data, size, &st, &d) == 0)
    ex_pt_state_fini(&st);
  cm_diag_fini(&d);
  return 0;
}
