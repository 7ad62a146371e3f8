/* What transformers 5.17 makes of a release's tokenizer and image-processor files, for s1-export:
 * the tokenizer class AutoTokenizer picks (tokenizer_config.json's tokenizer_class, else
 * config.json's model_type) and what that class rebuilds over tokenizer.json (a Qwen2Tokenizer or
 * Qwen3_5Tokenizer keeps only the vocabulary, merges, added tokens and post-processor and sets its
 * own normalizer, pre-tokenizer and BPE options), written as the tokenizer.json the model
 * directory serves; and the image processor's effective settings (legacy min_pixels/max_pixels
 * over size), checked against what the preprocessor implements. Leaves out every class and
 * setting it cannot reproduce: those are refused with a message naming the file and key. */
#ifndef S1_EXPORT_HF_H
#define S1_EXPORT_HF_H

#include <json-c/json.h>
#include <stdint.h>

/* Writes out_path: src_dir/tokenizer.json as transformers 5.17's AutoTokenizer loads src_dir
 * (byte for byte when the class keeps it as it is, or when its rebuild changes nothing; else
 * rewritten with the class's normalizer, pre-tokenizer and BPE options).
 * Classes: TokenizersBackend / PreTrainedTokenizerFast (tokenizer.json as it is), Qwen2Tokenizer
 * and Qwen3_5Tokenizer (also ...Fast; with no tokenizer_class, config.json's model_type picks one
 * as transformers' TOKENIZER_MAPPING does, and no config gives TokenizersBackend).
 * Refused (message on stderr, returns -1): another class or model_type; split_special_tokens,
 * add_bos_token, add_eos_token or fix_mistral_regex true; an added_tokens_decoder entry that is
 * not tokenizer.json's added token of that id; a special token (bos/eos/unk/pad, additional or
 * extra special tokens, with the class's defaults) that is not an added token of tokenizer.json
 * (transformers would give it a new id); a non-BPE model where the class rebuilds one.
 * Ownership: *ret_info (may be NULL) is a new object {"class", "rebuilt", "config"} the caller
 * puts into the manifest. Returns 0 or -1.
 * Source: transformers 5.17 tokenization_utils_tokenizers.py (convert_to_native_format),
 * models/qwen2/tokenization_qwen2.py, models/qwen3_5/tokenization_qwen3_5.py,
 * models/auto/tokenization_auto.py; measured by tests/oracle/tokenizer_transformers.py. */
int ex_hf_export_tokenizer(const char *src_dir, const char *out_path, json_object **ret_info);

/* The same over explicit inputs: tokenizer.json at tpath, the parsed tokenizer_config.json and
 * config.json objects (NULL: absent; only read); src_dir only names them in messages (s1-mkmodel
 * --s1-out, which has its config.json in memory). */
int ex_hf_export_tokenizer_files(const char *src_dir, const char *tpath, json_object *cfg,
                                 json_object *config, const char *out_path, json_object **ret_info);

/* The effective image-processor settings transformers 5.17 reads from src_dir
 * (preprocessor_config.json, else processor_config.json's "image_processor"), checked against the
 * preprocessor (Qwen2-VL family: patch 16, temporal patch 2, merge 2, mean and std 0.5, rescale
 * 1/255, resize, rescale, normalize and RGB conversion on, bicubic) and, where min_pixels /
 * max_pixels are ≥ 0, those smart_resize bounds (min_pixels / max_pixels keys win over size, as
 * in transformers). *ret_found is 0 when src_dir has no processor config.
 * Ownership: *ret_effective (may be NULL) a new object {"min_pixels", "max_pixels", "file"}.
 * Returns 0 or -1 (refused, message on stderr). Source: transformers 5.17 Qwen2VLImageProcessor. */
int ex_hf_check_processor(const char *src_dir, int64_t min_pixels, int64_t max_pixels,
                          int *ret_found, json_object **ret_effective);

#endif
