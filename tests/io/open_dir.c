/* Test helper: opens a model directory with cm_model_dir_open and prints "ok <family> <tensors>"
 * or the one diagnostic line (exit 1), so scripts can assert the exact message. */
#include <stdio.h>

#include "cm_model_dir.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: io-open-dir DIR\n");
    return 2;
  }
  struct cm_model_dir *md = NULL;
  struct cm_diag d = {0};
  int rc = cm_model_dir_open(argv[1], &md, &d);
  if (rc) {
    printf("error %d: %s\n", rc, d.msg ? d.msg : cm_strerror(rc));
    cm_diag_fini(&d);
    return 1;
  }
  printf("ok %s %zu%s%s\n", md->family, cm_safetensors_count(md->weights),
         md->vision ? " vision" : "", md->adapter ? " adapter" : "");
  cm_model_dir_free(md);
  return 0;
}
