/* The OmniJev FP32 heads (spec/omnijev.md §8): OptionScorer (noul and choice: gated option states,
 * LM features, per-type scale, sigmoid or softmax with an abstain logit) and OrdinalScoreHead
 * (score: cumulative link), with exact-erf GELU, read from heads.safetensors as "head.*" and
 * "ord.*". Also the group readout "omnijev" the executor runs per question (layout below).
 * Calibration and rounding are the preprocessor's finish. */
#ifndef S1_EX_HEAD_OMNIJEV_H
#define S1_EX_HEAD_OMNIJEV_H

#include <stddef.h>

#include "cm_error.h"
#include "cm_safetensors.h"

#define EX_HEAD_OMNIJEV_NAME "omnijev"

/* One fp32 nn.Linear. */
struct ex_omnijev_linear {
  float *w;     /* [n_out, n_in] row-major (PyTorch layout) */
  float *b;     /* [n_out] */
  size_t n_in;  /* input features */
  size_t n_out; /* output features */
};

/* Both heads' weights. */
struct ex_omnijev_heads {
  size_t hidden;                       /* d_model (2560 for the 4B) */
  size_t d_hidden;                     /* OptionScorer width (1024) */
  size_t d_ord;                        /* OrdinalScoreHead width (512) */
  struct ex_omnijev_linear opt0, opt2; /* head.opt.0 [dh, H], head.opt.2 [dh, dh] */
  struct ex_omnijev_linear que0, que2; /* head.que.0 [dh, H], head.que.2 [dh, dh] */
  struct ex_omnijev_linear score;      /* head.score [1, dh] */
  struct ex_omnijev_linear abstain;    /* head.abstain [1, dh] */
  struct ex_omnijev_linear feat;       /* head.feat [dh, 6] */
  struct ex_omnijev_linear feat_lin;   /* head.feat_lin [1, 6] */
  float log_tau[3];                    /* head.log_tau [3]: per-type log scale (noul, choice, score) */
  struct ex_omnijev_linear z0, z2;     /* ord.z.0 [do, H], ord.z.2 [1, do] */
  struct ex_omnijev_linear cut0, cut2; /* ord.cut.0 [do, H], ord.cut.2 [1, do] */
};

/* Reads the 17 "head.*" and 8 "ord.*" tensors (F32, finite) and checks every shape against
 * `hidden` and each other. Ownership: fills *ret (heap arrays; ex_omnijev_heads_fini frees).
 * Returns 0; -CM_EMISSING, -CM_EDTYPE, -CM_ESHAPE, -CM_EFORMAT (non-finite); -ENOMEM; diag names
 * the file and tensor. Source: mso/head.py OptionScorer / OrdinalScoreHead; spec §8.3, §8.5. */
int ex_omnijev_heads_init(const struct cm_safetensors *st, const char *path, size_t hidden,
                          struct ex_omnijev_heads *ret, struct cm_diag *diag);
void ex_omnijev_heads_fini(struct ex_omnijev_heads *h);

/* OptionScorer for one question: μ[k] (noul: sigmoid of the one score; choice: the first K
 * entries of softmax([s_1..s_K, a])). Shapes: u [k, H], zq [H], feats [k, 6] fp32; mu [k].
 * type 0 = noul (k must be 1), 1 = choice. Returns 0; -EINVAL (type, k); -ENOMEM.
 * Source: mso/head.py OptionScorer.forward, choice_outputs. */
int ex_omnijev_option_scorer(const struct ex_omnijev_heads *h, const float *u, size_t k,
                             const float *zq, const float *feats, int type, float *mu);

/* OrdinalScoreHead for one question: level probabilities from a cumulative link, each ≥ 1e-8.
 * Shapes: u [k, H] levels in the caller's order, zq [H]; mu [k]. Returns 0; -EINVAL (k = 0);
 * -ENOMEM. Source: mso/head.py OrdinalScoreHead.forward. */
int ex_omnijev_ordinal(const struct ex_omnijev_heads *h, const float *u, size_t k, const float *zq,
                       float *mu);

/* The "omnijev" group readout: a HEAD readout with row = the question's first row, position = o
 * (the offset of <|opt|> in each of its rows), ids = [type, K]; it spans rows row … row+K−1, each
 * ending at its <|/opt|>. u = the hidden state at each row's last token, zq = the first row's at
 * o − 1; the features read the log-probs of the option text (spec §6, §7).
 * Output: type 0 / 1: [K μ, then K × 6 features]; type 2: [K μ]. */

#endif
