/* Private runtime paths for ipc:// sockets and the listener lock (cm_runtime.h). */
#include "cm_runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static const char IPC[] = "ipc://";

/* The path of an ipc:// URL, or NULL for another scheme. */
static const char *ipc_path(const char *url) {
  return strncmp(url, IPC, sizeof(IPC) - 1) == 0 ? url + sizeof(IPC) - 1 : NULL;
}

/* Checks (and with create, makes) a private directory. */
static int check_dir(const char *dir, bool create, const char *what, struct cm_diag *diag) {
  struct stat st;
  if (lstat(dir, &st) != 0) {
    int e = errno;
    if (e == ENOENT && create) {
      if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return cm_diag_set(diag, -errno, "%s: cannot create the runtime directory %s: %s", what,
                           dir, strerror(errno));
      if (lstat(dir, &st) != 0)
        return cm_diag_set(diag, -errno, "%s: %s: %s", what, dir, strerror(errno));
    } else {
      return cm_diag_set(diag, -e, "%s: the socket directory %s: %s", what, dir, strerror(e));
    }
  }
  if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode))
    return cm_diag_set(diag, -EPERM, "%s: %s is not a directory (a symlink or a file); ipc "
                       "sockets need a private directory (0700, e.g. systemd's "
                       "RuntimeDirectory=)", what, dir);
  if (st.st_uid != geteuid())
    return cm_diag_set(diag, -EPERM, "%s: the socket directory %s belongs to uid %u, not to this "
                       "process (uid %u): another user could have made its sockets", what, dir,
                       (unsigned)st.st_uid, (unsigned)geteuid());
  if (st.st_mode & 0077)
    return cm_diag_set(diag, -EPERM, "%s: the socket directory %s has mode %04o; ipc sockets need "
                       "a private directory (0700: no access for group or others)", what, dir,
                       (unsigned)(st.st_mode & 07777));
  return 0;
}

int cm_ipc_check(const char *url, bool create_dir, const char *what, struct cm_diag *diag) {
  const char *path = ipc_path(url);
  if (!path)
    return 0;
  size_t n = strlen(path);
  if (n == 0 || n > CM_IPC_MAX_PATH)
    return cm_diag_set(diag, -ENAMETOOLONG, "%s: ipc path \"%.120s\" is empty or longer than %d "
                       "bytes", what, path, CM_IPC_MAX_PATH);
  char dir[CM_IPC_MAX_PATH + 1];
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, sizeof(dir), ".");
  else if (slash == path)
    snprintf(dir, sizeof(dir), "/");
  else
    snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
  int rc = check_dir(dir, create_dir, what, diag);
  if (rc)
    return rc;
  struct stat st;
  if (lstat(path, &st) != 0)
    return errno == ENOENT ? 0 : cm_diag_set(diag, -errno, "%s: %s: %s", what, path,
                                             strerror(errno));
  if (!S_ISSOCK(st.st_mode))
    return cm_diag_set(diag, -EPERM, "%s: %s exists and is not a socket", what, path);
  if (st.st_uid != geteuid())
    return cm_diag_set(diag, -EPERM, "%s: the socket %s belongs to uid %u, not to this process "
                       "(uid %u)", what, path, (unsigned)st.st_uid, (unsigned)geteuid());
  return 0;
}

int cm_ipc_lock(const char *url, const char *what, int *ret_fd, struct cm_diag *diag) {
  const char *path = ipc_path(url);
  if (!path) {
    *ret_fd = -1;
    return 0;
  }
  char lock[CM_IPC_MAX_PATH + 8];
  snprintf(lock, sizeof(lock), "%s.lock", path);
  int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    return cm_diag_set(diag, -errno, "%s: cannot open the lock %s: %s", what, lock,
                       strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    close(fd);
    if (e == EWOULDBLOCK)
      return cm_diag_set(diag, -EADDRINUSE, "%s: %s is served by another live process (it holds "
                         "%s); this start changes nothing", what, path, lock);
    return cm_diag_set(diag, -e, "%s: cannot lock %s: %s", what, lock, strerror(e));
  }
  *ret_fd = fd;
  return 0;
}

int cm_runtime_dir(char **ret_dir, struct cm_diag *diag) {
  char buf[CM_IPC_MAX_PATH + 1];
  const char *rd = getenv("RUNTIME_DIRECTORY"), *xdg = getenv("XDG_RUNTIME_DIR");
  int n;
  if (rd && *rd)
    n = snprintf(buf, sizeof(buf), "%.*s", (int)strcspn(rd, ":"), rd);
  else if (xdg && *xdg)
    n = snprintf(buf, sizeof(buf), "%s/s1serve", xdg);
  else
    n = snprintf(buf, sizeof(buf), "/tmp/s1serve-%u", (unsigned)geteuid());
  if (n < 0 || (size_t)n >= sizeof(buf) - 16)
    return cm_diag_set(diag, -ENAMETOOLONG, "the runtime directory path is too long");
  int rc = check_dir(buf, true, "runtime directory", diag);
  if (rc)
    return rc;
  if (!(*ret_dir = strdup(buf)))
    return -ENOMEM;
  return 0;
}

int cm_runtime_url(const char *name, char **ret_url, struct cm_diag *diag) {
  char *dir = NULL;
  int rc = cm_runtime_dir(&dir, diag);
  if (rc)
    return rc;
  size_t n = strlen(IPC) + strlen(dir) + 1 + strlen(name) + 1;
  char *url = malloc(n);
  if (url)
    snprintf(url, n, "%s%s/%s", IPC, dir, name);
  free(dir);
  if (!url)
    return -ENOMEM;
  if (n - 1 - strlen(IPC) > CM_IPC_MAX_PATH) {
    free(url);
    return cm_diag_set(diag, -ENAMETOOLONG, "the default socket path is longer than %d bytes",
                       CM_IPC_MAX_PATH);
  }
  *ret_url = url;
  return 0;
}
