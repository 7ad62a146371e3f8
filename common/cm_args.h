/* Command-line values shared by the binaries: byte counts with a binary suffix. Pure functions
 * (no output: the caller names the option in its message). */
#ifndef S1_CM_ARGS_H
#define S1_CM_ARGS_H

#include <stddef.h>

/* A byte count: decimal digits, optionally one suffix K, M or G (×2^10, 2^20, 2^30; k = K), at
 * most 2^50 bytes; 0 allowed. No sign, space or other character.
 * Returns 0 with *ret_bytes, or -EINVAL (then *ret_bytes is unchanged). */
int cm_args_bytes(const char *s, size_t *ret_bytes);

#endif
