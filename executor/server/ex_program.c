/* The program runner (ex_program.h) over an engine (ex_engine.h: float32 CPU or bf16 CUDA):
 * images through the vision tower, prefixes into snapshots, rows continuing their snapshot packed
 * into launches within the engine's limits, readouts of each launch, heads on the host over the
 * readout rows, batched per name at the end. One program at a time. */
#include "ex_program.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ex_engine.h"
#include "ex_head.h"

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

static int64_t mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

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
  const struct ex_head_kind *const *kinds = ex_head_kinds();
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

/* The engine's answer for a program's own fault (a limit) becomes the program's error. */
static int program_fault(int r) {
  return r == -CM_ELIMIT || r == -CM_ESHAPE ? -CM_EPROGRAM : r;
}

/* The LM access a group head gets for one row: positions of the row map to consecutive readouts
 * of the launch, starting at read0. */
struct row_lm {
  struct ex_head_lm base; /* first */
  struct ex_engine *eng;
  size_t read0;
  /* what the head declared for this row (lm_targets) and the launch's batched answer, or
   * pre_lp NULL: a request equal to the declared one is served from pre_lp */
  uint32_t pre_first;
  size_t pre_n;
  const int32_t *pre_tg;
  const float *pre_lp;
};

static int row_lm_target_logprobs(const struct ex_head_lm *lm, uint32_t first,
                                  const int32_t *targets, size_t n, float *lp,
                                  struct cm_diag *diag) {
  const struct row_lm *l = (const struct row_lm *)lm;
  if (l->pre_lp && first == l->pre_first && n == l->pre_n &&
      memcmp(targets, l->pre_tg, n * sizeof(int32_t)) == 0) {
    memcpy(lp, l->pre_lp, n * sizeof(float));
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

int ex_runner_run(struct ex_runner *x, const struct proto_program *p, struct proto_result *res,
                  struct cm_diag *diag) {
  int64_t t0 = mono_us();
  if (p->deadline_us && proto_now_us() > p->deadline_us)
    return cm_diag_set(diag, -CM_ETIMEOUT, "deadline passed before the program started");
  int r = proto_program_check(p, diag);
  if (r)
    return r == -CM_EFORMAT ? -CM_EPROGRAM : r;
  if ((r = check_program(x, p, diag)))
    return r;
  struct ex_engine *eng = x->eng;
  const struct ex_engine_limits *lim = &eng->lim;
  size_t h = (size_t)eng->cfg.hidden_size;
  float **image_embeds = calloc(p->n_images + 1, sizeof(float *));
  void **snaps = calloc(p->n_prefixes + 1, sizeof(*snaps));
  uint32_t *widths = calloc(p->n_readouts + 1, sizeof(uint32_t));
  uint32_t *by_row = calloc(p->n_readouts + 1, sizeof(uint32_t)); /* readouts sorted by row */
  uint32_t *row_start = calloc(p->n_rows + 2, sizeof(uint32_t));
  float *head_in = NULL, *head_out = NULL, *prefix_img = NULL, *hid = NULL;
  uint32_t *head_of = NULL;
  size_t *reads = NULL, total_reads = 0;
  struct ex_engine_row *launch = calloc(p->n_rows + 1, sizeof(*launch));
  uint32_t *launch_row = calloc(p->n_rows + 1, sizeof(uint32_t)); /* program row of each */
  int32_t *group_of = malloc((p->n_rows + 1) * sizeof(int32_t)); /* group readout per row */
  void **group_acc = calloc(p->n_readouts + 1, sizeof(void *));  /* accumulator per readout */
  /* batched LM log-probs of a launch's group rows (at most one per token of the launch) and the
   * per-head-kind finish lists */
  size_t max_tok = 1; /* a launch's first row may exceed lim->max_tokens on an engine that
                       * takes it (the CPU engine), so the program's total bounds a launch */
  for (uint32_t i = 0; i < p->n_rows; i++)
    max_tok += p->rows[i].n_tokens;
  int32_t *pre_tg = malloc(max_tok * sizeof(int32_t));
  float *pre_lp = malloc(max_tok * sizeof(float));
  size_t *pre_reads = malloc(max_tok * sizeof(size_t));
  size_t *pre_n = malloc((p->n_rows + 1) * sizeof(size_t)),
         *pre_at = calloc(p->n_rows + 1, sizeof(size_t));
  uint32_t *pre_first = calloc(p->n_rows + 1, sizeof(uint32_t));
  void **fin_acc = calloc(p->n_readouts + 1, sizeof(void *));
  float **fin_out = calloc(p->n_readouts + 1, sizeof(float *));
  if (!image_embeds || !snaps || !widths || !by_row || !row_start || !launch || !launch_row ||
      !group_of || !group_acc || !pre_tg || !pre_lp || !pre_reads || !pre_n || !pre_at ||
      !pre_first || !fin_acc || !fin_out) {
    r = -ENOMEM;
    goto out;
  }
  for (uint32_t i = 0; i < p->n_readouts; i++) {
    widths[i] = readout_width(x, &p->readouts[i]);
    row_start[p->readouts[i].row + 1]++;
  }
  for (uint32_t i = 0; i < p->n_rows; i++)
    row_start[i + 1] += row_start[i];
  {
    uint32_t *fill = calloc(p->n_rows + 1, sizeof(uint32_t));
    if (!fill) {
      r = -ENOMEM;
      goto out;
    }
    for (uint32_t i = 0; i < p->n_readouts; i++) {
      uint32_t rw = p->readouts[i].row;
      by_row[row_start[rw] + fill[rw]++] = i;
    }
    free(fill);
  }
  if ((r = proto_result_alloc(res, p->n_readouts, widths)))
    goto out;
  /* group heads: each row belongs to at most one group readout, which reads it after its launch */
  for (uint32_t i = 0; i < p->n_rows; i++)
    group_of[i] = -1;
  for (uint32_t i = 0; i < p->n_readouts; i++) {
    const struct proto_readout *ro = &p->readouts[i];
    const struct ex_head_group *g = group_of_readout(x, ro);
    uint32_t rows, width;
    if (!g)
      continue;
    g->shape(ro->ids, ro->n_ids, &rows, &width);
    for (uint32_t k = 0; k < rows; k++) {
      if (group_of[ro->row + k] >= 0) {
        r = cm_diag_set(diag, -CM_EPROGRAM, "readouts[%u]: row %u is in two group heads", i,
                        ro->row + k);
        goto out;
      }
      group_of[ro->row + k] = (int32_t)i;
    }
    if ((r = g->begin(find_head(x, ro->head)->state, ro->ids, ro->n_ids, &group_acc[i])))
      goto out;
  }
  /* every row must fit one launch on its own */
  for (uint32_t i = 0; i < p->n_rows; i++) {
    if (row_start[i] == row_start[i + 1] && group_of[i] < 0)
      continue; /* never run */
    size_t nr = row_reads(x, p, row_start, by_row, group_of, i);
    if (p->rows[i].n_tokens > lim->max_tokens || nr > lim->max_readouts) {
      r = cm_diag_set(diag, -CM_EPROGRAM, "rows[%u]: %u tokens and %zu readout rows over the "
                      "engine's limits (%zu tokens, %zu readouts per launch)", i,
                      p->rows[i].n_tokens, nr, lim->max_tokens, lim->max_readouts);
      goto out;
    }
    total_reads += nr;
  }

  /* images: one tower call per image (no image attends to another either way) */
  int64_t t1 = mono_us();
  for (uint32_t i = 0; i < p->n_images; i++) {
    const struct proto_image *im = &p->images[i];
    if (!(image_embeds[i] = malloc((size_t)(im->n_patches / 4) * h * sizeof(float)))) {
      r = -ENOMEM;
      goto out;
    }
    r = eng->ops->vision(eng, im->pixels, im->n_patches, im->grid_thw, image_embeds[i], diag);
    if (r) {
      r = program_fault(r);
      goto out;
    }
  }
  /* prefixes: each continues a copy of its parent's snapshot and keeps its own; its image slots
   * take its images' merged rows in order */
  int64_t t2 = mono_us();
  for (uint32_t i = 0; i < p->n_prefixes; i++) {
    const struct proto_prefix *s = &p->prefixes[i];
    size_t n_img_rows = 0;
    for (uint32_t j = 0; j < s->n_images; j++)
      n_img_rows += p->images[s->images[j]].n_patches / 4;
    free(prefix_img);
    prefix_img = NULL;
    if (s->n_images) {
      if (!(prefix_img = malloc((n_img_rows + 1) * h * sizeof(float)))) {
        r = -ENOMEM;
        goto out;
      }
      size_t at = 0;
      for (uint32_t j = 0; j < s->n_images; j++) {
        size_t m = p->images[s->images[j]].n_patches / 4;
        memcpy(prefix_img + at * h, image_embeds[s->images[j]], m * h * sizeof(float));
        at += m;
      }
    }
    r = eng->ops->snap_new(eng, s->parent < 0 ? NULL : snaps[s->parent], &snaps[i], diag);
    if (!r)
      r = eng->ops->prefix(eng, snaps[i], s->ids, s->pos, s->n_tokens, prefix_img, n_img_rows,
                           diag);
    if (r) {
      r = program_fault(r);
      goto out;
    }
  }
  /* rows, packed into launches in program order; readouts of each launch right after it */
  int64_t t3 = mono_us(), readout_us = 0;
  size_t n_head = 0;
  for (uint32_t i = 0; i < p->n_readouts; i++)
    n_head += p->readouts[i].kind == PROTO_READOUT_HEAD;
  head_in = malloc((n_head + 1) * h * sizeof(float));
  head_of = malloc((n_head + 1) * sizeof(uint32_t));
  reads = malloc((total_reads + 1) * sizeof(size_t));
  hid = malloc((total_reads + 1) * h * sizeof(float));
  if (!head_in || !head_of || !reads || !hid) {
    r = -ENOMEM;
    goto out;
  }
  size_t k_head = 0;
  for (uint32_t i = 0; i < p->n_rows;) {
    size_t n_launch = 0, n_tok = 0, n_read = 0;
    for (; i < p->n_rows; i++) {
      const struct proto_row *s = &p->rows[i];
      if (row_start[i] == row_start[i + 1] && group_of[i] < 0)
        continue; /* a row without readouts changes nothing */
      size_t nr = row_reads(x, p, row_start, by_row, group_of, i);
      if (n_launch && (n_launch + 1 > lim->max_seqs || n_tok + s->n_tokens > lim->max_tokens ||
                       n_read + nr > lim->max_readouts))
        break;
      launch[n_launch] = (struct ex_engine_row){
          .snap = s->prefix < 0 ? NULL : snaps[s->prefix], .ids = s->ids, .pos = s->pos,
          .n = s->n_tokens};
      launch_row[n_launch++] = i;
      /* the row's readout rows: all positions for a group row, then one per other readout */
      if (group_of[i] >= 0)
        for (uint32_t t = 0; t < s->n_tokens; t++)
          reads[n_read++] = n_tok + t;
      for (uint32_t j = row_start[i]; j < row_start[i + 1]; j++) {
        const struct proto_readout *ro = &p->readouts[by_row[j]];
        if (group_of_readout(x, ro))
          continue;
        int32_t q = ro->position < 0 ? (int32_t)s->n_tokens + ro->position : ro->position;
        reads[n_read++] = n_tok + (size_t)q;
      }
      n_tok += s->n_tokens;
    }
    if (!n_launch)
      break;
    if ((r = eng->ops->rows(eng, launch, n_launch, reads, n_read, hid, diag))) {
      r = program_fault(r);
      goto out;
    }
    int64_t tr = mono_us();
    /* the group rows' LM log-probs of this launch, declared by their heads: one engine call */
    size_t n_pre = 0, rd = 0;
    for (size_t li = 0; li < n_launch; li++) {
      uint32_t pi = launch_row[li];
      const struct proto_row *s = &p->rows[pi];
      pre_n[li] = 0;
      if (group_of[pi] >= 0) {
        const struct proto_readout *gr = &p->readouts[group_of[pi]];
        const struct ex_head_group *g = find_head(x, gr->head)->kind->group;
        if (g->lm_targets)
          g->lm_targets(group_acc[group_of[pi]], gr->position, s->ids, s->n_tokens,
                        &pre_first[li], pre_tg + n_pre, &pre_n[li]);
        for (size_t j = 0; j < pre_n[li]; j++)
          pre_reads[n_pre + j] = rd + pre_first[li] + j;
        pre_at[li] = n_pre;
        n_pre += pre_n[li];
        rd += s->n_tokens;
      }
      for (uint32_t j = row_start[pi]; j < row_start[pi + 1]; j++)
        rd += group_of_readout(x, &p->readouts[by_row[j]]) == NULL;
    }
    bool pre_ok = false;
    if (n_pre) {
      r = eng->ops->target_logprobs(eng, pre_reads, pre_tg, n_pre, pre_lp, diag);
      pre_ok = r == 0;
      if (r == -EINVAL) /* a bad target: each row asks alone and reports its own */
        r = 0;
      if (r)
        goto out;
    }
    rd = 0; /* next readout of the launch */
    for (size_t li = 0; li < n_launch; li++) {
      uint32_t pi = launch_row[li];
      const struct proto_row *s = &p->rows[pi];
      if (group_of[pi] >= 0) {
        const struct proto_readout *gr = &p->readouts[group_of[pi]];
        const struct loaded_head *lh = find_head(x, gr->head);
        struct row_lm lm = {.base.target_logprobs = row_lm_target_logprobs, .eng = eng,
                            .read0 = rd, .pre_first = pre_first[li], .pre_n = pre_n[li],
                            .pre_tg = pre_tg + pre_at[li],
                            .pre_lp = pre_ok && pre_n[li] ? pre_lp + pre_at[li] : NULL};
        if ((r = lh->kind->group->row(lh->state, &lm.base, group_acc[group_of[pi]], pi - gr->row,
                                      gr->position, s->ids, s->n_tokens, hid + rd * h, diag)))
          goto out;
        rd += s->n_tokens;
      }
      for (uint32_t j = row_start[pi]; j < row_start[pi + 1]; j++) {
        uint32_t ri = by_row[j];
        const struct proto_readout *ro = &p->readouts[ri];
        if (group_of_readout(x, ro))
          continue; /* finished after the last row */
        const float *hrow = hid + rd * h;
        switch (ro->kind) {
        case PROTO_READOUT_HEAD:
          memcpy(head_in + k_head * h, hrow, h * sizeof(float));
          head_of[k_head++] = ri;
          break;
        case PROTO_READOUT_HIDDEN:
          memcpy(res->outputs[ri], hrow, h * sizeof(float));
          break;
        case PROTO_READOUT_LABEL_LOGITS:
          r = eng->ops->label_logits(eng, rd, ro->ids, ro->n_ids, res->outputs[ri], diag);
          break;
        case PROTO_READOUT_TOKEN_LOGPROB:
          r = eng->ops->token_logprobs(eng, rd, ro->ids, ro->n_ids, res->outputs[ri], diag);
          break;
        default:
          r = cm_diag_set(diag, -CM_EPROGRAM, "readouts[%u]: unknown kind", ri);
        }
        if (r)
          goto out;
        rd++;
      }
    }
    readout_us += mono_us() - tr;
  }
  /* heads: group heads finish over their accumulated rows; the others run batched per head */
  int64_t t4 = mono_us();
  for (size_t hk = 0; hk < x->n_heads; hk++) { /* per group head kind: all its readouts at once */
    const struct loaded_head *lh = &x->heads[hk];
    if (!lh->kind->group)
      continue;
    size_t m = 0;
    for (uint32_t i = 0; i < p->n_readouts; i++)
      if (group_acc[i] && find_head(x, p->readouts[i].head) == lh) {
        fin_acc[m] = group_acc[i];
        fin_out[m++] = res->outputs[i];
      }
    if (!m)
      continue;
    if (lh->kind->group->finish_all)
      r = lh->kind->group->finish_all(lh->state, fin_acc, m, fin_out, diag);
    for (size_t j = 0; !lh->kind->group->finish_all && j < m && !r; j++)
      r = lh->kind->group->finish(lh->state, fin_acc[j], fin_out[j], diag);
    if (r)
      goto out;
  }
  if (k_head) {
    head_out = malloc(k_head * 1024 * sizeof(float) + sizeof(float));
    float *gather = malloc(k_head * h * sizeof(float));
    uint32_t *idx = malloc(k_head * sizeof(uint32_t));
    if (!head_out || !gather || !idx) {
      free(gather), free(idx);
      r = -ENOMEM;
      goto out;
    }
    for (size_t hk = 0; hk < x->n_heads && !r; hk++) {
      const struct loaded_head *lh = &x->heads[hk];
      size_t m = 0;
      for (size_t j = 0; j < k_head; j++)
        if (strcmp(p->readouts[head_of[j]].head, lh->kind->name) == 0) {
          memcpy(gather + m * h, head_in + j * h, h * sizeof(float));
          idx[m++] = head_of[j];
        }
      if (!m)
        continue;
      float *o = m * lh->n_out <= k_head * 1024 ? head_out : malloc(m * lh->n_out * sizeof(float));
      if (!o) {
        r = -ENOMEM;
        break;
      }
      r = lh->kind->run(lh->state, gather, m, o, diag);
      for (size_t j = 0; !r && j < m; j++)
        memcpy(res->outputs[idx[j]], o + j * lh->n_out, lh->n_out * sizeof(float));
      if (o != head_out)
        free(o);
    }
    free(gather), free(idx);
    if (r)
      goto out;
  }
  int64_t t5 = mono_us();
  res->status = 0;
  res->timings.vision_us = t2 - t1;
  res->timings.prefix_us = t3 - t2;
  res->timings.rows_us = t4 - t3 - readout_us;
  res->timings.readout_us = readout_us + (t5 - t4);
  res->timings.total_us = t5 - t0;
  free(res->numerics);
  if (!(res->numerics = strdup(ex_runner_numerics(x))))
    r = -ENOMEM;
out:
  if (r)
    proto_result_set_error(res, r, diag && diag->msg ? diag->msg : cm_strerror(r));
  for (uint32_t i = 0; image_embeds && i < p->n_images; i++)
    free(image_embeds[i]);
  for (uint32_t i = 0; snaps && i < p->n_prefixes; i++)
    eng->ops->snap_free(eng, snaps[i]);
  free(image_embeds), free(snaps), free(widths), free(by_row), free(row_start);
  free(head_in), free(head_out), free(head_of), free(prefix_img), free(hid), free(reads);
  free(launch), free(launch_row);
  for (uint32_t i = 0; group_acc && i < p->n_readouts; i++)
    if (group_acc[i])
      find_head(x, p->readouts[i].head)->kind->group->free_acc(group_acc[i]);
  free(group_acc), free(group_of);
  free(pre_tg), free(pre_lp), free(pre_reads), free(pre_n), free(pre_at), free(pre_first);
  free(fin_acc), free(fin_out);
  return r;
}
