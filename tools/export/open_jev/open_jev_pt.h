/* A reader for PyTorch `torch.save` checkpoints holding a flat state dict of dense tensors, without
 * torch: the file is a zip archive (stored entries) of `<name>/data.pkl`, a pickle (protocols 2-5)
 * that names each tensor's storage, and `<name>/data/<key>` raw little-endian storages. Only the
 * pickle subset torch writes for a state dict is interpreted; nothing is ever imported or called.
 * It leaves out compressed or zip64 archives, quantized and sparse tensors, and nested objects. */
#ifndef S1_OPEN_JEV_PT_H
#define S1_OPEN_JEV_PT_H

#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"
#include "cm_safetensors.h"

#define EX_PT_MAX_BYTES ((size_t)1 << 30) /* largest .pt file read: 1 GiB */
#define EX_PT_MAX_TENSORS 4096            /* tensors in one state dict */
#define EX_PT_MAX_VALUES (1 << 20)        /* pickle values built while reading data.pkl */

/* One tensor of the state dict, converted to float32. */
struct ex_pt_tensor {
  char *name;                           /* state-dict key, heap */
  enum cm_dtype dtype;                  /* storage dtype as saved (F32, F16, BF16) */
  int n_dims;                           /* 0..CM_TENSOR_MAX_DIMS */
  int64_t shape[CM_TENSOR_MAX_DIMS];    /* sizes, C order */
  int64_t n_elems;                      /* product of shape */
  float *data;                          /* [n_elems] float32 values (widened exactly), heap */
};

/* A read state dict. */
struct ex_pt_state {
  struct ex_pt_tensor *tensors; /* [n_tensors], in pickle order */
  size_t n_tensors;             /* tensors */
};

/* Reads a torch.save'd state dict, or a single torch.save'd tensor (then one tensor named ""; the
 * release format of OmniJev's new_tok_emb.pt, spec/omnijev.md §11.3), from memory.
 * Shapes: bytes[n_bytes] is the whole file.
 * Ownership: fills *ret_state (heap; ex_pt_state_fini). Written only on success.
 * Returns: 0; -CM_EFORMAT (not a zip, bad offsets, pickle neither a tensor nor a dict of tensors, storage too
 * short, a non-contiguous stride); -CM_EUNSUPPORTED (compressed or zip64 entry, a storage type
 * other than Float/Half/BFloat16, an unknown opcode or global); -CM_ELIMIT (a limit above);
 * -ENOMEM. diag names the entry, key or opcode offset.
 * Source: torch/serialization.py _save (zip format, persistent ids ('storage', type, key,
 * location, numel)) and torch/_utils.py _rebuild_tensor_v2; Python's pickle opcodes (pickletools). */
int ex_pt_read(const uint8_t *bytes, size_t n_bytes, struct ex_pt_state *ret_state,
               struct cm_diag *diag);

/* ex_pt_read on a file. Returns ex_pt_read's codes, -ENOENT / -EIO, -CM_ELIMIT (> EX_PT_MAX_BYTES). */
int ex_pt_read_file(const char *path, struct ex_pt_state *ret_state, struct cm_diag *diag);

/* The tensor called `name`, or NULL. */
const struct ex_pt_tensor *ex_pt_find(const struct ex_pt_state *state, const char *name);

void ex_pt_state_fini(struct ex_pt_state *state);

#endif
