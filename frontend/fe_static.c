/* The static routes of s1-frontend (see fe_static.h): a table from path to compiled-in content.
 * Leaves out everything a file server does (directories, ranges, ETags): two fixed documents. */
#include "fe_static.h"

#include <string.h>

static const struct fe_asset assets[] = {
    {"/", "text/html; charset=utf-8", fe_static_page_csp, &fe_static_page},
    {"/openapi.json", "application/json", NULL, &fe_static_openapi},
};

const struct fe_asset *fe_static_find(const char *path, size_t n) {
  for (size_t i = 0; i < sizeof assets / sizeof *assets; i++)
    if (strlen(assets[i].path) == n && memcmp(assets[i].path, path, n) == 0)
      return &assets[i];
  return NULL;
}
