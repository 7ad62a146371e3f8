/* s1-mkmodel: writes a seeded random-weight Qwen3.5 checkpoint in Hugging Face layout (config.json,
 * model.safetensors or shards + index, tokenizer.json, preprocessor_config.json), and on request a
 * small random PEFT LoRA adapter, for tests, the demo and benchmarks. --s1-out writes the s1serve
 * model directory s1-export would make of that checkpoint instead (same weights.safetensors bytes,
 * same manifest but its "upstream" block), with one copy of the weights on disk. Output is a pure function of
 * the arguments: each block of 2^18 elements of a tensor draws from its own splitmix64 stream seeded
 * by (seed, tensor name, block), so the weights depend on neither write order, layout nor thread
 * count. It leaves out training-quality init. The oracle fixtures pin the output by SHA-256: a
 * change to any drawn value means regenerating them. --s1-out --family omnijev|open_jev|jemm
 * writes a family's whole directory in the same pass (kept adapter, random heads, option-token
 * rows, the family's manifest blocks as s1-export writes them), for real-shape benchmarks. */
#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cm_version.h"
#include "cm_model_dir.h"
#include "cm_qwen35.h"
#include "cm_safetensors.h"
#include "cm_sha256.h"
#include "export_hf.h"
#include "export_jemm.h"
#include "omnijev_export.h"
#include "open_jev_export.h"

#define SHARD_MAX_BYTES 4000000000ull /* default: above this the weights are split into shards */

/* ---- PRNG: splitmix64 (Steele, Lea, Flood 2014) + Box-Muller; plain integer arithmetic and the
 * C library's log/sqrt/cos, so the stream is the same on every platform with a correctly
 * rounded-enough libm (glibc here; the static build carries its own copy). */
struct rng {
  uint64_t s; /* splitmix64 state */
};

static uint64_t rng_next(struct rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(struct rng *r) {
  return (double)(rng_next(r) >> 11) * 0x1p-53;
}

/* Stream for one tensor (or LoRA factor): FNV-1a of name + salt, mixed with the seed. */
static struct rng rng_for(uint64_t seed, const char *name, const char *salt) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char *p = name; *p; p++)
    h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
  for (const char *p = salt; *p; p++)
    h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
  struct rng r = {seed ^ h};
  rng_next(&r);
  return r;
}

/* Fills out[n] with mean + std * N(0, 1), Box-Muller pairs (cos, sin). */
static void fill_normal(struct rng *r, double mean, double std, float *out, size_t n) {
  for (size_t i = 0; i < n; i += 2) {
    double u1 = 1.0 - rng_uniform(r), u2 = rng_uniform(r);
    double rad = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
    out[i] = (float)(mean + std * rad * cos(th));
    if (i + 1 < n)
      out[i + 1] = (float)(mean + std * rad * sin(th));
  }
}

/* ---- options and model description ----------------------------------------------------------- */

struct mk_family;

struct opts {
  const char *shape;         /* tiny | 4b | 9b | 27b */
  bool vision;               /* write the vision tower */
  bool tied;                 /* tie_word_embeddings */
  bool ratio3;               /* tiny only: linear_num_value_heads 6 */
  bool causal;               /* Qwen3_5ForCausalLM layout (flat config, model.* keys, no vision) */
  uint64_t seed;             /* PRNG seed */
  const char *tokenizer;     /* tokenizer.json to read ids from and copy */
  const char *out;           /* output folder (Hugging Face layout), or NULL */
  const char *s1_out;        /* output folder (s1serve model directory), or NULL */
  const char *adapter_out;   /* PEFT adapter folder, or NULL */
  int adapter_rank;          /* r */
  double adapter_alpha;      /* lora_alpha */
  const char *adapter_targets; /* comma-separated module names */
  bool adapter_bf16;         /* factors stored as BF16 instead of F32 */
  uint64_t shard_bytes;      /* largest shard, bytes (--max-shard-bytes; tests use small ones) */
  const char *family;        /* --s1-out: a name of the family table (qwen3_5 by default) */
  const struct mk_family *fam; /* its table entry (set once the arguments are checked) */
  bool kept_adapter;         /* --s1-out with --adapter-rank: adapter.safetensors kept unmerged */
  int head_width, ord_width; /* omnijev: OptionScorer and ordinal widths (1024, 512) */
  const char *tokenizer_config; /* the base's tokenizer_config.json (--s1-out: the tokenizer class,
                                   export_hf.h; jemm: its chat template) */
  int64_t vocab_rows;        /* > 0: the embedding rows (omnijev: the tokenizer's length) */
};

struct special_ids {
  int64_t image, video, vision_start, vision_end; /* token ids read from the tokenizer */
  int64_t n_ids;                                  /* highest id + 1 */
};

/* One tensor to write: canonical (inventory) name, name in the chosen layout, init range. */
struct gen {
  const struct cm_qwen35_tensor *t; /* inventory entry (canonical name, shape) */
  char out_name[128];               /* key in the written layout */
  uint64_t seed;                    /* model seed */
  double init_range;                /* std of linear and embedding weights */
  size_t n_bytes;                   /* BF16 bytes */
};

static bool has_suffix(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}

/* The values of elements [first, first + n) of one weight, by its canonical name (spec §10.4
 * scales), drawn from stream r. */
static void init_values(const struct gen *g, struct rng *rp, float *v, size_t n) {
  const char *name = g->t->name;
  struct rng r = *rp;
  if (has_suffix(name, ".A_log")) {
    /* A = U(0.01, 1), not HF's U(0.01, 16): with 16 the decays exp(g) = exp(-A softplus(a + dt))
     * were ~0 for most heads on the oracle (median 0.0, max 0.16 on tiny), which leaves the
     * recurrence untested; with 1 they spread over about (0.05, 1) as spec §10.4 step 4 asks. */
    for (size_t i = 0; i < n; i++)
      v[i] = (float)log(0.01 + (1.0 - 0.01) * rng_uniform(&r));
  } else if (has_suffix(name, ".dt_bias")) {
    fill_normal(&r, 1.0, 0.5, v, n);
  } else if (has_suffix(name, "linear_attn.norm.weight") || has_suffix(name, "norm1.weight") ||
             has_suffix(name, "norm2.weight") || has_suffix(name, "merger.norm.weight")) {
    fill_normal(&r, 1.0, 0.1, v, n); /* plain-weight norms: 1 + N(0, 0.1) */
  } else if (has_suffix(name, "layernorm.weight") || has_suffix(name, "q_norm.weight") ||
             has_suffix(name, "k_norm.weight") ||
             strcmp(name, "model.language_model.norm.weight") == 0 ||
             (strstr(name, "norm") && has_suffix(name, ".bias"))) {
    fill_normal(&r, 0.0, 0.1, v, n); /* zero-centred norms (1 + w) and LayerNorm biases */
  } else if (has_suffix(name, "conv1d.weight")) {
    for (size_t i = 0; i < n; i++) /* torch's Conv1d default: U(-1/sqrt(fan_in), ...), fan_in 4 */
      v[i] = (float)(rng_uniform(&r) - 0.5);
  } else {
    fill_normal(&r, 0.0, g->init_range, v, n); /* linears, biases, embeddings */
  }
}

/* Elements are drawn in fixed blocks, each from its own stream (tensor stream mixed with the block
 * number), so the values do not depend on how many threads fill them. */
#define BLOCK_ELEMS ((size_t)1 << 18)

struct fill_job {
  const struct gen *g;  /* tensor */
  unsigned char *out;   /* BF16 bytes, little-endian */
  size_t n;             /* elements */
  size_t next_block;    /* next block to take (under lock) */
  pthread_mutex_t lock; /* guards next_block */
  int rc;               /* first error */
};

static void *fill_worker(void *arg) {
  struct fill_job *job = arg;
  float *v = malloc(BLOCK_ELEMS * sizeof *v);
  if (!v) {
    pthread_mutex_lock(&job->lock);
    job->rc = -ENOMEM;
    pthread_mutex_unlock(&job->lock);
    return NULL;
  }
  for (;;) {
    pthread_mutex_lock(&job->lock);
    size_t blk = job->next_block++;
    pthread_mutex_unlock(&job->lock);
    size_t first = blk * BLOCK_ELEMS;
    if (first >= job->n)
      break;
    size_t cnt = job->n - first < BLOCK_ELEMS ? job->n - first : BLOCK_ELEMS;
    struct rng r = rng_for(job->g->seed, job->g->t->name, "");
    struct rng mix = {blk};
    r.s ^= rng_next(&mix);
    rng_next(&r);
    init_values(job->g, &r, v, cnt);
    for (size_t i = 0; i < cnt; i++) {
      uint16_t b = cm_f32_to_bf16(v[i]);
      job->out[2 * (first + i)] = (unsigned char)b;
      job->out[2 * (first + i) + 1] = (unsigned char)(b >> 8);
    }
  }
  free(v);
  return NULL;
}

static int n_threads;

static int fill_weight(void *ctx, const char *name, void *buf, size_t n_bytes) {
  (void)name;
  struct fill_job job = {.g = ctx, .out = buf, .n = n_bytes / 2};
  pthread_mutex_init(&job.lock, NULL);
  size_t n_blocks = (job.n + BLOCK_ELEMS - 1) / BLOCK_ELEMS;
  int nt = (size_t)n_threads < n_blocks ? n_threads : (int)n_blocks;
  pthread_t tid[64];
  int started = 0;
  for (int i = 1; i < nt; i++) {
    if (pthread_create(&tid[started], NULL, fill_worker, &job) == 0)
      started++;
  }
  fill_worker(&job); /* this thread works too */
  for (int i = 0; i < started; i++)
    pthread_join(tid[i], NULL);
  pthread_mutex_destroy(&job.lock);
  return job.rc;
}

/* ---- config ---------------------------------------------------------------------------------- */

static json_object *int_array(const int64_t *v, int n) {
  json_object *a = json_object_new_array();
  for (int i = 0; i < n; i++)
    json_object_array_add(a, json_object_new_int64(v[i]));
  return a;
}

#define ADD(obj, key, val) json_object_object_add(obj, key, val)
#define I64(x) json_object_new_int64(x)
#define STR(x) json_object_new_string(x)
#define BOOL(x) json_object_new_boolean(x)
#define DBL(x, s) json_object_new_double_s(x, s)

/* Builds config.json for the shape (spec §1.1-1.3, §10.1). */
static int make_config(const struct opts *o, const struct special_ids *ids, json_object **ret) {
  /* text: vocab H I L Hq Hkv D Hk Hv dk dv maxpos; vision: depth V heads F npos O */
  struct shape {
    const char *name;
    int64_t H, I, L, Hq, Hkv, D, Hk, Hv, dk, dv, maxpos;
    int64_t vdepth, V, vheads, F, npos;
    bool tied;
    const char *ir_text;
    double ir;
  } shapes[] = {
      {"tiny", 64, 96, 4, 4, 2, 64, 2, 4, 16, 24, 4096, 2, 48, 2, 96, 16, false, "0.05", 0.05},
      {"4b", 2560, 9216, 32, 16, 4, 256, 16, 32, 128, 128, 262144, 24, 1024, 16, 4096, 2304, true,
       "0.02", 0.02},
      {"9b", 4096, 12288, 32, 16, 4, 256, 16, 32, 128, 128, 262144, 27, 1152, 16, 4304, 2304, false,
       "0.02", 0.02},
      {"27b", 5120, 17408, 64, 24, 4, 256, 16, 48, 128, 128, 262144, 27, 1152, 16, 4304, 2304,
       false, "0.02", 0.02},
  };
  const struct shape *s = NULL;
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
    if (strcmp(o->shape, shapes[i].name) == 0)
      s = &shapes[i];
  if (!s) {
    fprintf(stderr, "s1-mkmodel: --shape must be tiny, 4b, 9b or 27b (got \"%s\")\n", o->shape);
    return -EINVAL;
  }
  if (o->ratio3 && strcmp(s->name, "tiny") != 0) {
    fprintf(stderr, "s1-mkmodel: --ratio3 applies to --shape tiny only (27b is ratio 3 already)\n");
    return -EINVAL;
  }
  /* Vocabulary: the spec's 248320 rows when they cover every tokenizer id, else the id count
   * rounded up to a multiple of 128. */
  int64_t vocab = ids->n_ids <= 248320 ? 248320 : (ids->n_ids + 127) / 128 * 128;
  if (o->vocab_rows > 0) /* omnijev: resized to the tokenizer with its option tokens (§11.3) */
    vocab = o->vocab_rows;
  bool tied = o->tied || s->tied;
  bool tiny = strcmp(s->name, "tiny") == 0;

  json_object *tc = json_object_new_object();
  ADD(tc, "model_type", STR("qwen3_5_text"));
  ADD(tc, "vocab_size", I64(vocab));
  ADD(tc, "hidden_size", I64(s->H));
  ADD(tc, "intermediate_size", I64(s->I));
  ADD(tc, "num_hidden_layers", I64(s->L));
  json_object *lt = json_object_new_array();
  for (int64_t i = 0; i < s->L; i++)
    json_object_array_add(lt, STR((i + 1) % 4 == 0 ? "full_attention" : "linear_attention"));
  ADD(tc, "layer_types", lt);
  ADD(tc, "num_attention_heads", I64(s->Hq));
  ADD(tc, "num_key_value_heads", I64(s->Hkv));
  ADD(tc, "head_dim", I64(s->D));
  ADD(tc, "linear_num_key_heads", I64(s->Hk));
  ADD(tc, "linear_num_value_heads", I64(o->ratio3 ? 6 : s->Hv));
  ADD(tc, "linear_key_head_dim", I64(s->dk));
  ADD(tc, "linear_value_head_dim", I64(s->dv));
  ADD(tc, "linear_conv_kernel_dim", I64(4));
  ADD(tc, "hidden_act", STR("silu"));
  ADD(tc, "rms_norm_eps", DBL(1e-6, "1e-06"));
  ADD(tc, "attention_bias", BOOL(false));
  ADD(tc, "max_position_embeddings", I64(s->maxpos));
  ADD(tc, "tie_word_embeddings", BOOL(tied));
  ADD(tc, "initializer_range", DBL(s->ir, s->ir_text));
  ADD(tc, "partial_rotary_factor", DBL(0.25, "0.25"));
  json_object *rp = json_object_new_object();
  ADD(rp, "rope_type", STR("default"));
  ADD(rp, "rope_theta", I64(10000000));
  ADD(rp, "partial_rotary_factor", DBL(0.25, "0.25"));
  ADD(rp, "mrope_interleaved", BOOL(true));
  ADD(rp, "mrope_section", int_array(tiny ? (const int64_t[]){3, 3, 2} : (const int64_t[]){11, 11, 10}, 3));
  ADD(tc, "rope_parameters", rp);
  if (o->causal) {
    json_object *a = json_object_new_array();
    json_object_array_add(a, STR("Qwen3_5ForCausalLM"));
    json_object_object_add(tc, "architectures", a);
    ADD(tc, "dtype", STR("bfloat16"));
    *ret = tc;
    return 0;
  }
  json_object *vc = json_object_new_object();
  ADD(vc, "model_type", STR("qwen3_5_vision"));
  ADD(vc, "depth", I64(s->vdepth));
  ADD(vc, "hidden_size", I64(s->V));
  ADD(vc, "num_heads", I64(s->vheads));
  ADD(vc, "intermediate_size", I64(s->F));
  ADD(vc, "hidden_act", STR("gelu_pytorch_tanh"));
  ADD(vc, "in_channels", I64(3));
  ADD(vc, "patch_size", I64(16));
  ADD(vc, "temporal_patch_size", I64(2));
  ADD(vc, "spatial_merge_size", I64(2));
  ADD(vc, "num_position_embeddings", I64(s->npos));
  ADD(vc, "out_hidden_size", I64(s->H));
  ADD(vc, "deepstack_visual_indexes", json_object_new_array());
  ADD(vc, "initializer_range", DBL(s->ir, s->ir_text));

  json_object *c = json_object_new_object();
  json_object *a = json_object_new_array();
  json_object_array_add(a, STR("Qwen3_5ForConditionalGeneration"));
  ADD(c, "architectures", a);
  ADD(c, "model_type", STR("qwen3_5"));
  ADD(c, "image_token_id", I64(ids->image));
  ADD(c, "video_token_id", I64(ids->video));
  ADD(c, "vision_start_token_id", I64(ids->vision_start));
  ADD(c, "vision_end_token_id", I64(ids->vision_end));
  ADD(c, "tie_word_embeddings", BOOL(tied));
  ADD(c, "dtype", STR("bfloat16"));
  ADD(c, "text_config", tc);
  ADD(c, "vision_config", vc);
  *ret = c;
  return 0;
}

static json_object *make_preprocessor(void) {
  json_object *p = json_object_new_object(), *sz = json_object_new_object();
  ADD(sz, "shortest_edge", I64(65536));
  ADD(sz, "longest_edge", I64(16777216));
  ADD(p, "size", sz);
  ADD(p, "patch_size", I64(16));
  ADD(p, "temporal_patch_size", I64(2));
  ADD(p, "merge_size", I64(2));
  json_object *mean = json_object_new_array(), *std = json_object_new_array();
  for (int i = 0; i < 3; i++) {
    json_object_array_add(mean, DBL(0.5, "0.5"));
    json_object_array_add(std, DBL(0.5, "0.5"));
  }
  ADD(p, "image_mean", mean);
  ADD(p, "image_std", std);
  ADD(p, "resample", I64(3));
  ADD(p, "rescale_factor", DBL(1.0 / 255.0, "0.00392156862745098"));
  ADD(p, "do_convert_rgb", BOOL(true));
  ADD(p, "do_resize", BOOL(true));
  ADD(p, "do_rescale", BOOL(true));
  ADD(p, "do_normalize", BOOL(true));
  ADD(p, "processor_class", STR("Qwen3VLProcessor"));
  ADD(p, "image_processor_type", STR("Qwen2VLImageProcessorFast"));
  return p;
}

/* ---- tokenizer ------------------------------------------------------------------------------- */

static int read_tokenizer(const char *path, struct special_ids *ids) {
  json_object *t = json_object_from_file(path);
  if (!t) {
    fprintf(stderr, "s1-mkmodel: %s: cannot read tokenizer JSON (%s)\n", path,
            json_util_get_last_err());
    return -CM_EFORMAT;
  }
  int64_t max_id = -1;
  json_object *model, *vocab, *added;
  if (json_object_object_get_ex(t, "model", &model) &&
      json_object_object_get_ex(model, "vocab", &vocab) &&
      json_object_is_type(vocab, json_type_object)) {
    json_object_object_foreach(vocab, k, v) {
      (void)k;
      if (json_object_get_int64(v) > max_id)
        max_id = json_object_get_int64(v);
    }
  }
  memset(ids, 0xff, sizeof *ids); /* -1 = not found */
  if (json_object_object_get_ex(t, "added_tokens", &added) &&
      json_object_is_type(added, json_type_array)) {
    for (size_t i = 0; i < json_object_array_length(added); i++) {
      json_object *e = json_object_array_get_idx(added, i), *jid, *jc;
      if (!json_object_object_get_ex(e, "id", &jid) || !json_object_object_get_ex(e, "content", &jc))
        continue;
      int64_t id = json_object_get_int64(jid);
      const char *c = json_object_get_string(jc);
      if (id > max_id)
        max_id = id;
      if (strcmp(c, "<|image_pad|>") == 0)
        ids->image = id;
      else if (strcmp(c, "<|video_pad|>") == 0)
        ids->video = id;
      else if (strcmp(c, "<|vision_start|>") == 0)
        ids->vision_start = id;
      else if (strcmp(c, "<|vision_end|>") == 0)
        ids->vision_end = id;
    }
  }
  json_object_put(t);
  const char *missing = ids->image < 0          ? "<|image_pad|>"
                        : ids->video < 0        ? "<|video_pad|>"
                        : ids->vision_start < 0 ? "<|vision_start|>"
                        : ids->vision_end < 0   ? "<|vision_end|>"
                                                : NULL;
  if (missing) {
    fprintf(stderr, "s1-mkmodel: %s: added token %s not found\n", path, missing);
    return -CM_EMISSING;
  }
  ids->n_ids = max_id + 1;
  return 0;
}

static int copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
  int rc = 0;
  if (!in || !out) {
    fprintf(stderr, "s1-mkmodel: cannot copy %s to %s: %s\n", from, to, strerror(errno));
    rc = -EIO;
  }
  char buf[1 << 16];
  size_t n;
  while (!rc && (n = fread(buf, 1, sizeof buf, in)) > 0)
    if (fwrite(buf, 1, n, out) != n)
      rc = -EIO;
  if (in)
    fclose(in);
  if (out && fclose(out) != 0)
    rc = -EIO;
  return rc;
}

static char *path_join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  if (p)
    snprintf(p, n, "%s/%s", dir, name);
  return p;
}

#define JSON_FILE_FLAGS                                                                            \
  (JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE)

static int write_json(const char *dir, const char *name, json_object *obj) {
  char *p = path_join(dir, name);
  int rc = json_object_to_file_ext(p, obj, JSON_FILE_FLAGS) ? -EIO : 0;
  if (rc)
    fprintf(stderr, "s1-mkmodel: cannot write %s\n", p);
  free(p);
  return rc;
}

/* Canonical key -> key in the written layout. */
static void layout_name(const char *canon, bool causal, char *out, size_t n) {
  const char *P = "model.language_model.";
  if (causal && strncmp(canon, P, strlen(P)) == 0)
    snprintf(out, n, "model.%s", canon + strlen(P));
  else
    snprintf(out, n, "%s", canon);
}

/* ---- weights --------------------------------------------------------------------------------- */

/* Hugging Face layout (o->out): model.safetensors or shards + index, metadata {"format": "pt"}.
 * s1serve layout (o->s1_out): one weights.safetensors, canonical names, no metadata: the bytes
 * s1-export writes for this checkpoint (its writer orders tensors itself; BF16 is copied as is). */
static int write_weights(const struct opts *o, const struct cm_qwen35_dims *dims,
                         const struct cm_qwen35_tensor *list, size_t n, double init_range) {
  struct gen *g = calloc(n, sizeof *g);
  int *shard_of = calloc(n, sizeof *shard_of);
  int rc = 0, n_shards = 1;
  uint64_t total = 0, in_shard = 0;
  bool s1 = o->s1_out != NULL;
  (void)dims;
  if (!g || !shard_of) {
    rc = -ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    g[i].t = &list[i];
    layout_name(list[i].name, o->causal && !s1, g[i].out_name, sizeof g[i].out_name);
    g[i].seed = o->seed;
    g[i].init_range = init_range;
    g[i].n_bytes = 2;
    for (int k = 0; k < list[i].n_dims; k++)
      g[i].n_bytes *= (size_t)list[i].shape[k];
    if (!s1 && in_shard > 0 && in_shard + g[i].n_bytes > o->shard_bytes) {
      n_shards++;
      in_shard = 0;
    }
    shard_of[i] = n_shards - 1;
    in_shard += g[i].n_bytes;
    total += g[i].n_bytes;
  }
  json_object *wm = json_object_new_object();
  for (int s = 0; s < n_shards && !rc; s++) {
    char fname[64];
    if (s1)
      snprintf(fname, sizeof fname, "weights.safetensors");
    else if (n_shards == 1)
      snprintf(fname, sizeof fname, "model.safetensors");
    else
      snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
    struct cm_safetensors_writer *w = NULL;
    rc = cm_safetensors_writer_new(&w);
    for (size_t i = 0; i < n && !rc; i++) {
      if (shard_of[i] != s)
        continue;
      rc = cm_safetensors_writer_add_fill(w, g[i].out_name, CM_DTYPE_BF16, list[i].n_dims,
                                          list[i].shape, fill_weight, &g[i]);
      json_object_object_add(wm, g[i].out_name, json_object_new_string(fname));
    }
    if (!rc && !s1)
      rc = cm_safetensors_writer_set_metadata(w, "format", "pt");
    char *p = path_join(s1 ? o->s1_out : o->out, fname);
    struct cm_diag d = {0};
    if (!rc)
      rc = cm_safetensors_writer_finish(w, p, &d);
    if (rc)
      fprintf(stderr, "s1-mkmodel: %s\n", d.msg ? d.msg : strerror(-rc));
    cm_diag_fini(&d);
    cm_safetensors_writer_free(w);
    free(p);
  }
  if (!rc && n_shards > 1) {
    json_object *idx = json_object_new_object(), *meta = json_object_new_object();
    ADD(meta, "total_size", I64((int64_t)total));
    ADD(idx, "metadata", meta);
    ADD(idx, "weight_map", json_object_get(wm));
    rc = write_json(o->out, "model.safetensors.index.json", idx);
    json_object_put(idx);
  }
  json_object_put(wm);
out:
  free(g);
  free(shard_of);
  return rc;
}

/* ---- PEFT adapter ---------------------------------------------------------------------------- */

/* Module name (key without ".weight") whose last component is in the comma list. */
static bool targeted(const char *module, const char *targets) {
  const char *last = strrchr(module, '.');
  last = last ? last + 1 : module;
  size_t ln = strlen(last);
  for (const char *t = targets; *t;) {
    const char *c = strchr(t, ',');
    size_t tn = c ? (size_t)(c - t) : strlen(t);
    if (tn == ln && strncmp(t, last, ln) == 0)
      return true;
    if (!c)
      break;
    t = c + 1;
  }
  return false;
}

struct lora_gen {
  char key[200];        /* PEFT key */
  uint64_t seed;        /* model seed */
  bool bf16;            /* stored dtype */
  size_t n;             /* elements */
};

static int fill_lora(void *ctx, const char *name, void *buf, size_t n_bytes) {
  (void)n_bytes;
  const struct lora_gen *lg = ctx;
  struct rng r = rng_for(lg->seed, name, "lora");
  float *v = malloc(lg->n * sizeof *v);
  if (!v)
    return -ENOMEM;
  fill_normal(&r, 0.0, 0.1, v, lg->n);
  unsigned char *o = buf;
  for (size_t i = 0; i < lg->n; i++) {
    if (lg->bf16) {
      uint16_t b = cm_f32_to_bf16(v[i]);
      o[2 * i] = (unsigned char)b;
      o[2 * i + 1] = (unsigned char)(b >> 8);
    } else {
      memcpy(o + 4 * i, &v[i], 4);
    }
  }
  free(v);
  return 0;
}

static int write_adapter(const struct opts *o, const struct cm_qwen35_tensor *list, size_t n) {
  if (o->adapter_rank <= 0 || !(o->adapter_alpha > 0) || !o->adapter_targets ||
      !*o->adapter_targets) {
    fprintf(stderr, "s1-mkmodel: --adapter-out needs --adapter-rank > 0, --adapter-alpha > 0 and "
                    "--adapter-targets\n");
    return -EINVAL;
  }
  if (mkdir(o->adapter_out, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "s1-mkmodel: %s: %s\n", o->adapter_out, strerror(errno));
    return -errno;
  }
  struct lora_gen *lg = calloc(2 * n, sizeof *lg);
  struct cm_safetensors_writer *w = NULL;
  int rc = lg ? cm_safetensors_writer_new(&w) : -ENOMEM;
  int64_t r = o->adapter_rank;
  size_t used = 0;
  json_object *tm = json_object_new_array();
  for (size_t i = 0; i < n && !rc; i++) {
    const struct cm_qwen35_tensor *t = &list[i];
    if (t->n_dims != 2 || !has_suffix(t->name, ".weight") || strstr(t->name, "embed"))
      continue;
    char module[160], lname[160];
    layout_name(t->name, o->causal, lname, sizeof lname);
    snprintf(module, sizeof module, "%.*s", (int)(strlen(lname) - 7), lname);
    if (!targeted(module, o->adapter_targets))
      continue;
    for (int ab = 0; ab < 2 && !rc; ab++) {
      struct lora_gen *g = &lg[used++];
      int64_t shape[2] = {ab == 0 ? r : t->shape[0], ab == 0 ? t->shape[1] : r};
      snprintf(g->key, sizeof g->key, "base_model.model.%s.lora_%c.weight", module, ab ? 'B' : 'A');
      g->seed = o->seed;
      g->bf16 = o->adapter_bf16;
      g->n = (size_t)(shape[0] * shape[1]);
      rc = cm_safetensors_writer_add_fill(w, g->key, o->adapter_bf16 ? CM_DTYPE_BF16 : CM_DTYPE_F32,
                                          2, shape, fill_lora, g);
    }
  }
  if (!rc && used == 0) {
    fprintf(stderr, "s1-mkmodel: --adapter-targets \"%s\" matches no linear weight\n",
            o->adapter_targets);
    rc = -EINVAL;
  }
  char *p = path_join(o->adapter_out, "adapter_model.safetensors");
  struct cm_diag d = {0};
  if (!rc)
    rc = cm_safetensors_writer_set_metadata(w, "format", "pt");
  if (!rc)
    rc = cm_safetensors_writer_finish(w, p, &d);
  if (rc && d.msg)
    fprintf(stderr, "s1-mkmodel: %s\n", d.msg);
  cm_diag_fini(&d);
  free(p);
  if (!rc) {
    for (const char *t = o->adapter_targets; *t;) {
      const char *c = strchr(t, ',');
      size_t tn = c ? (size_t)(c - t) : strlen(t);
      json_object_array_add(tm, json_object_new_string_len(t, (int)tn));
      if (!c)
        break;
      t = c + 1;
    }
    json_object *ac = json_object_new_object();
    ADD(ac, "peft_type", STR("LORA"));
    ADD(ac, "task_type", STR("CAUSAL_LM"));
    ADD(ac, "base_model_name_or_path", STR(o->out));
    ADD(ac, "r", I64(r));
    if (o->adapter_alpha == floor(o->adapter_alpha) && o->adapter_alpha < 1e15)
      ADD(ac, "lora_alpha", I64((int64_t)o->adapter_alpha));
    else
      ADD(ac, "lora_alpha", json_object_new_double(o->adapter_alpha));
    ADD(ac, "lora_dropout", DBL(0.0, "0.0"));
    ADD(ac, "target_modules", json_object_get(tm));
    ADD(ac, "bias", STR("none"));
    ADD(ac, "use_dora", BOOL(false));
    ADD(ac, "use_rslora", BOOL(false));
    ADD(ac, "modules_to_save", NULL);
    ADD(ac, "rank_pattern", json_object_new_object());
    ADD(ac, "alpha_pattern", json_object_new_object());
    ADD(ac, "fan_in_fan_out", BOOL(false));
    ADD(ac, "init_lora_weights", BOOL(true));
    ADD(ac, "inference_mode", BOOL(true));
    rc = write_json(o->adapter_out, "adapter_config.json", ac);
    json_object_put(ac);
  }
  json_object_put(tm);
  cm_safetensors_writer_free(w);
  free(lg);
  return rc;
}

/* ---- family directories (--s1-out --family) ------------------------------------------------ */

/* Counts of what the kept adapter adapts (s1-export's attach_lora counts, for the JEMM checks). */
struct adapter_counts {
  size_t n_lang;  /* language-model projections */
  size_t n_other; /* anything else (vision, lm_head) */
};

/* A kept LoRA factor: F32 N(0, 0.02) drawn from its own stream (s1 key as the name). */
static int fill_kept(void *ctx, const char *name, void *buf, size_t n_bytes) {
  struct rng r = rng_for(*(const uint64_t *)ctx, name, "kept-lora");
  float *v = buf;
  fill_normal(&r, 0.0, 0.02, v, n_bytes / 4);
  return 0;
}

/* adapter.safetensors as s1-export --lora keep writes it: for every targeted 2-D weight (not the
 * embedding) <canonical name without .weight>.lora_A [r, in] and .lora_B [out, r], F32. Values
 * N(0, 0.02), so that the adapted projections stay at the base's scale. */
static int write_kept_adapter(const struct opts *o, const struct cm_qwen35_tensor *list, size_t n,
                              struct adapter_counts *ret) {
  struct cm_safetensors_writer *w = NULL;
  int rc = cm_safetensors_writer_new(&w);
  int64_t r = o->adapter_rank;
  char (*keys)[200] = calloc(2 * n + 1, sizeof *keys);
  size_t used = 0;
  memset(ret, 0, sizeof *ret);
  if (!keys)
    rc = -ENOMEM;
  for (size_t i = 0; i < n && !rc; i++) {
    const struct cm_qwen35_tensor *t = &list[i];
    if (t->n_dims != 2 || !has_suffix(t->name, ".weight") || strstr(t->name, "embed"))
      continue;
    char module[160];
    snprintf(module, sizeof module, "%.*s", (int)(strlen(t->name) - 7), t->name);
    if (!targeted(module, o->adapter_targets))
      continue;
    bool lang = strncmp(module, "model.language_model.", 21) == 0;
    ret->n_lang += lang;
    ret->n_other += !lang;
    for (int ab = 0; ab < 2 && !rc; ab++) {
      int64_t shape[2] = {ab == 0 ? r : t->shape[0], ab == 0 ? t->shape[1] : r};
      snprintf(keys[used], sizeof keys[used], "%s.lora_%c", module, ab ? 'B' : 'A');
      rc = cm_safetensors_writer_add_fill(w, keys[used++], CM_DTYPE_F32, 2, shape, fill_kept,
                                          (void *)&o->seed);
    }
  }
  if (!rc && used == 0) {
    fprintf(stderr, "s1-mkmodel: --adapter-targets \"%s\" matches no linear weight\n",
            o->adapter_targets);
    rc = -EINVAL;
  }
  char *p = path_join(o->s1_out, "adapter.safetensors");
  struct cm_diag d = {0};
  if (!rc)
    rc = cm_safetensors_writer_finish(w, p, &d);
  if (rc && d.msg)
    fprintf(stderr, "s1-mkmodel: %s\n", d.msg);
  cm_diag_fini(&d);
  free(p);
  free(keys);
  cm_safetensors_writer_free(w);
  return rc;
}

/* One random F32 head tensor to write. */
struct head_t {
  char name[48];    /* key in heads.safetensors */
  int64_t shape[2]; /* [out, in] or [out] */
  int n_dims;       /* 1 or 2 */
  double std;       /* N(0, std) */
  float *v;         /* values, heap */
};

static int add_head(struct head_t *h, size_t *n, const char *name, int64_t a, int64_t b,
                    double std) {
  struct head_t *t = &h[(*n)++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->shape[0] = a;
  t->shape[1] = b;
  t->n_dims = b > 0 ? 2 : 1;
  t->std = std;
  return 0;
}

/* Linear `name`: weight [out, in] N(0, gain / sqrt(in)), bias [out] N(0, 0.3) (the scheme of
 * recipe/omnijev/make_demo_checkpoint.py). */
static void add_linear(struct head_t *h, size_t *n, const char *prefix, const char *name,
                       int64_t out, int64_t in, double gain) {
  char k[48];
  snprintf(k, sizeof k, "%s%s.weight", prefix, name);
  add_head(h, n, k, out, in, gain / sqrt((double)in));
  snprintf(k, sizeof k, "%s%s.bias", prefix, name);
  add_head(h, n, k, out, 0, 0.3);
}

/* omnijev: embed_f32_rows.safetensors, the option rows the generator drew into the BF16 table,
 * widened to float32 (exact: the table holds their rounding, as cm_model_dir_open checks; an
 * export keeps new_tok_emb.pt's own float32 values there). */
static int write_f32_rows(const struct opts *o, const int32_t opt_ids[2]) {
  char *wp = path_join(o->s1_out, "weights.safetensors");
  char *rp = path_join(o->s1_out, "embed_f32_rows.safetensors");
  struct cm_safetensors *st = NULL;
  struct cm_safetensors_writer *w = NULL;
  struct cm_diag d = {0};
  struct cm_tensor_view e;
  float *rows = NULL;
  int rc = wp && rp ? cm_safetensors_open(wp, &st, &d) : -ENOMEM;
  if (!rc && (cm_safetensors_find(st, "model.language_model.embed_tokens.weight", &e) != 0 ||
              e.dtype != CM_DTYPE_BF16 || e.n_dims != 2))
    rc = -CM_EMISSING;
  int64_t h = rc ? 0 : e.shape[1], shape[2] = {2, h};
  if (!rc && !(rows = malloc((size_t)(2 * h) * sizeof *rows)))
    rc = -ENOMEM;
  for (int k = 0; !rc && k < 2; k++) {
    const unsigned char *t = (const unsigned char *)e.data + (size_t)opt_ids[k] * (size_t)h * 2;
    for (int64_t j = 0; j < h; j++)
      rows[k * h + j] = cm_bf16_to_f32((uint16_t)(t[2 * j] | (t[2 * j + 1] << 8)));
  }
  if (!rc)
    rc = cm_safetensors_writer_new(&w);
  if (!rc)
    rc = cm_safetensors_writer_add(w, "embed_tokens.f32_rows", CM_DTYPE_F32, 2, shape, rows);
  if (!rc)
    rc = cm_safetensors_writer_finish(w, rp, &d);
  if (rc)
    fprintf(stderr, "s1-mkmodel: %s: %s\n", rp ? rp : "embed_f32_rows",
            d.msg ? d.msg : strerror(-rc));
  cm_safetensors_writer_free(w);
  cm_safetensors_close(st);
  cm_diag_fini(&d);
  free(rows), free(wp), free(rp);
  return rc;
}

/* What --family F adds to a --s1-out directory (the table: mk_families below). */
struct mk_family {
  const char *name;   /* manifest "family" */
  bool vision_kept;   /* needs --vision and a kept adapter, no --causal */
  bool chat_template; /* needs --tokenizer-config (the base's chat template) */
  bool option_rows;   /* OmniJev's layout: <|opt|> tokens, the tied embedding resized to the
                         tokenizer, those rows kept in float32, head widths in the generator */
  /* its heads.safetensors tensors; NULL: no heads file */
  void (*heads)(const struct opts *o, struct head_t *h, size_t *n, int64_t hidden);
  /* its manifest blocks, after "files"; NULL: none (the bare backbone) */
  int (*manifest)(const struct opts *o, json_object *m, json_object *src,
                  const struct cm_qwen35_dims *dims, const struct adapter_counts *ac,
                  int64_t image_token_id, const int32_t opt_ids[2], int64_t vocab);
};

/* OmniJev's heads (F32): head.* (OptionScorer, 17 tensors) and ord.* (OrdinalScoreHead, 8) at
 * widths D / O as s1-export names them. */
static void omnijev_heads(const struct opts *o, struct head_t *h, size_t *n, int64_t hidden) {
  int64_t d = o->head_width, w = o->ord_width;
  add_linear(h, n, "head.", "opt.0", d, hidden, 2.0);
  add_linear(h, n, "head.", "opt.2", d, d, 2.0);
  add_linear(h, n, "head.", "que.0", d, hidden, 2.0);
  add_linear(h, n, "head.", "que.2", d, d, 2.0);
  add_linear(h, n, "head.", "score", 1, d, 0.5);
  add_linear(h, n, "head.", "abstain", 1, d, 0.5);
  add_linear(h, n, "head.", "feat", d, 6, 0.02);
  add_linear(h, n, "head.", "feat_lin", 1, 6, 0.02);
  add_head(h, n, "head.log_tau", 3, 0, 0.0);
  add_linear(h, n, "ord.", "z.0", w, hidden, 2.0);
  add_linear(h, n, "ord.", "z.2", 1, w, 3.0);
  add_linear(h, n, "ord.", "cut.0", w, hidden, 2.0);
  add_linear(h, n, "ord.", "cut.2", 1, w, 3.0);
}

/* Open-Jev's head (F32): open_jev.head.weight [1, H] and .bias [1]. */
static void open_jev_heads(const struct opts *o, struct head_t *h, size_t *n, int64_t hidden) {
  (void)o;
  add_head(h, n, "open_jev.head.weight", 1, hidden, 1.0 / sqrt((double)hidden));
  add_head(h, n, "open_jev.head.bias", 1, 0, 0.1);
}

/* The family's heads.safetensors (its table entry's heads). */
static int write_heads(const struct opts *o, int64_t hidden) {
  struct head_t h[32];
  size_t n = 0;
  o->fam->heads(o, h, &n, hidden);
  struct cm_safetensors_writer *w = NULL;
  int rc = cm_safetensors_writer_new(&w);
  for (size_t i = 0; i < n && !rc; i++) {
    size_t cnt = (size_t)h[i].shape[0] * (size_t)(h[i].n_dims == 2 ? h[i].shape[1] : 1);
    if (!(h[i].v = calloc(cnt + 1, sizeof(float)))) {
      rc = -ENOMEM;
      break;
    }
    struct rng r = rng_for(o->seed, h[i].name, "head");
    if (h[i].std > 0)
      fill_normal(&r, 0.0, h[i].std, h[i].v, cnt);
    rc = cm_safetensors_writer_add(w, h[i].name, CM_DTYPE_F32, h[i].n_dims, h[i].shape, h[i].v);
  }
  char *p = path_join(o->s1_out, "heads.safetensors");
  struct cm_diag d = {0};
  if (!rc)
    rc = cm_safetensors_writer_finish(w, p, &d);
  if (rc)
    fprintf(stderr, "s1-mkmodel: %s\n", d.msg ? d.msg : "cannot write heads.safetensors");
  cm_diag_fini(&d);
  free(p);
  cm_safetensors_writer_free(w);
  for (size_t i = 0; i < n; i++)
    free(h[i].v);
  return rc;
}

/* The family's manifest blocks (what s1-export --family F writes for such a checkpoint), with
 * the small inputs the exporters read (JEMM's decision_config.json and the base's chat template)
 * written under DIR/generator/ and listed in upstream.sources. */
static int omnijev_manifest(const struct opts *o, json_object *m, json_object *src,
                            const struct cm_qwen35_dims *dims, const struct adapter_counts *ac,
                            int64_t image_token_id, const int32_t opt_ids[2], int64_t vocab) {
  (void)src, (void)dims, (void)ac, (void)image_token_id;
  int rc = 0;
  /* the 4B release's published calibration (recipe/omnijev/make_demo_checkpoint.py) */
  json_object *meta = json_tokener_parse(
      "{\"norm\": \"softmax\", \"lm_feats\": true, \"ordinal\": true, \"branch\": true, "
      "\"temperatures\": {\"noul\": 1.1991, \"choice\": 1.1199, \"score\": 1.1909}, "
      "\"biases\": {\"noul\": 0.05310856608843584}}");
  json_object *calib = NULL;
  struct cm_diag d = {0};
  rc = meta ? ex_omnijev_check_meta(meta, &calib, &d) : -ENOMEM;
  json_object_put(meta);
  if (rc) {
    fprintf(stderr, "s1-mkmodel: %s\n", d.msg ? d.msg : "head_meta");
    cm_diag_fini(&d);
    return rc;
  }
  ADD(m, "family", STR("omnijev"));
  ADD(m, "model_id", STR("tinnel123/OmniJev"));
  json_object *lr = json_object_new_object(), *oi = json_object_new_array();
  json_object *proc = json_object_new_object(), *kinds = json_object_new_array();
  ADD(lr, "rank", I64(o->adapter_rank));
  ADD(lr, "alpha", json_object_new_double(o->adapter_alpha));
  ADD(lr, "mode", STR("keep"));
  ADD(calib, "lora", lr);
  json_object_array_add(oi, json_object_new_int(opt_ids[0]));
  json_object_array_add(oi, json_object_new_int(opt_ids[1]));
  ADD(calib, "option_token_ids", oi);
  ADD(calib, "vocab_size", I64(vocab));
  ADD(proc, "min_pixels", json_object_new_int(65536));
  ADD(proc, "max_pixels", json_object_new_int(602112)); /* the MSO1 override */
  ADD(calib, "processor", proc);
  ADD(calib, "heads", STR("heads.safetensors"));
  ADD(m, "omnijev", calib);
  /* the option rows in float32, as s1-export keeps new_tok_emb.pt (write_f32_rows) */
  json_object *fr = json_object_new_object(), *fri = json_object_new_array();
  ADD(fr, "file", STR("embed_f32_rows.safetensors"));
  ADD(fr, "tensor", STR("embed_tokens.f32_rows"));
  json_object_array_add(fri, json_object_new_int(opt_ids[0]));
  json_object_array_add(fri, json_object_new_int(opt_ids[1]));
  ADD(fr, "ids", fri);
  ADD(m, "embed_f32_rows", fr);
  json_object_array_add(kinds, STR("omnijev"));
  ADD(m, "head_kinds", kinds);
  return 0;
}

static int open_jev_manifest(const struct opts *o, json_object *m, json_object *src,
                             const struct cm_qwen35_dims *dims, const struct adapter_counts *ac,
                             int64_t image_token_id, const int32_t opt_ids[2], int64_t vocab) {
  (void)src, (void)dims, (void)ac, (void)image_token_id, (void)opt_ids, (void)vocab;
  int rc = 0;
  /* the pinned base of the shape (spec/open_jev.md §9.1); the package hash stands for the
   * generator's arguments */
  bool b27 = strcmp(o->shape, "27b") == 0, b9 = strcmp(o->shape, "9b") == 0;
  const char *model_id = b27 ? "Qwen/Qwen3.8-27B" : b9 ? "Qwen/Qwen3.5-9B"
                                                      : "s1serve/open-jev-tiny-random";
  const char *rev = b27 ? "1d4bf0f2ff6012fd82039f2fa52739d0dd7c60c0"
                    : b9 ? "c202236235762e1c871ad0ccb60c8ee5ba337b9a"
                         : "s1-mkmodel --shape tiny";
  char args[160], hex[CM_SHA256_HEX];
  uint8_t dg[CM_SHA256_BYTES];
  snprintf(args, sizeof args, "s1-mkmodel --shape %s --seed %llu --family open_jev", o->shape,
           (unsigned long long)o->seed);
  struct cm_sha256 h = {0};
  if ((rc = cm_sha256_init(&h)) || (rc = cm_sha256_update(&h, args, strlen(args))) ||
      (rc = cm_sha256_final(&h, dg))) {
    cm_sha256_fini(&h);
    return rc;
  }
  cm_sha256_fini(&h);
  cm_sha256_hex(dg, hex);
  return ex_open_jev_manifest_add(m, model_id, rev, hex, 1.3862943611198906, 16384,
                                  o->kept_adapter, NULL, 0);
}

/* jemm: export_jemm's checks and blocks over the generator's two small inputs */
static int jemm_manifest(const struct opts *o, json_object *m, json_object *src,
                         const struct cm_qwen35_dims *dims, const struct adapter_counts *ac,
                         int64_t image_token_id, const int32_t opt_ids[2], int64_t vocab) {
  (void)opt_ids, (void)vocab;
  int rc = 0;
  char *gdir = path_join(o->s1_out, "generator");
  char *dc = gdir ? path_join(gdir, "decision_config.json") : NULL;
  char *tcp = gdir ? path_join(gdir, "tokenizer_config.json") : NULL;
  if (!gdir || !dc || !tcp)
    rc = -ENOMEM;
  if (!rc && mkdir(gdir, 0755) != 0 && errno != EEXIST)
    rc = -errno;
  if (!rc) { /* the released decision_config.json values (recipe/jemm/make-demo-model) */
    json_object *j = json_tokener_parse("{\"temperature\": 1.3480874159655591, \"mm_temperature\":"
                                        " 1.3954832341582943, \"threshold\": 0.9872681877423998}");
    rc = write_json(gdir, "decision_config.json", j);
    json_object_put(j);
  }
  if (!rc)
    rc = copy_file(o->tokenizer_config, tcp);
  struct export_jemm_in ji = {.base = gdir, .adapter_dir = gdir, .out = o->s1_out,
                              .merged = false, .rank = o->adapter_rank,
                              .alpha = o->adapter_alpha, .n_pairs = ac->n_lang,
                              .n_other_pairs = ac->n_other, .dims = dims,
                              .image_token_id = image_token_id};
  if (!rc && export_jemm(&ji, m, src) != 0)
    rc = -EINVAL;
  free(gdir), free(dc), free(tcp);
  return rc;
}

/* ---- the family table ------------------------------------------------------------------------ */

/* One line per family of common/cm_family.h (test family_tables compares the names). */
static const struct mk_family mk_families[] = {
    {.name = "qwen3_5"},
    {.name = "open_jev", .heads = open_jev_heads, .manifest = open_jev_manifest},
    {.name = "omnijev", .vision_kept = true, .option_rows = true, .heads = omnijev_heads,
     .manifest = omnijev_manifest},
    {.name = "jemm", .vision_kept = true, .chat_template = true, .manifest = jemm_manifest},
};
#define N_MK_FAMILIES (sizeof mk_families / sizeof *mk_families)

static const struct mk_family *mk_family_find(const char *name) {
  for (size_t i = 0; name && i < N_MK_FAMILIES; i++)
    if (strcmp(mk_families[i].name, name) == 0)
      return &mk_families[i];
  return NULL;
}

/* ---- s1serve model directory (--s1-out) ------------------------------------------------------ */

/* `obj` as s1-export gets it from the file write_json makes: serialized with the same flags and
 * parsed back, so every number keeps the text it would have in config.json. NULL on failure. */
static json_object *as_read_back(json_object *obj) {
  const char *txt = json_object_to_json_string_ext(obj, JSON_FILE_FLAGS);
  return txt ? json_tokener_parse(txt) : NULL;
}

/* Writes s1_out/s1-model.json after the weights and tokenizer.json are in place: s1-export's
 * manifest for the checkpoint --out would have written, except "upstream", which names this tool,
 * the arguments the weights are a function of, and the tokenizer read. */
static int write_s1_manifest(const struct opts *o, json_object *config,
                             const struct cm_qwen35_dims *dims, const struct adapter_counts *ac,
                             int64_t image_token_id, const int32_t opt_ids[2],
                             json_object *tinfo) {
  json_object *pp = make_preprocessor();
  json_object *cfg = as_read_back(config), *pre = pp ? as_read_back(pp) : NULL;
  json_object *m = cfg && pre ? cm_model_dir_manifest_new("qwen3_5", cfg, o->vision,
                                                          "tokenizer.json", pre)
                              : NULL;
  struct cm_diag d = {0};
  int rc = m ? 0 : -ENOMEM;
  uint8_t dg[CM_SHA256_BYTES];
  char hex[CM_SHA256_HEX];
  if (!rc)
    rc = cm_sha256_file(o->tokenizer, dg, NULL, &d);
  if (!rc) {
    json_object *up = json_object_new_object(), *gen = json_object_new_object();
    json_object *src = json_object_new_array(), *e = json_object_new_object();
    char *abs = realpath(o->tokenizer, NULL);
    cm_sha256_hex(dg, hex);
    ADD(up, "exporter", STR("s1-mkmodel --s1-out"));
    ADD(up, "text_prefix", STR(o->causal ? "model." : "model.language_model."));
    ADD(gen, "shape", STR(o->shape));
    ADD(gen, "seed", json_object_new_uint64(o->seed));
    ADD(gen, "vision", BOOL(o->vision));
    ADD(gen, "tied", BOOL(o->tied));
    ADD(gen, "ratio3", BOOL(o->ratio3));
    ADD(gen, "causal", BOOL(o->causal));
    ADD(gen, "family", STR(o->family));
    if (o->kept_adapter) {
      ADD(gen, "adapter_rank", I64(o->adapter_rank));
      ADD(gen, "adapter_alpha", json_object_new_double(o->adapter_alpha));
      ADD(gen, "adapter_targets", STR(o->adapter_targets));
    }
    if (o->fam->option_rows) {
      ADD(gen, "head_width", I64(o->head_width));
      ADD(gen, "ord_width", I64(o->ord_width));
    }
    ADD(up, "generator", gen);
    ADD(e, "path", STR(abs ? abs : o->tokenizer));
    ADD(e, "sha256", STR(hex));
    json_object_array_add(src, e);
    ADD(up, "sources", src);
    ADD(m, "upstream", up);
    free(abs);
    json_object *mtok = NULL;
    if (tinfo && json_object_object_get_ex(m, "tokenizer", &mtok))
      ADD(mtok, "transformers", json_object_get(tinfo));
    if (o->kept_adapter) { /* s1-export --lora keep's block */
      json_object *a = json_object_new_object();
      ADD(a, "rank", I64(o->adapter_rank));
      ADD(a, "alpha", json_object_new_double(o->adapter_alpha));
      ADD(a, "scale", json_object_new_double(o->adapter_alpha / (double)o->adapter_rank));
      ADD(a, "file", STR("adapter.safetensors"));
      ADD(m, "adapter", a);
    }
    json_object *files = json_object_new_object();
    ADD(m, "files", files);
    if (o->fam->manifest) { /* after "files", in the exporters' key order */
      json_object *cfg_m = NULL, *tc_m = NULL, *jv;
      int64_t vocab = 0;
      if (json_object_object_get_ex(m, "config", &cfg_m)) {
        if (!json_object_object_get_ex(cfg_m, "text_config", &tc_m))
          tc_m = cfg_m;
        if (json_object_object_get_ex(tc_m, "vocab_size", &jv))
          vocab = json_object_get_int64(jv);
      }
      rc = o->fam->manifest(o, m, src, dims, ac, image_token_id, opt_ids, vocab);
    }
    if (!rc)
      rc = cm_model_dir_add_file(files, o->s1_out, "weights.safetensors", &d);
    if (!rc)
      rc = cm_model_dir_add_file(files, o->s1_out, "tokenizer.json", &d);
    if (!rc && o->kept_adapter)
      rc = cm_model_dir_add_file(files, o->s1_out, "adapter.safetensors", &d);
    if (!rc && o->fam->heads)
      rc = cm_model_dir_add_file(files, o->s1_out, "heads.safetensors", &d);
    if (!rc && o->fam->option_rows)
      rc = cm_model_dir_add_file(files, o->s1_out, "embed_f32_rows.safetensors", &d);
    if (!rc)
      rc = cm_model_dir_write_manifest(o->s1_out, m, &d);
  }
  if (rc)
    fprintf(stderr, "s1-mkmodel: %s\n", d.msg ? d.msg : strerror(-rc));
  cm_diag_fini(&d);
  json_object_put(m);
  json_object_put(cfg);
  json_object_put(pre);
  json_object_put(pp);
  return rc;
}

/* ---- main ------------------------------------------------------------------------------------ */

static void usage(FILE *f) {
  fprintf(f,
          "usage: s1-mkmodel --shape tiny|4b|9b|27b [--vision] [--tied] [--ratio3] [--causal]\n"
          "                  [--seed N] [--max-shard-bytes N] [--threads N]\n"
          "                  --tokenizer FILE (--out HF_DIR | --s1-out DIR)\n"
          "                  [--adapter-out DIR --adapter-rank R --adapter-alpha A\n"
          "                   --adapter-targets q_proj,v_proj,... [--adapter-bf16]]\n"
          "       --s1-out DIR [--family qwen3_5|omnijev|open_jev|jemm] [--adapter-rank R\n"
          "                   --adapter-alpha A --adapter-targets ...]  (kept adapter)\n"
          "                  [--head-width D --ord-width O]  (omnijev: 1024, 512)\n"
          "                  [--tokenizer-config FILE]  (the base's tokenizer_config.json: it\n"
          "                   decides the tokenizer class as in s1-export; jemm: its chat template)\n");
}

int main(int argc, char **argv) {
  if (cm_version_requested(argc, argv, "s1-mkmodel"))
    return 0;
  struct opts o = {.shard_bytes = SHARD_MAX_BYTES, .family = "qwen3_5", .head_width = 1024,
                   .ord_width = 512};
  enum {
    O_VISION = 256, O_TIED, O_RATIO3, O_CAUSAL, O_AOUT, O_ARANK, O_AALPHA, O_ATGT, O_ABF16, O_SHARD,
    O_THREADS, O_S1OUT, O_FAMILY, O_HEADW, O_ORDW, O_TOKCFG
  };
  static const struct option lo[] = {
      {"shape", required_argument, 0, 's'},       {"seed", required_argument, 0, 'S'},
      {"tokenizer", required_argument, 0, 't'},   {"out", required_argument, 0, 'o'},
      {"vision", no_argument, 0, O_VISION},       {"tied", no_argument, 0, O_TIED},
      {"ratio3", no_argument, 0, O_RATIO3},       {"causal", no_argument, 0, O_CAUSAL},
      {"adapter-out", required_argument, 0, O_AOUT},
      {"adapter-rank", required_argument, 0, O_ARANK},
      {"adapter-alpha", required_argument, 0, O_AALPHA},
      {"adapter-targets", required_argument, 0, O_ATGT},
      {"adapter-bf16", no_argument, 0, O_ABF16},  {"help", no_argument, 0, 'h'},
      {"max-shard-bytes", required_argument, 0, O_SHARD},
      {"threads", required_argument, 0, O_THREADS},
      {"s1-out", required_argument, 0, O_S1OUT},
      {"family", required_argument, 0, O_FAMILY},
      {"head-width", required_argument, 0, O_HEADW},
      {"ord-width", required_argument, 0, O_ORDW},
      {"tokenizer-config", required_argument, 0, O_TOKCFG},
      {0, 0, 0, 0}};
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  n_threads = ncpu < 1 ? 1 : ncpu > 64 ? 64 : (int)ncpu;
  int c;
  char *end;
  while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    switch (c) {
    case 's': o.shape = optarg; break;
    case 'S':
      errno = 0;
      o.seed = strtoull(optarg, &end, 0);
      if (errno || *end || !*optarg) {
        fprintf(stderr, "s1-mkmodel: --seed must be an unsigned integer\n");
        return 2;
      }
      break;
    case 't': o.tokenizer = optarg; break;
    case 'o': o.out = optarg; break;
    case O_S1OUT: o.s1_out = optarg; break;
    case O_FAMILY: o.family = optarg; break;
    case O_TOKCFG: o.tokenizer_config = optarg; break;
    case O_HEADW:
    case O_ORDW: {
      long v = strtol(optarg, &end, 10);
      if (*end || v < 1 || v > 65536) {
        fprintf(stderr, "s1-mkmodel: --head-width / --ord-width must be 1..65536\n");
        return 2;
      }
      *(c == O_HEADW ? &o.head_width : &o.ord_width) = (int)v;
      break;
    }
    case O_VISION: o.vision = true; break;
    case O_TIED: o.tied = true; break;
    case O_RATIO3: o.ratio3 = true; break;
    case O_CAUSAL: o.causal = true; break;
    case O_AOUT: o.adapter_out = optarg; break;
    case O_ARANK:
      o.adapter_rank = (int)strtol(optarg, &end, 10);
      if (*end || o.adapter_rank <= 0 || o.adapter_rank > 4096) {
        fprintf(stderr, "s1-mkmodel: --adapter-rank must be 1..4096\n");
        return 2;
      }
      break;
    case O_AALPHA:
      o.adapter_alpha = strtod(optarg, &end);
      if (*end || !(o.adapter_alpha > 0)) {
        fprintf(stderr, "s1-mkmodel: --adapter-alpha must be a positive number\n");
        return 2;
      }
      break;
    case O_ATGT: o.adapter_targets = optarg; break;
    case O_ABF16: o.adapter_bf16 = true; break;
    case O_THREADS:
      n_threads = (int)strtol(optarg, &end, 10);
      if (*end || n_threads < 1 || n_threads > 64) {
        fprintf(stderr, "s1-mkmodel: --threads must be 1..64\n");
        return 2;
      }
      break;
    case O_SHARD:
      errno = 0;
      o.shard_bytes = strtoull(optarg, &end, 0);
      if (errno || *end || o.shard_bytes == 0) {
        fprintf(stderr, "s1-mkmodel: --max-shard-bytes must be a positive integer\n");
        return 2;
      }
      break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (!o.shape || !o.tokenizer || !o.out == !o.s1_out || optind != argc) {
    usage(stderr);
    return 2;
  }
  if (o.s1_out && o.adapter_out) {
    fprintf(stderr, "s1-mkmodel: --adapter-out needs --out (s1-export applies the adapter); with "
                    "--s1-out, --adapter-rank/--adapter-alpha/--adapter-targets keep one\n");
    return 2;
  }
  o.fam = mk_family_find(o.family);
  if (!o.fam || (o.fam->manifest && !o.s1_out)) {
    fprintf(stderr, "s1-mkmodel: --family must be one of");
    for (size_t i = 0; i < N_MK_FAMILIES; i++)
      fprintf(stderr, "%s %s", i ? "," : "", mk_families[i].name);
    fprintf(stderr, "; every family but the bare %s needs --s1-out\n", mk_families[0].name);
    return 2;
  }
  o.kept_adapter = o.s1_out && o.adapter_rank > 0;
  if (o.kept_adapter && (!(o.adapter_alpha > 0) || !o.adapter_targets || !*o.adapter_targets)) {
    fprintf(stderr, "s1-mkmodel: a kept adapter needs --adapter-rank > 0, --adapter-alpha > 0 "
                    "and --adapter-targets\n");
    return 2;
  }
  bool omni = o.fam->option_rows;
  if (o.fam->vision_kept && (!o.kept_adapter || !o.vision || o.causal)) {
    fprintf(stderr, "s1-mkmodel: --family %s needs --vision and a kept adapter (--adapter-rank, "
                    "--adapter-alpha, --adapter-targets)\n", o.family);
    return 2;
  }
  if (o.fam->chat_template && !o.tokenizer_config) {
    fprintf(stderr, "s1-mkmodel: --family %s needs --tokenizer-config (the base's chat "
                    "template, which s1-export checks the wrapper against)\n", o.family);
    return 2;
  }
  if (o.causal && o.vision) {
    fprintf(stderr, "s1-mkmodel: --causal has no vision tower; drop --vision\n");
    return 2;
  }
  struct special_ids ids;
  json_object *config = NULL;
  struct cm_qwen35_dims dims = {0};
  struct cm_qwen35_tensor *list = NULL;
  size_t n = 0;
  struct cm_diag d = {0};
  int32_t opt_ids[2] = {-1, -1};
  struct adapter_counts ac = {0};
  int rc = read_tokenizer(o.tokenizer, &ids);
  const char *dir = o.out ? o.out : o.s1_out;
  if (!rc && mkdir(dir, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "s1-mkmodel: %s: %s\n", dir, strerror(errno));
    rc = -errno;
  }
  if (!rc) {
    char *tp = path_join(dir, "tokenizer.json");
    rc = copy_file(o.tokenizer, tp);
    size_t vocab = 0;
    if (!rc && omni && (rc = ex_omnijev_option_tokens(tp, &vocab, opt_ids)) == 0)
      o.vocab_rows = (int64_t)vocab; /* the tied embedding resized to the tokenizer (§11.3) */
    free(tp);
  }
  if (!rc)
    rc = make_config(&o, &ids, &config);
  json_object *tinfo = NULL;
  if (!rc && o.s1_out) {
    /* --out copies the file (the checkpoint holds it as given); --s1-out writes what s1-export
     * makes of that checkpoint: the tokenizer as transformers loads it next to this config.json
     * and the --tokenizer-config (jemm) or none (export_hf.h), then the option tokens (omnijev) */
    json_object *tcfg = o.tokenizer_config ? json_object_from_file(o.tokenizer_config) : NULL;
    char *tp = path_join(dir, "tokenizer.json");
    size_t vocab = 0;
    int32_t again[2] = {-1, -1};
    rc = tp ? ex_hf_export_tokenizer_files(o.tokenizer, o.tokenizer, tcfg, config, tp, &tinfo)
            : -ENOMEM;
    if (!rc && omni && (rc = ex_omnijev_option_tokens(tp, &vocab, again)) == 0 &&
        (again[0] != opt_ids[0] || again[1] != opt_ids[1]))
      rc = -EINVAL;
    free(tp);
    json_object_put(tcfg);
  }
  if (!rc)
    rc = cm_qwen35_dims_read(config, "config.json", &dims, &d);
  if (!rc)
    rc = cm_qwen35_inventory(&dims, o.vision, &list, &n);
  if (rc && d.msg)
    fprintf(stderr, "s1-mkmodel: %s\n", d.msg);
  json_object *tc = NULL;
  double ir = 0.02;
  if (!rc) {
    if (!json_object_object_get_ex(config, "text_config", &tc))
      tc = config;
    json_object *jir;
    if (json_object_object_get_ex(tc, "initializer_range", &jir))
      ir = json_object_get_double(jir);
    if (o.out)
      rc = write_json(o.out, "config.json", config);
  }
  if (!rc && o.out) {
    json_object *pp = make_preprocessor();
    rc = write_json(o.out, "preprocessor_config.json", pp);
    json_object_put(pp);
  }
  if (!rc && omni && !dims.tied) {
    fprintf(stderr, "s1-mkmodel: --family %s needs the tied embedding (--tied or --shape 4b)\n",
            o.family);
    rc = -EINVAL;
  }
  if (!rc)
    rc = write_weights(&o, &dims, list, n, ir);
  if (!rc && o.adapter_out)
    rc = write_adapter(&o, list, n);
  if (!rc && o.kept_adapter)
    rc = write_kept_adapter(&o, list, n, &ac);
  if (!rc && o.fam->heads) {
    json_object *jh;
    rc = json_object_object_get_ex(tc, "hidden_size", &jh) ? write_heads(&o, json_object_get_int64(jh))
                                                           : -CM_EMISSING;
  }
  if (!rc && o.s1_out && omni)
    rc = write_f32_rows(&o, opt_ids);
  if (!rc && o.s1_out)
    rc = write_s1_manifest(&o, config, &dims, &ac, ids.image, opt_ids, tinfo);
  json_object_put(tinfo);
  cm_diag_fini(&d);
  free(list);
  cm_qwen35_dims_fini(&dims);
  json_object_put(config);
  return rc ? 1 : 0;
}
