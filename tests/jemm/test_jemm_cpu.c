/* JEMM end to end on the float32 CPU executor, on a tiny random JEMM directory (s1-mkmodel with a
 * rank-16 adapter on every language projection, s1-export --family jemm): requests from the render
 * fixture go through the family's compile, the program runner (shared prefix + one row per
 * question, LABEL_LOGITS) and finish. Checks: in float32 each question's label logits equal those
 * of its own full forward (one row from the empty state for text; an unshared prefix + last-token
 * row with images) to 1e-5 of the logit scale; with bf16 rounding (where the split point moves
 * rounding inside the layers) every logit is a bf16 value and within 8% of the logit scale of the
 * bf16 full forward (an off-grid split changes float32 last bits in the GDN chunks, which flip
 * bf16 roundings that spread through this 64-wide model: measured 1.25% with the fused rounding of
 * before 2026-11-30, 5.3% with every rounding step of the bf16 reference; a wrong state or window
 * moves label logits by their whole scale); the answers parse with the expected keys and usage;
 * and it reports the merged-vs-unmerged difference of the bf16 label logits.
 * usage: test_jemm_cpu UNMERGED_DIR MERGED_DIR RENDER.jsonl */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_program.h"
#include "jemm.h"
#include "pp_family.h"
#include "pp_json.h"

static int fails;

#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      fails++;                                                                                     \
    }                                                                                              \
  } while (0)

static json_object *get(json_object *o, const char *k) {
  json_object *v = NULL;
  json_object_object_get_ex(o, k, &v);
  return v;
}

static bool is_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return (u & 0xFFFF) == 0;
}

/* One bf16 step at x's magnitude (8 significant bits). */
static double bf16_step(double x) {
  int e;
  frexp(fabs(x) > 1e-30 ? x : 1e-30, &e);
  return ldexp(1.0, e - 8);
}

struct model {
  struct cm_model_dir *dir;    /* opened directory */
  struct ex_runner *runner;    /* CPU executor */
  struct pp_model *pm;         /* the loaded jemm model */
  const struct pp_family *fam; /* pm->family */
  void *state;                 /* pm->state */
};

static int open_model(const char *path, bool bf16, struct model *m, struct cm_diag *d) {
  struct ex_runner_options opt = {.numerics = bf16 ? "bf16" : "fp32"};
  int rc = cm_model_dir_open(path, &m->dir, d);
  if (!rc)
    rc = ex_runner_new(m->dir, &opt, &m->runner, d);
  if (!rc && !pp_family_find(m->dir->family))
    return -1;
  if (!rc && !(rc = pp_model_load(m->dir, &m->pm, d))) {
    m->fam = m->pm->family;
    m->state = m->pm->state;
  }
  return rc;
}

static void close_model(struct model *m) {
  pp_model_free(m->pm);
  ex_runner_free(m->runner);
  cm_model_dir_free(m->dir);
}

/* The reference's computation of one question: its whole prompt from the empty state. */
static int full_forward(struct model *m, const struct pp_jemm_request *r, size_t q,
                        const struct proto_program *shared, float *out, struct cm_diag *d) {
  json_object *jt = NULL;
  int32_t image_token_id = json_object_object_get_ex(m->dir->config, "image_token_id", &jt)
                               ? json_object_get_int(jt)
                               : -1;
  const struct pp_jemm_question *x = &r->questions[q];
  struct proto_program p = {0};
  struct proto_result res = {0};
  uint32_t row, pre, img[PP_JEMM_MAX_IMAGES];
  int rc = 0;
  if (!r->n_images) {
    rc = proto_program_add_row(&p, x->ids, NULL, (uint32_t)x->n_ids, -1, &row);
  } else {
    /* the whole prompt but its last token as an unshared prefix, then that token */
    for (size_t i = 0; i < r->n_images && !rc; i++)
      rc = proto_program_add_image(&p, shared->images[i].pixels, shared->images[i].n_patches,
                                   shared->images[i].grid_thw, &img[i]);
    int32_t *pos = malloc(3 * x->n_ids * sizeof *pos);
    struct pp_grid g[PP_JEMM_MAX_IMAGES];
    int32_t next = 0;
    for (size_t i = 0; i < r->n_images; i++)
      g[i] = (struct pp_grid){r->images[i].grid_thw[0], r->images[i].grid_thw[1],
                              r->images[i].grid_thw[2]};
    if (!rc)
      rc = pos ? pp_mrope_positions(x->ids, x->n_ids, image_token_id, g, r->n_images, 0, pos, &next,
                                    d)
               : -1;
    size_t n = x->n_ids - 1;
    int32_t *ppos = pos ? malloc(3 * n * sizeof *ppos) : NULL, last[3];
    for (size_t a = 0; ppos && a < 3; a++) {
      memcpy(ppos + a * n, pos + a * x->n_ids, n * sizeof *ppos);
      last[a] = pos[a * x->n_ids + n];
    }
    if (!rc)
      rc = ppos ? proto_program_add_prefix(&p, x->ids, ppos, (uint32_t)n, -1, img,
                                           (uint32_t)r->n_images, &pre)
                : -1;
    if (!rc)
      rc = proto_program_add_row(&p, x->ids + n, last, 1, (int32_t)pre, &row);
    free(pos);
    free(ppos);
  }
  if (!rc)
    rc = proto_program_add_readout(&p, PROTO_READOUT_LABEL_LOGITS, row, -1, shared->readouts[q].ids,
                                   shared->readouts[q].n_ids, NULL, NULL);
  if (!rc)
    rc = ex_runner_run(m->runner, &p, &res, d);
  if (!rc)
    memcpy(out, res.outputs[0], x->n_candidates * sizeof(float));
  proto_result_fini(&res);
  proto_program_fini(&p);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s UNMERGED_DIR MERGED_DIR RENDER.jsonl\n", argv[0]);
    return 2;
  }
  struct cm_diag d = {0};
  struct model um = {0}, mm = {0}, uf = {0}; /* unmerged bf16, merged bf16, unmerged float32 */
  if (open_model(argv[1], true, &um, &d) || open_model(argv[2], true, &mm, &d) ||
      open_model(argv[1], false, &uf, &d)) {
    fprintf(stderr, "model: %s\n", d.msg ? d.msg : "no jemm family in this build");
    return 1;
  }
  EXPECT(um.dir->adapter && !mm.dir->adapter, "unmerged dir keeps the adapter, merged does not");
  const char *wanted[] = {"three_questions_shared_prefix", "text_multi_structured",
                          "j13_special_in_description", "image_one_256"};
  FILE *f = fopen(argv[3], "r");
  char *line = NULL;
  size_t cap = 0;
  int n_run = 0;
  double max_merge_diff = 0.0, max_split_ratio = 0.0;
  while (f && getline(&line, &cap, f) > 0) {
    json_object *c = json_tokener_parse(line), *root = NULL;
    const char *name = json_object_get_string(get(c, "name"));
    bool want = false;
    for (size_t i = 0; name && i < sizeof wanted / sizeof *wanted; i++)
      want |= strcmp(name, wanted[i]) == 0;
    if (!want) {
      json_object_put(c);
      continue;
    }
    struct proto_program p = {0}, pm = {0};
    struct proto_result res = {0}, resm = {0};
    struct pp_request_info info = {.request_id = name, .received_us = proto_now_us()};
    void *ctx = NULL, *ctxm = NULL;
    char *json = NULL, *jsonm = NULL;
    size_t n_json = 0, n_jsonm = 0;
    struct pp_finish_stats st = {0};
    json_object *jb = get(c, "body");
    cm_diag_fini(&d);
    int rc = pp_json_parse(json_object_get_string(jb), (size_t)json_object_get_string_len(jb),
                           &root, &d);
    if (!rc)
      rc = um.fam->compile(um.state, root, &info, &p, &ctx, &d);
    if (!rc)
      rc = ex_runner_run(um.runner, &p, &res, &d);
    if (!rc)
      rc = um.fam->finish(um.state, ctx, &res, &info, &json, &n_json, &st, &d);
    if (!rc)
      rc = mm.fam->compile(mm.state, root, &info, &pm, &ctxm, &d);
    if (!rc)
      rc = ex_runner_run(mm.runner, &pm, &resm, &d);
    if (!rc)
      rc = mm.fam->finish(mm.state, ctxm, &resm, &info, &jsonm, &n_jsonm, NULL, &d);
    EXPECT(rc == 0, "%s: %s", name, d.msg ? d.msg : cm_strerror(rc));
    const struct pp_jemm_request *r = ctx;
    struct proto_result resf = {0};
    if (!rc)
      rc = ex_runner_run(uf.runner, &p, &resf, &d);
    EXPECT(rc == 0, "%s: float32 run: %s", name, d.msg ? d.msg : cm_strerror(rc));
    for (size_t q = 0; !rc && q < r->n_questions; q++) {
      float ref[PP_JEMM_N_LABELS], refb[PP_JEMM_N_LABELS];
      const float *got = resf.outputs[q], *b = res.outputs[q];
      size_t n = r->questions[q].n_candidates;
      int frc = full_forward(&uf, r, q, &p, ref, &d);
      if (!frc)
        frc = full_forward(&um, r, q, &p, refb, &d);
      EXPECT(frc == 0, "%s: full forward of %s: %s", name, r->questions[q].id, d.msg);
      double scale = 1e-3;
      for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs((double)ref[i]));
      for (size_t i = 0; !frc && i < n; i++) {
        EXPECT(fabs((double)got[i] - ref[i]) <= 1e-5 * scale,
               "%s: %s label %zu: continuation %.9g, full forward %.9g", name, r->questions[q].id,
               i, got[i], ref[i]);
        EXPECT(is_bf16(b[i]) && is_bf16(refb[i]) &&
                   fabs((double)b[i] - refb[i]) <= 0.08 * scale + bf16_step(refb[i]),
               "%s: %s label %zu: bf16 continuation %.9g, bf16 full forward %.9g", name,
               r->questions[q].id, i, b[i], refb[i]);
        double ratio = fabs((double)b[i] - refb[i]) / scale;
        max_split_ratio = ratio > max_split_ratio ? ratio : max_split_ratio;
        double dm = fabs((double)resm.outputs[q][i] - b[i]);
        max_merge_diff = dm > max_merge_diff ? dm : max_merge_diff;
      }
    }
    proto_result_fini(&resf);
    if (!rc) {
      json_object *resp = json_tokener_parse(json), *ans = get(resp, "answers");
      EXPECT(resp && !strcmp(json_object_get_string(get(resp, "model")), "JEMM") &&
                 json_object_object_length(ans) == (int)r->n_questions &&
                 json_object_get_int64(get(get(resp, "usage"), "input_tokens")) ==
                     (int64_t)r->input_tokens &&
                 st.tokens == r->input_tokens,
             "%s: response %s", name, json);
      printf("%s: %s\n", name, json);
      json_object_put(resp);
      n_run++;
    }
    um.fam->ctx_free(ctx);
    mm.fam->ctx_free(ctxm);
    free(json);
    free(jsonm);
    proto_result_fini(&res);
    proto_result_fini(&resm);
    proto_program_fini(&p);
    proto_program_fini(&pm);
    json_object_put(root);
    json_object_put(c);
  }
  printf("%d requests; merged vs unmerged: largest label-logit difference %.6g; bf16 continuation "
         "vs full forward: largest difference %.4f of the logit scale\n",
         n_run, max_merge_diff, max_split_ratio);
  EXPECT(n_run == (int)(sizeof wanted / sizeof *wanted), "ran %d of the wanted cases", n_run);
  EXPECT(max_merge_diff > 0.0, "merging changed nothing: the adapter is not applied");
  free(line);
  if (f)
    fclose(f);
  close_model(&um);
  close_model(&mm);
  close_model(&uf);
  cm_diag_fini(&d);
  return fails ? 1 : 0;
}
