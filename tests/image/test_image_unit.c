/* Unit tests of the image path: data URLs and strict base64 (Python's b64decode(validate=True)
 * rules), bad and oversized images with their exact messages, smart_resize examples and ties,
 * the patch layout against the spec formula, normalisation values and mRoPE positions/errors.
 * Usage: test_image_unit FIXTURE_DIR (reads a few source images to truncate and patch). */
#include "image_test.h"
#include "pp_image.h"

#include <ctype.h>
#include <errno.h>
#include <time.h>

static const char *dir;

static struct pp_image_limits lim_default(void) {
  struct pp_image_limits l;
  pp_image_limits_default(&l);
  return l;
}

/* Decodes `s` as request item `index`; returns rc and copies the message into msg. */
static int b64(const char *s, uint32_t index, const struct pp_image_limits *l, char *out,
               size_t *n_out, char msg[256]) {
  struct cm_diag d = {0};
  uint8_t *b = NULL;
  size_t n = 0;
  int rc = pp_image_b64_decode(s, strlen(s), index, l, &b, &n, &d);
  snprintf(msg, 256, "%s", d.msg ? d.msg : "");
  if (rc == 0) {
    memcpy(out, b, n);
    *n_out = n;
    free(b);
  }
  cm_diag_fini(&d);
  return rc;
}

static bool b64_is(const char *s, const char *want) {
  struct pp_image_limits l = lim_default();
  char out[256], msg[256];
  size_t n = 0;
  return b64(s, 0, &l, out, &n, msg) == 0 && n == strlen(want) && memcmp(out, want, n) == 0;
}

static bool b64_fails(const char *s, uint32_t index, const char *want_msg) {
  struct pp_image_limits l = lim_default();
  char out[256], msg[256];
  size_t n = 0;
  int rc = b64(s, index, &l, out, &n, msg);
  if (rc == 0 || strcmp(msg, want_msg) != 0) {
    fprintf(stderr, "b64 %s: rc %d msg '%s', want '%s'\n", s, rc, msg, want_msg);
    return false;
  }
  return true;
}

static void test_base64(void) {
  CHECK(b64_is("data:image/png;base64,QUJD", "ABC"));
  CHECK(b64_is("QUJD", "ABC"));
  CHECK(b64_is("data:;base64,QUJD", "ABC")); /* media type not checked */
  CHECK(b64_is("data:image/jpeg;base64, QU\nJ\tD\r\x1f ", "ABC"));
  CHECK(b64_is("QU\xc2\xa0JD\xe3\x80\x80", "ABC")); /* U+00A0, U+3000: str.split() */
  CHECK(b64_is("QU\xe2\x80\x8aJD\xc2\x85", "ABC")); /* U+200A, U+0085 */
  CHECK(b64_is("QUI=", "AB"));
  CHECK(b64_is("QQ==", "A"));
  CHECK(b64_is("QR==", "A"));    /* non-canonical trailing bits: accepted, as Python does */
  CHECK(b64_is("QUJD=", "ABC")); /* validate=True still tolerates excess padding */
  CHECK(b64_is("QUJD==", "ABC"));
  CHECK(b64_is("QUI==", "AB"));
  CHECK(b64_is("", ""));
  CHECK(b64_fails("data:image/png,QUJD", 0, "image 0 is not a base64 data URL"));
  CHECK(b64_fails("data:image/png;BASE64,QUJD", 2, "image 2 is not a base64 data URL"));
  CHECK(b64_fails("data:image/png;base64x,QUJD", 1, "image 1 is not a base64 data URL"));
  const char *bad[] = {"QQ",    "QQ=",  "Q",    "QUJDQ",   "QQ===", "QU=D",
                       "=QUJD", "QUJ-", "QUJ_", "QUJ\x01", "QU.D"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    CHECK(b64_fails(bad[i], 3, "image 3 could not be decoded"));
  CHECK(b64_fails("QU\xc3\xa9JD", 5,
                  "image 5 could not be decoded (string argument should contain only ASCII "
                  "characters)"));
  CHECK(b64_fails("Q.JD\xc3\xa9", 5, /* Python encodes to ASCII before it validates */
                  "image 5 could not be decoded (string argument should contain only ASCII "
                  "characters)"));
  CHECK(b64_fails("QUJD\xe2\x80\x8b", 5, /* U+200B is not whitespace for Python */
                  "image 5 could not be decoded (string argument should contain only ASCII "
                  "characters)"));
  struct pp_image_limits l = lim_default();
  l.max_bytes = 2;
  char out[256], msg[256];
  size_t n = 0;
  CHECK(b64("QUJD", 4, &l, out, &n, msg) == -CM_ELIMIT && !strcmp(msg, "image 4 exceeds 2 bytes"));
  CHECK(b64("QUI=", 4, &l, out, &n, msg) == 0 && n == 2);
}

/* Bulk base64: seeded random bytes of 0..4000 bytes (and 3 MB) encoded here with the standard
 * alphabet, some with whitespace (ASCII and Unicode, as str.split() has it) or excess padding
 * inserted, must decode to the same bytes (the quads go through EVP_DecodeBlock, the tail and the
 * whitespace through our code); one byte outside the alphabet anywhere ('=' and non-ASCII
 * included), or data after '=', must fail. */
static size_t b64_encode_ref(const uint8_t *b, size_t n, char *out) {
  static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) |
                 (i + 2 < n ? b[i + 2] : 0);
    out[o++] = A[v >> 18 & 63];
    out[o++] = A[v >> 12 & 63];
    out[o++] = i + 1 < n ? A[v >> 6 & 63] : '=';
    out[o++] = i + 2 < n ? A[v & 63] : '=';
  }
  return o;
}

static void test_base64_bulk(void) {
  static const char *const WS[] = {" ", "\n", "\r\n", "\t", "\x1f", "\xc2\xa0", "\xe3\x80\x80",
                                   "\xe2\x80\xa8"};
  struct pp_image_limits l = lim_default();
  uint64_t seed = 0x9e3779b97f4a7c15u;
  size_t max_n = 3u << 20;
  uint8_t *raw = malloc(max_n);
  char *enc = malloc(max_n / 3 * 4 + 8), *text = malloc(max_n / 3 * 4 * 3 + 64);
  CHECK(raw && enc && text);
  if (!raw || !enc || !text)
    return;
  int fails = 0;
  for (int t = 0; t < 400 && fails < 5; t++) {
    size_t n = t == 399 ? max_n : (size_t)(t * 10 + t % 7);
    for (size_t i = 0; i < n; i++) {
      seed = seed * 6364136223846793005u + 1442695040888963407u;
      raw[i] = (uint8_t)(seed >> 56);
    }
    size_t ne = b64_encode_ref(raw, n, enc), nt = 0;
    int mode = t % 4; /* 0 plain, 1 whitespace, 2 excess padding, 3 both */
    for (size_t i = 0; i < ne; i++) {
      seed = seed * 6364136223846793005u + 1442695040888963407u;
      if ((mode & 1) && (seed >> 60) == 0) {
        const char *w = WS[(seed >> 40) % 8];
        memcpy(text + nt, w, strlen(w));
        nt += strlen(w);
      }
      text[nt++] = enc[i];
    }
    if ((mode & 2) && ne % 4 == 0 && (ne == 0 || enc[ne - 1] != '=' || enc[ne - 2] != '='))
      text[nt++] = '=';
    struct cm_diag d = {0};
    uint8_t *out = NULL;
    size_t n_out = 0;
    int rc = pp_image_b64_decode(text, nt, 0, &l, &out, &n_out, &d);
    if (rc || n_out != n || (n && memcmp(out, raw, n))) {
      fprintf(stderr, "base64 bulk case %d (%zu bytes, mode %d): rc %d, %zu bytes\n", t, n, mode,
              rc, n_out);
      fails++;
    }
    free(out);
    cm_diag_fini(&d);
    if (ne >= 8) { /* one bad character, then data after padding */
      seed = seed * 6364136223846793005u + 1442695040888963407u;
      size_t at = (size_t)(seed >> 33) % nt;
      while (text[at] == '=' || (unsigned char)text[at] >= 0x80 || strchr(" \n\r\t\x1f", text[at]))
        at = (at + 1) % nt;
      char keep = text[at];
      unsigned char bad; /* any byte but the alphabet and ASCII whitespace ('=' included) */
      do {
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        bad = (unsigned char)(seed >> 56);
      } while (isalnum(bad) || bad == '+' || bad == '/' || bad == ' ' ||
               (bad >= 0x09 && bad <= 0x0d) || (bad >= 0x1c && bad <= 0x1f) ||
               (bad == '=' && at + 4 >= nt)); /* '=' near the end could be valid padding */
      text[at] = (char)bad;
      rc = pp_image_b64_decode(text, nt, 0, &l, &out, &n_out, &d);
      text[at] = keep;
      if (rc != -CM_EFORMAT || !d.msg || strncmp(d.msg, "image 0 could not be decoded", 28) ||
          (bad < 0x80 && bad != '=' && strlen(d.msg) != 28)) {
        fprintf(stderr, "base64 bulk case %d: a bad character at %zu gave rc %d\n", t, at, rc);
        fails++;
      }
      cm_diag_fini(&d);
      if (enc[ne - 1] == '=') {
        text[nt] = 'Q';
        rc = pp_image_b64_decode(text, nt + 1, 0, &l, &out, &n_out, &d);
        if (rc != -CM_EFORMAT) {
          fprintf(stderr, "base64 bulk case %d: data after padding gave rc %d\n", t, rc);
          fails++;
        }
        cm_diag_fini(&d);
      }
    }
  }
  CHECK(fails == 0);
  free(raw);
  free(enc);
  free(text);
}

/* Runs the full bytes -> image path and checks the code and exact message. */
static bool prepare_fails(const uint8_t *b, size_t n, uint32_t index,
                          const struct pp_image_limits *l, int want_rc, const char *want_msg) {
  struct cm_diag d = {0};
  struct pp_image img = {0};
  int rc = pp_image_prepare_bytes(b, n, index, l, &img, &d);
  bool ok = rc == want_rc && d.msg && strcmp(d.msg, want_msg) == 0;
  if (!ok)
    fprintf(stderr, "prepare: rc %d msg '%s', want %d '%s'\n", rc, d.msg ? d.msg : "", want_rc,
            want_msg);
  pp_image_fini(&img);
  cm_diag_fini(&d);
  return ok;
}

static uint32_t crc32_png(const uint8_t *p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++)
      c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return c ^ 0xffffffffu;
}

static void be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

/* A PNG signature + IHDR for w x h 8-bit RGB (valid CRC) + a tiny IDAT + IEND: a header that
 * promises a huge image the data cannot hold. */
static size_t png_header(uint8_t *b, uint32_t w, uint32_t h) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  static const uint8_t idat[] = {0,    0,    0,    10,   'I',  'D',  'A',  'T',  0x78,
                                 0x9c, 0x63, 0x60, 0x00, 0x00, 0x00, 0x04, 0x00, 0x01};
  memcpy(b, sig, 8);
  be32(b + 8, 13);
  memcpy(b + 12, "IHDR", 4);
  be32(b + 16, w);
  be32(b + 20, h);
  b[24] = 8, b[25] = 2, b[26] = 0, b[27] = 0, b[28] = 0;
  be32(b + 29, crc32_png(b + 12, 17));
  memcpy(b + 33, idat, sizeof(idat));
  size_t n = 33 + sizeof(idat);
  be32(b + n, crc32_png(b + 37, 14));
  n += 4;
  static const uint8_t iend[] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
  memcpy(b + n, iend, sizeof(iend));
  return n + sizeof(iend);
}

static uint8_t *source(const char *name, size_t *n) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/sources/%s", dir, name);
  uint8_t *b = test_read(path, n);
  CHECK(b != NULL);
  return b;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_bad_images(void) {
  struct pp_image_limits l = lim_default();
  const char *names[] = {"rgb_333x217.png", "baseline_333x217.jpg", "progressive_640x480.jpg",
                         "lossy_300x200.webp", "lossless_rgba_150x120.webp"};
  for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
    size_t n = 0;
    uint8_t *b = source(names[k], &n);
    if (!b)
      continue;
    CHECK(prepare_fails(b, n * 6 / 10, 6, &l, -CM_EFORMAT, "image 6 could not be decoded"));
    CHECK(prepare_fails(b, 16, 6, &l, -CM_EFORMAT, "image 6 could not be decoded"));
    /* a JPEG lacking only its EOI marker: Pillow 12.3 refuses it too ("image file is
     * truncated"), while libjpeg alone would decode it */
    if (strstr(names[k], ".jpg"))
      CHECK(prepare_fails(b, n - 2, 6, &l, -CM_EFORMAT, "image 6 could not be decoded"));
    free(b);
  }
  CHECK(prepare_fails((const uint8_t *)"", 0, 1, &l, -CM_EFORMAT, "image 1 could not be decoded"));
  CHECK(prepare_fails((const uint8_t *)"hello world", 11, 1, &l, -CM_EFORMAT,
                      "image 1 could not be decoded"));
  static const struct {
    const char *p;
    size_t n;
  } others[] = {{"GIF89a\x01\x00\x01\x00", 10},
                {"BM\x3a\x00\x00\x00", 6},
                {"II*\0\x08\0\0\0", 8},
                {"P6\n1 1\n255\n\0\0\0", 14}};
  for (size_t k = 0; k < sizeof(others) / sizeof(others[0]); k++)
    CHECK(prepare_fails((const uint8_t *)others[k].p, others[k].n, 2, &l, -CM_EFORMAT,
                        "image 2 is not PNG, JPEG or WebP"));
  /* Bomb-sized headers: refused from the header, before any pixel allocation (fast). */
  uint8_t png[128];
  double t0 = now_s();
  size_t n = png_header(png, 20000, 12000);
  CHECK(prepare_fails(png, n, 0, &l, -CM_ELIMIT,
                      "image 0 is 20000x12000, a side exceeds 16384 pixels"));
  n = png_header(png, 16000, 16000);
  CHECK(prepare_fails(png, n, 0, &l, -CM_ELIMIT, "image 0 exceeds 16777216 pixels"));
  struct pp_image_limits jemm = l;
  jemm.max_src_pixels = 3145728;
  n = png_header(png, 2048, 2048);
  CHECK(prepare_fails(png, n, 3, &jemm, -CM_ELIMIT, "image 3 exceeds 3145728 pixels"));
  n = png_header(png, 4020, 20);
  CHECK(prepare_fails(png, n, 0, &l, -CM_ELIMIT, "image 0 is 4020x20, aspect ratio above 200"));
  n = png_header(png, 0, 20);
  CHECK(prepare_fails(png, n, 0, &l, -CM_EFORMAT, "image 0 could not be decoded"));
  n = png_header(png, 4000, 20); /* aspect 200: allowed, then the data is missing */
  CHECK(prepare_fails(png, n, 0, &l, -CM_EFORMAT, "image 0 could not be decoded"));
  /* JPEG with its SOF0 size patched to 60000 x 60000. */
  size_t nj = 0;
  uint8_t *j = source("baseline_333x217.jpg", &nj);
  for (size_t i = 2; j && i + 9 < nj; i++)
    if (j[i] == 0xff && j[i + 1] == 0xc0) {
      j[i + 5] = 0xea, j[i + 6] = 0x60, j[i + 7] = 0xea, j[i + 8] = 0x60;
      CHECK(prepare_fails(j, nj, 9, &l, -CM_ELIMIT,
                          "image 9 is 60000x60000, a side exceeds 16384 pixels"));
      break;
    }
  free(j);
  CHECK(now_s() - t0 < 5.0);
  struct pp_image_limits small = l;
  small.max_bytes = 1000;
  size_t ns = 0;
  uint8_t *s = source("rgb_333x217.png", &ns);
  CHECK(s && prepare_fails(s, ns, 0, &small, -CM_ELIMIT, "image 0 exceeds 1000 bytes"));
  free(s);
  /* The data-URL entry point: empty payload, and an error from the decode stage. */
  struct cm_diag d = {0};
  struct pp_image img = {0};
  const char *url = "data:image/png;base64";
  CHECK(pp_image_prepare_data_url(url, strlen(url), 3, &l, &img, &d) == -CM_EFORMAT);
  CHECK(d.msg && !strcmp(d.msg, "image 3 could not be decoded"));
  cm_diag_fini(&d);
  url = "data:image/gif;base64,R0lGODlhAQABAAAAACw=";
  CHECK(pp_image_prepare_data_url(url, strlen(url), 1, &l, &img, &d) == -CM_EFORMAT);
  CHECK(d.msg && !strcmp(d.msg, "image 1 is not PNG, JPEG or WebP"));
  cm_diag_fini(&d);
}

static bool sr(uint32_t h, uint32_t w, uint64_t maxp, uint32_t want_h, uint32_t want_w) {
  uint32_t oh = 0, ow = 0;
  int rc = pp_smart_resize(h, w, 32, 65536, maxp, 200, &oh, &ow);
  if (rc || oh != want_h || ow != want_w) {
    fprintf(stderr, "smart_resize %ux%u: rc %d -> %ux%u, want %ux%u\n", h, w, rc, oh, ow, want_h,
            want_w);
    return false;
  }
  return true;
}

static void test_smart_resize(void) {
  const uint64_t M = 16777216;
  CHECK(sr(300, 200, M, 320, 224)); /* spec/qwen3_5.md §7.2 examples */
  CHECK(sr(64, 64, M, 256, 256));
  CHECK(sr(1080, 1920, M, 1088, 1920));
  CHECK(sr(4000, 6000, M, 3328, 4992));
  CHECK(sr(256, 256, M, 256, 256));
  CHECK(sr(320, 256, M, 320, 256));
  CHECK(sr(1080, 1920, 602112, 576, 1024)); /* omnijev.md §10.4: (1, 36, 64) */
  CHECK(sr(1080, 1920, 401408, 448, 832));  /* and (1, 28, 52) with the checkpoint's budget */
  CHECK(sr(900, 1600, 602112, 576, 1024));
  CHECK(sr(20, 2000, 602112, 32, 2560)); /* (1, 2, 160) */
  CHECK(sr(80, 4000, M, 64, 4000));      /* round(2.5) = 2: half to even, not 96 */
  CHECK(sr(112, 4000, M, 128, 4000));    /* round(3.5) = 4 */
  CHECK(sr(1, 200, M, 32, 3648));        /* aspect exactly 200 is allowed */
  uint32_t oh, ow;
  CHECK(pp_smart_resize(10, 2020, 32, 65536, M, 200, &oh, &ow) == -EINVAL);
  CHECK(pp_smart_resize(0, 20, 32, 65536, M, 200, &oh, &ow) == -EINVAL);
}

static void test_patchify(void) {
  const uint32_t H = 64, W = 96; /* grid (1, 4, 6): 24 rows */
  struct pp_rgb img = {W, H, malloc(H * W * 3)};
  for (uint32_t y = 0; y < H; y++)
    for (uint32_t x = 0; x < W; x++)
      for (uint32_t c = 0; c < 3; c++)
        img.data[(y * W + x) * 3 + c] = (uint8_t)((y * 5 + x * 3 + c * 50) & 255);
  float *pv = malloc(sizeof(float) * 24 * PP_IMAGE_ROW);
  CHECK(pp_image_patchify(&img, pv) == 0);
  /* an output that is not 16-byte aligned takes the plain-store path: same values */
  float *pv_odd = malloc(sizeof(float) * (24 * PP_IMAGE_ROW + 1));
  CHECK(pv_odd && pp_image_patchify(&img, pv_odd + 1) == 0);
  CHECK(pv_odd && memcmp(pv, pv_odd + 1, sizeof(float) * 24 * PP_IMAGE_ROW) == 0);
  free(pv_odd);
  const uint32_t gw = W / 16;
  int bad = 0;
  for (uint32_t bh = 0; bh < H / 32; bh++)
    for (uint32_t bw = 0; bw < gw / 2; bw++)
      for (uint32_t ih = 0; ih < 2; ih++)
        for (uint32_t iw = 0; iw < 2; iw++) {
          uint32_t r = ((bh * (gw / 2) + bw) * 2 + ih) * 2 + iw;
          for (uint32_t c = 0; c < 3; c++)
            for (uint32_t t = 0; t < 2; t++)
              for (uint32_t py = 0; py < 16; py++)
                for (uint32_t px = 0; px < 16; px++) {
                  uint32_t k = ((c * 2 + t) * 16 + py) * 16 + px;
                  uint32_t y = 16 * (2 * bh + ih) + py, x = 16 * (2 * bw + iw) + px;
                  float want = ((float)img.data[(y * W + x) * 3 + c] - 127.5f) / 127.5f;
                  bad += pv[r * PP_IMAGE_ROW + k] != want;
                }
        }
  CHECK(bad == 0);
  img.data[0] = 0, img.data[1] = 255, img.data[2] = 128;
  CHECK(pp_image_patchify(&img, pv) == 0);
  CHECK(pv[0] == -1.0f && pv[2 * 256] == 1.0f && pv[4 * 256] == 0.5f / 127.5f);
  CHECK(pv[256] == -1.0f); /* the temporal copy */
  img.height = 48;
  CHECK(pp_image_patchify(&img, pv) == -EINVAL);
  free(pv);
  pp_rgb_fini(&img);
}

static void test_resample_basics(void) {
  uint8_t *a = synth(37, 53, 5, 0);
  struct pp_rgb src = {53, 37, a}, dst = {0};
  CHECK(pp_image_resample(&src, 53, 37, &dst) == 0);
  CHECK(dst.data && memcmp(dst.data, a, 37 * 53 * 3) == 0);
  pp_rgb_fini(&dst);
  CHECK(pp_image_resample(&src, 0, 37, &dst) == -EINVAL);
  /* a constant image stays constant, up and down, one axis or both */
  memset(a, 200, 37 * 53 * 3);
  uint32_t sizes[][2] = {{53, 80}, {20, 37}, {160, 9}, {7, 300}};
  for (size_t k = 0; k < 4; k++) {
    CHECK(pp_image_resample(&src, sizes[k][0], sizes[k][1], &dst) == 0);
    size_t n = (size_t)dst.width * dst.height * 3, off = 0;
    for (size_t i = 0; i < n; i++)
      off += dst.data[i] != 200;
    CHECK(off == 0);
    pp_rgb_fini(&dst);
  }
  pp_rgb_fini(&src);
}

/* The AVX2 loops of pp_image_resample against the portable ones: byte-equal on seeded random
 * sizes, up and down, with the edge cases of the vector code (rows narrower than one 16-byte
 * load, widths not a multiple of 4 or 32, odd row counts, long filters of hard downscales). */
static void test_resample_kernels(void) {
  uint32_t r = 12345, differ = 0, cases = 0;
  for (int k = 0; k < 160; k++) {
    uint32_t dims[4];
    for (int i = 0; i < 4; i++) {
      r = r * 1664525u + 1013904223u;
      uint32_t m = k < 40 ? 8 : k < 120 ? 160 : 600;
      dims[i] = 1 + (r >> 8) % m;
    }
    struct pp_rgb src = {dims[0], dims[1], synth(dims[1], dims[0], (uint32_t)k, k % 3)};
    struct pp_rgb a = {0}, b = {0};
    CHECK(src.data && pp_image_resample(&src, dims[2], dims[3], &a) == 0);
    CHECK(pp_image_resample_generic(&src, dims[2], dims[3], &b) == 0);
    if (a.data && b.data && memcmp(a.data, b.data, (size_t)dims[2] * dims[3] * 3)) {
      fprintf(stderr, "resample %ux%u -> %ux%u: vector and portable loops differ\n", dims[0],
              dims[1], dims[2], dims[3]);
      differ++;
    }
    cases++;
    pp_rgb_fini(&src);
    pp_rgb_fini(&a);
    pp_rgb_fini(&b);
  }
  CHECK(cases == 160 && differ == 0);
}

static void test_mrope(void) {
  enum { IMG = 248056, N = 74 };
  int32_t ids[N], pos[3 * N], next = -1;
  for (int i = 0; i < N; i++)
    ids[i] = (i >= 6 && i < 70) ? IMG : 100 + i;
  struct pp_grid g = {1, 16, 16};
  CHECK(pp_mrope_positions(ids, N, IMG, &g, 1, 0, pos, &next, NULL) == 0);
  CHECK(next == 18 && next - N == -56); /* spec/qwen3_5.md §8.3 */
  CHECK(pos[5] == 5 && pos[N + 5] == 5 && pos[2 * N + 5] == 5);
  CHECK(pos[6] == 6 && pos[N + 6] == 6 && pos[2 * N + 6] == 6);
  CHECK(pos[69] == 6 && pos[N + 69] == 13 && pos[2 * N + 69] == 13);
  CHECK(pos[14] == 6 && pos[N + 14] == 7 && pos[2 * N + 14] == 6); /* row 1, col 0 */
  CHECK(pos[70] == 14 && pos[73] == 17 && pos[2 * N + 73] == 17);
  /* continuation: start after a prefix */
  int32_t tail[3 * 3], nx = -1;
  CHECK(pp_mrope_positions(ids + 71, 3, IMG, NULL, 0, 15, tail, &nx, NULL) == 0);
  CHECK(tail[0] == 15 && tail[2] == 17 && tail[3 + 1] == 16 && nx == 18);
  struct cm_diag d = {0};
  CHECK(pp_mrope_positions(ids, N - 10, IMG, &g, 1, 0, pos, &next, &d) == -CM_EFORMAT);
  CHECK(d.msg && strstr(d.msg, "image grid placeholder mismatch"));
  cm_diag_fini(&d);
  CHECK(pp_mrope_positions(ids, N, IMG, NULL, 0, 0, pos, &next, &d) == -CM_EFORMAT);
  CHECK(d.msg && strstr(d.msg, "unexpected image placeholders"));
  cm_diag_fini(&d);
  struct pp_grid two[2] = {{1, 16, 16}, {1, 2, 2}};
  CHECK(pp_mrope_positions(ids, N, IMG, two, 2, 0, pos, &next, &d) == -CM_EFORMAT);
  CHECK(d.msg && strstr(d.msg, "missing image placeholders"));
  cm_diag_fini(&d);
  struct pp_grid bad[3] = {{2, 16, 16}, {1, 15, 16}, {1, 16, 0}};
  for (int k = 0; k < 3; k++) {
    CHECK(pp_mrope_positions(ids, N, IMG, &bad[k], 1, 0, pos, &next, &d) == -CM_EFORMAT);
    CHECK(d.msg && strstr(d.msg, "invalid image grid"));
    cm_diag_fini(&d);
  }
  /* two adjacent images with no separator are one run, as in HF: a mismatch */
  int32_t adj[8] = {IMG, IMG, IMG, IMG, IMG, IMG, IMG, IMG};
  struct pp_grid g22[2] = {{1, 4, 4}, {1, 4, 4}};
  CHECK(pp_mrope_positions(adj, 8, IMG, g22, 2, 0, pos, &next, NULL) == -CM_EFORMAT);
  CHECK(pp_mrope_positions(adj, 4, IMG, g22, 1, INT32_MAX - 1, pos, &next, NULL) == -CM_ELIMIT);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_image_unit FIXTURE_DIR\n");
    return 2;
  }
  dir = argv[1];
  test_base64();
  test_base64_bulk();
  test_bad_images();
  test_smart_resize();
  test_patchify();
  test_resample_basics();
  test_resample_kernels();
  test_mrope();
  printf("%s\n", failures ? "FAIL" : "ok");
  return failures ? 1 : 0;
}
