"""What transformers 5.17 makes of release-format tokenizer and image-processor configs (the fixture
of test export_hf_transformers; s1-export follows it, tools/export/export_hf.h).

Tokenizer cases: a directory with a tokenizer.json (the real Qwen3 file of ../shared/tokenizers/qwen3,
or the derived Qwen3.5 one, tests/oracle/tokenizer_qwen35.py), a tokenizer_config.json and a
config.json as a release has them (or without them); AutoTokenizer.from_pretrained(dir) gives the
class and the ids of STRINGS (add_special_tokens=False; the Devanagari line is issue 15's example:
a Qwen2Tokenizer config gives 11 ids where the Qwen3.5 tokenizer.json gives 7; the Cyrillic,
Turkish, Arabic and Finnish words are vocabulary entries the Qwen3.5 tokenizer.json reaches with
ignore_merges, which a Qwen3_5Tokenizer config turns off). "refuse" cases are combinations
s1-export does not reproduce; transformers' class is recorded for them too.
Processor cases: a preprocessor_config.json / processor_config.json; AutoImageProcessor gives the
class and the settings that decide the pixels (smart_resize bounds: legacy min_pixels /
max_pixels over size).

usage: tokenizer_transformers.py QWEN3_TOKENIZER QWEN35_TOKENIZER OUT.jsonl
Needs transformers 5.17 (not in CI's venv; the fixture is committed).
"""
import hashlib
import json
import os
import shutil
import sys
import tempfile
import warnings

STRINGS = ["हिन्दी में लिखें", "Hello world", "  two  spaces\n\nand lines ", "naïve café",
           "e\u0301 cafe\u0301", "ภาษาไทย ใช้ได้", "한국어 텍스트",
           " Документы", " çeşitli", " سبب", " kuopio", " судебного",
           "<|im_start|>user\nhi<|im_end|>", "x = [1, 2, 3]; // 12345"]

BASE = {"add_prefix_space": False, "bos_token": None, "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>", "errors": "replace", "model_max_length": 262144,
        "pad_token": "<|endoftext|>", "split_special_tokens": False, "unk_token": None}
QWEN35_CONFIG = {"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"]}
QWEN3_CONFIG = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}


def tok_cases():
    """(name, tokenizer "qwen3" | "qwen35", tokenizer_config or None, config or None, expect)."""
    c = []
    for t in ("qwen35", "qwen3"):
        c += [
            (t + "_qwen2_class", t, dict(BASE, tokenizer_class="Qwen2Tokenizer"), None, "ok"),
            (t + "_qwen35_class", t, dict(BASE, tokenizer_class="Qwen3_5Tokenizer"), None, "ok"),
            (t + "_backend_class", t, dict(BASE, tokenizer_class="TokenizersBackend"), QWEN35_CONFIG, "ok"),
            (t + "_no_class_qwen35_config", t, dict(BASE), QWEN35_CONFIG, "ok"),
            (t + "_no_class_qwen3_config", t, dict(BASE), QWEN3_CONFIG, "ok"),
            (t + "_nothing", t, None, None, "ok"),
            (t + "_qwen2_prefix_space", t, dict(BASE, tokenizer_class="Qwen2Tokenizer", add_prefix_space=True), None, "ok"),
        ]
    # class-name resolution alone: on the smaller Qwen3 file (the 20 MB Qwen3.5 one costs minutes
    # under ASan)
    c += [
        ("qwen3_qwen2_fast_class", "qwen3", dict(BASE, tokenizer_class="Qwen2TokenizerFast"), QWEN35_CONFIG, "ok"),
        ("qwen3_pretrained_fast_class", "qwen3", dict(BASE, tokenizer_class="PreTrainedTokenizerFast"), None, "ok"),
        ("qwen3_no_tokenizer_config_qwen35_config", "qwen3", None, QWEN35_CONFIG, "ok"),
    ]
    c += [
        ("refuse_llama_class", "qwen3", dict(BASE, tokenizer_class="LlamaTokenizer"), None, "refuse"),
        ("refuse_split_special", "qwen3", dict(BASE, tokenizer_class="Qwen2Tokenizer", split_special_tokens=True), None, "refuse"),
        ("refuse_add_bos", "qwen3", dict(BASE, tokenizer_class="Qwen2Tokenizer", add_bos_token=True, bos_token="<|endoftext|>"), None, "refuse"),
        ("refuse_new_special", "qwen3", dict(BASE, tokenizer_class="Qwen2Tokenizer", eos_token="<|brand_new|>"), None, "refuse"),
        ("refuse_decoder_mismatch", "qwen3", dict(BASE, tokenizer_class="Qwen2Tokenizer", added_tokens_decoder={
            "151643": {"content": "<|endoftext|>", "lstrip": True, "normalized": False, "rstrip": False,
                       "single_word": False, "special": True}}), None, "refuse"),
        ("refuse_unknown_model_type", "qwen3", dict(BASE), {"model_type": "llama"}, "refuse"),
    ]
    return c


PROC = {"size": {"shortest_edge": 65536, "longest_edge": 16777216}, "patch_size": 16,
        "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5], "resample": 3, "rescale_factor": 1 / 255,
        "do_convert_rgb": True, "do_resize": True, "do_rescale": True, "do_normalize": True,
        "image_processor_type": "Qwen2VLImageProcessorFast"}


def proc_cases():
    """(name, file name, content, expect)."""
    legacy = {k: v for k, v in PROC.items() if k != "size"}
    return [
        ("proc_release", "preprocessor_config.json", PROC, "ok"),
        ("proc_slow_class", "preprocessor_config.json", dict(PROC, image_processor_type="Qwen2VLImageProcessor"), "ok"),
        ("proc_legacy_pixels", "preprocessor_config.json", dict(legacy, min_pixels=3136, max_pixels=12845056), "ok"),
        ("proc_legacy_over_size", "preprocessor_config.json", dict(PROC, min_pixels=65536, max_pixels=602112), "ok"),
        ("proc_v5_processor_config", "processor_config.json", {"image_processor": PROC, "processor_class": "Qwen3VLProcessor"}, "ok"),
        ("refuse_proc_patch14", "preprocessor_config.json", dict(PROC, patch_size=14), "refuse"),
        ("refuse_proc_clip_mean", "preprocessor_config.json", dict(PROC, image_mean=[0.48145466, 0.4578275, 0.40821073]), "refuse"),
        ("refuse_proc_bilinear", "preprocessor_config.json", dict(PROC, resample=2), "refuse"),
        ("refuse_proc_no_normalize", "preprocessor_config.json", dict(PROC, do_normalize=False), "refuse"),
    ]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    warnings.filterwarnings("ignore")
    import transformers
    from transformers import AutoImageProcessor, AutoTokenizer
    assert transformers.__version__ == "5.17.0", transformers.__version__
    q3, q35, out = sys.argv[1:4]
    files = {"qwen3": q3, "qwen35": q35}
    lines = [{"versions": {"transformers": transformers.__version__},
              "tokenizers": {k: sha256(v) for k, v in files.items()}, "strings": STRINGS}]
    work = tempfile.mkdtemp()
    try:
        for name, t, cfg, config, expect in tok_cases():
            d = os.path.join(work, name)
            os.makedirs(d)
            shutil.copy(files[t], os.path.join(d, "tokenizer.json"))
            if cfg is not None:
                json.dump(cfg, open(os.path.join(d, "tokenizer_config.json"), "w"))
            if config is not None:
                json.dump(config, open(os.path.join(d, "config.json"), "w"))
            rec = {"name": name, "kind": "tokenizer", "tokenizer": t, "tokenizer_config": cfg,
                   "config": config, "expect": expect}
            try:
                tk = AutoTokenizer.from_pretrained(d)
                rec["transformers_class"] = type(tk).__name__
                rec["ids"] = [tk(s, add_special_tokens=False)["input_ids"] for s in STRINGS]
                rec["vocab_size"] = len(tk)
            except Exception as e:  # noqa: BLE001  recorded, the case still stands
                rec["transformers_error"] = "%s: %s" % (type(e).__name__, str(e)[:200])
            print(name, rec.get("transformers_class"), expect)
            lines.append(rec)
        for name, fname, content, expect in proc_cases():
            d = os.path.join(work, name)
            os.makedirs(d)
            json.dump(content, open(os.path.join(d, fname), "w"))
            rec = {"name": name, "kind": "processor", "file": fname, "content": content, "expect": expect}
            p = AutoImageProcessor.from_pretrained(d)
            rec["transformers_class"] = type(p).__name__
            rec["min_pixels"] = p.size.shortest_edge
            rec["max_pixels"] = p.size.longest_edge
            rec["patch_size"], rec["merge_size"] = p.patch_size, p.merge_size
            print(name, rec["transformers_class"], rec["min_pixels"], rec["max_pixels"], expect)
            lines.append(rec)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    with open(out, "w", encoding="utf-8") as f:
        for r in lines:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
