/* libFuzzer target of the HTTP/1.1 framer (frontend/fe_framing.h): any bytes, split at a point the
 * first two input bytes choose. A split never makes the framer accept what it refuses whole (or the
 * reverse): both accept with the same requests framed, or both refuse with the same refusal, or
 * one refuses a malformed head that the other is still gathering (picohttpparser checks a head
 * in pieces, last_len, at other bytes than whole; a valid head is decided alike). */
#include "fe_framing.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2)
    return 0;
  size_t cut = ((size_t)data[0] << 8 | data[1]) % (size - 1);
  const char *b = (const char *)data + 2;
  size_t n = size - 2;
  cut = n ? cut % (n + 1) : 0;
  struct fe_framer one, two;
  struct fe_framing_refusal r1 = {0}, r2 = {0};
  fe_framer_init(&one);
  fe_framer_init(&two);
  int a = fe_framer_feed(&one, b, n, &r1);
  int c = fe_framer_feed(&two, b, cut, &r2);
  if (c == 0)
    c = fe_framer_feed(&two, b + cut, n - cut, &r2);
  bool same = a == c && one.n_messages == two.n_messages &&
              fe_framer_idle(&one) == fe_framer_idle(&two) &&
              (!a || (r1.status == r2.status && r1.message_index == r2.message_index &&
                      strcmp(r1.message, r2.message) == 0));
  /* picohttpparser decides a head in pieces (last_len) or whole at different bytes: an early
   * -1 in one reading is still -2 (gathering) in the other, never an acceptance */
  bool later = (a == -1 && c == 0 && two.n_messages == r1.message_index && two.head_len > 0) ||
               (a == 0 && c == -1 && one.n_messages == r2.message_index && one.head_len > 0);
  if (!same && !later)
    abort();
  fe_framer_fini(&one);
  fe_framer_fini(&two);
  return 0;
}
