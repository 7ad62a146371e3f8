/* The --device cuda:N path of s1-forward: the same input and outputs as the float32 CPU path, run
 * by the bf16 CUDA engine (executor/cuda/exc_qwen35.h), plus --repeat timing. Built as
 * s1_forward_cuda.c where CUDA is enabled, else s1_forward_nocuda.c (refuses the device). */
#ifndef S1_EX_S1_FORWARD_CUDA_H
#define S1_EX_S1_FORWARD_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"
#include "cm_model_dir.h"
#include "ex_qwen35.h"

/* What one s1-forward run asks of the device. */
struct s1_forward_job {
  const int32_t *tokens;   /* [n] ids after image expansion */
  const int32_t *pos;      /* [3, n] mRoPE ids */
  size_t n;                /* tokens */
  size_t prefix_len;       /* 0: one pass; else prefix snapshot + continuation from a clone */
  const float *image_rows; /* [n_image_rows, H] merged vision features, or NULL */
  size_t n_image_rows;     /* rows */
  const size_t *readout;   /* [n_read] resolved positions */
  size_t n_read;           /* count */
  int repeat;              /* timed repeats of the whole one-pass prefill (0: none) */
  bool fp32_residual;      /* engine numerics: false = ref-bf16 (default), true = fp32-residual
                              (exc_qwen35.h, enum exc_qwen35_numerics) */
  double t0_ms;            /* process start, CLOCK_MONOTONIC ms (for process-to-ready) */
  float *ret_residual;     /* [n_layers + 1, n, H] host: the residual stream (one pass), or NULL */
  const float *layer_in;   /* layer mode: [n_layers, n, H] host inputs of the given layers, or NULL */
  const int *layers;       /* layer mode: [n_layers] decoder layer of each input */
  size_t n_layers;         /* layer mode: count */
  float *ret_layer_out;    /* layer mode: [n_layers, n, H] host outputs */
};

/* Parses "cuda:N" (or "cuda", device 0). Returns the ordinal, or -1 for anything else. */
int s1_forward_cuda_device(const char *device);

/* Runs the job on CUDA device `device`: loads the engine (or keeps the one of the previous job of
 * the same directory when its reservation fits), runs it, fills ret_hidden [n_read, H] and
 * ret_logits [n_read, vocab] (host buffers of the caller); in layer mode (job->layer_in) runs each
 * given layer alone (exc_qwen35_layer_forward) into job->ret_layer_out instead; with
 * job->ret_residual also copies the residual stream; with job->repeat > 0 prints one JSON timing
 * line on stdout (README, "s1-forward --device cuda"). Returns 0 or a negative code with diag set. */
int s1_forward_cuda(const struct cm_model_dir *dir, const struct ex_qwen35_config *cfg, int device,
                    const struct s1_forward_job *job, float *ret_hidden, float *ret_logits,
                    struct cm_diag *diag);

/* Frees the engine kept between jobs (no-op when none). */
void s1_forward_cuda_release(void);

/* The vision tower of the model directory on CUDA device `device` (exc_vision, bf16 weights):
 * loads the float32 tower, uploads it as bf16, runs the packed images in one call (round_bf16: the
 * ref-bf16 numerics, else fp32-residual) and copies the merged rows back.
 * Shapes: pixels [n_patches, 1536] host float32; grid_thw [n_images][3];
 * ret_embeds [n_patches/4, hidden] host float32 (caller's). The device scratch is reserved for
 * exactly this call's patches. Returns 0 or a negative code named in diag (-CM_EUNSUPPORTED: no
 * vision tower, or a build without CUDA). Twin: s1_forward_vision (float32 CPU). */
int s1_forward_vision_cuda(const struct cm_model_dir *dir, int device, const float *pixels,
                           int64_t n_patches, const int32_t *grid_thw, int n_images,
                           bool round_bf16, float *ret_embeds, struct cm_diag *diag);

#endif
