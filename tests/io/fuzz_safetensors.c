/* libFuzzer target: the safetensors header parser and layout checks on arbitrary file images.
 * Any input must give 0 or a negative code with a message, never a crash, leak or overread. */
#include "cm_safetensors.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  struct cm_diag d = {0};
  size_t n = 0;
  int rc = cm_safetensors_validate("fuzz", data, size, &n, &d);
  if (rc != 0 && d.msg == NULL && rc != -12 /* ENOMEM */)
    abort(); /* every refusal must say why */
  cm_diag_fini(&d);
  return 0;
}
