/* The routes of s1-frontend (fe_routes.h): the table, the one h2o handler that dispatches from it,
 * the handlers, and the answers of wire.md. Every answer carries x-request-id (the client's when
 * valid, else generated), cache-control: no-store and nosniff; JSON answers a Server-Timing.
 * What it leaves out: the job's life after admission (fe_pool.c). */
#include "fe_routes.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "fe_http1.h"

static void handle_post(struct fe_routes *rt, h2o_req_t *req, const struct fe_route *route,
                        const char *rid);
static void handle_health(struct fe_routes *rt, h2o_req_t *req, const struct fe_route *route,
                          const char *rid);
static void handle_models(struct fe_routes *rt, h2o_req_t *req, const struct fe_route *route,
                          const char *rid);
static void handle_metrics(struct fe_routes *rt, h2o_req_t *req, const struct fe_route *route,
                           const char *rid);
static void handle_static(struct fe_routes *rt, h2o_req_t *req, const struct fe_route *route,
                          const char *rid);

#define GET_HEAD (FE_METHOD_GET | FE_METHOD_HEAD)

/* The routes (frontend/openapi.json documents exactly these: tests/frontend test_openapi.py). */
static const struct fe_route routes[] = {
    {"/v1/systemone", FE_METHOD_POST, "POST", handle_post, FE_ROUTE_ACCESS_TOKEN, true, NULL,
     "systemOne"},
    {"/health", GET_HEAD, "GET, HEAD", handle_health, FE_ROUTE_ACCESS_OPEN, false, NULL, "health"},
    {"/v1/models", GET_HEAD, "GET, HEAD", handle_models, FE_ROUTE_ACCESS_TOKEN, false, NULL,
     "listModels"},
    {"/metrics", GET_HEAD, "GET, HEAD", handle_metrics, FE_ROUTE_ACCESS_TOKEN, false, NULL,
     "metrics"},
    {"/openapi.json", GET_HEAD, "GET, HEAD", handle_static, FE_ROUTE_ACCESS_OPEN, false,
     &fe_static_openapi_asset, "openApi"},
    {"/", GET_HEAD, "GET, HEAD", handle_static, FE_ROUTE_ACCESS_OPEN, false,
     &fe_static_page_asset, "page"},
};

const struct fe_route *fe_routes_table(size_t *ret_n) {
  *ret_n = sizeof routes / sizeof *routes;
  return routes;
}

static bool is_method(const char *method, size_t n, const char *name) {
  return strlen(name) == n && memcmp(method, name, n) == 0;
}

enum fe_route_verdict fe_route_match(const char *path, size_t path_len, const char *method,
                                     size_t method_len, const struct fe_route **ret_route) {
  *ret_route = NULL;
  const struct fe_route *r = NULL;
  for (size_t i = 0; !r && i < sizeof routes / sizeof *routes; i++)
    if (strlen(routes[i].path) == path_len && memcmp(routes[i].path, path, path_len) == 0)
      r = &routes[i];
  if (!r)
    return FE_ROUTE_NOT_FOUND;
  *ret_route = r;
  if (is_method(method, method_len, "OPTIONS"))
    return FE_ROUTE_OPTIONS;
  unsigned m = is_method(method, method_len, "GET")    ? FE_METHOD_GET
               : is_method(method, method_len, "HEAD") ? FE_METHOD_HEAD
               : is_method(method, method_len, "POST") ? FE_METHOD_POST
                                                       : 0;
  return m & r->methods ? FE_ROUTE_SERVE : FE_ROUTE_METHOD_NOT_ALLOWED;
}

/* ---- answers -------------------------------------------------------------------------------- */

static const char *reason_of(int status) {
  switch (status) {
  case 200: return "OK";
  case 204: return "No Content";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 413: return "Payload Too Large";
  case 415: return "Unsupported Media Type";
  case 417: return "Expectation Failed";
  case 422: return "Unprocessable Entity";
  case 431: return "Request Header Fields Too Large";
  case 499: return "Client Closed Request";
  case 500: return "Internal Server Error";
  case 503: return "Service Unavailable";
  case 501: return "Not Implemented";
  case 504: return "Gateway Timeout";
  default: return "Status";
  }
}

static void add_hdr(h2o_req_t *req, const char *name, const char *value, size_t n) {
  h2o_iovec_t v = h2o_strdup(&req->pool, value, n);
  h2o_add_header_by_str(&req->pool, &req->res.headers, name, strlen(name), 1, NULL, v.base, v.len);
}

/* Sends status + JSON body with the headers of wire.md. body is copied. revision: the model
 * revision that answered, NULL for the one every preprocessor reports (fe_pool_revision).
 * numerics: the mode that computed the answer ("fp32" / "bf16"), as x-numerics and a
 * Server-Timing entry; NULL when no executor did. */
static void respond(struct fe_routes *rt, h2o_req_t *req, int status, const char *body, size_t n,
                    const char *rid, const struct proto_timings *t, const char *revision,
                    int retry_after_s, const char *numerics) {
  req->res.status = status;
  req->res.reason = reason_of(status);
  h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                 H2O_STRLIT("application/json"));
  if (rid)
    add_hdr(req, "x-request-id", rid, strlen(rid));
  /* Answers are per request and always JSON (open_jev.md 2.3 lists both headers). */
  add_hdr(req, "cache-control", "no-store", 8);
  add_hdr(req, "x-content-type-options", "nosniff", 7);
  char st[400];
  struct proto_timings z = {0};
  if (!t)
    t = &z;
  /* the executor's part of execute: its queue, vision, prefix, rows, readouts and heads, and the
   * time it spent on other requests' work while this one was in flight */
  int k = snprintf(st, sizeof(st), "queue;dur=%.3f, preprocess;dur=%.3f, execute;dur=%.3f, "
                   "finish;dur=%.3f, ex-queue;dur=%.3f, vision;dur=%.3f, prefix;dur=%.3f, "
                   "rows;dur=%.3f, heads;dur=%.3f, ex-wait;dur=%.3f",
                   (double)t->queue_us / 1000.0, (double)t->preprocess_us / 1000.0,
                   (double)t->execute_us / 1000.0, (double)t->finish_us / 1000.0,
                   (double)t->ex_queue_us / 1000.0, (double)t->vision_us / 1000.0,
                   (double)t->prefix_us / 1000.0, (double)t->rows_us / 1000.0,
                   (double)t->heads_us / 1000.0, (double)t->wait_us / 1000.0);
  /* the numerics as a Server-Timing metric with a description (RFC: token, no duration) */
  if (numerics && strlen(numerics) < 16 &&
      strspn(numerics, "abcdefghijklmnopqrstuvwxyz0123456789-") == strlen(numerics)) {
    k += snprintf(st + k, sizeof(st) - (size_t)k, ", numerics;desc=%s", numerics);
    add_hdr(req, "x-numerics", numerics, strlen(numerics));
  }
  add_hdr(req, "server-timing", st, (size_t)k);
  if (!revision)
    revision = fe_pool_revision(rt->pool);
  if (revision)
    add_hdr(req, "x-model-revision", revision, strlen(revision));
  if (retry_after_s > 0) {
    k = snprintf(st, sizeof(st), "%d", retry_after_s);
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL,
                   h2o_strdup(&req->pool, st, (size_t)k).base, (size_t)k);
  }
  req->res.content_length = n;
  h2o_send_inline(req, body, n);
}

/* The error shape of wire.md, {"error": {"type", "message"}}, JSON-escaped by json-c. */
static void respond_shape(struct fe_routes *rt, h2o_req_t *req, int status, const char *type,
                          const char *message, const char *rid, int retry_after_s) {
  json_object *root = json_object_new_object(), *err = json_object_new_object();
  json_object_object_add(err, "type", json_object_new_string(type));
  json_object_object_add(err, "message", json_object_new_string(message ? message : type));
  json_object_object_add(root, "error", err);
  size_t n = 0;
  const char *s = json_object_to_json_string_length(root, JSON_C_TO_STRING_PLAIN |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE, &n);
  respond(rt, req, status, s, n, rid, NULL, NULL, retry_after_s, NULL);
  json_object_put(root);
}

/* The error answer for a code (cm_error_http is the one mapping). */
static void respond_error(struct fe_routes *rt, h2o_req_t *req, int code, const char *message,
                          const char *rid, int retry_after_s) {
  const char *type = NULL;
  int status = cm_error_http(code, &type);
  if (!type)
    type = "internal", status = 500;
  respond_shape(rt, req, status, type, message, rid, retry_after_s);
}

/* A 404 (no route at the path) or 405 (the route takes other methods; `allow` names them, NULL
 * for a 404), counted in /metrics whatever the path: a client sending to the wrong place shows
 * there. */
static void respond_route_error(struct fe_routes *rt, h2o_req_t *req, int status,
                                const char *allow, const char *rid) {
  fe_metrics_count_status(rt->metrics, status);
  if (allow)
    add_hdr(req, "allow", allow, strlen(allow));
  char msg[96] = "path: no such route (see GET /openapi.json)";
  if (status != 404)
    snprintf(msg, sizeof(msg), "method: %.*s is not allowed here; use %s",
             (int)(req->method.len > 16 ? 16 : req->method.len), req->method.base, allow);
  respond_shape(rt, req, status, status == 404 ? "not_found" : "method_not_allowed", msg, rid, 0);
}

void fe_routes_answer_job(void *arg, h2o_req_t *req, const char *rid,
                          const struct fe_job_end *end) {
  struct fe_routes *rt = arg;
  const struct proto_reply *rp = end->reply;
  if (rp)
    respond(rt, req, rp->status, rp->body, rp->n_body, rid, end->timings, rp->model_revision, 0,
            rp->numerics);
  else
    respond_error(rt, req, end->code, end->message, rid, 0);
}

/* ---- request ids ---------------------------------------------------------------------------- */

/* A generated request id, 39 characters, into buf (≥ 40 bytes). */
static void new_request_id(char *buf, size_t cap) {
  static uint64_t counter;
  uint8_t r[8];
  uint64_t x = (uint64_t)proto_now_us() ^ ((uint64_t)getpid() << 40) ^
               (++counter * 0x9e3779b97f4a7c15ull);
  memcpy(r, &x, 8);
  snprintf(buf, cap, "%02x%02x%02x%02x%02x%02x%02x%02x-%llu", r[0], r[1], r[2], r[3], r[4], r[5],
           r[6], r[7], (unsigned long long)counter);
}

/* The client's x-request-id when it is 1-128 visible ASCII bytes, else a generated one; in
 * req's pool. */
static char *request_id(h2o_req_t *req) {
  ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-request-id"), -1);
  if (i >= 0) {
    h2o_iovec_t v = req->headers.entries[i].value;
    int ok = v.len > 0 && v.len <= FE_FRAMING_MAX_ID_BYTES;
    for (size_t k = 0; ok && k < v.len; k++)
      ok = v.base[k] > 0x20 && v.base[k] < 0x7f;
    if (ok)
      return h2o_strdup(&req->pool, v.base, v.len).base;
  }
  char *s = h2o_mem_alloc_pool(&req->pool, 40);
  new_request_id(s, 40);
  return s;
}

/* ---- h2o's own answers and refused framing ------------------------------------------------ */

/* h2o answers a few requests itself, as text/plain: an oversize body (413, refused while
 * reading), an Expect other than 100-continue (417), a path outside every route (404). This
 * filter gives those answers the error shape and headers of wire.md; every other answer (ours
 * carry x-request-id) passes through. It also tells fe_http1 that a response started, so the
 * connection's framer is put back in front once h2o re-arms reading. */
struct h2o_error_shape {
  int status;       /* h2o's status */
  const char *body; /* the wire.md error body */
};
static const struct h2o_error_shape h2o_errors[] = {
    {400, "{\"error\":{\"type\":\"bad_request\",\"message\":\"request: refused by the HTTP layer\"}}"},
    {404, "{\"error\":{\"type\":\"not_found\",\"message\":\"path: no such route (see GET "
          "/openapi.json)\"}}"},
    {413, "{\"error\":{\"type\":\"too_large\",\"message\":\"body: larger than the limit\"}}"},
    {417, "{\"error\":{\"type\":\"expectation_failed\",\"message\":\"Expect: only 100-continue "
          "is supported\"}}"},
};
static const char h2o_error_other[] =
    "{\"error\":{\"type\":\"internal\",\"message\":\"the HTTP layer failed\"}}";

/* The filter (h2o_create_filter's object) with the routes it counts in. */
struct shape_filter {
  h2o_filter_t super;    /* h2o's filter */
  struct fe_routes *rt;  /* its routes */
};

struct shape_ostream {
  h2o_ostream_t super; /* h2o's ostream */
  const char *body;    /* the body sent instead of h2o's */
};

static void shape_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *bufs, size_t n,
                       h2o_send_state_t state) {
  (void)bufs, (void)n;
  if (h2o_send_state_is_in_progress(state)) {
    h2o_ostream_send_next(self, req, NULL, 0, state);
    return;
  }
  const char *body = ((struct shape_ostream *)self)->body;
  h2o_iovec_t b = h2o_iovec_init(body, strlen(body));
  h2o_ostream_send_next(self, req, &b, 1, state);
}

static void on_setup_ostream(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot) {
  struct fe_routes *rt = ((struct shape_filter *)self)->rt;
  fe_http1_response_started(req);
  if (req->res.status >= 400 &&
      h2o_find_header_by_str(&req->res.headers, H2O_STRLIT("x-request-id"), -1) < 0) {
    const char *body = h2o_error_other;
    for (size_t k = 0; k < sizeof(h2o_errors) / sizeof(*h2o_errors); k++)
      if (h2o_errors[k].status == req->res.status)
        body = h2o_errors[k].body;
    ssize_t i = h2o_find_header(&req->res.headers, H2O_TOKEN_CONTENT_TYPE, -1);
    if (i >= 0)
      req->res.headers.entries[i].value = h2o_iovec_init(H2O_STRLIT("application/json"));
    req->res.content_length = strlen(body);
    char *rid = request_id(req);
    add_hdr(req, "x-request-id", rid, strlen(rid));
    add_hdr(req, "cache-control", "no-store", 8);
    add_hdr(req, "x-content-type-options", "nosniff", 7);
    add_hdr(req, "server-timing", H2O_STRLIT("queue;dur=0.000, preprocess;dur=0.000, "
                                             "execute;dur=0.000, finish;dur=0.000"));
    fe_metrics_count_status(rt->metrics, req->res.status);
    struct shape_ostream *o = (struct shape_ostream *)h2o_add_ostream(req, sizeof(*o), slot);
    o->super.do_send = shape_send;
    o->body = body;
    slot = &o->super.next;
  }
  h2o_setup_next_ostream(req, slot);
}

int fe_routes_render_refusal(void *arg, const struct fe_framing_refusal *r, char **ret_bytes,
                             size_t *ret_len) {
  struct fe_routes *rt = arg;
  json_object *root = json_object_new_object(), *err = json_object_new_object();
  json_object_object_add(err, "type", json_object_new_string(r->type));
  json_object_object_add(err, "message", json_object_new_string(r->message));
  json_object_object_add(root, "error", err);
  size_t n = 0;
  const char *body = json_object_to_json_string_length(root, JSON_C_TO_STRING_PLAIN |
                                                       JSON_C_TO_STRING_NOSLASHESCAPE, &n);
  char rid[FE_FRAMING_MAX_ID_BYTES + 1];
  if (r->request_id[0])
    snprintf(rid, sizeof(rid), "%s", r->request_id);
  else
    new_request_id(rid, sizeof(rid));
  const char *rev = fe_pool_revision(rt->pool);
  size_t cap = n + 640 + (rev ? strlen(rev) : 0);
  char *out = malloc(cap);
  int k = out ? snprintf(out, cap, "HTTP/1.1 %d %s\r\nserver: s1serve\r\nconnection: close\r\n"
                         "content-type: application/json\r\ncontent-length: %zu\r\n"
                         "x-request-id: %s\r\ncache-control: no-store\r\n"
                         "x-content-type-options: nosniff\r\nserver-timing: queue;dur=0.000, "
                         "preprocess;dur=0.000, execute;dur=0.000, finish;dur=0.000\r\n"
                         "%s%s%s\r\n%s", r->status, reason_of(r->status), n, rid,
                         rev ? "x-model-revision: " : "", rev ? rev : "", rev ? "\r\n" : "", body)
              : -1;
  json_object_put(root);
  if (k < 0 || (size_t)k >= cap) {
    free(out);
    return -ENOMEM;
  }
  fe_metrics_count_status(rt->metrics, r->status);
  *ret_bytes = out;
  *ret_len = (size_t)k;
  return 0;
}

/* ---- handlers ------------------------------------------------------------------------------- */

static int is_json_type(h2o_req_t *req) {
  ssize_t i = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1);
  if (i < 0)
    return 0;
  h2o_iovec_t v = req->headers.entries[i].value;
  static const char want[] = "application/json";
  size_t n = sizeof(want) - 1;
  if (v.len < n || strncasecmp(v.base, want, n) != 0)
    return 0;
  return v.len == n || v.base[n] == ';' || v.base[n] == ' ';
}

/* POST /v1/systemone: admission, in this order (each refusal before any work): content type
 * (415), the body limit of the model it is for (413), the pool's health or a drain (503, with
 * Retry-After: 1 while starting), the queue bound (503 overloaded), a client already gone (499);
 * then the job goes to the pool. */
static void handle_post(struct fe_routes *rt, h2o_req_t *req, const struct fe_route *route,
                        const char *rid) {
  (void)route;
  struct fe_metrics *m = rt->metrics;
  if (!is_json_type(req)) {
    fe_metrics_count_status(m, 415);
    respond_error(rt, req, -CM_EMEDIA, "Content-Type: must be application/json", rid, 0);
    return;
  }
  ssize_t mh = h2o_find_header_by_str(&req->headers, H2O_STRLIT("x-model"), -1);
  char *model_header = mh >= 0 && req->headers.entries[mh].value.len <= PROTO_MAX_ID_BYTES
                           ? h2o_strdup(&req->pool, req->headers.entries[mh].value.base,
                                        req->headers.entries[mh].value.len).base
                           : NULL;
  const char *limit_model = NULL;
  size_t limit = fe_pool_body_limit(rt->pool, model_header, &limit_model);
  if (req->entity.len > limit) {
    fe_metrics_count_status(m, 413);
    char msg[PROTO_MAX_ID_BYTES + 96];
    if (limit_model)
      snprintf(msg, sizeof(msg), "body: %zu bytes; %s accepts at most %zu", req->entity.len,
               limit_model, limit);
    else
      snprintf(msg, sizeof(msg), "body: %zu bytes, larger than the limit %zu", req->entity.len,
               limit);
    respond_error(rt, req, -CM_ETOOLARGE, msg, rid, 0);
    return;
  }
  const char *reason = NULL;
  int code = rt->draining ? -CM_EUNAVAILABLE : fe_pool_state(rt->pool, &reason);
  if (rt->draining)
    reason = "the server is shutting down";
  if (code) {
    fe_metrics_count_status(m, 503);
    respond_error(rt, req, code, reason, rid, code == -CM_ENOTREADY ? 1 : 0);
    return;
  }
  if (fe_pool_full(rt->pool)) {
    fe_metrics_count_status(m, 503);
    respond_error(rt, req, -CM_EOVERLOADED, "the request queue is full; retry later", rid, 1);
    return;
  }
  if (fe_http1_client_gone(req)) { /* sent and left (fire and forget): no work, no queue slot */
    m->cancelled[FE_CANCEL_ADMISSION]++;
    fe_metrics_count_status(m, 499);
    respond_error(rt, req, -CM_ECANCELLED, "the client has gone", rid, 0);
    return;
  }
  if (fe_pool_submit(rt->pool, req, rid, model_header) != 0) {
    fe_metrics_count_status(m, 500);
    respond_error(rt, req, -ENOMEM, "out of memory", rid, 0);
  }
}

static void handle_health(struct fe_routes *rt, h2o_req_t *req, const struct fe_route *route,
                          const char *rid) {
  (void)route;
  const struct fe_pool *pool = rt->pool;
  const char *reason = NULL;
  int code = rt->draining ? -CM_EUNAVAILABLE : fe_pool_state(pool, &reason);
  if (rt->draining)
    reason = "shutting down";
  json_object *root = json_object_new_object();
  if (code) {
    json_object_object_add(root, "status", json_object_new_string(code == -CM_ENOTREADY
                                                                      ? "starting"
                                                                      : "unavailable"));
    json_object_object_add(root, "reason", json_object_new_string(reason));
  } else {
    json_object *models = json_object_new_array();
    json_object_object_add(root, "status", json_object_new_string("ready"));
    for (int i = 0; i < pool->n_workers; i++)
      for (uint32_t k = 0; pool->workers[i].has_status && k < pool->workers[i].st.n_models; k++) {
        const char *id = pool->workers[i].st.models[k].id;
        int seen = !pool->workers[i].st.models[k].executors_ready; /* listed once one serves it */
        for (size_t j = 0; j < json_object_array_length(models); j++)
          seen |= strcmp(json_object_get_string(json_object_array_get_idx(models, j)), id) == 0;
        if (!seen)
          json_object_array_add(models, json_object_new_string(id));
      }
    json_object_object_add(root, "models", models);
  }
  size_t n = 0;
  const char *s = json_object_to_json_string_length(root, JSON_C_TO_STRING_PLAIN |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE, &n);
  respond(rt, req, code ? 503 : 200, s, n, rid, NULL, NULL, 0, NULL);
  json_object_put(root);
}

static void handle_models(struct fe_routes *rt, h2o_req_t *req, const struct fe_route *route,
                          const char *rid) {
  (void)route;
  const struct fe_pool *pool = rt->pool;
  json_object *root = json_object_new_object(), *arr = json_object_new_array();
  json_object *ids = json_object_new_object();
  for (int i = 0; i < pool->n_workers; i++)
    for (uint32_t k = 0; pool->workers[i].has_status && k < pool->workers[i].st.n_models; k++) {
      const struct proto_model *m = &pool->workers[i].st.models[k];
      if (json_object_object_get_ex(ids, m->id, NULL))
        continue;
      json_object_object_add(ids, m->id, NULL);
      json_object *d = json_tokener_parse(m->describe);
      if (d)
        json_object_array_add(arr, d);
    }
  json_object_put(ids);
  json_object_object_add(root, "models", arr);
  size_t n = 0;
  const char *s = json_object_to_json_string_length(root, JSON_C_TO_STRING_PLAIN |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE, &n);
  respond(rt, req, 200, s, n, rid, NULL, NULL, 0, NULL);
  json_object_put(root);
}

static void handle_metrics(struct fe_routes *rt, h2o_req_t *req, const struct fe_route *route,
                           const char *rid) {
  (void)route;
  const struct fe_pool *pool = rt->pool;
  char *text = NULL;
  size_t n = 0;
  /* each executor once: several preprocessors report the same one; the latest report wins */
  struct proto_exec_report ex[PROTO_MAX_EXECUTORS];
  int64_t seen[PROTO_MAX_EXECUTORS];
  size_t n_ex = 0;
  for (int i = 0; i < pool->n_workers; i++)
    for (uint32_t k = 0; pool->workers[i].has_status && k < pool->workers[i].st.n_executors;
         k++) {
      const struct proto_exec_report *e = &pool->workers[i].st.executors[k];
      size_t j = 0;
      while (j < n_ex && strcmp(ex[j].instance, e->instance) != 0)
        j++;
      if (j == n_ex && n_ex == PROTO_MAX_EXECUTORS)
        continue;
      if (j == n_ex || pool->workers[i].seen_us > seen[j]) {
        ex[j] = *e;
        seen[j] = pool->workers[i].seen_us;
        n_ex += j == n_ex;
      }
    }
  if (fe_metrics_render(rt->metrics, ex, n_ex, &text, &n) != 0) {
    respond_shape(rt, req, 500, "internal", "metrics rendering failed", rid, 0);
    return;
  }
  req->res.status = 200;
  req->res.reason = "OK";
  h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                 H2O_STRLIT("text/plain; version=0.0.4"));
  add_hdr(req, "x-request-id", rid, strlen(rid));
  req->res.content_length = n;
  h2o_send_inline(req, text, n);
  free(text);
}

/* A compiled-in document (fe_static.h): the page or the OpenAPI document. */
static void handle_static(struct fe_routes *rt, h2o_req_t *req, const struct fe_route *route,
                          const char *rid) {
  (void)rt;
  const struct fe_asset *a = route->asset;
  req->res.status = 200;
  req->res.reason = "OK";
  add_hdr(req, "content-type", a->content_type, strlen(a->content_type));
  add_hdr(req, "x-request-id", rid, strlen(rid));
  add_hdr(req, "x-content-type-options", "nosniff", 7);
  add_hdr(req, "cache-control", "no-cache", 8);
  if (a->csp) {
    add_hdr(req, "content-security-policy", a->csp, strlen(a->csp));
    add_hdr(req, "referrer-policy", "no-referrer", 11);
  }
  req->res.content_length = a->body->n;
  h2o_send_inline(req, (const char *)a->body->data, a->body->n);
}

/* ---- dispatch ------------------------------------------------------------------------------- */

/* The origin rule and the bearer token (fe_security.h) for route's access class; CORS headers
 * for an allowed origin, and the answer to its preflight. Returns 0 when the request may go on,
 * else -1: it was answered. */
static int check_access(struct fe_routes *rt, h2o_req_t *req, const struct fe_route *route,
                        const char *rid, bool is_options) {
  bool preflight =
      is_options &&
      h2o_find_header_by_str(&req->headers, H2O_STRLIT("access-control-request-method"), -1) >= 0;
  struct fe_access a =
      fe_security_check(rt->sec, req, route->access == FE_ROUTE_ACCESS_OPEN, preflight);
  if (a.status) {
    if (route->metered)
      fe_metrics_count_status(rt->metrics, a.status);
    if (a.status == 401)
      add_hdr(req, "www-authenticate", H2O_STRLIT("Bearer realm=\"s1serve\""));
    respond_shape(rt, req, a.status, a.type, a.message, rid, 0);
    return -1;
  }
  if (a.cors) {
    ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("origin"), -1);
    h2o_iovec_t o = req->headers.entries[i].value;
    add_hdr(req, "access-control-allow-origin", o.base, o.len);
    add_hdr(req, "vary", H2O_STRLIT("Origin"));
    add_hdr(req, "access-control-expose-headers",
            H2O_STRLIT("x-request-id, server-timing, x-model-revision, x-numerics"));
    if (preflight) { /* the browser asks before a cross-origin POST: say yes, with no body */
      add_hdr(req, "allow", route->allow, strlen(route->allow));
      add_hdr(req, "access-control-allow-methods", H2O_STRLIT("GET, HEAD, POST"));
      add_hdr(req, "access-control-allow-headers",
              H2O_STRLIT("content-type, authorization, x-request-id, x-model"));
      add_hdr(req, "access-control-max-age", H2O_STRLIT("600"));
      respond(rt, req, 204, "", 0, rid, NULL, NULL, 0, NULL);
      return -1;
    }
  }
  return 0;
}

/* The handler (h2o_create_handler's object) with the routes it dispatches for. */
struct routes_handler {
  h2o_handler_t super;  /* h2o's handler */
  struct fe_routes *rt; /* its routes */
};

/* Every request: the table decides. A path of no route is 404 with no access check; else access
 * first (a refused request learns nothing about methods), then OPTIONS, 405 or the handler. */
static int on_req(h2o_handler_t *self, h2o_req_t *req) {
  struct fe_routes *rt = ((struct routes_handler *)self)->rt;
  char *rid = request_id(req);
  const struct fe_route *route;
  enum fe_route_verdict v = fe_route_match(req->path_normalized.base, req->path_normalized.len,
                                           req->method.base, req->method.len, &route);
  if (v == FE_ROUTE_NOT_FOUND) {
    respond_route_error(rt, req, 404, NULL, rid);
    return 0;
  }
  if (check_access(rt, req, route, rid, v == FE_ROUTE_OPTIONS))
    return 0;
  switch (v) {
  case FE_ROUTE_OPTIONS: /* RFC 9110 §9.3.7 */
    add_hdr(req, "allow", route->allow, strlen(route->allow));
    respond(rt, req, 204, "", 0, rid, NULL, NULL, 0, NULL);
    break;
  case FE_ROUTE_METHOD_NOT_ALLOWED: respond_route_error(rt, req, 405, route->allow, rid); break;
  default: route->handler(rt, req, route, rid); break;
  }
  return 0;
}

void fe_routes_register(struct fe_routes *rt, h2o_hostconf_t *host) {
  h2o_pathconf_t *pathconf = h2o_config_register_path(host, "/", 0);
  struct routes_handler *h =
      (struct routes_handler *)h2o_create_handler(pathconf, sizeof(struct routes_handler));
  h->super.on_req = on_req;
  h->rt = rt;
  h2o_pathconf_t *confs[2] = {pathconf, &host->fallback_path};
  for (int i = 0; i < 2; i++) {
    struct shape_filter *f =
        (struct shape_filter *)h2o_create_filter(confs[i], sizeof(struct shape_filter));
    f->super.on_setup_ostream = on_setup_ostream;
    f->rt = rt;
  }
}
