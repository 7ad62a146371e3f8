/* Program records (ex_record.h). */
#include "ex_record.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int write_file(const char *path, const void *data, size_t n, struct cm_diag *diag) {
  size_t lp = strlen(path) + 8;
  char *tmp = malloc(lp);
  if (!tmp)
    return -ENOMEM;
  snprintf(tmp, lp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  int r = 0;
  if (!f) {
    r = cm_diag_set(diag, -errno, "%s: cannot create", tmp);
  } else {
    bool write_failed = n && fwrite(data, 1, n, f) != n;
    bool close_failed = fclose(f) != 0; /* always closed, even after a failed write */
    if (write_failed || close_failed)
      r = cm_diag_set(diag, -EIO, "%s: write failed", tmp);
    else if (rename(tmp, path) != 0)
      r = cm_diag_set(diag, -errno, "%s: rename failed", path);
  }
  if (r)
    remove(tmp);
  free(tmp);
  return r;
}

static char *record_path(const char *dir, uint64_t seq, const char *what) {
  size_t n = strlen(dir) + 48;
  char *p = malloc(n);
  if (p)
    snprintf(p, n, "%s/%08llu.%s.msgpack", dir, (unsigned long long)seq, what);
  return p;
}

int ex_record_write(const char *dir, uint64_t seq, const void *program, size_t n_program,
                    const void *result, size_t n_result, struct cm_diag *diag) {
  char *pp = record_path(dir, seq, "program"), *rp = record_path(dir, seq, "result");
  int r = pp && rp ? 0 : -ENOMEM;
  /* the result file is written last: its presence marks a complete record */
  if (!r)
    r = write_file(pp, program, n_program, diag);
  if (!r)
    r = write_file(rp, result, n_result, diag);
  free(pp);
  free(rp);
  return r;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* A record's result file name: the canonical zero-padded number (at least 8 digits, as
 * record_path writes it) then ".result.msgpack"; anything else in the directory is not a record. */
static bool record_name(const char *name, uint64_t *ret_seq) {
  size_t d = 0;
  while (name[d] >= '0' && name[d] <= '9')
    d++;
  if (d < 8 || d > 20 || strcmp(name + d, ".result.msgpack") != 0)
    return false;
  errno = 0;
  unsigned long long s = strtoull(name, NULL, 10);
  char canon[32];
  snprintf(canon, sizeof canon, "%08llu", s);
  if (errno || strlen(canon) != d || strncmp(canon, name, d) != 0)
    return false;
  *ret_seq = s;
  return true;
}

int ex_record_list(const char *dir, uint64_t **ret_seqs, size_t *ret_n, struct cm_diag *diag) {
  DIR *d = opendir(dir);
  if (!d)
    return cm_diag_set(diag, -errno, "%s: cannot open record directory", dir);
  uint64_t *seqs = NULL;
  size_t n = 0, cap = 0;
  int r = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    uint64_t s;
    if (!record_name(e->d_name, &s))
      continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      uint64_t *q = realloc(seqs, cap * sizeof(*q));
      if (!q) {
        r = -ENOMEM;
        break;
      }
      seqs = q;
    }
    seqs[n++] = s;
  }
  closedir(d);
  if (r) {
    free(seqs);
    return r;
  }
  if (n)
    qsort(seqs, n, sizeof(*seqs), cmp_u64);
  *ret_seqs = seqs;
  *ret_n = n;
  return 0;
}

int ex_record_next(const char *dir, uint64_t *ret_seq, struct cm_diag *diag) {
  uint64_t *seqs = NULL;
  size_t n = 0;
  int r = ex_record_list(dir, &seqs, &n, diag);
  if (r)
    return r;
  *ret_seq = n ? seqs[n - 1] + 1 : 0;
  free(seqs);
  return 0;
}

/* A whole regular file (a FIFO or device is refused, never waited on). */
static int read_file(const char *path, char **ret, size_t *ret_n, struct cm_diag *diag) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return cm_diag_set(diag, -errno, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  int r = 0;
  char *buf = NULL;
  size_t got = 0;
  if (fstat(fd, &sb) != 0)
    r = cm_diag_set(diag, -errno, "%s: cannot stat: %s", path, strerror(errno));
  else if (!S_ISREG(sb.st_mode))
    r = cm_diag_set(diag, -CM_EFORMAT, "%s: not a regular file", path);
  else if ((uint64_t)sb.st_size > (4ull << 30))
    r = cm_diag_set(diag, -CM_ELIMIT, "%s: larger than 4 GiB", path);
  else if (!(buf = malloc((size_t)sb.st_size + 1)))
    r = -ENOMEM;
  while (!r && got < (size_t)sb.st_size) {
    ssize_t k = read(fd, buf + got, (size_t)sb.st_size - got);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      r = cm_diag_set(diag, -EIO, "%s: short read", path);
    else
      got += (size_t)k;
  }
  close(fd);
  if (r) {
    free(buf);
    return r;
  }
  *ret = buf;
  *ret_n = got;
  return 0;
}

int ex_record_read(const char *dir, uint64_t seq, char **ret_program, size_t *ret_n_program,
                   char **ret_result, size_t *ret_n_result, struct cm_diag *diag) {
  char *pp = record_path(dir, seq, "program"), *rp = record_path(dir, seq, "result");
  char *pb = NULL, *rb = NULL;
  size_t pn = 0, rn = 0;
  int r = pp && rp ? 0 : -ENOMEM;
  if (!r)
    r = read_file(pp, &pb, &pn, diag);
  if (!r && ret_result)
    r = read_file(rp, &rb, &rn, diag);
  free(pp);
  free(rp);
  if (r) {
    free(pb);
    free(rb);
    return r;
  }
  *ret_program = pb;
  *ret_n_program = pn;
  if (ret_result) {
    *ret_result = rb;
    *ret_n_result = rn;
  }
  return 0;
}
