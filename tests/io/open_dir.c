/* Test helper: opens a model directory with cm_model_dir_open and prints "ok <family> <tensors>"
 * or the one diagnostic line (exit 1), so scripts can assert the exact message. With --counts it
 * adds a second line "hashed N cached M": files hashed by this open and files the verified-file
 * cache vouched for. */
#include <stdio.h>
#include <string.h>

#include "cm_model_dir.h"

int main(int argc, char **argv) {
  bool counts = argc == 3 && strcmp(argv[1], "--counts") == 0;
  if (argc != 2 && !counts) {
    fprintf(stderr, "usage: io-open-dir [--counts] DIR\n");
    return 2;
  }
  struct cm_model_dir *md = NULL;
  struct cm_diag d = {0};
  int rc = cm_model_dir_open(argv[argc - 1], &md, &d);
  if (rc) {
    printf("error %d: %s\n", rc, d.msg ? d.msg : cm_strerror(rc));
    cm_diag_fini(&d);
    return 1;
  }
  printf("ok %s %zu%s%s\n", md->family, cm_safetensors_count(md->weights),
         md->vision ? " vision" : "", md->adapter ? " adapter" : "");
  if (counts)
    printf("hashed %d cached %d\n", md->n_files_hashed, md->n_files_cached);
  cm_model_dir_free(md);
  return 0;
}
