/* The Open-Jev part of s1-export (see open_jev_export.c): the package reader and the hook that
 * s1-export's main calls for --family open_jev. */
#ifndef S1_OPEN_JEV_EXPORT_H
#define S1_OPEN_JEV_EXPORT_H

#include "cm_sha256.h"

/* Runs `s1-export --family open_jev ...` (options in its usage text); qwen_main is s1-export's
 * own main, called once for the backbone with a --family qwen3_5 argument vector.
 * Returns the process exit status: 0, 1 (failure, printed on stderr), 2 (bad usage). */
int ex_export_open_jev_main(int argc, char **argv, int (*qwen_main)(int, char **));

/* The upstream checkpoint_sha256 of a package directory: SHA-256 over every regular file under
 * `dir` in Python Path order (component-wise), each as its relative path in UTF-8, a NUL byte,
 * then its bytes. Shapes: ret_hex gets 64 hex digits + NUL.
 * Returns 0, -1 (message printed) or -ENOMEM. Source: upstream jev/serving.py at b9e6bdc5. */
int ex_open_jev_checkpoint_sha256(const char *dir, char ret_hex[CM_SHA256_HEX]);

#endif
