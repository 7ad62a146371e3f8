/* The program runner (ex_program.h) over an engine (ex_engine.h: float32 CPU or bf16 CUDA): the
 * model's engine and heads, and the per-program part of the work (ex_job.h): the checks before any
 * work, the readouts of each row after its launch, the heads at the end. The scheduler
 * (ex_sched.c) decides what runs in which launch. */
#include "ex_program.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ex_engine.h"
#include "ex_head.h"
#include "ex_job.h"

struct loaded_head {
  const struct ex_head_kind *kind; /* registry entry */
  void *state;                     /* the kind's loaded weights */
  size_t n_out;                    /* k, floats per row */
};

struct ex_runner {
  const struct cm_model_dir *dir;   /* borrowed */
  struct ex_engine *eng;            /* backbone and vision tower on the chosen device, owned */
  struct loaded_head *heads;        /* [n_heads] */
  size_t n_heads;                   /* heads this model provides */
  char *model_id;                   /* health: model id, heap */
  char *revision;                   /* health: revision, heap */
};

static char *manifest_string(const struct cm_model_dir *dir, const char *key) {
  json_object *v = NULL;
  if (json_object_object_get_ex(dir->manifest, key, &v) && json_object_is_type(v, json_type_string))
    return strdup(json_object_get_string(v));
  return NULL;
}

static char *default_revision(const struct cm_model_dir *dir) {
  json_object *files = NULL, *w = NULL, *h = NULL;
  if (json_object_object_get_ex(dir->manifest, "files", &files) &&
      json_object_object_get_ex(files, "weights.safetensors", &w) &&
      json_object_object_get_ex(w, "sha256", &h) && json_object_is_type(h, json_type_string))
    return strndup(json_object_get_string(h), 12);
  return strdup("unknown");
}

static char *default_id(const struct cm_model_dir *dir) {
  const char *p = dir->path;
  size_t n = strlen(p);
  while (n > 1 && p[n - 1] == '/')
    n--;
  size_t s = n;
  while (s > 0 && p[s - 1] != '/')
    s--;
  return strndup(p + s, n - s);
}

int ex_runner_new(const struct cm_model_dir *dir, const struct ex_runner_options *opt,
                  struct ex_runner **ret_runner, struct cm_diag *diag) {
  struct ex_runner *x = calloc(1, sizeof(*x));
  if (!x)
    return -ENOMEM;
  x->dir = dir;
  int device = ex_engine_device(opt ? opt->device : NULL);
  struct ex_engine_options eo = {0};
  if (opt)
    eo = opt->engine;
  /* one numerics mode per runner: asked for, else the device's (CUDA: bf16) or the directory's */
  eo.numerics = device >= 0 ? CM_NUMERICS_BF16 : dir->numerics;
  int r = 0;
  if (opt && opt->numerics && cm_numerics_parse(opt->numerics, &eo.numerics) != 0)
    r = cm_diag_set(diag, -EINVAL, "unknown numerics \"%s\" (fp32 or bf16)", opt->numerics);
  else if (device >= 0 && eo.numerics != CM_NUMERICS_BF16)
    r = cm_diag_set(diag, -CM_EUNSUPPORTED,
                    "the CUDA engine serves the bf16 numerics only "
                    "(--numerics bf16); fp32 runs with --device cpu");
  if (r)
    goto fail;
  if (device == -2)
    r = cm_diag_set(diag, -EINVAL, "unknown device \"%s\" (cpu, cuda or cuda:N)", opt->device);
  else if (device == -1)
    r = ex_engine_cpu_new(dir, &eo, &x->eng, diag);
  else
    r = ex_engine_cuda_new(dir, device, &eo, &x->eng, diag);
  if (r)
    goto fail;
  const struct ex_qwen35_config cfg = x->eng->cfg;
  const struct ex_family *fam = ex_family_find(dir->family);
  if (!fam) {
    r = cm_diag_set(diag, -CM_EUNSUPPORTED, "%s: family \"%s\" has no executor family in this "
                    "build", dir->path, dir->family);
    goto fail;
  }
  const struct ex_head_kind *const *kinds = fam->heads; /* only this family's heads */
  size_t n_kinds = 0;
  while (kinds[n_kinds])
    n_kinds++;
  x->heads = calloc(n_kinds + 1, sizeof(*x->heads));
  if (!x->heads) {
    r = -ENOMEM;
    goto fail;
  }
  json_object *listed = NULL; /* manifest "head_kinds": the only kinds to load, when present */
  if (!json_object_object_get_ex(dir->manifest, "head_kinds", &listed) ||
      !json_object_is_type(listed, json_type_array))
    listed = NULL;
  for (size_t i = 0; i < n_kinds; i++) {
    struct loaded_head *h = &x->heads[x->n_heads];
    bool wanted = !listed;
    for (size_t j = 0; listed && j < json_object_array_length(listed) && !wanted; j++)
      wanted = strcmp(json_object_get_string(json_object_array_get_idx(listed, j)),
                      kinds[i]->name) == 0;
    if (!wanted)
      continue;
    r = kinds[i]->load(dir, (size_t)cfg.hidden_size, &h->state, &h->n_out, diag);
    if (r == -ENOENT) {
      r = 0;
      continue;
    }
    if (r)
      goto fail;
    h->kind = kinds[i];
    x->n_heads++;
  }
  x->model_id = manifest_string(dir, "model_id");
  if (!x->model_id)
    x->model_id = default_id(dir);
  x->revision = manifest_string(dir, "revision");
  if (!x->revision)
    x->revision = default_revision(dir);
  if (!x->model_id || !x->revision) {
    r = -ENOMEM;
    goto fail;
  }
  *ret_runner = x;
  return 0;
fail:
  ex_runner_free(x);
  return r;
}

void ex_runner_free(struct ex_runner *runner) {
  if (!runner)
    return;
  for (size_t i = 0; i < runner->n_heads; i++)
    runner->heads[i].kind->free_state(runner->heads[i].state);
  free(runner->heads);
  if (runner->eng)
    runner->eng->ops->free(runner->eng);
  free(runner->model_id);
  free(runner->revision);
  free(runner);
}

const char *ex_runner_model_id(const struct ex_runner *runner) {
  return runner->model_id;
}

const char *ex_runner_revision(const struct ex_runner *runner) {
  return runner->revision;
}

const char *ex_runner_numerics(const struct ex_runner *runner) {
  return cm_numerics_name(runner->eng->numerics);
}

static const struct loaded_head *find_head(const struct ex_runner *x, const char *name) {
  for (size_t i = 0; i < x->n_heads; i++)
    if (strcmp(x->heads[i].kind->name, name) == 0)
      return &x->heads[i];
  return NULL;
}

/* Everything the model must agree with before any work: ids in the vocabulary, image slots,
 * heads, positions non-negative. */
static int check_program(const struct ex_runner *x, const struct proto_program *p,
                         struct cm_diag *diag) {
  const struct ex_qwen35_config *c = &x->eng->cfg;
  int32_t img = c->image_token_id;
  /* without pixels a literal <|image_pad|> is an ordinary token, as in the reference's text-only
   * forward (spec/jemm.md J13); with images every one must be a slot */
  bool text_only = p->n_images == 0;
  if (p->n_images && !x->eng->has_vision)
    return cm_diag_set(diag, -CM_EPROGRAM, "program has %u images; model has no vision tower",
                       p->n_images);
  for (uint32_t i = 0; i < p->n_prefixes; i++) {
    const struct proto_prefix *s = &p->prefixes[i];
    uint64_t slots = 0, want = 0;
    for (uint32_t t = 0; t < s->n_tokens; t++) {
      if (s->ids[t] < 0 || s->ids[t] >= c->vocab_size)
        return cm_diag_set(diag, -CM_EPROGRAM, "prefixes[%u].ids[%u] = %d outside the "
                           "vocabulary (%d)", i, t, s->ids[t], c->vocab_size);
      slots += s->ids[t] == img;
    }
    for (uint32_t j = 0; j < s->n_images; j++)
      want += p->images[s->images[j]].n_patches / 4;
    if (!text_only && slots != want)
      return cm_diag_set(diag, -CM_EPROGRAM, "prefixes[%u]: %llu <|image_pad|> slots for images "
                         "of %llu merged rows", i, (unsigned long long)slots,
                         (unsigned long long)want);
    for (size_t t = 0; t < 3 * (size_t)s->n_tokens; t++)
      if (s->pos[t] < 0)
        return cm_diag_set(diag, -CM_EPROGRAM, "prefixes[%u]: negative position id", i);
  }
  for (uint32_t i = 0; i < p->n_rows; i++) {
    const struct proto_row *s = &p->rows[i];
    for (uint32_t t = 0; t < s->n_tokens; t++)
      if (s->ids[t] < 0 || s->ids[t] >= c->vocab_size || (s->ids[t] == img && !text_only))
        return cm_diag_set(diag, -CM_EPROGRAM, "rows[%u].ids[%u] = %d outside the vocabulary "
                           "or an image slot", i, t, s->ids[t]);
    for (size_t t = 0; t < 3 * (size_t)s->n_tokens; t++)
      if (s->pos[t] < 0)
        return cm_diag_set(diag, -CM_EPROGRAM, "rows[%u]: negative position id", i);
  }
  for (uint32_t i = 0; i < p->n_readouts; i++) {
    const struct proto_readout *r = &p->readouts[i];
    for (uint32_t j = 0; j < r->n_ids; j++)
      if (r->ids[j] < 0 || r->ids[j] >= c->vocab_size)
        return cm_diag_set(diag, -CM_EPROGRAM, "readouts[%u].ids[%u] = %d outside the "
                           "vocabulary", i, j, r->ids[j]);
    if (r->kind == PROTO_READOUT_HEAD && !find_head(x, r->head))
      return cm_diag_set(diag, -CM_EPROGRAM, "readouts[%u]: model has no head \"%s\"", i, r->head);
    uint32_t rows, width;
    const struct loaded_head *lh = r->kind == PROTO_READOUT_HEAD ? find_head(x, r->head) : NULL;
    if (lh && lh->kind->group &&
        (lh->kind->group->shape(r->ids, r->n_ids, &rows, &width) != 0 ||
         (uint64_t)r->row + rows > p->n_rows))
      return cm_diag_set(diag, -CM_EPROGRAM, "readouts[%u]: arguments of group head \"%s\" do "
                         "not fit the program", i, r->head);
  }
  return 0;
}

/* The group head readout of a HEAD readout, or NULL for every other readout. */
static const struct ex_head_group *group_of_readout(const struct ex_runner *x,
                                                    const struct proto_readout *r) {
  const struct loaded_head *lh = r->kind == PROTO_READOUT_HEAD ? find_head(x, r->head) : NULL;
  return lh ? lh->kind->group : NULL;
}

/* Output width of a readout. */
static uint32_t readout_width(const struct ex_runner *x, const struct proto_readout *r) {
  switch (r->kind) {
  case PROTO_READOUT_HIDDEN: return (uint32_t)x->eng->cfg.hidden_size;
  case PROTO_READOUT_HEAD: {
    const struct loaded_head *lh = find_head(x, r->head);
    uint32_t rows, width = 0;
    if (lh->kind->group && lh->kind->group->shape(r->ids, r->n_ids, &rows, &width) == 0)
      return width;
    return (uint32_t)lh->n_out;
  }
  default: return r->n_ids;
  }
}

/* The LM access a group head gets for one row: positions of the row map to consecutive readouts
 * of the launch, starting at read0. */
struct row_lm {
  struct ex_head_lm base; /* first */
  struct ex_engine *eng;
  size_t read0;
  const struct ex_lm_batch *lmb; /* the launch's batched log-probs, or NULL */
};

/* The batched answer to a request equal to one a row declared, or NULL. */
static const float *batched_lp(const struct ex_lm_batch *b, size_t read0, const int32_t *targets,
                               size_t n) {
  if (!b || !b->ok || !n)
    return NULL;
  for (size_t g = 0; g < b->n_seg; g++) {
    size_t a = b->seg[g], e = g + 1 < b->n_seg ? b->seg[g + 1] : b->n;
    if (e - a == n && b->reads[a] == read0 &&
        memcmp(b->targets + a, targets, n * sizeof(int32_t)) == 0)
      return b->lp + a;
  }
  return NULL;
}

static int row_lm_target_logprobs(const struct ex_head_lm *lm, uint32_t first,
                                  const int32_t *targets, size_t n, float *lp,
                                  struct cm_diag *diag) {
  const struct row_lm *l = (const struct row_lm *)lm;
  const float *got = batched_lp(l->lmb, l->read0 + first, targets, n);
  if (got) {
    memcpy(lp, got, n * sizeof(float));
    return 0;
  }
  size_t *reads = malloc((n + 1) * sizeof(size_t));
  if (!reads)
    return -ENOMEM;
  for (size_t i = 0; i < n; i++)
    reads[i] = l->read0 + first + i;
  int r = l->eng->ops->target_logprobs(l->eng, reads, targets, n, lp, diag);
  free(reads);
  return r;
}

/* Readout rows a program row asks of its launch: every position for a group head's row, else one
 * per readout that is not a group head's. */
static size_t row_reads(const struct ex_runner *x, const struct proto_program *p,
                        const uint32_t *row_start, const uint32_t *by_row,
                        const int32_t *group_of, uint32_t i) {
  size_t n = group_of[i] >= 0 ? p->rows[i].n_tokens : 0;
  for (uint32_t j = row_start[i]; j < row_start[i + 1]; j++)
    n += group_of_readout(x, &p->readouts[by_row[j]]) == NULL;
  return n;
}

struct ex_engine *ex_runner_engine(const struct ex_runner *x) {
  return x->eng;
}

/* Tokens of the prefix chain ending at prefix i (0 for -1). */
static uint64_t chain_tokens(const struct proto_program *p, int32_t i) {
  uint64_t n = 0;
  for (; i >= 0; i = p->prefixes[i].parent)
    n += p->prefixes[i].n_tokens;
  return n;
}

void ex_job_fini(struct ex_job *j) {
  if (!j)
    return;
  for (uint32_t i = 0; j->group_acc && i < j->p->n_readouts; i++)
    if (j->group_acc[i])
      find_head(j->x, j->p->readouts[i].head)->kind->group->free_acc(j->group_acc[i]);
  free(j->group_acc), free(j->group_of), free(j->widths), free(j->by_row), free(j->row_start);
  free(j->n_reads), free(j->head_in), free(j->head_of);
  proto_result_fini(&j->res);
  memset(j, 0, sizeof(*j));
}

int ex_job_init(struct ex_job *j, const struct ex_runner *x, const struct proto_program *p,
                struct cm_diag *diag) {
  memset(j, 0, sizeof(*j));
  j->x = x;
  j->p = p;
  int r = proto_program_check(p, diag);
  if (r)
    return r == -CM_EFORMAT ? -CM_EPROGRAM : r;
  if ((r = check_program(x, p, diag)))
    return r;
  const struct ex_engine_limits *lim = &x->eng->lim;
  size_t h = (size_t)x->eng->cfg.hidden_size;
  j->widths = calloc(p->n_readouts + 1, sizeof(uint32_t));
  j->by_row = calloc(p->n_readouts + 1, sizeof(uint32_t)); /* readouts sorted by row */
  j->row_start = calloc(p->n_rows + 2, sizeof(uint32_t));
  j->group_of = malloc((p->n_rows + 1) * sizeof(int32_t)); /* group readout per row */
  j->group_acc = calloc(p->n_readouts + 1, sizeof(void *)); /* accumulator per readout */
  j->n_reads = calloc(p->n_rows + 1, sizeof(uint32_t));
  uint32_t *fill = calloc(p->n_rows + 1, sizeof(uint32_t));
  size_t n_head = 0;
  for (uint32_t i = 0; i < p->n_readouts; i++)
    n_head += p->readouts[i].kind == PROTO_READOUT_HEAD;
  j->head_in = malloc((n_head + 1) * h * sizeof(float));
  j->head_of = malloc((n_head + 1) * sizeof(uint32_t));
  if (!j->widths || !j->by_row || !j->row_start || !j->group_of || !j->group_acc || !j->n_reads ||
      !fill || !j->head_in || !j->head_of) {
    free(fill);
    r = -ENOMEM;
    goto fail;
  }
  for (uint32_t i = 0; i < p->n_readouts; i++) {
    j->widths[i] = readout_width(x, &p->readouts[i]);
    j->row_start[p->readouts[i].row + 1]++;
  }
  for (uint32_t i = 0; i < p->n_rows; i++)
    j->row_start[i + 1] += j->row_start[i];
  for (uint32_t i = 0; i < p->n_readouts; i++) {
    uint32_t rw = p->readouts[i].row;
    j->by_row[j->row_start[rw] + fill[rw]++] = i;
  }
  free(fill);
  if ((r = proto_result_alloc(&j->res, p->n_readouts, j->widths)))
    goto fail;
  /* group heads: each row belongs to at most one group readout, which reads it after its launch */
  for (uint32_t i = 0; i < p->n_rows; i++)
    j->group_of[i] = -1;
  for (uint32_t i = 0; i < p->n_readouts; i++) {
    const struct proto_readout *ro = &p->readouts[i];
    const struct ex_head_group *g = group_of_readout(x, ro);
    uint32_t rows, width;
    if (!g)
      continue;
    g->shape(ro->ids, ro->n_ids, &rows, &width);
    for (uint32_t k = 0; k < rows; k++) {
      if (j->group_of[ro->row + k] >= 0) {
        r = cm_diag_set(diag, -CM_EPROGRAM, "readouts[%u]: row %u is in two group heads", i,
                        ro->row + k);
        goto fail;
      }
      j->group_of[ro->row + k] = (int32_t)i;
    }
    if ((r = g->begin(find_head(x, ro->head)->state, ro->ids, ro->n_ids, &j->group_acc[i])))
      goto fail;
  }
  /* every row must fit one launch on its own, every snapshot the engine's context */
  for (uint32_t i = 0; i < p->n_prefixes; i++)
    if (chain_tokens(p, (int32_t)i) > lim->max_ctx) {
      r = cm_diag_set(diag, -CM_EPROGRAM, "prefixes[%u]: a snapshot of %llu tokens over the "
                      "engine's %zu (--max-ctx)", i,
                      (unsigned long long)chain_tokens(p, (int32_t)i), lim->max_ctx);
      goto fail;
    }
  for (uint32_t i = 0; i < p->n_rows; i++) {
    if (j->row_start[i] == j->row_start[i + 1] && j->group_of[i] < 0)
      continue; /* never run: a row without readouts changes nothing */
    size_t nr = row_reads(x, p, j->row_start, j->by_row, j->group_of, i);
    if (p->rows[i].n_tokens > lim->max_tokens || nr > lim->max_readouts) {
      r = cm_diag_set(diag, -CM_EPROGRAM, "rows[%u]: %u tokens and %zu readout rows over the "
                      "engine's limits (%zu tokens, %zu readouts per launch)", i,
                      p->rows[i].n_tokens, nr, lim->max_tokens, lim->max_readouts);
      goto fail;
    }
    if (chain_tokens(p, p->rows[i].prefix) + p->rows[i].n_tokens > lim->max_ctx) {
      r = cm_diag_set(diag, -CM_EPROGRAM, "rows[%u]: %llu tokens with its prefixes over the "
                      "engine's %zu (--max-ctx)", i,
                      (unsigned long long)(chain_tokens(p, p->rows[i].prefix) +
                                           p->rows[i].n_tokens), lim->max_ctx);
      goto fail;
    }
    j->n_reads[i] = (uint32_t)nr;
  }
  return 0;
fail:
  ex_job_fini(j);
  return r;
}

size_t ex_job_row_reads(const struct ex_job *j, uint32_t i, size_t base, size_t *reads) {
  const struct proto_program *p = j->p;
  const struct proto_row *s = &p->rows[i];
  size_t n = 0;
  /* all positions for a group row, then one per other readout */
  if (j->group_of[i] >= 0)
    for (uint32_t t = 0; t < s->n_tokens; t++)
      reads[n++] = base + t;
  for (uint32_t k = j->row_start[i]; k < j->row_start[i + 1]; k++) {
    const struct proto_readout *ro = &p->readouts[j->by_row[k]];
    if (group_of_readout(j->x, ro))
      continue;
    int32_t q = ro->position < 0 ? (int32_t)s->n_tokens + ro->position : ro->position;
    reads[n++] = base + (size_t)q;
  }
  return n;
}

void ex_lm_batch_reset(struct ex_lm_batch *b) {
  b->n = b->n_seg = 0;
  b->ok = false;
}

void ex_lm_batch_fini(struct ex_lm_batch *b) {
  if (!b)
    return;
  free(b->reads), free(b->targets), free(b->lp), free(b->seg), free(b->seg_job);
  memset(b, 0, sizeof(*b));
}

int ex_job_row_lm_declare(const struct ex_job *j, uint32_t i, size_t rd, struct ex_lm_batch *b) {
  const struct proto_program *p = j->p;
  if (j->group_of[i] < 0)
    return 0;
  const struct proto_readout *gr = &p->readouts[j->group_of[i]];
  const struct ex_head_group *g = find_head(j->x, gr->head)->kind->group;
  const struct proto_row *s = &p->rows[i];
  if (!g->lm_targets)
    return 0;
  if (b->n + s->n_tokens > b->cap) { /* room for every position of the row */
    size_t cap = 2 * (b->n + s->n_tokens) + 64;
    size_t *r = realloc(b->reads, cap * sizeof(size_t));
    if (r)
      b->reads = r;
    int32_t *t = realloc(b->targets, cap * sizeof(int32_t));
    if (t)
      b->targets = t;
    float *l = realloc(b->lp, cap * sizeof(float));
    if (l)
      b->lp = l;
    if (!r || !t || !l)
      return -ENOMEM;
    b->cap = cap;
  }
  if (b->n_seg + 1 > b->cap_seg) {
    size_t cap = 2 * b->n_seg + 16;
    size_t *sg = realloc(b->seg, cap * sizeof(size_t));
    if (sg)
      b->seg = sg;
    const struct ex_job **sj = realloc(b->seg_job, cap * sizeof(*sj));
    if (sj)
      b->seg_job = sj;
    if (!sg || !sj)
      return -ENOMEM;
    b->cap_seg = cap;
  }
  uint32_t first = 0;
  size_t n = 0;
  g->lm_targets(j->group_acc[j->group_of[i]], gr->position, s->ids, s->n_tokens, &first,
                b->targets + b->n, &n);
  if (!n)
    return 0;
  for (size_t k = 0; k < n; k++)
    b->reads[b->n + k] = rd + first + k;
  b->seg[b->n_seg] = b->n;
  b->seg_job[b->n_seg++] = j;
  b->n += n;
  return 0;
}

int ex_lm_batch_run(struct ex_lm_batch *b, struct ex_engine *eng, struct cm_diag *diag) {
  b->ok = false;
  if (!b->n)
    return 0;
  int r = eng->ops->target_logprobs(eng, b->reads, b->targets, b->n, b->lp, diag);
  if (r == -EINVAL) /* a bad target: each row asks alone and reports its own */
    return 0;
  b->ok = r == 0;
  return r;
}

int ex_job_row_readouts(struct ex_job *j, uint32_t pi, size_t rd, const float *hid,
                        const struct ex_lm_batch *lmb, struct cm_diag *diag) {
  const struct ex_runner *x = j->x;
  const struct proto_program *p = j->p;
  struct ex_engine *eng = x->eng;
  size_t h = (size_t)eng->cfg.hidden_size;
  const struct proto_row *s = &p->rows[pi];
  int r = 0;
  if (j->group_of[pi] >= 0) {
    const struct proto_readout *gr = &p->readouts[j->group_of[pi]];
    const struct loaded_head *lh = find_head(x, gr->head);
    struct row_lm lm = {.base.target_logprobs = row_lm_target_logprobs, .eng = eng, .read0 = rd,
                        .lmb = lmb};
    if ((r = lh->kind->group->row(lh->state, &lm.base, j->group_acc[j->group_of[pi]],
                                  pi - gr->row, gr->position, s->ids, s->n_tokens, hid + rd * h,
                                  diag)))
      return r;
    rd += s->n_tokens;
  }
  for (uint32_t k = j->row_start[pi]; k < j->row_start[pi + 1]; k++) {
    uint32_t ri = j->by_row[k];
    const struct proto_readout *ro = &p->readouts[ri];
    if (group_of_readout(x, ro))
      continue; /* finished after the last row */
    const float *hrow = hid + rd * h;
    switch (ro->kind) {
    case PROTO_READOUT_HEAD:
      memcpy(j->head_in + j->k_head * h, hrow, h * sizeof(float));
      j->head_of[j->k_head++] = ri;
      break;
    case PROTO_READOUT_HIDDEN:
      memcpy(j->res.outputs[ri], hrow, h * sizeof(float));
      break;
    case PROTO_READOUT_LABEL_LOGITS:
      r = eng->ops->label_logits(eng, rd, ro->ids, ro->n_ids, j->res.outputs[ri], diag);
      break;
    case PROTO_READOUT_TOKEN_LOGPROB:
      r = eng->ops->token_logprobs(eng, rd, ro->ids, ro->n_ids, j->res.outputs[ri], diag);
      break;
    default:
      r = cm_diag_set(diag, -CM_EPROGRAM, "readouts[%u]: unknown kind", ri);
    }
    if (r)
      return r;
    rd++;
  }
  return 0;
}

int ex_job_heads(struct ex_job *j, struct cm_diag *diag) {
  const struct ex_runner *x = j->x;
  const struct proto_program *p = j->p;
  size_t h = (size_t)x->eng->cfg.hidden_size, k_head = j->k_head;
  int r = 0;
  /* group heads finish over their accumulated rows (all of a kind at once where the head can);
   * the others run batched per head */
  void **fin_acc = malloc((p->n_readouts + 1) * sizeof(void *));
  float **fin_out = malloc((p->n_readouts + 1) * sizeof(float *));
  if (!fin_acc || !fin_out)
    r = -ENOMEM;
  for (size_t hk = 0; hk < x->n_heads && !r; hk++) {
    const struct loaded_head *lh = &x->heads[hk];
    if (!lh->kind->group)
      continue;
    size_t m = 0;
    for (uint32_t i = 0; i < p->n_readouts; i++)
      if (j->group_acc[i] && find_head(x, p->readouts[i].head) == lh) {
        fin_acc[m] = j->group_acc[i];
        fin_out[m++] = j->res.outputs[i];
      }
    if (m && lh->kind->group->finish_all)
      r = lh->kind->group->finish_all(lh->state, fin_acc, m, fin_out, diag);
    for (size_t i = 0; m && !lh->kind->group->finish_all && i < m && !r; i++)
      r = lh->kind->group->finish(lh->state, fin_acc[i], fin_out[i], diag);
  }
  free(fin_acc), free(fin_out);
  if (r || !k_head)
    return r;
  float *gather = malloc(k_head * h * sizeof(float)), *out = NULL;
  uint32_t *idx = malloc(k_head * sizeof(uint32_t));
  if (!gather || !idx) {
    free(gather), free(idx);
    return -ENOMEM;
  }
  for (size_t hk = 0; hk < x->n_heads && !r; hk++) {
    const struct loaded_head *lh = &x->heads[hk];
    size_t m = 0;
    for (size_t i = 0; i < k_head; i++)
      if (strcmp(p->readouts[j->head_of[i]].head, lh->kind->name) == 0) {
        memcpy(gather + m * h, j->head_in + i * h, h * sizeof(float));
        idx[m++] = j->head_of[i];
      }
    if (!m)
      continue;
    if (!(out = malloc(m * lh->n_out * sizeof(float) + sizeof(float)))) {
      r = -ENOMEM;
      break;
    }
    r = lh->kind->run(lh->state, gather, m, out, diag);
    for (size_t i = 0; !r && i < m; i++)
      memcpy(j->res.outputs[idx[i]], out + i * lh->n_out, lh->n_out * sizeof(float));
    free(out);
  }
  free(gather), free(idx);
  return r;
}
