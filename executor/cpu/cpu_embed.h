/* Token embedding lookup for the CPU reference backend: a plain row gather, no scaling (Qwen3.5
 * does not scale embeddings). Scattering image features into <|image_pad|> rows is the model's. */
#ifndef S1_EX_CPU_EMBED_H
#define S1_EX_CPU_EMBED_H

#include <stddef.h>
#include <stdint.h>

/* out[t] = table[ids[t]].
 * Shapes: table [vocab, d] float32; ids [n] int32; out [n, d].
 * Returns 0, or -EINVAL when an id is outside [0, vocab) (out partly written).
 * Source: spec/qwen3_5.md §3.1 step 1 (embed_tokens). */
int ex_cpu_embed(const float *table, size_t vocab, const int32_t *ids, float *out, size_t n,
                 size_t d);

#endif
