/* Test helper: opens a model directory with cm_model_dir_open and prints "ok <family> <tensors>"
 * or the one diagnostic line (exit 1), so scripts can assert the exact message. With --counts it
 * adds a second line "hashed N cached M": files hashed by this open and files the verified-file
 * cache vouched for. With --compile it opens as a preprocessor does (cm_model_dir_open_for
 * CM_MODEL_DIR_COMPILE) and prints "ok <family> compile". */
#include <stdio.h>
#include <string.h>

#include "cm_model_dir.h"

int main(int argc, char **argv) {
  bool counts = false, compile = false;
  int i = 1;
  for (; i < argc - 1; i++) {
    if (strcmp(argv[i], "--counts") == 0)
      counts = true;
    else if (strcmp(argv[i], "--compile") == 0)
      compile = true;
    else
      break;
  }
  if (i != argc - 1) {
    fprintf(stderr, "usage: io-open-dir [--counts] [--compile] DIR\n");
    return 2;
  }
  struct cm_model_dir *md = NULL;
  struct cm_diag d = {0};
  int rc = cm_model_dir_open_for(argv[i], compile ? CM_MODEL_DIR_COMPILE : CM_MODEL_DIR_SERVE,
                                 &md, &d);
  if (rc) {
    printf("error %d: %s\n", rc, d.msg ? d.msg : cm_strerror(rc));
    cm_diag_fini(&d);
    return 1;
  }
  if (compile)
    printf("ok %s compile%s\n", md->family,
           md->weights || md->adapter || md->f32_rows_file ? " (weights opened!)" : "");
  else
    printf("ok %s %zu%s%s\n", md->family, cm_safetensors_count(md->weights),
           md->vision ? " vision" : "", md->adapter ? " adapter" : "");
  if (counts)
    printf("hashed %d cached %d\n", md->n_files_hashed, md->n_files_cached);
  cm_model_dir_free(md);
  return 0;
}
