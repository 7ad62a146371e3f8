/* Data URLs and strict base64 for request images, with the references' rules (jemm.md §5.2):
 * whitespace removed as Python's str.split() does, then base64.b64decode(s, validate=True).
 * The decoded size is checked against the byte limit before anything is allocated for it. */
#include "pp_image.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Length of the Python whitespace character starting at s (0 when none). ASCII: \t \n \v \f \r,
 * U+001C..U+001F, space. Non-ASCII (UTF-8): U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028,
 * U+2029, U+202F, U+205F, U+3000. */
static size_t whitespace_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f))
    return 1;
  if (c == 0xc2 && n >= 2 && (s[1] == 0x85 || s[1] == 0xa0))
    return 2;
  if (n < 3)
    return 0;
  if (c == 0xe1 && s[1] == 0x9a && s[2] == 0x80)
    return 3;
  if (c == 0xe2 && s[1] == 0x80 && (s[2] <= 0x8a || s[2] == 0xa8 || s[2] == 0xa9 || s[2] == 0xaf) &&
      s[2] >= 0x80)
    return 3;
  if (c == 0xe2 && s[1] == 0x81 && s[2] == 0x9f)
    return 3;
  if (c == 0xe3 && s[1] == 0x80 && s[2] == 0x80)
    return 3;
  return 0;
}

static int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A';
  if (c >= 'a' && c <= 'z')
    return c - 'a' + 26;
  if (c >= '0' && c <= '9')
    return c - '0' + 52;
  if (c == '+')
    return 62;
  if (c == '/')
    return 63;
  return -1;
}

static bool has_suffix(const char *s, size_t n, const char *suffix) {
  size_t m = strlen(suffix);
  return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

int pp_image_b64_decode(const char *text, size_t n_text, uint32_t index,
                        const struct pp_image_limits *lim, uint8_t **ret_bytes, size_t *ret_n,
                        struct cm_diag *diag) {
  const char *payload = text;
  size_t n_payload = n_text;
  if (n_text >= 5 && memcmp(text, "data:", 5) == 0) {
    const char *comma = memchr(text, ',', n_text);
    size_t n_header = comma ? (size_t)(comma - text) : n_text;
    if (!has_suffix(text, n_header, ";base64"))
      return cm_diag_set(diag, -CM_EFORMAT, "image %u is not a base64 data URL", index);
    payload = comma ? comma + 1 : text + n_text;
    n_payload = comma ? n_text - n_header - 1 : 0;
  }

  /* Pass 1, no allocation: skip whitespace, refuse non-ASCII, check the shape validate=True
   * accepts ([A-Za-z0-9+/]*={0,2}) and count the data characters. */
  const unsigned char *p = (const unsigned char *)payload;
  size_t n_data = 0, n_pad = 0;
  bool ok = true;
  for (size_t i = 0; i < n_payload;) {
    size_t w = whitespace_len(p + i, n_payload - i);
    if (w) {
      i += w;
      continue;
    }
    if (p[i] >= 0x80)
      return cm_diag_set(diag, -CM_EFORMAT,
                         "image %u could not be decoded (string argument should contain only "
                         "ASCII characters)",
                         index);
    if (p[i] == '=')
      n_pad++;
    else if (n_pad > 0 || b64_value(p[i]) < 0)
      ok = false; /* keep scanning: a later non-ASCII character is Python's first error */
    else
      n_data++;
    i++;
  }
  size_t rem = n_data % 4;
  ok = ok && n_pad <= 2 && rem != 1 && !(rem == 2 && n_pad != 2) && !(rem == 3 && n_pad == 0);
  if (!ok)
    return cm_diag_set(diag, -CM_EFORMAT, "image %u could not be decoded", index);
  size_t n_out = n_data / 4 * 3 + (rem ? rem - 1 : 0);
  if (n_out > lim->max_bytes)
    return cm_diag_set(diag, -CM_ELIMIT, "image %u exceeds %llu bytes", index,
                       (unsigned long long)lim->max_bytes);

  /* Pass 2: decode the data characters; leftover bits of the last one are ignored, as Python
   * ignores them. */
  uint8_t *out = malloc(n_out ? n_out : 1);
  if (!out)
    return -ENOMEM;
  size_t o = 0;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n_payload && o < n_out;) {
    size_t w = whitespace_len(p + i, n_payload - i);
    if (w) {
      i += w;
      continue;
    }
    acc = (acc << 6) | (uint32_t)b64_value(p[i++]);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (uint8_t)(acc >> bits);
      acc &= (1u << bits) - 1;
    }
  }
  *ret_bytes = out;
  *ret_n = o;
  return 0;
}
