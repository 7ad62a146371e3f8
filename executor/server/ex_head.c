/* The executor's family table (one line per family of cm_family.h, with its head kinds from
 * executor/heads/<family>/), the lookups over it, and the heads-file opening the heads share. */
#include "ex_head.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

extern const struct ex_head_kind ex_head_open_jev; /* heads/open_jev/ */
extern const struct ex_head_kind ex_head_omnijev;  /* heads/omnijev/ */

static const struct ex_family families[] = {
    {.name = "qwen3_5", .heads = {NULL}}, /* the bare backbone: HIDDEN / logits readouts only */
    {.name = "open_jev", .heads = {&ex_head_open_jev}},
    {.name = "omnijev", .heads = {&ex_head_omnijev}},
    {.name = "jemm", .heads = {NULL}}, /* LABEL_LOGITS readouts: no head */
};
#define N_FAMILIES (sizeof families / sizeof *families)

static const struct ex_head_kind *kinds[N_FAMILIES * EX_FAMILY_MAX_HEADS + 1]; /* NULL-ended */
static pthread_once_t kinds_once = PTHREAD_ONCE_INIT;

static void kinds_init(void) {
  size_t n = 0;
  for (size_t i = 0; i < N_FAMILIES; i++)
    for (size_t j = 0; families[i].heads[j]; j++)
      kinds[n++] = families[i].heads[j];
}

const struct ex_family *ex_family_find(const char *name) {
  for (size_t i = 0; name && i < N_FAMILIES; i++)
    if (strcmp(families[i].name, name) == 0)
      return &families[i];
  return NULL;
}

const struct ex_family *ex_families(size_t *ret_n) {
  *ret_n = N_FAMILIES;
  return families;
}

const struct ex_head_kind *ex_head_find(const char *name) {
  const struct ex_head_kind *const *k = ex_head_kinds();
  for (size_t i = 0; name && k[i]; i++)
    if (strcmp(k[i]->name, name) == 0)
      return k[i];
  return NULL;
}

const struct ex_head_kind *const *ex_head_kinds(void) {
  pthread_once(&kinds_once, kinds_init);
  return kinds;
}

int ex_head_file_open(const struct cm_model_dir *dir, struct cm_safetensors **ret_st,
                      char **ret_path, struct cm_diag *diag) {
  size_t n = strlen(dir->path) + sizeof EX_HEAD_FILE + 1;
  char *path = malloc(n);
  if (!path)
    return -ENOMEM;
  snprintf(path, n, "%s/%s", dir->path, EX_HEAD_FILE);
  struct stat sb;
  struct cm_safetensors *st = NULL;
  int rc = stat(path, &sb) != 0 ? -ENOENT : cm_safetensors_open(path, &st, diag);
  if (rc) {
    free(path);
    return rc;
  }
  *ret_st = st;
  *ret_path = path;
  return 0;
}
