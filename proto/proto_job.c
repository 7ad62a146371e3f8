/* Job, reply and ask messages (proto_job.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto_internal.h"
#include "proto_job.h"

static bool str_ok(const char *s, size_t max) {
  return !s || strlen(s) <= max;
}

int proto_job_encode(const struct proto_job *job, struct proto_bytes *ret_bytes) {
  if (!job->request_id || !str_ok(job->request_id, PROTO_MAX_ID_BYTES) ||
      !str_ok(job->model, PROTO_MAX_ID_BYTES) || job->n_body > PROTO_MAX_BODY_BYTES ||
      job->deadline_us < 0)
    return -EINVAL;
  struct wr w;
  wr_init(&w);
  wr_begin(&w, 5, PROTO_KIND_JOB);
  wr_key(&w, "job");
  msgpack_pack_uint64(&w.pk, job->job_id);
  wr_key(&w, "rid");
  wr_str(&w, job->request_id);
  wr_key(&w, "deadline_us");
  msgpack_pack_int64(&w.pk, job->deadline_us);
  wr_key(&w, "model");
  wr_str(&w, job->model);
  wr_key(&w, "body");
  wr_bin(&w, job->body, job->n_body);
  return wr_finish(&w, ret_bytes);
}

int proto_job_decode(const void *data, size_t n_bytes, struct proto_job *ret,
                     struct cm_diag *diag) {
  msgpack_unpacked up;
  int r = rd_message(data, n_bytes, PROTO_KIND_JOB, &up, diag);
  if (r)
    return r;
  struct proto_job j = {0};
  struct rd_field f[] = {{"job", true, NULL}, {"rid", true, NULL}, {"deadline_us", true, NULL},
                         {"model", true, NULL}, {"body", true, NULL}};
  int64_t dl = 0;
  if (!(r = rd_map(&up.data, f, 5, true, "job", diag)) &&
      !(r = rd_u64(f[0].val, UINT64_MAX, "job.job", &j.job_id, diag)) &&
      !(r = rd_str(f[1].val, PROTO_MAX_ID_BYTES, false, "job.rid", &j.request_id, diag)) &&
      !(r = rd_i64(f[2].val, 0, INT64_MAX, "job.deadline_us", &dl, diag)) &&
      !(r = rd_str(f[3].val, PROTO_MAX_ID_BYTES, true, "job.model", &j.model, diag)))
    r = rd_bin(f[4].val, PROTO_MAX_BODY_BYTES, "job.body", &j.body, &j.n_body, diag);
  msgpack_unpacked_destroy(&up);
  if (r) {
    proto_job_fini(&j);
    return r;
  }
  j.deadline_us = dl;
  *ret = j;
  return 0;
}

void proto_job_fini(struct proto_job *job) {
  if (!job)
    return;
  free(job->request_id);
  free(job->model);
  free(job->body);
  memset(job, 0, sizeof(*job));
}

static int reply_check(const struct proto_reply *rp) {
  if (rp->status < 100 || rp->status > 599 || !str_ok(rp->error_type, PROTO_MAX_ID_BYTES) ||
      !str_ok(rp->model_revision, PROTO_MAX_ID_BYTES) ||
      !str_ok(rp->numerics, PROTO_MAX_ID_BYTES) || rp->n_body > PROTO_MAX_BODY_BYTES)
    return -EINVAL;
  return 0;
}

static void reply_pack(struct wr *w, const struct proto_reply *rp) {
  msgpack_pack_map(&w->pk, 9);
  wr_key(w, "job");
  msgpack_pack_uint64(&w->pk, rp->job_id);
  wr_key(w, "status");
  msgpack_pack_int32(&w->pk, rp->status);
  wr_key(w, "etype");
  wr_str(w, rp->error_type);
  wr_key(w, "body");
  wr_bin(w, rp->body, rp->n_body);
  wr_key(w, "revision");
  wr_str(w, rp->model_revision);
  wr_key(w, "t");
  const struct proto_timings *t = &rp->timings;
  const int64_t tv[PROTO_REPLY_TIMINGS] = {t->queue_us,    t->preprocess_us, t->execute_us,
                                           t->finish_us,   t->ex_queue_us,   t->vision_us,
                                           t->prefix_us,   t->rows_us,       t->heads_us,
                                           t->wait_us};
  msgpack_pack_array(&w->pk, PROTO_REPLY_TIMINGS);
  for (int i = 0; i < PROTO_REPLY_TIMINGS; i++)
    msgpack_pack_int64(&w->pk, tv[i]);
  wr_key(w, "tokens");
  msgpack_pack_uint64(&w->pk, rp->tokens);
  wr_key(w, "decisions");
  msgpack_pack_uint64(&w->pk, rp->decisions);
  wr_key(w, "numerics");
  wr_str(w, rp->numerics);
}

static int reply_read(const msgpack_object *o, struct proto_reply *ret, struct cm_diag *diag) {
  struct proto_reply rp = {0};
  struct rd_field f[] = {
      {"job", true, NULL},    {"status", true, NULL},    {"etype", true, NULL},
      {"body", true, NULL},   {"revision", true, NULL},  {"t", true, NULL},
      {"tokens", true, NULL}, {"decisions", true, NULL}, {"numerics", true, NULL}};
  const msgpack_object_array *t = NULL;
  int64_t st = 0, tv[PROTO_REPLY_TIMINGS] = {0};
  int r;
  if (!(r = rd_map(o, f, 9, false, "reply", diag)) &&
      !(r = rd_str(f[8].val, PROTO_MAX_ID_BYTES, true, "reply.numerics", &rp.numerics, diag)) &&
      !(r = rd_u64(f[0].val, UINT64_MAX, "reply.job", &rp.job_id, diag)) &&
      !(r = rd_i64(f[1].val, 100, 599, "reply.status", &st, diag)) &&
      !(r = rd_str(f[2].val, PROTO_MAX_ID_BYTES, true, "reply.etype", &rp.error_type, diag)) &&
      !(r = rd_bin(f[3].val, PROTO_MAX_BODY_BYTES, "reply.body", &rp.body, &rp.n_body, diag)) &&
      !(r = rd_str(f[4].val, PROTO_MAX_ID_BYTES, true, "reply.revision", &rp.model_revision,
                   diag)) &&
      !(r = rd_array(f[5].val, PROTO_REPLY_TIMINGS, "reply.t", &t, diag)) &&
      !(r = t->size == PROTO_REPLY_TIMINGS
                ? 0
                : cm_diag_set(diag, -CM_EFORMAT, "reply.t: needs %d timings",
                              PROTO_REPLY_TIMINGS)) &&
      !(r = rd_u64(f[6].val, UINT64_MAX, "reply.tokens", &rp.tokens, diag)) &&
      !(r = rd_u64(f[7].val, UINT64_MAX, "reply.decisions", &rp.decisions, diag))) {
    for (int i = 0; i < PROTO_REPLY_TIMINGS && !r; i++)
      r = rd_i64(&t->ptr[i], 0, INT64_MAX / 4, "reply.t[]", &tv[i], diag);
  }
  if (!r && st != 200 && !rp.error_type)
    r = cm_diag_set(diag, -CM_EFORMAT, "reply.etype: required for status %lld", (long long)st);
  if (r) {
    proto_reply_fini(&rp);
    return r;
  }
  rp.status = (int)st;
  rp.timings = (struct proto_timings){tv[0], tv[1], tv[2], tv[3], tv[4],
                                      tv[5], tv[6], tv[7], tv[8], tv[9]};
  *ret = rp;
  return 0;
}

void proto_reply_fini(struct proto_reply *reply) {
  if (!reply)
    return;
  free(reply->error_type);
  free(reply->body);
  free(reply->model_revision);
  free(reply->numerics);
  memset(reply, 0, sizeof(*reply));
}

int proto_ask_encode(const struct proto_ask *ask, struct proto_bytes *ret_bytes) {
  if (!ask->worker || !str_ok(ask->worker, PROTO_MAX_ID_BYTES) ||
      (ask->has_reply && reply_check(&ask->reply)))
    return -EINVAL;
  struct wr w;
  wr_init(&w);
  wr_begin(&w, 3, PROTO_KIND_ASK);
  wr_key(&w, "worker");
  wr_str(&w, ask->worker);
  wr_key(&w, "last");
  if (ask->last)
    msgpack_pack_true(&w.pk);
  else
    msgpack_pack_false(&w.pk);
  wr_key(&w, "reply");
  if (ask->has_reply && reply_check(&ask->reply) == 0)
    reply_pack(&w, &ask->reply);
  else
    msgpack_pack_nil(&w.pk);
  return wr_finish(&w, ret_bytes);
}

int proto_ask_decode(const void *data, size_t n_bytes, struct proto_ask *ret,
                     struct cm_diag *diag) {
  msgpack_unpacked up;
  int r = rd_message(data, n_bytes, PROTO_KIND_ASK, &up, diag);
  if (r)
    return r;
  struct proto_ask a = {0};
  struct rd_field f[] = {{"worker", true, NULL}, {"last", true, NULL}, {"reply", true, NULL}};
  if (!(r = rd_map(&up.data, f, 3, true, "ask", diag)) &&
      !(r = rd_str(f[0].val, PROTO_MAX_ID_BYTES, false, "ask.worker", &a.worker, diag))) {
    if (f[1].val->type != MSGPACK_OBJECT_BOOLEAN)
      r = cm_diag_set(diag, -CM_EFORMAT, "ask.last: not a boolean");
    else
      a.last = f[1].val->via.boolean;
  }
  if (!r && f[2].val->type != MSGPACK_OBJECT_NIL) {
    r = reply_read(f[2].val, &a.reply, diag);
    a.has_reply = !r;
  }
  msgpack_unpacked_destroy(&up);
  if (r) {
    proto_ask_fini(&a);
    return r;
  }
  *ret = a;
  return 0;
}

void proto_ask_fini(struct proto_ask *ask) {
  if (!ask)
    return;
  free(ask->worker);
  proto_reply_fini(&ask->reply);
  memset(ask, 0, sizeof(*ask));
}
