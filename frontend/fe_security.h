/* Who may talk to s1-frontend: browsers of other origins (refused unless allowed: any web page the
 * user opens can reach a service on the same host), clients without the bearer token (when one is
 * configured, for a frontend listening beyond loopback), and TLS (h2o's own, OpenSSL). All three
 * are off by default except the origin rule. What it leaves out: rate limits, client
 * certificates, DNS-rebinding checks of Host. */
#ifndef S1_FE_SECURITY_H
#define S1_FE_SECURITY_H

#include <h2o.h>
#include <stdbool.h>

#include "cm_error.h"

#define FE_MAX_ORIGINS 16      /* --allow-origin values */
#define FE_MIN_TOKEN_BYTES 16  /* a shorter bearer token is refused at start */
#define FE_MAX_TOKEN_BYTES 4096

struct fe_security {
  const char *origins[FE_MAX_ORIGINS]; /* allowed Origin values (argv), "*" allows any */
  int n_origins;                       /* entries */
  char *token;                         /* the bearer token (heap), NULL when not required */
  size_t token_len;                    /* its length */
};

/* The verdict on one request. */
struct fe_access {
  int status;          /* 0 (allowed), 401 or 403 */
  const char *type;    /* "unauthorized" or "forbidden" */
  const char *message; /* static text naming the header */
  bool cors;           /* an allowed cross-origin request: answer with CORS headers */
};

/* Reads the bearer token from `path` (its first line; surrounding whitespace dropped).
 * Returns 0, -EINVAL (shorter than FE_MIN_TOKEN_BYTES or longer than FE_MAX_TOKEN_BYTES, or a
 * byte outside visible ASCII), -errno. diag names the file. */
int fe_security_load_token(struct fe_security *sec, const char *path, struct cm_diag *diag);

/* Checks a request, in this order: the Origin rule (a browser request whose Origin's host[:port]
 * differs from the Host header, and that no --allow-origin lists: 403, as the Open-Jev reference
 * server does without JEV_ALLOW_CROSS_ORIGIN), then the bearer token (Authorization: Bearer
 * <token>, compared in constant time) on every route but /health and CORS preflights: 401.
 * Source: spec/open_jev.md §8.1 item 2; RFC 6750 §2.1 (Bearer); RFC 6454 (Origin). */
struct fe_access fe_security_check(const struct fe_security *sec, h2o_req_t *req, bool is_health,
                                   bool is_preflight);

/* The TLS context for h2o: certificate chain and key (PEM), TLS 1.2 or newer, HTTP/1.1 only (no
 * ALPN h2). Ownership: *ret_ctx is the caller's (SSL_CTX_free). Returns 0, -EINVAL (a file does
 * not load or the key does not match; diag has OpenSSL's reason). */
int fe_tls_context(const char *cert_path, const char *key_path, SSL_CTX **ret_ctx,
                   struct cm_diag *diag);

void fe_security_fini(struct fe_security *sec);

#endif
