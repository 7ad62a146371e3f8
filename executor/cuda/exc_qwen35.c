/* The CUDA engine of exc_qwen35.h: weight upload into one device buffer, the scratch arena and the
 * snapshot pool (three cudaMalloc calls at start-up, none later), and the layer loop over the ops
 * of this folder and the kernel headers (attention, GDN, conv1d). Projections of a layer that read
 * the same input run as one GEMM ([q|gate per head, k, v], [gate, up]); the GDN layer runs two
 * ([qkv] for the conv, [z|b|a]). A kept LoRA adapter (exc_qwen35_set_lora) adds its branches to
 * each GEMM's output through lora_site (cuda_lora.h). Not here: vision, heads. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exc_bf16.h"

#include "cuda_act.h"
#include "cuda_attention.h"
#include "cuda_check.h"
#include "cuda_conv1d.h"
#include "cuda_embed.h"
#include "cuda_gdn.h"
#include "cuda_gemm.h"
#include "cuda_logits.h"
#include "cuda_lora.h"
#include "cuda_norm.h"
#include "cuda_rope.h"
#include "exc_qwen35.h"

#define ALIGN_BYTES 256

typedef __nv_bfloat16 bf16_t;

/* One decoder layer on the device. */
struct dlayer {
  bool full_attn;   /* mixer kind */
  float *in_norm;   /* [H] zero-centred */
  float *post_norm; /* [H] */
  bf16_t *w_gu;     /* [2I, H]: gate rows then up rows */
  bf16_t *w_down;   /* [H, I] */
  bf16_t *w_qkv;    /* attention: [Hq·2D + 2·Hkv·D, H]; GDN: in_proj_qkv [conv_dim, H] */
  bf16_t *w_o;      /* attention o_proj [H, Hq·D]; GDN out_proj [H, Hv·dv] */
  bf16_t *w_zba;    /* GDN: [z (Hv·dv) | b (Hv) | a (Hv) | zero pad, H] */
  float *q_norm;    /* [D] */
  float *k_norm;    /* [D] */
  float *conv;      /* [conv_dim, K] */
  float *a_log;     /* [Hv] */
  float *dt_bias;   /* [Hv] */
  float *gdn_norm;  /* [dv] plain weight */
};

/* One pool slot: per-layer device pointers into the pool. */
struct slot {
  struct exc_qwen35_state st; /* the public state handed out */
  bool used;                  /* acquired */
  bf16_t **k, **v;            /* [n_layers] → [max_ctx, Hkv, D] (attention layers) */
  float **conv, **s;          /* [n_layers] → [K−1, conv_dim], [Hv, dk, dv] (GDN layers) */
};

struct exc_qwen35 {
  struct ex_qwen35_config cfg;  /* parsed config */
  struct exc_qwen35_limits lim; /* reserved sizes */
  int device;                   /* CUDA device ordinal */
  cudaStream_t stream;          /* every launch of the engine */
  struct exc_gemm *gemm;        /* cuBLASLt handle + algorithm cache */
  bool sticky;                  /* a sticky CUDA error happened */
  struct exc_lora *lora;        /* kept LoRA adapter, or NULL (exc_qwen35_set_lora) */
  /* sizes */
  size_t h, inter, d, hq, hkv, hk, hv, dk, dv, kd, vd, cd, kconv, f, vocab, vocab_pad;
  size_t m_attn; /* Hq·2D + 2·Hkv·D */
  size_t m_zba;  /* Hv·dv + 2·Hv padded to 8 */
  /* weights */
  void *wbuf;            /* the one weight allocation */
  size_t wbytes;         /* its size */
  bf16_t *embed;         /* [vocab, H] */
  bf16_t *lm_head;       /* [vocab_pad, H] (== embed when tied and vocab % 8 == 0) */
  float *final_norm;     /* [H] */
  float *inv_freq;       /* [F] rotary inverse frequencies */
  struct dlayer *layers; /* [n_layers] */
  /* arena */
  void *abuf;           /* the scratch allocation */
  size_t abytes;        /* its size */
  int32_t *ids, *pos;   /* [T], [3, T] */
  float *cos_t, *sin_t; /* [T, F] */
  float *hres;          /* [T, H] residual stream */
  bf16_t *a;            /* [T, H] normed GEMM input */
  float *proj;          /* [T, max(m_attn, conv_dim, 2I)] projection output */
  float *zba;           /* [T, m_zba] */
  float *convout;       /* [T, conv_dim] */
  float *beta, *g;      /* [T, Hv] */
  float *gout;          /* [T, Hv, dv] */
  void *gdn_scratch;    /* exc_gdn_chunked_scratch_bytes(T, S) */
  bf16_t *q, *gate;     /* [T, Hq, D] */
  bf16_t *knew, *vnew;  /* [T, Hkv, D] */
  bf16_t *mix;      /* [T, max(Hq·D, Hv·dv, I)] bf16 GEMM input (attn / gated norm / SwiGLU) */
  float *win;       /* [S, K−1, conv_dim] conv windows out */
  float *hid;       /* [T, H] final-norm hidden */
  bf16_t *hsel;     /* [R, H] bf16 readout rows */
  float *logits;    /* [R, vocab_pad] */
  int32_t *sel_ids; /* [max(max_label_ids, R)] label ids / log-prob targets */
  float *sel_out;   /* [R, max_label_ids] label logits / [R] log-probs */
  void *lp_scratch; /* exc_lm_logprob_scratch_bytes(R, LP_CHUNK) */
  size_t last_t;    /* rows of the last forward (0: none yet) */
  /* pool */
  void *pbuf;                /* the snapshot allocation */
  size_t pbytes, snap_bytes; /* its size, one slot's */
  struct slot *slots;        /* [n_snapshots] */
  /* host staging */
  int32_t *h_ids, *h_pos;    /* pinned [T], [3, T] */
  struct exc_attn_seq *aseq; /* [S] */
  struct exc_gdn_seq *gseq;  /* [S] */
  struct exc_conv_seq *cseq; /* [S] */
  size_t *starts;            /* [S] first packed row of each sequence */
  /* profiling (exc_qwen35_profile_enable) */
  bool prof_on;                   /* record an event after every op */
  cudaEvent_t *prof_ev;           /* [PROF_EVENTS] */
  uint8_t *prof_cat;              /* [PROF_EVENTS] op kind of the interval ending at event i */
  int prof_n;                     /* events recorded in the current forward */
  struct exc_qwen35_profile prof; /* sums */
};

enum { PROF_EVENTS = 4096, LP_CHUNK = 16384 };

/* Records the end of an op of kind `cat` (profiling only). */
static void prof(struct exc_qwen35 *e, enum exc_qwen35_op cat) {
  if (!e->prof_on || e->prof_n >= PROF_EVENTS)
    return;
  if (cudaEventRecord(e->prof_ev[e->prof_n], e->stream) == cudaSuccess)
    e->prof_cat[e->prof_n++] = (uint8_t)cat;
}

static size_t align_up(size_t b) {
  return (b + ALIGN_BYTES - 1) / ALIGN_BYTES * ALIGN_BYTES;
}

static size_t zmax(size_t a, size_t b) {
  return a > b ? a : b;
}

void exc_qwen35_limits_default(struct exc_qwen35_limits *lim) {
  lim->max_tokens = 8192;
  lim->max_seqs = 64;
  lim->max_ctx = 8192;
  lim->n_snapshots = 4;
  lim->max_readouts = 64;
  lim->max_label_ids = 1024;
  lim->numerics = EXC_NUMERICS_REF_BF16;
}

/* True when the forward rounds activations as the bf16 reference (EXC_NUMERICS_REF_BF16). */
static bool ref_bf16(const struct exc_qwen35 *e) {
  return e->lim.numerics == EXC_NUMERICS_REF_BF16;
}

int exc_qwen35_set_numerics(struct exc_qwen35 *e, enum exc_qwen35_numerics numerics) {
  if (numerics != EXC_NUMERICS_REF_BF16 && numerics != EXC_NUMERICS_FP32_RESIDUAL)
    return -EINVAL;
  e->lim.numerics = numerics;
  return 0;
}

const char *exc_qwen35_numerics_name(enum exc_qwen35_numerics numerics) {
  return numerics == EXC_NUMERICS_REF_BF16        ? "ref-bf16"
         : numerics == EXC_NUMERICS_FP32_RESIDUAL ? "fp32-residual"
                                                  : "?";
}

int exc_qwen35_numerics_parse(const char *name, enum exc_qwen35_numerics *ret_numerics) {
  if (!strcmp(name, "ref-bf16"))
    *ret_numerics = EXC_NUMERICS_REF_BF16;
  else if (!strcmp(name, "fp32-residual"))
    *ret_numerics = EXC_NUMERICS_FP32_RESIDUAL;
  else
    return -EINVAL;
  return 0;
}

cudaStream_t exc_qwen35_stream(const struct exc_qwen35 *e) {
  return e->stream;
}

bool exc_qwen35_healthy(const struct exc_qwen35 *e) {
  return !e->sticky;
}

/* A CUDA failure: remember whether the context is lost. */
static int cuda_fail(struct exc_qwen35 *e, int r, struct cm_diag *diag, const char *what) {
  if (r == -CM_ECUDA && exc_cuda_sticky())
    e->sticky = true;
  return cm_diag_set(diag, r, "cuda engine: %s failed (%s)%s", what, cm_strerror(r),
                     e->sticky ? "; sticky device error, the executor must retire" : "");
}

/* ---- size tables ---- */

/* A bump allocator over a size table: first pass counts (base NULL), second pass hands out. */
struct bump {
  char *base; /* device base, or NULL while counting */
  size_t off; /* bytes used */
};

static void *take(struct bump *b, size_t n_bytes) {
  void *p = b->base ? b->base + b->off : NULL;
  b->off += align_up(n_bytes ? n_bytes : 1);
  return p;
}

static void layout_weights(struct exc_qwen35 *e, struct bump *b) {
  size_t h = e->h, bf = sizeof(bf16_t), f4 = sizeof(float);
  e->embed = take(b, e->vocab * h * bf);
  bool share = e->cfg.tied && e->vocab_pad == e->vocab;
  e->lm_head = share ? e->embed : take(b, e->vocab_pad * h * bf);
  e->final_norm = take(b, h * f4);
  e->inv_freq = take(b, e->f * f4);
  for (int i = 0; i < e->cfg.n_layers; i++) {
    struct dlayer *l = &e->layers[i];
    l->full_attn = e->cfg.full_attn[i];
    l->in_norm = take(b, h * f4);
    l->post_norm = take(b, h * f4);
    l->w_gu = take(b, 2 * e->inter * h * bf);
    l->w_down = take(b, h * e->inter * bf);
    if (l->full_attn) {
      l->w_qkv = take(b, e->m_attn * h * bf);
      l->w_o = take(b, h * e->hq * e->d * bf);
      l->q_norm = take(b, e->d * f4);
      l->k_norm = take(b, e->d * f4);
    } else {
      l->w_qkv = take(b, e->cd * h * bf);
      l->w_zba = take(b, e->m_zba * h * bf);
      l->w_o = take(b, h * e->vd * bf);
      l->conv = take(b, e->cd * e->kconv * f4);
      l->a_log = take(b, e->hv * f4);
      l->dt_bias = take(b, e->hv * f4);
      l->gdn_norm = take(b, e->dv * f4);
    }
  }
}

static void layout_arena(struct exc_qwen35 *e, struct bump *b) {
  size_t t = e->lim.max_tokens, s = e->lim.max_seqs, r = e->lim.max_readouts;
  size_t f4 = sizeof(float), bf = sizeof(bf16_t);
  struct ex_gdn_dims dims = {e->hk, e->hv, e->dk, e->dv};
  e->ids = take(b, t * sizeof(int32_t));
  e->pos = take(b, 3 * t * sizeof(int32_t));
  e->cos_t = take(b, t * e->f * f4);
  e->sin_t = take(b, t * e->f * f4);
  e->hres = take(b, t * e->h * f4);
  e->a = take(b, t * e->h * bf);
  e->proj = take(b, t * zmax(zmax(e->m_attn, e->cd), zmax(2 * e->inter, e->h)) * f4);
  e->zba = take(b, t * e->m_zba * f4);
  e->convout = take(b, t * e->cd * f4);
  e->beta = take(b, t * e->hv * f4);
  e->g = take(b, t * e->hv * f4);
  e->gout = take(b, t * e->vd * f4);
  e->gdn_scratch = take(b, exc_gdn_chunked_scratch_bytes(t, (int)s, &dims));
  e->q = take(b, t * e->hq * e->d * bf);
  e->gate = take(b, t * e->hq * e->d * bf);
  e->knew = take(b, t * e->hkv * e->d * bf);
  e->vnew = take(b, t * e->hkv * e->d * bf);
  e->mix = take(b, t * zmax(zmax(e->hq * e->d, e->vd), e->inter) * bf);
  e->win = take(b, s * (e->kconv - 1) * e->cd * f4);
  e->hid = take(b, t * e->h * f4);
  e->hsel = take(b, r * e->h * bf);
  e->logits = take(b, r * e->vocab_pad * f4);
  e->sel_ids = take(b, zmax(e->lim.max_label_ids, r) * sizeof(int32_t));
  e->sel_out = take(b, r * e->lim.max_label_ids * f4);
  e->lp_scratch = take(b, exc_lm_logprob_scratch_bytes(r, LP_CHUNK));
}

/* One snapshot's layout at offset 0 (slot i adds i · snap_bytes). */
static void layout_slot(struct exc_qwen35 *e, struct slot *sl, struct bump *b) {
  size_t kv = e->lim.max_ctx * e->hkv * e->d * sizeof(bf16_t);
  for (int i = 0; i < e->cfg.n_layers; i++) {
    if (e->cfg.full_attn[i]) {
      sl->k[i] = take(b, kv);
      sl->v[i] = take(b, kv);
    } else {
      sl->conv[i] = take(b, (e->kconv - 1) * e->cd * sizeof(float));
      sl->s[i] = take(b, e->hv * e->dk * e->dv * sizeof(float));
    }
  }
}

/* ---- loading ---- */

struct wload {
  const struct cm_safetensors *st; /* checkpoint */
  const char *prefix;              /* text key prefix */
  float *tmp;                      /* host float32 staging, largest tensor */
  uint16_t *tmpb;                  /* host bf16 staging */
  struct cm_diag *diag;            /* error sink */
};

static int find_shaped(struct wload *w, const char *key, int n_dims, const int64_t *shape,
                       struct cm_tensor_view *v) {
  if (cm_safetensors_find(w->st, key, v) != 0)
    return cm_diag_set(w->diag, -CM_EMISSING, "tensor %s missing", key);
  bool ok = v->n_dims == n_dims;
  for (int i = 0; ok && i < n_dims; i++)
    ok = v->shape[i] == shape[i];
  if (!ok)
    return cm_diag_set(w->diag, -CM_ESHAPE, "%s: tensor %s has an unexpected shape", v->file, key);
  return 0;
}

/* Uploads a [rows, cols] matrix as bf16 at dst (BF16 bytes copied as stored). */
static int up_matrix(struct wload *w, const char *rel, bool with_prefix, int64_t rows, int64_t cols,
                     bf16_t *dst) {
  char key[256];
  snprintf(key, sizeof(key), "%s%s", with_prefix ? w->prefix : "", rel);
  struct cm_tensor_view v;
  int64_t shape[2] = {rows, cols};
  int r = find_shaped(w, key, 2, shape, &v);
  if (r)
    return r;
  const void *src = v.data;
  if (v.dtype != CM_DTYPE_BF16) {
    cm_tensor_to_f32(&v, w->tmp);
    for (int64_t i = 0; i < v.n_elems; i++)
      w->tmpb[i] = cm_f32_to_bf16(w->tmp[i]);
    src = w->tmpb;
  }
  return EXC_CUDA(cudaMemcpy(dst, src, (size_t)v.n_elems * 2, cudaMemcpyHostToDevice));
}

/* Uploads a tensor of n elements as float32 (its bf16 values exactly; F32 rounded to bf16 as the
 * bf16 oracle loads it, spec §2.2). */
static int up_vector(struct wload *w, const char *rel, int n_dims, const int64_t *shape,
                     float *dst) {
  char key[256];
  snprintf(key, sizeof(key), "%s%s", w->prefix, rel);
  struct cm_tensor_view v;
  int r = find_shaped(w, key, n_dims, shape, &v);
  if (r)
    return r;
  cm_tensor_to_f32(&v, w->tmp);
  for (int64_t i = 0; i < v.n_elems; i++)
    w->tmp[i] = cm_bf16_to_f32(cm_f32_to_bf16(w->tmp[i]));
  return EXC_CUDA(cudaMemcpy(dst, w->tmp, (size_t)v.n_elems * 4, cudaMemcpyHostToDevice));
}

static int load_weights(struct exc_qwen35 *e, const struct cm_safetensors *st,
                        struct cm_diag *diag) {
  static const char *const prefixes[] = {"model.language_model.", "model.", ""};
  struct wload w = {.st = st, .diag = diag};
  struct cm_tensor_view v;
  for (size_t i = 0; i < 3 && !w.prefix; i++) {
    char key[128];
    snprintf(key, sizeof(key), "%sembed_tokens.weight", prefixes[i]);
    if (cm_safetensors_find(st, key, &v) == 0)
      w.prefix = prefixes[i];
  }
  if (!w.prefix)
    return cm_diag_set(diag, -CM_EMISSING, "tensor embed_tokens.weight missing");
  size_t biggest = 0;
  for (size_t i = 0; i < cm_safetensors_count(st); i++) {
    cm_safetensors_at(st, i, &v);
    biggest = zmax(biggest, (size_t)v.n_elems);
  }
  w.tmp = malloc(biggest * sizeof(float) + 16);
  w.tmpb = malloc(biggest * sizeof(uint16_t) + 16);
  int r = 0;
  if (!w.tmp || !w.tmpb) {
    r = -ENOMEM;
    goto out;
  }
  int64_t h = (int64_t)e->h, vocab = (int64_t)e->vocab, in = (int64_t)e->inter;
  int64_t d = (int64_t)e->d, hq = (int64_t)e->hq, hkv = (int64_t)e->hkv;
  int64_t hv = (int64_t)e->hv, vd = (int64_t)e->vd, cd = (int64_t)e->cd, dvv = (int64_t)e->dv;
  r = EXC_CUDA(cudaMemset(e->wbuf, 0, e->wbytes)); /* padding rows are zero */
  if (r)
    goto out;
  if ((r = up_matrix(&w, "embed_tokens.weight", true, vocab, h, e->embed)))
    goto out;
  if (e->lm_head != e->embed) {
    if (e->cfg.tied)
      r = EXC_CUDA(cudaMemcpy(e->lm_head, e->embed, e->vocab * e->h * 2, cudaMemcpyDeviceToDevice));
    else
      r = up_matrix(&w, "lm_head.weight", false, vocab, h, e->lm_head);
    if (r)
      goto out;
  }
  if ((r = up_vector(&w, "norm.weight", 1, &h, e->final_norm)))
    goto out;
  float *inv = malloc(e->f * sizeof(float) + 4);
  if (!inv) {
    r = -ENOMEM;
    goto out;
  }
  exc_rope_inv_freq(e->cfg.rot_dims, e->cfg.rope_theta, inv);
  r = EXC_CUDA(cudaMemcpy(e->inv_freq, inv, e->f * sizeof(float), cudaMemcpyHostToDevice));
  free(inv);
  if (r)
    goto out;
  for (int i = 0; i < e->cfg.n_layers && !r; i++) {
    struct dlayer *l = &e->layers[i];
    char rel[160];
#define REL(name) (snprintf(rel, sizeof(rel), "layers.%d.%s", i, name), rel)
    if ((r = up_vector(&w, REL("input_layernorm.weight"), 1, &h, l->in_norm)) ||
        (r = up_vector(&w, REL("post_attention_layernorm.weight"), 1, &h, l->post_norm)) ||
        (r = up_matrix(&w, REL("mlp.gate_proj.weight"), true, in, h, l->w_gu)) ||
        (r = up_matrix(&w, REL("mlp.up_proj.weight"), true, in, h, l->w_gu + e->inter * e->h)) ||
        (r = up_matrix(&w, REL("mlp.down_proj.weight"), true, h, in, l->w_down)))
      break;
    if (l->full_attn) {
      if ((r = up_matrix(&w, REL("self_attn.q_proj.weight"), true, hq * 2 * d, h, l->w_qkv)) ||
          (r = up_matrix(&w, REL("self_attn.k_proj.weight"), true, hkv * d, h,
                         l->w_qkv + (size_t)(hq * 2 * d) * e->h)) ||
          (r = up_matrix(&w, REL("self_attn.v_proj.weight"), true, hkv * d, h,
                         l->w_qkv + (size_t)(hq * 2 * d + hkv * d) * e->h)) ||
          (r = up_matrix(&w, REL("self_attn.o_proj.weight"), true, h, hq * d, l->w_o)) ||
          (r = up_vector(&w, REL("self_attn.q_norm.weight"), 1, &d, l->q_norm)) ||
          (r = up_vector(&w, REL("self_attn.k_norm.weight"), 1, &d, l->k_norm)))
        break;
    } else {
      int64_t cshape[3] = {cd, 1, (int64_t)e->kconv};
      if ((r = up_matrix(&w, REL("linear_attn.in_proj_qkv.weight"), true, cd, h, l->w_qkv)) ||
          (r = up_matrix(&w, REL("linear_attn.in_proj_z.weight"), true, vd, h, l->w_zba)) ||
          (r = up_matrix(&w, REL("linear_attn.in_proj_b.weight"), true, hv, h,
                         l->w_zba + (size_t)vd * e->h)) ||
          (r = up_matrix(&w, REL("linear_attn.in_proj_a.weight"), true, hv, h,
                         l->w_zba + (size_t)(vd + hv) * e->h)) ||
          (r = up_matrix(&w, REL("linear_attn.out_proj.weight"), true, h, vd, l->w_o)) ||
          (r = up_vector(&w, REL("linear_attn.conv1d.weight"), 3, cshape, l->conv)) ||
          (r = up_vector(&w, REL("linear_attn.A_log"), 1, &hv, l->a_log)) ||
          (r = up_vector(&w, REL("linear_attn.dt_bias"), 1, &hv, l->dt_bias)) ||
          (r = up_vector(&w, REL("linear_attn.norm.weight"), 1, &dvv, l->gdn_norm)))
        break;
    }
#undef REL
  }
out:
  free(w.tmp);
  free(w.tmpb);
  return r;
}

/* ---- start-up ---- */

static int prepare_gemms(struct exc_qwen35 *e) {
  struct {
    size_t k, m;
    enum exc_dtype t;
    bool acc;
  } shapes[] = {
      {e->h, e->m_attn, EXC_DTYPE_F32, false},
      {e->hq * e->d, e->h, EXC_DTYPE_F32, true},
      {e->h, e->cd, EXC_DTYPE_F32, false},
      {e->h, e->m_zba, EXC_DTYPE_F32, false},
      {e->vd, e->h, EXC_DTYPE_F32, true},
      {e->h, 2 * e->inter, EXC_DTYPE_F32, false},
      {e->inter, e->h, EXC_DTYPE_F32, true},
      {e->h, e->vocab_pad, EXC_DTYPE_F32, false},
      {e->h, LP_CHUNK, EXC_DTYPE_BF16, false},
      {e->h, exc_gemm_pad(e->vocab) % LP_CHUNK ? exc_gemm_pad(e->vocab) % LP_CHUNK : LP_CHUNK,
       EXC_DTYPE_BF16, false},
      /* ref-bf16 only (last, so that fp32-residual never depends on them): the output
       * projections into a scratch, rounded before the residual add; a later switch to ref-bf16
       * chooses them on first use */
      {e->hq * e->d, e->h, EXC_DTYPE_F32, false},
      {e->vd, e->h, EXC_DTYPE_F32, false},
      {e->inter, e->h, EXC_DTYPE_F32, false},
      /* ref-bf16 without an adapter: the gate/up and output projections written in bf16 */
      {e->h, 2 * e->inter, EXC_DTYPE_BF16, false},
      {e->h, e->cd, EXC_DTYPE_BF16, false},
      {e->hq * e->d, e->h, EXC_DTYPE_BF16, false},
      {e->vd, e->h, EXC_DTYPE_BF16, false},
      {e->inter, e->h, EXC_DTYPE_BF16, false},
  };
  size_t n_shapes = sizeof(shapes) / sizeof(shapes[0]);
  if (!ref_bf16(e))
    n_shapes -= 8;
  for (size_t i = 0; i < n_shapes; i++) {
    int r = exc_gemm_prepare(e->gemm, shapes[i].k, shapes[i].m, shapes[i].t, shapes[i].acc);
    if (r)
      return r;
  }
  return 0;
}

void exc_qwen35_free(struct exc_qwen35 *e) {
  if (!e)
    return;
  if (e->stream)
    cudaStreamSynchronize(e->stream);
  if (e->slots)
    for (size_t i = 0; i < e->lim.n_snapshots; i++) {
      free(e->slots[i].k);
      free(e->slots[i].v);
      free(e->slots[i].conv);
      free(e->slots[i].s);
    }
  for (int i = 0; e->prof_ev && i < PROF_EVENTS; i++)
    if (e->prof_ev[i])
      cudaEventDestroy(e->prof_ev[i]);
  free(e->prof_ev);
  free(e->prof_cat);
  free(e->slots);
  free(e->layers);
  free(e->aseq);
  free(e->gseq);
  free(e->cseq);
  free(e->starts);
  if (e->h_ids)
    cudaFreeHost(e->h_ids);
  if (e->h_pos)
    cudaFreeHost(e->h_pos);
  exc_lora_free(e->lora);
  exc_gemm_free(e->gemm);
  if (e->wbuf)
    cudaFree(e->wbuf);
  if (e->abuf)
    cudaFree(e->abuf);
  if (e->pbuf)
    cudaFree(e->pbuf);
  if (e->stream)
    cudaStreamDestroy(e->stream);
  free(e);
}

static int reserve(struct exc_qwen35 *e, void **ret, size_t n_bytes, const char *what,
                   struct cm_diag *diag) {
  cudaError_t ce = cudaMalloc(ret, n_bytes);
  if (ce != cudaSuccess) {
    (void)cudaGetLastError();
    return cm_diag_set(diag, -CM_ECUDA, "cuda engine: cannot reserve %zu bytes for the %s: %s",
                       n_bytes, what, cudaGetErrorString(ce));
  }
  (void)e;
  return 0;
}

int exc_qwen35_new(const struct ex_qwen35_config *cfg, const struct cm_safetensors *st, int device,
                   const struct exc_qwen35_limits *lim, struct exc_qwen35 **ret_engine,
                   struct cm_diag *diag) {
  struct exc_qwen35_limits def;
  exc_qwen35_limits_default(&def);
  if (!lim)
    lim = &def;
  if (!lim->max_tokens || !lim->max_seqs || lim->max_seqs > EXC_MAX_SEQS || !lim->max_ctx ||
      !lim->n_snapshots || !lim->max_readouts || !lim->max_label_ids ||
      lim->max_tokens > (1u << 24) ||
      (lim->numerics != EXC_NUMERICS_REF_BF16 && lim->numerics != EXC_NUMERICS_FP32_RESIDUAL))
    return cm_diag_set(diag, -EINVAL, "cuda engine: invalid limits");
  struct exc_qwen35 *e = calloc(1, sizeof(*e));
  if (!e)
    return -ENOMEM;
  int r = 0;
  e->cfg = *cfg;
  e->lim = *lim;
  e->device = device;
  e->h = (size_t)cfg->hidden_size;
  e->inter = (size_t)cfg->intermediate_size;
  e->d = (size_t)cfg->head_dim;
  e->hq = (size_t)cfg->n_heads;
  e->hkv = (size_t)cfg->n_kv_heads;
  e->hk = (size_t)cfg->lin_k_heads;
  e->hv = (size_t)cfg->lin_v_heads;
  e->dk = (size_t)cfg->lin_dk;
  e->dv = (size_t)cfg->lin_dv;
  e->kd = e->hk * e->dk;
  e->vd = e->hv * e->dv;
  e->cd = 2 * e->kd + e->vd;
  e->kconv = (size_t)cfg->conv_kernel;
  e->f = (size_t)cfg->rot_dims / 2;
  e->vocab = (size_t)cfg->vocab_size;
  e->vocab_pad = exc_gemm_pad(e->vocab);
  e->m_attn = e->hq * 2 * e->d + 2 * e->hkv * e->d;
  e->m_zba = exc_gemm_pad(e->vd + 2 * e->hv);
  if (e->h % 8 || e->inter % 8 || (e->hq * e->d) % 8 || e->vd % 8 || e->cd % 8 || e->m_attn % 8 ||
      e->kconv < 2) {
    r = cm_diag_set(diag, -CM_EUNSUPPORTED,
                    "cuda engine: hidden, intermediate, attention and GDN widths must be "
                    "multiples of 8 (bf16 GEMM rows of 16 bytes)");
    goto fail;
  }
  e->layers = calloc((size_t)cfg->n_layers, sizeof(*e->layers));
  e->slots = calloc(lim->n_snapshots, sizeof(*e->slots));
  e->aseq = calloc(lim->max_seqs, sizeof(*e->aseq));
  e->gseq = calloc(lim->max_seqs, sizeof(*e->gseq));
  e->cseq = calloc(lim->max_seqs, sizeof(*e->cseq));
  e->starts = calloc(lim->max_seqs + 1, sizeof(*e->starts));
  if (!e->layers || !e->slots || !e->aseq || !e->gseq || !e->cseq || !e->starts) {
    r = -ENOMEM;
    goto fail;
  }
  for (size_t i = 0; i < lim->n_snapshots; i++) {
    struct slot *sl = &e->slots[i];
    size_t nl = (size_t)cfg->n_layers;
    sl->k = calloc(nl, sizeof(*sl->k));
    sl->v = calloc(nl, sizeof(*sl->v));
    sl->conv = calloc(nl, sizeof(*sl->conv));
    sl->s = calloc(nl, sizeof(*sl->s));
    if (!sl->k || !sl->v || !sl->conv || !sl->s) {
      r = -ENOMEM;
      goto fail;
    }
    sl->st.slot = (int)i;
  }
  if ((r = EXC_CUDA(cudaSetDevice(device))) ||
      (r = EXC_CUDA(cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking)))) {
    r = cm_diag_set(diag, r, "cuda engine: device %d unavailable", device);
    goto fail;
  }
  if ((r = exc_gemm_new(32u << 20, &e->gemm)))
    goto fail;
  /* size tables, then the three reservations */
  struct bump b = {0};
  layout_weights(e, &b);
  e->wbytes = b.off;
  if ((r = reserve(e, &e->wbuf, e->wbytes, "weights", diag)))
    goto fail;
  b = (struct bump){.base = e->wbuf};
  layout_weights(e, &b);
  b = (struct bump){0};
  layout_arena(e, &b);
  e->abytes = b.off;
  if ((r = reserve(e, &e->abuf, e->abytes, "scratch arena", diag)))
    goto fail;
  b = (struct bump){.base = e->abuf};
  layout_arena(e, &b);
  b = (struct bump){0};
  layout_slot(e, &e->slots[0], &b);
  e->snap_bytes = b.off;
  e->pbytes = e->snap_bytes * lim->n_snapshots;
  if ((r = reserve(e, &e->pbuf, e->pbytes, "snapshot pool", diag)))
    goto fail;
  for (size_t i = 0; i < lim->n_snapshots; i++) {
    b = (struct bump){.base = (char *)e->pbuf + i * e->snap_bytes};
    layout_slot(e, &e->slots[i], &b);
  }
  if ((r = EXC_CUDA(cudaMallocHost((void **)&e->h_ids, lim->max_tokens * sizeof(int32_t)))) ||
      (r = EXC_CUDA(cudaMallocHost((void **)&e->h_pos, 3 * lim->max_tokens * sizeof(int32_t)))))
    goto fail;
  if ((r = load_weights(e, st, diag)))
    goto fail;
  if ((r = prepare_gemms(e))) {
    r = cm_diag_set(diag, r, "cuda engine: no GEMM algorithm for a projection shape");
    goto fail;
  }
  if ((r = EXC_CUDA(cudaDeviceSynchronize())))
    goto fail;
  *ret_engine = e;
  return 0;
fail:
  if (r == -CM_ECUDA && !diag->msg)
    cm_diag_set(diag, r, "cuda engine: start-up failed");
  exc_qwen35_free(e);
  return r;
}

void exc_qwen35_memory(const struct exc_qwen35 *e, struct exc_qwen35_memory *ret_mem) {
  ret_mem->weights_bytes = e->wbytes;
  ret_mem->arena_bytes = e->abytes;
  ret_mem->pool_bytes = e->pbytes;
  ret_mem->snapshot_bytes = e->snap_bytes;
}

/* ---- snapshots ---- */

int exc_qwen35_state_acquire(struct exc_qwen35 *e, struct exc_qwen35_state **ret_state) {
  for (size_t i = 0; i < e->lim.n_snapshots; i++)
    if (!e->slots[i].used) {
      e->slots[i].used = true;
      e->slots[i].st.n_tokens = 0;
      e->slots[i].st.rope_delta = 0;
      *ret_state = &e->slots[i].st;
      return 0;
    }
  return -CM_ELIMIT;
}

void exc_qwen35_state_release(struct exc_qwen35 *e, struct exc_qwen35_state *s) {
  if (s)
    e->slots[s->slot].used = false;
}

int exc_qwen35_state_clone(struct exc_qwen35 *e, const struct exc_qwen35_state *src,
                           struct exc_qwen35_state *dst) {
  if (src->slot == dst->slot)
    return -EINVAL;
  const struct slot *a = &e->slots[src->slot];
  struct slot *b = &e->slots[dst->slot];
  size_t kv = src->n_tokens * e->hkv * e->d * sizeof(bf16_t);
  int r = 0;
  for (int i = 0; i < e->cfg.n_layers && !r; i++) {
    if (e->cfg.full_attn[i]) {
      if (kv)
        r = EXC_CUDA(cudaMemcpyAsync(b->k[i], a->k[i], kv, cudaMemcpyDeviceToDevice, e->stream));
      if (!r && kv)
        r = EXC_CUDA(cudaMemcpyAsync(b->v[i], a->v[i], kv, cudaMemcpyDeviceToDevice, e->stream));
    } else {
      r = EXC_CUDA(cudaMemcpyAsync(b->conv[i], a->conv[i], (e->kconv - 1) * e->cd * sizeof(float),
                                   cudaMemcpyDeviceToDevice, e->stream));
      if (!r)
        r = EXC_CUDA(cudaMemcpyAsync(b->s[i], a->s[i], e->hv * e->dk * e->dv * sizeof(float),
                                     cudaMemcpyDeviceToDevice, e->stream));
    }
  }
  if (r) {
    if (exc_cuda_sticky())
      e->sticky = true;
    return r;
  }
  dst->n_tokens = src->n_tokens;
  dst->rope_delta = src->rope_delta;
  return 0;
}

/* ---- forward ---- */

/* ref-bf16 only: rounds n rows of `width` float32 values (row stride ld) to bf16 in place, where
 * the bf16 reference rounds an op's output; fp32-residual: nothing. */
static int round_rows(struct exc_qwen35 *e, float *x, size_t ld, size_t n, size_t width) {
  return ref_bf16(e) ? exc_round_bf16(e->stream, x, ld, n, width) : 0;
}

/* The LoRA branches of layer li at one GEMM site, added to that GEMM's output (nothing without an
 * adapter). */
static int lora_site(struct exc_qwen35 *e, int li, enum exc_lora_site site, const bf16_t *x,
                     size_t ld_x, float *y, size_t ld_y, size_t t) {
  return e->lora ? exc_lora_apply(e->lora, e->stream, li, site, x, ld_x, y, ld_y, t) : 0;
}

/* An input projection's LoRA (y [t, ld_y], every column): ref-bf16 y = bf16(bf16(x·wᵀ) +
 * lora) as PEFT on a bf16 base (spec/jemm.md §6.3); fp32-residual y += lora. Nothing without an
 * adapter. */
static int lora_in(struct exc_qwen35 *e, int li, enum exc_lora_site site, const bf16_t *x,
                   size_t ld_x, float *y, size_t ld_y, size_t t) {
  if (!e->lora)
    return 0;
  int r = round_rows(e, y, ld_y, t, ld_y);
  if (!r)
    r = lora_site(e, li, site, x, ld_x, y, ld_y, t);
  return r ? r : round_rows(e, y, ld_y, t, ld_y);
}

/* An output projection (o_proj, out_proj, down_proj: x [t, k] bf16 · w [H, k]ᵀ) added to the
 * residual stream: fp32-residual accumulates into it in the GEMM (h += x·wᵀ, then h += lora);
 * ref-bf16 writes the product to the projection scratch and adds h = bf16(h + bf16(x·wᵀ)), as the
 * reference (with an adapter: h = bf16(h + bf16(bf16(x·wᵀ) + lora))). */
static int out_proj(struct exc_qwen35 *e, int li, enum exc_lora_site site, const bf16_t *x,
                    size_t k, const bf16_t *w, size_t t) {
  int r;
  if (!ref_bf16(e)) {
    r = exc_gemm(e->gemm, e->stream, x, k, w, e->hres, e->h, EXC_DTYPE_F32, true, t, k, e->h);
    return r ? r : lora_site(e, li, site, x, k, e->hres, e->h, t);
  }
  if (!e->lora) { /* the GEMM rounds x·Wᵀ to bf16 itself, as the reference's linear does */
    bf16_t *y = (bf16_t *)e->proj;
    r = exc_gemm(e->gemm, e->stream, x, k, w, y, e->h, EXC_DTYPE_BF16, false, t, k, e->h);
    return r ? r : exc_add_bf16_round(e->stream, e->hres, y, e->h, t, e->h);
  }
  r = exc_gemm(e->gemm, e->stream, x, k, w, e->proj, e->h, EXC_DTYPE_F32, false, t, k, e->h);
  if (!r && !(r = round_rows(e, e->proj, e->h, t, e->h)))
    r = lora_site(e, li, site, x, k, e->proj, e->h, t);
  return r ? r : exc_add_round_bf16(e->stream, e->hres, e->proj, e->h, t, e->h);
}

static int attn_layer(struct exc_qwen35 *e, int li, const struct exc_qwen35_seq *seqs, int ns,
                      size_t t) {
  const struct dlayer *l = &e->layers[li];
  size_t qw = e->hq * 2 * e->d, kw = e->hkv * e->d;
  int r;
  if ((r = exc_gemm(e->gemm, e->stream, e->a, e->h, l->w_qkv, e->proj, e->m_attn, EXC_DTYPE_F32,
                    false, t, e->h, e->m_attn)) ||
      /* ref-bf16: the prep kernel reads the projection as R(x); lora_in rounds itself */
      (r = lora_in(e, li, EXC_LORA_ATTN_IN, e->a, e->h, e->proj, e->m_attn, t)))
    return r;
  prof(e, EXC_OP_GEMM_IN);
  if ((r = (ref_bf16(e) ? exc_attn_prep_rounded : exc_attn_prep)(
           e->stream, e->proj, e->proj + qw, e->proj + qw + kw, e->m_attn, l->q_norm, l->k_norm,
           e->cfg.rms_eps, e->cos_t, e->sin_t, e->cfg.rot_dims, e->q, e->gate, e->knew, e->vnew, t,
           (int)e->hq, (int)e->hkv, (int)e->d)))
    return r;
  prof(e, EXC_OP_ATTN_PREP);
  for (int i = 0; i < ns; i++) {
    const struct exc_qwen35_state *st = seqs[i].state;
    const struct slot *sl = st ? &e->slots[st->slot] : NULL;
    struct exc_attn_seq *a = &e->aseq[i];
    a->q_start = (int32_t)e->starts[i];
    a->n_q = (int32_t)seqs[i].n;
    a->n_prefix = st ? (int32_t)st->n_tokens : 0;
    a->k_prefix = sl ? sl->k[li] : NULL;
    a->v_prefix = sl ? sl->v[li] : NULL;
    a->k_new = e->knew + e->starts[i] * kw;
    a->v_new = e->vnew + e->starts[i] * kw;
  }
  if ((r = exc_attention_gated(e->stream, e->q, e->gate, e->mix, e->aseq, ns, (int)e->hq,
                               (int)e->hkv, (int)e->d, (float)(1.0 / sqrt((double)e->d)))))
    return r;
  prof(e, EXC_OP_ATTENTION);
  /* advancing sequences keep their new K/V rows */
  for (int i = 0; i < ns && !r; i++) {
    if (!seqs[i].advance)
      continue;
    const struct slot *sl = &e->slots[seqs[i].state->slot];
    size_t off = seqs[i].state->n_tokens * kw, bytes = seqs[i].n * kw * sizeof(bf16_t);
    r = EXC_CUDA(cudaMemcpyAsync(sl->k[li] + off, e->knew + e->starts[i] * kw, bytes,
                                 cudaMemcpyDeviceToDevice, e->stream));
    if (!r)
      r = EXC_CUDA(cudaMemcpyAsync(sl->v[li] + off, e->vnew + e->starts[i] * kw, bytes,
                                   cudaMemcpyDeviceToDevice, e->stream));
  }
  if (r)
    return r;
  prof(e, EXC_OP_STATE_COPY);
  r = out_proj(e, li, EXC_LORA_ATTN_OUT, e->mix, e->hq * e->d, l->w_o, t);
  prof(e, EXC_OP_GEMM_OUT);
  return r;
}

static int gdn_layer(struct exc_qwen35 *e, int li, const struct exc_qwen35_seq *seqs, int ns,
                     size_t t) {
  const struct dlayer *l = &e->layers[li];
  struct ex_gdn_dims dims = {e->hk, e->hv, e->dk, e->dv};
  size_t wn = (e->kconv - 1) * e->cd;
  int r;
  /* ref-bf16 without an adapter: in_proj_qkv written in bf16 by the GEMM (the reference's rounded
   * projection) and read so by the convolution */
  bool qkv16 = ref_bf16(e) && !e->lora;
  if ((r = exc_gemm(e->gemm, e->stream, e->a, e->h, l->w_qkv, e->proj, e->cd,
                    qkv16 ? EXC_DTYPE_BF16 : EXC_DTYPE_F32, false, t, e->h, e->cd)) ||
      (r = exc_gemm(e->gemm, e->stream, e->a, e->h, l->w_zba, e->zba, e->m_zba, EXC_DTYPE_F32,
                    false, t, e->h, e->m_zba)) ||
      (!qkv16 && (r = round_rows(e, e->proj, e->cd, t, e->cd))) ||
      (r = round_rows(e, e->zba, e->m_zba, t, e->m_zba)) ||
      (r = lora_in(e, li, EXC_LORA_GDN_QKV, e->a, e->h, e->proj, e->cd, t)) ||
      (r = lora_in(e, li, EXC_LORA_GDN_ZBA, e->a, e->h, e->zba, e->m_zba, t)))
    return r;
  prof(e, EXC_OP_GEMM_IN);
  for (int i = 0; i < ns; i++) {
    const struct exc_qwen35_state *st = seqs[i].state;
    bool populated = st && st->n_tokens > 0;
    const struct slot *sl = st ? &e->slots[st->slot] : NULL;
    e->cseq[i] =
        (struct exc_conv_seq){.start = (int32_t)e->starts[i],
                              .n = (int32_t)seqs[i].n,
                              .window_in = populated ? sl->conv[li] : NULL,
                              .window_out = seqs[i].advance ? e->win + (size_t)i * wn : NULL};
    e->gseq[i] = (struct exc_gdn_seq){.start = (int32_t)e->starts[i],
                                      .n = (int32_t)seqs[i].n,
                                      .state_in = populated ? sl->s[li] : NULL,
                                      .state_out = seqs[i].advance ? sl->s[li] : NULL};
  }
  /* ref-bf16: the convolution and the SiLU each round (spec §4.2), inside the kernel */
  if (qkv16)
    r = exc_causal_conv1d_silu_bf16(e->stream, (const bf16_t *)e->proj, l->conv, e->convout,
                                    e->cseq, ns, e->cd, e->kconv);
  else
    r = (ref_bf16(e) ? exc_causal_conv1d_silu_rounded : exc_causal_conv1d_silu)(
        e->stream, e->proj, l->conv, e->convout, e->cseq, ns, e->cd, e->kconv);
  if (r)
    return r;
  prof(e, EXC_OP_CONV);
  for (int i = 0; i < ns && !r; i++)
    if (seqs[i].advance)
      r = EXC_CUDA(cudaMemcpyAsync(e->slots[seqs[i].state->slot].conv[li], e->win + (size_t)i * wn,
                                   wn * sizeof(float), cudaMemcpyDeviceToDevice, e->stream));
  if (r)
    return r;
  prof(e, EXC_OP_STATE_COPY);
  if ((r = exc_gdn_prepare(e->stream, e->convout, e->cd, e->zba + e->vd, e->zba + e->vd + e->hv,
                           e->m_zba, l->a_log, l->dt_bias, e->beta, e->g, t, &dims)) ||
      (r = round_rows(e, e->beta, e->hv, t, e->hv)))
    return r;
  prof(e, EXC_OP_GDN_PREPARE);
  if ((r = exc_gdn_chunked(e->stream, e->convout, e->cd, e->beta, e->g, e->gout, e->gseq, ns, &dims,
                           e->gdn_scratch)))
    return r;
  prof(e, EXC_OP_GDN);
  /* ref-bf16: the GDN output rounded as read, then three roundings (spec §4.8) */
  if ((r = (ref_bf16(e) ? exc_gated_rms_norm_rounded : exc_gated_rms_norm)(
           e->stream, e->gout, e->zba, e->m_zba, l->gdn_norm, e->cfg.rms_eps, e->mix, t, e->hv,
           e->dv)))
    return r;
  prof(e, EXC_OP_GATED_NORM);
  r = out_proj(e, li, EXC_LORA_GDN_OUT, e->mix, e->vd, l->w_o, t);
  prof(e, EXC_OP_GEMM_OUT);
  return r;
}

static int mlp(struct exc_qwen35 *e, const struct dlayer *l, size_t t) {
  int r, li = (int)(l - e->layers);
  if ((r = exc_rms_norm(e->stream, e->hres, NULL, l->post_norm, e->cfg.rms_eps, NULL, e->a, e->h, t,
                        e->h)))
    return r;
  prof(e, EXC_OP_NORM);
  /* ref-bf16 without an adapter: gate and up written in bf16 by the GEMM (the reference's rounded
   * gate_proj and up_proj outputs), half the traffic of the float32 scratch; otherwise float32,
   * rounded (ref-bf16) as the SwiGLU kernel reads them (no separate pass) */
  bool gu16 = ref_bf16(e) && !e->lora && e->inter % 8 == 0;
  if ((r = exc_gemm(e->gemm, e->stream, e->a, e->h, l->w_gu, e->proj, 2 * e->inter,
                    gu16 ? EXC_DTYPE_BF16 : EXC_DTYPE_F32, false, t, e->h, 2 * e->inter)) ||
      (r = lora_in(e, li, EXC_LORA_MLP_IN, e->a, e->h, e->proj, 2 * e->inter, t)))
    return r;
  prof(e, EXC_OP_GEMM_IN);
  const bf16_t *gu = (const bf16_t *)e->proj;
  if (gu16)
    r = exc_swiglu_bf16(e->stream, gu, gu + e->inter, 2 * e->inter, e->mix, t, e->inter);
  else
    r = (ref_bf16(e) ? exc_swiglu_rounded : exc_swiglu)(e->stream, e->proj, e->proj + e->inter,
                                                         2 * e->inter, e->mix, t, e->inter);
  if (r)
    return r;
  prof(e, EXC_OP_SWIGLU);
  r = out_proj(e, li, EXC_LORA_MLP_DOWN, e->mix, e->inter, l->w_down, t);
  prof(e, EXC_OP_GEMM_OUT);
  return r;
}

/* Host-side checks and packing of ids and positions. Returns the token total or a negative code. */
static int pack(struct exc_qwen35 *e, const struct exc_qwen35_seq *seqs, int ns,
                const int32_t *tokens, const size_t *readout, size_t n_read, size_t *ret_total,
                struct cm_diag *diag) {
  if (ns <= 0)
    return cm_diag_set(diag, -EINVAL, "cuda engine: no sequences");
  if ((size_t)ns > e->lim.max_seqs)
    return cm_diag_set(diag, -CM_ELIMIT, "cuda engine: %d sequences, the limit is %zu", ns,
                       e->lim.max_seqs);
  size_t total = 0;
  for (int i = 0; i < ns; i++) {
    if (!seqs[i].n)
      return cm_diag_set(diag, -EINVAL, "cuda engine: sequence %d has no tokens", i);
    if (seqs[i].advance && !seqs[i].state)
      return cm_diag_set(diag, -EINVAL, "cuda engine: sequence %d advances no state", i);
    size_t held = seqs[i].state ? seqs[i].state->n_tokens : 0;
    if (held + seqs[i].n > e->lim.max_ctx)
      return cm_diag_set(diag, -CM_ELIMIT,
                         "cuda engine: sequence %d would hold %zu tokens, the limit is %zu", i,
                         held + seqs[i].n, e->lim.max_ctx);
    for (int j = 0; j < ns; j++)
      if (j != i && seqs[i].advance && seqs[j].state == seqs[i].state)
        return cm_diag_set(diag, -EINVAL,
                           "cuda engine: sequence %d advances a state that sequence %d reads", i,
                           j);
    e->starts[i] = total;
    total += seqs[i].n;
    if (total > e->lim.max_tokens)
      return cm_diag_set(diag, -CM_ELIMIT, "cuda engine: more than %zu tokens in one launch",
                         e->lim.max_tokens);
  }
  if (n_read > e->lim.max_readouts)
    return cm_diag_set(diag, -CM_ELIMIT, "cuda engine: %zu readouts, the limit is %zu", n_read,
                       e->lim.max_readouts);
  for (size_t i = 0; i < n_read; i++)
    if (readout[i] >= total)
      return cm_diag_set(diag, -EINVAL, "cuda engine: readout row %zu outside %zu rows", readout[i],
                         total);
  for (size_t t = 0; t < total; t++) {
    if (tokens[t] < 0 || (size_t)tokens[t] >= e->vocab)
      return cm_diag_set(diag, -EINVAL, "token %d at row %zu outside the vocabulary [0, %zu)",
                         tokens[t], t, e->vocab);
    e->h_ids[t] = tokens[t];
  }
  for (int i = 0; i < ns; i++) {
    size_t s0 = e->starts[i], n = seqs[i].n;
    const struct exc_qwen35_state *st = seqs[i].state;
    for (size_t t = 0; t < n; t++)
      for (int a = 0; a < 3; a++)
        e->h_pos[(size_t)a * total + s0 + t] =
            seqs[i].pos
                ? seqs[i].pos[(size_t)a * n + t]
                : (int32_t)((int64_t)((st ? st->n_tokens : 0) + t) + (st ? st->rope_delta : 0));
  }
  *ret_total = total;
  return 0;
}

/* One decoder layer on the residual stream hres of t packed rows (input norm, mixer, MLP; the
 * mixers add their outputs into hres). *what names the step for an error message. */
static int decoder_layer(struct exc_qwen35 *e, int li, const struct exc_qwen35_seq *seqs, int ns,
                         size_t t, const char **what) {
  const struct dlayer *l = &e->layers[li];
  *what = l->full_attn ? "attention layer" : "Gated DeltaNet layer";
  int r = exc_rms_norm(e->stream, e->hres, NULL, l->in_norm, e->cfg.rms_eps, NULL, e->a, e->h, t,
                       e->h);
  if (r)
    return r;
  prof(e, EXC_OP_NORM);
  r = l->full_attn ? attn_layer(e, li, seqs, ns, t) : gdn_layer(e, li, seqs, ns, t);
  if (r)
    return r;
  *what = "MLP";
  return mlp(e, l, t);
}

int exc_qwen35_forward(struct exc_qwen35 *e, const struct exc_qwen35_seq *seqs, int n_seqs,
                       const int32_t *tokens, const float *image_rows, size_t n_image_rows,
                       const size_t *readout, size_t n_read, float *ret_hidden, float *ret_logits,
                       struct cm_diag *diag) {
  return exc_qwen35_forward_residual(e, seqs, n_seqs, tokens, image_rows, n_image_rows, readout,
                                     n_read, ret_hidden, ret_logits, NULL, diag);
}

int exc_qwen35_layer_forward(struct exc_qwen35 *e, int layer, const float *in, const int32_t *pos,
                             size_t n, float *ret_out, struct cm_diag *diag) {
  if (e->sticky)
    return cm_diag_set(diag, -CM_ECUDA, "cuda engine: retired after a sticky device error");
  if (layer < 0 || layer >= e->cfg.n_layers)
    return cm_diag_set(diag, -EINVAL, "cuda engine: layer %d outside the model's %d layers", layer,
                       e->cfg.n_layers);
  e->last_t = 0;
  struct exc_qwen35_seq seq = {.state = NULL, .advance = false, .n = n, .pos = pos};
  int32_t *ids = calloc(n ? n : 1, sizeof(int32_t)); /* token 0: pack checks ids, none is read */
  size_t t = 0;
  int r = ids ? pack(e, &seq, 1, ids, NULL, 0, &t, diag) : -ENOMEM;
  free(ids);
  if (r)
    return r == -ENOMEM ? cm_diag_set(diag, r, "cuda engine: out of host memory") : r;
  const char *what = "upload";
  cudaStream_t s = e->stream;
  e->prof_n = 0;
  if ((r = EXC_CUDA(
           cudaMemcpyAsync(e->pos, e->h_pos, 3 * t * sizeof(int32_t), cudaMemcpyHostToDevice, s))) ||
      (r = EXC_CUDA(cudaMemcpyAsync(e->hres, in, t * e->h * sizeof(float), cudaMemcpyHostToDevice,
                                    s))))
    goto fail;
  what = "rotary tables";
  if ((r = exc_mrope_tables(s, e->pos, t, e->inv_freq, (int)e->f, e->cfg.mrope_section, e->cos_t,
                            e->sin_t)) ||
      (r = round_rows(e, e->cos_t, e->f, t, e->f)) || (r = round_rows(e, e->sin_t, e->f, t, e->f)))
    goto fail;
  if ((r = decoder_layer(e, layer, &seq, 1, t, &what)))
    goto fail;
  what = "download";
  if ((r = EXC_CUDA(cudaMemcpyAsync(ret_out, e->hres, t * e->h * sizeof(float),
                                    cudaMemcpyDeviceToHost, s))) ||
      (r = EXC_CUDA(cudaStreamSynchronize(s))))
    goto fail;
  return 0;
fail:
  return cuda_fail(e, r, diag, what);
}

int exc_qwen35_forward_residual(struct exc_qwen35 *e, const struct exc_qwen35_seq *seqs,
                                int n_seqs, const int32_t *tokens, const float *image_rows,
                                size_t n_image_rows, const size_t *readout, size_t n_read,
                                float *ret_hidden, float *ret_logits, float *ret_residual,
                                struct cm_diag *diag) {
  if (e->sticky)
    return cm_diag_set(diag, -CM_ECUDA, "cuda engine: retired after a sticky device error");
  e->last_t = 0;
  size_t t = 0;
  int r = pack(e, seqs, n_seqs, tokens, readout, n_read, &t, diag);
  if (r)
    return r;
  if (image_rows) {
    size_t n_img = 0;
    for (size_t i = 0; i < t; i++)
      n_img += tokens[i] == e->cfg.image_token_id;
    if (n_img != n_image_rows)
      return cm_diag_set(diag, -EINVAL, "cuda engine: %zu image rows for %zu image tokens",
                         n_image_rows, n_img);
  }
  const char *what = "upload";
  cudaStream_t s = e->stream;
  e->prof_n = 0;
  prof(e, EXC_OP_INPUT); /* the start mark */
  if ((r = EXC_CUDA(
           cudaMemcpyAsync(e->ids, e->h_ids, t * sizeof(int32_t), cudaMemcpyHostToDevice, s))) ||
      (r = EXC_CUDA(
           cudaMemcpyAsync(e->pos, e->h_pos, 3 * t * sizeof(int32_t), cudaMemcpyHostToDevice, s))))
    goto fail;
  what = "embedding";
  if ((r = exc_embed(s, e->embed, e->vocab, e->ids, e->hres, t, e->h)))
    goto fail;
  /* image rows: one copy per run of consecutive image tokens */
  for (size_t t0 = 0, j = 0; t0 < t && image_rows && !r;) {
    if (tokens[t0] != e->cfg.image_token_id) {
      t0++;
      continue;
    }
    size_t t1 = t0;
    while (t1 < t && tokens[t1] == e->cfg.image_token_id)
      t1++;
    r = EXC_CUDA(cudaMemcpyAsync(e->hres + t0 * e->h, image_rows + j * e->h,
                                 (t1 - t0) * e->h * sizeof(float), cudaMemcpyHostToDevice, s));
    j += t1 - t0;
    t0 = t1;
  }
  /* ref-bf16: the merged image rows enter as the reference's bf16 vision output (the embedding
   * rows are bf16 values already) */
  if (r || (image_rows && (r = round_rows(e, e->hres, e->h, t, e->h))))
    goto fail;
  what = "rotary tables";
  if ((r = exc_mrope_tables(s, e->pos, t, e->inv_freq, (int)e->f, e->cfg.mrope_section, e->cos_t,
                            e->sin_t)) ||
      (r = round_rows(e, e->cos_t, e->f, t, e->f)) || (r = round_rows(e, e->sin_t, e->f, t, e->f)))
    goto fail;
  prof(e, EXC_OP_INPUT);
  if (ret_residual &&
      (r = EXC_CUDA(cudaMemcpyAsync(ret_residual, e->hres, t * e->h * sizeof(float),
                                    cudaMemcpyDeviceToHost, s))))
    goto fail;
  for (int li = 0; li < e->cfg.n_layers; li++) {
    if ((r = decoder_layer(e, li, seqs, n_seqs, t, &what)))
      goto fail;
    what = "residual copy";
    if (ret_residual &&
        (r = EXC_CUDA(cudaMemcpyAsync(ret_residual + (size_t)(li + 1) * t * e->h, e->hres,
                                      t * e->h * sizeof(float), cudaMemcpyDeviceToHost, s))))
      goto fail;
  }
  what = "final norm";
  if ((r = exc_rms_norm(s, e->hres, NULL, e->final_norm, e->cfg.rms_eps, e->hid, NULL, 0, t,
                        e->h)) ||
      (r = round_rows(e, e->hid, e->h, t, e->h)))
    goto fail;
  what = "readouts";
  for (size_t i = 0; i < n_read && !r; i++) {
    if (ret_hidden)
      r = EXC_CUDA(cudaMemcpyAsync(ret_hidden + i * e->h, e->hid + readout[i] * e->h,
                                   e->h * sizeof(float), cudaMemcpyDeviceToHost, s));
    if (!r && ret_logits)
      r = exc_cast_bf16(s, e->hid + readout[i] * e->h, e->h, e->hsel + i * e->h, e->h, 1, e->h);
  }
  if (r)
    goto fail;
  if (ret_logits && n_read) {
    what = "LM head";
    if ((r = exc_gemm(e->gemm, s, e->hsel, e->h, e->lm_head, e->logits, e->vocab_pad, EXC_DTYPE_F32,
                      false, n_read, e->h, e->vocab_pad)) ||
        (r = round_rows(e, e->logits, e->vocab_pad, n_read, e->vocab_pad)) ||
        (r = EXC_CUDA(cudaMemcpy2DAsync(ret_logits, e->vocab * sizeof(float), e->logits,
                                        e->vocab_pad * sizeof(float), e->vocab * sizeof(float),
                                        n_read, cudaMemcpyDeviceToHost, s))))
      goto fail;
  }
  prof(e, EXC_OP_READOUT);
  what = "synchronisation";
  if ((r = EXC_CUDA(cudaStreamSynchronize(s))))
    goto fail;
  if (e->prof_on && e->prof_n > 1) {
    for (int i = 1; i < e->prof_n; i++) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, e->prof_ev[i - 1], e->prof_ev[i]) == cudaSuccess) {
        e->prof.ms[e->prof_cat[i]] += ms;
        e->prof.n[e->prof_cat[i]]++;
      }
    }
    e->prof.forwards++;
  }
  for (int i = 0; i < n_seqs; i++)
    if (seqs[i].advance)
      seqs[i].state->n_tokens += seqs[i].n;
  e->last_t = t;
  return 0;
fail:
  return cuda_fail(e, r, diag, what);
}

/* ---- LM readouts of the last forward ---- */

/* Checks rows against the last forward and casts their final-norm hidden rows to bf16 (hsel). */
static int select_rows(struct exc_qwen35 *e, const size_t *rows, size_t n, struct cm_diag *diag) {
  if (e->sticky)
    return cm_diag_set(diag, -CM_ECUDA, "cuda engine: retired after a sticky device error");
  if (!e->last_t)
    return cm_diag_set(diag, -EINVAL, "cuda engine: no forward to read from");
  if (!n || n > e->lim.max_readouts)
    return cm_diag_set(diag, -CM_ELIMIT, "cuda engine: %zu readout rows, the limit is %zu", n,
                       e->lim.max_readouts);
  for (size_t i = 0; i < n; i++)
    if (rows[i] >= e->last_t)
      return cm_diag_set(diag, -EINVAL, "cuda engine: row %zu outside the last forward's %zu",
                         rows[i], e->last_t);
  int r = 0;
  for (size_t i = 0; i < n && !r; i++)
    r = exc_cast_bf16(e->stream, e->hid + rows[i] * e->h, e->h, e->hsel + i * e->h, e->h, 1, e->h);
  return r;
}

static int check_ids(const struct exc_qwen35 *e, const int32_t *ids, size_t n,
                     struct cm_diag *diag) {
  for (size_t i = 0; i < n; i++)
    if (ids[i] < 0 || (size_t)ids[i] >= e->vocab)
      return cm_diag_set(diag, -EINVAL, "cuda engine: id %d outside the vocabulary", ids[i]);
  return 0;
}

int exc_qwen35_label_logits(struct exc_qwen35 *e, const size_t *rows, size_t n_rows,
                            const int32_t *ids, size_t n_ids, float *ret, struct cm_diag *diag) {
  if (!n_ids || n_ids > e->lim.max_label_ids)
    return cm_diag_set(diag, -CM_ELIMIT, "cuda engine: %zu label ids, the limit is %zu", n_ids,
                       e->lim.max_label_ids);
  int r = check_ids(e, ids, n_ids, diag);
  if (r || (r = select_rows(e, rows, n_rows, diag)))
    return r;
  if ((r = EXC_CUDA(cudaMemcpyAsync(e->sel_ids, ids, n_ids * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, e->stream))) ||
      (r = exc_lm_rows(e->stream, e->hsel, e->h, e->lm_head, e->sel_ids, e->sel_out, n_rows, n_ids,
                       e->h, true)) ||
      (r = EXC_CUDA(cudaMemcpyAsync(ret, e->sel_out, n_rows * n_ids * sizeof(float),
                                    cudaMemcpyDeviceToHost, e->stream))) ||
      (r = EXC_CUDA(cudaStreamSynchronize(e->stream))))
    return cuda_fail(e, r, diag, "label logits");
  return 0;
}

int exc_qwen35_token_logprob(struct exc_qwen35 *e, const size_t *rows, const int32_t *targets,
                             size_t n, float *ret, struct cm_diag *diag) {
  int r = check_ids(e, targets, n, diag);
  if (r || (r = select_rows(e, rows, n, diag)))
    return r;
  if ((r = EXC_CUDA(cudaMemcpyAsync(e->sel_ids, targets, n * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, e->stream))) ||
      (r = exc_lm_logprob(e->gemm, e->stream, e->hsel, e->h, e->lm_head, e->vocab, e->sel_ids,
                          e->sel_out, e->lp_scratch, n, e->h, LP_CHUNK)) ||
      (r = EXC_CUDA(cudaMemcpyAsync(ret, e->sel_out, n * sizeof(float), cudaMemcpyDeviceToHost,
                                    e->stream))) ||
      (r = EXC_CUDA(cudaStreamSynchronize(e->stream))))
    return cuda_fail(e, r, diag, "token log-prob");
  return 0;
}

/* ---- timing ---- */

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

int exc_qwen35_time_prefill(struct exc_qwen35 *e, struct exc_qwen35_state *st,
                            const int32_t *tokens, const int32_t *pos, size_t n,
                            const float *image_rows, size_t n_image_rows, int repeat,
                            struct exc_qwen35_timing *ret_timing, struct cm_diag *diag) {
  if (repeat < 1 || !n)
    return cm_diag_set(diag, -EINVAL, "timing: repeat must be at least 1");
  int r = 0;
  float *ms = calloc((size_t)repeat + 1, sizeof(float));
  float *logits = malloc(e->vocab * sizeof(float));
  cudaEvent_t a = NULL, b = NULL;
  if (!ms || !logits) {
    r = -ENOMEM;
    goto out;
  }
  if ((r = EXC_CUDA(cudaEventCreate(&a))) || (r = EXC_CUDA(cudaEventCreate(&b))))
    goto out;
  size_t last = n - 1;
  for (int i = 0; i <= repeat; i++) {
    st->n_tokens = 0;
    struct exc_qwen35_seq seq = {.state = st, .advance = true, .n = n, .pos = pos};
    if ((r = EXC_CUDA(cudaEventRecord(a, e->stream))))
      goto out;
    if ((r = exc_qwen35_forward(e, &seq, 1, tokens, image_rows, n_image_rows, &last, 1, NULL,
                                logits, diag)))
      goto out;
    if ((r = EXC_CUDA(cudaEventRecord(b, e->stream))) || (r = EXC_CUDA(cudaEventSynchronize(b))) ||
        (r = EXC_CUDA(cudaEventElapsedTime(&ms[i], a, b))))
      goto out;
  }
  qsort(ms + 1, (size_t)repeat, sizeof(float), cmp_float);
  size_t free_b = 0, total_b = 0;
  if ((r = EXC_CUDA(cudaMemGetInfo(&free_b, &total_b))))
    goto out;
  ret_timing->first_ms = ms[0];
  ret_timing->median_ms =
      repeat % 2 ? ms[1 + repeat / 2] : 0.5f * (ms[repeat / 2] + ms[1 + repeat / 2]);
  ret_timing->min_ms = ms[1];
  ret_timing->max_ms = ms[repeat];
  ret_timing->device_used_bytes = total_b - free_b;
out:
  if (r == -CM_ECUDA && exc_cuda_sticky())
    e->sticky = true;
  if (a)
    cudaEventDestroy(a);
  if (b)
    cudaEventDestroy(b);
  free(ms);
  free(logits);
  return r;
}

/* ---- profiling ---- */

int exc_qwen35_profile_enable(struct exc_qwen35 *e, bool on) {
  memset(&e->prof, 0, sizeof(e->prof));
  e->prof_on = false;
  if (!on)
    return 0;
  if (!e->prof_ev) {
    e->prof_ev = calloc(PROF_EVENTS, sizeof(*e->prof_ev));
    e->prof_cat = calloc(PROF_EVENTS, 1);
    if (!e->prof_ev || !e->prof_cat)
      return -ENOMEM;
    for (int i = 0; i < PROF_EVENTS; i++) {
      int r = EXC_CUDA(cudaEventCreate(&e->prof_ev[i]));
      if (r)
        return r;
    }
  }
  e->prof_on = true;
  return 0;
}

void exc_qwen35_profile_read(const struct exc_qwen35 *e, struct exc_qwen35_profile *ret_profile) {
  *ret_profile = e->prof;
}

const char *exc_qwen35_op_name(enum exc_qwen35_op op) {
  static const char *const names[EXC_OP_COUNT] = {
      "input", "norm",        "gemm_in", "gemm_out",   "attn_prep", "attention", "state_copy",
      "conv",  "gdn_prepare", "gdn",     "gated_norm", "swiglu",    "readout"};
  return op < EXC_OP_COUNT ? names[op] : "?";
}

int exc_qwen35_set_lora(struct exc_qwen35 *e, const struct cm_safetensors *adapter, float scale,
                        struct cm_diag *diag) {
  if (e->lora || !adapter)
    return cm_diag_set(diag, -EINVAL, "cuda engine: one adapter, set once");
  int r = EXC_CUDA(cudaSetDevice(e->device));
  if (!r)
    r = exc_lora_new(&e->cfg, adapter, scale, e->lim.max_tokens, &e->lora, diag);
  return r;
}
