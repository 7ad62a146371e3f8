/* The family registry: a static table; families/<name>.c files join it at build time (meson
 * defines PP_FAMILY_<NAME> when the file exists). */
#include "pp_family.h"

#include <string.h>

#ifdef PP_FAMILY_OPEN_JEV
extern const struct pp_family pp_family_open_jev;
#endif
#ifdef PP_FAMILY_OMNIJEV
extern const struct pp_family pp_family_omnijev;
#endif
#ifdef PP_FAMILY_JEMM
extern const struct pp_family pp_family_jemm;
#endif

static const struct pp_family *const families[] = {
#ifdef PP_FAMILY_OPEN_JEV
    &pp_family_open_jev,
#endif
#ifdef PP_FAMILY_OMNIJEV
    &pp_family_omnijev,
#endif
#ifdef PP_FAMILY_JEMM
    &pp_family_jemm,
#endif
    NULL,
};

static const char *const names[] = {
#ifdef PP_FAMILY_OPEN_JEV
    "open_jev",
#endif
#ifdef PP_FAMILY_OMNIJEV
    "omnijev",
#endif
#ifdef PP_FAMILY_JEMM
    "jemm",
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
