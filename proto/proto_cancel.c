/* CANCEL (proto_program.h): one request id, the only field. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto_internal.h"
#include "proto_program.h"

int proto_cancel_encode(const struct proto_cancel *c, struct proto_bytes *ret_bytes) {
  if (!c->request_id || !c->request_id[0] || strlen(c->request_id) > PROTO_MAX_ID_BYTES)
    return -EINVAL;
  struct wr w;
  wr_init(&w);
  wr_begin(&w, 1, PROTO_KIND_CANCEL);
  wr_key(&w, "rid");
  wr_str(&w, c->request_id);
  return wr_finish(&w, ret_bytes);
}

int proto_cancel_decode(const void *data, size_t n_bytes, struct proto_cancel *ret,
                        struct cm_diag *diag) {
  msgpack_unpacked up;
  int r = rd_message(data, n_bytes, PROTO_KIND_CANCEL, &up, diag);
  if (r)
    return r;
  struct rd_field f[] = {{"rid", true, NULL}};
  char *rid = NULL;
  if (!(r = rd_map(&up.data, f, 1, true, "cancel", diag)) &&
      !(r = rd_str(f[0].val, PROTO_MAX_ID_BYTES, false, "cancel.rid", &rid, diag)) && !rid[0])
    r = cm_diag_set(diag, -CM_EFORMAT, "cancel.rid: empty");
  msgpack_unpacked_destroy(&up);
  if (r) {
    free(rid);
    return r;
  }
  ret->request_id = rid;
  return 0;
}

void proto_cancel_fini(struct proto_cancel *c) {
  if (!c)
    return;
  free(c->request_id);
  c->request_id = NULL;
}
