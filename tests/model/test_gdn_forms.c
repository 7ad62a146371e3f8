/* The chunked (chunk 64) and recurrent forms of the Gated DeltaNet core agree on random data,
 * with a non-zero incoming state, ratio-2 and ratio-3 head grouping, dk ≠ dv and lengths around
 * the chunk edges; and a float64 recurrence checks the float32 recurrent form itself. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_gdn.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float urand(void) { /* uniform in [-1, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static double rel(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    den += (double)b[i] * b[i];
  }
  return sqrt(num / (den > 0 ? den : 1));
}

/* float64 recurrence on already prepared inputs */
static void ref64(const float *q, const float *k, const float *v, const float *beta, const float *g,
                  double *s, double *out, size_t n, const struct ex_gdn_dims *d) {
  size_t r = d->n_v_heads / d->n_k_heads;
  for (size_t t = 0; t < n; t++)
    for (size_t h = 0; h < d->n_v_heads; h++) {
      const float *qt = q + (t * d->n_k_heads + h / r) * d->dk;
      const float *kt = k + (t * d->n_k_heads + h / r) * d->dk;
      const float *vt = v + (t * d->n_v_heads + h) * d->dv;
      double *S = s + h * d->dk * d->dv, e = exp((double)g[t * d->n_v_heads + h]);
      for (size_t i = 0; i < d->dk * d->dv; i++)
        S[i] *= e;
      for (size_t c = 0; c < d->dv; c++) {
        double m = 0;
        for (size_t a = 0; a < d->dk; a++)
          m += S[a * d->dv + c] * kt[a];
        double delta = beta[t * d->n_v_heads + h] * (vt[c] - m);
        for (size_t a = 0; a < d->dk; a++)
          S[a * d->dv + c] += kt[a] * delta;
      }
      for (size_t c = 0; c < d->dv; c++) {
        double o = 0;
        for (size_t a = 0; a < d->dk; a++)
          o += S[a * d->dv + c] * qt[a];
        out[(t * d->n_v_heads + h) * d->dv + c] = o;
      }
    }
}

static int run(size_t n, size_t hk, size_t hv, size_t dk, size_t dv) {
  struct ex_gdn_dims d = {hk, hv, dk, dv};
  size_t nq = n * hk * dk, nv = n * hv * dv, ns = hv * dk * dv;
  float *q = malloc(nq * 4), *k = malloc(nq * 4), *v = malloc(nv * 4);
  float *b = malloc(n * hv * 4), *a = malloc(n * hv * 4), *beta = malloc(n * hv * 4);
  float *g = malloc(n * hv * 4), *s1 = malloc(ns * 4), *s2 = malloc(ns * 4);
  float *o1 = malloc(nv * 4), *o2 = malloc(nv * 4), *o64f = malloc(nv * 4), *s64f = malloc(ns * 4);
  double *s64 = malloc(ns * 8), *o64 = malloc(nv * 8);
  float *scratch = malloc(ex_cpu_gdn_chunked_scratch(64, &d) * 4);
  float alog[8], dtb[8];
  for (size_t i = 0; i < hv; i++) {
    alog[i] = (float)log(1.0 + 7.5 * (urand() + 1.0)); /* exp in [1, 16] */
    dtb[i] = 1.0f + 0.5f * urand();
  }
  for (size_t i = 0; i < nq; i++) {
    q[i] = urand();
    k[i] = urand();
  }
  for (size_t i = 0; i < nv; i++)
    v[i] = 2 * urand();
  for (size_t i = 0; i < n * hv; i++) {
    b[i] = 2 * urand();
    a[i] = 3 * urand() - 2.0f; /* decays spread over (0, 1) */
  }
  for (size_t i = 0; i < ns; i++) {
    s1[i] = s2[i] = 0.3f * urand();
    s64[i] = s1[i];
  }
  ex_cpu_gdn_prepare(q, k, b, a, alog, dtb, beta, g, n, &d);
  ex_cpu_gdn_recurrent(q, k, v, beta, g, s1, o1, n, &d);
  ex_cpu_gdn_chunked(q, k, v, beta, g, s2, o2, n, 64, &d, scratch);
  ref64(q, k, v, beta, g, s64, o64, n, &d);
  for (size_t i = 0; i < nv; i++)
    o64f[i] = (float)o64[i];
  for (size_t i = 0; i < ns; i++)
    s64f[i] = (float)s64[i];
  double eo = rel(o2, o1, nv), es = rel(s2, s1, ns), e64 = rel(o1, o64f, nv);
  double e64c = rel(o2, o64f, nv), e64s = rel(s2, s64f, ns);
  int bad = !(eo < 1e-5 && es < 1e-5 && e64 < 1e-6 && e64c < 1e-5 && e64s < 1e-5);
  printf("%s n=%zu Hk=%zu Hv=%zu dk=%zu dv=%zu chunked/recurrent out %.2e state %.2e; vs f64: "
         "recurrent %.2e chunked %.2e state %.2e\n",
         bad ? "FAIL" : "ok", n, hk, hv, dk, dv, eo, es, e64, e64c, e64s);
  free(q), free(k), free(v), free(b), free(a), free(beta), free(g), free(s1), free(s2);
  free(o1), free(o2), free(o64f), free(s64f), free(s64), free(o64), free(scratch);
  return bad;
}

int main(void) {
  int bad = 0;
  size_t lens[] = {1, 2, 63, 64, 65, 130, 200};
  for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
    bad += run(lens[i], 2, 4, 16, 24);
    bad += run(lens[i], 2, 6, 16, 24);
  }
  bad += run(100, 1, 1, 64, 32);
  return bad ? 1 : 0;
}
