/* libFuzzer target for the .npy float32 reader (ex_npy_parse_f32): any bytes must give 0 with a
 * consistent shape or a clean error, never a crash, leak or over-read. */
#include <stdint.h>
#include <stdlib.h>

#include "ex_npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  float *x = NULL;
  int64_t shape[EX_NPY_MAX_DIMS];
  int nd = 0;
  struct cm_diag diag = {0};
  if (ex_npy_parse_f32(data, size, "fuzz", &x, shape, &nd, &diag) == 0) {
    size_t n = 1;
    for (int i = 0; i < nd; i++)
      n *= (size_t)shape[i];
    volatile float sink = n ? x[n - 1] : 0.0f; /* the whole array must be readable */
    (void)sink;
    free(x);
  }
  cm_diag_fini(&diag);
  return 0;
}
