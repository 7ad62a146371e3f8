/* Helpers of the CUDA twin tests (suite gpu): device check that fails loudly without a GPU, seeded
 * random inputs, NaN poisoning, bf16 packing on the host and tolerance checks that never pass NaN.
 * Host-side only; every kernel under test is called through its public launcher. */
#ifndef S1_TEST_EXC_TEST_H
#define S1_TEST_EXC_TEST_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Exits 1 with a message unless a CUDA device is present (a gpu test never passes without one). */
void xt_require_gpu(void);
/* Aborts the test (exit 1) when a CUDA call failed. */
#define XT_CUDA(call) xt_cuda_ok((call), #call, __FILE__, __LINE__)
void xt_cuda_ok(cudaError_t e, const char *call, const char *file, int line);
/* Aborts when a launcher returned an error code. */
#define XT_OK(call) xt_rc_ok((call), #call, __FILE__, __LINE__)
void xt_rc_ok(int rc, const char *call, const char *file, int line);

/* splitmix64 stream; uniform in [lo, hi) and standard normal draws. */
struct xt_rng {
  uint64_t s; /* state */
};
void xt_rng_seed(struct xt_rng *r, uint64_t seed);
uint64_t xt_next(struct xt_rng *r);
float xt_uniform(struct xt_rng *r, float lo, float hi);
float xt_normal(struct xt_rng *r);
/* Fills x[n] with N(0, sd²) values rounded to bf16 (so the float copy is what the GPU sees). */
void xt_fill_bf16_normal(struct xt_rng *r, float *x, size_t n, float sd);
void xt_fill_normal(struct xt_rng *r, float *x, size_t n, float sd);

/* Host float32 → packed bf16 (round to nearest even) and back. */
void xt_to_bf16(const float *x, uint16_t *out, size_t n);
void xt_from_bf16(const uint16_t *x, float *out, size_t n);

/* Device allocation that aborts on failure; upload / download; NaN poison (all bits set, a NaN in
 * both float32 and bf16). */
void *xt_dev(size_t n_bytes);
void xt_up(void *dst, const void *src, size_t n_bytes);
void xt_down(void *dst, const void *src, size_t n_bytes);
void xt_poison(void *dev, size_t n_bytes);
/* Uploads float32 host values as bf16 into a new device buffer. */
void *xt_dev_bf16(const float *x, size_t n);
/* Downloads a bf16 device buffer into float32 host values. */
void xt_down_bf16(float *dst, const void *dev, size_t n);

/* Compares got[i] with want[i] under |got − want| ≤ abs_tol + rel_tol·|want| (NaN or ∞ fails);
 * prints the worst element and counts a failure. Returns true when all pass. */
bool xt_close(const char *what, const float *got, const float *want, size_t n, double abs_tol,
              double rel_tol);
/* For ops that round as the bf16 reference does (got and want both bf16 values): every element
 * within abs_tol + rel_tol·|want| as xt_close, AND at least min_exact of them bit-equal. The second
 * condition is what proves the rounding points: the same roundings on both sides differ only
 * where a float32 intermediate straddles a rounding boundary (a few in a thousand), while a
 * missing or extra rounding step changes a large fraction of the outputs by one bf16 ulp.
 * Prints the exact fraction. Returns true when both hold. */
bool xt_bf16_twin(const char *what, const float *got, const float *want, size_t n, double abs_tol,
                  double rel_tol, double min_exact);
/* Relative L2 error ‖got − want‖ / ‖want‖ (NaN if any got is not finite). */
double xt_rel_l2(const float *got, const float *want, size_t n);
/* Records a failure with a message. */
void xt_fail(const char *fmt, ...);
/* Prints "N failures" and returns the exit status (0 only with none). */
int xt_finish(const char *name);

#endif
