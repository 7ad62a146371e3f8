/* The program runner (ex_program.h): images through the vision tower, prefixes into snapshots,
 * rows from clones of their snapshot, readouts gathered per row, heads batched per name at the
 * end. No scheduling across programs yet: one program at a time, rows one after another. */
#include "ex_program.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ex_head.h"
#include "ex_qwen35.h"
#include "ex_vision.h"

struct loaded_head {
  const struct ex_head_kind *kind; /* registry entry */
  void *state;                     /* the kind's loaded weights */
  size_t n_out;                    /* k, floats per row */
};

struct ex_runner {
  const struct cm_model_dir *dir;   /* borrowed */
  struct ex_qwen35_model *model;    /* backbone, owned */
  struct ex_vision *vision;         /* vision tower or NULL, owned */
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
  struct ex_qwen35_config cfg;
  int r = ex_qwen35_config_parse(dir->config, &cfg, diag);
  if (r)
    goto fail;
  float scale = 0.0f;
  if (dir->adapter) {
    json_object *sc = NULL;
    if (!dir->adapter_info || !json_object_object_get_ex(dir->adapter_info, "scale", &sc)) {
      r = cm_diag_set(diag, -CM_EFORMAT, "%s: manifest adapter has no scale", dir->path);
      goto fail;
    }
    scale = (float)json_object_get_double(sc);
  }
  if ((r = ex_qwen35_model_load(&cfg, dir->weights, dir->adapter, scale, &x->model, diag)))
    goto fail;
  x->model->round_bf16 = opt && opt->round_bf16;
  if (dir->vision) {
    json_object *vc = NULL;
    struct ex_vision_config vcfg;
    if (!json_object_object_get_ex(dir->config, "vision_config", &vc)) {
      r = cm_diag_set(diag, -CM_EMISSING, "%s: config has no vision_config", dir->path);
      goto fail;
    }
    if ((r = ex_vision_config_parse(vc, &vcfg, diag)) ||
        (r = ex_vision_new(&vcfg, dir->weights, NULL, &x->vision, diag)))
      goto fail;
  }
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
  ex_vision_free(runner->vision);
  ex_qwen35_model_free(runner->model);
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
  const struct ex_qwen35_config *c = &x->model->cfg;
  int32_t img = c->image_token_id;
  /* without pixels a literal <|image_pad|> is an ordinary token, as in the reference's text-only
   * forward (spec/jemm.md J13); with images every one must be a slot */
  bool text_only = p->n_images == 0;
  if (p->n_images && !x->vision)
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
  case PROTO_READOUT_HIDDEN: return (uint32_t)x->model->cfg.hidden_size;
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

/* Embeds a segment's ids; image slots take the merged vision rows of its images in order. */
static int embed_segment(const struct ex_runner *x, const int32_t *ids, uint32_t n,
                         float *const *image_embeds, const struct proto_program *p,
                         const uint32_t *images, uint32_t n_images, float *out,
                         struct cm_diag *diag) {
  int r = ex_qwen35_embed(x->model, ids, n, out, diag);
  if (r || !n_images)
    return r;
  size_t h = (size_t)x->model->cfg.hidden_size;
  uint32_t im = 0, row = 0;
  for (uint32_t t = 0; t < n; t++) {
    if (ids[t] != x->model->cfg.image_token_id)
      continue;
    while (row >= p->images[images[im]].n_patches / 4) {
      im++;
      row = 0;
    }
    memcpy(out + t * h, image_embeds[images[im]] + (size_t)row * h, h * sizeof(float));
    row++;
  }
  return 0;
}

/* Fills one readout's output from the hidden row it points at. */
static int fill_readout(const struct ex_runner *x, const struct proto_readout *r,
                        const float *hid, float *logits, float *out) {
  const struct ex_qwen35_config *c = &x->model->cfg;
  size_t h = (size_t)c->hidden_size;
  switch (r->kind) {
  case PROTO_READOUT_HIDDEN:
    memcpy(out, hid, h * sizeof(float));
    return 0;
  case PROTO_READOUT_LABEL_LOGITS:
    ex_qwen35_logits(x->model, hid, 1, logits);
    for (uint32_t j = 0; j < r->n_ids; j++)
      out[j] = logits[r->ids[j]];
    return 0;
  case PROTO_READOUT_TOKEN_LOGPROB: {
    ex_qwen35_logits(x->model, hid, 1, logits);
    double mx = -INFINITY, sum = 0.0;
    for (int v = 0; v < c->vocab_size; v++)
      mx = logits[v] > mx ? logits[v] : mx;
    for (int v = 0; v < c->vocab_size; v++)
      sum += exp((double)logits[v] - mx);
    double lse = mx + log(sum);
    for (uint32_t j = 0; j < r->n_ids; j++)
      out[j] = (float)((double)logits[r->ids[j]] - lse);
    return 0;
  }
  default:
    return -EINVAL; /* HEAD: batched by the caller */
  }
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
  const struct ex_qwen35_config *c = &x->model->cfg;
  size_t h = (size_t)c->hidden_size;
  float **image_embeds = calloc(p->n_images + 1, sizeof(float *));
  struct ex_qwen35_state **snaps = calloc(p->n_prefixes + 1, sizeof(*snaps));
  uint32_t *widths = calloc(p->n_readouts + 1, sizeof(uint32_t));
  uint32_t *by_row = calloc(p->n_readouts + 1, sizeof(uint32_t));     /* readouts sorted by row */
  uint32_t *row_start = calloc(p->n_rows + 2, sizeof(uint32_t));
  float *head_in = NULL, *head_out = NULL, *emb = NULL, *hid = NULL;
  uint32_t *head_of = NULL;
  float *logits = malloc((size_t)c->vocab_size * sizeof(float));
  struct ex_qwen35_state *st = NULL;
  int32_t *group_of = malloc((p->n_rows + 1) * sizeof(int32_t)); /* group readout per row */
  void **group_acc = calloc(p->n_readouts + 1, sizeof(void *));  /* accumulator per readout */
  if (!image_embeds || !snaps || !widths || !by_row || !row_start || !logits || !group_of ||
      !group_acc) {
    r = -ENOMEM;
    goto out;
  }
  size_t max_seg = 1;
  for (uint32_t i = 0; i < p->n_prefixes; i++)
    max_seg = p->prefixes[i].n_tokens > max_seg ? p->prefixes[i].n_tokens : max_seg;
  for (uint32_t i = 0; i < p->n_rows; i++)
    max_seg = p->rows[i].n_tokens > max_seg ? p->rows[i].n_tokens : max_seg;
  emb = malloc(max_seg * h * sizeof(float));
  hid = malloc(max_seg * h * sizeof(float));
  if (!emb || !hid) {
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
  /* group heads: each row belongs to at most one group readout, which reads it after its forward */
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

  /* images: one tower call per image (no image attends to another either way) */
  int64_t t1 = mono_us();
  for (uint32_t i = 0; i < p->n_images; i++) {
    const struct proto_image *im = &p->images[i];
    if (!(image_embeds[i] = malloc((size_t)(im->n_patches / 4) * h * sizeof(float)))) {
      r = -ENOMEM;
      goto out;
    }
    r = ex_vision_forward(x->vision, im->pixels, im->n_patches, im->grid_thw, 1, image_embeds[i],
                          diag);
    if (r) {
      r = r == -CM_ELIMIT || r == -CM_ESHAPE ? -CM_EPROGRAM : r;
      goto out;
    }
  }
  /* prefixes: each continues a clone of its parent's snapshot and keeps its own */
  int64_t t2 = mono_us();
  for (uint32_t i = 0; i < p->n_prefixes; i++) {
    const struct proto_prefix *s = &p->prefixes[i];
    r = s->parent < 0 ? ex_qwen35_state_new(x->model, &snaps[i])
                      : ex_qwen35_state_clone(snaps[s->parent], x->model, &snaps[i]);
    if (!r)
      r = embed_segment(x, s->ids, s->n_tokens, image_embeds, p, s->images, s->n_images, emb,
                        diag);
    if (!r)
      r = ex_qwen35_forward(x->model, snaps[i], emb, s->pos, s->n_tokens, hid, diag);
    if (r)
      goto out;
  }
  /* rows, with their readouts; head readouts gather their hidden rows */
  int64_t t3 = mono_us(), readout_us = 0;
  size_t n_head = 0;
  for (uint32_t i = 0; i < p->n_readouts; i++)
    n_head += p->readouts[i].kind == PROTO_READOUT_HEAD;
  head_in = malloc((n_head + 1) * h * sizeof(float));
  head_of = malloc((n_head + 1) * sizeof(uint32_t));
  if (!head_in || !head_of) {
    r = -ENOMEM;
    goto out;
  }
  size_t k_head = 0;
  for (uint32_t i = 0; i < p->n_rows; i++) {
    const struct proto_row *s = &p->rows[i];
    if (row_start[i] == row_start[i + 1] && group_of[i] < 0)
      continue; /* a row without readouts changes nothing */
    r = s->prefix < 0 ? ex_qwen35_state_new(x->model, &st)
                      : ex_qwen35_state_clone(snaps[s->prefix], x->model, &st);
    if (!r)
      r = embed_segment(x, s->ids, s->n_tokens, NULL, p, NULL, 0, emb, diag);
    if (!r)
      r = ex_qwen35_forward(x->model, st, emb, s->pos, s->n_tokens, hid, diag);
    ex_qwen35_state_free(st);
    st = NULL;
    if (r)
      goto out;
    int64_t tr = mono_us();
    if (group_of[i] >= 0) {
      const struct proto_readout *gr = &p->readouts[group_of[i]];
      const struct loaded_head *lh = find_head(x, gr->head);
      if ((r = lh->kind->group->row(lh->state, x->model, group_acc[group_of[i]], i - gr->row,
                                    gr->position, s->ids, s->n_tokens, hid, diag)))
        goto out;
    }
    for (uint32_t j = row_start[i]; j < row_start[i + 1]; j++) {
      uint32_t ri = by_row[j];
      const struct proto_readout *ro = &p->readouts[ri];
      if (group_of_readout(x, ro))
        continue; /* finished after the last row */
      int32_t q = ro->position < 0 ? (int32_t)s->n_tokens + ro->position : ro->position;
      const float *hrow = hid + (size_t)q * h;
      if (ro->kind == PROTO_READOUT_HEAD) {
        memcpy(head_in + k_head * h, hrow, h * sizeof(float));
        head_of[k_head++] = ri;
      } else {
        fill_readout(x, ro, hrow, logits, res->outputs[ri]);
      }
    }
    readout_us += mono_us() - tr;
  }
  /* heads: group heads finish over their accumulated rows; the others run batched per head */
  int64_t t4 = mono_us();
  for (uint32_t i = 0; i < p->n_readouts; i++) {
    if (!group_acc[i])
      continue;
    const struct loaded_head *lh = find_head(x, p->readouts[i].head);
    if ((r = lh->kind->group->finish(lh->state, group_acc[i], res->outputs[i], diag)))
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
out:
  if (r)
    proto_result_set_error(res, r, diag && diag->msg ? diag->msg : cm_strerror(r));
  for (uint32_t i = 0; image_embeds && i < p->n_images; i++)
    free(image_embeds[i]);
  for (uint32_t i = 0; snaps && i < p->n_prefixes; i++)
    ex_qwen35_state_free(snaps[i]);
  ex_qwen35_state_free(st);
  free(image_embeds), free(snaps), free(widths), free(by_row), free(row_start);
  free(head_in), free(head_out), free(head_of), free(emb), free(hid), free(logits);
  for (uint32_t i = 0; group_acc && i < p->n_readouts; i++)
    if (group_acc[i])
      find_head(x, p->readouts[i].head)->kind->group->free_acc(group_acc[i]);
  free(group_acc), free(group_of);
  return r;
}
