/* The HTTP/1.1 connections of s1-frontend. h2o 2.2 serves them, but every byte it reads from a
 * client passes the strict framer (fe_framing.h) first: a request whose framing is invalid or
 * ambiguous (request smuggling, malformed chunks, bad heads) is answered once, in the service's
 * JSON error shape, and the connection closes (RFC 9112 §6.3), before h2o parses any of it.
 * TLS, when configured, is h2o's own (the framer sees the decrypted bytes). HTTP/2 is not
 * offered. Loop thread only. What it leaves out: keep-alive and timeouts stay h2o's. */
#ifndef S1_FE_HTTP1_H
#define S1_FE_HTTP1_H

#include <h2o.h>
#include <h2o/http1.h>

#include "fe_framing.h"

/* Renders the answer to a refused request: a whole HTTP/1.1 response (status line, headers with
 * Connection: close, body). arg: fe_http1_init's. Ownership: *ret_bytes is heap (free()).
 * Returns 0 or -ENOMEM. */
typedef int (*fe_http1_render_fn)(void *arg, const struct fe_framing_refusal *refusal,
                                  char **ret_bytes, size_t *ret_len);

/* Prepares the connection layer for accept_ctx (its ssl_ctx, if any, turns TLS on): learns
 * h2o's HTTP/1 read callback from one connection on a socketpair (closed at once).
 * Ownership: accept_ctx stays the caller's and must outlive every connection.
 * Returns 0, -errno (socketpair), -EPROTO (h2o set no read callback). */
int fe_http1_init(h2o_accept_ctx_t *accept_ctx, fe_http1_render_fn render, void *render_arg);

/* Serves one accepted socket (in place of h2o_accept). Ownership: the socket becomes h2o's. */
void fe_http1_accept(h2o_socket_t *sock);

/* Call before every h2o_evloop_run: h2o re-arms a connection's reading with its own callback after
 * each answer (and after 100 Continue); this puts the framer back in front before the loop polls. */
void fe_http1_before_run(void);

/* Call when a response starts (an ostream filter sees every one, h2o's own errors included): marks
 * the request's connection to be checked by fe_http1_before_run once the request is disposed. */
void fe_http1_response_started(h2o_req_t *req);

/* Whether the client of an HTTP/1 request has closed its connection (or half-closed it: as
 * nginx does, EOF counts as gone; a pipelined next request does not). h2o 2.2 stops reading the
 * socket while a request is processed, so the EOF waits in the kernel: polls it, peeks one byte.
 * false for HTTP/2 (h2o reads those connections throughout and disposes a reset stream's
 * request). */
bool fe_http1_client_gone(h2o_req_t *req);

/* Connections open now (gauge). */
size_t fe_http1_connections(void);

#endif
