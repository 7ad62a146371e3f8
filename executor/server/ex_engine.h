/* The engine the program runner talks to: one Qwen3.5 backbone (and its vision tower) on one
 * device, seen as snapshots, packed launches (prefix pieces and rows of several programs) and
 * readouts of the last launch. Two implementations: ex_engine_cpu.c (the float32 model code of
 * ex_qwen35.h, sequences packed by ex_qwen35_forward_packed, values exactly as one sequence at a
 * time gives them) and ex_engine_cuda.c
 * (the bf16 engine exc_qwen35.h and exc_vision; ex_engine_nocuda.c in builds without CUDA refuses
 * it). The runner never sees which one it has. Not thread-safe: one caller at a time. */
#ifndef S1_EX_ENGINE_H
#define S1_EX_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"
#include "cm_model_dir.h"
#include "ex_qwen35.h"

/* Options of an engine. Zero values take the documented defaults. */
struct ex_engine_options {
  enum cm_numerics numerics; /* the mode served: CPU fp32 or bf16 (ex_qwen35_model.round_bf16);
                                CUDA bf16 only */
  size_t max_tokens;   /* rows of one launch (CUDA default 8192; CPU: none) */
  size_t max_seqs;     /* sequences of one launch (CUDA default 64; CPU default 64) */
  size_t max_ctx;      /* CUDA: tokens one snapshot holds (default 8192) */
  size_t n_snapshots;  /* CUDA: the snapshot pool (default 8 slots) */
  size_t max_readouts; /* CUDA: readout rows of one launch (default 256); CPU: none */
  int64_t max_patches; /* CUDA: vision patches of one image (default 16384) */
  bool refuse_lora;    /* CUDA: refuse a kept LoRA adapter instead of loading it onto the engine */
  size_t pool_bytes;   /* CPU: bytes of snapshots held at once (default 2 GiB); CUDA: from slots */
};

/* What one launch may hold; the runner splits work into launches within these. SIZE_MAX: none. */
struct ex_engine_limits {
  size_t max_tokens;   /* rows of all sequences together */
  size_t max_seqs;     /* sequences */
  size_t max_readouts; /* readout rows */
  size_t max_ctx;      /* tokens one snapshot may hold (a chain of prefixes, plus a row) */
  size_t pool_bytes;   /* snapshot memory: snapshots held at once take at most this many bytes
                          (snap_bytes each); the scheduler reserves from it before work starts */
};

/* One sequence of a launch: a piece of a prefix appended to its snapshot (advance), or a row
 * that continues a snapshot (read only, never advanced) or starts fresh (snap NULL). */
struct ex_engine_seq {
  void *snap;         /* a snapshot of this engine, or NULL (a fresh row) */
  bool advance;       /* append the tokens to snap (a prefix piece); snap is then not read by
                         another sequence of the launch */
  bool chunked;       /* a prefix piece after the first of a prefix cut on the 64-token grid: the
                         CPU runs its Gated DeltaNet chunked as the one pass does (ex_qwen35_seq) */
  const int32_t *ids; /* [n] token ids, checked in the vocabulary by the caller */
  const int32_t *pos; /* [3, n] mRoPE ids (rows T, H, W) */
  uint32_t n;         /* tokens, ≥ 1 */
};

struct ex_engine;

struct ex_engine_ops {
  const char *name; /* "cpu", "cuda" */
  /* Merged vision rows of one image. Shapes: pixels [n_patches, patch_dim] host fp32;
   * grid_thw [3]; ret_rows [n_patches/4, H] host fp32. Units: deadline_us on the proto_now_us
   * clock, 0 for none: the CPU tower stops between its blocks once it has passed; the CUDA tower
   * (its launches queued at once, milliseconds) runs to the end. Returns 0; -CM_ETIMEOUT (the
   * deadline passed mid-tower); -CM_ELIMIT / -CM_ESHAPE (the image does not fit: the program's
   * fault); another negative code (sticky on CUDA). */
  int (*vision)(struct ex_engine *e, const float *pixels, int64_t n_patches,
                const int32_t *grid_thw, int64_t deadline_us, float *ret_rows,
                struct cm_diag *diag);
  /* A new snapshot: empty (parent NULL) or a copy of `parent`. Returns 0; -CM_ELIMIT (pool
   * exhausted); -ENOMEM; -CM_ECUDA. */
  int (*snap_new)(struct ex_engine *e, void *parent, void **ret_snap, struct cm_diag *diag);
  void (*snap_free)(struct ex_engine *e, void *snap); /* accepts NULL */
  /* One launch of sequences packed in order (sequence i's token t is packed row start_i + t)
   * within the engine's limits: prefix pieces advance their snapshots, rows read theirs; no
   * sequence sees another, and each sequence's values are those it gets in a launch of its own.
   * image_rows [n_image_rows, H] host fp32 replace, in order, the embeddings of every image-token
   * row of the launch (their count must match); NULL: the image token is an ordinary token (a
   * text-only program's literal <|image_pad|>), so such a sequence never shares a launch with
   * image rows; ret_hidden [n_read, H] host fp32 final-norm rows at the
   * packed indices readout [n_read]. The launch's readouts stay readable by the calls below until
   * the next launch. Returns 0; -CM_ELIMIT (over the engine's limits, checked before any work);
   * another negative code (sticky on CUDA). */
  int (*forward)(struct ex_engine *e, const struct ex_engine_seq *seqs, size_t n_seqs,
                 const float *image_rows, size_t n_image_rows, const size_t *readout,
                 size_t n_read, float *ret_hidden, struct cm_diag *diag);
  /* Bytes a snapshot of n_tokens takes out of lim.pool_bytes (CPU: its K/V rows, conv windows
   * and GDN states; CUDA: one pool slot). */
  size_t (*snap_bytes)(const struct ex_engine *e, size_t n_tokens);
  /* Label logits at readout `read` of the last launch: ret[j] = logit of ids[j] (float32 in fp32,
   * rounded to bf16 in bf16: the reference's LM-head output type). ids [n_ids] in the vocabulary.
   */
  int (*label_logits)(struct ex_engine *e, size_t read, const int32_t *ids, size_t n_ids,
                      float *ret, struct cm_diag *diag);
  /* Log-softmax over the full vocabulary at readout `read`, at ids [n_ids] (TOKEN_LOGPROB). */
  int (*token_logprobs)(struct ex_engine *e, size_t read, const int32_t *ids, size_t n_ids,
                        float *ret, struct cm_diag *diag);
  /* ret[i] = log-softmax of the logits at readout reads[i], at targets[i] (the OmniJev LM features,
   * ex_lm_feats.h; the logits rounded to bf16 in bf16 only). Returns 0; -EINVAL (target outside
   * the vocabulary); other codes. */
  int (*target_logprobs)(struct ex_engine *e, const size_t *reads, const int32_t *targets, size_t n,
                         float *ret, struct cm_diag *diag);
  /* False once the engine hit a sticky error (CPU: never). */
  bool (*healthy)(const struct ex_engine *e);
  void (*free)(struct ex_engine *e);
};

/* The common part every implementation starts with. */
struct ex_engine {
  const struct ex_engine_ops *ops;
  struct ex_qwen35_config cfg; /* the backbone's configuration */
  bool has_vision;             /* the directory has a vision tower (loaded) */
  struct ex_engine_limits lim; /* of one launch */
  enum cm_numerics numerics;   /* the mode every readout of this engine is computed in */
};

/* Parses a --device value: "cpu" → -1, "cuda" → 0, "cuda:N" → N; anything else → -2. */
int ex_engine_device(const char *device);

/* The CPU engine over the directory's backbone (kept LoRA adapter when the directory has one) and
 * vision tower, in opt->numerics: fp32 (float32 throughout, the directory's float32 embedding rows)
 * or bf16 (every rounding of the bf16 reference, ex_qwen35_model.round_bf16 and
 * ex_vision.round_bf16; the float32 rows rounded). Ownership: `dir` must outlive the engine; free
 * with e->ops->free. Returns 0 or the loader's negative code with diag. */
int ex_engine_cpu_new(const struct cm_model_dir *dir, const struct ex_engine_options *opt,
                      struct ex_engine **ret_engine, struct cm_diag *diag);

/* The bf16 CUDA engine on device `device`: every device buffer reserved here from the options'
 * limits; it serves the bf16 numerics only. Returns 0; -CM_EUNSUPPORTED (a build without CUDA; what
 * exc_qwen35_new refuses; opt->numerics fp32);
 * -CM_ECUDA; the loaders' codes; diag names the cause. */
int ex_engine_cuda_new(const struct cm_model_dir *dir, int device,
                       const struct ex_engine_options *opt, struct ex_engine **ret_engine,
                       struct cm_diag *diag);

/* The float32 LoRA scale of the directory's adapter (manifest adapter "scale"), 0 without one.
 * Returns 0 or -CM_EFORMAT. */
int ex_engine_adapter_scale(const struct cm_model_dir *dir, float *ret_scale, struct cm_diag *diag);

#endif
