/* libFuzzer target: the strict JSON check and json-c parse on arbitrary bytes. Whatever the check
 * accepts, json-c must parse too. */
#include <stdint.h>
#include <stdlib.h>

#include "pp_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct cm_diag d = {0};
  json_object *root = NULL;
  int ck = pp_json_check((const char *)data, size, &d);
  cm_diag_fini(&d);
  int r = pp_json_parse((const char *)data, size, &root, &d);
  cm_diag_fini(&d);
  if (ck == 0 && r != 0)
    abort();
  json_object_put(root);
  return 0;
}
