/* Status (preprocessor → frontend), its ACK (frontend → preprocessor) and health (executor →
 * preprocessor) messages (proto_status.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto_internal.h"
#include "proto_status.h"

_Static_assert(sizeof(struct proto_exec_stats) == PROTO_EXEC_STATS * sizeof(uint64_t),
               "proto_exec_stats is an array of PROTO_EXEC_STATS counters");

static const char *const state_names[PROTO_STATE_COUNT] = {"starting", "ready", "unavailable",
                                                            "draining"};

const char *proto_state_name(enum proto_state s) {
  return (unsigned)s < PROTO_STATE_COUNT ? state_names[s] : "?";
}

static bool str_ok(const char *s, size_t max) {
  return !s || strlen(s) <= max;
}

static void wr_stats(struct wr *w, const struct proto_exec_stats *st) {
  const uint64_t *v = (const uint64_t *)st;
  msgpack_pack_array(&w->pk, PROTO_EXEC_STATS);
  for (int i = 0; i < PROTO_EXEC_STATS; i++)
    msgpack_pack_uint64(&w->pk, v[i]);
}

static int rd_stats(const msgpack_object *o, const char *where, struct proto_exec_stats *ret,
                    struct cm_diag *diag) {
  const msgpack_object_array *a = NULL;
  uint64_t v[PROTO_EXEC_STATS];
  int r = rd_array(o, PROTO_EXEC_STATS, where, &a, diag);
  if (!r && a->size != PROTO_EXEC_STATS)
    r = cm_diag_set(diag, -CM_EFORMAT, "%s: needs %d counters", where, PROTO_EXEC_STATS);
  for (uint32_t i = 0; !r && i < PROTO_EXEC_STATS; i++)
    r = rd_u64(&a->ptr[i], UINT64_MAX, where, &v[i], diag);
  if (!r)
    memcpy(ret, v, sizeof(v));
  return r;
}

int proto_status_encode(const struct proto_status *s, struct proto_bytes *ret_bytes) {
  if (!s->worker || !str_ok(s->worker, PROTO_MAX_ID_BYTES) ||
      !str_ok(s->reason, PROTO_MAX_TEXT_BYTES) || (unsigned)s->state >= PROTO_STATE_COUNT ||
      s->n_models > PROTO_MAX_MODELS || s->n_executors > PROTO_MAX_EXECUTORS)
    return -EINVAL;
  for (uint32_t i = 0; i < s->n_executors; i++)
    if (!s->executors[i].instance || !str_ok(s->executors[i].instance, PROTO_MAX_ID_BYTES))
      return -EINVAL;
  for (uint32_t i = 0; i < s->n_models; i++)
    if (!s->models[i].id || !str_ok(s->models[i].id, PROTO_MAX_ID_BYTES) ||
        !str_ok(s->models[i].revision, PROTO_MAX_ID_BYTES) || !s->models[i].describe ||
        !str_ok(s->models[i].describe, PROTO_MAX_TEXT_BYTES) ||
        s->models[i].executors_ready > s->executors_total)
      return -EINVAL;
  struct wr w;
  wr_init(&w);
  wr_begin(&w, 8, PROTO_KIND_STATUS);
  wr_key(&w, "worker");
  wr_str(&w, s->worker);
  wr_key(&w, "state");
  msgpack_pack_uint32(&w.pk, (uint32_t)s->state);
  wr_key(&w, "reason");
  wr_str(&w, s->reason);
  wr_key(&w, "ex_total");
  msgpack_pack_uint32(&w.pk, s->executors_total);
  wr_key(&w, "ex_ready");
  msgpack_pack_uint32(&w.pk, s->executors_ready);
  wr_key(&w, "credits");
  msgpack_pack_uint32(&w.pk, s->credits);
  wr_key(&w, "models");
  msgpack_pack_array(&w.pk, s->n_models);
  for (uint32_t i = 0; i < s->n_models; i++) {
    msgpack_pack_array(&w.pk, 4);
    wr_str(&w, s->models[i].id);
    wr_str(&w, s->models[i].revision);
    wr_str(&w, s->models[i].describe);
    msgpack_pack_uint32(&w.pk, s->models[i].executors_ready);
  }
  wr_key(&w, "executors");
  msgpack_pack_array(&w.pk, s->n_executors);
  for (uint32_t i = 0; i < s->n_executors; i++) {
    msgpack_pack_array(&w.pk, 2);
    wr_str(&w, s->executors[i].instance);
    wr_stats(&w, &s->executors[i].stats);
  }
  return wr_finish(&w, ret_bytes);
}

int proto_status_decode(const void *data, size_t n_bytes, struct proto_status *ret,
                        struct cm_diag *diag) {
  msgpack_unpacked up;
  int r = rd_message(data, n_bytes, PROTO_KIND_STATUS, &up, diag);
  if (r)
    return r;
  struct proto_status s = {0};
  struct rd_field f[] = {{"worker", true, NULL},   {"state", true, NULL},
                         {"reason", true, NULL},   {"ex_total", true, NULL},
                         {"ex_ready", true, NULL}, {"credits", true, NULL},
                         {"models", true, NULL},   {"executors", true, NULL}};
  uint64_t st = 0, tot = 0, rdy = 0, cr = 0;
  const msgpack_object_array *m = NULL, *ex = NULL;
  if (!(r = rd_map(&up.data, f, 8, true, "status", diag)) &&
      !(r = rd_str(f[0].val, PROTO_MAX_ID_BYTES, false, "status.worker", &s.worker, diag)) &&
      !(r = rd_u64(f[1].val, PROTO_STATE_COUNT - 1, "status.state", &st, diag)) &&
      !(r = rd_str(f[2].val, PROTO_MAX_TEXT_BYTES, true, "status.reason", &s.reason, diag)) &&
      !(r = rd_u64(f[3].val, 65535, "status.ex_total", &tot, diag)) &&
      !(r = rd_u64(f[4].val, tot, "status.ex_ready", &rdy, diag)) &&
      !(r = rd_u64(f[5].val, 65535, "status.credits", &cr, diag)) &&
      !(r = rd_array(f[6].val, PROTO_MAX_MODELS, "status.models", &m, diag))) {
    s.models = calloc(m->size + 1, sizeof(*s.models));
    if (!s.models)
      r = -ENOMEM;
    for (uint32_t i = 0; !r && i < m->size; i++) {
      const msgpack_object_array *e = NULL;
      struct proto_model *pm = &s.models[i];
      uint64_t ready = 0;
      s.n_models = i + 1;
      if (!(r = rd_array(&m->ptr[i], 4, "status.models[]", &e, diag)) &&
          !(r = e->size == 4 ? 0
                             : cm_diag_set(diag, -CM_EFORMAT, "status.models[%u]: needs 4", i)) &&
          !(r = rd_str(&e->ptr[0], PROTO_MAX_ID_BYTES, false, "status.models[].id", &pm->id,
                       diag)) &&
          !(r = rd_str(&e->ptr[1], PROTO_MAX_ID_BYTES, true, "status.models[].revision",
                       &pm->revision, diag)) &&
          !(r = rd_str(&e->ptr[2], PROTO_MAX_TEXT_BYTES, false, "status.models[].describe",
                       &pm->describe, diag)) &&
          !(r = rd_u64(&e->ptr[3], tot, "status.models[].ready", &ready, diag)))
        pm->executors_ready = (uint32_t)ready;
    }
  }
  if (!r && !(r = rd_array(f[7].val, PROTO_MAX_EXECUTORS, "status.executors", &ex, diag))) {
    s.executors = calloc(ex->size + 1, sizeof(*s.executors));
    if (!s.executors)
      r = -ENOMEM;
    for (uint32_t i = 0; !r && i < ex->size; i++) {
      const msgpack_object_array *e = NULL;
      struct proto_exec_report *er = &s.executors[i];
      s.n_executors = i + 1;
      if (!(r = rd_array(&ex->ptr[i], 2, "status.executors[]", &e, diag)) &&
          !(r = e->size == 2 ? 0
                             : cm_diag_set(diag, -CM_EFORMAT, "status.executors[%u]: needs 2", i)) &&
          !(r = rd_str(&e->ptr[0], PROTO_MAX_ID_BYTES, false, "status.executors[].instance",
                       &er->instance, diag)))
        r = rd_stats(&e->ptr[1], "status.executors[].stats", &er->stats, diag);
    }
  }
  msgpack_unpacked_destroy(&up);
  if (r) {
    proto_status_fini(&s);
    return r;
  }
  s.state = (enum proto_state)st;
  s.executors_total = (uint32_t)tot;
  s.executors_ready = (uint32_t)rdy;
  s.credits = (uint32_t)cr;
  *ret = s;
  return 0;
}

void proto_status_fini(struct proto_status *s) {
  if (!s)
    return;
  free(s->worker);
  free(s->reason);
  for (uint32_t i = 0; s->models && i < s->n_models; i++) {
    free(s->models[i].id);
    free(s->models[i].revision);
    free(s->models[i].describe);
  }
  free(s->models);
  for (uint32_t i = 0; s->executors && i < s->n_executors; i++)
    free(s->executors[i].instance);
  free(s->executors);
  memset(s, 0, sizeof(*s));
}

int proto_health_encode(const struct proto_health *h, struct proto_bytes *ret_bytes) {
  if ((unsigned)h->state >= PROTO_STATE_COUNT || !str_ok(h->model_id, PROTO_MAX_ID_BYTES) ||
      !str_ok(h->revision, PROTO_MAX_ID_BYTES) || !str_ok(h->reason, PROTO_MAX_TEXT_BYTES) ||
      !str_ok(h->instance, PROTO_MAX_ID_BYTES) || !str_ok(h->digest, PROTO_MAX_ID_BYTES) ||
      !str_ok(h->numerics, PROTO_MAX_ID_BYTES))
    return -EINVAL;
  struct wr w;
  wr_init(&w);
  wr_begin(&w, 9, PROTO_KIND_HEALTH_REPLY);
  wr_key(&w, "state");
  msgpack_pack_uint32(&w.pk, (uint32_t)h->state);
  wr_key(&w, "model");
  wr_str(&w, h->model_id);
  wr_key(&w, "revision");
  wr_str(&w, h->revision);
  wr_key(&w, "reason");
  wr_str(&w, h->reason);
  wr_key(&w, "programs");
  msgpack_pack_uint64(&w.pk, h->programs);
  wr_key(&w, "instance");
  wr_str(&w, h->instance);
  wr_key(&w, "stats");
  wr_stats(&w, &h->stats);
  wr_key(&w, "digest");
  wr_str(&w, h->digest);
  wr_key(&w, "numerics");
  wr_str(&w, h->numerics);
  return wr_finish(&w, ret_bytes);
}

int proto_health_decode(const void *data, size_t n_bytes, struct proto_health *ret,
                        struct cm_diag *diag) {
  msgpack_unpacked up;
  int r = rd_message(data, n_bytes, PROTO_KIND_HEALTH_REPLY, &up, diag);
  if (r)
    return r;
  struct proto_health h = {0};
  struct rd_field f[] = {{"state", true, NULL},  {"model", true, NULL}, {"revision", true, NULL},
                         {"reason", true, NULL}, {"programs", true, NULL},
                         {"instance", true, NULL}, {"stats", true, NULL},
                         {"digest", false, NULL}, /* absent: the executor cannot be routed to */
                         {"numerics", true, NULL}};
  uint64_t st = 0;
  if (!(r = rd_map(&up.data, f, 9, true, "health", diag)) &&
      !(r = rd_str(f[8].val, PROTO_MAX_ID_BYTES, true, "health.numerics", &h.numerics, diag)) &&
      !(r = rd_u64(f[0].val, PROTO_STATE_COUNT - 1, "health.state", &st, diag)) &&
      !(r = rd_str(f[1].val, PROTO_MAX_ID_BYTES, true, "health.model", &h.model_id, diag)) &&
      !(r = rd_str(f[2].val, PROTO_MAX_ID_BYTES, true, "health.revision", &h.revision, diag)) &&
      !(r = rd_str(f[3].val, PROTO_MAX_TEXT_BYTES, true, "health.reason", &h.reason, diag)) &&
      !(r = rd_u64(f[4].val, UINT64_MAX, "health.programs", &h.programs, diag)) &&
      !(r = rd_str(f[5].val, PROTO_MAX_ID_BYTES, true, "health.instance", &h.instance, diag)) &&
      !(r = rd_stats(f[6].val, "health.stats", &h.stats, diag)))
    r = f[7].val ? rd_str(f[7].val, PROTO_MAX_ID_BYTES, true, "health.digest", &h.digest, diag)
                 : 0;
  msgpack_unpacked_destroy(&up);
  if (r) {
    proto_health_fini(&h);
    return r;
  }
  h.state = (enum proto_state)st;
  *ret = h;
  return 0;
}

void proto_health_fini(struct proto_health *h) {
  if (!h)
    return;
  free(h->model_id);
  free(h->revision);
  free(h->reason);
  free(h->numerics);
  free(h->instance);
  free(h->digest);
  memset(h, 0, sizeof(*h));
}

int proto_ack_encode(const struct proto_ack *a, struct proto_bytes *ret_bytes) {
  if (a->n_cancel > PROTO_MAX_CANCEL || (a->n_cancel && !a->cancel))
    return -EINVAL;
  struct wr w;
  wr_init(&w);
  wr_begin(&w, a->n_cancel ? 1 : 0, PROTO_KIND_ACK);
  if (a->n_cancel) {
    wr_key(&w, "cancel");
    msgpack_pack_array(&w.pk, a->n_cancel);
    for (uint32_t i = 0; i < a->n_cancel; i++)
      msgpack_pack_uint64(&w.pk, a->cancel[i]);
  }
  return wr_finish(&w, ret_bytes);
}

int proto_ack_decode(const void *data, size_t n_bytes, struct proto_ack *ret,
                     struct cm_diag *diag) {
  msgpack_unpacked up;
  int r = rd_message(data, n_bytes, PROTO_KIND_ACK, &up, diag);
  if (r)
    return r;
  struct proto_ack a = {0};
  struct rd_field f[] = {{"cancel", false, NULL}};
  const msgpack_object_array *arr = NULL;
  if (!(r = rd_map(&up.data, f, 1, true, "ack", diag)) && f[0].val &&
      !(r = rd_array(f[0].val, PROTO_MAX_CANCEL, "ack.cancel", &arr, diag))) {
    if (!(a.cancel = malloc((arr->size + 1) * sizeof(*a.cancel))))
      r = -ENOMEM;
    for (uint32_t i = 0; !r && i < arr->size; i++)
      r = rd_u64(&arr->ptr[i], UINT64_MAX, "ack.cancel[]", &a.cancel[i], diag);
    a.n_cancel = arr->size;
  }
  msgpack_unpacked_destroy(&up);
  if (r) {
    proto_ack_fini(&a);
    return r;
  }
  *ret = a;
  return 0;
}

void proto_ack_fini(struct proto_ack *a) {
  if (!a)
    return;
  free(a->cancel);
  memset(a, 0, sizeof(*a));
}
