/* The scheduler of ex_sched.h: a list of held programs in arrival order (waiting, then admitted),
 * one batch per step, the snapshot pool's accounting, the prefix-snapshot and vision caches and
 * their keys. The per-program readout and head work is ex_job.h's. */
#include "ex_sched.h"

#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_sha256.h"
#include "ex_engine.h"
#include "ex_job.h"

#define KEYB EX_LRU_KEY_BYTES
#define GRID EX_SCHED_GRID
#define DEF_BATCH_TOKENS 8192    /* tokens of a step (CUDA) */
#define DEF_BATCH_TOKENS_CPU 512 /* tokens of a step (CPU) */
#define DEF_BATCH_READS_CPU 128  /* readout rows of a step (CPU; CUDA: the engine's per launch) */
#define DEF_PROGRAMS 64
#define SEEN_KEYS 65536   /* grid points remembered as seen once (hash only) */
#define CANCEL_RING 256   /* cancelled request ids remembered for programs that come later */
#define MAX_STORE 2       /* grid points inside one prefix copied into the cache per run */

static int64_t mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

enum job_state { J_WAITING, J_ACTIVE, J_DONE };

/* One prefix of a program in flight. */
struct sprefix {
  void *snap;                /* its snapshot: owned, or the cache entry's (shared) */
  struct ex_lru_entry *hit;  /* pinned prefix-cache entry: the full hit shared, or the partial hit
                                the snapshot is copied from when the prefix starts */
  bool shared;               /* snap is hit's (every token was cached): never advanced or freed */
  bool started;              /* snap exists */
  uint32_t at;               /* tokens in the snapshot so far (a grid point, or n when done) */
  uint32_t n_grid;           /* grid points strictly inside: (n − 1) / GRID */
  uint8_t (*keys)[KEYB];     /* [n_grid + 1]: key at 64·(k+1) for k < n_grid, then at the end */
  uint32_t store[MAX_STORE]; /* grid points to copy into the cache when reached, ascending */
  uint32_t n_store;          /* entries in store */
  uint64_t chain;            /* tokens of the parent chain before this prefix */
  size_t reserve;            /* pool bytes reserved for snap (0 when shared) */
  int32_t piece;             /* index of its piece in this step's batch, or -1 */
  bool follow;               /* another program in flight computes this very prefix: wait for
                                its snapshot in the cache instead of computing it again */
};

/* One image of a program in flight. */
struct simage {
  float *rows;              /* [n_patches/4, H] merged rows: owned, or the cache entry's */
  struct ex_lru_entry *hit; /* pinned vision-cache entry when rows are its */
  uint8_t key[KEYB];        /* vision key (when a cache is on) */
  bool done;                /* rows hold the tower's output */
  bool queued;              /* in this step's batch */
};

/* One held program. */
struct sjob {
  struct ex_job job;               /* readout plan and result (ex_job.h) */
  const struct proto_program *p;   /* borrowed */
  void *tag;                       /* the caller's */
  enum job_state state;            /* waiting, in flight, finished */
  int64_t arrival_us, admit_us;    /* monotonic */
  struct sprefix *pf;              /* [n_prefixes] */
  struct simage *im;               /* [n_images] */
  uint32_t next_row;               /* rows before it are launched (or never run) */
  uint32_t rows_left;              /* rows that run and have not finished */
  size_t need;                     /* pool bytes its prefixes need (before cache hits) */
  size_t reserve;                  /* pool bytes reserved now */
  bool literal_image;              /* text-only with a literal <|image_pad|>: no launch with image
                                      rows may hold its sequences */
  bool touched;                    /* in this step's batch */
  uint32_t step_tokens;            /* tokens it put into this step's launch */
  int64_t t_vision, t_prefix, t_rows, t_readout, t_heads; /* µs of its work */
  uint32_t steps;                  /* steps it took part in */
  struct sjob *next;               /* held list (arrival order) or finished queue */
};

/* What one step runs. */
struct piece {
  struct sjob *j;
  uint32_t prefix; /* index */
  uint32_t a, b;   /* tokens [a, b) of the prefix */
};
struct rowitem {
  struct sjob *j;
  uint32_t row; /* index */
  size_t rd;    /* its first readout in the launch */
};
struct visitem {
  struct sjob *j;
  uint32_t image;
};

struct batch {
  struct piece *pieces;
  size_t n_pieces, cap_pieces;
  struct rowitem *rows;
  size_t n_rows, cap_rows;
  struct visitem *vis;
  size_t n_vis, cap_vis;
  size_t tokens;       /* launch tokens so far (pieces and rows) */
  size_t vis_tokens;   /* merged rows of the vision items */
  size_t reads;        /* readout rows */
  bool has_image_rows; /* a piece takes image rows */
  bool has_literal;    /* a sequence of a literal-image program */
};

struct posted {
  struct posted *next; /* inbox link */
  char rid[];          /* request id */
};

struct ex_sched {
  struct ex_runner *x;             /* borrowed */
  pthread_mutex_t inbox_mu;        /* guards inbox (ex_sched_post_cancel from other threads) */
  struct posted *inbox;            /* CANCELs posted, not applied yet */
  atomic_bool has_inbox;           /* inbox is not empty (checked without the lock) */
  struct ex_engine *eng;           /* the runner's */
  size_t h;                        /* hidden size */
  size_t budget;                   /* tokens of one step */
  size_t read_budget;              /* readout rows of one step */
  size_t max_programs;             /* held at most */
  struct sjob *head, *tail;        /* held programs in arrival order */
  struct sjob *done_head, *done_tail; /* finished, not popped */
  size_t n_waiting, n_active;      /* counts over the held list */
  size_t reserved;                 /* pool bytes reserved by programs in flight */
  struct ex_lru *pcache;           /* prefix snapshots (values: engine snapshots), or NULL */
  struct ex_lru *vcache;           /* vision rows (values: float arrays), or NULL */
  struct ex_lru *seen;             /* grid keys seen once (no values), or NULL */
  uint8_t root[KEYB];              /* what every key starts from: model, revision, engine */
  char cancelled[CANCEL_RING][PROTO_MAX_ID_BYTES + 1]; /* recent CANCEL ids */
  unsigned n_cancel;               /* CANCELs seen */
  struct batch b;                  /* this step's */
  struct ex_engine_seq *seqs;      /* launch buffers, grown as needed */
  size_t cap_seqs;
  int32_t *pos;                    /* [3, Σ piece tokens] piece positions */
  size_t cap_pos;
  float *img;                      /* [rows, H] image rows of the launch */
  size_t cap_img;
  size_t *reads;                   /* [reads] */
  size_t cap_reads;
  float *hid;                      /* [reads, H] */
  struct ex_lm_batch lmb;          /* a launch's batched LM log-probs (ex_job.h) */
  size_t cap_hid;
  struct ex_sched_stats st;        /* counters */
  struct ex_sched_step_info cur;   /* this step's, for on_step */
  void (*on_step)(void *ctx, const struct ex_sched_step_info *info);
  void *on_step_ctx;
};

/* ---- small helpers ------------------------------------------------------------------------- */

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return 0;
  size_t c = *cap ? *cap : 16;
  while (c < need)
    c *= 2;
  void *q = realloc(*p, c * elem);
  if (!q)
    return -ENOMEM;
  *p = q;
  *cap = c;
  return 0;
}

static void snap_free_cb(void *ctx, void *snap) {
  struct ex_engine *e = ctx;
  e->ops->snap_free(e, snap);
}

static void rows_free_cb(void *ctx, void *rows) {
  (void)ctx;
  free(rows);
}

static size_t pcache_bytes(const struct ex_sched *s) {
  struct ex_lru_stats st = {0};
  if (s->pcache)
    ex_lru_stats(s->pcache, &st);
  return st.bytes;
}

/* Pool bytes free now; evicts unpinned cached snapshots first when `want` asks for more. */
static size_t pool_room(struct ex_sched *s, size_t want) {
  size_t pool = s->eng->lim.pool_bytes, used = s->reserved + pcache_bytes(s);
  size_t room = used < pool ? pool - used : 0;
  if (room < want && s->pcache) {
    ex_lru_evict(s->pcache, want - room);
    used = s->reserved + pcache_bytes(s);
    room = used < pool ? pool - used : 0;
  }
  return room;
}

/* The engine's answer for a program's own fault (a limit) becomes the program's error. */
static bool program_fault(int r) {
  return r == -CM_ELIMIT || r == -CM_ESHAPE || r == -CM_EPROGRAM;
}

/* ---- keys ------------------------------------------------------------------------------------ */

static int key_root(struct ex_sched *s) {
  struct cm_sha256 h = {0};
  const char *parts[] = {"s1serve-snapshot-v1", ex_runner_model_id(s->x),
                         ex_runner_revision(s->x), s->eng->ops->name, ex_runner_numerics(s->x)};
  int r = cm_sha256_init(&h);
  for (size_t i = 0; !r && i < sizeof(parts) / sizeof(parts[0]); i++)
    r = cm_sha256_update(&h, parts[i], strlen(parts[i]) + 1);
  if (!r)
    r = cm_sha256_final(&h, s->root);
  cm_sha256_fini(&h);
  return r;
}

/* Vision key of an image: the root, its grid and every pixel. */
static int key_image(const struct ex_sched *s, const struct proto_image *im, uint8_t *ret) {
  struct cm_sha256 h = {0};
  int r = cm_sha256_init(&h);
  if (!r)
    r = cm_sha256_update(&h, s->root, KEYB);
  if (!r)
    r = cm_sha256_update(&h, "image", 6);
  if (!r)
    r = cm_sha256_update(&h, im->grid_thw, sizeof(im->grid_thw));
  if (!r)
    r = cm_sha256_update(&h, &im->n_patches, sizeof(im->n_patches));
  if (!r)
    r = cm_sha256_update(&h, im->pixels, (size_t)im->n_patches * PROTO_PATCH_DIM * sizeof(float));
  if (!r)
    r = cm_sha256_final(&h, ret);
  cm_sha256_fini(&h);
  return r;
}

/* Keys of prefix i's grid points and end: SHA-256 of the parent's end key (or the root), then per
 * token its id and three positions, with an image's vision key before the token that takes its
 * first merged row. Everything a snapshot depends on is in it: the chain before it, ids,
 * positions, image content and grid, and (through the root) the model and the numerics. */
static int key_prefix(struct sjob *j, const struct ex_sched *s, uint32_t i) {
  const struct proto_program *p = j->p;
  const struct proto_prefix *x = &p->prefixes[i];
  struct sprefix *f = &j->pf[i];
  int32_t img = s->eng->cfg.image_token_id;
  struct cm_sha256 h = {0}, c = {0};
  int32_t rec[4 * GRID];
  size_t nrec = 0, row = 0, next_first = 0; /* image rows consumed, first row of image k */
  uint32_t k = 0;
  int r = cm_sha256_init(&h);
  if (!r)
    r = cm_sha256_update(&h, x->parent < 0 ? s->root : j->pf[x->parent].keys[j->pf[x->parent].n_grid],
                         KEYB);
  if (!r)
    r = cm_sha256_update(&h, "prefix", 7);
  for (uint32_t t = 0; !r && t < x->n_tokens; t++) {
    if (p->n_images && x->ids[t] == img) {
      /* the token that takes an image's first merged row feeds the image's key */
      if (k < x->n_images && row == next_first) {
        if (nrec && (r = cm_sha256_update(&h, rec, nrec * 4 * sizeof(int32_t))))
          break;
        nrec = 0;
        r = cm_sha256_update(&h, j->im[x->images[k]].key, KEYB);
        next_first += p->images[x->images[k]].n_patches / 4;
        k++;
      }
      row++;
    }
    rec[4 * nrec] = x->ids[t];
    for (int a = 0; a < 3; a++)
      rec[4 * nrec + 1 + a] = x->pos[(size_t)a * x->n_tokens + t];
    nrec++;
    if (!r && ((t + 1) % GRID == 0 || t + 1 == x->n_tokens)) {
      r = cm_sha256_update(&h, rec, nrec * 4 * sizeof(int32_t));
      nrec = 0;
      if (!r && t + 1 < x->n_tokens) { /* a grid point inside */
        r = cm_sha256_copy(&c, &h);
        if (!r)
          r = cm_sha256_final(&c, f->keys[(t + 1) / GRID - 1]);
      }
    }
  }
  if (!r)
    r = cm_sha256_final(&h, f->keys[f->n_grid]);
  cm_sha256_fini(&h);
  cm_sha256_fini(&c);
  return r;
}

/* ---- programs ------------------------------------------------------------------------------- */

static void job_free(struct sjob *j) {
  if (!j)
    return;
  for (uint32_t i = 0; j->pf && i < j->p->n_prefixes; i++)
    free(j->pf[i].keys);
  free(j->pf);
  free(j->im);
  ex_job_fini(&j->job);
  free(j);
}

static void list_remove(struct ex_sched *s, struct sjob *j) {
  struct sjob **pp = &s->head, *prev = NULL;
  while (*pp && *pp != j)
    prev = *pp, pp = &(*pp)->next;
  if (!*pp)
    return;
  *pp = j->next;
  if (s->tail == j)
    s->tail = prev;
  j->next = NULL;
}

/* Releases what a program holds: snapshots go to the prefix cache (a finished prefix, on success)
 * or are freed, cached entries are unpinned, computed image rows go to the vision cache. */
static void release(struct ex_sched *s, struct sjob *j, bool ok) {
  const struct proto_program *p = j->p;
  for (uint32_t i = 0; j->pf && i < p->n_prefixes; i++) {
    struct sprefix *f = &j->pf[i];
    if (f->hit)
      ex_lru_unpin(s->pcache, f->hit);
    if (f->snap && !f->shared) {
      if (ok && s->pcache && f->at == p->prefixes[i].n_tokens)
        ex_lru_put(s->pcache, f->keys[f->n_grid], f->snap,
                   s->eng->ops->snap_bytes(s->eng, f->chain + f->at));
      else
        s->eng->ops->snap_free(s->eng, f->snap);
    }
    f->snap = NULL;
    f->hit = NULL;
  }
  for (uint32_t i = 0; j->im && i < p->n_images; i++) {
    struct simage *m = &j->im[i];
    if (m->hit)
      ex_lru_unpin(s->vcache, m->hit);
    else if (m->rows && m->done && s->vcache)
      ex_lru_put(s->vcache, m->key, m->rows,
                 (size_t)(p->images[i].n_patches / 4) * s->h * sizeof(float));
    else
      free(m->rows);
    m->rows = NULL;
    m->hit = NULL;
  }
  s->reserved -= j->reserve;
  j->reserve = 0;
}

/* Finishes a held program: status 0 (its outputs) or an error; moves it to the finished queue. */
static void finish(struct ex_sched *s, struct sjob *j, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void finish(struct ex_sched *s, struct sjob *j, int code, const char *fmt, ...) {
  if (j->state == J_DONE)
    return;
  if (j->state == J_WAITING)
    s->n_waiting--;
  else if (j->state == J_ACTIVE)
    s->n_active--;
  list_remove(s, j);
  release(s, j, code == 0);
  if (code) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    proto_result_set_error(&j->job.res, code, msg);
  } else {
    j->job.res.status = 0;
    free(j->job.res.numerics); /* the mode that computed the outputs (proto_result.numerics) */
    if (!(j->job.res.numerics = strdup(ex_runner_numerics(s->x))))
      proto_result_set_error(&j->job.res, -ENOMEM, "out of memory");
  }
  int64_t now = mono_us();
  struct proto_exec_timings *t = &j->job.res.timings;
  t->queue_us = (j->admit_us ? j->admit_us : now) - j->arrival_us;
  t->vision_us = j->t_vision;
  t->prefix_us = j->t_prefix;
  t->rows_us = j->t_rows;
  t->readout_us = j->t_readout;
  t->heads_us = j->t_heads;
  t->total_us = now - j->arrival_us;
  t->wait_us = t->total_us - t->queue_us - t->vision_us - t->prefix_us - t->rows_us -
               t->readout_us - t->heads_us;
  if (t->wait_us < 0)
    t->wait_us = 0;
  t->steps = j->steps;
  j->state = J_DONE;
  s->st.finished++;
  if (s->done_tail)
    s->done_tail->next = j;
  else
    s->done_head = j;
  s->done_tail = j;
}

static bool was_cancelled(const struct ex_sched *s, const char *rid) {
  for (unsigned i = 0; rid && i < CANCEL_RING && i < s->n_cancel; i++)
    if (strcmp(s->cancelled[i], rid) == 0)
      return true;
  return false;
}

int ex_sched_submit(struct ex_sched *s, const struct proto_program *p, void *tag,
                    int64_t arrival_us) {
  struct sjob *j = calloc(1, sizeof(*j));
  if (!j)
    return -ENOMEM;
  j->p = p;
  j->tag = tag;
  j->arrival_us = arrival_us;
  j->state = J_WAITING;
  s->n_waiting++;
  if (s->tail)
    s->tail->next = j;
  else
    s->head = j;
  s->tail = j;
  struct cm_diag diag = {0};
  int r = ex_job_init(&j->job, s->x, p, &diag);
  if (r) {
    /* the result keeps its error; outputs were never allocated */
    finish(s, j, r, "%s", diag.msg ? diag.msg : cm_strerror(r));
    cm_diag_fini(&diag);
    return 0;
  }
  if (was_cancelled(s, p->request_id)) {
    s->st.cancelled++;
    finish(s, j, -CM_ECANCELLED, "request cancelled");
    return 0;
  }
  if (p->deadline_us && proto_now_us() > p->deadline_us) {
    s->st.deadline_dropped++;
    finish(s, j, -CM_ETIMEOUT, "deadline passed before the program started");
    return 0;
  }
  j->pf = calloc(p->n_prefixes + 1, sizeof(*j->pf));
  j->im = calloc(p->n_images + 1, sizeof(*j->im));
  if (!j->pf || !j->im) {
    finish(s, j, -ENOMEM, "out of memory");
    return 0;
  }
  int32_t imgtok = s->eng->cfg.image_token_id;
  for (uint32_t i = 0; !r && i < p->n_images; i++)
    if (s->vcache || s->pcache)
      r = key_image(s, &p->images[i], j->im[i].key);
  for (uint32_t i = 0; !r && i < p->n_prefixes; i++) {
    const struct proto_prefix *x = &p->prefixes[i];
    struct sprefix *f = &j->pf[i];
    f->piece = -1;
    f->chain = x->parent < 0 ? 0 : j->pf[x->parent].chain + p->prefixes[x->parent].n_tokens;
    f->n_grid = (x->n_tokens - 1) / GRID;
    f->reserve = s->eng->ops->snap_bytes(s->eng, f->chain + x->n_tokens);
    j->need += f->reserve;
    for (uint32_t t = 0; !p->n_images && t < x->n_tokens; t++)
      j->literal_image |= x->ids[t] == imgtok;
    if (s->pcache) {
      if (!(f->keys = malloc((f->n_grid + 1) * KEYB)))
        r = -ENOMEM;
      else
        r = key_prefix(j, s, i);
    }
  }
  for (uint32_t i = 0; i < p->n_rows; i++) {
    j->rows_left += j->job.n_reads[i] > 0;
    for (uint32_t t = 0; !p->n_images && t < p->rows[i].n_tokens; t++)
      j->literal_image |= p->rows[i].ids[t] == imgtok;
  }
  if (r) {
    finish(s, j, -CM_EINTERNAL, "cache keys: %s", cm_strerror(r));
    return 0;
  }
  if (j->need > s->eng->lim.pool_bytes)
    finish(s, j, -CM_EPROGRAM,
           "the program's prefixes need %zu bytes of snapshots, the pool holds %zu "
           "(--snapshots / --snapshot-pool-bytes)",
           j->need, s->eng->lim.pool_bytes);
  return 0;
}

size_t ex_sched_cancel(struct ex_sched *s, const char *rid) {
  if (!rid || !*rid)
    return 0;
  snprintf(s->cancelled[s->n_cancel++ % CANCEL_RING], PROTO_MAX_ID_BYTES + 1, "%s", rid);
  size_t n = 0;
  for (struct sjob *j = s->head, *next; j; j = next) {
    next = j->next;
    if (j->p->request_id && strcmp(j->p->request_id, rid) == 0) {
      finish(s, j, -CM_ECANCELLED, "request cancelled");
      n++;
    }
  }
  s->st.cancelled += n;
  return n;
}

int ex_sched_post_cancel(struct ex_sched *s, const char *request_id) {
  size_t n = strlen(request_id);
  struct posted *q = malloc(sizeof(*q) + n + 1);
  if (!q)
    return -ENOMEM;
  memcpy(q->rid, request_id, n + 1);
  pthread_mutex_lock(&s->inbox_mu);
  q->next = s->inbox;
  s->inbox = q;
  atomic_store(&s->has_inbox, true);
  pthread_mutex_unlock(&s->inbox_mu);
  return 0;
}

/* Applies the CANCELs posted since the last call (compute thread). */
static void drain_cancels(struct ex_sched *s) {
  if (!atomic_load(&s->has_inbox))
    return;
  pthread_mutex_lock(&s->inbox_mu);
  struct posted *q = s->inbox;
  s->inbox = NULL;
  atomic_store(&s->has_inbox, false);
  pthread_mutex_unlock(&s->inbox_mu);
  while (q) {
    struct posted *next = q->next;
    ex_sched_cancel(s, q->rid);
    free(q);
    q = next;
  }
}

/* ---- admission ------------------------------------------------------------------------------ */

/* The cache lookups of a prefix at admission: the longest cached grid point or end, pinned; the
 * grid points to copy into the cache on the way (seen once before, or the last one before the
 * end of the prefix's images). */
static void lookup_prefix(struct ex_sched *s, struct sjob *j, uint32_t i) {
  const struct proto_prefix *x = &j->p->prefixes[i];
  struct sprefix *f = &j->pf[i];
  f->at = 0;
  f->n_store = 0;
  for (int64_t k = f->n_grid; k >= 0; k--) {
    struct ex_lru_entry *e = ex_lru_get(s->pcache, f->keys[k], true, false);
    if (!e)
      continue;
    f->hit = e;
    f->at = k == (int64_t)f->n_grid ? x->n_tokens : (uint32_t)(k + 1) * GRID;
    break;
  }
  if (f->at == x->n_tokens)
    return;
  uint32_t seen_at = 0, image_at = 0;
  for (uint32_t k = 0; k < f->n_grid; k++)
    if ((k + 1) * GRID > f->at && ex_lru_get(s->seen, f->keys[k], false, false))
      seen_at = (k + 1) * GRID;
  int32_t img = s->eng->cfg.image_token_id;
  for (uint32_t t = x->n_tokens; j->p->n_images && t > 0; t--)
    if (x->ids[t - 1] == img) {
      image_at = (t / GRID) * GRID;
      break;
    }
  if (image_at >= x->n_tokens || image_at <= f->at)
    image_at = 0;
  uint32_t a = seen_at < image_at ? seen_at : image_at, b = seen_at < image_at ? image_at : seen_at;
  if (a && a != b)
    f->store[f->n_store++] = a;
  if (b)
    f->store[f->n_store++] = b;
}

/* Another program in flight computing prefix key `key` (not complete yet). */
static bool computing(const struct ex_sched *s, const struct sjob *self, const uint8_t *key) {
  for (const struct sjob *j = s->head; j; j = j->next) {
    if (j == self || j->state != J_ACTIVE)
      continue;
    for (uint32_t i = 0; i < j->p->n_prefixes; i++) {
      const struct sprefix *f = &j->pf[i];
      if (!f->follow && !f->shared && f->at < j->p->prefixes[i].n_tokens &&
          memcmp(f->keys[f->n_grid], key, KEYB) == 0)
        return true;
    }
  }
  return false;
}

/* Admits a waiting program when the pool has room for its snapshots (after cache hits). */
static bool admit(struct ex_sched *s, struct sjob *j) {
  const struct proto_program *p = j->p;
  size_t need = 0;
  for (uint32_t i = 0; i < p->n_prefixes; i++) {
    struct sprefix *f = &j->pf[i];
    if (s->pcache)
      lookup_prefix(s, j, i);
    f->shared = f->hit && f->at == p->prefixes[i].n_tokens;
    need += f->shared ? 0 : f->reserve;
  }
  if (need > pool_room(s, need)) {
    for (uint32_t i = 0; i < p->n_prefixes; i++) {
      if (j->pf[i].hit)
        ex_lru_unpin(s->pcache, j->pf[i].hit);
      j->pf[i].hit = NULL;
      j->pf[i].shared = false;
      j->pf[i].at = 0;
    }
    return false;
  }
  /* admitted: count the lookups (a prefix another program is computing follows it and counts
   * when it is resolved), remember its grid points as seen */
  for (uint32_t i = 0; s->pcache && i < p->n_prefixes; i++) {
    struct sprefix *f = &j->pf[i];
    if (!f->shared && computing(s, j, f->keys[f->n_grid])) {
      f->follow = true;
    } else if (f->hit) {
      s->st.prefix.hits++;
      s->st.prefix_tokens_reused += f->at;
    } else {
      s->st.prefix.misses++;
    }
    if (f->shared) {
      f->snap = ex_lru_value(f->hit);
      f->started = true;
    }
    for (uint32_t k = 0; k <= f->n_grid; k++)
      if (!ex_lru_get(s->seen, f->keys[k], false, false))
        ex_lru_put(s->seen, f->keys[k], NULL, 1);
  }
  for (uint32_t i = 0; i < p->n_images; i++) {
    struct simage *m = &j->im[i];
    if (!s->vcache)
      continue;
    if ((m->hit = ex_lru_get(s->vcache, m->key, true, false))) {
      m->rows = ex_lru_value(m->hit);
      m->done = true;
      s->st.vision.hits++;
    } /* a miss is counted when the image is looked up again at its vision step */
  }
  j->reserve = need;
  s->reserved += need;
  j->state = J_ACTIVE;
  j->admit_us = mono_us();
  s->n_waiting--;
  s->n_active++;
  return true;
}

/* ---- forming a batch ------------------------------------------------------------------------ */

static bool prefix_ready(const struct sjob *j, uint32_t i) {
  const struct proto_prefix *x = &j->p->prefixes[i];
  const struct sprefix *f = &j->pf[i];
  if (f->at == x->n_tokens || f->follow)
    return false;
  if (x->parent >= 0 && j->pf[x->parent].at != j->p->prefixes[x->parent].n_tokens)
    return false;
  for (uint32_t k = 0; k < x->n_images; k++)
    if (!j->im[x->images[k]].done)
      return false;
  return true;
}

static bool prefix_has_images(const struct ex_sched *s, const struct sjob *j, uint32_t i,
                              uint32_t a, uint32_t b) {
  const struct proto_prefix *x = &j->p->prefixes[i];
  if (!x->n_images)
    return false;
  int32_t img = s->eng->cfg.image_token_id;
  for (uint32_t t = a; t < b; t++)
    if (x->ids[t] == img)
      return true;
  return false;
}

/* The end of prefix i's next piece with `left` tokens to spend: the prefix end when it fits, else
 * the last grid point within reach, never past the next store point; 0 when nothing fits. */
static uint32_t piece_end(const struct sjob *j, uint32_t i, uint32_t a, size_t left) {
  const struct sprefix *f = &j->pf[i];
  uint32_t n = j->p->prefixes[i].n_tokens;
  size_t end = (size_t)a + left < n ? (size_t)a + left : n;
  if (end < n)
    end = end / GRID * GRID;
  for (uint32_t k = 0; k < f->n_store; k++)
    if (f->store[k] > a && f->store[k] < end)
      end = f->store[k];
  return end > a ? (uint32_t)end : 0;
}

/* Adds j's ready work to the batch, at most `limit` tokens of it (this step's share or what is
 * left); an empty batch takes one item whatever its size. */
static int take(struct ex_sched *s, struct sjob *j, size_t limit, size_t read_limit) {
  struct batch *b = &s->b;
  const struct proto_program *p = j->p;
  const struct ex_engine_limits *lim = &s->eng->lim;
  size_t used = 0, used_reads = 0;
  int r;
#define EMPTY (b->n_pieces + b->n_rows + b->n_vis == 0)
#define LEFT (limit > used ? limit - used : 0)
  /* vision items: every image not computed yet */
  for (uint32_t i = 0; i < p->n_images; i++) {
    struct simage *m = &j->im[i];
    size_t k = p->images[i].n_patches / 4;
    if (m->done || m->queued)
      continue;
    if (!EMPTY && (k > LEFT || b->vis_tokens + b->tokens + k > s->budget))
      return 0;
    if ((r = grow((void **)&b->vis, &b->cap_vis, b->n_vis + 1, sizeof(*b->vis))))
      return r;
    b->vis[b->n_vis++] = (struct visitem){j, i};
    b->vis_tokens += k;
    used += k;
    m->queued = true;
    j->touched = true;
  }
  /* prefix pieces: one per prefix per step (it advances one snapshot); a piece taken in the first
   * pass may grow in the second */
  for (uint32_t i = 0; i < p->n_prefixes; i++) {
    struct sprefix *f = &j->pf[i];
    if (!prefix_ready(j, i))
      continue;
    if (j->literal_image ? b->has_image_rows : false)
      continue;
    if (f->piece >= 0) {
      struct piece *pc = &b->pieces[f->piece];
      uint32_t end = piece_end(j, i, pc->a, (size_t)(pc->b - pc->a) + LEFT);
      if (end > pc->b && (!prefix_has_images(s, j, i, pc->b, end) || !b->has_literal)) {
        b->tokens += end - pc->b;
        j->step_tokens += end - pc->b;
        used += end - pc->b;
        b->has_image_rows |= prefix_has_images(s, j, i, pc->b, end);
        pc->b = end;
      }
      continue;
    }
    if (b->n_pieces + b->n_rows >= lim->max_seqs)
      break;
    size_t room = s->budget > b->tokens + b->vis_tokens ? s->budget - b->tokens - b->vis_tokens : 0;
    size_t avail = LEFT < room ? LEFT : room;
    uint32_t end = piece_end(j, i, f->at, EMPTY ? (avail > GRID ? avail : GRID) : avail);
    if (!end)
      continue;
    bool imgs = prefix_has_images(s, j, i, f->at, end);
    if (imgs && b->has_literal)
      continue;
    if ((r = grow((void **)&b->pieces, &b->cap_pieces, b->n_pieces + 1, sizeof(*b->pieces))))
      return r;
    f->piece = (int32_t)b->n_pieces;
    b->pieces[b->n_pieces++] = (struct piece){j, i, f->at, end};
    b->tokens += end - f->at;
    j->step_tokens += end - f->at;
    used += end - f->at;
    b->has_image_rows |= imgs;
    b->has_literal |= j->literal_image;
    j->touched = true;
  }
  /* rows in program order: a row runs once its prefix is complete; the first that does not fit
   * ends this program's share */
  if (j->literal_image && b->has_image_rows)
    return 0;
  while (j->next_row < p->n_rows) {
    uint32_t i = j->next_row;
    const struct proto_row *w = &p->rows[i];
    if (!j->job.n_reads[i]) {
      j->next_row++;
      continue;
    }
    if (w->prefix >= 0 && j->pf[w->prefix].at != p->prefixes[w->prefix].n_tokens)
      break;
    size_t nr = j->job.n_reads[i];
    if (b->n_pieces + b->n_rows >= lim->max_seqs || b->reads + nr > lim->max_readouts ||
        (!EMPTY && (w->n_tokens > LEFT || b->tokens + b->vis_tokens + w->n_tokens > s->budget ||
                    used_reads + nr > read_limit || b->reads + nr > s->read_budget)) ||
        b->tokens + w->n_tokens > lim->max_tokens)
      break;
    if ((r = grow((void **)&b->rows, &b->cap_rows, b->n_rows + 1, sizeof(*b->rows))))
      return r;
    b->rows[b->n_rows++] = (struct rowitem){j, i, b->reads};
    b->reads += nr;
    used_reads += nr;
    b->tokens += w->n_tokens;
    j->step_tokens += w->n_tokens;
    used += w->n_tokens;
    b->has_literal |= j->literal_image;
    j->next_row++;
    j->touched = true;
  }
  return 0;
#undef EMPTY
#undef LEFT
}

static bool has_ready_work(const struct sjob *j) {
  const struct proto_program *p = j->p;
  for (uint32_t i = 0; i < p->n_images; i++)
    if (!j->im[i].done)
      return true;
  for (uint32_t i = 0; i < p->n_prefixes; i++)
    if (prefix_ready(j, i))
      return true;
  for (uint32_t i = j->next_row; i < p->n_rows; i++) {
    if (!j->job.n_reads[i])
      continue;
    int32_t pr = p->rows[i].prefix;
    return pr < 0 || j->pf[pr].at == p->prefixes[pr].n_tokens;
  }
  return false;
}

/* ---- running a batch ------------------------------------------------------------------------ */

/* A prefix's snapshot when its first piece runs: a copy of the partial cache hit, of its parent's
 * snapshot, or a fresh one. */
static int start_prefix(struct ex_sched *s, struct sjob *j, uint32_t i, struct cm_diag *diag) {
  struct sprefix *f = &j->pf[i];
  if (f->started)
    return 0;
  int32_t parent = j->p->prefixes[i].parent;
  void *from = f->hit ? ex_lru_value(f->hit) : parent >= 0 ? j->pf[parent].snap : NULL;
  int r = s->eng->ops->snap_new(s->eng, from, &f->snap, diag);
  if (f->hit) {
    ex_lru_unpin(s->pcache, f->hit);
    f->hit = NULL;
  }
  if (!r)
    f->started = true;
  return r;
}

/* Copies a snapshot that reached one of its store points into the prefix cache (when the pool
 * has room for the copy). */
static void store_point(struct ex_sched *s, struct sjob *j, uint32_t i) {
  struct sprefix *f = &j->pf[i];
  bool due = false;
  for (uint32_t k = 0; k < f->n_store; k++)
    due |= f->store[k] == f->at;
  if (!due || !s->pcache || f->at % GRID)
    return;
  const uint8_t *key = f->keys[f->at / GRID - 1];
  size_t bytes = s->eng->ops->snap_bytes(s->eng, f->chain + f->at);
  if (ex_lru_get(s->pcache, key, false, false) || bytes > ex_lru_budget(s->pcache) ||
      pool_room(s, bytes) < bytes)
    return;
  void *copy = NULL;
  struct cm_diag d = {0};
  if (s->eng->ops->snap_new(s->eng, f->snap, &copy, &d) == 0)
    ex_lru_put(s->pcache, key, copy, bytes);
  cm_diag_fini(&d);
}

/* A prefix just completed moves its snapshot into the cache at once, pinned by its program (which
 * only reads it from now on: children copy it, rows read it), so programs in flight that wait for
 * the same prefix (follow) take it now rather than computing it again. Its pool reservation
 * becomes the cache's. */
static void publish(struct ex_sched *s, struct sjob *j, uint32_t i) {
  struct sprefix *f = &j->pf[i];
  if (!s->pcache || f->shared || !f->snap)
    return;
  size_t bytes = s->eng->ops->snap_bytes(s->eng, f->chain + f->at);
  if (!ex_lru_try_put(s->pcache, f->keys[f->n_grid], f->snap, bytes))
    return; /* kept by the program; released at its end as before */
  f->hit = ex_lru_get(s->pcache, f->keys[f->n_grid], true, false);
  f->shared = true;
  s->reserved -= f->reserve;
  j->reserve -= f->reserve;
  f->reserve = 0;
}

/* A following prefix: takes the published snapshot when it is there (a hit), stops following
 * when nobody computes it any more (then computes it itself: a miss). */
static void resolve_follow(struct ex_sched *s, struct sjob *j, uint32_t i) {
  struct sprefix *f = &j->pf[i];
  if (!f->follow)
    return;
  struct ex_lru_entry *e = ex_lru_get(s->pcache, f->keys[f->n_grid], true, false);
  if (e) {
    if (f->hit)
      ex_lru_unpin(s->pcache, f->hit); /* a partial hit it no longer needs */
    f->hit = e;
    f->snap = ex_lru_value(e);
    f->shared = f->started = true;
    f->at = j->p->prefixes[i].n_tokens;
    f->follow = false;
    s->reserved -= f->reserve;
    j->reserve -= f->reserve;
    f->reserve = 0;
    s->st.prefix.hits++;
    s->st.prefix_tokens_reused += f->at;
  } else if (!computing(s, j, f->keys[f->n_grid])) {
    f->follow = false;
    s->st.prefix.misses++;
  }
}

static int run_vision(struct ex_sched *s, struct cm_diag *diag) {
  struct batch *b = &s->b;
  for (size_t v = 0; v < b->n_vis; v++) {
    struct sjob *j = b->vis[v].j;
    uint32_t i = b->vis[v].image;
    struct simage *m = &j->im[i];
    m->queued = false;
    if (j->state != J_ACTIVE)
      continue;
    const struct proto_image *im = &j->p->images[i];
    int64_t t0 = mono_us();
    /* the same image earlier in this step, or cached since admission */
    struct ex_lru_entry *e = s->vcache ? ex_lru_get(s->vcache, m->key, true, false) : NULL;
    if (e) {
      m->hit = e;
      m->rows = ex_lru_value(e);
      m->done = true;
      s->st.vision.hits++;
      continue;
    }
    s->st.vision.misses += s->vcache != NULL;
    if (!(m->rows = malloc((size_t)(im->n_patches / 4) * s->h * sizeof(float))))
      return cm_diag_set(diag, -ENOMEM, "out of memory for image rows");
    struct cm_diag d = {0};
    int r = s->eng->ops->vision(s->eng, im->pixels, im->n_patches, im->grid_thw,
                                j->p->deadline_us, m->rows, &d);
    j->t_vision += mono_us() - t0;
    s->cur.vision_us += mono_us() - t0;
    if (r == -CM_ETIMEOUT) { /* the deadline passed mid-tower: the rest is not run */
      s->st.deadline_dropped++;
      finish(s, j, -CM_ETIMEOUT, "deadline passed in the vision tower (images[%u])", i);
      cm_diag_fini(&d);
      continue;
    }
    if (r && program_fault(r)) {
      finish(s, j, -CM_EPROGRAM, "images[%u]: %s", i, d.msg ? d.msg : cm_strerror(r));
      cm_diag_fini(&d);
      continue;
    }
    if (r) {
      cm_diag_set(diag, r, "%s", d.msg ? d.msg : cm_strerror(r));
      cm_diag_fini(&d);
      return r;
    }
    m->done = true;
    /* shared at once with later images of the same content */
    if (s->vcache && ex_lru_put(s->vcache, m->key, m->rows,
                                (size_t)(im->n_patches / 4) * s->h * sizeof(float)))
      m->hit = ex_lru_get(s->vcache, m->key, true, false);
  }
  return 0;
}

/* Merged image rows [cnt(a), cnt(b)) of prefix i into dst; returns the rows written. */
static size_t piece_image_rows(const struct ex_sched *s, const struct sjob *j, uint32_t i,
                               uint32_t a, uint32_t b, float *dst) {
  const struct proto_program *p = j->p;
  const struct proto_prefix *x = &p->prefixes[i];
  int32_t img = s->eng->cfg.image_token_id;
  size_t first = 0, n = 0;
  if (!x->n_images)
    return 0; /* text only: a literal <|image_pad|> is an ordinary token */
  for (uint32_t t = 0; t < a; t++)
    first += x->ids[t] == img;
  for (uint32_t t = a; t < b; t++)
    n += x->ids[t] == img;
  for (size_t q = 0; q < n; q++) {
    size_t row = first + q, k = 0;
    while (row >= p->images[x->images[k]].n_patches / 4)
      row -= p->images[x->images[k++]].n_patches / 4;
    if (dst)
      memcpy(dst + q * s->h, j->im[x->images[k]].rows + row * s->h, s->h * sizeof(float));
  }
  return n;
}

/* The launch: every piece then every row of the batch. A program fault of the engine (a limit)
 * re-runs the launch per program so only the program at fault fails. */
static int run_launch(struct ex_sched *s, struct sjob *only, struct cm_diag *diag) {
  struct batch *b = &s->b;
  size_t ns = 0, n_pos = 0, n_img = 0, n_read = 0, tokens = 0;
  int r = 0;
  for (size_t k = 0; k < b->n_pieces; k++) {
    struct piece *pc = &b->pieces[k];
    if ((only && pc->j != only) || pc->j->state != J_ACTIVE)
      continue;
    n_pos += pc->b - pc->a;
    n_img += piece_image_rows(s, pc->j, pc->prefix, pc->a, pc->b, NULL);
  }
  if ((r = grow((void **)&s->seqs, &s->cap_seqs, b->n_pieces + b->n_rows + 1, sizeof(*s->seqs))) ||
      (r = grow((void **)&s->pos, &s->cap_pos, 3 * n_pos + 1, sizeof(int32_t))) ||
      (r = grow((void **)&s->img, &s->cap_img, (n_img + 1) * s->h, sizeof(float))) ||
      (r = grow((void **)&s->reads, &s->cap_reads, b->reads + 1, sizeof(size_t))) ||
      (r = grow((void **)&s->hid, &s->cap_hid, (b->reads + 1) * s->h, sizeof(float))))
    return cm_diag_set(diag, r, "out of memory for a launch");
  size_t at_pos = 0, at_img = 0;
  for (size_t k = 0; k < b->n_pieces; k++) {
    struct piece *pc = &b->pieces[k];
    struct sjob *j = pc->j;
    if ((only && j != only) || j->state != J_ACTIVE)
      continue;
    struct cm_diag d = {0};
    if ((r = start_prefix(s, j, pc->prefix, &d))) {
      if (!program_fault(r) && r != -ENOMEM) {
        cm_diag_set(diag, r, "%s", d.msg ? d.msg : cm_strerror(r));
        cm_diag_fini(&d);
        return r;
      }
      finish(s, j, -CM_EINTERNAL, "snapshot for prefixes[%u]: %s", pc->prefix,
             d.msg ? d.msg : cm_strerror(r));
      cm_diag_fini(&d);
      continue;
    }
    const struct proto_prefix *x = &j->p->prefixes[pc->prefix];
    uint32_t n = pc->b - pc->a;
    int32_t *pos = s->pos + at_pos;
    for (int a = 0; a < 3; a++)
      memcpy(pos + (size_t)a * n, x->pos + (size_t)a * x->n_tokens + pc->a, n * sizeof(int32_t));
    at_pos += 3 * (size_t)n;
    at_img += piece_image_rows(s, j, pc->prefix, pc->a, pc->b, s->img + at_img * s->h);
    s->seqs[ns++] = (struct ex_engine_seq){.snap = j->pf[pc->prefix].snap, .advance = true,
                                           .chunked = pc->a > 0, .ids = x->ids + pc->a,
                                           .pos = pos, .n = n};
    tokens += n;
  }
  for (size_t k = 0; k < b->n_rows; k++) {
    struct rowitem *ri = &b->rows[k];
    struct sjob *j = ri->j;
    if ((only && j != only) || j->state != J_ACTIVE)
      continue;
    const struct proto_row *w = &j->p->rows[ri->row];
    ri->rd = n_read;
    n_read += ex_job_row_reads(&j->job, ri->row, tokens, s->reads + n_read);
    s->seqs[ns++] = (struct ex_engine_seq){.snap = w->prefix < 0 ? NULL : j->pf[w->prefix].snap,
                                           .ids = w->ids, .pos = w->pos, .n = w->n_tokens};
    tokens += w->n_tokens;
  }
  if (!ns)
    return 0;
  int64_t t0 = mono_us();
  struct cm_diag d = {0};
  r = s->eng->ops->forward(s->eng, s->seqs, ns, at_img ? s->img : NULL, at_img, s->reads, n_read,
                           s->hid, &d);
  int64_t dt = mono_us() - t0;
  s->cur.forward_us += dt;
  if (r && program_fault(r)) {
    if (!only) {
      /* one program's fault: each program alone finds it (nothing was advanced: the engines
       * check their limits before any work) */
      cm_diag_fini(&d);
      for (struct sjob *j = s->head; j; j = j->next)
        if (j->touched && j->state == J_ACTIVE && (r = run_launch(s, j, diag)))
          return r;
      return 1; /* readouts done per program */
    }
    finish(s, only, -CM_EPROGRAM, "%s", d.msg ? d.msg : cm_strerror(r));
    cm_diag_fini(&d);
    return 0;
  }
  if (r) {
    cm_diag_set(diag, r, "%s", d.msg ? d.msg : cm_strerror(r));
    cm_diag_fini(&d);
    return r;
  }
  s->st.step_tokens += tokens;
  s->cur.tokens += tokens;
  s->cur.readouts += n_read;
  /* the launch's time, shared by tokens: a prefix piece's share is prefix time, a row's rows time */
  for (size_t k = 0; k < b->n_pieces; k++) {
    struct piece *pc = &b->pieces[k];
    if ((only && pc->j != only) || pc->j->state != J_ACTIVE)
      continue;
    pc->j->t_prefix += dt * (int64_t)(pc->b - pc->a) / (int64_t)tokens;
    struct sprefix *f = &pc->j->pf[pc->prefix];
    f->at = pc->b;
    store_point(s, pc->j, pc->prefix);
    if (f->at == pc->j->p->prefixes[pc->prefix].n_tokens)
      publish(s, pc->j, pc->prefix);
  }
  /* the group rows' LM log-probs of the whole launch in one engine call (ex_lm_batch), its time
   * shared by the programs' declared log-probs */
  ex_lm_batch_reset(&s->lmb);
  drain_cancels(s);
  int64_t now = proto_now_us();
  for (size_t k = 0; k < b->n_rows && !r; k++) {
    struct rowitem *ri = &b->rows[k];
    struct sjob *j = ri->j;
    if ((only && j != only) || j->state != J_ACTIVE)
      continue;
    if (j->p->deadline_us && now > j->p->deadline_us) {
      /* past its deadline after the forward: none of its rows' log-probs are computed (on the
       * CPU a launch's batched log-probs are seconds of work) */
      s->st.deadline_dropped++;
      finish(s, j, -CM_ETIMEOUT, "deadline passed while in flight");
      continue;
    }
    r = ex_job_row_lm_declare(&j->job, ri->row, ri->rd, &s->lmb);
  }
  int64_t tl = mono_us();
  if (!r)
    r = ex_lm_batch_run(&s->lmb, s->eng, diag);
  if (r)
    return r;
  tl = mono_us() - tl;
  s->cur.logprob_us += tl;
  for (size_t g = 0; g < s->lmb.n_seg && s->lmb.n; g++) {
    size_t e = g + 1 < s->lmb.n_seg ? s->lmb.seg[g + 1] : s->lmb.n;
    struct sjob *j = (struct sjob *)((char *)s->lmb.seg_job[g] - offsetof(struct sjob, job));
    j->t_readout += tl * (int64_t)(e - s->lmb.seg[g]) / (int64_t)s->lmb.n;
  }
  for (size_t k = 0; k < b->n_rows; k++) {
    struct rowitem *ri = &b->rows[k];
    struct sjob *j = ri->j;
    if ((only && j != only) || j->state != J_ACTIVE)
      continue;
    j->t_rows += dt * (int64_t)j->p->rows[ri->row].n_tokens / (int64_t)tokens;
    drain_cancels(s); /* may finish this program or a later one of the batch */
    if (j->state != J_ACTIVE)
      continue;
    if (j->p->deadline_us && proto_now_us() > j->p->deadline_us) {
      /* its readouts are work too: a program past its deadline reads no more rows */
      s->st.deadline_dropped++;
      finish(s, j, -CM_ETIMEOUT, "deadline passed while in flight");
      continue;
    }
    int64_t t1 = mono_us();
    struct cm_diag d2 = {0};
    int rr = ex_job_row_readouts(&j->job, ri->row, ri->rd, s->hid, &s->lmb, &d2);
    j->t_readout += mono_us() - t1;
    s->cur.readout_us += mono_us() - t1;
    if (rr == -CM_EPROGRAM || rr == -EINVAL) {
      finish(s, j, -CM_EPROGRAM, "rows[%u]: %s", ri->row, d2.msg ? d2.msg : cm_strerror(rr));
    } else if (rr) {
      cm_diag_set(diag, rr, "%s", d2.msg ? d2.msg : cm_strerror(rr));
      cm_diag_fini(&d2);
      return rr;
    } else {
      j->rows_left--;
    }
    cm_diag_fini(&d2);
  }
  return 0;
}

/* A program whose every image, prefix and row is done: heads, then its result. */
static int try_finish(struct ex_sched *s, struct sjob *j, struct cm_diag *diag) {
  const struct proto_program *p = j->p;
  if (j->state != J_ACTIVE || j->rows_left)
    return 0;
  for (uint32_t i = 0; i < p->n_images; i++)
    if (!j->im[i].done)
      return 0;
  for (uint32_t i = 0; i < p->n_prefixes; i++)
    if (j->pf[i].at != p->prefixes[i].n_tokens)
      return 0;
  int64_t t0 = mono_us();
  struct cm_diag d = {0};
  int r = ex_job_heads(&j->job, &d);
  j->t_heads += mono_us() - t0;
  if (r == -CM_EPROGRAM) {
    finish(s, j, r, "%s", d.msg ? d.msg : cm_strerror(r));
    r = 0;
  } else if (r) {
    cm_diag_set(diag, r, "%s", d.msg ? d.msg : cm_strerror(r));
  } else {
    finish(s, j, 0, "%s", "");
  }
  cm_diag_fini(&d);
  return r;
}

int ex_sched_step(struct ex_sched *s, struct cm_diag *diag) {
  int64_t t_step = mono_us();
  drain_cancels(s);
  int64_t now = proto_now_us();
  /* 1. work past its deadline is dropped, nothing more of it runs */
  for (struct sjob *j = s->head, *next; j; j = next) {
    next = j->next;
    if (j->p->deadline_us && now > j->p->deadline_us) {
      s->st.deadline_dropped++;
      finish(s, j, -CM_ETIMEOUT, "deadline passed %s",
             j->state == J_WAITING ? "while waiting for snapshot memory" : "while in flight");
    }
  }
  /* 2. admission in arrival order while the pool has room */
  for (struct sjob *j = s->head; j; j = j->next)
    if (j->state == J_WAITING && !admit(s, j))
      break;
  /* 3. the batch: a fair share for each program with ready work, then the rest to the oldest */
  struct batch *b = &s->b;
  b->n_pieces = b->n_rows = b->n_vis = 0;
  b->tokens = b->vis_tokens = b->reads = 0;
  b->has_image_rows = b->has_literal = false;
  size_t n_ready = 0;
  for (struct sjob *j = s->head; j; j = j->next) {
    for (uint32_t i = 0; j->state == J_ACTIVE && j->pf && i < j->p->n_prefixes; i++)
      resolve_follow(s, j, i);
    j->touched = false;
    j->step_tokens = 0;
    for (uint32_t i = 0; j->pf && i < j->p->n_prefixes; i++)
      j->pf[i].piece = -1;
    n_ready += j->state == J_ACTIVE && has_ready_work(j);
  }
  int r = 0;
  if (!n_ready) {
    for (struct sjob *j = s->head, *next; j && !r; j = next) {
      next = j->next;
      r = try_finish(s, j, diag);
    }
    if (r)
      goto sticky;
    return 0;
  }
  size_t share = s->budget / n_ready, read_share = s->read_budget / n_ready;
  share = share < GRID ? GRID : share;
  read_share = read_share < 1 ? 1 : read_share;
  for (int pass = 0; pass < 2 && !r; pass++)
    for (struct sjob *j = s->head; j && !r; j = j->next) {
      size_t left = s->budget > b->tokens + b->vis_tokens ? s->budget - b->tokens - b->vis_tokens
                                                          : 0;
      size_t left_reads = s->read_budget > b->reads ? s->read_budget - b->reads : 0;
      if (j->state == J_ACTIVE)
        r = take(s, j, pass == 0 ? share : left, pass == 0 ? read_share : left_reads);
    }
  if (r)
    return cm_diag_set(diag, r, "out of memory forming a batch");
  size_t touched = 0;
  for (struct sjob *j = s->head; j; j = j->next) {
    touched += j->touched;
    j->steps += j->touched;
  }
  s->st.steps++;
  s->st.step_programs += touched;
  s->cur = (struct ex_sched_step_info){.step = s->st.steps, .programs = (uint32_t)touched,
                                       .active = (uint32_t)s->n_active,
                                       .waiting = (uint32_t)s->n_waiting,
                                       .images = (uint32_t)b->n_vis, .image_rows = b->vis_tokens,
                                       .pieces = (uint32_t)b->n_pieces,
                                       .rows = (uint32_t)b->n_rows};
  uint64_t finished0 = s->st.finished;
  /* 4. vision, then one launch of pieces and rows, then the finished programs */
  if ((r = run_vision(s, diag)))
    goto sticky;
  r = run_launch(s, NULL, diag);
  if (r < 0)
    goto sticky;
  int64_t t_heads = mono_us();
  for (struct sjob *j = s->head, *next; j; j = next) {
    next = j->next;
    if ((r = try_finish(s, j, diag)))
      goto sticky;
  }
  if (s->on_step) {
    s->cur.heads_us = mono_us() - t_heads;
    s->cur.finished = (uint32_t)(s->st.finished - finished0);
    s->cur.total_us = mono_us() - t_step;
    s->on_step(s->on_step_ctx, &s->cur);
  }
  return 0;
sticky:
  ex_sched_fail_all(s, -CM_EUNAVAILABLE, "executor retired");
  return r;
}

void ex_sched_step_format(const struct ex_sched_step_info *i, char *buf, size_t n) {
  snprintf(buf, n,
           "step=%llu programs=%u active=%u waiting=%u images=%u image_rows=%llu pieces=%u "
           "rows=%u tokens=%llu readouts=%llu finished=%u vision_us=%lld forward_us=%lld "
           "logprob_us=%lld readout_us=%lld heads_us=%lld total_us=%lld",
           (unsigned long long)i->step, i->programs, i->active, i->waiting, i->images,
           (unsigned long long)i->image_rows, i->pieces, i->rows, (unsigned long long)i->tokens,
           (unsigned long long)i->readouts, i->finished, (long long)i->vision_us,
           (long long)i->forward_us, (long long)i->logprob_us, (long long)i->readout_us,
           (long long)i->heads_us, (long long)i->total_us);
}

void ex_sched_fail_all(struct ex_sched *s, int code, const char *msg) {
  while (s->head)
    finish(s, s->head, code, "%s", msg);
}

bool ex_sched_pop(struct ex_sched *s, void **ret_tag, const struct proto_program **ret_p,
                  struct proto_result *ret_res) {
  struct sjob *j = s->done_head;
  if (!j)
    return false;
  s->done_head = j->next;
  if (!s->done_head)
    s->done_tail = NULL;
  *ret_tag = j->tag;
  *ret_p = j->p;
  *ret_res = j->job.res;
  memset(&j->job.res, 0, sizeof(j->job.res));
  job_free(j);
  return true;
}

size_t ex_sched_held(const struct ex_sched *s) {
  return s->n_waiting + s->n_active;
}

void ex_sched_stats(const struct ex_sched *s, struct ex_sched_stats *ret) {
  *ret = s->st;
  ret->waiting = s->n_waiting;
  ret->active = s->n_active;
  ret->pool_bytes = s->eng->lim.pool_bytes;
  ret->pool_reserved_bytes = s->reserved;
  struct ex_lru_stats ls = {0};
  if (s->pcache) {
    ex_lru_stats(s->pcache, &ls);
    ret->prefix.evictions = ls.evictions;
    ret->prefix.inserts = ls.inserts;
    ret->prefix.bytes = ls.bytes;
    ret->prefix.entries = ls.entries;
  }
  if (s->vcache) {
    ex_lru_stats(s->vcache, &ls);
    ret->vision.evictions = ls.evictions;
    ret->vision.inserts = ls.inserts;
    ret->vision.bytes = ls.bytes;
    ret->vision.entries = ls.entries;
  }
}

int ex_sched_new(struct ex_runner *x, const struct ex_sched_options *opt, struct ex_sched **ret,
                 struct cm_diag *diag) {
  static const struct ex_sched_options none = {0};
  if (!opt)
    opt = &none;
  struct ex_engine *e = ex_runner_engine(x);
  /* the CPU's steps are shorter: its readouts (a full-vocabulary log-softmax per LM feature)
   * cost far more than its tokens, and a step is what a new program, a deadline or a CANCEL
   * waits for */
  size_t def = strcmp(e->ops->name, "cpu") == 0 ? DEF_BATCH_TOKENS_CPU : DEF_BATCH_TOKENS;
  size_t budget = opt->max_batch_tokens ? opt->max_batch_tokens
                                        : (e->lim.max_tokens < def ? e->lim.max_tokens : def);
  if (budget < GRID || budget > e->lim.max_tokens)
    return cm_diag_set(diag, -EINVAL, "--max-batch-tokens %zu: within %d .. %zu (the engine's "
                       "tokens per launch)", budget, GRID, e->lim.max_tokens);
  size_t defr = strcmp(e->ops->name, "cpu") == 0 ? DEF_BATCH_READS_CPU : e->lim.max_readouts;
  size_t reads = opt->max_batch_readouts ? opt->max_batch_readouts : defr;
  if (reads > e->lim.max_readouts)
    return cm_diag_set(diag, -EINVAL, "--max-batch-readouts %zu: at most %zu (the engine's "
                       "readout rows per launch)", reads, e->lim.max_readouts);
  size_t maxp = opt->max_programs ? opt->max_programs : DEF_PROGRAMS;
  if (maxp > EX_SCHED_MAX_PROGRAMS)
    return cm_diag_set(diag, -EINVAL, "--max-programs %zu: at most %d", maxp,
                       EX_SCHED_MAX_PROGRAMS);
  struct ex_sched *s = calloc(1, sizeof(*s));
  if (!s)
    return -ENOMEM;
  s->x = x;
  s->eng = e;
  s->h = (size_t)e->cfg.hidden_size;
  s->budget = budget;
  s->read_budget = reads;
  s->max_programs = maxp;
  s->on_step = opt->on_step;
  s->on_step_ctx = opt->on_step_ctx;
  pthread_mutex_init(&s->inbox_mu, NULL);
  int r = key_root(s);
  if (!r && opt->prefix_cache_bytes &&
      (!(r = ex_lru_new(opt->prefix_cache_bytes, snap_free_cb, e, &s->pcache))))
    r = ex_lru_new(SEEN_KEYS, NULL, NULL, &s->seen);
  if (!r && opt->vision_cache_bytes)
    r = ex_lru_new(opt->vision_cache_bytes, rows_free_cb, NULL, &s->vcache);
  if (r) {
    ex_sched_free(s);
    return cm_diag_set(diag, r, "scheduler: %s", cm_strerror(r));
  }
  *ret = s;
  return 0;
}

void ex_sched_free(struct ex_sched *s) {
  if (!s)
    return;
  while (s->head) {
    struct sjob *j = s->head;
    finish(s, j, -CM_EUNAVAILABLE, "executor stopped");
  }
  while (s->done_head) {
    struct sjob *j = s->done_head;
    s->done_head = j->next;
    job_free(j);
  }
  ex_lru_free(s->pcache);
  ex_lru_free(s->vcache);
  ex_lru_free(s->seen);
  for (struct posted *q = s->inbox, *next; q; q = next) {
    next = q->next;
    free(q);
  }
  pthread_mutex_destroy(&s->inbox_mu);
  free(s->b.pieces), free(s->b.rows), free(s->b.vis);
  free(s->seqs), free(s->pos), free(s->img), free(s->reads), free(s->hid);
  ex_lm_batch_fini(&s->lmb);
  free(s);
}

/* ---- one program alone ---------------------------------------------------------------------- */

int ex_runner_run(struct ex_runner *x, const struct proto_program *p, struct proto_result *res,
                  struct cm_diag *diag) {
  struct ex_sched *s = NULL;
  int r = ex_sched_new(x, NULL, &s, diag);
  if (r)
    return r;
  if ((r = ex_sched_submit(s, p, NULL, mono_us()))) {
    ex_sched_free(s);
    return r;
  }
  while (ex_sched_held(s) && !(r = ex_sched_step(s, diag)))
    ;
  void *tag;
  const struct proto_program *q;
  if (ex_sched_pop(s, &tag, &q, res)) {
    if (!r && res->status) {
      r = res->status;
      cm_diag_set(diag, r, "%s", res->message ? res->message : cm_strerror(r));
    }
  }
  ex_sched_free(s);
  return r;
}
