/* The bf16 CUDA engine of the Qwen3.5 text backbone: weights bf16 on one device (projections fused
 * per layer), activations rounded as the bf16 reference by default (enum exc_qwen35_numerics; a
 * float32 residual stream on request), device memory reserved once at start-up (weights, one
 * scratch arena for a maximum number of tokens per launch, a pool of sequence snapshots), and the
 * forward over packed sequences that each continue their own snapshot, and a kept (unmerged) LoRA
 * adapter when exc_qwen35_set_lora loads one. Not here: the vision tower (image rows come in as
 * embeddings), family heads. CPU twin: ex_qwen35.h. */
#ifndef S1_EX_CUDA_QWEN35_H
#define S1_EX_CUDA_QWEN35_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"
#include "cm_safetensors.h"
#include "ex_qwen35.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the forward rounds its activations (struct exc_qwen35_limits.numerics). */
enum exc_qwen35_numerics {
  /* The bf16 numerics (the default; "bf16", formerly "ref-bf16"): every activation rounded to bf16
   * where transformers in bf16 rounds it (spec/qwen3_5.md §3.5): projection outputs, q/k norms,
   * rotary tables and results, attention output, conv, β, GDN output, gated norm, SwiGLU, each
   * residual add (the residual stream holds bf16 values), merged image rows, the final norm and the
   * logits; fp32 accumulation inside GEMMs and kernels. Not rounded inside the fused attention,
   * gated-norm, rotary and SwiGLU ops (one rounding at their outputs). Twin: the CPU forward with
   * round_bf16.
   */
  EXC_NUMERICS_REF_BF16 = 0,
  /* "bf16-fp32-residual" (formerly "fp32-residual"): bf16 weights and GEMM inputs over a float32
   * residual stream and non-GEMM activations, bf16 also at the KV cache and the LM-head input;
   * neither the fp32 nor the bf16 numerics (nearer a float32 forward than the bf16 reference is);
   * never served by s1-executor. Twin: the float32 CPU forward. */
  EXC_NUMERICS_FP32_RESIDUAL = 1,
};

/* Sizes reserved at start-up; a request over any of them is refused with -CM_ELIMIT. */
struct exc_qwen35_limits {
  size_t max_tokens;    /* rows of one launch, all sequences together (default 8192) */
  size_t max_seqs;      /* sequences of one launch (default 64, at most EXC_MAX_SEQS) */
  size_t max_ctx;       /* tokens one snapshot holds (default 8192) */
  size_t n_snapshots;   /* snapshots in the pool (default 4) */
  size_t max_readouts;  /* readout rows of one launch (hidden and logits; default 64) */
  size_t max_label_ids; /* vocabulary rows of one exc_qwen35_label_logits call (default 1024) */
  enum exc_qwen35_numerics numerics; /* rounding mode (default EXC_NUMERICS_REF_BF16) */
};

/* The default limits above. */
void exc_qwen35_limits_default(struct exc_qwen35_limits *lim);

struct exc_qwen35; /* opaque engine: weights, arena, pool, stream, GEMM handle */

/* A sequence state on the device (one pool slot): the snapshot of a sequence after n_tokens. */
struct exc_qwen35_state {
  size_t n_tokens;    /* tokens held (sequence positions 0 .. n_tokens−1) */
  int64_t rope_delta; /* text position = sequence position + rope_delta (default positions) */
  int slot;           /* pool slot index (owned by the engine) */
};

/* One packed sequence of a forward launch. */
struct exc_qwen35_seq {
  struct exc_qwen35_state *state; /* snapshot continued (read), or NULL for a fresh sequence */
  bool advance;       /* append this sequence's tokens to `state` (K/V, conv window, GDN state);
                         the state then must not be read by another sequence of the launch */
  size_t n;           /* tokens of this sequence (≥ 1) */
  const int32_t *pos; /* [3, n] host mRoPE ids (rows T, H, W), or NULL for text positions
                         (state's n_tokens + rope_delta + t on every axis) */
};

/* Loads the text weights of a checkpoint (key prefixes as ex_qwen35_model_load: BF16 copied,
 * F16/F32 rounded to bf16 for matrices, vectors kept float32), reserves every device buffer from
 * the size tables, creates the stream and GEMM handle, and chooses every GEMM algorithm.
 * Ownership: *ret_engine is freed with exc_qwen35_free; cfg and st are only read.
 * Returns 0; -CM_EMISSING / -CM_ESHAPE (tensor absent or of the wrong shape, named in diag);
 * -CM_EUNSUPPORTED (dims not multiples of 8); -EINVAL (limits);
 * -ENOMEM; -CM_ECUDA (no device, out of device memory: the message gives the bytes asked).
 * Source: spec/qwen3_5.md §2; twin ex_qwen35_model_load. */
int exc_qwen35_new(const struct ex_qwen35_config *cfg, const struct cm_safetensors *st, int device,
                   const struct exc_qwen35_limits *lim, struct exc_qwen35 **ret_engine,
                   struct cm_diag *diag);
void exc_qwen35_free(struct exc_qwen35 *e);

/* Loads a kept LoRA adapter (the model directory's adapter.safetensors, keys
 * model.language_model.layers.L.<module>.lora_{A,B}) onto the engine's device: from then on every
 * forward adds scale·((x·Aᵀ)·Bᵀ) in FP32 to the output of each adapted projection (cuda_lora.h).
 * Call once, after exc_qwen35_new and before the first forward (reserves the factors and FP32
 * scratch for 2,048-row chunks). Returns 0; -EINVAL (called twice, NULL adapter); exc_lora_new's
 * errors. Source: spec/jemm.md §6.3; twin ex_qwen35_model_load with an adapter. */
int exc_qwen35_set_lora(struct exc_qwen35 *e, const struct cm_safetensors *adapter, float scale,
                        struct cm_diag *diag);

/* Device bytes reserved at start-up: weights, scratch arena, snapshot pool (and the total). */
struct exc_qwen35_memory {
  size_t weights_bytes;  /* bf16 matrices + float32 vectors */
  size_t arena_bytes;    /* per-launch scratch for max_tokens */
  size_t pool_bytes;     /* n_snapshots × one snapshot */
  size_t snapshot_bytes; /* one snapshot at max_ctx */
};
void exc_qwen35_memory(const struct exc_qwen35 *e, struct exc_qwen35_memory *ret_mem);

/* Takes a free snapshot slot as an empty state (n_tokens 0), or releases one (NULL-safe).
 * Returns 0; -CM_ELIMIT (pool exhausted). */
int exc_qwen35_state_acquire(struct exc_qwen35 *e, struct exc_qwen35_state **ret_state);
void exc_qwen35_state_release(struct exc_qwen35 *e, struct exc_qwen35_state *s);
/* dst ← src (K/V rows up to n_tokens, conv windows, GDN states; stream-ordered device copies).
 * Returns 0; -EINVAL (same slot); -CM_ECUDA. */
int exc_qwen35_state_clone(struct exc_qwen35 *e, const struct exc_qwen35_state *src,
                           struct exc_qwen35_state *dst);

/* Runs the packed sequences in one launch and writes readouts. Rows are packed in seqs order
 * (sequence i's token t is row start_i + t). Each sequence attends to its state's K/V plus its own
 * new rows and continues its state's conv window and GDN state; sequences never see each other.
 * tokens [total] host ids in [0, vocab); image_rows [n_image_rows, H] host float32 merged vision
 * features or NULL: they replace, in order, the embeddings of the rows whose token is the config's
 * image_token_id (their count must match); readout [n_read] packed row
 * indices; ret_hidden [n_read, H] host float32 final-norm hidden rows or NULL; ret_logits
 * [n_read, vocab] host float32 LM-head logits (of the bf16 hidden row) or NULL; in ref-bf16 both
 * hold bf16 values (the reference's bf16 hidden states and logits).
 * Ownership: host buffers of the caller; synchronises the engine's stream before returning.
 * Returns 0; -EINVAL (empty, an id out of range, a readout outside the launch, a state both
 * advanced and read, image rows not matching the image tokens); -CM_ELIMIT (max_tokens, max_seqs,
 * max_readouts, max_ctx exceeded, named in diag); -CM_ECUDA (the engine is then unhealthy when the
 * error is sticky: exc_qwen35_healthy). Source: spec/qwen3_5.md §3-5; twin ex_qwen35_forward +
 * ex_qwen35_logits. */
int exc_qwen35_forward(struct exc_qwen35 *e, const struct exc_qwen35_seq *seqs, int n_seqs,
                       const int32_t *tokens, const float *image_rows, size_t n_image_rows,
                       const size_t *readout, size_t n_read, float *ret_hidden, float *ret_logits,
                       struct cm_diag *diag);

/* exc_qwen35_forward that also copies the residual stream to the host: ret_residual
 * [n_layers + 1, total, H] host float32 holds the packed rows entering layer 0 (embeddings with
 * the image rows), then each decoder layer's output (before the final norm; bf16 values in
 * ref-bf16). NULL: exc_qwen35_forward. Returns as exc_qwen35_forward. Twin:
 * ex_qwen35_forward_residual. */
int exc_qwen35_forward_residual(struct exc_qwen35 *e, const struct exc_qwen35_seq *seqs,
                                int n_seqs, const int32_t *tokens, const float *image_rows,
                                size_t n_image_rows, const size_t *readout, size_t n_read,
                                float *ret_hidden, float *ret_logits, float *ret_residual,
                                struct cm_diag *diag);

/* Decoder layer `layer` alone on n given input rows of one fresh sequence (no snapshot read or
 * written): ret_out = layer(in), in the engine's numerics. For parity checks layer by layer:
 * feeding the reference's own input rows of layer i isolates layer i's error.
 * Shapes: pos [3, n] host mRoPE ids or NULL (0 .. n−1); in, ret_out [n, H] host float32.
 * Ownership: host buffers of the caller; synchronises the stream. Invalidates the last forward's
 * readouts. Returns 0; -EINVAL (layer out of range, n == 0); -CM_ELIMIT (n > max_tokens);
 * -ENOMEM; -CM_ECUDA. Twin: ex_qwen35_layer_forward. */
int exc_qwen35_layer_forward(struct exc_qwen35 *e, int layer, const float *in, const int32_t *pos,
                             size_t n, float *ret_out, struct cm_diag *diag);

/* Timing of repeated one-pass prefills (milliseconds, CUDA events on the engine's stream). */
struct exc_qwen35_timing {
  float first_ms;           /* the first (excluded) run */
  float median_ms;          /* median of the `repeat` runs after it */
  float min_ms, max_ms;     /* their extremes */
  size_t device_used_bytes; /* total − free device memory after the runs */
};

/* Runs repeat + 1 fresh one-pass prefills of `tokens` into `st` (reset to 0 tokens each time) to
 * the last position's logits and times each from the first upload to the logits on the host.
 * Shapes as exc_qwen35_forward; pos [3, n] or NULL. Ownership: `st` is overwritten.
 * Returns 0, -EINVAL (repeat < 1), -ENOMEM, or exc_qwen35_forward's errors. */
int exc_qwen35_time_prefill(struct exc_qwen35 *e, struct exc_qwen35_state *st,
                            const int32_t *tokens, const int32_t *pos, size_t n,
                            const float *image_rows, size_t n_image_rows, int repeat,
                            struct exc_qwen35_timing *ret_timing, struct cm_diag *diag);

/* Per-op device time of forwards, for finding where the time goes (a debugging aid: an event is
 * recorded after every op, which adds a little launch overhead while enabled). */
enum exc_qwen35_op {
  EXC_OP_INPUT,    /* id/position upload, embedding gather, image rows, rotary tables */
  EXC_OP_NORM,     /* input and post-attention RMSNorms */
  EXC_OP_GEMM_IN,  /* projections into the mixers and the MLP ([q|g,k,v], [qkv], [z|b|a], [gate,up])
                    */
  EXC_OP_GEMM_OUT, /* o_proj, out_proj, down_proj (accumulated into the residual) */
  EXC_OP_ATTN_PREP,   /* q/k norm, rotary, split, bf16 K/V */
  EXC_OP_ATTENTION,   /* gated attention */
  EXC_OP_STATE_COPY,  /* K/V rows and conv windows copied into advancing snapshots */
  EXC_OP_CONV,        /* causal conv1d + SiLU */
  EXC_OP_GDN_PREPARE, /* q/k L2 norm, β, g */
  EXC_OP_GDN,         /* chunked delta rule */
  EXC_OP_GATED_NORM,  /* gated RMSNorm */
  EXC_OP_SWIGLU,      /* SwiGLU */
  EXC_OP_READOUT,     /* final norm, readout copies, LM head */
  EXC_OP_COUNT,
};

struct exc_qwen35_profile {
  double ms[EXC_OP_COUNT]; /* summed device time per op kind, ms */
  long n[EXC_OP_COUNT];    /* launches counted */
  long forwards;           /* forwards profiled */
};

/* Turns profiling on (creating its events once) or off, and resets the sums.
 * Returns 0 or -CM_ECUDA. */
int exc_qwen35_profile_enable(struct exc_qwen35 *e, bool on);
/* The sums since the last enable. */
void exc_qwen35_profile_read(const struct exc_qwen35 *e, struct exc_qwen35_profile *ret_profile);
/* Short name of an op kind ("gemm_in", ...). */
const char *exc_qwen35_op_name(enum exc_qwen35_op op);

/* The stream every launch of the engine is enqueued on (for callers' timing events). */
cudaStream_t exc_qwen35_stream(const struct exc_qwen35 *e);

/* Label logits of the last forward's rows: out[i, j] = bf16(hidden[rows[i]] · lm_head[ids[j]]) (the
 * reference's bf16 logits, as float32 values), from the final-norm hidden rows rounded to bf16.
 * Shapes: rows [n_rows] packed rows of the last exc_qwen35_forward (≤ max_readouts); ids [n_ids]
 * in [0, vocab) (≤ max_label_ids); ret [n_rows, n_ids] host float32.
 * Returns 0; -EINVAL (no forward yet, a row or id out of range); -CM_ELIMIT; -CM_ECUDA.
 * Source: spec/jemm.md (label logits); twin ex_qwen35_logits + ex_cpu_round_bf16 at those ids. */
int exc_qwen35_label_logits(struct exc_qwen35 *e, const size_t *rows, size_t n_rows,
                            const int32_t *ids, size_t n_ids, float *ret, struct cm_diag *diag);

/* Log-probabilities of target tokens at the last forward's rows: ret[i] = l[targets[i]] −
 * logsumexp(l) over all vocab logits l = bf16(bf16(hidden[rows[i]]) · lm_headᵀ), float32, the
 * vocabulary in chunks (cuda_logits.h). Shapes: rows, targets [n] (n ≤ max_readouts); ret [n]
 * host. Returns as exc_qwen35_label_logits. Source: spec/omnijev.md §7. */
int exc_qwen35_token_logprob(struct exc_qwen35 *e, const size_t *rows, const int32_t *targets,
                             size_t n, float *ret, struct cm_diag *diag);

/* Switches the rounding mode of later forwards (the start-up value is limits.numerics).
 * Returns 0; -EINVAL (not a mode). */
int exc_qwen35_set_numerics(struct exc_qwen35 *e, enum exc_qwen35_numerics numerics);

/* "bf16" (the served bf16 numerics, cm_numerics CM_NUMERICS_BF16) or "bf16-fp32-residual" (bf16
 * GEMMs over a float32 residual stream: neither served mode) ↔ the mode; parse also takes the old
 * names "ref-bf16" and "fp32-residual"; returns 0 or -EINVAL (unknown name). */
const char *exc_qwen35_numerics_name(enum exc_qwen35_numerics numerics);
int exc_qwen35_numerics_parse(const char *name, enum exc_qwen35_numerics *ret_numerics);

/* False once a CUDA call failed with a sticky error (the context is lost: retire the executor). */
bool exc_qwen35_healthy(const struct exc_qwen35 *e);

#ifdef __cplusplus
}
#endif

#endif
