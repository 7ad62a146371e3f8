/* Helpers shared by the Qwen3.5 model files, not part of the executor's interface. */
#ifndef S1_EX_QWEN35_INTERNAL_H
#define S1_EX_QWEN35_INTERNAL_H

#include "ex_qwen35.h"

/* A zeroed float buffer of n elements recorded in model->owned; NULL on allocation failure. */
float *ex_qwen35_own_alloc(struct ex_qwen35_model *m, size_t n);

#endif
