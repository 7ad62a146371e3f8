/* s1-frontend: the HTTP face of s1serve (h2o event loop, one thread). This file parses the
 * options and wires the parts together: the HTTP listener and the strict HTTP/1.1 framer
 * (fe_http1), the route table and its answers (fe_routes), the credit pool that hands jobs to
 * the preprocessors (fe_pool), the tick that drives deadlines, and SIGTERM's drain: admission
 * stops, the queued and in-flight requests are answered, then the process exits.
 * What it leaves out: everything the parts do (see their headers and README.md). */
#include <errno.h>
#include <getopt.h>
#include <h2o.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cm_runtime.h"
#include "cm_version.h"
#include "fe_http1.h"
#include "fe_metrics.h"
#include "fe_pool.h"
#include "fe_routes.h"
#include "fe_security.h"

#define TICK_MS 20
#define ACCEPT_PAUSE_MS 100 /* out of descriptors: accepting stops this long */

static struct {
  h2o_globalconf_t config;         /* h2o configuration (one host, one path) */
  h2o_context_t ctx;               /* the one h2o context and its event loop */
  h2o_accept_ctx_t accept_ctx;     /* for fe_http1_accept */
  h2o_socket_t *listener;          /* HTTP listen socket; NULL once draining */
  h2o_timeout_t tick;              /* TICK_MS timer */
  h2o_timeout_entry_t tick_entry;  /* its entry (on_tick) */
  struct fe_pool pool;             /* the preprocessors and the jobs */
  struct fe_routes routes;         /* the HTTP side */
  struct fe_metrics metrics;       /* /metrics */
  struct fe_security sec;          /* origin rule, bearer token */
  int listen_loopback;             /* --listen is a 127.0.0.0/8 address */
  char *default_pool;              /* the default --pool URL (heap), NULL when given */
  volatile sig_atomic_t term;      /* SIGTERM seen (signal handler) */
  uint64_t accept_resume_ms;       /* accepting paused (out of descriptors) until this loop time */
  uint64_t accept_logged_ms;       /* when that was last logged */
} g;

static void on_term(int sig) {
  (void)sig;
  g.term = 1;
}

/* Every TICK_MS: the pool's deadlines and preprocessors, then SIGTERM: admission stops. */
/* The pool's log (fe_pool_config.log): one stderr line. */
static void log_line(const char *msg) { fprintf(stderr, "s1-frontend: %s\n", msg); }

static void on_accept(h2o_socket_t *listener, const char *err);

static void on_tick(h2o_timeout_entry_t *entry) {
  (void)entry;
  fe_pool_tick(&g.pool);
  if (g.term && !g.routes.draining) {
    g.routes.draining = true;
    fprintf(stderr, "s1-frontend: SIGTERM: admission stopped, draining %zu queued, %llu in "
            "flight\n", g.pool.queue_len, (unsigned long long)g.metrics.in_flight);
    if (g.listener) {
      h2o_socket_read_stop(g.listener);
      h2o_socket_close(g.listener);
      g.listener = NULL;
    }
  }
  if (g.accept_resume_ms && h2o_now(g.ctx.loop) >= g.accept_resume_ms) {
    g.accept_resume_ms = 0;
    if (g.listener)
      h2o_socket_read_start(g.listener, on_accept);
  }
  h2o_timeout_link(g.ctx.loop, &g.tick, &g.tick_entry);
}

static void on_accept(h2o_socket_t *listener, const char *err) {
  if (err)
    return;
  h2o_socket_t *sock;
  while ((sock = h2o_evloop_socket_accept(listener)) != NULL)
    fe_http1_accept(sock);
  if (errno == EMFILE || errno == ENFILE) {
    /* out of descriptors: the connection stays in the backlog and the listener stays readable,
     * so accepting again at once would spin the loop; it resumes after ACCEPT_PAUSE_MS (on_tick),
     * once idle connections have closed, while the open ones are served */
    uint64_t now = h2o_now(g.ctx.loop);
    h2o_socket_read_stop(listener);
    g.accept_resume_ms = now + ACCEPT_PAUSE_MS;
    if (!g.accept_logged_ms || now - g.accept_logged_ms >= 10000) {
      fprintf(stderr, "s1-frontend: out of file descriptors (%s): not accepting connections for "
              "%d ms at a time until some close\n", strerror(errno), ACCEPT_PAUSE_MS);
      g.accept_logged_ms = now;
    }
  }
}

static int listen_http(const char *hostport) {
  char host[64] = "127.0.0.1";
  int port = 8080;
  const char *colon = strrchr(hostport, ':');
  if (colon) {
    size_t n = (size_t)(colon - hostport);
    if (n >= sizeof(host))
      return -EINVAL;
    memcpy(host, hostport, n);
    host[n] = 0;
    port = atoi(colon + 1);
  } else {
    port = atoi(hostport);
  }
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (port <= 0 || port > 65535 || inet_pton(AF_INET, host, &a.sin_addr) != 1)
    return -EINVAL;
  g.listen_loopback = (ntohl(a.sin_addr.s_addr) >> 24) == 127;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  if (fd < 0)
    return -errno;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, SOMAXCONN) != 0) {
    int e = -errno;
    close(fd);
    return e;
  }
  g.listener = h2o_evloop_socket_create(g.ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
  h2o_socket_read_start(g.listener, on_accept);
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: s1-frontend [--listen HOST:PORT] [--pool URL] [--queue N] [--max-body BYTES]\n"
          "                   [--timeout-ms MS] [--contexts N] [--allow-origin ORIGIN]...\n"
          "                   [--auth-token-file FILE] [--tls-cert FILE --tls-key FILE]\n"
          "  --listen    HTTP address (default 127.0.0.1:8080)\n"
          "  --pool      nng URL preprocessors dial (default ipc://RUNTIME/frontend.sock;\n"
          "              RUNTIME: $RUNTIME_DIRECTORY, $XDG_RUNTIME_DIR/s1serve or\n"
          "              /tmp/s1serve-UID, a private 0700 directory)\n"
          "  --queue     requests waiting for a credit before 503 overloaded (default 64)\n"
          "  --max-body  cap on every model's body limit (limits.max_body_bytes of its\n"
          "              directory, listed by /v1/models), bytes (default 67108864)\n"
          "  --timeout-ms request deadline (default 30000)\n"
          "  --contexts  REP contexts = most credits held at once (default 256)\n"
          "  --allow-origin ORIGIN  a browser origin allowed cross-origin (repeatable; * allows\n"
          "              any); others get 403 (default: none)\n"
          "  --auth-token-file FILE  require Authorization: Bearer <the file's first line> on\n"
          "              every route but /health (default: none; use it beyond loopback)\n"
          "  --tls-cert FILE --tls-key FILE  serve HTTPS (PEM; default: plain HTTP)\n");
}

static long parse_num(const char *s, long lo, long hi) {
  char *end;
  long v = strtol(s, &end, 10);
  return *s && !*end && v >= lo && v <= hi ? v : -1;
}

int main(int argc, char **argv) {
  if (cm_version_requested(argc, argv, "s1-frontend"))
    return 0;
  static const struct option opts[] = {
      {"listen", required_argument, 0, 'l'},   {"pool", required_argument, 0, 'p'},
      {"queue", required_argument, 0, 'q'},    {"max-body", required_argument, 0, 'b'},
      {"timeout-ms", required_argument, 0, 't'}, {"contexts", required_argument, 0, 'c'},
      {"allow-origin", required_argument, 0, 'o'}, {"auth-token-file", required_argument, 0, 'a'},
      {"tls-cert", required_argument, 0, 'C'}, {"tls-key", required_argument, 0, 'K'},
      {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
  const char *listen_at = "127.0.0.1:8080", *pool_url = NULL, *token_file = NULL;
  const char *tls_cert = NULL, *tls_key = NULL;
  long queue = 64, max_body = PROTO_MAX_BODY_BYTES, timeout_ms = 30000, contexts = 256;
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'l': listen_at = optarg; break;
    case 'p': pool_url = optarg; break;
    case 'q': queue = parse_num(optarg, 0, 1 << 20); break;
    case 'b': max_body = parse_num(optarg, 1, PROTO_MAX_BODY_BYTES); break;
    case 't': timeout_ms = parse_num(optarg, 1, 3600000); break;
    case 'c': contexts = parse_num(optarg, 1, 65536); break;
    case 'o':
      if (g.sec.n_origins == FE_MAX_ORIGINS) {
        fprintf(stderr, "s1-frontend: at most %d --allow-origin\n", FE_MAX_ORIGINS);
        return 2;
      }
      g.sec.origins[g.sec.n_origins++] = optarg;
      break;
    case 'a': token_file = optarg; break;
    case 'C': tls_cert = optarg; break;
    case 'K': tls_key = optarg; break;
    case 'h': usage(); return 0;
    default: usage(); return 2;
    }
  }
  if (queue < 0 || max_body < 0 || timeout_ms < 0 || contexts < 0 || optind != argc ||
      !tls_cert != !tls_key) {
    usage();
    return 2;
  }
  struct cm_diag sdiag = {0};
  if ((token_file && fe_security_load_token(&g.sec, token_file, &sdiag)) ||
      (tls_cert && fe_tls_context(tls_cert, tls_key, &g.accept_ctx.ssl_ctx, &sdiag))) {
    fprintf(stderr, "s1-frontend: %s\n", sdiag.msg);
    cm_diag_fini(&sdiag);
    return 1;
  }
  cm_diag_fini(&sdiag);
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {.sa_handler = on_term};
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  h2o_config_init(&g.config);
  /* h2o's limit follows the models' once they are known (fe_pool); until then 4 MiB */
  size_t cap = (size_t)max_body;
  g.config.max_request_entity_size = (cap < (4u << 20) ? cap : (4u << 20)) + 1;
  g.config.server_name = h2o_iovec_init(H2O_STRLIT("s1serve"));
  /* HTTP/1.1 only: the framer (fe_http1) guards HTTP/1 framing; no h2c upgrade or preface */
  g.config.http1.upgrade_to_http2 = 0;
  h2o_hostconf_t *host = h2o_config_register_host(&g.config,
                                                  h2o_iovec_init(H2O_STRLIT("default")), 65535);
  g.routes = (struct fe_routes){.pool = &g.pool, .metrics = &g.metrics, .sec = &g.sec};
  fe_routes_register(&g.routes, host);
  h2o_context_init(&g.ctx, h2o_evloop_create(), &g.config);
  g.accept_ctx.ctx = &g.ctx;
  g.accept_ctx.hosts = g.config.hosts;
  /* the pool's ipc socket: a private directory, and the lock before nng touches the path */
  struct cm_diag diag = {0};
  int lock_fd = -1, rv;
  if ((!pool_url && cm_runtime_url("frontend.sock", &g.default_pool, &diag)) ||
      cm_ipc_check(pool_url ? pool_url : g.default_pool, true, "--pool", &diag) ||
      cm_ipc_lock(pool_url ? pool_url : g.default_pool, "--pool", &lock_fd, &diag)) {
    fprintf(stderr, "s1-frontend: %s\n", diag.msg ? diag.msg : "--pool: refused");
    cm_diag_fini(&diag);
    return 1;
  }
  if (!pool_url)
    pool_url = g.default_pool;
  if ((rv = fe_http1_init(&g.accept_ctx, fe_routes_render_refusal, &g.routes))) {
    fprintf(stderr, "s1-frontend: HTTP/1 setup failed: %s\n", strerror(-rv));
    return 1;
  }
  h2o_timeout_init(g.ctx.loop, &g.tick, TICK_MS);
  g.tick_entry.cb = on_tick;
  h2o_timeout_link(g.ctx.loop, &g.tick, &g.tick_entry);
  struct fe_pool_config pc = {.url = pool_url, .n_contexts = (int)contexts,
                              .queue_max = (size_t)queue, .max_body = cap,
                              .timeout_us = timeout_ms * 1000, .loop = g.ctx.loop,
                              .metrics = &g.metrics,
                              .entity_limit = &g.config.max_request_entity_size,
                              .answer = fe_routes_answer_job, .answer_arg = &g.routes,
                              .log = log_line};
  if (fe_pool_init(&g.pool, &pc, &diag)) {
    fprintf(stderr, "s1-frontend: %s\n", diag.msg);
    cm_diag_fini(&diag);
    return 1;
  }
  if ((rv = listen_http(listen_at))) {
    fprintf(stderr, "s1-frontend: cannot listen on %s: %s\n", listen_at, strerror(-rv));
    return 1;
  }
  fprintf(stderr, "s1-frontend: %s://%s, pool %s, queue %ld, body limit %ld, timeout %ld ms%s%s\n",
          tls_cert ? "https" : "http", listen_at, pool_url, queue, max_body, timeout_ms,
          g.sec.token ? ", bearer token required" : "",
          g.sec.n_origins ? ", cross-origin allowed for --allow-origin" : "");
  if (!g.listen_loopback && !g.sec.token)
    fprintf(stderr, "s1-frontend: warning: %s is beyond loopback and no --auth-token-file is "
            "set: anyone who reaches it may use the service\n", listen_at);
  while ((fe_http1_before_run(), h2o_evloop_run(g.ctx.loop, 100) == 0) || errno == EINTR) {
    if (g.routes.draining && fe_pool_idle(&g.pool))
      break;
  }
  /* let the last answers leave */
  for (int i = 0; i < 20; i++) {
    fe_http1_before_run();
    h2o_evloop_run(g.ctx.loop, 10);
  }
  fprintf(stderr, "s1-frontend: drained, exiting\n");
  fe_pool_fini(&g.pool);
  free(g.default_pool);
  fe_security_fini(&g.sec);
  if (g.accept_ctx.ssl_ctx)
    SSL_CTX_free(g.accept_ctx.ssl_ctx);
  if (lock_fd >= 0)
    close(lock_fd);
  return 0;
}
