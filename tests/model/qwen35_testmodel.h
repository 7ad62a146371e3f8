/* A seeded random tiny Qwen3.5 text model built in memory (no files), for the tests that need a
 * whole model but no oracle: continuation, chunked vs recurrent, loader round trips. */
#ifndef S1_TEST_QWEN35_TESTMODEL_H
#define S1_TEST_QWEN35_TESTMODEL_H

#include "ex_qwen35.h"

/* tiny-A text sizes (spec §10.1) with a small vocabulary; hv = 4 (ratio 2) or 6 (ratio 3). */
void test_qwen35_tiny_config(struct ex_qwen35_config *cfg, int vocab, int hv, bool tied);

/* Fills every weight with seeded values in sane ranges: projections U(±1/√in), norm weights
 * U(±0.3) (so 1 + w and w differ visibly), A_log = log U(1, 16), dt_bias 1 ± 0.5.
 * lora_rank > 0 also fills LoRA factors. Returns 0 or -ENOMEM. */
int test_qwen35_random_model(const struct ex_qwen35_config *cfg, uint64_t seed, size_t lora_rank,
                             struct ex_qwen35_model **ret_model);

/* Uniform in [-1, 1) from a xorshift state. */
float test_urand(uint64_t *state);

/* ‖a − b‖₂ / ‖b‖₂ over n values. */
double test_rel_err(const float *a, const float *b, size_t n);

#endif
