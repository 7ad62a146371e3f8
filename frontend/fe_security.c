/* Origin rule, bearer token and TLS context of s1-frontend (fe_security.h). */
#include "fe_security.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int fe_security_load_token(struct fe_security *sec, const char *path, struct cm_diag *diag) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return cm_diag_set(diag, -errno, "--auth-token-file %s: %s", path, strerror(errno));
  char *buf = malloc(FE_MAX_TOKEN_BYTES + 2);
  size_t n = buf ? fread(buf, 1, FE_MAX_TOKEN_BYTES + 1, f) : 0;
  fclose(f);
  if (!buf)
    return -ENOMEM;
  size_t a = 0, e = 0;
  while (a < n && (buf[a] == ' ' || buf[a] == '\t' || buf[a] == '\r' || buf[a] == '\n'))
    a++;
  e = a;
  while (e < n && buf[e] != '\n' && buf[e] != '\r')
    e++;
  while (e > a && (buf[e - 1] == ' ' || buf[e - 1] == '\t'))
    e--;
  int ok = e - a >= FE_MIN_TOKEN_BYTES && e - a <= FE_MAX_TOKEN_BYTES;
  for (size_t i = a; ok && i < e; i++)
    ok = buf[i] > 0x20 && buf[i] < 0x7f;
  if (!ok) {
    free(buf);
    return cm_diag_set(diag, -EINVAL, "--auth-token-file %s: the token must be %d to %d visible "
                       "ASCII characters on the first line", path, FE_MIN_TOKEN_BYTES,
                       FE_MAX_TOKEN_BYTES);
  }
  memmove(buf, buf + a, e - a);
  buf[e - a] = 0;
  free(sec->token);
  sec->token = buf;
  sec->token_len = e - a;
  return 0;
}

static h2o_iovec_t header(h2o_req_t *req, const h2o_token_t *token, const char *name) {
  ssize_t i = token ? h2o_find_header(&req->headers, token, -1)
                    : h2o_find_header_by_str(&req->headers, name, strlen(name), -1);
  return i >= 0 ? req->headers.entries[i].value : h2o_iovec_init(NULL, 0);
}

/* The host[:port] of an Origin value "scheme://host[:port]", or {NULL, 0} ("null", malformed). */
static h2o_iovec_t origin_authority(h2o_iovec_t o) {
  for (size_t i = 0; i + 2 < o.len; i++)
    if (o.base[i] == ':' && o.base[i + 1] == '/' && o.base[i + 2] == '/') {
      h2o_iovec_t a = h2o_iovec_init(o.base + i + 3, o.len - i - 3);
      return a.len && !memchr(a.base, '/', a.len) ? a : h2o_iovec_init(NULL, 0);
    }
  return h2o_iovec_init(NULL, 0);
}

struct fe_access fe_security_check(const struct fe_security *sec, h2o_req_t *req, bool is_health,
                                   bool is_preflight) {
  struct fe_access a = {0};
  h2o_iovec_t origin = header(req, NULL, "origin");
  if (origin.base) {
    bool allowed = false;
    for (int i = 0; i < sec->n_origins && !allowed; i++)
      allowed = strcmp(sec->origins[i], "*") == 0 ||
                (strlen(sec->origins[i]) == origin.len &&
                 strncasecmp(sec->origins[i], origin.base, origin.len) == 0);
    if (allowed) {
      a.cors = true;
    } else {
      h2o_iovec_t host = req->input.authority, oa = origin_authority(origin);
      if (!oa.base || oa.len != host.len || strncasecmp(oa.base, host.base, host.len) != 0) {
        a.status = 403;
        a.type = "forbidden";
        a.message = "Origin: cross-origin requests are disabled (s1-frontend --allow-origin "
                    "allows an origin)";
        return a;
      }
    }
  }
  if (sec->token && !is_health && !is_preflight) {
    h2o_iovec_t auth = header(req, H2O_TOKEN_AUTHORIZATION, NULL);
    static const char bearer[] = "Bearer ";
    size_t nb = sizeof(bearer) - 1;
    bool ok = auth.len == nb + sec->token_len && strncasecmp(auth.base, bearer, nb) == 0 &&
              CRYPTO_memcmp(auth.base + nb, sec->token, sec->token_len) == 0;
    if (!ok) {
      a.status = 401;
      a.type = "unauthorized";
      a.message = auth.base ? "Authorization: not the bearer token of this service"
                            : "Authorization: required (Bearer token)";
    }
  }
  return a;
}

int fe_tls_context(const char *cert_path, const char *key_path, SSL_CTX **ret_ctx,
                   struct cm_diag *diag) {
  SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
  const char *what = "context";
  if (!ctx)
    goto fail;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                               SSL_OP_CIPHER_SERVER_PREFERENCE);
  what = cert_path;
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_path) != 1)
    goto fail;
  what = key_path;
  if (SSL_CTX_use_PrivateKey_file(ctx, key_path, SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1)
    goto fail;
  *ret_ctx = ctx;
  return 0;
fail:;
  char reason[256] = "unknown";
  unsigned long e = ERR_get_error();
  if (e)
    ERR_error_string_n(e, reason, sizeof(reason));
  ERR_clear_error();
  SSL_CTX_free(ctx);
  return cm_diag_set(diag, -EINVAL, "TLS: %s: %s", what, reason);
}

void fe_security_fini(struct fe_security *sec) {
  if (!sec)
    return;
  free(sec->token);
  sec->token = NULL;
  sec->token_len = 0;
}
