/* Log-probability readouts over the full vocabulary for the OmniJev LM features (spec/omnijev.md
 * §7): target log-probs from the LM-head logits (float32 in fp32, bf16-rounded in bf16), computed
 * in bounded vocabulary chunks with an online float64 log-sum-exp (memory stays O(block · chunk)
 * whatever the vocabulary), and the six per-option features with the −1e4 rule. Leaves out which
 * positions to read (the head). */
#ifndef S1_EX_LM_FEATS_H
#define S1_EX_LM_FEATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"
#include "ex_backend.h"

#define EX_LM_FEATS_VOCAB_CHUNK 8192 /* LM-head rows per logits block */
#define EX_LM_FEATS_POS_BLOCK 32     /* hidden rows per logits block */
#define EX_LM_FEATS_N 6              /* features per option */
#define EX_LM_FEATS_EMPTY (-1e4f)    /* m_g of an option without text (spec §7) */

/* lp[i] = log_softmax(W · hidden[i])[targets[i]] over all `vocab` rows of W, the normalizer
 * summed in float64. round_bf16 (the bf16 numerics) rounds each logit to bf16 and reads it back as
 * float32 first (the reference's bf16 GEMM with bf16 output); without it (fp32) nothing is rounded,
 * as the reference run in float32.
 * Shapes: lm_head W [vocab, H] fp32 row-major; hidden [n, H]; targets [n] in [0, vocab); lp [n].
 * Ownership: caller's host buffers; a scratch block is allocated per call.
 * Returns 0; -EINVAL (a target outside the vocabulary); -ENOMEM.
 * Source: mso/branch.py branch_forward (log-probs of the option text); the float64 sum as the
 * native port's processing (spec §7). Twin: none yet (CUDA lands later). */
int ex_lm_target_logprobs(const struct ex_backend *be, const float *lm_head, size_t vocab,
                          size_t hidden_size, const float *hidden, const int32_t *targets, size_t n,
                          bool round_bf16, float *lp);

/* The six features of each option of one question (spec §7, in this order): S/10, S/n (0 without
 * text), n/10, dist (log-softmax over the question's options of m = S, or −1e4 without text),
 * first, valid. Shapes: sum_lp, first [k] fp32; n_inner [k] text tokens; feats [k, 6] fp32.
 * Source: mso/branch.py branch_forward, mso/v04.py lm_option_feats. */
void ex_lm_option_feats(const float *sum_lp, const uint32_t *n_inner, const float *first,
                        size_t k, float *feats);

#endif
