/* Small helpers shared by the s1-export family exporters: the one error-print convention of the
 * tool and path joining. Process-level code only (s1-export's own sources). */
#ifndef S1_EX_EXPORT_UTIL_H
#define S1_EX_EXPORT_UTIL_H

/* Prints "s1-export: <message>\n" to stderr. Returns -1, so callers write `return ex_export_fail(..)`. */
int ex_export_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "dir/name" as a new heap string (caller frees), or NULL when out of memory. */
char *ex_export_path_join(const char *dir, const char *name);

#endif
