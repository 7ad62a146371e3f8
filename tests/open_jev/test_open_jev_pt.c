/* The torch .pt reader of s1-export --family open_jev on files written by real torch.save (torch
 * 2.11 on the GPU machine, tests/oracle/open_jev_e2e.py) and by recipe/open_jev/write_head_pt.py:
 * every tensor's name, dtype, shape and value must equal what torch reported, and the formats the
 * reader refuses (non-contiguous, int64 storage, truncated, not a zip) must be refused.
 * usage: test_open_jev_pt PT_FIXTURE_DIR E2E_FIXTURE_DIR */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "open_jev_pt.h"

static int fails;

#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                              \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      fails++;                                                                                     \
    }                                                                                              \
  } while (0)

static char *path(const char *dir, const char *name) {
  static char buf[4][1024];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

static const char *dtype_torch(enum cm_dtype t) {
  return t == CM_DTYPE_F32 ? "torch.float32" : t == CM_DTYPE_F16 ? "torch.float16" : "torch.bfloat16";
}

static uint8_t *slurp(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)sz + 1);
  if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
    free(b);
    b = NULL;
  }
  fclose(f);
  *n = (size_t)sz;
  return b;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s PT_DIR E2E_DIR\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1], *e2e = argv[2];
  struct cm_diag d = {0};
  struct ex_pt_state st = {0};
  /* variety.pt: f32 / f16 / bf16, a view sharing a storage with an offset, a 0-d tensor */
  json_object *want = json_object_from_file(path(dir, "variety.json"));
  int rc = ex_pt_read_file(path(dir, "variety.pt"), &st, &d);
  EXPECT(rc == 0 && want, "variety.pt: %s", d.msg ? d.msg : "no variety.json");
  if (rc == 0 && want) {
    EXPECT(st.n_tensors == (size_t)json_object_object_length(want), "variety.pt: %zu tensors",
           st.n_tensors);
    size_t i = 0;
    json_object_object_foreach(want, name, w) {
      const struct ex_pt_tensor *t = i < st.n_tensors ? &st.tensors[i] : NULL;
      i++;
      if (!t || strcmp(t->name, name) != 0) {
        EXPECT(0, "tensor %zu should be '%s'", i - 1, name);
        continue;
      }
      json_object *shape, *dt, *vals;
      json_object_object_get_ex(w, "shape", &shape);
      json_object_object_get_ex(w, "dtype", &dt);
      json_object_object_get_ex(w, "values", &vals);
      EXPECT(strcmp(dtype_torch(t->dtype), json_object_get_string(dt)) == 0, "%s: dtype %s", name,
             dtype_torch(t->dtype));
      EXPECT((size_t)t->n_dims == json_object_array_length(shape), "%s: %d dims", name, t->n_dims);
      for (int k = 0; k < t->n_dims && (size_t)k < json_object_array_length(shape); k++)
        EXPECT(t->shape[k] == json_object_get_int64(json_object_array_get_idx(shape, k)),
               "%s: dim %d is %lld", name, k, (long long)t->shape[k]);
      EXPECT((size_t)t->n_elems == json_object_array_length(vals), "%s: %lld values", name,
             (long long)t->n_elems);
      for (int64_t k = 0; k < t->n_elems && (size_t)k < json_object_array_length(vals); k++)
        EXPECT((double)t->data[k] == json_object_get_double(json_object_array_get_idx(vals, k)),
               "%s[%lld]: %.9g, torch %.9g", name, (long long)k, t->data[k],
               json_object_get_double(json_object_array_get_idx(vals, k)));
    }
  }
  ex_pt_state_fini(&st);
  json_object_put(want);
  /* the package's head.pt: nn.Linear(64, 1).state_dict() (OrderedDict with _metadata) */
  cm_diag_fini(&d);
  rc = ex_pt_read_file(path(e2e, "package/head.pt"), &st, &d);
  const struct ex_pt_tensor *w = rc ? NULL : ex_pt_find(&st, "weight"),
                            *b = rc ? NULL : ex_pt_find(&st, "bias");
  EXPECT(w && b && st.n_tensors == 2 && w->n_dims == 2 && w->shape[0] == 1 && w->shape[1] == 64 &&
             b->n_elems == 1 && w->dtype == CM_DTYPE_F32 && b->data[0] == 0.1f,
         "head.pt: %s", d.msg ? d.msg : "wrong tensors");
  ex_pt_state_fini(&st);
  /* the standard-library writer's file, as torch.load read it on the GPU machine */
  json_object *fix = json_object_from_file(path(e2e, "e2e.json")), *pt, *v;
  cm_diag_fini(&d);
  rc = ex_pt_read_file(path(dir, "stdlib_head.pt"), &st, &d);
  EXPECT(rc == 0 && fix && json_object_object_get_ex(fix, "pt", &pt), "stdlib_head.pt: %s",
         d.msg ? d.msg : "no e2e.json pt entry");
  if (rc == 0 && fix && (w = ex_pt_find(&st, "weight")) && (b = ex_pt_find(&st, "bias")) &&
      json_object_object_get_ex(pt, "stdlib_pt_weight_sum", &v)) {
    double sum = 0;
    for (int64_t k = 0; k < w->n_elems; k++)
      sum += w->data[k];
    EXPECT(fabs(sum - json_object_get_double(v)) < 1e-12, "stdlib weight sum %.17g, torch %.17g",
           sum, json_object_get_double(v));
    json_object_object_get_ex(pt, "stdlib_pt_bias", &v);
    EXPECT(b->data[0] == (float)json_object_get_double(json_object_array_get_idx(v, 0)),
           "stdlib bias %.9g", b->data[0]);
  }
  ex_pt_state_fini(&st);
  json_object_put(fix);
  /* refusals */
  static const struct {
    const char *file;
    int code;
  } refused[] = {{"noncontig.pt", -CM_EUNSUPPORTED}, {"int64.pt", -CM_EUNSUPPORTED}};
  for (size_t i = 0; i < 2; i++) {
    cm_diag_fini(&d);
    rc = ex_pt_read_file(path(dir, refused[i].file), &st, &d);
    EXPECT(rc == refused[i].code, "%s: rc %d (%s)", refused[i].file, rc, d.msg ? d.msg : "");
    ex_pt_state_fini(&st);
  }
  size_t n = 0;
  uint8_t *bytes = slurp(path(dir, "variety.pt"), &n);
  EXPECT(bytes != NULL, "cannot read variety.pt");
  for (size_t cut = 0; bytes && cut < n; cut += 97) {
    cm_diag_fini(&d);
    rc = ex_pt_read(bytes, cut, &st, &d);
    EXPECT(rc < 0, "variety.pt cut at %zu bytes was accepted", cut);
    ex_pt_state_fini(&st);
  }
  free(bytes);
  cm_diag_fini(&d);
  rc = ex_pt_read((const uint8_t *)"{\"weight\": [1]}", 15, &st, &d);
  EXPECT(rc == -CM_EFORMAT, "JSON accepted as a .pt file: %d", rc);
  cm_diag_fini(&d);
  if (!fails)
    printf(".pt reader matches torch on every fixture\n");
  return fails ? 1 : 0;
}
