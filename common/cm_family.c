/* The family table (see cm_family.h). Adding a family: one line here, its folder and table line in
 * each process (preprocessor/families/<name>/, executor/heads/<name>/) and in the offline tools. */
#include "cm_family.h"

#include <stdio.h>
#include <string.h>

#include "cm_model_dir.h"

const struct cm_family cm_families[] = {
    {.name = "qwen3_5", .served = false, .max_body_bytes = 0},
    {.name = "open_jev", .served = true, .max_body_bytes = CM_LIMIT_MAX_BODY_OPEN_JEV},
    {.name = "omnijev", .served = true, .max_body_bytes = CM_LIMIT_MAX_BODY_OMNIJEV},
    {.name = "jemm", .served = true, .max_body_bytes = CM_LIMIT_MAX_BODY_JEMM},
};
const size_t cm_n_families = sizeof cm_families / sizeof *cm_families;

const struct cm_family *cm_family_find(const char *name) {
  for (size_t i = 0; name && i < cm_n_families; i++)
    if (strcmp(cm_families[i].name, name) == 0)
      return &cm_families[i];
  return NULL;
}

char *cm_family_list(bool served_only, const char *sep, char *buf, size_t n) {
  size_t at = 0;
  if (n)
    buf[0] = '\0';
  for (size_t i = 0; i < cm_n_families && at < n; i++) {
    if (served_only && !cm_families[i].served)
      continue;
    int w = snprintf(buf + at, n - at, "%s%s", at ? sep : "", cm_families[i].name);
    if (w < 0)
      break;
    at += (size_t)w;
  }
  return buf;
}
