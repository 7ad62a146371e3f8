/* The family registry: a static table; families/<name>.c files join it at build time (meson
 * defines PP_FAMILY_<NAME> when the file exists). */
#include "pp_family.h"

#include <string.h>

#ifdef PP_FAMILY_OPEN_JEV
extern const struct pp_family pp_family_open_jev;
#endif

static const struct pp_family *const families[] = {
#ifdef PP_FAMILY_OPEN_JEV
    &pp_family_open_jev,
#endif
    NULL,
};

static const char *const names[] = {
#ifdef PP_FAMILY_OPEN_JEV
    "open_jev",
#endif
    NULL,
};

const struct pp_family *pp_family_find(const char *name) {
  for (size_t i = 0; name && families[i]; i++)
    if (strcmp(families[i]->name, name) == 0)
      return families[i];
  return NULL;
}

const char *const *pp_family_names(void) {
  return names;
}
