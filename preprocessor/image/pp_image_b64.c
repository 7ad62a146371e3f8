/* Data URLs and strict base64 for request images, with the references' rules (jemm.md §5.2):
 * whitespace removed as Python's str.split() does, then base64.b64decode(s, validate=True).
 * The decoded size is checked against the byte limit before anything is allocated for it; whole
 * quads are decoded by OpenSSL (EVP_DecodeBlock) after this file has validated every character. */
#include "pp_image.h"

#include <errno.h>
#include <openssl/evp.h>
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

/* Class of each byte: 0..63 the alphabet's value, then the others. */
enum { B64_PAD = 64, B64_SPACE = 65, B64_BAD = 66, B64_HIGH = 67 };
static const uint8_t B64_CLASS[256] = {
#define B64_ROW16(x) x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x
    /* 0x00 */ 66, 66, 66, 66, 66, 66, 66, 66, 66, 65, 65, 65, 65, 65, 66, 66,
    /* 0x10 */ 66, 66, 66, 66, 66, 66, 66, 66, 66, 66, 66, 66, 65, 65, 65, 65,
    /* 0x20 */ 65, 66, 66, 66, 66, 66, 66, 66, 66, 66, 66, 62, 66, 66, 66, 63,
    /* 0x30 */ 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 66, 66, 66, 64, 66, 66,
    /* 0x40 */ 66, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
    /* 0x50 */ 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 66, 66, 66, 66, 66,
    /* 0x60 */ 66, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,
    /* 0x70 */ 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 66, 66, 66, 66, 66,
    B64_ROW16(67), B64_ROW16(67), B64_ROW16(67), B64_ROW16(67),
    B64_ROW16(67), B64_ROW16(67), B64_ROW16(67), B64_ROW16(67),
#undef B64_ROW16
};

/* Decodes n_data data characters (no whitespace, no '='; n_data % 4 != 1) into out
 * [n_data / 4 * 3 + tail]: whole quads by OpenSSL's EVP_DecodeBlock, which refuses any character
 * outside the alphabet but '=' (or trims it at the ends: the byte count then differs), the last 2 or 3 characters here (their leftover bits ignored, as Python
 * ignores them). Returns the bytes written, or SIZE_MAX when a character is not in the alphabet. */
static size_t decode_data(const unsigned char *data, size_t n_data, uint8_t *out) {
  size_t n_quads = n_data / 4, rem = n_data % 4, o = n_quads * 3;
  for (size_t q = 0; q < n_quads;) { /* EVP takes an int length: chunks of 2**28 quads */
    size_t m = n_quads - q < ((size_t)1 << 28) ? n_quads - q : (size_t)1 << 28;
    if (EVP_DecodeBlock(out + 3 * q, data + 4 * q, (int)(4 * m)) != (int)(3 * m))
      return SIZE_MAX;
    q += m;
  }
  if (rem) {
    uint32_t acc = 0;
    for (size_t k = 0; k < rem; k++) {
      uint8_t v = B64_CLASS[data[n_quads * 4 + k]];
      if (v >= B64_PAD)
        return SIZE_MAX;
      acc = acc << 6 | v;
    }
    acc <<= 6 * (4 - rem);
    out[o++] = (uint8_t)(acc >> 16);
    if (rem == 3)
      out[o++] = (uint8_t)(acc >> 8);
  }
  return o;
}

/* validate=True's shape for n_data data characters and n_pad '=' after them. */
static bool shape_ok(size_t n_data, size_t n_pad) {
  size_t rem = n_data % 4;
  return n_pad <= 2 && rem != 1 && !(rem == 2 && n_pad != 2) && !(rem == 3 && n_pad == 0);
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

  /* The common form, no whitespace and '=' only at the end: decoded in one pass, EVP_DecodeBlock
   * checking the characters as it goes (it refuses every byte outside the alphabet but '=', which
   * it reads as 0: hence the memchr). Anything else (a character it refuses, whitespace, a
   * shape or size that does not pass) takes the exact passes below, which decide the answer and
   * the error Python would give. */
  const unsigned char *p = (const unsigned char *)payload;
  size_t n_eq = 0;
  while (n_eq < 3 && n_eq < n_payload && p[n_payload - 1 - n_eq] == '=')
    n_eq++;
  size_t n_plain = n_payload - n_eq, n_fast = n_plain / 4 * 3 + (n_plain % 4 ? n_plain % 4 - 1 : 0);
  if (shape_ok(n_plain, n_eq) && n_fast <= lim->max_bytes && !memchr(p, '=', n_plain)) {
    uint8_t *out = malloc(n_fast + 3);
    if (!out)
      return -ENOMEM;
    size_t o = decode_data(p, n_plain, out);
    if (o != SIZE_MAX) {
      *ret_bytes = out;
      *ret_n = o;
      return 0;
    }
    free(out);
  }

  /* Pass 1, no allocation: skip whitespace, refuse non-ASCII, check the shape validate=True
   * accepts ([A-Za-z0-9+/]*={0,2}) and count the data characters. The inner loop runs over the
   * data characters. */
  size_t n_data = 0, n_pad = 0, n_ws = 0;
  bool ok = true;
  for (size_t i = 0; i < n_payload;) {
    size_t j = i;
    while (j < n_payload && B64_CLASS[p[j]] < B64_PAD)
      j++;
    if (j > i && n_pad > 0)
      ok = false; /* data after padding */
    n_data += j - i;
    if ((i = j) == n_payload)
      break;
    uint8_t c = B64_CLASS[p[i]];
    size_t w = c == B64_SPACE ? 1 : c == B64_HIGH ? whitespace_len(p + i, n_payload - i) : 0;
    if (w) {
      i += w;
      n_ws++;
      continue;
    }
    if (c == B64_HIGH)
      return cm_diag_set(diag, -CM_EFORMAT,
                         "image %u could not be decoded (string argument should contain only "
                         "ASCII characters)",
                         index);
    if (c == B64_PAD)
      n_pad++;
    else
      ok = false; /* keep scanning: a later non-ASCII character is Python's first error */
    i++;
  }
  size_t rem = n_data % 4;
  ok = ok && shape_ok(n_data, n_pad);
  if (!ok)
    return cm_diag_set(diag, -CM_EFORMAT, "image %u could not be decoded", index);
  size_t n_out = n_data / 4 * 3 + (rem ? rem - 1 : 0);
  if (n_out > lim->max_bytes)
    return cm_diag_set(diag, -CM_ELIMIT, "image %u exceeds %llu bytes", index,
                       (unsigned long long)lim->max_bytes);

  /* Pass 2: the data characters (the payload itself when it holds no whitespace, else a compacted
   * copy), whole quads by OpenSSL's EVP_DecodeBlock (every character is valid by now; it sees no
   * '='), the last 2 or 3 characters here: their leftover bits are ignored, as Python ignores
   * them. */
  uint8_t *out = malloc(n_out + 3);
  if (!out)
    return -ENOMEM;
  const unsigned char *data = p;
  unsigned char *packed = NULL;
  if (n_ws) {
    if (!(packed = malloc(n_data ? n_data : 1))) {
      free(out);
      return -ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < n_payload && k < n_data;) {
      if (B64_CLASS[p[i]] < B64_PAD)
        packed[k++] = p[i++];
      else
        i += B64_CLASS[p[i]] == B64_HIGH ? whitespace_len(p + i, n_payload - i) : 1;
    }
    data = packed;
  }
  size_t o = decode_data(data, n_data, out);
  if (o == SIZE_MAX) { /* cannot happen: every character was checked above */
    free(packed);
    free(out);
    return cm_diag_set(diag, -CM_EFORMAT, "image %u could not be decoded", index);
  }
  free(packed);
  *ret_bytes = out;
  *ret_n = o;
  return 0;
}
