/* The static documents of s1-frontend (see fe_static.h): compiled-in content with its headers.
 * Leaves out everything a file server does (directories, ranges, ETags): two fixed documents. */
#include "fe_static.h"

const struct fe_asset fe_static_page_asset = {"text/html; charset=utf-8", fe_static_page_csp,
                                              &fe_static_page};
const struct fe_asset fe_static_openapi_asset = {"application/json", NULL, &fe_static_openapi};
