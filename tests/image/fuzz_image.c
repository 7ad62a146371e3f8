/* libFuzzer target: request image item -> prepared patches. The first byte picks the entry:
 * odd -> the rest is a data URL / base64 text, even -> the rest is encoded image bytes. Limits
 * are small so that each input stays cheap; every error path must return cleanly. */
#include "pp_image.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  struct pp_image_limits lim;
  pp_image_limits_default(&lim);
  lim.max_bytes = 1 << 20;
  lim.max_side = 2048;
  lim.max_src_pixels = 1 << 20;
  lim.min_pixels = 1024; /* smaller than the model's: keeps each run cheap */
  lim.max_pixels = 4096;
  struct pp_image img = {0};
  struct cm_diag diag = {0};
  int rc;
  if (data[0] & 1)
    rc = pp_image_prepare_data_url((const char *)data + 1, size - 1, 0, &lim, &img, &diag);
  else
    rc = pp_image_prepare_bytes(data + 1, size - 1, 0, &lim, &img, &diag);
  if (rc == 0 && (img.n_patches != 4 * img.n_tokens || !img.pixel_values))
    abort();
  if (rc != 0 && rc != -ENOMEM && !diag.msg)
    abort(); /* every refusal names the image */
  pp_image_fini(&img);
  cm_diag_fini(&diag);
  return 0;
}
