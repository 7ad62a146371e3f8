/* The family tables agree: every family the model directory accepts (common/cm_family.c) has an
 * executor entry (executor/server/ex_head.c), a served one a preprocessor entry
 * (preprocessor/pp_family.c) and no other family has one; the head kinds a preprocessor family's
 * programs name are exactly its executor family's; s1-export's and s1-mkmodel's tables (read from
 * the family list their refusal of an unknown --family prints) name the same families in the
 * same order. The comparison is first run on lists that differ, so that it is shown to fail.
 * Usage: test_family_tables S1_EXPORT S1_MKMODEL */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_family.h"
#include "ex_head.h"
#include "pp_family.h"

#define MAX_NAMES 32

static int fails;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      fails++;                                                                                     \
    }                                                                                              \
  } while (0)

/* Differences between two name lists a[na] and b[nb] (order counts), each printed when `print`.
 * Returns how many. */
static int diff_names(const char *what, const char *const *a, size_t na, const char *const *b,
                      size_t nb, bool print) {
  int n = 0;
  for (size_t i = 0; i < na || i < nb; i++) {
    const char *x = i < na ? a[i] : "(none)", *y = i < nb ? b[i] : "(none)";
    if (strcmp(x, y) != 0) {
      if (print)
        fprintf(stderr, "FAIL %s: entry %zu is \"%s\" in common/cm_family.c, \"%s\" here\n", what,
                i, x, y);
      n++;
    }
  }
  return n;
}

/* Splits a "a, b, c" list (from `start`, up to `end` or the string's end) into names[] pointing
 * into buf. Returns the count. */
static size_t split_list(char *start, const char *end, const char **names) {
  size_t n = 0;
  if (end)
    start[strcspn(start, end)] = '\0';
  for (char *t = strtok(start, ", \n"); t && n < MAX_NAMES; t = strtok(NULL, ", \n"))
    names[n++] = t;
  return n;
}

/* Runs `cmd` (stderr to stdout) and keeps its output in buf[n]. Returns its exit status. */
static int run(const char *cmd, char *buf, size_t n) {
  FILE *p = popen(cmd, "r");
  if (!p)
    return -1;
  size_t k = fread(buf, 1, n - 1, p);
  buf[k] = '\0';
  return pclose(p);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s S1_EXPORT S1_MKMODEL\n", argv[0]);
    return 2;
  }
  /* the comparison finds a reordering, a missing and an extra name */
  static const char *const x[] = {"a", "b", "c"}, *const y[] = {"a", "c", "b", "d"};
  CHECK(diff_names("self-test", x, 3, y, 4, false) == 3 &&
            diff_names("self-test", x, 3, x, 3, false) == 0,
        "the name comparison does not see differences");

  const char *common[MAX_NAMES], *served[MAX_NAMES];
  size_t n_common = 0, n_served = 0;
  for (size_t i = 0; i < cm_n_families && n_common < MAX_NAMES; i++) {
    common[n_common++] = cm_families[i].name;
    if (cm_families[i].served)
      served[n_served++] = cm_families[i].name;
    CHECK(cm_family_find(cm_families[i].name) == &cm_families[i], "%s: listed twice",
          cm_families[i].name);
    CHECK(!cm_families[i].served || cm_families[i].max_body_bytes > 0,
          "%s: served without a body limit", cm_families[i].name);
  }
  CHECK(n_served > 0, "no served family");

  /* the preprocessor: exactly the served families, in the common order */
  const char *pp[MAX_NAMES];
  size_t n_pp = 0;
  for (const struct pp_family *const *f = pp_families(); *f && n_pp < MAX_NAMES; f++)
    pp[n_pp++] = (*f)->name;
  fails +=
      diff_names("preprocessor/pp_family.c (served families)", served, n_served, pp, n_pp, true);

  /* the executor: every family */
  size_t n_ex_fam = 0;
  const struct ex_family *ex = ex_families(&n_ex_fam);
  const char *exn[MAX_NAMES];
  for (size_t i = 0; i < n_ex_fam && i < MAX_NAMES; i++)
    exn[i] = ex[i].name;
  fails += diff_names("executor/server/ex_head.c", common, n_common, exn, n_ex_fam, true);

  /* head kinds: the preprocessor family's programs name exactly its executor family's heads */
  size_t n_kinds_total = 0;
  for (const struct ex_head_kind *const *k = ex_head_kinds(); *k; k++)
    n_kinds_total++;
  size_t n_kinds_listed = 0;
  for (size_t i = 0; i < n_ex_fam; i++) {
    const struct pp_family *pf = pp_family_find(ex[i].name);
    const char *want[MAX_NAMES], *have[MAX_NAMES];
    size_t nw = 0, nh = 0;
    for (size_t j = 0; ex[i].heads[j]; j++, n_kinds_listed++) {
      have[nh++] = ex[i].heads[j]->name;
      CHECK(ex_head_find(ex[i].heads[j]->name) == ex[i].heads[j], "head %s: found elsewhere",
            ex[i].heads[j]->name);
    }
    for (size_t j = 0; pf && pf->heads[j]; j++)
      want[nw++] = pf->heads[j];
    if (diff_names(ex[i].name, want, nw, have, nh, false)) {
      CHECK(0, "%s: the preprocessor names %zu head kinds, the executor has %zu (or other names)",
            ex[i].name, nw, nh);
    }
    for (size_t j = 0; pf && pf->question_types[j]; j++)
      CHECK(!strcmp(pf->question_types[j], "noul") || !strcmp(pf->question_types[j], "choice") ||
                !strcmp(pf->question_types[j], "score"),
            "%s: question type %s", pf->name, pf->question_types[j]);
    CHECK(!pf || pf->question_types[0], "%s: no question types", ex[i].name);
  }
  CHECK(n_kinds_total == n_kinds_listed, "ex_head_kinds has %zu kinds, the families %zu",
        n_kinds_total, n_kinds_listed);

  /* the offline tools: the lists their refusals print */
  char cmd[4096], out[4096];
  const char *names[MAX_NAMES];
  snprintf(cmd, sizeof cmd,
           "'%s' --family no_such_family --base /nonexistent --out /nonexistent "
           "2>&1",
           argv[1]);
  int rc = run(cmd, out, sizeof out);
  char *l = strstr(out, "is not supported (");
  CHECK(rc != 0 && l, "s1-export: no family list in \"%s\"", out);
  if (l)
    fails += diff_names("s1-export", common, n_common, names,
                        split_list(l + strlen("is not supported ("), ")", names), true);
  snprintf(cmd, sizeof cmd,
           "'%s' --shape tiny --tokenizer /nonexistent --s1-out /nonexistent "
           "--family no_such_family 2>&1",
           argv[2]);
  rc = run(cmd, out, sizeof out);
  l = strstr(out, "--family must be one of ");
  CHECK(rc != 0 && l, "s1-mkmodel: no family list in \"%s\"", out);
  if (l)
    fails += diff_names("s1-mkmodel", common, n_common, names,
                        split_list(l + strlen("--family must be one of "), ";", names), true);

  printf("family_tables: %zu families (%zu served), %zu head kinds: %s\n", n_common, n_served,
         n_kinds_total, fails ? "MISMATCH" : "agree");
  return fails ? 1 : 0;
}
