/* The framer in front of h2o's HTTP/1 reader (fe_http1.h). h2o reads a connection through the
 * socket's read callback (h2o_socket_t._cb.read, called by the event loop after each read with
 * sock->bytes_read new bytes at the end of sock->input). Each connection's callback is replaced by
 * on_read, which frames the new bytes and then calls h2o's. h2o sets its own callback again when it
 * re-arms reading (reqread_start after an answer, on_continue_sent after 100 Continue); that
 * happens inside callbacks, after the loop polled, so fe_http1_before_run re-wraps such sockets
 * before the next poll can deliver bytes. At any read, every complete request h2o has seen was
 * answered (h2o stops reading while it serves one), so when the framer refuses the request in
 * progress no other answer is pending and the refusal can be written; a refusal of a later
 * pipelined request closes the connection without one. */
#include "fe_http1.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define LINGER_MS 1000        /* after a refusal: read and drop what the client still sends, */
#define LINGER_MAX_MS 10000   /* until it pauses that long, for at most LINGER_MAX_MS in all */
#define LINGER_MAX_BYTES ((uint64_t)80 << 20) /* and at most this much (a refused body: ≤ 64 MiB) */
#define HANDSHAKE_MS 10000    /* TLS handshake limit */

struct fe_conn {
  h2o_socket_t *sock;          /* the client socket (sock->on_close.data is this struct) */
  struct fe_framer framer;     /* framing state of the bytes read so far */
  h2o_linklist_t watch;        /* in s.watch while h2o may re-arm reading with its callback */
  bool expect;                 /* keep watching through a stopped read (100 Continue pending) */
  bool has_h2o;                /* h2o's HTTP/1 connection exists (it closes the socket) */
  bool refused;                /* a refusal is being written or lingering */
  bool in_accept;              /* inside h2o_http1_accept: a close there only marks `dead` */
  bool dead;                   /* the socket closed while in_accept */
  char *answer;                /* [answer_len] refusal bytes being written (heap) */
  size_t answer_len;           /* their length */
  h2o_timeout_entry_t timer;   /* linger or TLS handshake deadline */
  uint64_t linger_end;         /* h2o loop time (ms) the linger ends at the latest */
  uint64_t drained;            /* bytes read and dropped while lingering */
};

static struct {
  h2o_accept_ctx_t *accept_ctx; /* h2o's context and hosts; ssl_ctx turns TLS on */
  fe_http1_render_fn render;    /* the refusal's bytes (fe_routes.c: the wire.md shape) */
  void *render_arg;             /* its first argument */
  h2o_socket_cb h2o_read;       /* h2o's HTTP/1 read callback (reqread_on_read) */
  h2o_linklist_t watch;         /* connections to re-wrap before the next poll */
  h2o_timeout_t linger;         /* LINGER_MS */
  h2o_timeout_t handshake;      /* HANDSHAKE_MS */
  size_t n_conns;               /* open connections */
} s;

static void on_read(h2o_socket_t *sock, const char *err);

static void watch(struct fe_conn *c, bool expect) {
  c->expect |= expect;
  if (!h2o_linklist_is_linked(&c->watch))
    h2o_linklist_insert(&s.watch, &c->watch);
}

static void on_sock_closed(void *data) {
  struct fe_conn *c = data;
  if (h2o_linklist_is_linked(&c->watch))
    h2o_linklist_unlink(&c->watch);
  if (h2o_timeout_is_linked(&c->timer))
    h2o_timeout_unlink(&c->timer);
  s.n_conns--;
  if (c->in_accept) {
    c->dead = true;
    return;
  }
  fe_framer_fini(&c->framer);
  free(c->answer);
  free(c);
}

static void close_conn(struct fe_conn *c, const char *why) {
  if (h2o_timeout_is_linked(&c->timer))
    h2o_timeout_unlink(&c->timer);
  if (c->has_h2o)
    s.h2o_read(c->sock, why); /* h2o's read error path: close_connection() */
  else
    h2o_socket_close(c->sock);
}

/* Lingering: what the client still sends (the rest of a refused body) is dropped; each read
 * restarts the LINGER_MS pause, within LINGER_MAX_MS and LINGER_MAX_BYTES in all. */
static void on_linger_read(h2o_socket_t *sock, const char *err) {
  struct fe_conn *c = sock->on_close.data;
  c->drained += sock->input->size;
  h2o_buffer_consume(&sock->input, sock->input->size);
  if (err || c->drained > LINGER_MAX_BYTES ||
      h2o_now(s.accept_ctx->ctx->loop) >= c->linger_end) {
    close_conn(c, err ? err : "s1: refused");
    return;
  }
  if (h2o_timeout_is_linked(&c->timer))
    h2o_timeout_unlink(&c->timer);
  h2o_timeout_link(s.accept_ctx->ctx->loop, &s.linger, &c->timer);
}

static void on_timer(h2o_timeout_entry_t *entry) {
  struct fe_conn *c = H2O_STRUCT_FROM_MEMBER(struct fe_conn, timer, entry);
  close_conn(c, c->refused ? "s1: refused" : "s1: TLS handshake timeout");
}

static void on_answer_written(h2o_socket_t *sock, const char *err) {
  struct fe_conn *c = sock->on_close.data;
  if (err || sock->ssl) { /* TLS: h2o's close sends close_notify */
    close_conn(c, err ? err : "s1: refused");
    return;
  }
  /* lingering close: a close with unread input would reset the connection and could destroy the
   * answer before the client reads it */
  shutdown(h2o_socket_get_fd(sock), SHUT_WR);
  h2o_buffer_consume(&sock->input, sock->input->size);
  c->linger_end = h2o_now(s.accept_ctx->ctx->loop) + LINGER_MAX_MS;
  h2o_socket_read_start(sock, on_linger_read);
  h2o_timeout_link(s.accept_ctx->ctx->loop, &s.linger, &c->timer);
}

/* The framer refused: answer (when no other answer can be pending) and close. */
static void refuse(struct fe_conn *c, bool answer) {
  c->refused = true;
  if (h2o_linklist_is_linked(&c->watch))
    h2o_linklist_unlink(&c->watch);
  h2o_socket_read_stop(c->sock);
  if (answer && s.render(s.render_arg, &c->framer.refusal, &c->answer, &c->answer_len) == 0) {
    h2o_iovec_t b = h2o_iovec_init(c->answer, c->answer_len);
    h2o_socket_write(c->sock, &b, 1, on_answer_written);
    return;
  }
  close_conn(c, "s1: refused");
}

/* The framer refuses a body larger than any model accepts (h2o's max_request_entity_size, which
 * main and the pool keep at the largest model limit + 1, less one): with the answer in the error
 * shape and a lingering close, where h2o's own 413 closes at once and resets a client still
 * sending. A body within the largest limit but over its model's is the routes' 413. */
static void set_body_limit(struct fe_conn *c) {
  size_t h2o_limit = s.accept_ctx->ctx->globalconf->max_request_entity_size;
  c->framer.max_body = h2o_limit > 1 ? h2o_limit - 1 : 0;
}

static void on_read(h2o_socket_t *sock, const char *err) {
  struct fe_conn *c = sock->on_close.data;
  if (err) {
    s.h2o_read(sock, err);
    return;
  }
  size_t n = sock->bytes_read <= sock->input->size ? sock->bytes_read : sock->input->size;
  uint64_t at = c->framer.n_messages;
  set_body_limit(c);
  struct fe_framing_refusal r;
  if (fe_framer_feed(&c->framer, sock->input->bytes + sock->input->size - n, n, &r) != 0) {
    refuse(c, r.message_index == at);
    return;
  }
  if (c->framer.expect) {
    c->framer.expect = false;
    watch(c, true);
  }
  s.h2o_read(sock, NULL);
}

/* Hands the connection to h2o's HTTP/1 server, the framer in front. */
static void start_http1(struct fe_conn *c) {
  h2o_socket_t *sock = c->sock;
  if (sock->input->size) { /* TLS: application data that came with the handshake */
    struct fe_framing_refusal r;
    set_body_limit(c);
    if (fe_framer_feed(&c->framer, sock->input->bytes, sock->input->size, &r) != 0) {
      refuse(c, r.message_index == 0);
      return;
    }
  }
  c->has_h2o = true;
  c->in_accept = true;
  h2o_http1_accept(s.accept_ctx, sock, *h2o_get_timestamp(s.accept_ctx->ctx, NULL, NULL));
  c->in_accept = false;
  if (c->dead) {
    fe_framer_fini(&c->framer);
    free(c->answer);
    free(c);
    return;
  }
  if (sock->_cb.read == s.h2o_read)
    sock->_cb.read = on_read;
  else
    watch(c, false); /* h2o is serving a request that came with the handshake */
  if (c->framer.expect) {
    c->framer.expect = false;
    watch(c, true);
  }
}

static void on_handshake(h2o_socket_t *sock, const char *err) {
  struct fe_conn *c = sock->on_close.data;
  if (h2o_timeout_is_linked(&c->timer))
    h2o_timeout_unlink(&c->timer);
  if (err) {
    h2o_socket_close(sock);
    return;
  }
  start_http1(c);
}

void fe_http1_accept(h2o_socket_t *sock) {
  struct fe_conn *c = calloc(1, sizeof(*c));
  if (!c) {
    h2o_socket_close(sock);
    return;
  }
  c->sock = sock;
  fe_framer_init(&c->framer);
  c->timer.cb = on_timer;
  sock->on_close.cb = on_sock_closed;
  sock->on_close.data = c;
  s.n_conns++;
  if (s.accept_ctx->ssl_ctx) {
    h2o_timeout_link(s.accept_ctx->ctx->loop, &s.handshake, &c->timer);
    h2o_socket_ssl_handshake(sock, s.accept_ctx->ssl_ctx, NULL, on_handshake);
    return;
  }
  start_http1(c);
}

void fe_http1_before_run(void) {
  for (h2o_linklist_t *l = s.watch.next; l != &s.watch;) {
    struct fe_conn *c = H2O_STRUCT_FROM_MEMBER(struct fe_conn, watch, l);
    l = l->next;
    h2o_socket_cb cb = c->sock->_cb.read;
    if (cb == s.h2o_read) {
      c->sock->_cb.read = on_read;
      c->expect = false;
    } else if (!cb && c->expect) {
      continue; /* 100 Continue being written; h2o re-arms reading after it */
    }
    h2o_linklist_unlink(&c->watch);
  }
}

static void on_request_disposed(void *p) {
  struct fe_conn *c = *(struct fe_conn **)p;
  if (!c->refused)
    watch(c, false);
}

void fe_http1_response_started(h2o_req_t *req) {
  if (!req->conn->callbacks->get_socket)
    return;
  h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
  if (!sock || sock->on_close.cb != on_sock_closed)
    return;
  struct fe_conn **ref = h2o_mem_alloc_shared(&req->pool, sizeof(*ref), on_request_disposed);
  *ref = sock->on_close.data;
}

bool fe_http1_client_gone(h2o_req_t *req) {
  if (req->version >= 0x200 || !req->conn->callbacks->get_socket)
    return false;
  h2o_socket_t *sock = req->conn->callbacks->get_socket(req->conn);
  int fd = sock ? h2o_socket_get_fd(sock) : -1;
  if (fd < 0)
    return false;
  struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
  if (poll(&pf, 1, 0) <= 0)
    return false;
  char c;
  ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

size_t fe_http1_connections(void) {
  return s.n_conns;
}

int fe_http1_init(h2o_accept_ctx_t *accept_ctx, fe_http1_render_fn render, void *render_arg) {
  s.accept_ctx = accept_ctx;
  s.render = render;
  s.render_arg = render_arg;
  h2o_linklist_init_anchor(&s.watch);
  h2o_evloop_t *loop = accept_ctx->ctx->loop;
  h2o_timeout_init(loop, &s.linger, LINGER_MS);
  h2o_timeout_init(loop, &s.handshake, HANDSHAKE_MS);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
    return -errno;
  h2o_socket_t *probe = h2o_evloop_socket_create(loop, sv[0], 0);
  h2o_http1_accept(accept_ctx, probe, *h2o_get_timestamp(accept_ctx->ctx, NULL, NULL));
  s.h2o_read = probe->_cb.read;
  if (s.h2o_read)
    s.h2o_read(probe, "s1: startup probe"); /* h2o closes that connection */
  else
    h2o_socket_close(probe);
  close(sv[1]);
  return s.h2o_read ? 0 : -EPROTO;
}
