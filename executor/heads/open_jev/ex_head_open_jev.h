/* The Open-Jev scalar decision head (spec/open_jev.md §6.2, §9.4): an fp32 Linear(H -> 1) over the
 * final-norm hidden state at each sequence's last token, read from heads.safetensors. It leaves
 * out the temperature and the softmax (the preprocessor's finish). */
#ifndef S1_EX_HEAD_OPEN_JEV_H
#define S1_EX_HEAD_OPEN_JEV_H

#include <stddef.h>

#include "cm_error.h"
#include "cm_safetensors.h"

#define EX_HEAD_OPEN_JEV_WEIGHT "open_jev.head.weight" /* F32 [1, H] */
#define EX_HEAD_OPEN_JEV_BIAS "open_jev.head.bias"     /* F32 [1] */

/* The loaded head. */
struct ex_head_open_jev {
  float *weight; /* [H] fp32 */
  float bias;    /* fp32 */
  size_t hidden; /* H */
};

/* Takes the head from an opened heads file and checks it: F32, weight [1, H], bias [1], finite.
 * Ownership: fills *ret_head (weight heap, freed by ex_head_open_jev_fini).
 * Returns 0; -CM_EMISSING (tensor absent), -CM_EDTYPE, -CM_ESHAPE, -CM_EFORMAT (non-finite value),
 * -ENOMEM; diag names the file and tensor. */
int ex_head_open_jev_init(const struct cm_safetensors *st, const char *path, size_t hidden,
                          struct ex_head_open_jev *ret_head, struct cm_diag *diag);
void ex_head_open_jev_fini(struct ex_head_open_jev *head);

/* out[i] = w . hidden[i] + b: the dot product accumulated in float64 over h = 0..H-1, the bias
 * added in float64, one rounding to float32 (the reference is one fp32 GEMM with the bias).
 * Shapes: hidden [n, H] fp32 row-major; out [n] fp32. Returns 0. */
int ex_head_open_jev_run(const struct ex_head_open_jev *head, const float *hidden, size_t n,
                         float *out);

#endif
