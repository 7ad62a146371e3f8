/* libFuzzer target: every proto decoder on arbitrary bytes (the first byte picks the decoder). A
 * successful decode must re-encode, and the re-encoding must decode to the same encoding. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto_job.h"
#include "proto_program.h"
#include "proto_status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define ROUND(type, dec, enc, fini)                                                                \
  do {                                                                                             \
    struct type x = {0}, y = {0};                                                                  \
    struct proto_bytes b = {0}, c = {0};                                                           \
    if (dec(d, n, &x, NULL) == 0) {                                                                \
      if (enc(&x, &b) == 0 && dec(b.data, b.len, &y, NULL) == 0 && enc(&y, &c) == 0 &&             \
          (b.len != c.len || memcmp(b.data, c.data, b.len) != 0))                                  \
        abort();                                                                                   \
      fini(&x);                                                                                    \
      fini(&y);                                                                                    \
    }                                                                                              \
    proto_bytes_free(&b);                                                                          \
    proto_bytes_free(&c);                                                                          \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  const uint8_t *d = data + 1;
  size_t n = size - 1;
  enum proto_kind k;
  proto_peek(d, n, &k, NULL);
  switch (data[0] % 8) {
  case 0: ROUND(proto_job, proto_job_decode, proto_job_encode, proto_job_fini); break;
  case 1: ROUND(proto_ask, proto_ask_decode, proto_ask_encode, proto_ask_fini); break;
  case 2: ROUND(proto_status, proto_status_decode, proto_status_encode, proto_status_fini); break;
  case 3: ROUND(proto_health, proto_health_decode, proto_health_encode, proto_health_fini); break;
  case 4:
    ROUND(proto_program, proto_program_decode, proto_program_encode, proto_program_fini);
    break;
  case 5: ROUND(proto_cancel, proto_cancel_decode, proto_cancel_encode, proto_cancel_fini); break;
  case 7: ROUND(proto_ack, proto_ack_decode, proto_ack_encode, proto_ack_fini); break;
  default:
    ROUND(proto_result, proto_result_decode, proto_result_encode, proto_result_fini);
    break;
  }
  return 0;
}
