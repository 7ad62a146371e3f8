/* The verified-file cache (see cm_verify_cache.h): one JSON object
 *   {"format": "s1serve-verified/1", "files": {"/abs/path": {"stat": SIG, "sha256": HEX}, ...}}
 * where SIG is "dev:ino:size:mtime_s.ns:ctime_s.ns". json-c reads and writes it; every failure
 * to read degrades to an empty cache. It leaves out locking and fsync (a torn write reads as
 * garbage, which means hashing again). */
#include "cm_verify_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct cm_verify_cache {
  char *dir;          /* cache directory, heap */
  char *file;         /* dir/CM_VERIFY_CACHE_FILE, heap */
  json_object *files; /* entries read at open: path -> {stat, sha256}; owned */
  json_object *added; /* entries recorded by this process, same form; owned */
};

static char *str_printf(const char *fmt, const char *a, const char *b) {
  int n = snprintf(NULL, 0, fmt, a, b);
  char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (s)
    snprintf(s, (size_t)n + 1, fmt, a, b);
  return s;
}

/* The stat signature; `out` holds at least 128 bytes. */
static void stat_sig(const struct stat *sb, char *out, size_t n) {
  snprintf(out, n, "%ju:%ju:%jd:%jd.%09ld:%jd.%09ld", (uintmax_t)sb->st_dev, (uintmax_t)sb->st_ino,
           (intmax_t)sb->st_size, (intmax_t)sb->st_mtim.tv_sec, (long)sb->st_mtim.tv_nsec,
           (intmax_t)sb->st_ctim.tv_sec, (long)sb->st_ctim.tv_nsec);
}

/* The "files" object of the cache file, or a new empty object when the file is absent, too large,
 * unreadable or not in the expected form. NULL only when out of memory. */
static json_object *read_files(const char *file) {
  json_object *root = NULL, *files = NULL, *fmt;
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  struct stat sb;
  if (fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0 &&
      sb.st_size <= CM_VERIFY_CACHE_MAX_BYTES) {
    char *buf = malloc((size_t)sb.st_size);
    size_t len = 0;
    while (buf && len < (size_t)sb.st_size) {
      ssize_t r = read(fd, buf + len, (size_t)sb.st_size - len);
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0)
        break;
      len += (size_t)r;
    }
    json_tokener *tok = buf && len == (size_t)sb.st_size ? json_tokener_new() : NULL;
    if (tok) {
      root = json_tokener_parse_ex(tok, buf, (int)len);
      if (json_tokener_get_error(tok) != json_tokener_success ||
          json_tokener_get_parse_end(tok) != len) {
        json_object_put(root);
        root = NULL;
      }
      json_tokener_free(tok);
    }
    free(buf);
  }
  if (fd >= 0)
    close(fd);
  if (json_object_is_type(root, json_type_object) &&
      json_object_object_get_ex(root, "format", &fmt) &&
      json_object_is_type(fmt, json_type_string) &&
      strcmp(json_object_get_string(fmt), CM_VERIFY_CACHE_FORMAT) == 0 &&
      json_object_object_get_ex(root, "files", &files) &&
      json_object_is_type(files, json_type_object))
    json_object_get(files);
  else
    files = json_object_new_object();
  json_object_put(root);
  return files;
}

int cm_verify_cache_open(struct cm_verify_cache **ret_cache) {
  *ret_cache = NULL;
  const char *mode = getenv("S1_VERIFY");
  if (mode && *mode && strcmp(mode, "cache") != 0)
    return 0; /* "always", or anything not understood: the safe side */
  const char *d = getenv("S1_CACHE_DIR"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
  struct cm_verify_cache *c = calloc(1, sizeof *c);
  if (!c)
    return -ENOMEM;
  if (d && *d)
    c->dir = strdup(d);
  else if (x && *x)
    c->dir = str_printf("%s/%s", x, "s1serve");
  else if (h && *h)
    c->dir = str_printf("%s/%s", h, ".cache/s1serve");
  else {
    free(c);
    return 0; /* nowhere to keep it */
  }
  if (!c->dir || !(c->file = str_printf("%s/%s", c->dir, CM_VERIFY_CACHE_FILE)) ||
      !(c->files = read_files(c->file)) || !(c->added = json_object_new_object())) {
    cm_verify_cache_free(c);
    return -ENOMEM;
  }
  *ret_cache = c;
  return 0;
}

void cm_verify_cache_free(struct cm_verify_cache *c) {
  if (!c)
    return;
  json_object_put(c->files);
  json_object_put(c->added);
  free(c->file);
  free(c->dir);
  free(c);
}

/* True when entry `e` is {"stat": sig, "sha256": hex} with both equal to the arguments. */
static bool entry_is(json_object *e, const char *sig, const char *sha256_hex) {
  json_object *js, *jh;
  return json_object_is_type(e, json_type_object) && json_object_object_get_ex(e, "stat", &js) &&
         json_object_is_type(js, json_type_string) && strcmp(json_object_get_string(js), sig) == 0 &&
         json_object_object_get_ex(e, "sha256", &jh) && json_object_is_type(jh, json_type_string) &&
         strlen(json_object_get_string(jh)) == 64 &&
         strcmp(json_object_get_string(jh), sha256_hex) == 0;
}

bool cm_verify_cache_hit(const struct cm_verify_cache *c, const char *path, const struct stat *sb,
                         const char *sha256_hex) {
  if (!c || !path || !sha256_hex || strlen(sha256_hex) != 64)
    return false;
  char sig[160];
  stat_sig(sb, sig, sizeof sig);
  json_object *e;
  return (json_object_object_get_ex(c->added, path, &e) && entry_is(e, sig, sha256_hex)) ||
         (json_object_object_get_ex(c->files, path, &e) && entry_is(e, sig, sha256_hex));
}

static int64_t ts_ns(struct timespec t) {
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int cm_verify_cache_put(struct cm_verify_cache *c, const char *path, const struct stat *sb,
                        const char *sha256_hex) {
  struct timespec now;
  if (!c || clock_gettime(CLOCK_REALTIME, &now) != 0)
    return 0;
  int64_t settled = ts_ns(now) - (int64_t)CM_VERIFY_CACHE_SETTLE_S * 1000000000;
  if (ts_ns(sb->st_mtim) >= settled || ts_ns(sb->st_ctim) >= settled)
    return 0; /* changed too recently to trust the timestamps */
  char sig[160];
  stat_sig(sb, sig, sizeof sig);
  json_object *e = json_object_new_object();
  if (!e)
    return -ENOMEM;
  json_object_object_add(e, "stat", json_object_new_string(sig));
  json_object_object_add(e, "sha256", json_object_new_string(sha256_hex));
  json_object_object_del(c->added, path);
  return json_object_object_add(c->added, path, e) == 0 ? 0 : -ENOMEM;
}

/* Creates `dir` and any missing parents, mode 0700. Returns 0 or a negative errno. */
static int make_dirs(const char *dir) {
  char *p = strdup(dir);
  if (!p)
    return -ENOMEM;
  int rc = 0;
  for (char *s = p + 1;; s++) {
    if (*s == '/' || *s == '\0') {
      char was = *s;
      *s = '\0';
      if (mkdir(p, 0700) != 0 && errno != EEXIST) {
        rc = -errno;
        break;
      }
      *s = was;
      if (was == '\0')
        break;
    }
  }
  free(p);
  return rc;
}

int cm_verify_cache_save(struct cm_verify_cache *c) {
  if (!c || json_object_object_length(c->added) == 0)
    return 0;
  int rc = make_dirs(c->dir);
  if (rc)
    return rc;
  json_object *files = read_files(c->file), *root = json_object_new_object();
  json_object *drop = json_object_new_array();
  char *tmp = str_printf("%s/%s.XXXXXX", c->dir, CM_VERIFY_CACHE_FILE);
  if (!files || !root || !drop || !tmp) {
    rc = -ENOMEM;
    goto out;
  }
  /* entries still true of their file; this process's entries last (the newest) */
  json_object_object_foreach(files, path, e) {
    struct stat sb;
    char sig[160];
    json_object *js;
    bool keep = stat(path, &sb) == 0 && json_object_is_type(e, json_type_object) &&
                json_object_object_get_ex(e, "stat", &js) &&
                json_object_is_type(js, json_type_string);
    if (keep) {
      stat_sig(&sb, sig, sizeof sig);
      keep = strcmp(sig, json_object_get_string(js)) == 0 &&
             !json_object_object_get_ex(c->added, path, NULL);
    }
    if (!keep)
      json_object_array_add(drop, json_object_new_string(path));
  }
  size_t n_drop = json_object_array_length(drop);
  size_t n_keep = (size_t)json_object_object_length(files) - n_drop;
  size_t n_new = (size_t)json_object_object_length(c->added);
  for (size_t i = 0; i < n_drop; i++)
    json_object_object_del(files, json_object_get_string(json_object_array_get_idx(drop, i)));
  /* the oldest (first in file order) beyond the cap */
  while (n_keep > 0 && n_keep + n_new > CM_VERIFY_CACHE_MAX_ENTRIES) {
    char *oldest = strdup((const char *)lh_entry_k(json_object_get_object(files)->head));
    if (!oldest) {
      rc = -ENOMEM;
      goto out;
    }
    json_object_object_del(files, oldest);
    free(oldest);
    n_keep--;
  }
  json_object_object_foreach(c->added, apath, ae) {
    json_object_object_add(files, apath, json_object_get(ae));
  }
  json_object_object_add(root, "format", json_object_new_string(CM_VERIFY_CACHE_FORMAT));
  json_object_object_add(root, "files", json_object_get(files));
  size_t len;
  const char *txt = json_object_to_json_string_length(
      root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
  int fd = txt ? mkstemp(tmp) : -1;
  if (fd < 0) {
    rc = txt ? -errno : -ENOMEM;
    goto out;
  }
  size_t done = 0;
  while (done < len) {
    ssize_t w = write(fd, txt + done, len - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      rc = w < 0 ? -errno : -EIO;
      break;
    }
    done += (size_t)w;
  }
  if (close(fd) != 0 && !rc)
    rc = -errno;
  if (!rc && rename(tmp, c->file) != 0)
    rc = -errno;
  if (rc)
    unlink(tmp);
out:
  free(tmp);
  json_object_put(drop);
  json_object_put(root);
  json_object_put(files);
  return rc;
}
