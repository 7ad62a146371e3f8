/* The version every s1serve binary prints with --version: the project version and the git revision
 * it was built from (meson's vcs_tag, "unknown" outside a git checkout). */
#ifndef S1_CM_VERSION_H
#define S1_CM_VERSION_H

#include <stdbool.h>

/* "0.1.0 (git 1a2b3c4d5e6f)", static. */
const char *cm_version(void);

/* True when argv[1..argc-1] holds "--version" (before any "--"): then "<program> <cm_version()>"
 * has been printed on stdout and the caller returns 0. */
bool cm_version_requested(int argc, char **argv, const char *program);

#endif
