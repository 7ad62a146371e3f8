/* The one harness of the CUDA twin tests and GPU benchmarks (suite gpu, tests/cuda): a device check
 * that fails loudly without a GPU, seeded random inputs, bf16 packing on the host, NaN poisoning,
 * comparisons of a device result with its CPU twin under a stated bound (max |d|, max |ref|,
 * relative L2, bit-equal fraction; NaN or ∞ never passes) and the failure counter behind the exit
 * status. Host-side only; every kernel under test is called through its public launcher. */
#ifndef S1_TESTS_CUDA_TWIN_H
#define S1_TESTS_CUDA_TWIN_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Exits 1 with a message unless a CUDA device is present (a gpu test never passes without one);
 * selects device 0 and prints its name, compute capability and SM count. */
void tw_require_gpu(void);
/* Aborts the test (exit 1) when a CUDA call failed, naming the call, file and line. */
#define TW_CUDA(call) tw_cuda_ok((call), #call, __FILE__, __LINE__)
void tw_cuda_ok(cudaError_t e, const char *call, const char *file, int line);
/* Aborts when a call returned a negative error code (0 or a non-negative result passes). */
#define TW_OK(call) tw_rc_ok((call), #call, __FILE__, __LINE__)
void tw_rc_ok(int rc, const char *call, const char *file, int line);
/* Aborts unless a call returned exactly 0 (launchers documented as "returns 0 or -E..."). */
#define TW_ZERO(call) tw_rc_zero((call), #call, __FILE__, __LINE__)
void tw_rc_zero(int rc, const char *call, const char *file, int line);

/* splitmix64 stream; uniform in [lo, hi) and standard normal draws. */
struct tw_rng {
  uint64_t s; /* state */
};
void tw_rng_seed(struct tw_rng *r, uint64_t seed);
/* Seeds r from S1_TEST_SEED when set, else from the clock (fresh inputs each run), and prints
 * "NAME: seed N (S1_TEST_SEED to replay)". */
void tw_rng_seed_env(struct tw_rng *r, const char *name);
uint64_t tw_next(struct tw_rng *r);
float tw_uniform(struct tw_rng *r, float lo, float hi);
float tw_normal(struct tw_rng *r);
/* Fills x[n] with N(0, sd²) values (the bf16 form: rounded to bf16, so the float copy is what the
 * GPU sees). */
void tw_fill_normal(struct tw_rng *r, float *x, size_t n, float sd);
void tw_fill_bf16_normal(struct tw_rng *r, float *x, size_t n, float sd);

/* Host float32 → packed bf16 (round to nearest even, NaN kept) and back; one value or arrays. */
uint16_t tw_f2bf(float x);
float tw_bf2f(uint16_t x);
void tw_to_bf16(const float *x, uint16_t *out, size_t n);
void tw_from_bf16(const uint16_t *x, float *out, size_t n);

/* Device allocation that aborts on failure; upload / download (the download synchronizes the
 * device first); NaN poison (all bits set, a NaN in both float32 and bf16). */
void *tw_dev(size_t n_bytes);
void tw_up(void *dst, const void *src, size_t n_bytes);
void tw_down(void *dst, const void *src, size_t n_bytes);
void tw_poison(void *dev, size_t n_bytes);
/* Uploads float32 host values as bf16 into a new device buffer. */
void *tw_dev_bf16(const float *x, size_t n);
/* Downloads a bf16 device buffer into float32 host values. */
void tw_down_bf16(float *dst, const void *dev, size_t n);

/* Error of got against ref over n elements under the element bound |got − ref| ≤ atol +
 * rtol·|ref|. Non-finite got values are counted in n_bad and left out of the other fields. */
struct tw_err {
  double max_abs; /* max |got − ref| */
  double ref_max; /* max |ref| */
  double rel_l2;  /* ‖got − ref‖ / ‖ref‖ */
  size_t n_bad;   /* non-finite got values (poison left, or NaN produced) */
  size_t n_over;  /* finite elements over the element bound */
  size_t worst;   /* index of the element furthest over its bound (n_bad first); 0 if none */
};
struct tw_err tw_compare(const float *got, const float *ref, size_t n, double atol, double rtol);
/* max |x| over n values. */
double tw_max_abs(const float *x, size_t n);
/* Relative L2 error ‖got − want‖ / ‖want‖ (NaN if any got is not finite). */
double tw_rel_l2(const float *got, const float *want, size_t n);

/* Silent form: counts a failure and prints the worst element when any element is outside
 * abs_tol + rel_tol·|want| (NaN or ∞ fails). Returns true when all pass. */
bool tw_close(const char *what, const float *got, const float *want, size_t n, double abs_tol,
              double rel_tol);
/* Reporting form: prints one line "WHAT n=N max|d|=… max|ref|=… rel=… ok|FAIL" (NONFINITE when a
 * non-finite value came back) and counts a failure. Returns true when all pass. */
bool tw_check(const char *what, const float *got, const float *want, size_t n, double abs_tol,
              double rel_tol);
/* For ops that round as the bf16 reference does (got and want both bf16 values): every element
 * within abs_tol + rel_tol·|want| as tw_close, AND at least min_exact of them bit-equal. The second
 * condition is what proves the rounding points: the same roundings on both sides differ only
 * where a float32 intermediate straddles a rounding boundary (a few in a thousand), while a
 * missing or extra rounding step changes a large fraction of the outputs by one bf16 ulp.
 * Prints the exact fraction. Returns true when both hold. */
bool tw_bf16_twin(const char *what, const float *got, const float *want, size_t n, double abs_tol,
                  double rel_tol, double min_exact);

/* Counts a failure unless ok (the caller printed its own line). Returns ok. */
bool tw_expect(bool ok);
/* Records a failure with a message ("FAIL ..." on stdout). */
void tw_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Failures counted so far. */
int tw_failures(void);
/* Prints "NAME: N failures" and returns the exit status (0 only with none). */
int tw_finish(const char *name);

#endif
