/* Gated DeltaNet core in float32 (see cpu_gdn.h). The chunked form follows spec §4.6: per value
 * head and chunk, a cumulative log-decay Γ, the strictly lower system (I + L) solved by forward
 * substitution (the unit-triangular solve), then the inter-chunk state read and update. */
#include "cpu_gdn.h"

#include <math.h>
#include <string.h>

void ex_cpu_gdn_prepare(float *q, float *k, const float *b, const float *a, const float *a_log,
                        const float *dt_bias, float *beta, float *g, size_t n,
                        const struct ex_gdn_dims *dims) {
  size_t hk = dims->n_k_heads, hv = dims->n_v_heads, dk = dims->dk;
  float scale = (float)(1.0 / sqrt((double)dk));
  for (size_t i = 0; i < n * hk; i++) {
    float *qi = q + i * dk, *ki = k + i * dk;
    float sq = 0.0f, sk = 0.0f;
    for (size_t d = 0; d < dk; d++) {
      sq += qi[d] * qi[d];
      sk += ki[d] * ki[d];
    }
    float iq = 1.0f / sqrtf(sq + 1e-6f), ik = 1.0f / sqrtf(sk + 1e-6f);
    for (size_t d = 0; d < dk; d++) {
      qi[d] = (qi[d] * iq) * scale;
      ki[d] = ki[d] * ik;
    }
  }
  for (size_t t = 0; t < n; t++) {
    for (size_t h = 0; h < hv; h++) {
      size_t i = t * hv + h;
      float x = a[i] + dt_bias[h];
      float sp = x > 20.0f ? x : log1pf(expf(x));
      float bv = b[i];
      g[i] = -expf(a_log[h]) * sp;
      beta[i] = 1.0f / (1.0f + expf(-bv));
    }
  }
}

void ex_cpu_gdn_recurrent(const float *q, const float *k, const float *v, const float *beta,
                          const float *g, float *state, float *out, size_t n,
                          const struct ex_gdn_dims *dims) {
  size_t hk = dims->n_k_heads, hv = dims->n_v_heads, dk = dims->dk, dv = dims->dv;
  size_t r = hv / hk;
  for (size_t t = 0; t < n; t++) {
    for (size_t h = 0; h < hv; h++) {
      const float *qt = q + (t * hk + h / r) * dk;
      const float *kt = k + (t * hk + h / r) * dk;
      const float *vt = v + (t * hv + h) * dv;
      float *s = state + h * dk * dv;
      float *o = out + (t * hv + h) * dv;
      float decay = expf(g[t * hv + h]);
      float bt = beta[t * hv + h];
      for (size_t i = 0; i < dk * dv; i++)
        s[i] *= decay;
      for (size_t c = 0; c < dv; c++) {
        float m = 0.0f;
        for (size_t a = 0; a < dk; a++)
          m += s[a * dv + c] * kt[a];
        o[c] = bt * (vt[c] - m); /* δ, stored in o for now */
      }
      for (size_t a = 0; a < dk; a++)
        for (size_t c = 0; c < dv; c++)
          s[a * dv + c] += kt[a] * o[c];
      for (size_t c = 0; c < dv; c++) {
        float acc = 0.0f;
        for (size_t a = 0; a < dk; a++)
          acc += s[a * dv + c] * qt[a];
        o[c] = acc;
      }
    }
  }
}

size_t ex_cpu_gdn_chunked_scratch(size_t chunk, const struct ex_gdn_dims *dims) {
  return chunk + chunk * chunk + chunk * dims->dv + chunk * dims->dk;
}

void ex_cpu_gdn_chunked(const float *q, const float *k, const float *v, const float *beta,
                        const float *g, float *state, float *out, size_t n, size_t chunk,
                        const struct ex_gdn_dims *dims, float *scratch) {
  size_t hk = dims->n_k_heads, hv = dims->n_v_heads, dk = dims->dk, dv = dims->dv;
  size_t r = hv / hk;
  float *gam = scratch;          /* [C] cumulative log-decay within the chunk */
  float *lm = gam + chunk;       /* [C, C] strictly lower β_i (k_i·k_j) e^{Γi−Γj} */
  float *u = lm + chunk * chunk; /* [C, dv] U, then V' = U − W·S0 */
  float *w = u + chunk * dv;     /* [C, dk] W */
  for (size_t h = 0; h < hv; h++) {
    float *s = state + h * dk * dv;
    size_t kh = h / r;
    for (size_t c0 = 0; c0 < n; c0 += chunk) {
      size_t len = n - c0 < chunk ? n - c0 : chunk;
#define QROW(i) (q + ((c0 + (i)) * hk + kh) * dk)
#define KROW(i) (k + ((c0 + (i)) * hk + kh) * dk)
      float acc = 0.0f;
      for (size_t i = 0; i < len; i++) {
        acc += g[(c0 + i) * hv + h];
        gam[i] = acc;
      }
      for (size_t i = 0; i < len; i++) {
        float bi = beta[(c0 + i) * hv + h];
        for (size_t j = 0; j < i; j++) {
          float kk = 0.0f;
          const float *ki = KROW(i), *kj = KROW(j);
          for (size_t a = 0; a < dk; a++)
            kk += ki[a] * kj[a];
          lm[i * chunk + j] = bi * kk * expf(gam[i] - gam[j]);
        }
      }
      /* forward substitution: (I + L) U = β⊙V, (I + L) W = β e^Γ ⊙ K */
      for (size_t i = 0; i < len; i++) {
        float bi = beta[(c0 + i) * hv + h];
        float be = bi * expf(gam[i]);
        const float *vi = v + ((c0 + i) * hv + h) * dv;
        const float *ki = KROW(i);
        float *ui = u + i * dv, *wi = w + i * dk;
        for (size_t c = 0; c < dv; c++)
          ui[c] = bi * vi[c];
        for (size_t a = 0; a < dk; a++)
          wi[a] = be * ki[a];
        for (size_t j = 0; j < i; j++) {
          float l = lm[i * chunk + j];
          const float *uj = u + j * dv, *wj = w + j * dk;
          for (size_t c = 0; c < dv; c++)
            ui[c] -= l * uj[c];
          for (size_t a = 0; a < dk; a++)
            wi[a] -= l * wj[a];
        }
      }
      /* V' = U − W·S0 */
      for (size_t i = 0; i < len; i++) {
        float *ui = u + i * dv;
        const float *wi = w + i * dk;
        for (size_t c = 0; c < dv; c++) {
          float m = 0.0f;
          for (size_t a = 0; a < dk; a++)
            m += wi[a] * s[a * dv + c];
          ui[c] -= m;
        }
      }
      /* O = (e^Γ ⊙ Q)·S0 + [(Q Kᵀ) ⊙ D]·V' */
      for (size_t i = 0; i < len; i++) {
        const float *qi = QROW(i);
        float *o = out + ((c0 + i) * hv + h) * dv;
        float eg = expf(gam[i]);
        for (size_t c = 0; c < dv; c++) {
          float m = 0.0f;
          for (size_t a = 0; a < dk; a++)
            m += qi[a] * s[a * dv + c];
          o[c] = eg * m;
        }
        for (size_t j = 0; j <= i; j++) {
          const float *kj = KROW(j);
          float qk = 0.0f;
          for (size_t a = 0; a < dk; a++)
            qk += qi[a] * kj[a];
          float wgt = qk * expf(gam[i] - gam[j]);
          const float *uj = u + j * dv;
          for (size_t c = 0; c < dv; c++)
            o[c] += wgt * uj[c];
        }
      }
      /* S = e^{Γ_C} S0 + (e^{Γ_C − Γ} ⊙ K)ᵀ V' */
      float glast = gam[len - 1];
      float el = expf(glast);
      for (size_t x = 0; x < dk * dv; x++)
        s[x] *= el;
      for (size_t i = 0; i < len; i++) {
        const float *ki = KROW(i);
        float e = expf(glast - gam[i]);
        const float *ui = u + i * dv;
        for (size_t a = 0; a < dk; a++) {
          float ka = e * ki[a];
          for (size_t c = 0; c < dv; c++)
            s[a * dv + c] += ka * ui[c];
        }
      }
#undef QROW
#undef KROW
    }
  }
}
