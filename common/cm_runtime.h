/* Where s1serve's ipc:// sockets live and who may have made them. Every ipc socket is in a private
 * directory (a real directory owned by the effective user, no access for group or others: 0700;
 * systemd's RuntimeDirectory= with RuntimeDirectoryMode=0700 makes one), so no other user can
 * connect to a socket or plant one; a socket path that exists and is not a socket of this user is
 * refused. A listener takes a lock beside its socket first, so a second process started on the same
 * path fails before it touches the live socket (nng 1.5.2's stale-socket probe, a connect closed
 * during negotiation, stops the live listener accepting: nng issue #1518, fixed in nng 1.6.0).
 * Only paths and files here; the nng calls stay in the processes' main files. */
#ifndef S1_CM_RUNTIME_H
#define S1_CM_RUNTIME_H

#include <stdbool.h>

#include "cm_error.h"

#define CM_IPC_MAX_PATH 107 /* bytes of a socket path (sun_path less its NUL) */

/* The default runtime directory: $RUNTIME_DIRECTORY (systemd RuntimeDirectory=; the first of a
 * ':' list), else $XDG_RUNTIME_DIR/s1serve, else /tmp/s1serve-<euid>; created 0700 when absent,
 * then checked as cm_ipc_check checks a socket's directory.
 * Ownership: *ret_dir is heap (free()). Returns 0, -EPERM (not private), -ENOMEM, -errno. */
int cm_runtime_dir(char **ret_dir, struct cm_diag *diag);

/* "ipc://" + cm_runtime_dir() + "/" + name, e.g. name "frontend.sock".
 * Ownership: *ret_url is heap (free()). Returns as cm_runtime_dir, or -ENAMETOOLONG. */
int cm_runtime_url(const char *name, char **ret_url, struct cm_diag *diag);

/* For an ipc:// URL: its directory must be private (lstat: a directory, not a symlink, owned by
 * the effective user, mode & 0077 == 0) and the path, if it exists, a socket owned by the
 * effective user; with `create_dir` an absent directory is made 0700 (its parent must exist).
 * Any other scheme passes. `what` names the option in messages (e.g. "--pool").
 * Returns 0; -EPERM (not private, another user's socket, not a socket), -ENAMETOOLONG (path over
 * CM_IPC_MAX_PATH), -ENOENT, -errno. diag names the path and what is wrong with it. */
int cm_ipc_check(const char *url, bool create_dir, const char *what, struct cm_diag *diag);

/* For an ipc:// URL about to be listened on: an exclusive lock (flock) on PATH.lock, made 0600,
 * held until the process exits (the lock file stays; a dead holder releases it). Call after
 * cm_ipc_check and before nng_listen. *ret_fd: the lock's fd (keep it open), or -1 for another
 * scheme. Returns 0; -EADDRINUSE (another live process listens on PATH), -errno. */
int cm_ipc_lock(const char *url, const char *what, int *ret_fd, struct cm_diag *diag);

#endif
