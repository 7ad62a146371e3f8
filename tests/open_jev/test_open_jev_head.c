/* The Open-Jev scalar head: values against a long-double dot product on seeded data, and the
 * refusals of a wrong heads.safetensors (missing tensor, F16, wrong width, non-finite value).
 * usage: test_open_jev_head WORK_DIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ex_head.h"
#include "ex_head_open_jev.h"

static int fails;

#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                              \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      fails++;                                                                                     \
    }                                                                                              \
  } while (0)

#define H 96

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 4.0 - 2.0);
}

/* Writes a heads file and returns ex_head_open_jev_init's code. */
static int try_file(const char *dir, const char *wname, enum cm_dtype wt, int64_t width,
                    const float *w, float bias, struct ex_head_open_jev *head) {
  char path[1024];
  snprintf(path, sizeof path, "%s/heads.safetensors", dir);
  struct cm_safetensors_writer *wr = NULL;
  struct cm_safetensors *st = NULL;
  struct cm_diag d = {0};
  int64_t ws[2] = {1, width}, bs[1] = {1};
  uint16_t half[H];
  memset(half, 0, sizeof half);
  int rc = cm_safetensors_writer_new(&wr);
  if (!rc)
    rc = cm_safetensors_writer_add(wr, wname, wt, 2, ws, wt == CM_DTYPE_F32 ? (const void *)w
                                                                            : (const void *)half);
  if (!rc)
    rc = cm_safetensors_writer_add(wr, EX_HEAD_OPEN_JEV_BIAS, CM_DTYPE_F32, 1, bs, &bias);
  if (!rc)
    rc = cm_safetensors_writer_finish(wr, path, &d);
  cm_safetensors_writer_free(wr);
  if (!rc)
    rc = cm_safetensors_open(path, &st, &d);
  if (!rc)
    rc = ex_head_open_jev_init(st, path, H, head, &d);
  cm_safetensors_close(st);
  cm_diag_fini(&d);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 2)
    return 2;
  float w[H], hidden[5 * H], out[5];
  for (int i = 0; i < H; i++)
    w[i] = frand();
  for (int i = 0; i < 5 * H; i++)
    hidden[i] = frand() * 3;
  struct ex_head_open_jev head = {0};
  int rc = try_file(argv[1], EX_HEAD_OPEN_JEV_WEIGHT, CM_DTYPE_F32, H, w, 0.375f, &head);
  EXPECT(rc == 0, "valid head refused: %d", rc);
  if (rc == 0) {
    ex_head_open_jev_run(&head, hidden, 5, out);
    for (int r = 0; r < 5; r++) {
      long double acc = 0.375L;
      for (int i = 0; i < H; i++)
        acc += (long double)w[i] * hidden[r * H + i];
      EXPECT(out[r] == (float)acc, "row %d: %.9g, want %.9g", r, out[r], (double)acc);
    }
    ex_head_open_jev_fini(&head);
  }
  EXPECT(try_file(argv[1], "open_jev.head.w", CM_DTYPE_F32, H, w, 0, &head) == -CM_EMISSING,
         "missing weight accepted");
  EXPECT(try_file(argv[1], EX_HEAD_OPEN_JEV_WEIGHT, CM_DTYPE_F16, H, w, 0, &head) == -CM_EDTYPE,
         "F16 weight accepted");
  EXPECT(try_file(argv[1], EX_HEAD_OPEN_JEV_WEIGHT, CM_DTYPE_F32, H - 1, w, 0, &head) == -CM_ESHAPE,
         "wrong width accepted");
  w[7] = NAN;
  EXPECT(try_file(argv[1], EX_HEAD_OPEN_JEV_WEIGHT, CM_DTYPE_F32, H, w, 0, &head) == -CM_EFORMAT,
         "NaN weight accepted");
  EXPECT(ex_head_find("open_jev_scalar") != NULL, "open_jev_scalar not registered");
  if (!fails)
    printf("open_jev head: values and refusals as expected\n");
  return fails ? 1 : 0;
}
