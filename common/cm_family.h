/* The model families s1serve knows: the one table every process and tool takes family names from
 * (the manifest's "family" value). Each process keeps its own table of what it runs for a family
 * (preprocessor/pp_family.c, executor/server/ex_head.c), keyed by these names; the test
 * family_tables checks that the three agree. It leaves out everything a family computes. */
#ifndef S1_CM_FAMILY_H
#define S1_CM_FAMILY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cm_family {
  const char *name;        /* manifest "family", e.g. "open_jev" */
  bool served;             /* requests are answered: a preprocessor family exists; false for the
                              bare backbone ("qwen3_5": s1-forward, the executor's own tests) */
  uint64_t max_body_bytes; /* request body limit when manifest limits.max_body_bytes is absent,
                              bytes: its reference's (0 when not served) */
};

/* The families, in registration order. */
extern const struct cm_family cm_families[];
extern const size_t cm_n_families;

/* The family named `name` (NULL accepted), or NULL. */
const struct cm_family *cm_family_find(const char *name);

/* Writes the served (served_only) or all family names, joined by `sep`, into buf[n] (always
 * NUL-terminated, truncated to fit); for usage lines and messages. Returns buf. */
char *cm_family_list(bool served_only, const char *sep, char *buf, size_t n);

#endif
