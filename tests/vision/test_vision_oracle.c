/* Golden test: the float32 C vision tower against transformers 5.17 (fp32, CPU, eager), on the
 * fixtures of tests/oracle/vision_fixtures.py (tiny-A and an hd-72 config, BF16 weights). Checks
 * the merger output and the per-stage outputs (relative error <= 1e-5, max|c − o| / max|o|), the
 * rotary frequencies, and that a two-image call equals its one-image calls bit for bit.
 * Usage: test_vision_oracle FIXTURE_DIR (tests/fixtures/vision). */
#include <json-c/json.h>
#include <stdbool.h>

#include "ex_vision.h"
#include "vision_rotary.h"
#include "vision_test_util.h"

#define TOL 1e-5

static double g_max_out, g_max_stage; /* measured worst errors, printed at the end */

struct stages {
  float *x[16];  /* stage k copy [rows, cols] */
  int64_t rows;  /* rows of every stage */
  int cols;      /* hidden size */
  int n;         /* stages seen */
};

/* stop after the first block (the executor's deadline check between blocks) */
static bool stop_after_block0(void *user) {
  return ((struct stages *)user)->n >= 2;
}

static void on_stage(void *user, int stage, const float *x, int64_t rows, int cols) {
  struct stages *s = user;
  if (stage < 0 || stage >= 16)
    return;
  free(s->x[stage]);
  s->x[stage] = malloc((size_t)rows * (size_t)cols * sizeof(float));
  if (s->x[stage])
    memcpy(s->x[stage], x, (size_t)rows * (size_t)cols * sizeof(float));
  s->rows = rows;
  s->cols = cols;
  if (stage + 1 > s->n)
    s->n = stage + 1;
}

/* A case's output from the C tower, kept to compare the two-image call with the single ones. */
struct result {
  char name[32];    /* case name */
  int32_t grid[3];  /* the grid of a one-image case */
  float *out;       /* [rows, O] */
  size_t n_floats;  /* rows·O */
};

static struct json_object *get(struct json_object *o, const char *key) {
  struct json_object *v = NULL;
  json_object_object_get_ex(o, key, &v);
  return v;
}

static void run_case(const char *dir, const char *cfg_name, const struct ex_vision *v,
                     struct json_object *jc, struct result *res) {
  const char *cname = json_object_get_string(get(jc, "name"));
  struct json_object *jg = get(jc, "grids"), *js = get(jc, "seeds"), *jsum = get(jc, "pixel_sums");
  int n_img = (int)json_object_array_length(jg);
  int32_t grid[8 * 3];
  int64_t n = 0;
  CHECK(n_img >= 1 && n_img <= 8, "%s/%s: %d images", cfg_name, cname, n_img);
  if (n_img < 1 || n_img > 8)
    return;
  for (int i = 0; i < n_img; i++) {
    struct json_object *g = json_object_array_get_idx(jg, (size_t)i);
    for (int k = 0; k < 3; k++)
      grid[3 * i + k] = json_object_get_int(json_object_array_get_idx(g, (size_t)k));
    n += (int64_t)grid[3 * i] * grid[3 * i + 1] * grid[3 * i + 2];
  }
  size_t pd = (size_t)v->cfg.patch_dim, O = (size_t)v->cfg.out_hidden_size;
  float *pix = malloc((size_t)n * pd * sizeof(float));
  size_t row = 0;
  for (int i = 0; pix && i < n_img; i++) {
    size_t rows = (size_t)grid[3 * i] * (size_t)grid[3 * i + 1] * (size_t)grid[3 * i + 2];
    uint32_t seed = (uint32_t)json_object_get_int64(json_object_array_get_idx(js, (size_t)i));
    gen_pixels(seed, rows, pd, pix + row * pd);
    double sum = 0.0;
    for (size_t k = 0; k < rows * pd; k++)
      sum += pix[row * pd + k];
    double want = json_object_get_double(json_object_array_get_idx(jsum, (size_t)i));
    CHECK(sum == want, "%s/%s image %d: pixel generator sum %.17g, oracle %.17g", cfg_name, cname,
          i, sum, want);
    row += rows;
  }
  int64_t n_merged = 0;
  struct cm_diag d = {0};
  CHECK(ex_vision_count(v, grid, n_img, NULL, &n_merged, &d) == 0, "count: %s", d.msg);
  size_t n_out = (size_t)n_merged * O;
  float *out = malloc(n_out * sizeof(float) + 1);
  struct stages st = {0};
  struct ex_vision_trace tr = {.fn = on_stage, .user = &st};
  int r = pix && out ? ex_vision_forward_trace(v, pix, n, grid, n_img, out, &tr, &d) : -1;
  CHECK(r == 0, "%s/%s: forward returned %d: %s", cfg_name, cname, r, d.msg ? d.msg : "");
  cm_diag_fini(&d);
  if (r == 0) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, json_object_get_string(get(jc, "output")));
    float *ref = read_f32(path, n_out);
    CHECK(ref != NULL, "cannot read %s as %zu floats", path, n_out);
    if (ref) {
      double e = rel_err(out, ref, n_out);
      if (e > g_max_out)
        g_max_out = e;
      printf("%s/%s: %lld patches -> %lld rows; merger output rel err %.3g\n", cfg_name, cname,
             (long long)n, (long long)n_merged, e);
      CHECK(e <= TOL, "%s/%s: merger output rel err %.3g > %g", cfg_name, cname, e, TOL);
      free(ref);
    }
    struct json_object *jst = get(jc, "stages");
    size_t n_st = jst ? json_object_array_length(jst) : 0;
    CHECK(n_st == 0 || (int)n_st == st.n, "%s/%s: %zu oracle stages, %d from C", cfg_name, cname,
          n_st, st.n);
    for (size_t k = 0; k < n_st && (int)k < st.n; k++) {
      snprintf(path, sizeof path, "%s/%s", dir,
               json_object_get_string(json_object_array_get_idx(jst, k)));
      size_t cnt = (size_t)st.rows * (size_t)st.cols;
      float *sref = read_f32(path, cnt);
      CHECK(sref != NULL, "cannot read %s as %zu floats", path, cnt);
      if (!sref)
        continue;
      double e = rel_err(st.x[k], sref, cnt);
      if (e > g_max_stage)
        g_max_stage = e;
      printf("%s/%s: stage %zu rel err %.3g\n", cfg_name, cname, k, e);
      CHECK(e <= TOL, "%s/%s: stage %zu rel err %.3g > %g", cfg_name, cname, k, e, TOL);
      free(sref);
    }
  }
  /* the same forward told to stop after block 0: -CM_ETIMEOUT, no further block, nothing written */
  if (v->cfg.depth > 1 && pix && out) {
    struct stages st2 = {0};
    struct ex_vision_trace stop = {.fn = on_stage, .user = &st2, .stop = stop_after_block0};
    memset(out, 0xff, n_out * sizeof(float));
    int r2 = ex_vision_forward_trace(v, pix, n, grid, n_img, out, &stop, &d);
    CHECK(r2 == -CM_ETIMEOUT && st2.n == 2 && d.msg && strstr(d.msg, "stopped after 1 of"),
          "%s/%s: stopped forward returned %d after %d stages: %s", cfg_name, cname, r2, st2.n,
          d.msg ? d.msg : "");
    uint32_t u;
    memcpy(&u, out, sizeof(u));
    CHECK(u == 0xffffffffu, "%s/%s: a stopped forward wrote its output", cfg_name, cname);
    cm_diag_fini(&d);
    for (int k = 0; k < 16; k++)
      free(st2.x[k]);
  }
  for (int k = 0; k < 16; k++)
    free(st.x[k]);
  snprintf(res->name, sizeof res->name, "%s", cname);
  memcpy(res->grid, grid, sizeof res->grid);
  res->out = r == 0 ? out : NULL;
  res->n_floats = n_out;
  if (r != 0)
    free(out);
  free(pix);
}

static void run_config(const char *dir, const char *name, struct json_object *jcfg) {
  struct cm_diag d = {0};
  struct ex_vision_config cfg;
  struct cm_safetensors *st = NULL;
  struct ex_vision *v = NULL;
  int r = ex_vision_config_parse(get(jcfg, "vision_config"), &cfg, &d);
  CHECK(r == 0, "%s: config: %s", name, d.msg ? d.msg : "");
  if (r)
    goto done;

  /* The rotary frequencies equal the oracle's buffer to within an ulp. */
  struct json_object *jf = get(jcfg, "rotary_inv_freq");
  float inv[64];
  CHECK(cfg.head_dim / 4 <= 64 && jf && (int)json_object_array_length(jf) == cfg.head_dim / 4,
        "%s: rotary_inv_freq length", name);
  if (cfg.head_dim / 4 <= 64 && jf) {
    ex_vision_rotary_inv_freq(cfg.head_dim, cfg.rope_theta, inv);
    for (int j = 0; j < cfg.head_dim / 4 && j < (int)json_object_array_length(jf); j++) {
      double want = json_object_get_double(json_object_array_get_idx(jf, (size_t)j));
      CHECK(fabs(inv[j] - want) <= 1.2e-7 * want, "%s: inv_freq[%d] %.9g, oracle %.9g", name, j,
            (double)inv[j], want);
    }
  }

  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, json_object_get_string(get(jcfg, "weights")));
  r = cm_safetensors_open(path, &st, &d);
  CHECK(r == 0, "%s: open %s: %s", name, path, d.msg ? d.msg : "");
  if (r)
    goto done;
  r = ex_vision_new(&cfg, st, NULL, &v, &d);
  CHECK(r == 0, "%s: load: %s", name, d.msg ? d.msg : "");
  cm_safetensors_close(st);
  if (r)
    goto done;

  struct json_object *jcases = get(jcfg, "cases");
  size_t n_cases = json_object_array_length(jcases);
  struct result *res = calloc(n_cases, sizeof *res);
  for (size_t i = 0; res && i < n_cases; i++)
    run_case(dir, name, v, json_object_array_get_idx(jcases, i), &res[i]);

  /* Isolation: the "two" case equals the concatenation of its images' one-image calls, exactly. */
  bool seen_two = false;
  for (size_t i = 0; res && i < n_cases; i++) {
    if (strcmp(res[i].name, "two") != 0)
      continue;
    seen_two = true;
    struct json_object *jg = get(json_object_array_get_idx(jcases, i), "grids");
    size_t off = 0;
    for (size_t k = 0; k < json_object_array_length(jg); k++) {
      struct json_object *g = json_object_array_get_idx(jg, k);
      int32_t want[3];
      for (int q = 0; q < 3; q++)
        want[q] = json_object_get_int(json_object_array_get_idx(g, (size_t)q));
      const struct result *one = NULL;
      for (size_t j = 0; j < n_cases; j++)
        if (strcmp(res[j].name, "two") != 0 && memcmp(res[j].grid, want, sizeof want) == 0)
          one = &res[j];
      CHECK(one && one->out && res[i].out, "%s: no one-image result for image %zu", name, k);
      if (!one || !one->out || !res[i].out || off + one->n_floats > res[i].n_floats)
        break;
      CHECK(memcmp(res[i].out + off, one->out, one->n_floats * sizeof(float)) == 0,
            "%s: image %zu of the two-image call differs from its one-image call", name, k);
      off += one->n_floats;
    }
    CHECK(off == res[i].n_floats, "%s: two-image output has %zu floats, singles %zu", name,
          res[i].n_floats, off);
    printf("%s/two: equals the one-image calls bit for bit: %s\n", name,
           off == res[i].n_floats ? "checked" : "NOT checked");
  }
  CHECK(seen_two, "%s: no two-image case", name);
  for (size_t i = 0; res && i < n_cases; i++)
    free(res[i].out);
  free(res);
done:
  ex_vision_free(v);
  cm_diag_fini(&d);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s FIXTURE_DIR\n", argv[0]);
    return 2;
  }
  char path[1024];
  snprintf(path, sizeof path, "%s/index.json", argv[1]);
  struct json_object *idx = json_object_from_file(path);
  CHECK(idx != NULL, "cannot parse %s", path);
  if (!idx)
    return 1;
  printf("oracle: transformers %s, torch %s, %s %s %s\n", json_object_get_string(get(idx, "transformers")),
         json_object_get_string(get(idx, "torch")), json_object_get_string(get(idx, "device")),
         json_object_get_string(get(idx, "dtype")), json_object_get_string(get(idx, "attn")));
  struct json_object *cfgs = get(idx, "configs");
  int n_cfg = 0;
  json_object_object_foreach(cfgs, key, val) {
    CHECK(get(val, "error") == NULL, "%s: the oracle run failed", key);
    if (get(val, "error"))
      continue;
    run_config(argv[1], key, val);
    n_cfg++;
  }
  CHECK(n_cfg == 2, "%d configs, expected 2", n_cfg);
  json_object_put(idx);
  printf("max rel err: merger output %.3g, stages %.3g (tolerance %g)\n", g_max_out, g_max_stage,
         TOL);
  printf("%s\n", g_fail ? "FAILED" : "ok");
  return g_fail ? 1 : 0;
}
