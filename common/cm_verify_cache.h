/* The verified-file cache: a small JSON file remembering which files of a model directory were last
 * hashed and matched their manifest, keyed by what stat() says of them, so that a process start does
 * not re-hash an unchanged ~54 GB weights file. It only ever skips work: a missing, unreadable or
 * malformed cache means "hash again", and an entry counts only for the exact SHA-256 the manifest
 * expects, so it never turns a mismatch into a pass. It leaves out locking (the last writer wins). */
#ifndef S1_CM_VERIFY_CACHE_H
#define S1_CM_VERIFY_CACHE_H

#include <stdbool.h>
#include <sys/stat.h>

#define CM_VERIFY_CACHE_FILE "verified-files.json" /* inside the cache directory */
#define CM_VERIFY_CACHE_FORMAT "s1serve-verified/1" /* its "format" */
#define CM_VERIFY_CACHE_MAX_ENTRIES 1024            /* oldest dropped beyond this */
#define CM_VERIFY_CACHE_MAX_BYTES (4 << 20)         /* a larger file is ignored */
#define CM_VERIFY_CACHE_SETTLE_S 2 /* a file changed less than this long ago is not recorded */

struct cm_verify_cache; /* opaque */

/* Opens the cache the environment names. S1_VERIFY=always (any value but unset, "" or "cache")
 * turns it off: *ret_cache is NULL and every file is hashed. Directory: $S1_CACHE_DIR, else
 * $XDG_CACHE_HOME/s1serve, else $HOME/.cache/s1serve (none set: off); file CM_VERIFY_CACHE_FILE.
 * Reading is best effort: an absent, unreadable, oversized or malformed file gives an empty cache.
 * Ownership: *ret_cache heap-owned, freed with cm_verify_cache_free. Returns 0 or -ENOMEM. */
int cm_verify_cache_open(struct cm_verify_cache **ret_cache);
void cm_verify_cache_free(struct cm_verify_cache *c);

/* True when `path` (absolute) is recorded with the same st_dev, st_ino, st_size, st_mtim and
 * st_ctim as `sb` and with the SHA-256 `sha256_hex` (64 lowercase hex digits, the manifest's). */
bool cm_verify_cache_hit(const struct cm_verify_cache *c, const char *path, const struct stat *sb,
                         const char *sha256_hex);

/* Records that `path` with stat `sb` hashed to `sha256_hex` (the caller compared it with the
 * manifest). Skipped when st_mtim or st_ctim is less than CM_VERIFY_CACHE_SETTLE_S seconds old
 * (or in the future): a change within the file system's timestamp tick could leave both unchanged.
 * Returns 0 (recorded or skipped) or -ENOMEM. */
int cm_verify_cache_put(struct cm_verify_cache *c, const char *path, const struct stat *sb,
                        const char *sha256_hex);

/* When something was recorded: re-reads the file (other processes may have written it), adds the
 * new entries, drops entries whose file is gone or whose stat changed and the oldest beyond
 * CM_VERIFY_CACHE_MAX_ENTRIES, and writes it atomically (temporary file + rename; the directory is
 * created, mode 0700). Returns 0 or a negative errno; callers may ignore it (nothing was lost but
 * the saved work). */
int cm_verify_cache_save(struct cm_verify_cache *c);

#endif
