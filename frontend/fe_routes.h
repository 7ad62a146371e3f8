/* The HTTP side of s1-frontend: one route table (path, methods, handler, access class) from which
 * every answer follows, 404 and 405 + Allow included; the answers of wire.md (headers, the error
 * shape, request ids); admission of POST /v1/systemone (content type, body limit, health, queue
 * bound) before its job goes to the pool (fe_pool.h). Loop thread only.
 * What it leaves out: the preprocessors (fe_pool), framing (fe_http1), the access rules
 * themselves (fe_security), sockets and options (main.c). */
#ifndef S1_FE_ROUTES_H
#define S1_FE_ROUTES_H

#include <h2o.h>
#include <stdbool.h>
#include <stddef.h>

#include "fe_framing.h"
#include "fe_metrics.h"
#include "fe_pool.h"
#include "fe_security.h"
#include "fe_static.h"

/* Methods a route serves (bits). HEAD answers as GET (h2o sends the headers, no body); OPTIONS
 * is served on every route (204 with Allow, or a CORS preflight) and is not listed. */
enum fe_method {
  FE_METHOD_GET = 1 << 0,
  FE_METHOD_HEAD = 1 << 1,
  FE_METHOD_POST = 1 << 2,
};

/* Who may call a route (fe_security_check). */
enum fe_route_access {
  FE_ROUTE_ACCESS_TOKEN, /* the origin rule and, when configured, the bearer token */
  FE_ROUTE_ACCESS_OPEN,  /* the origin rule only: /health (probes), the static documents (a
                            browser navigates to them; they hold no data) */
};

/* The HTTP side's state and wiring (borrowed pointers; main owns them). */
struct fe_routes {
  struct fe_pool *pool;           /* the preprocessors: health, models, jobs */
  struct fe_metrics *metrics;     /* counters the answers update */
  const struct fe_security *sec;  /* origin rule, bearer token */
  bool draining;                  /* SIGTERM seen: POST and /health answer 503 */
};

struct fe_route;

/* Answers req on route (its method is one the route serves). rid: the request's x-request-id,
 * in req's pool. Handlers always answer (0 / -1 of h2o is the dispatcher's). */
typedef void (*fe_route_handler_fn)(struct fe_routes *rt, h2o_req_t *req,
                                    const struct fe_route *route, const char *rid);

/* One row of the route table. */
struct fe_route {
  const char *path;             /* exact normalized path; a query string is not part of it */
  unsigned methods;             /* enum fe_method bits served */
  const char *allow;            /* Allow header of its 405 and OPTIONS answers (the methods) */
  fe_route_handler_fn handler;  /* answers a served method */
  enum fe_route_access access;  /* who may call it */
  bool metered;                 /* every answer counted in /metrics by status (access refusals
                                   too); other routes count only their 404/405 */
  const struct fe_asset *asset; /* the static document it serves, NULL for an API route */
  const char *operation_id;     /* openapi.json operationId of its GET or POST */
};

/* What the table says about one request. */
enum fe_route_verdict {
  FE_ROUTE_SERVE,              /* a method the route serves: its handler answers */
  FE_ROUTE_OPTIONS,            /* OPTIONS: 204 with Allow (RFC 9110 §9.3.7), or a preflight */
  FE_ROUTE_METHOD_NOT_ALLOWED, /* another method: 405 method_not_allowed with Allow */
  FE_ROUTE_NOT_FOUND,          /* no route at the path: 404 not_found, whatever the method */
};

/* Looks up path[0..path_len) (normalized, no query) and method[0..method_len) (case-sensitive,
 * RFC 9110 §9.1) in the route table. *ret_route: the path's route, NULL for FE_ROUTE_NOT_FOUND
 * (always written). Pure: no request, no state. */
enum fe_route_verdict fe_route_match(const char *path, size_t path_len, const char *method,
                                     size_t method_len, const struct fe_route **ret_route);

/* The route table (static storage) and its row count in *ret_n. */
const struct fe_route *fe_routes_table(size_t *ret_n);

/* Registers the table's one handler on host's path "/", and on it and the host's fallback the
 * filter giving h2o's own error answers (413 while reading, 417, 404) the wire.md shape.
 * Ownership: rt is borrowed by h2o's configuration and must outlive it. */
void fe_routes_register(struct fe_routes *rt, h2o_hostconf_t *host);

/* fe_http1_render_fn (arg: struct fe_routes *): the answer to a request the framer refused, in
 * the wire.md shape with Connection: close, counted in /metrics. Ownership: *ret_bytes heap
 * (free()). Returns 0 or -ENOMEM. */
int fe_routes_render_refusal(void *arg, const struct fe_framing_refusal *refusal,
                             char **ret_bytes, size_t *ret_len);

/* fe_pool_answer_fn (arg: struct fe_routes *): a job's HTTP answer, the preprocessor's reply with
 * the headers of wire.md (x-request-id, Server-Timing, x-model-revision, x-numerics), or the
 * error shape for a job that failed in the frontend (cm_error_http maps its code). */
void fe_routes_answer_job(void *arg, h2o_req_t *req, const char *rid,
                          const struct fe_job_end *end);

#endif
