/* A strict HTTP/1.1 request framer (RFC 9112) that reads a connection's bytes just before h2o 2.2
 * does and refuses what h2o would accept but frame ambiguously or leniently: repeated or list
 * Content-Length, Content-Length with Transfer-Encoding, obs-fold, bare LF, malformed chunks. The
 * head is parsed with the parser h2o itself runs (picohttpparser, exported by libh2o-evloop), so
 * on every message this framer passes, it and h2o agree where the message ends. Pure: no sockets
 * (fe_http1.c feeds it). A body over max_body (the largest any model accepts) is refused here, at
 * its head (Content-Length) or as its chunks arrive, so the client gets the 413 before it sends
 * the rest; each model's own limit stays with the routes. */
#ifndef S1_FE_FRAMING_H
#define S1_FE_FRAMING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FE_FRAMING_MAX_HEAD_BYTES 32768 /* request line + header fields + CRLF; more: 431 */
#define FE_FRAMING_MAX_HEADERS 100      /* header fields per head (h2o's H2O_MAX_HEADERS); more: 400 */
#define FE_FRAMING_MAX_CHUNK_LINE 1024  /* chunk-size line with its extensions, bytes; more: 400 */
#define FE_FRAMING_MAX_TRAILER_BYTES 8192 /* trailer section of a chunked body; more: 400 */
#define FE_FRAMING_MAX_ID_BYTES 128     /* an x-request-id echoed in a refusal (as the routes do) */

/* Why a connection's bytes were refused: the answer the client gets before the connection
 * closes (RFC 9112 §6.3: a request with invalid framing gets 400 and then the close). */
struct fe_framing_refusal {
  int status;                      /* 400, 413, 431 or 501 */
  const char *type;                /* wire error type: "bad_request", "too_large", "not_implemented" */
  char message[200];               /* what was wrong, naming the header or the body part */
  char request_id[FE_FRAMING_MAX_ID_BYTES + 1]; /* the client's x-request-id, "" when none */
  uint64_t message_index;          /* the refused request's index on the connection (0 = first) */
};

/* One connection's framing state. Embedded by the caller; zeroed by fe_framer_init. */
struct fe_framer {
  int state;            /* enum in fe_framing.c: head, body by length, chunk parts, trailers, failed */
  char *head;           /* [head_len] bytes of a head not yet complete (heap), NULL when none */
  size_t head_len;      /* bytes gathered */
  size_t head_cap;      /* bytes allocated at head (≤ FE_FRAMING_MAX_HEAD_BYTES) */
  uint64_t left;        /* body bytes left (length-delimited) or chunk-data bytes left */
  uint64_t chunk_size;  /* chunk-size being read */
  unsigned hex_digits;  /* its hex digits so far (≤ 16, as h2o's decoder) */
  bool ext_started;     /* a ';' was seen on the chunk-size line */
  size_t line_bytes;    /* bytes of the current chunk-size or trailer line */
  size_t trailer_bytes; /* bytes of the trailer section so far */
  uint64_t n_messages;  /* requests fully framed on this connection */
  bool expect;          /* a head carried Expect (h2o then writes 100 Continue); cleared by the user */
  uint64_t max_body;    /* body bytes a request may carry, 0: no limit; set by the user (it may
                           change between calls: it applies from the next head or chunk) */
  uint64_t body_bytes;  /* chunk data of the current chunked body so far */
  struct fe_framing_refusal refusal; /* the refusal once the state is failed */
};

void fe_framer_init(struct fe_framer *f);
void fe_framer_fini(struct fe_framer *f);

/* Frames the next n_bytes of the connection (any split: a head or a chunk line may span calls).
 * Checks, per request: the head parses (picohttpparser, as h2o), at most
 * FE_FRAMING_MAX_HEAD_BYTES (431); every line ends in CRLF; no obs-fold; HTTP/1.1 has exactly one
 * Host; at most one Content-Length, 1*DIGIT of at most 19 digits; at most one Transfer-Encoding,
 * never with Content-Length nor in HTTP/1.0, exactly "chunked" (a final chunked after other
 * codings: 501); chunked bodies: chunk-size 1*16HEXDIG, extensions after ';', CRLF after the line
 * and after the data, trailer fields as field lines, the final CRLF; a Content-Length or chunked
 * body over max_body (413 too_large).
 * Returns 0 when every byte so far frames validly (complete or not), -1 once the bytes cannot be
 * a valid request stream: *ret (and f->refusal) says why; every later call returns -1 at once.
 * A head that arrives in pieces is checked as h2o checks it (picohttpparser's last_len), so a
 * malformed one may be refused at another byte than when given whole; a valid head is decided
 * alike either way.
 * Ownership: data is only read. Source: RFC 9112 §§2.2, 3.2, 5.2, 6.1, 6.3, 7.1; h2o 2.2.5
 * lib/http1.c (what it accepts) and deps/picohttpparser. Test: frontend_framing, fuzz_framing. */
int fe_framer_feed(struct fe_framer *f, const char *data, size_t n_bytes,
                   struct fe_framing_refusal *ret);

/* True between messages and before the first one (no partial request is pending). */
bool fe_framer_idle(const struct fe_framer *f);

#endif
