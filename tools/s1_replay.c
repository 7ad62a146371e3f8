/* s1-replay: re-runs the programs an executor recorded (--record DIR) against a model directory on
 * the CPU backend and reports every result that differs, bit for bit, from the recorded one. Each
 * program runs alone by default; --batch gives them all to one scheduler at once (ex_sched.h), so
 * they share batches as under load (--repeat K submits them K times, the later rounds meeting the
 * caches), and prints the scheduler's counters. Exit status 0 when every record replays
 * identically, 1 when any differs, 2 on usage or I/O. --describe runs nothing and needs no model:
 * it prints what each recorded program asks of an executor (describe_program). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cm_args.h"
#include "cm_version.h"
#include "ex_program.h"
#include "ex_record.h"
#include "ex_sched.h"

static void usage(void) {
  fprintf(stderr,
          "usage: s1-replay RECORD_DIR --model DIR [--numerics fp32|bf16] [--max-seqs N]\n"
          "                 [--batch [--repeat K] [--max-batch-tokens N] [--prefix-cache-bytes B]\n"
          "                  [--vision-cache-bytes B] [--order] [--steps]]\n"
          "       s1-replay RECORD_DIR --describe\n"
          "  --numerics  the mode the executor served (default: the directory's);\n"
          "              --bf16-rounding is --numerics bf16\n"
          "  --batch   every program to one scheduler at once (default: each alone); B: bytes,\n"
          "            or with K, M, G. Both caches are off unless given (s1-executor's defaults\n"
          "            are --prefix-cache-bytes 1G --vision-cache-bytes 256M: pass them to replay\n"
          "            what a default executor did)\n"
          "  --order   print each program as it finishes: its record, status and the steps it\n"
          "            took part in\n"
          "  --steps   print one line per scheduler step: what it ran (programs, images,\n"
          "            pieces, rows, tokens, readouts) and where its time went (µs)\n"
          "  --describe  run nothing (no --model): one line per record, the work its program\n"
          "            asks for: images, patches, merged (patches/4), patch_pairs (sum of\n"
          "            patches^2 per image), prefixes, prefix_tokens, rows, row_tokens, launched\n"
          "            (prefix + row tokens), seq_tokens (each row's whole sequence: chain +\n"
          "            own), pairs (causal query-key pairs over each piece's context), hidden,\n"
          "            label_ids, logprob_positions (full-vocabulary rows of TOKEN_LOGPROB\n"
          "            readouts), heads (HEAD readouts; a group head's own LM log-probs, as\n"
          "            OmniJev's features, are inside it)\n");
}

/* A count of at most 2^40 for option `opt`, or a message naming it. */
static bool count_arg(const char *opt, const char *s, size_t *ret) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || !*s || *end || *s == '-' || v > (1ull << 40)) {
    fprintf(stderr, "s1-replay: --%s \"%s\": not a count\n", opt, s);
    return false;
  }
  *ret = (size_t)v;
  return true;
}

/* A byte count (digits, optionally K, M or G: cm_args_bytes) for option `opt`. */
static bool bytes_arg(const char *opt, const char *s, size_t *ret) {
  if (cm_args_bytes(s, ret) == 0)
    return true;
  fprintf(stderr, "s1-replay: --%s \"%s\": not a byte count (digits, optionally K, M or G)\n",
          opt, s);
  return false;
}

struct record {
  uint64_t seq;               /* record number */
  char *pb, *rb;              /* program and result bytes */
  size_t pn, rn;
  struct proto_program p;     /* decoded program (deadline cleared) */
  struct proto_result want;   /* recorded result */
  int decode;                 /* 0, or why the record cannot run: its program or result unreadable */
  char *why;                  /* that reason (heap), or NULL */
  bool skip;                  /* recorded an outcome of its moment (replayable_status) */
};

/* Statuses that depend on the moment, not the program: a deadline, a cancel, a full or retired
 * executor. A replay runs without deadlines on an idle runner, so it cannot reproduce them. */
static bool replayable_status(int status) {
  return status != -CM_ETIMEOUT && status != -CM_ECANCELLED && status != -CM_EOVERLOADED &&
         status != -CM_EUNAVAILABLE;
}

/* Compares a replayed result with the recorded one; prints and returns false when they differ. */
static bool same(const struct record *x, const struct proto_result *got, int round) {
  const struct proto_result *want = &x->want;
  const char *why = NULL;
  char buf[640];
  if (got->status != want->status) {
    snprintf(buf, sizeof(buf), "status %d (%s), recorded %d%s%s%s", got->status,
             got->message ? got->message : cm_strerror(got->status), want->status,
             want->message ? " (" : "", want->message ? want->message : "",
             want->message ? ")" : "");
    why = buf;
  } else if (got->n_outputs != want->n_outputs) {
    why = "readout count differs";
  } else if (want->numerics && (!got->numerics || strcmp(got->numerics, want->numerics) != 0)) {
    snprintf(buf, sizeof(buf), "numerics %s, recorded %s (pass --numerics %s)",
             got->numerics ? got->numerics : "none", want->numerics, want->numerics);
    why = buf;
  }
  for (uint32_t k = 0; !why && k < got->n_outputs; k++) {
    if (got->n_floats[k] != want->n_floats[k]) {
      snprintf(buf, sizeof(buf), "readout %u: %u floats, recorded %u", k, got->n_floats[k],
               want->n_floats[k]);
      why = buf;
    }
    for (uint32_t j = 0; !why && j < got->n_floats[k]; j++)
      if (memcmp(&got->outputs[k][j], &want->outputs[k][j], sizeof(float)) != 0) {
        snprintf(buf, sizeof(buf), "readout %u[%u]: %.9g, recorded %.9g", k, j,
                 (double)got->outputs[k][j], (double)want->outputs[k][j]);
        why = buf;
      }
  }
  if (why)
    printf("record %08llu (request %s, round %d): DIFFERS: %s\n", (unsigned long long)x->seq,
           x->p.request_id ? x->p.request_id : "?", round, why);
  return !why;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Query-key pairs of a causal piece of n new tokens after c tokens of context: sum over its
 * tokens of the keys each one reads, n·c + n(n+1)/2. */
static uint64_t causal_pairs(uint64_t c, uint64_t n) { return n * c + n * (n + 1) / 2; }

/* One line "record SEQ request=ID key=value ..." of the work program p asks for, model-free:
 *   images, patches (Σ t·h·w), merged (patches / 4: the rows the tower hands the backbone),
 *   patch_pairs (Σ patches² per image: the tower attends within an image),
 *   prefixes, prefix_tokens, rows, row_tokens, launched (prefix_tokens + row_tokens: what the
 *   backbone runs), seq_tokens (Σ over rows of its chain + its own tokens: what one forward per
 *   row's whole sequence would run, the reference's count for Open-Jev and JEMM),
 *   pairs (causal query-key pairs of every prefix piece and row over its context),
 *   readouts by kind (hidden, label_ids: LM-head rows of LABEL_LOGITS, logprob_positions: distinct
 *   (row, position) pairs of TOKEN_LOGPROB, each a full-vocabulary LM-head row; heads). */
static void describe_program(uint64_t seq, const struct proto_program *p) {
  uint64_t patches = 0, patch_pairs = 0, prefix_tokens = 0, row_tokens = 0, seq_tokens = 0;
  uint64_t pairs = 0, hidden = 0, label_ids = 0, logprob_positions = 0, heads = 0;
  size_t n_lp = 0;
  for (uint32_t i = 0; i < p->n_images; i++) {
    patches += p->images[i].n_patches;
    patch_pairs += (uint64_t)p->images[i].n_patches * p->images[i].n_patches;
  }
  /* each prefix's whole chain in one pass: a parent precedes its children (proto_program_decode
   * checks it), so chain[i] = chain[parent] + its own tokens */
  uint64_t *chain = p->n_prefixes ? malloc(p->n_prefixes * sizeof *chain) : NULL;
  if (p->n_prefixes && !chain) {
    printf("record %08llu: out of memory\n", (unsigned long long)seq);
    return;
  }
  for (uint32_t i = 0; i < p->n_prefixes; i++) {
    int32_t par = p->prefixes[i].parent;
    uint64_t c = par >= 0 && (uint32_t)par < i ? chain[par] : 0;
    chain[i] = c + p->prefixes[i].n_tokens;
    prefix_tokens += p->prefixes[i].n_tokens;
    pairs += causal_pairs(c, p->prefixes[i].n_tokens);
  }
  for (uint32_t i = 0; i < p->n_rows; i++) {
    int32_t pr = p->rows[i].prefix;
    uint64_t c = pr >= 0 && (uint32_t)pr < p->n_prefixes ? chain[pr] : 0;
    row_tokens += p->rows[i].n_tokens;
    seq_tokens += c + p->rows[i].n_tokens;
    pairs += causal_pairs(c, p->rows[i].n_tokens);
  }
  free(chain);
  for (uint32_t i = 0; i < p->n_readouts; i++) {
    const struct proto_readout *r = &p->readouts[i];
    switch (r->kind) {
    case PROTO_READOUT_HIDDEN: hidden++; break;
    case PROTO_READOUT_LABEL_LOGITS: label_ids += r->n_ids; break;
    case PROTO_READOUT_HEAD: heads++; break;
    case PROTO_READOUT_TOKEN_LOGPROB: n_lp++; break;
    default: break;
    }
  }
  /* one full-vocabulary row per distinct (row, position), however many targets read it */
  uint64_t *lp = n_lp ? malloc(n_lp * sizeof *lp) : NULL;
  if (n_lp && !lp) {
    printf("record %08llu: out of memory\n", (unsigned long long)seq);
    return;
  }
  size_t k = 0;
  for (uint32_t i = 0; i < p->n_readouts; i++)
    if (p->readouts[i].kind == PROTO_READOUT_TOKEN_LOGPROB)
      lp[k++] = (uint64_t)p->readouts[i].row << 32 | (uint32_t)p->readouts[i].position;
  if (n_lp)
    qsort(lp, n_lp, sizeof *lp, cmp_u64);
  for (size_t i = 0; i < n_lp; i++)
    logprob_positions += i == 0 || lp[i] != lp[i - 1];
  free(lp);
  printf("record %08llu request=%s images=%u patches=%llu merged=%llu patch_pairs=%llu "
         "prefixes=%u prefix_tokens=%llu rows=%u row_tokens=%llu launched=%llu seq_tokens=%llu "
         "pairs=%llu hidden=%llu label_ids=%llu logprob_positions=%llu heads=%llu\n",
         (unsigned long long)seq, p->request_id ? p->request_id : "?", p->n_images,
         (unsigned long long)patches, (unsigned long long)(patches / 4),
         (unsigned long long)patch_pairs, p->n_prefixes, (unsigned long long)prefix_tokens,
         p->n_rows, (unsigned long long)row_tokens,
         (unsigned long long)(prefix_tokens + row_tokens), (unsigned long long)seq_tokens,
         (unsigned long long)pairs, (unsigned long long)hidden, (unsigned long long)label_ids,
         (unsigned long long)logprob_positions, (unsigned long long)heads);
}

/* --describe: each record's program read, decoded and described in turn (one in memory at a
 * time; the result files are not read). Returns 0, 1 when a program is unreadable, 2 when DIR
 * cannot be listed or holds no record. */
static int describe_dir(const char *rec) {
  struct cm_diag diag = {0};
  uint64_t *seqs = NULL;
  size_t n = 0, bad = 0;
  if (ex_record_list(rec, &seqs, &n, &diag)) {
    fprintf(stderr, "s1-replay: %s\n", diag.msg ? diag.msg : "cannot list");
    cm_diag_fini(&diag);
    return 2;
  }
  if (!n) {
    fprintf(stderr, "s1-replay: %s holds no record (NNNNNNNN.program.msgpack and "
            ".result.msgpack files of s1-executor --record)\n", rec);
    free(seqs);
    return 2;
  }
  for (size_t i = 0; i < n; i++) {
    char *pb = NULL;
    size_t pn = 0;
    struct proto_program p = {0};
    if (ex_record_read(rec, seqs[i], &pb, &pn, NULL, NULL, &diag) ||
        proto_program_decode(pb, pn, &p, &diag)) {
      printf("record %08llu: unreadable program: %s\n", (unsigned long long)seqs[i],
             diag.msg ? diag.msg : cm_strerror(diag.code));
      bad++;
    } else {
      describe_program(seqs[i], &p);
    }
    cm_diag_fini(&diag);
    proto_program_fini(&p);
    free(pb);
  }
  printf("s1-replay: %zu records described, %zu unreadable\n", n, bad);
  free(seqs);
  return bad ? 1 : 0;
}

/* --steps: one line per scheduler step (ex_sched_step_format). */
static void print_step(void *ctx, const struct ex_sched_step_info *info) {
  (void)ctx;
  char line[512];
  ex_sched_step_format(info, line, sizeof line);
  printf("%s\n", line);
}

int main(int argc, char **argv) {
  if (cm_version_requested(argc, argv, "s1-replay"))
    return 0;
  static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                       {"bf16-rounding", no_argument, 0, 'b'},
                                       {"numerics", required_argument, 0, 'n'},
                                       {"batch", no_argument, 0, 'B'},
                                       {"repeat", required_argument, 0, 'k'},
                                       {"max-batch-tokens", required_argument, 0, 't'},
                                       {"max-seqs", required_argument, 0, 's'},
                                       {"prefix-cache-bytes", required_argument, 0, 'c'},
                                       {"vision-cache-bytes", required_argument, 0, 'v'},
                                       {"order", no_argument, 0, 'o'},
                                       {"describe", no_argument, 0, 'd'},
                                       {"steps", no_argument, 0, 'S'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  const char *model = NULL;
  struct ex_runner_options ro = {0};
  struct ex_sched_options so = {0};
  bool batch = false, ok = true, order = false, describe = false, steps = false;
  size_t repeat = 1;
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 'm': model = optarg; break;
    case 'b':
      ro.numerics = "bf16";
      break;
    case 'n':
      ro.numerics = optarg;
      break;
    case 'B': batch = true; break;
    case 'o': order = true; break;
    case 'd': describe = true; break;
    case 'S': steps = true; break;
    case 'k':
      ok = ok && count_arg("repeat", optarg, &repeat);
      if (ok && (repeat < 1 || repeat > 100)) {
        fprintf(stderr, "s1-replay: --repeat %s: 1 to 100\n", optarg);
        ok = false;
      }
      break;
    case 't': ok = ok && count_arg("max-batch-tokens", optarg, &so.max_batch_tokens); break;
    case 's':
      ok = ok && count_arg("max-seqs", optarg, &ro.engine.max_seqs);
      if (ok && !ro.engine.max_seqs) {
        fprintf(stderr, "s1-replay: --max-seqs 0: at least 1\n");
        ok = false;
      }
      break;
    case 'c': ok = ok && bytes_arg("prefix-cache-bytes", optarg, &so.prefix_cache_bytes); break;
    case 'v': ok = ok && bytes_arg("vision-cache-bytes", optarg, &so.vision_cache_bytes); break;
    case 'h': usage(); return 0;
    default: usage(); return 2;
    }
  }
  if ((!model && !describe) || optind != argc - 1 || !ok) {
    usage();
    return 2;
  }
  const char *rec = argv[optind];
  bool batch_opts = order || steps || repeat != 1 || so.max_batch_tokens ||
                    so.prefix_cache_bytes || so.vision_cache_bytes;
  if (describe && (model || batch || batch_opts || ro.numerics || ro.engine.max_seqs)) {
    fprintf(stderr, "s1-replay: --describe runs nothing: it takes RECORD_DIR alone\n");
    return 2;
  }
  if (describe)
    return describe_dir(rec);
  if (!batch && batch_opts) {
    fprintf(stderr, "s1-replay: --order, --steps, --repeat, --max-batch-tokens and the cache "
            "sizes are options of --batch\n");
    return 2;
  }
  struct cm_diag diag = {0};
  struct cm_model_dir *dir = NULL;
  struct ex_runner *runner = NULL;
  struct ex_sched *sched = NULL;
  struct record *x = NULL;
  uint64_t *seqs = NULL;
  size_t n = 0, identical = 0, differ = 0;
  int rc = 2;
  if (ex_record_list(rec, &seqs, &n, &diag) || cm_model_dir_open(model, &dir, &diag) ||
      ex_runner_new(dir, &ro, &runner, &diag)) {
    fprintf(stderr, "s1-replay: %s\n", diag.msg ? diag.msg : "cannot start");
    goto out;
  }
  if (!n) {
    fprintf(stderr, "s1-replay: %s holds no record (NNNNNNNN.program.msgpack and "
            ".result.msgpack files of s1-executor --record)\n", rec);
    goto out;
  }
  if (!(x = calloc(n + 1, sizeof(*x))))
    goto out;
  for (size_t i = 0; i < n; i++) {
    x[i].seq = seqs[i];
    const char *what = "record";
    if (!(x[i].decode = ex_record_read(rec, seqs[i], &x[i].pb, &x[i].pn, &x[i].rb, &x[i].rn,
                                       &diag))) {
      what = "result";
      if (!(x[i].decode = proto_result_decode(x[i].rb, x[i].rn, &x[i].want, &diag))) {
        what = "program";
        x[i].decode = proto_program_decode(x[i].pb, x[i].pn, &x[i].p, &diag);
      }
    }
    if (x[i].decode) {
      char buf[600];
      snprintf(buf, sizeof buf, "unreadable %s: %s", what,
               diag.msg ? diag.msg : cm_strerror(x[i].decode));
      x[i].why = strdup(buf);
    } else {
      x[i].skip = !replayable_status(x[i].want.status);
    }
    cm_diag_fini(&diag);
    x[i].p.deadline_us = 0; /* a replay is not bound by the original deadline */
  }
  for (size_t i = 0; runner && i < n; i++) /* the first record compiled for another model */
    if (!x[i].decode && x[i].p.model_id &&
        strcmp(x[i].p.model_id, ex_runner_model_id(runner)) != 0) {
      printf("s1-replay: record %08llu was compiled for model \"%s\"; --model %s is \"%s\": "
             "expect differences\n", (unsigned long long)x[i].seq, x[i].p.model_id, model,
             ex_runner_model_id(runner));
      break;
    }
  size_t skipped = 0, unreadable = 0;
  for (size_t i = 0; i < n; i++) {
    if (x[i].decode) {
      printf("record %08llu: DIFFERS: %s\n", (unsigned long long)x[i].seq, x[i].why);
      unreadable++;
    } else if (x[i].skip) {
      printf("record %08llu (request %s): skipped: it recorded %s (%s), an outcome of its moment "
             "that a replay does not reproduce\n", (unsigned long long)x[i].seq,
             x[i].p.request_id ? x[i].p.request_id : "?", cm_strerror(x[i].want.status),
             x[i].want.message ? x[i].want.message : "");
      skipped++;
    }
  }
  if (!batch) {
    for (size_t i = 0; i < n; i++) {
      if (x[i].decode || x[i].skip)
        continue;
      struct proto_result got = {0};
      ex_runner_run(runner, &x[i].p, &got, &diag);
      cm_diag_fini(&diag);
      same(&x[i], &got, 1) ? identical++ : differ++;
      proto_result_fini(&got);
    }
  } else {
    if (steps)
      so.on_step = print_step;
    if (ex_sched_new(runner, &so, &sched, &diag)) {
      fprintf(stderr, "s1-replay: %s\n", diag.msg ? diag.msg : "scheduler");
      goto out;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    for (size_t k = 0; k < repeat; k++) {
      for (size_t i = 0; i < n; i++)
        if (!x[i].decode && !x[i].skip && ex_sched_submit(sched, &x[i].p, &x[i], now))
          goto out;
      int r = 0;
      while (ex_sched_held(sched) && !(r = ex_sched_step(sched, &diag)))
        ;
      if (r)
        fprintf(stderr, "s1-replay: %s\n", diag.msg ? diag.msg : cm_strerror(r));
      cm_diag_fini(&diag);
      void *tag;
      const struct proto_program *p;
      struct proto_result got = {0};
      for (size_t done = 1; ex_sched_pop(sched, &tag, &p, &got); done++) {
        if (order)
          printf("finished %zu: record %08llu (request %s) status %d, %lld steps\n", done,
                 (unsigned long long)((struct record *)tag)->seq, p->request_id ? p->request_id : "?",
                 got.status, (long long)got.timings.steps);
        same(tag, &got, (int)k + 1) ? identical++ : differ++;
        proto_result_fini(&got);
        memset(&got, 0, sizeof(got));
      }
    }
    struct ex_sched_stats st;
    ex_sched_stats(sched, &st);
    printf("s1-replay: scheduler: %llu steps, %llu program-steps (%.2f programs per step), "
           "%llu tokens launched; prefix cache %llu hits, %llu misses, %llu evictions, "
           "%llu tokens reused; vision cache %llu hits, %llu misses\n",
           (unsigned long long)st.steps, (unsigned long long)st.step_programs,
           st.steps ? (double)st.step_programs / (double)st.steps : 0.0,
           (unsigned long long)st.step_tokens, (unsigned long long)st.prefix.hits,
           (unsigned long long)st.prefix.misses, (unsigned long long)st.prefix.evictions,
           (unsigned long long)st.prefix_tokens_reused, (unsigned long long)st.vision.hits,
           (unsigned long long)st.vision.misses);
  }
  size_t rounds = batch ? repeat : 1;
  differ += unreadable * rounds;
  printf("s1-replay: %zu records, %zu identical, %zu differ", n * rounds, identical, differ);
  if (skipped)
    printf(", %zu skipped (a deadline, cancel or overload recorded)", skipped * rounds);
  printf("\n");
  rc = differ ? 1 : 0;
out:
  cm_diag_fini(&diag);
  ex_sched_free(sched);
  for (size_t i = 0; x && i < n; i++) {
    proto_program_fini(&x[i].p);
    proto_result_fini(&x[i].want);
    free(x[i].pb), free(x[i].rb), free(x[i].why);
  }
  free(x);
  free(seqs);
  ex_runner_free(runner);
  cm_model_dir_free(dir);
  return rc;
}
