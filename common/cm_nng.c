#include "cm_nng.h"

#include <string.h>

int cm_listen_private(nng_socket sock, const char *url) {
  nng_listener l;
  int rv = nng_listener_create(&l, sock, url);
  if (!rv && strncmp(url, "ipc://", 6) == 0)
    rv = nng_listener_set_int(l, NNG_OPT_IPC_PERMISSIONS, 0600);
  if (!rv)
    rv = nng_listener_start(l, 0);
  return rv;
}
