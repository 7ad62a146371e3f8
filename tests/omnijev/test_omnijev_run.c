/* One OmniJev request through the real pieces on the CPU: the family loads the exported model
 * directory, compiles REQUEST.json into a program, the executor's runner runs it (image, shared
 * prefix, rows continuing its snapshot, the "omnijev" group readouts), and finish writes the
 * response. Extra HIDDEN readouts of every row from <|opt|> − 1 on are dumped with the group
 * outputs to OUT/run.safetensors for the numpy check; each question's first row is also run as
 * one full forward (prefix + row without a snapshot split), which must give the same hidden state.
 * usage: test_omnijev_run MODEL_DIR REQUEST.json OUT_DIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cm_model_dir.h"
#include "ex_program.h"
#include "pp_family.h"
#include "proto.h"

#define OPT_ID 248077

static int die(const char *what, struct cm_diag *d) {
  fprintf(stderr, "FAIL %s: %s\n", what, d && d->msg ? d->msg : "");
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s MODEL_DIR REQUEST.json OUT_DIR\n", argv[0]);
    return 2;
  }
  struct cm_diag d = {0};
  struct cm_model_dir *dir = NULL;
  if (cm_model_dir_open(argv[1], &dir, &d))
    return die("model dir", &d);
  struct pp_model *pm = NULL;
  if (pp_model_load(dir, &pm, &d))
    return die("family load", &d);
  const struct pp_family *fam = pm->family;
  void *state = pm->state, *ctx = NULL;
  json_object *req = json_object_from_file(argv[2]);
  struct proto_program p = {0};
  struct pp_request_info info = {.request_id = "t"};
  if (!req || fam->compile(state, req, &info, &p, &ctx, &d))
    return die("compile", &d);
  uint32_t n_family = p.n_readouts, n_rows = p.n_rows;
  /* extra readouts: HIDDEN at every position from <|opt|> − 1 to the end of every row */
  uint32_t *first_extra = calloc(n_rows + 1, sizeof *first_extra), *opos = calloc(n_rows + 1, 4);
  for (uint32_t r = 0; r < n_rows; r++) {
    const struct proto_row *row = &p.rows[r];
    uint32_t o = 0;
    while (o < row->n_tokens && row->ids[o] != OPT_ID)
      o++;
    opos[r] = o;
    first_extra[r] = p.n_readouts;
    for (uint32_t t = o - 1; t < row->n_tokens; t++)
      if (proto_program_add_readout(&p, PROTO_READOUT_HIDDEN, r, (int32_t)t, NULL, 0, NULL, NULL))
        return die("add readout", NULL);
  }
  /* full forwards: for the first row of each question, a prefix of prefix + row[:-1] (one pass
   * from the empty state) and its last token as a row */
  uint32_t n_full = 0, full_row[64], full_of[64];
  for (uint32_t i = 0; i < n_family && n_full < 64; i++) {
    uint32_t ro_row = p.readouts[i].row; /* copied: the adds below may move p.readouts */
    const struct proto_prefix *pre = &p.prefixes[0];
    const struct proto_row *row = &p.rows[ro_row];
    uint32_t n = pre->n_tokens + row->n_tokens - 1;
    int32_t *ids = malloc(n * 4), *pos = malloc(3 * (size_t)n * 4), lastpos[3];
    for (int a = 0; a < 3; a++) {
      memcpy(pos + (size_t)a * n, pre->pos + (size_t)a * pre->n_tokens, pre->n_tokens * 4);
      memcpy(pos + (size_t)a * n + pre->n_tokens, row->pos + (size_t)a * row->n_tokens,
             (row->n_tokens - 1) * 4);
      lastpos[a] = row->pos[(size_t)a * row->n_tokens + row->n_tokens - 1];
    }
    memcpy(ids, pre->ids, pre->n_tokens * 4);
    memcpy(ids + pre->n_tokens, row->ids, (row->n_tokens - 1) * 4);
    uint32_t pi, ri, img[16], n_img = p.prefixes[0].n_images;
    /* the request prefix's images again (an image feeds one prefix); copies first: adding an
     * image may move p.images and p.prefixes */
    for (uint32_t k = 0; k < n_img && k < 16; k++) {
      const struct proto_image *src = &p.images[p.prefixes[0].images[k]];
      int32_t grid[3] = {src->grid_thw[0], src->grid_thw[1], src->grid_thw[2]};
      const float *pixels = src->pixels;
      uint32_t n_patches = src->n_patches;
      if (proto_program_add_image(&p, pixels, n_patches, grid, &img[k]))
        return die("full forward image", NULL);
    }
    if (n_img > 16 || proto_program_add_prefix(&p, ids, pos, n, -1, img, n_img, &pi) ||
        proto_program_add_row(&p, row->ids + row->n_tokens - 1, lastpos, 1, (int32_t)pi, &ri) ||
        proto_program_add_readout(&p, PROTO_READOUT_HIDDEN, ri, 0, NULL, 0, NULL, NULL))
      return die("full forward program", NULL);
    full_row[n_full] = ro_row;
    full_of[n_full++] = p.n_readouts - 1;
    free(ids), free(pos);
  }
  struct ex_runner *runner = NULL;
  struct proto_result res = {0};
  if (ex_runner_new(dir, NULL, &runner, &d))
    return die("runner", &d);
  if (ex_runner_run(runner, &p, &res, &d))
    return die("run", &d);
  /* the family's finish sees only its own readouts */
  struct proto_result fres = res;
  fres.n_outputs = n_family;
  char *json = NULL;
  size_t n_json = 0;
  struct pp_finish_stats stats = {0};
  if (fam->finish(state, ctx, &fres, &info, &json, &n_json, &stats, &d))
    return die("finish", &d);
  char path[4096];
  snprintf(path, sizeof path, "%s/response.json", argv[3]);
  FILE *f = fopen(path, "w");
  fwrite(json, 1, n_json, f);
  fclose(f);
  int fails = 0;
  size_t H = (size_t)res.n_floats[first_extra[0]];
  for (uint32_t k = 0; k < n_full; k++) {
    const struct proto_row *row = &p.rows[full_row[k]];
    const float *a = res.outputs[full_of[k]];
    const float *b = res.outputs[first_extra[full_row[k]] + (row->n_tokens - opos[full_row[k]])];
    double err = 0.0, ref = 0.0;
    for (size_t i = 0; i < H; i++) {
      err = fmax(err, fabs((double)a[i] - (double)b[i]));
      ref = fmax(ref, fabs((double)b[i]));
    }
    if (!(err <= 1e-4 * fmax(1.0, ref))) {
      fprintf(stderr, "FAIL row %u differs from its full forward by %.3g\n", full_row[k], err);
      fails++;
    }
  }
  /* dump for numpy */
  struct cm_safetensors_writer *w = NULL;
  cm_safetensors_writer_new(&w);
  float **keep = calloc(4 * n_rows + n_family + 8, sizeof *keep);
  size_t nk = 0;
  for (uint32_t i = 0; i < n_family; i++) {
    char name[64];
    int64_t shape[1] = {res.n_floats[i]};
    snprintf(name, sizeof name, "q%u.out", i);
    cm_safetensors_writer_add(w, name, CM_DTYPE_F32, 1, shape, res.outputs[i]);
    float *meta = keep[nk++] = malloc(3 * sizeof *meta);
    meta[0] = (float)p.readouts[i].ids[0];
    meta[1] = (float)p.readouts[i].ids[1];
    meta[2] = (float)p.readouts[i].row;
    int64_t s3[1] = {3};
    snprintf(name, sizeof name, "q%u.meta", i);
    cm_safetensors_writer_add(w, name, CM_DTYPE_F32, 1, s3, meta);
  }
  for (uint32_t r = 0; r < n_rows; r++) {
    const struct proto_row *row = &p.rows[r];
    uint32_t m = row->n_tokens - (opos[r] - 1);
    float *hid = keep[nk++] = malloc((size_t)m * H * sizeof *hid);
    for (uint32_t t = 0; t < m; t++)
      memcpy(hid + (size_t)t * H, res.outputs[first_extra[r] + t], H * sizeof *hid);
    float *ids = keep[nk++] = malloc(row->n_tokens * sizeof *ids);
    for (uint32_t t = 0; t < row->n_tokens; t++)
      ids[t] = (float)row->ids[t];
    char name[64];
    int64_t s2[2] = {m, (int64_t)H}, s1[1] = {row->n_tokens};
    snprintf(name, sizeof name, "row%u.hidden", r);
    cm_safetensors_writer_add(w, name, CM_DTYPE_F32, 2, s2, hid);
    snprintf(name, sizeof name, "row%u.ids", r);
    cm_safetensors_writer_add(w, name, CM_DTYPE_F32, 1, s1, ids);
  }
  snprintf(path, sizeof path, "%s/run.safetensors", argv[3]);
  if (cm_safetensors_writer_finish(w, path, &d))
    return die("dump", &d);
  cm_safetensors_writer_free(w);
  for (size_t i = 0; i < nk; i++)
    free(keep[i]);
  free(keep), free(first_extra), free(opos), free(json);
  printf("omnijev run: %u questions, %u rows, %llu input tokens; %u full forwards %s\n", n_family,
         n_rows, (unsigned long long)stats.tokens, n_full, fails ? "DIFFER" : "agree");
  proto_result_fini(&res);
  proto_program_fini(&p);
  fam->ctx_free(ctx);
  pp_model_free(pm);
  ex_runner_free(runner);
  cm_model_dir_free(dir);
  json_object_put(req);
  cm_diag_fini(&d);
  return fails ? 1 : 0;
}
