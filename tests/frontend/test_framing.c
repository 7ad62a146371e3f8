/* Unit test of the strict HTTP/1.1 framer (frontend/fe_framing.h): each framing variant of RFC 9112
 * is accepted or refused with its status, the framer counts the requests it framed, and the verdict
 * does not depend on how the bytes are split across reads (one call, byte by byte, every split in
 * two). The attack inputs of ../shared/findings/2026-12-01-attack (its .http files) are among the cases. */
#include "fe_framing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);                     \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

#define POST "POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
#define GET "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"

struct framing_case {
  const char *name;
  const char *bytes;
  int status;          /* 0: accepted; else the refusal's status */
  uint64_t n_messages; /* complete requests framed (before the refusal, if any) */
  bool idle;           /* accepted: no partial request pending at the end */
  const char *message; /* a substring of the refusal's message, or NULL */
};

static const struct framing_case cases[] = {
    {"get", GET, 0, 1, true, NULL},
    {"three pipelined gets", GET GET GET, 0, 3, true, NULL},
    {"post with length", POST "Content-Length: 2\r\n\r\n{}" GET, 0, 2, true, NULL},
    {"post with zero length", POST "Content-Length: 0\r\n\r\n", 0, 1, true, NULL},
    {"partial body", POST "Content-Length: 10\r\n\r\n{}", 0, 0, false, NULL},
    {"partial head", "POST /v1/systemone HTTP/1.1\r\nHost: x\r\n", 0, 0, false, NULL},
    {"leading empty line (RFC 9112 §2.2)", "\r\n" GET, 0, 1, true, NULL},
    {"http/1.0 without host", "GET /health HTTP/1.0\r\n\r\n", 0, 1, true, NULL},
    {"chunked", POST "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n" GET, 0, 2, true, NULL},
    {"chunked case-insensitive, extension, trailer",
     POST "Transfer-Encoding: Chunked\r\n\r\n1;a=b;c\r\n{\r\nA ; x=\"y\"\r\n}}}}}}}}}}\r\n0\r\n"
          "X-Trailer: 1\r\n\r\n",
     0, 1, true, NULL},
    {"chunked hex sizes", POST "Transfer-Encoding: chunked\r\n\r\n0000a\r\n0123456789\r\n0\r\n\r\n", 0,
     1, true, NULL},
    {"chunked, waiting for the last chunk", POST "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n", 0,
     0, false, NULL},
    /* F3: request smuggling */
    {"F3 conflicting Content-Length (findings)",
     POST "Content-Length: 2\r\nContent-Length: 36\r\n\r\n{}GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
     400, 0, false, "Content-Length: given 2 times"},
    {"equal Content-Length twice", POST "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}", 400, 0,
     false, "Content-Length: given 2 times"},
    {"Content-Length list N, N", POST "Content-Length: 2, 2\r\n\r\n{}", 400, 0, false,
     "Content-Length: \"2, 2\""},
    {"Content-Length and Transfer-Encoding",
     POST "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, 0, false,
     "Transfer-Encoding and Content-Length"},
    {"Transfer-Encoding and Content-Length",
     POST "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 400, 0, false,
     "Transfer-Encoding and Content-Length"},
    {"Transfer-Encoding twice", POST "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
     400, 0, false, "Transfer-Encoding: given 2 times"},
    {"Transfer-Encoding chunked, chunked", POST "Transfer-Encoding: chunked, chunked\r\n\r\n", 501, 0,
     false, "only chunked"},
    {"Transfer-Encoding gzip, chunked", POST "Transfer-Encoding: gzip, chunked\r\n\r\n", 501, 0, false,
     "only chunked"},
    {"Transfer-Encoding chunked, gzip", POST "Transfer-Encoding: chunked, gzip\r\n\r\n", 400, 0, false,
     "does not end in chunked"},
    {"Transfer-Encoding identity", POST "Transfer-Encoding: identity\r\n\r\n", 400, 0, false,
     "does not end in chunked"},
    {"Transfer-Encoding with trailing space", POST "Transfer-Encoding: chunked \r\n\r\n", 400, 0,
     false, "whitespace after chunked"},
    {"Transfer-Encoding in HTTP/1.0",
     "POST /v1/systemone HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, 0, false,
     "HTTP/1.0"},
    {"obs-fold", POST "Content-Length: 2\r\nX-Folded: a\r\n b\r\n\r\n{}", 400, 0, false, "obs-fold"},
    {"obs-fold with tab", POST "X-Folded: a\r\n\tContent-Length: 2\r\n\r\n{}", 400, 0, false,
     "obs-fold"},
    {"bare LF line end", "GET /health HTTP/1.1\nHost: x\n\n", 400, 0, false, "bare LF"},
    {"bare LF in one header", POST "Content-Length: 2\nX: y\r\n\r\n{}", 400, 0, false, "bare LF"},
    {"bare CR in a value", POST "X: a\rb\r\nContent-Length: 2\r\n\r\n{}", 400, 0, false,
     "request head"},
    {"space before colon", POST "Content-Length : 2\r\n\r\n{}", 400, 0, false, "request head"},
    {"no Host in HTTP/1.1", "GET /health HTTP/1.1\r\n\r\n", 400, 0, false, "Host: missing"},
    {"two Host", "GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, 0, false,
     "Host: given more than once"},
    {"HTTP/2.0 request line", "GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 400, 0, false,
     "request head"},
    {"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 400, 0, false, "request head"},
    /* F2: what h2o answered with its own text/plain 400 */
    {"F2 negative Content-Length (findings)", POST "Content-Length: -5\r\n\r\n{}", 400, 0, false,
     "\"-5\""},
    {"Content-Length with a plus", POST "Content-Length: +2\r\n\r\n{}", 400, 0, false, "\"+2\""},
    {"Content-Length hex", POST "Content-Length: 0x2\r\n\r\n{}", 400, 0, false, "\"0x2\""},
    {"Content-Length with trailing space", POST "Content-Length: 2 \r\n\r\n{}", 400, 0, false,
     "\"2 \""},
    {"Content-Length of 20 digits", POST "Content-Length: 10000000000000000000\r\n\r\n", 400, 0,
     false, "1 to 19"},
    {"Content-Length empty", POST "Content-Length:\r\n\r\n", 400, 0, false, "\"\""},
    {"F2 control byte in a header (findings)", POST "X-Foo: a\x01" "b\r\nContent-Length: 2\r\n\r\n{}",
     400, 0, false, "control byte"},
    {"NUL in a header", POST "X-Foo: a\0b\r\n\r\n", 400, 0, false, "request head"},
    {"bad request line", "GARBAGE\r\n\r\n", 400, 0, false, "request head"},
    {"F2 bad chunk size (findings)",
     POST "Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", 400, 0, false,
     "not hexadecimal"},
    {"negative chunk size", POST "Transfer-Encoding: chunked\r\n\r\n-1\r\n", 400, 0, false,
     "not hexadecimal"},
    {"17 hex digits", POST "Transfer-Encoding: chunked\r\n\r\n00000000000000001\r\n", 400, 0, false,
     "16 hex"},
    {"chunk size then garbage", POST "Transfer-Encoding: chunked\r\n\r\n1 2\r\n", 400, 0, false,
     "after the chunk-size"},
    /* F9: the malformed chunk h2o waited 10 s on */
    {"F9 chunk size line without LF (findings)",
     POST "Transfer-Encoding: chunked\r\n\r\n1\r0\r\n\r\n", 400, 0, false, "CR without LF"},
    {"chunk size line ends in bare LF", POST "Transfer-Encoding: chunked\r\n\r\n2\n{}\r\n0\r\n\r\n",
     400, 0, false, "after the chunk-size"},
    {"chunk data longer than its size", POST "Transfer-Encoding: chunked\r\n\r\n1\r\n{}\r\n0\r\n\r\n",
     400, 0, false, "chunk data not followed by CRLF"},
    {"chunk data then bare LF", POST "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\n0\r\n\r\n", 400, 0,
     false, "chunk data not followed by CRLF"},
    {"chunk data CR without LF", POST "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r0\r\n\r\n", 400, 0,
     false, "CR without LF"},
    {"bad trailer", POST "Transfer-Encoding: chunked\r\n\r\n0\r\nnot a field\r\n\r\n", 400, 0, false,
     "trailer line"},
    {"trailer with bare LF", POST "Transfer-Encoding: chunked\r\n\r\n0\r\nX: 1\n\r\n", 400, 0, false,
     "trailer line"},
    {"final CR without LF", POST "Transfer-Encoding: chunked\r\n\r\n0\r\n\rX", 400, 0, false,
     "final CR"},
    /* a valid request, then a refused one: the refusal names the second */
    {"valid then smuggling", GET POST "Content-Length: 1\r\nContent-Length: 2\r\n\r\n", 400, 1, false,
     "Content-Length: given 2 times"},
};

/* Frames `bytes` split at the given cut points; returns the result and the framer's state. */
static int frame(const char *bytes, size_t n, const size_t *cuts, size_t n_cuts,
                 struct fe_framer *f, struct fe_framing_refusal *r) {
  fe_framer_init(f);
  size_t at = 0;
  int rc = 0;
  for (size_t k = 0; k <= n_cuts && !rc; k++) {
    size_t end = k < n_cuts ? cuts[k] : n;
    rc = fe_framer_feed(f, bytes + at, end - at, r);
    at = end;
  }
  return rc;
}

static void check_case(const struct framing_case *c, size_t n, const size_t *cuts, size_t n_cuts,
                       const char *how) {
  struct fe_framer f;
  struct fe_framing_refusal r = {0};
  int rc = frame(c->bytes, n, cuts, n_cuts, &f, &r);
  if (c->status == 0) {
    CHECK(rc == 0, "%s (%s): refused %d %s", c->name, how, r.status, r.message);
    CHECK(f.n_messages == c->n_messages, "%s (%s): %llu messages, want %llu", c->name, how,
          (unsigned long long)f.n_messages, (unsigned long long)c->n_messages);
    CHECK(fe_framer_idle(&f) == c->idle, "%s (%s): idle %d", c->name, how, fe_framer_idle(&f));
  } else {
    CHECK(rc == -1, "%s (%s): accepted", c->name, how);
    CHECK(r.status == c->status, "%s (%s): status %d, want %d (%s)", c->name, how, r.status,
          c->status, r.message);
    CHECK(r.message_index == c->n_messages, "%s (%s): refused message %llu, want %llu", c->name,
          how, (unsigned long long)r.message_index, (unsigned long long)c->n_messages);
    CHECK(!c->message || strstr(r.message, c->message), "%s (%s): message \"%s\" lacks \"%s\"",
          c->name, how, r.message, c->message);
    CHECK(r.type && *r.type, "%s: no type", c->name);
    struct fe_framing_refusal again = {0};
    CHECK(fe_framer_feed(&f, GET, strlen(GET), &again) == -1 && again.status == r.status,
          "%s (%s): a refused stream accepted more bytes", c->name, how);
  }
  fe_framer_fini(&f);
}

static size_t case_len(const struct framing_case *c) {
  /* the NUL case holds a NUL: its length is that of the text up to the final CRLFCRLF */
  if (strcmp(c->name, "NUL in a header") == 0)
    return strlen(POST) + strlen("X-Foo: a") + 1 + strlen("b\r\n\r\n");
  return strlen(c->bytes);
}

int main(void) {
  for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
    const struct framing_case *c = &cases[i];
    size_t n = case_len(c);
    check_case(c, n, NULL, 0, "one call");
    size_t *every = malloc(n * sizeof(*every));
    for (size_t k = 0; k + 1 < n; k++)
      every[k] = k + 1;
    check_case(c, n, every, n ? n - 1 : 0, "byte by byte");
    free(every);
    for (size_t k = 1; k < n; k++)
      check_case(c, n, &k, 1, "split in two");
  }
  /* the head limit: 431 once FE_FRAMING_MAX_HEAD_BYTES pass without the end of the head */
  size_t big = FE_FRAMING_MAX_HEAD_BYTES + 64;
  char *h = malloc(big);
  memset(h, 'a', big);
  const char *start = "GET /health HTTP/1.1\r\nHost: x\r\nX-Long: ";
  memcpy(h, start, strlen(start));
  struct fe_framer f;
  struct fe_framing_refusal r = {0};
  size_t cut = 1000;
  CHECK(frame(h, big, &cut, 1, &f, &r) == -1 && r.status == 431, "long head: %d", r.status);
  fe_framer_fini(&f);
  CHECK(frame(h, big, NULL, 0, &f, &r) == -1 && r.status == 431, "long head, one call: %d",
        r.status);
  fe_framer_fini(&f);
  free(h);
  /* a large chunked body, length-delimited and chunked, frames to the end */
  size_t body = 1 << 20;
  char *p = malloc(body + 256);
  int k = snprintf(p, 256, POST "Content-Length: %zu\r\n\r\n", body);
  memset(p + k, 'x', body);
  CHECK(frame(p, (size_t)k + body, NULL, 0, &f, &r) == 0 && f.n_messages == 1, "1 MiB body");
  fe_framer_fini(&f);
  free(p);
  /* the x-request-id of a refused head is kept for the answer; an invalid one is not */
  const char *id1 = POST "x-request-id: abc-1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n";
  CHECK(frame(id1, strlen(id1), NULL, 0, &f, &r) == -1 && strcmp(r.request_id, "abc-1") == 0,
        "request id \"%s\"", r.request_id);
  fe_framer_fini(&f);
  const char *id2 = POST "x-request-id: a b\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n";
  CHECK(frame(id2, strlen(id2), NULL, 0, &f, &r) == -1 && r.request_id[0] == 0,
        "request id \"%s\"", r.request_id);
  fe_framer_fini(&f);
  /* Expect is reported (h2o answers 100 Continue; fe_http1 then watches the connection) */
  const char *e = POST "Content-Length: 2\r\nExpect: 100-continue\r\n\r\n";
  CHECK(frame(e, strlen(e), NULL, 0, &f, &r) == 0 && f.expect && !fe_framer_idle(&f), "expect");
  fe_framer_fini(&f);
  /* max_body (the largest body any model accepts): more is refused at the head or the chunk line
   * that passes it, in one call and byte by byte; the count restarts with each request */
  static const struct {
    const char *bytes;
    int status;
    uint64_t n_messages;
    const char *message;
  } lim[] = {
      {POST "Content-Length: 10\r\n\r\n0123456789" GET, 0, 2, NULL},
      {POST "Content-Length: 11\r\n\r\n", 413, 0, "body: 11 bytes; no model here accepts more "
                                                  "than 10"},
      {POST "Content-Length: 9999999999999999999\r\n\r\n", 413, 0, "9999999999999999999 bytes"},
      {POST "Transfer-Encoding: chunked\r\n\r\n5\r\n01234\r\n5\r\n56789\r\n0\r\n\r\n"
       POST "Transfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n0\r\n\r\n", 0, 2, NULL},
      {POST "Transfer-Encoding: chunked\r\n\r\n5\r\n01234\r\n6\r\n", 413, 0,
       "body: chunks of more than 10 bytes"},
      {POST "Transfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n", 413, 0, "more than 10"},
      {GET POST "Content-Length: 12\r\n\r\n", 413, 1, "12 bytes"},
  };
  for (size_t i = 0; i < sizeof lim / sizeof *lim; i++) {
    size_t n = strlen(lim[i].bytes);
    for (int bytewise = 0; bytewise < 2; bytewise++) {
      fe_framer_init(&f);
      f.max_body = 10;
      int rc = 0;
      memset(&r, 0, sizeof r);
      for (size_t at = 0; at < n && !rc; at += bytewise ? 1 : n)
        rc = fe_framer_feed(&f, lim[i].bytes + at, bytewise ? 1 : n, &r);
      if (!lim[i].status) {
        CHECK(rc == 0 && f.n_messages == lim[i].n_messages, "limit case %zu: rc %d, %s", i, rc,
              r.message);
      } else {
        CHECK(rc == -1 && r.status == 413 && strcmp(r.type, "too_large") == 0 &&
                  r.message_index == lim[i].n_messages && strstr(r.message, lim[i].message),
              "limit case %zu (%s): rc %d, status %d, message \"%s\"", i,
              bytewise ? "byte by byte" : "one call", rc, r.status, r.message);
      }
      fe_framer_fini(&f);
    }
  }
  printf("%zu framing cases, each one call, byte by byte and split in two\n",
         sizeof(cases) / sizeof(*cases));
  return failures ? 1 : 0;
}
