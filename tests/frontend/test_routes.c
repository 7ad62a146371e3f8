/* Unit test of s1-frontend's route table (frontend/fe_routes.h), in one process, no preprocessor:
 *  1. the table: every path x method gives its verdict (serve, OPTIONS, 405, 404), each route its
 *     Allow, access class, handler and document; the table and frontend/openapi.json list the
 *     same paths, methods and operationIds;
 *  2. the answers: the real h2o stack (fe_http1, fe_routes, a listening fe_pool with no
 *     preprocessor) over a socketpair answers each route as wire.md says (exact status, Allow,
 *     bodies of the errors, the documents byte for byte, the bearer token only where the access
 *     class asks for it, 404/405 counted in /metrics).
 * usage: test_routes SOURCE_ROOT */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fe_http1.h"
#include "fe_pool.h"
#include "fe_routes.h"

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

/* ---- 1. the table --------------------------------------------------------------------------- */

/* What each route must be (written from wire.md and openapi.json, not from the table). */
struct want_route {
  const char *path;
  unsigned methods;
  const char *allow;
  enum fe_route_access access;
  bool metered;
  const struct fe_asset *asset;
  const char *operation_id;
};

static const struct want_route want[] = {
    {"/v1/systemone", FE_METHOD_POST, "POST", FE_ROUTE_ACCESS_TOKEN, true, NULL, "systemOne"},
    {"/health", FE_METHOD_GET | FE_METHOD_HEAD, "GET, HEAD", FE_ROUTE_ACCESS_OPEN, false, NULL,
     "health"},
    {"/v1/models", FE_METHOD_GET | FE_METHOD_HEAD, "GET, HEAD", FE_ROUTE_ACCESS_TOKEN, false, NULL,
     "listModels"},
    {"/metrics", FE_METHOD_GET | FE_METHOD_HEAD, "GET, HEAD", FE_ROUTE_ACCESS_TOKEN, false, NULL,
     "metrics"},
    {"/openapi.json", FE_METHOD_GET | FE_METHOD_HEAD, "GET, HEAD", FE_ROUTE_ACCESS_OPEN, false,
     &fe_static_openapi_asset, "openApi"},
    {"/", FE_METHOD_GET | FE_METHOD_HEAD, "GET, HEAD", FE_ROUTE_ACCESS_OPEN, false,
     &fe_static_page_asset, "page"},
};
#define N_WANT (sizeof want / sizeof *want)

static const struct {
  const char *name;
  unsigned bit; /* 0: not a served method anywhere */
} methods[] = {{"GET", FE_METHOD_GET},   {"HEAD", FE_METHOD_HEAD}, {"POST", FE_METHOD_POST},
               {"PUT", 0},               {"DELETE", 0},            {"PATCH", 0},
               {"CONNECT", 0},           {"TRACE", 0},             {"get", 0},
               {"post", 0},              {"GETX", 0},              {"", 0}};
#define N_METHODS (sizeof methods / sizeof *methods)

static enum fe_route_verdict match(const char *path, const char *method,
                                   const struct fe_route **ret) {
  return fe_route_match(path, strlen(path), method, strlen(method), ret);
}

static void test_table(void) {
  size_t n = 0;
  const struct fe_route *table = fe_routes_table(&n);
  CHECK(n == N_WANT, "%zu routes, want %zu", n, N_WANT);
  for (size_t i = 0; i < N_WANT; i++) {
    const struct want_route *w = &want[i];
    const struct fe_route *r = NULL;
    for (size_t m = 0; m < N_METHODS; m++) {
      enum fe_route_verdict v = match(w->path, methods[m].name, &r);
      enum fe_route_verdict expect = methods[m].bit & w->methods ? FE_ROUTE_SERVE
                                                                 : FE_ROUTE_METHOD_NOT_ALLOWED;
      CHECK(v == expect, "%s %s: verdict %d, want %d", methods[m].name, w->path, v, expect);
      CHECK(r && strcmp(r->path, w->path) == 0, "%s %s: route %s", methods[m].name, w->path,
            r ? r->path : "NULL");
    }
    CHECK(match(w->path, "OPTIONS", &r) == FE_ROUTE_OPTIONS && r, "OPTIONS %s", w->path);
    if (!r)
      continue;
    CHECK(r->methods == w->methods, "%s: methods %u, want %u", w->path, r->methods, w->methods);
    CHECK(strcmp(r->allow, w->allow) == 0, "%s: Allow \"%s\", want \"%s\"", w->path, r->allow,
          w->allow);
    CHECK(r->access == w->access, "%s: access %d, want %d", w->path, r->access, w->access);
    CHECK(r->metered == w->metered, "%s: metered %d", w->path, r->metered);
    CHECK(r->asset == w->asset, "%s: asset %p, want %p", w->path, (const void *)r->asset,
          (const void *)w->asset);
    CHECK(strcmp(r->operation_id, w->operation_id) == 0, "%s: operationId %s, want %s", w->path,
          r->operation_id, w->operation_id);
    CHECK(r->handler != NULL, "%s: no handler", w->path);
    /* the API routes each have their own handler; the documents share one (their asset differs) */
    for (size_t j = 0; j < n; j++)
      if (&table[j] != r && table[j].handler == r->handler)
        CHECK(r->asset && table[j].asset, "%s and %s share a handler", r->path, table[j].path);
  }
  static const char *unknown[] = {"/nope", "/v1", "/v1/", "/v1/systemone/", "/V1/systemone",
                                  "/health/x", "/healthz", "/HEALTH", "/index.html",
                                  "/openapi.json/x", "/metrics.txt", "", "//", "/v1/models/x"};
  for (size_t i = 0; i < sizeof unknown / sizeof *unknown; i++)
    for (size_t m = 0; m < N_METHODS; m++) {
      size_t n_table;
      const struct fe_route *r = fe_routes_table(&n_table); /* must be overwritten with NULL */
      enum fe_route_verdict v = match(unknown[i], methods[m].name, &r);
      CHECK(v == FE_ROUTE_NOT_FOUND && r == NULL, "%s \"%s\": verdict %d", methods[m].name,
            unknown[i], v);
    }
  /* a prefix of the path is not the path: "/health" given as its first 4 bytes */
  const struct fe_route *r = NULL;
  CHECK(fe_route_match("/health", 4, "GET", 3, &r) == FE_ROUTE_NOT_FOUND, "/hea");
  CHECK(fe_route_match("/healthz", 7, "GET", 3, &r) == FE_ROUTE_SERVE && r &&
            strcmp(r->path, "/health") == 0, "/health as 7 bytes of /healthz");
}

static char *read_file(const char *root, const char *rel, size_t *ret_n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", root, rel);
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s: %s\n", path, strerror(errno));
    exit(2);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n)
    exit(2);
  buf[n] = 0;
  fclose(f);
  *ret_n = (size_t)n;
  return buf;
}

/* openapi.json's paths and methods are the table's; the GET or POST operationId is the route's. */
static void test_openapi(const char *root) {
  size_t n_doc;
  char *text = read_file(root, "frontend/openapi.json", &n_doc);
  json_object *doc = json_tokener_parse(text), *paths = NULL;
  CHECK(doc && json_object_object_get_ex(doc, "paths", &paths), "openapi.json has no paths");
  if (!paths) {
    free(text);
    return;
  }
  size_t n_table;
  fe_routes_table(&n_table);
  CHECK((size_t)json_object_object_length(paths) == n_table, "%d documented paths, %zu routes",
        json_object_object_length(paths), n_table);
  json_object_object_foreach(paths, path, item) {
    const struct fe_route *r = NULL;
    CHECK(match(path, "OPTIONS", &r) == FE_ROUTE_OPTIONS && r, "documented %s: no route", path);
    if (!r)
      continue;
    static const char *const docm[] = {"get", "head", "post", "put", "delete", "patch", "trace"};
    static const unsigned bits[] = {FE_METHOD_GET, FE_METHOD_HEAD, FE_METHOD_POST, 0, 0, 0, 0};
    for (size_t k = 0; k < sizeof docm / sizeof *docm; k++) {
      json_object *op = NULL;
      bool documented = json_object_object_get_ex(item, docm[k], &op);
      CHECK(documented == !!(r->methods & bits[k]), "%s %s: documented %d, served %d", docm[k],
            path, documented, !!(r->methods & bits[k]));
      json_object *id = NULL;
      if (documented && (bits[k] == FE_METHOD_GET || bits[k] == FE_METHOD_POST))
        CHECK(json_object_object_get_ex(op, "operationId", &id) &&
                  strcmp(json_object_get_string(id), r->operation_id) == 0,
              "%s %s: operationId %s, route's %s", docm[k], path,
              id ? json_object_get_string(id) : "none", r->operation_id);
    }
    CHECK(json_object_object_get_ex(item, "options", NULL), "options %s not documented", path);
  }
  /* the document compiled in is the file */
  CHECK(fe_static_openapi_asset.body->n == n_doc &&
            memcmp(fe_static_openapi_asset.body->data, text, n_doc) == 0,
        "compiled-in openapi.json differs from the file");
  json_object_put(doc);
  free(text);
}

/* ---- 2. the answers ------------------------------------------------------------------------- */

static struct {
  h2o_globalconf_t config;
  h2o_context_t ctx;
  h2o_accept_ctx_t accept_ctx;
  struct fe_pool pool;
  struct fe_routes routes;
  struct fe_metrics metrics;
  struct fe_security sec;
} g;

struct answer {
  int status;        /* from the status line; 0 when no answer came */
  char head[16384];  /* status line and headers, NUL-terminated */
  char *body;        /* [n_body] (heap) */
  size_t n_body;
};

/* The value of header `name` (case-insensitive) in a->head, copied into out; false if absent. */
static bool header(const struct answer *a, const char *name, char *out, size_t cap) {
  size_t n = strlen(name);
  for (const char *l = strstr(a->head, "\r\n"); l && l[2]; l = strstr(l + 2, "\r\n")) {
    const char *h = l + 2;
    if (strncasecmp(h, name, n) == 0 && h[n] == ':') {
      const char *v = h + n + 1, *e = strstr(v, "\r\n");
      while (*v == ' ')
        v++;
      snprintf(out, cap, "%.*s", (int)(e - v), v);
      return true;
    }
  }
  return false;
}

/* Sends one request (Connection: close) on a new connection through fe_http1 and runs the loop
 * until h2o closes it; the whole answer lands in *a. */
static void exchange(const char *method, const char *path, const char *extra_headers,
                     const char *body, struct answer *a) {
  memset(a, 0, sizeof(*a));
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
    exit(2);
  fe_http1_accept(h2o_evloop_socket_create(g.ctx.loop, sv[0], 0));
  char req[4096];
  int k = snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nConnection: close"
                   "\r\n%s", method, path, extra_headers ? extra_headers : "");
  if (body)
    k += snprintf(req + k, sizeof req - (size_t)k, "Content-Length: %zu\r\n\r\n%s", strlen(body),
                  body);
  else
    k += snprintf(req + k, sizeof req - (size_t)k, "\r\n");
  if (write(sv[1], req, (size_t)k) != k)
    exit(2);
  char *buf = NULL;
  size_t n = 0, cap = 0;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    fe_http1_before_run();
    h2o_evloop_run(g.ctx.loop, 5);
    if (cap - n < 65536 && !(buf = realloc(buf, cap = cap * 2 + 65536)))
      exit(2);
    ssize_t r = recv(sv[1], buf + n, cap - n, 0);
    if (r > 0) {
      n += (size_t)r;
      continue;
    }
    if (r == 0)
      break;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec - t0.tv_sec > 10) {
      fprintf(stderr, "%s %s: no answer in 10 s\n", method, path);
      break;
    }
  }
  close(sv[1]);
  const char *end = buf ? memmem(buf, n, "\r\n\r\n", 4) : NULL;
  if (end && (size_t)(end - buf) + 3 < sizeof a->head) {
    memcpy(a->head, buf, (size_t)(end - buf) + 2);
    sscanf(a->head, "HTTP/1.1 %d", &a->status);
    a->n_body = n - (size_t)(end + 4 - buf);
    a->body = malloc(a->n_body + 1);
    memcpy(a->body, end + 4, a->n_body);
    a->body[a->n_body] = 0;
  }
  free(buf);
}

/* One request and the answer's status, Allow (NULL: must be absent) and exact body (NULL: not
 * checked). */
static void expect(const char *method, const char *path, const char *headers, const char *body,
                   int status, const char *allow, const char *want_body) {
  struct answer a;
  exchange(method, path, headers, body, &a);
  char v[512];
  CHECK(a.status == status, "%s %s: status %d, want %d (%s)", method, path, a.status, status,
        a.body ? a.body : "");
  bool has_allow = header(&a, "allow", v, sizeof v);
  if (allow)
    CHECK(has_allow && strcmp(v, allow) == 0, "%s %s: Allow \"%s\", want \"%s\"", method, path,
          has_allow ? v : "(none)", allow);
  else
    CHECK(!has_allow, "%s %s: Allow \"%s\" on a %d", method, path, v, status);
  CHECK(header(&a, "x-request-id", v, sizeof v) && v[0], "%s %s: no x-request-id", method, path);
  if (want_body)
    CHECK(a.body && strcmp(a.body, want_body) == 0, "%s %s: body %s\n  want %s", method, path,
          a.body ? a.body : "(none)", want_body);
  free(a.body);
}

static uint64_t count_of(const char *metrics_text, int status) {
  char key[64];
  snprintf(key, sizeof key, "s1_requests_total{status=\"%d\"} ", status);
  const char *p = strstr(metrics_text, key);
  return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

static void test_answers(const char *root) {
  static const char not_found[] =
      "{\"error\":{\"type\":\"not_found\",\"message\":\"path: no such route (see GET "
      "/openapi.json)\"}}";
  const char *json = "Content-Type: application/json\r\n";
  int n404 = 0, n405 = 0;
  /* the two documents, byte for byte, GET and HEAD (a query string is not part of the path) */
  const char *docs[][2] = {{"/openapi.json", "frontend/openapi.json"}, {"/", "frontend/page.html"}};
  for (int i = 0; i < 2; i++) {
    size_t n;
    char *want_doc = read_file(root, docs[i][1], &n);
    struct answer a;
    exchange("GET", i ? "/?x=1" : "/openapi.json?x=1", NULL, NULL, &a);
    CHECK(a.status == 200 && a.n_body == n && memcmp(a.body, want_doc, n) == 0,
          "GET %s: %d, %zu bytes, want the file's %zu", docs[i][0], a.status, a.n_body, n);
    char v[4096];
    CHECK(header(&a, "content-type", v, sizeof v) &&
              strcmp(v, i ? "text/html; charset=utf-8" : "application/json") == 0,
          "GET %s: content-type %s", docs[i][0], v);
    CHECK(header(&a, "content-security-policy", v, sizeof v) == (i == 1),
          "GET %s: CSP only on the page", docs[i][0]);
    free(a.body);
    exchange("HEAD", docs[i][0], NULL, NULL, &a);
    CHECK(a.status == 200 && a.n_body == 0 && header(&a, "content-length", v, sizeof v) &&
              strtoull(v, NULL, 10) == n, "HEAD %s: %d, content-length %s", docs[i][0],
          a.status, v);
    free(a.body);
    free(want_doc);
  }
  /* the API routes with no preprocessor connected */
  expect("GET", "/health", NULL, NULL, 503, NULL,
         "{\"status\":\"starting\",\"reason\":\"no preprocessor connected\"}");
  expect("HEAD", "/health?probe=1", NULL, NULL, 503, NULL, "");
  expect("GET", "/v1/models", NULL, NULL, 200, NULL, "{\"models\":[]}");
  expect("POST", "/v1/systemone", json, "{}", 503, NULL,
         "{\"error\":{\"type\":\"not_ready\",\"message\":\"no preprocessor connected\"}}");
  expect("POST", "/v1/systemone", NULL, "{}", 415, NULL,
         "{\"error\":{\"type\":\"unsupported_media_type\",\"message\":\"Content-Type: must be "
         "application/json\"}}");
  /* OPTIONS on every route: 204 with its Allow */
  for (size_t i = 0; i < N_WANT; i++)
    expect("OPTIONS", want[i].path, NULL, NULL, 204, want[i].allow, "");
  /* every other method: 405 with the exact Allow and the message naming the method */
  static const char *const others[] = {"PUT", "DELETE", "PATCH", "GET", "POST"};
  for (size_t i = 0; i < N_WANT; i++)
    for (size_t m = 0; m < sizeof others / sizeof *others; m++) {
      bool served = (strcmp(others[m], "GET") == 0 && want[i].methods & FE_METHOD_GET) ||
                    (strcmp(others[m], "POST") == 0 && want[i].methods & FE_METHOD_POST);
      if (served)
        continue;
      char msg[256];
      snprintf(msg, sizeof msg, "{\"error\":{\"type\":\"method_not_allowed\",\"message\":"
               "\"method: %s is not allowed here; use %s\"}}", others[m], want[i].allow);
      bool has_body = strcmp(others[m], "GET") != 0;
      expect(others[m], want[i].path, json, has_body ? "{}" : NULL, 405, want[i].allow, msg);
      n405++;
    }
  /* unknown paths: 404 whatever the method, no Allow */
  static const char *const unknown[] = {"/nope", "/v1", "/health/x", "/index.html"};
  for (size_t i = 0; i < sizeof unknown / sizeof *unknown; i++) {
    expect("GET", unknown[i], NULL, NULL, 404, NULL, not_found);
    expect("POST", unknown[i], json, "{}", 404, NULL, not_found);
    expect("OPTIONS", unknown[i], NULL, NULL, 404, NULL, not_found);
    n404 += 3;
  }
  /* the client's x-request-id comes back */
  struct answer a;
  char v[256];
  exchange("GET", "/nope", "x-request-id: test-routes-1\r\n", NULL, &a);
  n404++;
  CHECK(header(&a, "x-request-id", v, sizeof v) && strcmp(v, "test-routes-1") == 0,
        "x-request-id %s", v);
  free(a.body);
  /* 404 and 405 are counted in /metrics */
  exchange("GET", "/metrics", NULL, NULL, &a);
  CHECK(a.status == 200 && header(&a, "content-type", v, sizeof v) &&
            strcmp(v, "text/plain; version=0.0.4") == 0, "GET /metrics: %d %s", a.status, v);
  CHECK(a.body && count_of(a.body, 404) == (uint64_t)n404, "404 counted %llu, sent %d",
        a.body ? (unsigned long long)count_of(a.body, 404) : 0ull, n404);
  CHECK(a.body && count_of(a.body, 405) == (uint64_t)n405, "405 counted %llu, sent %d",
        a.body ? (unsigned long long)count_of(a.body, 405) : 0ull, n405);
  CHECK(a.body && count_of(a.body, 415) == 1 && count_of(a.body, 503) == 1,
        "POST answers counted: 415 %llu, 503 %llu", (unsigned long long)count_of(a.body, 415),
        (unsigned long long)count_of(a.body, 503));
  free(a.body);

  /* with a bearer token: the access class decides, before the method */
  static const char token[] = "test-routes-token-0123456789";
  g.sec.token = strdup(token);
  g.sec.token_len = strlen(token);
  static const char unauthorized_prefix[] = "{\"error\":{\"type\":\"unauthorized\"";
  for (size_t i = 0; i < N_WANT; i++) {
    const char *method = want[i].methods & FE_METHOD_POST ? "POST" : "GET";
    struct answer b;
    exchange(method, want[i].path, json, want[i].methods & FE_METHOD_POST ? "{}" : NULL, &b);
    if (want[i].access == FE_ROUTE_ACCESS_TOKEN)
      CHECK(b.status == 401 && header(&b, "www-authenticate", v, sizeof v) &&
                strcmp(v, "Bearer realm=\"s1serve\"") == 0 && b.body &&
                strncmp(b.body, unauthorized_prefix, strlen(unauthorized_prefix)) == 0,
            "%s %s without the token: %d %s", method, want[i].path, b.status,
            b.body ? b.body : "");
    else
      CHECK(b.status == (strcmp(want[i].path, "/health") == 0 ? 503 : 200),
            "%s %s (open) without the token: %d", method, want[i].path, b.status);
    free(b.body);
    exchange("DELETE", want[i].path, NULL, NULL, &b);
    CHECK(b.status == (want[i].access == FE_ROUTE_ACCESS_TOKEN ? 401 : 405),
          "DELETE %s without the token: %d", want[i].path, b.status);
    free(b.body);
  }
  expect("GET", "/v1/models", "Authorization: Bearer test-routes-token-0123456789\r\n", NULL,
         200, NULL, "{\"models\":[]}");
  expect("GET", "/nope", NULL, NULL, 404, NULL, not_found); /* no route: no access check */
  /* another origin: 403 on every route, the open ones included */
  for (size_t i = 0; i < N_WANT; i++) {
    struct answer b;
    exchange("GET", want[i].path, "Origin: http://elsewhere.example\r\n", NULL, &b);
    CHECK(b.status == 403, "GET %s from another origin: %d", want[i].path, b.status);
    free(b.body);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_routes SOURCE_ROOT\n");
    return 2;
  }
  test_table();
  test_openapi(argv[1]);

  h2o_config_init(&g.config);
  g.config.server_name = h2o_iovec_init(H2O_STRLIT("s1serve"));
  g.config.http1.upgrade_to_http2 = 0;
  h2o_hostconf_t *host =
      h2o_config_register_host(&g.config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
  g.routes = (struct fe_routes){.pool = &g.pool, .metrics = &g.metrics, .sec = &g.sec};
  fe_routes_register(&g.routes, host);
  h2o_context_init(&g.ctx, h2o_evloop_create(), &g.config);
  g.accept_ctx.ctx = &g.ctx;
  g.accept_ctx.hosts = g.config.hosts;
  int rv = fe_http1_init(&g.accept_ctx, fe_routes_render_refusal, &g.routes);
  CHECK(rv == 0, "fe_http1_init: %d", rv);
  char dir[] = "/tmp/s1-test-routes-XXXXXX", url[128];
  if (!mkdtemp(dir))
    return 2;
  snprintf(url, sizeof url, "ipc://%s/pool.sock", dir);
  struct cm_diag diag = {0};
  struct fe_pool_config pc = {.url = url, .n_contexts = 4, .queue_max = 4, .max_body = 1 << 20,
                              .timeout_us = 1000000, .loop = g.ctx.loop, .metrics = &g.metrics,
                              .entity_limit = &g.config.max_request_entity_size,
                              .answer = fe_routes_answer_job, .answer_arg = &g.routes};
  rv = fe_pool_init(&g.pool, &pc, &diag);
  CHECK(rv == 0, "fe_pool_init: %s", diag.msg ? diag.msg : "?");
  cm_diag_fini(&diag);
  if (rv == 0)
    test_answers(argv[1]);
  fe_pool_fini(&g.pool);
  fe_security_fini(&g.sec);
  char sock[160];
  snprintf(sock, sizeof sock, "%s/pool.sock", dir);
  unlink(sock);
  rmdir(dir);
  if (failures) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("route table: %zu routes x %zu methods as wire.md and openapi.json say; the answers of "
         "each route over h2o (404/405 with Allow, access classes, documents) as expected\n",
         N_WANT, N_METHODS + 1);
  return 0;
}
