/* The head registry: a static table; executor/heads/ex_head_<name>.c files join at build time
 * (meson defines EX_HEAD_<NAME> when the file exists). */
#include "ex_head.h"

#include <string.h>

#ifdef EX_HEAD_OPEN_JEV
extern const struct ex_head_kind ex_head_open_jev;
#endif
#ifdef EX_HEAD_OMNIJEV
extern const struct ex_head_kind ex_head_omnijev;
#endif

static const struct ex_head_kind *const kinds[] = {
#ifdef EX_HEAD_OPEN_JEV
    &ex_head_open_jev,
#endif
#ifdef EX_HEAD_OMNIJEV
    &ex_head_omnijev,
#endif
    NULL,
};

const struct ex_head_kind *ex_head_find(const char *name) {
  for (size_t i = 0; name && kinds[i]; i++)
    if (strcmp(kinds[i]->name, name) == 0)
      return kinds[i];
  return NULL;
}

const struct ex_head_kind *const *ex_head_kinds(void) {
  return kinds;
}
