/* The strict HTTP/1.1 request framer (fe_framing.h). Heads go to picohttpparser's
 * phr_parse_request, the parser h2o 2.2 runs on the same bytes (libh2o-evloop exports it; Debian
 * ships no header for it, so its declaration from deps/picohttpparser/picohttpparser.h of h2o
 * 2.2.5 is repeated here); the checks on top are RFC 9112's. Chunked bodies are walked by a
 * small state machine that accepts a subset of what h2o's decoder accepts, so both end a body
 * at the same byte. */
#include "fe_framing.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>

/* picohttpparser, as built into libh2o-evloop 2.2.5 */
struct phr_header {
  const char *name;
  size_t name_len;
  const char *value;
  size_t value_len;
};
int phr_parse_request(const char *buf, size_t len, const char **method, size_t *method_len,
                      const char **path, size_t *path_len, int *minor_version,
                      struct phr_header *headers, size_t *num_headers, size_t last_len);

enum {
  FR_HEAD,         /* gathering a request head */
  FR_LENGTH,       /* a Content-Length body: `left` bytes to go */
  FR_CHUNK_SIZE,   /* chunk-size hex digits */
  FR_CHUNK_EXT,    /* after the digits: BWS, chunk extensions, up to CR */
  FR_CHUNK_LF,     /* CR seen at the end of the chunk-size line */
  FR_CHUNK_DATA,   /* chunk data: `left` bytes to go */
  FR_DATA_CR,      /* CR after the chunk data */
  FR_DATA_LF,      /* LF after it */
  FR_TRAILER,      /* start of a trailer line, or the final CRLF */
  FR_TRAILER_NAME, /* a trailer field name */
  FR_TRAILER_VAL,  /* its value, up to CR */
  FR_TRAILER_LF,   /* CR seen at the end of a trailer line */
  FR_END_LF,       /* CR of the final CRLF seen */
  FR_FAILED,       /* refused; every later call fails */
};

void fe_framer_init(struct fe_framer *f) {
  memset(f, 0, sizeof(*f));
  f->state = FR_HEAD;
}

void fe_framer_fini(struct fe_framer *f) {
  if (!f)
    return;
  free(f->head);
  f->head = NULL;
  f->head_len = f->head_cap = 0;
}

bool fe_framer_idle(const struct fe_framer *f) {
  return f->state == FR_HEAD && f->head_len == 0;
}

static int refuse(struct fe_framer *f, int status, const char *type, struct fe_framing_refusal *ret,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int refuse(struct fe_framer *f, int status, const char *type, struct fe_framing_refusal *ret,
                  const char *fmt, ...) {
  struct fe_framing_refusal *r = &f->refusal;
  r->status = status;
  r->type = type;
  r->message_index = f->n_messages;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->message, sizeof(r->message), fmt, ap);
  va_end(ap);
  free(f->head);
  f->head = NULL;
  f->head_len = f->head_cap = 0;
  f->state = FR_FAILED;
  if (ret)
    *ret = *r;
  return -1;
}

static bool is_name(const struct phr_header *h, const char *name) {
  size_t n = strlen(name);
  return h->name_len == n && strncasecmp(h->name, name, n) == 0;
}

/* RFC 9110 tchar */
static bool is_tchar(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* field-vchar / SP / HTAB (obs-text included) */
static bool is_field_char(unsigned char c) {
  return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static int hex_value(unsigned char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

static void message_done(struct fe_framer *f) {
  f->n_messages++;
  f->state = FR_HEAD;
}

/* The RFC 9112 checks on a head picohttpparser parsed (buf[0..len) is the whole head). */
static int check_head(struct fe_framer *f, const char *buf, size_t len, int minor,
                      const struct phr_header *h, size_t nh, struct fe_framing_refusal *ret) {
  struct fe_framing_refusal *r = &f->refusal;
  r->request_id[0] = 0;
  for (size_t i = 0; i < nh; i++)
    if (h[i].name && is_name(&h[i], "x-request-id") && h[i].value_len > 0 &&
        h[i].value_len <= FE_FRAMING_MAX_ID_BYTES) {
      bool ok = true;
      for (size_t k = 0; ok && k < h[i].value_len; k++)
        ok = h[i].value[k] > 0x20 && h[i].value[k] < 0x7f;
      if (ok) {
        memcpy(r->request_id, h[i].value, h[i].value_len);
        r->request_id[h[i].value_len] = 0;
      }
    }
  for (size_t i = 0; i < len; i++)
    if (buf[i] == '\n' && (i == 0 || buf[i - 1] != '\r'))
      return refuse(f, 400, "bad_request", ret, "request head: a line ends in a bare LF (RFC 9112 "
                    "§2.2 wants CRLF)");
  const struct phr_header *cl = NULL, *te = NULL;
  size_t n_cl = 0, n_te = 0, n_host = 0;
  for (size_t i = 0; i < nh; i++) {
    if (!h[i].name)
      return refuse(f, 400, "bad_request", ret, "request head: obs-fold (a header line that "
                    "starts with whitespace continues the previous one; RFC 9112 §5.2)");
    if (is_name(&h[i], "content-length"))
      cl = &h[i], n_cl++;
    else if (is_name(&h[i], "transfer-encoding"))
      te = &h[i], n_te++;
    else if (is_name(&h[i], "host"))
      n_host++;
    else if (is_name(&h[i], "expect"))
      f->expect = true;
  }
  if (minor >= 1 && n_host != 1)
    return refuse(f, 400, "bad_request", ret, "Host: %s (RFC 9112 §3.2 wants exactly one in "
                  "HTTP/1.1)", n_host ? "given more than once" : "missing");
  if (minor == 0 && n_host > 1)
    return refuse(f, 400, "bad_request", ret, "Host: given more than once");
  if (n_cl > 1)
    return refuse(f, 400, "bad_request", ret, "Content-Length: given %zu times (RFC 9112 §6.3: "
                  "the body length cannot be determined)", n_cl);
  if (n_te > 1)
    return refuse(f, 400, "bad_request", ret, "Transfer-Encoding: given %zu times", n_te);
  if (te && cl)
    return refuse(f, 400, "bad_request", ret, "Transfer-Encoding and Content-Length: both given "
                  "(RFC 9112 §6.3: a request smuggling pattern)");
  if (te && minor == 0)
    return refuse(f, 400, "bad_request", ret, "Transfer-Encoding: not allowed in HTTP/1.0 "
                  "(RFC 9112 §6.1)");
  if (cl) {
    bool digits = cl->value_len > 0 && cl->value_len <= 19;
    for (size_t k = 0; digits && k < cl->value_len; k++)
      digits = cl->value[k] >= '0' && cl->value[k] <= '9';
    if (!digits)
      return refuse(f, 400, "bad_request", ret, "Content-Length: \"%.*s\" is not 1 to 19 "
                    "decimal digits", (int)(cl->value_len > 40 ? 40 : cl->value_len), cl->value);
    uint64_t v = 0;
    for (size_t k = 0; k < cl->value_len; k++)
      v = v * 10 + (uint64_t)(cl->value[k] - '0');
    if (f->max_body && v > f->max_body)
      return refuse(f, 413, "too_large", ret, "body: %llu bytes; no model here accepts more "
                    "than %llu", (unsigned long long)v, (unsigned long long)f->max_body);
    if (v) {
      f->left = v;
      f->state = FR_LENGTH;
    } else {
      message_done(f);
    }
    return 0;
  }
  if (te) {
    if (te->value_len == 7 && strncasecmp(te->value, "chunked", 7) == 0) {
      f->state = FR_CHUNK_SIZE;
      f->chunk_size = 0, f->hex_digits = 0, f->ext_started = false;
      f->line_bytes = 0, f->trailer_bytes = 0, f->body_bytes = 0;
      return 0;
    }
    size_t e = te->value_len;
    while (e > 0 && (te->value[e - 1] == ' ' || te->value[e - 1] == '\t'))
      e--;
    if (e == 7 && strncasecmp(te->value, "chunked", 7) == 0) /* h2o compares exactly */
      return refuse(f, 400, "bad_request", ret, "Transfer-Encoding: whitespace after chunked");
    bool final_chunked = e >= 8 && strncasecmp(te->value + e - 7, "chunked", 7) == 0 &&
                         strchr(", \t", te->value[e - 8]);
    if (final_chunked)
      return refuse(f, 501, "not_implemented", ret, "Transfer-Encoding: \"%.*s\": only chunked "
                    "is supported", (int)(te->value_len > 60 ? 60 : te->value_len), te->value);
    return refuse(f, 400, "bad_request", ret, "Transfer-Encoding: \"%.*s\" does not end in "
                  "chunked (RFC 9112 §6.3)", (int)(te->value_len > 60 ? 60 : te->value_len),
                  te->value);
  }
  message_done(f);
  return 0;
}

/* Gathers and checks a head; *ret_used: bytes of data taken. Returns 1 (head done), 0 (all of
 * data taken, head incomplete) or -1 (refused). */
static int feed_head(struct fe_framer *f, const char *data, size_t n, size_t *ret_used,
                     struct fe_framing_refusal *ret) {
  const char *buf = data, *method, *path;
  size_t method_len, path_len, nh = FE_FRAMING_MAX_HEADERS, len = n, prev = 0;
  struct phr_header h[FE_FRAMING_MAX_HEADERS];
  int minor = 0;
  if (f->head_len) { /* a head begun earlier: gather into f->head (grown as needed) */
    prev = f->head_len;
    size_t take = n < FE_FRAMING_MAX_HEAD_BYTES - prev ? n : FE_FRAMING_MAX_HEAD_BYTES - prev;
    if (prev + take > f->head_cap) {
      size_t cap = f->head_cap * 2 > prev + take ? f->head_cap * 2 : prev + take;
      char *h = realloc(f->head, cap < FE_FRAMING_MAX_HEAD_BYTES ? cap : FE_FRAMING_MAX_HEAD_BYTES);
      if (!h)
        return refuse(f, 503, "overloaded", ret, "out of memory for the request head");
      f->head = h;
      f->head_cap = cap < FE_FRAMING_MAX_HEAD_BYTES ? cap : FE_FRAMING_MAX_HEAD_BYTES;
    }
    memcpy(f->head + prev, data, take);
    f->head_len += take;
    buf = f->head, len = f->head_len;
  }
  size_t seen = len < FE_FRAMING_MAX_HEAD_BYTES ? len : FE_FRAMING_MAX_HEAD_BYTES;
  int r = phr_parse_request(buf, seen, &method, &method_len, &path, &path_len, &minor, h, &nh,
                            prev);
  if (r == -1)
    return refuse(f, 400, "bad_request", ret, "request head: not an HTTP/1.x request line and "
                  "header fields (a control byte, a bad name, more than %d fields or a "
                  "malformed request line)", FE_FRAMING_MAX_HEADERS);
  if (r == -2) {
    if (seen >= FE_FRAMING_MAX_HEAD_BYTES)
      return refuse(f, 431, "too_large", ret, "request head: larger than %d bytes",
                    FE_FRAMING_MAX_HEAD_BYTES);
    if (!f->head_len) { /* keep the partial head (n < FE_FRAMING_MAX_HEAD_BYTES here) */
      size_t cap = n < 512 ? 512 : n;
      if (!(f->head = malloc(cap)))
        return refuse(f, 503, "overloaded", ret, "out of memory for the request head");
      memcpy(f->head, data, n);
      f->head_len = n;
      f->head_cap = cap;
    }
    *ret_used = n;
    return 0;
  }
  *ret_used = (size_t)r - prev;
  int rc = check_head(f, buf, (size_t)r, minor, h, nh, ret);
  free(f->head);
  f->head = NULL;
  f->head_len = f->head_cap = 0;
  return rc ? -1 : 1;
}

int fe_framer_feed(struct fe_framer *f, const char *data, size_t n, struct fe_framing_refusal *ret) {
  const unsigned char *s = (const unsigned char *)data;
  size_t i = 0;
  if (f->state == FR_FAILED) {
    if (ret)
      *ret = f->refusal;
    return -1;
  }
  while (i < n) {
    unsigned char c = s[i];
    switch (f->state) {
    case FR_HEAD: {
      size_t used = 0;
      int r = feed_head(f, data + i, n - i, &used, ret);
      if (r < 0)
        return -1;
      i += used;
      if (r == 0)
        return 0;
      continue;
    }
    case FR_LENGTH:
    case FR_CHUNK_DATA: {
      uint64_t take = n - i < f->left ? n - i : f->left;
      i += take;
      f->left -= take;
      if (!f->left) {
        if (f->state == FR_LENGTH)
          message_done(f);
        else
          f->state = FR_DATA_CR;
      }
      continue;
    }
    case FR_CHUNK_SIZE:
    case FR_CHUNK_EXT:
      if (++f->line_bytes > FE_FRAMING_MAX_CHUNK_LINE)
        return refuse(f, 400, "bad_request", ret, "chunked body: a chunk-size line longer than "
                      "%d bytes", FE_FRAMING_MAX_CHUNK_LINE);
      if (f->state == FR_CHUNK_SIZE && hex_value(c) >= 0) {
        if (++f->hex_digits > 16)
          return refuse(f, 400, "bad_request", ret, "chunked body: chunk-size of more than 16 "
                        "hex digits");
        f->chunk_size = f->chunk_size << 4 | (uint64_t)hex_value(c);
      } else if (f->hex_digits == 0) {
        return refuse(f, 400, "bad_request", ret, "chunked body: chunk-size is not hexadecimal "
                      "(byte 0x%02x)", c);
      } else if (c == '\r') {
        f->state = FR_CHUNK_LF;
      } else if (c == ';') {
        f->state = FR_CHUNK_EXT, f->ext_started = true;
      } else if ((c == ' ' || c == '\t') || (f->ext_started && is_field_char(c))) {
        f->state = FR_CHUNK_EXT;
      } else {
        return refuse(f, 400, "bad_request", ret, "chunked body: byte 0x%02x after the "
                      "chunk-size (a chunk extension starts with ';', the line ends in CRLF)", c);
      }
      break;
    case FR_CHUNK_LF:
      if (c != '\n')
        return refuse(f, 400, "bad_request", ret, "chunked body: the chunk-size line ends in CR "
                      "without LF");
      f->line_bytes = 0, f->hex_digits = 0, f->ext_started = false;
      if (f->chunk_size && f->max_body &&
          (f->chunk_size > f->max_body || f->body_bytes > f->max_body - f->chunk_size))
        return refuse(f, 413, "too_large", ret, "body: chunks of more than %llu bytes; no "
                      "model here accepts more", (unsigned long long)f->max_body);
      if (f->chunk_size) {
        f->body_bytes += f->chunk_size;
        f->left = f->chunk_size;
        f->state = FR_CHUNK_DATA;
      } else {
        f->state = FR_TRAILER;
      }
      f->chunk_size = 0;
      break;
    case FR_DATA_CR:
      if (c != '\r')
        return refuse(f, 400, "bad_request", ret, "chunked body: chunk data not followed by "
                      "CRLF (longer than its chunk-size?)");
      f->state = FR_DATA_LF;
      break;
    case FR_DATA_LF:
      if (c != '\n')
        return refuse(f, 400, "bad_request", ret, "chunked body: chunk data followed by CR "
                      "without LF");
      f->state = FR_CHUNK_SIZE;
      break;
    case FR_TRAILER:
    case FR_TRAILER_NAME:
    case FR_TRAILER_VAL:
      if (++f->trailer_bytes > FE_FRAMING_MAX_TRAILER_BYTES)
        return refuse(f, 400, "bad_request", ret, "chunked body: trailer section larger than %d "
                      "bytes", FE_FRAMING_MAX_TRAILER_BYTES);
      if (f->state == FR_TRAILER && c == '\r')
        f->state = FR_END_LF;
      else if (f->state != FR_TRAILER_VAL && is_tchar(c))
        f->state = FR_TRAILER_NAME;
      else if (f->state == FR_TRAILER_NAME && c == ':')
        f->state = FR_TRAILER_VAL;
      else if (f->state == FR_TRAILER_VAL && c == '\r')
        f->state = FR_TRAILER_LF;
      else if (!(f->state == FR_TRAILER_VAL && is_field_char(c)))
        return refuse(f, 400, "bad_request", ret, "chunked body: a trailer line that is not a "
                      "field line ending in CRLF (byte 0x%02x)", c);
      break;
    case FR_TRAILER_LF:
      if (c != '\n')
        return refuse(f, 400, "bad_request", ret, "chunked body: a trailer line ends in CR "
                      "without LF");
      f->state = FR_TRAILER;
      break;
    case FR_END_LF:
      if (c != '\n')
        return refuse(f, 400, "bad_request", ret, "chunked body: the final CR is not followed "
                      "by LF");
      message_done(f);
      break;
    default:
      return -1;
    }
    i++;
  }
  return 0;
}
