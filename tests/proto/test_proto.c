/* Unit test of the proto messages: every kind round-trips with its values; decoders refuse another
 * version, unknown / duplicate / missing keys, wrong types, truncation, trailing bytes, bad
 * structure; and the one code → HTTP mapping. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "cm_sha256.h"
#include "proto_job.h"
#include "proto_program.h"
#include "proto_status.h"

static int failures;
#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static void test_job(void) {
  char body[] = "{\"a\":\0 1}";
  struct proto_job j = {.job_id = 77, .request_id = "rid-1", .deadline_us = 1234567890123,
                        .model = NULL, .body = body, .n_body = sizeof(body) - 1};
  struct proto_bytes b = {0};
  CHECK(proto_job_encode(&j, &b) == 0);
  enum proto_kind k;
  CHECK(proto_peek(b.data, b.len, &k, NULL) == 0 && k == PROTO_KIND_JOB);
  struct proto_job d = {0};
  struct cm_diag diag = {0};
  CHECK(proto_job_decode(b.data, b.len, &d, &diag) == 0);
  CHECK(d.job_id == 77 && strcmp(d.request_id, "rid-1") == 0 && d.deadline_us == 1234567890123);
  CHECK(d.model == NULL && d.n_body == sizeof(body) - 1 && memcmp(d.body, body, d.n_body) == 0);
  proto_job_fini(&d);
  /* truncated and trailing */
  CHECK(proto_job_decode(b.data, b.len - 1, &d, &diag) == -CM_EFORMAT);
  cm_diag_fini(&diag);
  char *longer = malloc(b.len + 1);
  memcpy(longer, b.data, b.len);
  longer[b.len] = (char)0xc0;
  CHECK(proto_job_decode(longer, b.len + 1, &d, &diag) == -CM_EFORMAT);
  cm_diag_fini(&diag);
  /* another version: byte after "v" key. Layout: map, "v"(2 bytes), PROTO_VERSION */
  memcpy(longer, b.data, b.len);
  CHECK((unsigned char)longer[3] == PROTO_VERSION);
  longer[3] = PROTO_VERSION - 1; /* the version before CANCEL and the executor counters */
  CHECK(proto_job_decode(longer, b.len, &d, &diag) == -CM_EVERSION);
  CHECK(diag.msg && strstr(diag.msg, "version 3"));
  cm_diag_fini(&diag);
  longer[3] = PROTO_VERSION + 1;
  CHECK(proto_job_decode(longer, b.len, &d, &diag) == -CM_EVERSION);
  CHECK(diag.msg && strstr(diag.msg, "version 5"));
  cm_diag_fini(&diag);
  /* the wrong kind */
  CHECK(proto_ask_decode(b.data, b.len, &(struct proto_ask){0}, &diag) == -CM_EFORMAT);
  cm_diag_fini(&diag);
  free(longer);
  proto_bytes_free(&b);
  j.request_id = NULL;
  CHECK(proto_job_encode(&j, &b) == -EINVAL);
}

static void test_ask(void) {
  struct proto_ask a = {.worker = "host:1", .has_reply = true};
  a.reply = (struct proto_reply){.job_id = 5,
                                 .status = 422,
                                 .error_type = "invalid_request",
                                 .body = "{\"error\":1}",
                                 .n_body = 11,
                                 .model_revision = "abc",
                                 .timings = {1, 2, 3, 4},
                                 .tokens = 99,
                                 .decisions = 3,
                                 .numerics = "fp32"};
  struct proto_bytes b = {0};
  CHECK(proto_ask_encode(&a, &b) == 0);
  struct proto_ask d = {0};
  CHECK(proto_ask_decode(b.data, b.len, &d, NULL) == 0);
  CHECK(d.has_reply && d.reply.job_id == 5 && d.reply.status == 422);
  CHECK(strcmp(d.reply.error_type, "invalid_request") == 0 && d.reply.n_body == 11);
  CHECK(d.reply.timings.execute_us == 3 && d.reply.timings.finish_us == 4);
  CHECK(d.reply.tokens == 99 && d.reply.decisions == 3 && strcmp(d.worker, "host:1") == 0);
  CHECK(d.reply.numerics && strcmp(d.reply.numerics, "fp32") == 0);
  CHECK(!d.last);
  proto_ask_fini(&d);
  proto_bytes_free(&b);
  /* a drain's last ask: the reply and no credit */
  a.last = true;
  CHECK(proto_ask_encode(&a, &b) == 0);
  CHECK(proto_ask_decode(b.data, b.len, &d, NULL) == 0 && d.last && d.has_reply);
  CHECK(d.reply.job_id == 5);
  proto_ask_fini(&d);
  proto_bytes_free(&b);
  a.last = false;
  a.has_reply = false;
  CHECK(proto_ask_encode(&a, &b) == 0);
  CHECK(proto_ask_decode(b.data, b.len, &d, NULL) == 0 && !d.has_reply && !d.last);
  proto_ask_fini(&d);
  /* "last" must be a boolean: the byte after "last" (0xc2, false) made a positive fixint */
  char *nb = memchr(b.data, 0xc2, b.len);
  CHECK(nb && nb > b.data + 5 && memcmp(nb - 5, "\xa4last", 5) == 0);
  *nb = 0x01;
  struct cm_diag bd = {0};
  CHECK(proto_ask_decode(b.data, b.len, &d, &bd) == -CM_EFORMAT);
  CHECK(bd.msg && strstr(bd.msg, "ask.last"));
  cm_diag_fini(&bd);
  proto_bytes_free(&b);
  /* a non-200 reply without an error type is refused by the encoder */
  a.has_reply = true;
  a.reply.error_type = NULL;
  CHECK(proto_ask_encode(&a, &b) == 0);
  struct cm_diag diag = {0};
  CHECK(proto_ask_decode(b.data, b.len, &d, &diag) == -CM_EFORMAT);
  CHECK(diag.msg && strstr(diag.msg, "etype"));
  cm_diag_fini(&diag);
  proto_bytes_free(&b);
}

static void test_status(void) {
  struct proto_model m[2] = {{"Qwen/Qwen3.5-9B", "r1", "{\"id\":\"x\"}", 2}, {"b", NULL, "{}", 0}};
  struct proto_status s = {.worker = "w", .state = PROTO_STATE_READY, .executors_total = 2,
                           .executors_ready = 1, .credits = 4, .models = m, .n_models = 2};
  struct proto_bytes b = {0};
  CHECK(proto_status_encode(&s, &b) == 0);
  struct proto_status d = {0};
  CHECK(proto_status_decode(b.data, b.len, &d, NULL) == 0);
  CHECK(d.state == PROTO_STATE_READY && d.executors_total == 2 && d.executors_ready == 1);
  CHECK(d.credits == 4 && d.n_models == 2 && strcmp(d.models[0].id, "Qwen/Qwen3.5-9B") == 0);
  CHECK(d.models[1].revision == NULL && strcmp(d.models[1].describe, "{}") == 0);
  CHECK(d.models[0].executors_ready == 2 && d.models[1].executors_ready == 0);
  proto_status_fini(&d);
  proto_bytes_free(&b);
  /* a draining preprocessor, and a state past the last one */
  s.state = PROTO_STATE_DRAINING;
  s.reason = "shutting down";
  CHECK(proto_status_encode(&s, &b) == 0);
  CHECK(proto_status_decode(b.data, b.len, &d, NULL) == 0 && d.state == PROTO_STATE_DRAINING);
  CHECK(strcmp(proto_state_name(d.state), "draining") == 0 && strcmp(d.reason, "shutting down") == 0);
  proto_status_fini(&d);
  proto_bytes_free(&b);
  s.state = PROTO_STATE_COUNT;
  CHECK(proto_status_encode(&s, &b) == -EINVAL);
  s.state = PROTO_STATE_READY;
  s.reason = NULL;
  /* a model with more ready executors than the preprocessor has is refused by the encoder */
  m[1].executors_ready = 3;
  CHECK(proto_status_encode(&s, &b) == -EINVAL);
  m[1].executors_ready = 0;
  struct proto_health h = {.state = PROTO_STATE_UNAVAILABLE, .model_id = "m", .revision = "r",
                           .reason = "retired", .programs = 12, .instance = "host:42",
                           .numerics = "bf16"};
  uint64_t *hv = (uint64_t *)&h.stats;
  for (int i = 0; i < PROTO_EXEC_STATS; i++)
    hv[i] = 1000 + (uint64_t)i;
  h.stats.pool_reserved_bytes = UINT64_MAX; /* the last counter, the largest value */
  CHECK(proto_health_encode(&h, &b) == 0);
  struct proto_health hd = {0};
  CHECK(proto_health_decode(b.data, b.len, &hd, NULL) == 0);
  CHECK(hd.state == PROTO_STATE_UNAVAILABLE && hd.programs == 12 && strcmp(hd.reason, "retired") == 0);
  CHECK(hd.numerics && strcmp(hd.numerics, "bf16") == 0);
  CHECK(hd.instance && strcmp(hd.instance, "host:42") == 0);
  CHECK(hd.stats.steps == 1000 && hd.stats.cancelled == 1005 && hd.stats.prefix_hits == 1006);
  CHECK(hd.stats.vision_entries == 1018 && hd.stats.pool_reserved_bytes == UINT64_MAX);
  CHECK(memcmp(&hd.stats, &h.stats, sizeof(h.stats)) == 0);
  CHECK(hd.digest == NULL);
  proto_health_fini(&hd);
  proto_bytes_free(&b);
  char digest[] = "59a752822553da912e8301c7f68058e92b7b2b0692c4d1d6588f763c5cc9a1bb";
  h.digest = digest;
  CHECK(proto_health_encode(&h, &b) == 0);
  CHECK(proto_health_decode(b.data, b.len, &hd, NULL) == 0);
  CHECK(hd.digest && strcmp(hd.digest, digest) == 0 && strcmp(hd.instance, "host:42") == 0);
  h.digest = NULL;
  proto_health_fini(&hd);
  proto_bytes_free(&b);
  h.instance = NULL; /* unknown: nil */
  CHECK(proto_health_encode(&h, &b) == 0);
  CHECK(proto_health_decode(b.data, b.len, &hd, NULL) == 0 && hd.instance == NULL);
  proto_health_fini(&hd);
  proto_bytes_free(&b);
  /* a STATUS carrying two executors' counters */
  struct proto_exec_report er[2] = {{"a:1", h.stats}, {"b:2", {0}}};
  er[1].stats.deadline_dropped = 7;
  s.executors = er;
  s.n_executors = 2;
  CHECK(proto_status_encode(&s, &b) == 0);
  CHECK(proto_status_decode(b.data, b.len, &d, NULL) == 0 && d.n_executors == 2);
  CHECK(strcmp(d.executors[0].instance, "a:1") == 0 && strcmp(d.executors[1].instance, "b:2") == 0);
  CHECK(memcmp(&d.executors[0].stats, &h.stats, sizeof(h.stats)) == 0);
  CHECK(d.executors[1].stats.deadline_dropped == 7 && d.executors[1].stats.steps == 0);
  proto_status_fini(&d);
  proto_bytes_free(&b);
  er[1].instance = NULL; /* an executor without an id is refused by the encoder */
  CHECK(proto_status_encode(&s, &b) == -EINVAL);
  s.n_executors = PROTO_MAX_EXECUTORS + 1;
  CHECK(proto_status_encode(&s, &b) == -EINVAL);
  CHECK(proto_simple_encode(PROTO_KIND_ACK, &b) == 0);
  CHECK(proto_simple_decode(b.data, b.len, PROTO_KIND_ACK, NULL) == 0);
  CHECK(proto_simple_decode(b.data, b.len, PROTO_KIND_HEALTH, NULL) == -CM_EFORMAT);
  /* the plain ACK is an ACK without cancellations, byte for byte */
  struct proto_ack ad = {.n_cancel = 7};
  CHECK(proto_ack_decode(b.data, b.len, &ad, NULL) == 0 && ad.n_cancel == 0);
  struct proto_bytes b2 = {0};
  CHECK(proto_ack_encode(&ad, &b2) == 0 && b2.len == b.len && memcmp(b2.data, b.data, b.len) == 0);
  proto_ack_fini(&ad);
  proto_bytes_free(&b2);
  proto_bytes_free(&b);
  uint64_t ids[3] = {1, 0xffffffffffffffffull, 42};
  struct proto_ack a = {.cancel = ids, .n_cancel = 3};
  CHECK(proto_ack_encode(&a, &b) == 0);
  CHECK(proto_ack_decode(b.data, b.len, &ad, NULL) == 0 && ad.n_cancel == 3);
  CHECK(ad.cancel[0] == 1 && ad.cancel[1] == ids[1] && ad.cancel[2] == 42);
  proto_ack_fini(&ad);
  /* an ACK that cancels something is not a plain ACK */
  struct cm_diag diag = {0};
  CHECK(proto_simple_decode(b.data, b.len, PROTO_KIND_ACK, &diag) == -CM_EFORMAT);
  CHECK(diag.msg && strstr(diag.msg, "cancel"));
  cm_diag_fini(&diag);
  proto_bytes_free(&b);
  a.n_cancel = PROTO_MAX_CANCEL + 1;
  CHECK(proto_ack_encode(&a, &b) == -EINVAL);
  /* another kind is refused; a cancelled id that is not an unsigned integer names the field */
  s.n_executors = 0;
  CHECK(proto_status_encode(&s, &b) == 0);
  CHECK(proto_ack_decode(b.data, b.len, &ad, &diag) == -CM_EFORMAT);
  cm_diag_fini(&diag);
  proto_bytes_free(&b);
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 3);
  msgpack_pack_str_with_body(&pk, "v", 1);
  msgpack_pack_uint32(&pk, PROTO_VERSION);
  msgpack_pack_str_with_body(&pk, "k", 1);
  msgpack_pack_str_with_body(&pk, "ack", 3);
  msgpack_pack_str_with_body(&pk, "cancel", 6);
  msgpack_pack_array(&pk, 2);
  msgpack_pack_uint64(&pk, 5);
  msgpack_pack_int64(&pk, -5);
  CHECK(proto_ack_decode(sb.data, sb.size, &ad, &diag) == -CM_EFORMAT);
  CHECK(diag.msg && strstr(diag.msg, "ack.cancel[]"));
  cm_diag_fini(&diag);
  msgpack_sbuffer_destroy(&sb);
}

/* A HEALTH_REPLY written with msgpack-c directly, with n_stats counters. */
static void health_with(int n_stats, struct proto_bytes *ret) {
  msgpack_sbuffer sb;
  msgpack_packer pk;
  msgpack_sbuffer_init(&sb);
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  const char *keys[] = {"v", "k", "state", "model", "revision", "reason", "programs", "instance",
                        "stats", "numerics"};
  msgpack_pack_map(&pk, 10);
  for (int i = 0; i < 10; i++) {
    msgpack_pack_str_with_body(&pk, keys[i], strlen(keys[i]));
    if (i == 0)
      msgpack_pack_uint32(&pk, PROTO_VERSION);
    else if (i == 1)
      msgpack_pack_str_with_body(&pk, "health_reply", 12);
    else if (i == 2 || i == 6)
      msgpack_pack_uint32(&pk, 1);
    else if (i < 8 || i == 9)
      msgpack_pack_nil(&pk);
    else {
      msgpack_pack_array(&pk, (size_t)n_stats);
      for (int k = 0; k < n_stats; k++)
        msgpack_pack_uint64(&pk, (uint64_t)k);
    }
  }
  ret->len = sb.size;
  ret->data = msgpack_sbuffer_release(&sb);
}

static void test_health_stats(void) {
  struct proto_bytes b = {0};
  struct proto_health h = {0};
  struct cm_diag diag = {0};
  health_with(PROTO_EXEC_STATS, &b);
  CHECK(proto_health_decode(b.data, b.len, &h, &diag) == 0 && h.stats.step_programs == 1 &&
        h.stats.pool_reserved_bytes == PROTO_EXEC_STATS - 1);
  proto_health_fini(&h);
  proto_bytes_free(&b);
  int bad[] = {PROTO_EXEC_STATS - 1, PROTO_EXEC_STATS + 1, 0};
  for (int i = 0; i < 3; i++) {
    health_with(bad[i], &b);
    CHECK(proto_health_decode(b.data, b.len, &h, &diag) == -CM_EFORMAT);
    CHECK(diag.msg && strstr(diag.msg, "health.stats"));
    cm_diag_fini(&diag);
    proto_bytes_free(&b);
  }
}

/* SHA-256 of test_program's encoding with its version byte zeroed, taken from the growing-buffer
 * encoder (proto/ of main at 9dad424). */
#define PROGRAM_SHA256 "98bb35172f88059ed9857e82964ccf4635b7411caacf333ec41530f2da39303b"

struct into {
  uint8_t *buf;
  size_t asked;
  bool fail;
};

static void *into_alloc(void *arg, size_t n) {
  struct into *in = arg;
  in->asked = n;
  return in->fail ? NULL : (in->buf = malloc(n));
}

static void test_program(void) {
  struct proto_program p = {0};
  float *pix = calloc(16 * PROTO_PATCH_DIM, sizeof(float));
  for (int i = 0; i < 16 * PROTO_PATCH_DIM; i++)
    pix[i] = (float)i * 0.5f - 3.0f;
  int32_t grid[3] = {1, 4, 4};
  uint32_t im = 9, pre = 9, row = 9;
  CHECK(proto_program_add_image(&p, pix, 16, grid, &im) == 0 && im == 0);
  int32_t ids[6] = {1, 7, 7, 7, 7, 2};
  int32_t pos[18] = {0, 1, 1, 1, 1, 3, 0, 1, 1, 2, 2, 3, 0, 1, 2, 1, 2, 3};
  CHECK(proto_program_add_prefix(&p, ids, pos, 6, -1, &im, 1, &pre) == 0 && pre == 0);
  int32_t rid[3] = {10, 11, 12};
  CHECK(proto_program_add_row(&p, rid, NULL, 3, 0, &row) == 0 && row == 0);
  /* text positions continue one past the prefix's largest position (3) on every axis */
  CHECK(p.rows[0].pos[0] == 4 && p.rows[0].pos[2] == 6 && p.rows[0].pos[3] == 4 &&
        p.rows[0].pos[8] == 6);
  CHECK(proto_program_add_row(&p, rid, NULL, 2, -1, &row) == 0 && row == 1);
  CHECK(p.rows[1].pos[0] == 0 && p.rows[1].pos[1] == 1);
  int32_t lab[2] = {5, 6};
  CHECK(proto_program_add_readout(&p, PROTO_READOUT_HIDDEN, 0, -1, NULL, 0, NULL, NULL) == 0);
  CHECK(proto_program_add_readout(&p, PROTO_READOUT_LABEL_LOGITS, 1, 0, lab, 2, NULL, NULL) == 0);
  CHECK(proto_program_add_readout(&p, PROTO_READOUT_HEAD, 0, 2, NULL, 0, "h1", NULL) == 0);
  CHECK(proto_program_add_readout(&p, PROTO_READOUT_HEAD, 0, 2, NULL, 0, NULL, NULL) == -EINVAL);
  CHECK(proto_program_add_readout(&p, PROTO_READOUT_HIDDEN, 5, 0, NULL, 0, NULL, NULL) == -EINVAL);
  CHECK(proto_program_set_ids(&p, "model-a", "req-9") == 0);
  p.deadline_us = 42;
  struct proto_bytes b = {0};
  CHECK(proto_program_encode(&p, &b) == 0);
  /* the bytes the growing-buffer encoder gave before the exact-size one (wire unchanged), the
   * version number (byte 3: fixmap, "v", fixint) masked so that a version bump keeps them */
  uint8_t dg[CM_SHA256_BYTES];
  char hex[2 * CM_SHA256_BYTES + 1];
  uint8_t *masked = malloc(b.len);
  CHECK(masked && b.len > 4 && (uint8_t)b.data[0] == 0x89 && (uint8_t)b.data[1] == 0xa1 &&
        b.data[2] == 'v' && (uint8_t)b.data[3] == PROTO_VERSION);
  memcpy(masked, b.data, b.len);
  masked[3] = 0;
  CHECK(cm_sha256_buf(masked, b.len, dg) == 0);
  free(masked);
  for (int i = 0; i < CM_SHA256_BYTES; i++)
    snprintf(hex + 2 * i, 3, "%02x", dg[i]);
  if (strcmp(hex, PROGRAM_SHA256) != 0)
    fprintf(stderr, "program bytes: SHA-256 %s (%zu bytes), want %s\n", hex, b.len, PROGRAM_SHA256);
  CHECK(strcmp(hex, PROGRAM_SHA256) == 0);
  /* into the caller's memory: the same bytes; a failed allocation is -ENOMEM */
  struct into in = {0};
  size_t n_into = 0;
  CHECK(proto_program_encode_into(&p, into_alloc, &in, &n_into) == 0 && n_into == b.len &&
        in.asked == b.len && memcmp(in.buf, b.data, b.len) == 0);
  free(in.buf);
  in = (struct into){.fail = true};
  CHECK(proto_program_encode_into(&p, into_alloc, &in, &n_into) == -ENOMEM);
  struct proto_program d = {0};
  struct cm_diag diag = {0};
  CHECK(proto_program_decode(b.data, b.len, &d, &diag) == 0);
  CHECK(d.n_images == 1 && d.n_prefixes == 1 && d.n_rows == 2 && d.n_readouts == 3);
  CHECK(memcmp(d.images[0].pixels, pix, 16 * PROTO_PATCH_DIM * sizeof(float)) == 0);
  CHECK(d.images[0].grid_thw[1] == 4 && d.prefixes[0].n_images == 1 && d.prefixes[0].parent == -1);
  CHECK(memcmp(d.prefixes[0].pos, pos, sizeof(pos)) == 0 && d.rows[0].prefix == 0);
  CHECK(d.readouts[1].kind == PROTO_READOUT_LABEL_LOGITS && d.readouts[1].ids[1] == 6);
  CHECK(strcmp(d.readouts[2].head, "h1") == 0 && d.readouts[0].position == -1);
  CHECK(strcmp(d.model_id, "model-a") == 0 && d.deadline_us == 42);
  proto_program_fini(&d);
  /* structural refusals */
  p.readouts[0].position = -4; /* row 0 has 3 tokens */
  CHECK(proto_program_check(&p, &diag) == -CM_EFORMAT && strstr(diag.msg, "position"));
  cm_diag_fini(&diag);
  p.readouts[0].position = -1;
  p.images[0].grid_thw[2] = 3;
  CHECK(proto_program_check(&p, &diag) == -CM_EFORMAT && strstr(diag.msg, "grid_thw"));
  cm_diag_fini(&diag);
  p.images[0].grid_thw[2] = 4;
  p.rows[1].prefix = 1;
  CHECK(proto_program_check(&p, &diag) == -CM_EFORMAT && strstr(diag.msg, "rows[1]"));
  cm_diag_fini(&diag);
  p.rows[1].prefix = -1;
  CHECK(proto_program_check(&p, NULL) == 0);
  /* corrupt one pixel-bin length byte region: truncation anywhere fails cleanly */
  for (size_t cut = 0; cut < b.len; cut += 997)
    CHECK(proto_program_decode(b.data, cut, &d, NULL) != 0);
  proto_bytes_free(&b);
  proto_program_fini(&p);
  free(pix);

  struct proto_result r = {0};
  uint32_t widths[2] = {3, 1};
  CHECK(proto_result_alloc(&r, 2, widths) == 0);
  r.outputs[0][2] = 1.5f;
  r.outputs[1][0] = -2.25f;
  r.timings.total_us = 900;
  r.numerics = strdup("bf16");
  CHECK(proto_result_encode(&r, &b) == 0);
  struct proto_result rd = {0};
  CHECK(proto_result_decode(b.data, b.len, &rd, NULL) == 0);
  CHECK(rd.status == 0 && rd.n_outputs == 2 && rd.n_floats[0] == 3 && rd.outputs[0][2] == 1.5f);
  CHECK(rd.outputs[1][0] == -2.25f && rd.timings.total_us == 900);
  CHECK(rd.numerics && strcmp(rd.numerics, "bf16") == 0);
  proto_result_fini(&rd);
  proto_bytes_free(&b);
  CHECK(proto_result_set_error(&r, -CM_EPROGRAM, "bad id") == -CM_EPROGRAM && r.n_outputs == 0);
  CHECK(proto_result_encode(&r, &b) == 0);
  CHECK(proto_result_decode(b.data, b.len, &rd, NULL) == 0);
  CHECK(rd.status == -CM_EPROGRAM && strcmp(rd.message, "bad id") == 0);
  proto_result_fini(&rd);
  proto_result_fini(&r);
  proto_bytes_free(&b);
}

static void test_cancel(void) {
  struct proto_cancel c = {.request_id = "rid-9"};
  struct proto_bytes b = {0};
  CHECK(proto_cancel_encode(&c, &b) == 0);
  enum proto_kind k;
  CHECK(proto_peek(b.data, b.len, &k, NULL) == 0 && k == PROTO_KIND_CANCEL);
  CHECK(strcmp(proto_kind_name(k), "cancel") == 0);
  struct proto_cancel d = {0};
  struct cm_diag diag = {0};
  CHECK(proto_cancel_decode(b.data, b.len, &d, &diag) == 0 && strcmp(d.request_id, "rid-9") == 0);
  proto_cancel_fini(&d);
  proto_cancel_fini(&d); /* twice: zeroed */
  CHECK(d.request_id == NULL);
  CHECK(proto_cancel_decode(b.data, b.len - 1, &d, &diag) == -CM_EFORMAT);
  cm_diag_fini(&diag);
  /* another kind's bytes, and a CANCEL read as another kind */
  CHECK(proto_simple_decode(b.data, b.len, PROTO_KIND_ACK, NULL) == -CM_EFORMAT);
  proto_bytes_free(&b);
  CHECK(proto_simple_encode(PROTO_KIND_ACK, &b) == 0);
  CHECK(proto_cancel_decode(b.data, b.len, &d, &diag) == -CM_EFORMAT);
  CHECK(diag.msg && strstr(diag.msg, "expected \"cancel\""));
  cm_diag_fini(&diag);
  proto_bytes_free(&b);
  /* encoder limits: NULL, empty, one byte over PROTO_MAX_ID_BYTES */
  char long_id[PROTO_MAX_ID_BYTES + 2];
  memset(long_id, 'a', sizeof(long_id) - 1);
  long_id[sizeof(long_id) - 1] = 0;
  CHECK(proto_cancel_encode(&(struct proto_cancel){NULL}, &b) == -EINVAL);
  CHECK(proto_cancel_encode(&(struct proto_cancel){""}, &b) == -EINVAL);
  CHECK(proto_cancel_encode(&(struct proto_cancel){long_id}, &b) == -EINVAL);
  long_id[PROTO_MAX_ID_BYTES] = 0;
  CHECK(proto_cancel_encode(&(struct proto_cancel){long_id}, &b) == 0);
  CHECK(proto_cancel_decode(b.data, b.len, &d, NULL) == 0 && strlen(d.request_id) == 256);
  proto_cancel_fini(&d);
  proto_bytes_free(&b);
  /* hand-made: {"v":2,"k":"cancel","rid":X} with X empty, nil, an integer, a NUL inside; an
   * unknown extra key; "rid" twice; "rid" missing */
  const unsigned char head[] = {0x83, 0xa1, 'v', PROTO_VERSION, 0xa1, 'k', 0xa6, 'c', 'a', 'n',
                                'c', 'e', 'l', 0xa3, 'r', 'i', 'd'};
  struct {
    const unsigned char tail[12];
    size_t n;
    const char *names;
  } bad[] = {{{0xa0}, 1, "empty"},          {{0xc0}, 1, "cancel.rid"},
             {{0x05}, 1, "cancel.rid"},     {{0xa3, 'a', 0, 'b'}, 4, "cancel.rid"},
             {{0xa1, 'a', 0xa1, 'x', 1}, 5, "unknown key"},
             {{0xa1, 'a', 0xa3, 'r', 'i', 'd', 0xa1, 'b'}, 8, "duplicate"}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    unsigned char m[64];
    memcpy(m, head, sizeof(head));
    memcpy(m + sizeof(head), bad[i].tail, bad[i].n);
    if (bad[i].n >= 5)
      m[0] = 0x84; /* one more entry */
    CHECK(proto_cancel_decode(m, sizeof(head) + bad[i].n, &d, &diag) == -CM_EFORMAT);
    CHECK(diag.msg && strstr(diag.msg, bad[i].names));
    if (!diag.msg || !strstr(diag.msg, bad[i].names))
      fprintf(stderr, "case %zu: %s\n", i, diag.msg ? diag.msg : "(none)");
    cm_diag_fini(&diag);
  }
  unsigned char ok[sizeof(head) + 2];
  memcpy(ok, head, sizeof(head));
  ok[sizeof(head)] = 0xa1, ok[sizeof(head) + 1] = 'z';
  CHECK(proto_cancel_decode(ok, sizeof(ok), &d, NULL) == 0 && strcmp(d.request_id, "z") == 0);
  proto_cancel_fini(&d);
  ok[0] = 0x82; /* the map ends before "rid": missing */
  CHECK(proto_cancel_decode(ok, sizeof(head) - 4, &d, &diag) == -CM_EFORMAT);
  CHECK(diag.msg && strstr(diag.msg, "cancel.rid: missing"));
  cm_diag_fini(&diag);
}

/* Hand-made msgpack: unknown key, duplicate key, wrong type, deep nesting, huge counts. */
static void test_refusals(void) {
  struct cm_diag diag = {0};
  struct proto_job d = {0};
  /* {"v":PROTO_VERSION,"k":"job","job":1,"rid":"a","deadline_us":0,"model":nil,"body":bin"",
   *  "x":1} */
  const unsigned char unknown[] = {0x88, 0xa1, 'v', PROTO_VERSION, 0xa1, 'k', 0xa3, 'j', 'o', 'b', 0xa3, 'j',
                                   'o', 'b', 1, 0xa3, 'r', 'i', 'd', 0xa1, 'a', 0xab, 'd', 'e',
                                   'a', 'd', 'l', 'i', 'n', 'e', '_', 'u', 's', 0, 0xa5, 'm', 'o',
                                   'd', 'e', 'l', 0xc0, 0xa4, 'b', 'o', 'd', 'y', 0xc4, 0, 0xa1,
                                   'x', 1};
  CHECK(proto_job_decode(unknown, sizeof(unknown), &d, &diag) == -CM_EFORMAT);
  CHECK(diag.msg && strstr(diag.msg, "unknown key \"x\""));
  cm_diag_fini(&diag);
  unsigned char dup[sizeof(unknown)];
  memcpy(dup, unknown, sizeof(dup));
  dup[sizeof(dup) - 2] = 'v'; /* the trailing key becomes a second "v" */
  CHECK(proto_job_decode(dup, sizeof(dup), &d, &diag) == -CM_EFORMAT);
  CHECK(diag.msg && strstr(diag.msg, "\"v\""));
  cm_diag_fini(&diag);
  /* valid bytes minus the trailing key: 7 entries */
  unsigned char ok[sizeof(unknown) - 3];
  memcpy(ok, unknown, sizeof(ok));
  ok[0] = 0x87;
  CHECK(proto_job_decode(ok, sizeof(ok), &d, &diag) == 0);
  proto_job_fini(&d);
  ok[14] = 0xc0; /* job id nil: wrong type */
  CHECK(proto_job_decode(ok, sizeof(ok), &d, &diag) == -CM_EFORMAT);
  CHECK(diag.msg && strstr(diag.msg, "job.job"));
  cm_diag_fini(&diag);
  /* an array header claiming 2^32-1 elements in 6 bytes must not allocate */
  const unsigned char huge[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0x00};
  CHECK(proto_job_decode(huge, sizeof(huge), &d, &diag) == -CM_EFORMAT);
  cm_diag_fini(&diag);
  unsigned char deep[40];
  memset(deep, 0x91, sizeof(deep));
  deep[39] = 0xc0;
  CHECK(proto_job_decode(deep, sizeof(deep), &d, &diag) == -CM_EFORMAT);
  cm_diag_fini(&diag);
  CHECK(proto_job_decode(NULL, 0, &d, &diag) == -CM_EFORMAT);
  cm_diag_fini(&diag);
}

static void test_http_mapping(void) {
  const char *t = NULL;
  CHECK(cm_error_http(-CM_EJSON, &t) == 400 && strcmp(t, "invalid_json") == 0);
  CHECK(cm_error_http(-CM_ETOOLARGE, &t) == 413 && strcmp(t, "too_large") == 0);
  CHECK(cm_error_http(-CM_EMEDIA, &t) == 415 && strcmp(t, "unsupported_media_type") == 0);
  CHECK(cm_error_http(-CM_EREQUEST, &t) == 422 && strcmp(t, "invalid_request") == 0);
  CHECK(cm_error_http(-CM_ELIMIT, &t) == 422 && strcmp(t, "invalid_request") == 0);
  CHECK(cm_error_http(-CM_EOVERLOADED, &t) == 503 && strcmp(t, "overloaded") == 0);
  CHECK(cm_error_http(-CM_ENOTREADY, &t) == 503 && strcmp(t, "not_ready") == 0);
  CHECK(cm_error_http(-CM_EUNAVAILABLE, &t) == 503 && strcmp(t, "unavailable") == 0);
  CHECK(cm_error_http(-CM_ETIMEOUT, &t) == 504 && strcmp(t, "timeout") == 0);
  CHECK(cm_error_http(-ENOMEM, &t) == 500 && strcmp(t, "internal") == 0);
  CHECK(cm_error_http(-CM_EPROGRAM, &t) == 500 && strcmp(t, "internal") == 0);
  CHECK(cm_error_http(-CM_ECANCELLED, &t) == 499 && strcmp(t, "cancelled") == 0);
  CHECK(strcmp(cm_strerror(-CM_ECANCELLED), "cancelled") == 0);
  CHECK(cm_error_http(0, &t) == 200 && t == NULL);
}

int main(void) {
  test_job();
  test_ask();
  test_status();
  test_program();
  test_cancel();
  test_health_stats();
  test_refusals();
  test_http_mapping();
  if (failures)
    fprintf(stderr, "%d failures\n", failures);
  return failures ? 1 : 0;
}
