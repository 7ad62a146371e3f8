/* Process-wide allocator setting for the request path: buffers of a few MB (request bodies,
 * decoded images, pixel tensors, encoded programs) are recycled from the heap instead of being
 * mapped fresh, page-faulted and zeroed, and unmapped again on every request. Leaves out
 * per-request arenas (STYLE.md's plan). */
#ifndef S1_CM_ALLOC_H
#define S1_CM_ALLOC_H

#define CM_ALLOC_MMAP_MAX_BYTES (32 << 20) /* blocks below this come from arenas (glibc's cap) */
#define CM_ALLOC_KEEP_BYTES (256 << 20)    /* free memory kept at an arena's top */
#define CM_ALLOC_TOP_PAD_BYTES (64 << 20)  /* = a thread arena's heap: a wholly free one is kept */

/* Sets glibc malloc's mmap threshold (CM_ALLOC_MMAP_MAX_BYTES), trim threshold
 * (CM_ALLOC_KEEP_BYTES) and top pad (CM_ALLOC_TOP_PAD_BYTES); call once in main, before threads.
 * Without them every block above glibc's dynamic threshold is mmap'd anew, and a worker thread's
 * arena deletes each of its 64 MiB heaps as soon as it is wholly free (glibc heap_trim keeps one
 * only within top_pad), so each request page-faults its large buffers again (measured in
 * notes/2026-12-02-omnijev-preprocess.md). The pad is address space: grown heaps are touched only
 * as they are used. Units: bytes. Returns 0, or -ENOTSUP where the allocator refuses a setting
 * (e.g. under ASan, which has its own allocator: harmless). */
int cm_alloc_keep_large(void);

#endif
