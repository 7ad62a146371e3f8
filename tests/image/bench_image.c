/* Benchmark (not a test): decode, resize and normalise + patchify of one image file on the
 * calling thread, each stage timed separately; prints the median of N runs in ms, as process CPU
 * time (all threads: libvips decodes on a worker) and as wall time. Pin it to one core (taskset).
 * Usage: bench_image FILE MAX_PIXELS N */
#include "pp_image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static clockid_t clock_id = CLOCK_PROCESS_CPUTIME_ID;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(clock_id, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: bench_image FILE MAX_PIXELS N\n");
    return 2;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f)
    return 1;
  fseek(f, 0, SEEK_END);
  size_t n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *bytes = malloc(n);
  if (!bytes || fread(bytes, 1, n, f) != n)
    return 1;
  fclose(f);
  struct pp_image_limits lim;
  pp_image_limits_default(&lim);
  lim.max_pixels = strtoull(argv[2], NULL, 10);
  int iters = atoi(argv[3]);
  if (iters < 1 || pp_image_global_init())
    return 1;
  for (int k = 0; k < 2; k++) {
    clock_id = k == 0 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
    double *t = calloc((size_t)iters * 3, sizeof(double));
    uint32_t H = 0, W = 0;
    for (int i = 0; i < iters; i++) {
      struct pp_rgb rgb = {0}, res = {0};
      double t0 = now_ms();
      if (pp_image_decode(bytes, n, 0, &lim, &rgb, NULL))
        return 1;
      double t1 = now_ms();
      pp_smart_resize(rgb.height, rgb.width, PP_IMAGE_FACTOR, lim.min_pixels, lim.max_pixels,
                      lim.max_aspect, &H, &W);
      if (pp_image_resample(&rgb, W, H, &res))
        return 1;
      double t2 = now_ms();
      float *pv = malloc(sizeof(float) * (size_t)(H / 16) * (W / 16) * PP_IMAGE_ROW);
      if (!pv || pp_image_patchify(&res, pv))
        return 1;
      double t3 = now_ms();
      t[i] = t1 - t0, t[iters + i] = t2 - t1, t[2 * iters + i] = t3 - t2;
      free(pv);
      pp_rgb_fini(&rgb);
      pp_rgb_fini(&res);
    }
    for (int s = 0; s < 3; s++)
      qsort(t + s * iters, (size_t)iters, sizeof(double), cmp);
    double d = t[iters / 2], r = t[iters + iters / 2], p = t[2 * iters + iters / 2];
    printf("%s -> %ux%u: decode %.2f ms, resize %.2f ms, normalize+patchify %.2f ms, total %.2f ms "
           "(median of %d, %s)\n",
           argv[1], W, H, d, r, p, d + r + p, iters, k == 0 ? "process CPU time" : "wall");
    free(t);
  }
  free(bytes);
  return 0;
}
