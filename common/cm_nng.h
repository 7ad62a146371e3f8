/* nng helpers shared by the processes that listen (s1-frontend's credit pool, s1-executor). */
#ifndef CM_NNG_H
#define CM_NNG_H

#include <nng/nng.h>

/* nng_listen on `url`, an ipc socket file made 0600 before it accepts (its directory is private
 * already: cm_ipc_check, cm_runtime.h). Returns 0 or nng's error code (nng_strerror). */
int cm_listen_private(nng_socket sock, const char *url);

#endif
