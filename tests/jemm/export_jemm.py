"""s1-export --family jemm: what it writes and what it refuses, on tiny random checkpoints
(s1-mkmodel). Stdlib only.

usage: export_jemm.py S1_MKMODEL S1_EXPORT TOKENIZER.json WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys

TARGETS = "in_proj_qkv,in_proj_z,in_proj_a,in_proj_b,out_proj,q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
SYSTEM = ("Choose the best available candidate for the question using only the supplied state. "
          "Return exactly one candidate label.")
PREFIX = "<|im_start|>system\n" + SYSTEM + "<|im_end|>\n<|im_start|>user\n"
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
fails = 0


def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("FAIL:", what)


def main():
    mk, ex, tok, work = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    def model(name, rank=16, alpha=32, targets=TARGETS, extra=()):
        hf, ad = os.path.join(work, name + "_hf"), os.path.join(work, name + "_ad")
        subprocess.run([mk, "--shape", "tiny", "--tokenizer", tok, "--out", hf, "--adapter-out", ad,
                        "--adapter-rank", str(rank), "--adapter-alpha", str(alpha),
                        "--adapter-targets", targets, *extra], check=True, capture_output=True)
        return hf, ad

    def export(hf, ad, out, *extra):
        args = [ex, "--family", "jemm", "--base", hf, "--out", os.path.join(work, out), *extra]
        if ad:
            args += ["--adapter", ad]
        return subprocess.run(args, capture_output=True, text=True)

    hf, ad = model("good")
    with open(os.path.join(ad, "decision_config.json"), "w") as f:
        json.dump({"temperature": 1.25, "threshold": 0.5}, f)
    r = export(hf, ad, "kept")
    check(r.returncode == 0, f"kept export: {r.stderr}")
    m = json.load(open(os.path.join(work, "kept", "s1-model.json")))
    j = m.get("jemm", {})
    check(m.get("family") == "jemm", "family jemm")
    check(j.get("lora_mode") == "unmerged_fp32" and "adapter" in m and "lora_merged" not in m,
          "the adapter is kept by default")
    check("adapter.safetensors" in m.get("files", {}), "adapter file listed")
    check(j.get("temperature") == 1.25 and j.get("mm_temperature") == 1.25 and j.get("threshold") == 0.5,
          f"calibration: mm_temperature defaults to temperature: {j}")
    check(j.get("label_token_ids") == list(range(32, 58)) + list(range(15, 21)), "label ids 32..57, 15..20")
    check(j.get("lora_rank") == 16 and j.get("lora_pairs") == 31, f"rank and pairs: {j}")
    check(m.get("chat") == {"prefix": PREFIX, "suffix": SUFFIX}, "the built-in wrapper")
    check(j.get("readout_token_id") == 271, "readout token")
    check(any(s["path"].endswith("decision_config.json") for s in m["upstream"]["sources"]),
          "decision_config.json recorded as a source")

    r = export(hf, ad, "merged", "--lora", "merge")
    m = json.load(open(os.path.join(work, "merged", "s1-model.json")))
    check(r.returncode == 0 and m["jemm"]["lora_mode"] == "merged_bf16" and "adapter" not in m,
          f"merge on request: {r.stderr}")

    os.remove(os.path.join(ad, "decision_config.json"))
    r = export(hf, ad, "nodc")
    m = json.load(open(os.path.join(work, "nodc", "s1-model.json")))
    check(r.returncode == 0 and m["jemm"]["temperature"] == 1.3480874159655591 and
          m["jemm"]["threshold"] == 0.9872681877423998, "model.py constants without decision_config.json")

    chat = os.path.join(work, "chat.json")
    with open(chat, "w") as f:
        json.dump({"prefix": "<|im_start|>system\n" + SYSTEM + "<|im_end|>\n<|im_start|>user\n",
                   "suffix": SUFFIX}, f)
    r = export(hf, ad, "chat", "--chat", chat)
    m = json.load(open(os.path.join(work, "chat", "s1-model.json")))
    check(r.returncode == 0 and m["jemm"]["chat_source"].startswith("--chat"), f"--chat: {r.stderr}")

    # a base whose chat template lacks the thinking-off suffix is refused without --chat
    with open(os.path.join(hf, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": "{{- '<|im_start|>' + m + '<|im_end|>\\n' }}"}, f)
    r = export(hf, ad, "tmpl")
    check(r.returncode != 0 and "chat template lacks" in r.stderr, f"template check: {r.stderr}")
    os.remove(os.path.join(hf, "tokenizer_config.json"))

    refusals = [
        ("no adapter", export(hf, None, "x1"), "needs --adapter"),
        ("bad --chat", export(hf, ad, "x2", "--chat", os.path.join(work, "missing.json")), "needs string keys"),
    ]
    with open(chat, "w") as f:
        json.dump({"prefix": PREFIX, "suffix": "<|im_end|>\n<|im_start|>assistant\n"}, f)
    refusals.append(("suffix without think", export(hf, ad, "x3", "--chat", chat), "suffix"))
    with open(chat, "w") as f:
        json.dump({"prefix": "<|im_start|>user\n", "suffix": SUFFIX}, f)
    refusals.append(("prefix without system", export(hf, ad, "x4", "--chat", chat), "system message"))
    hf8, ad8 = model("rank8", rank=8, alpha=16)
    refusals.append(("rank 8", export(hf8, ad8, "x5"), "JEMM is r = 16"))
    hfq, adq = model("subset", targets="q_proj,v_proj")
    refusals.append(("subset of targets", export(hfq, adq, "x6"), "every language projection"))
    hfh, adh = model("head", targets=TARGETS + ",lm_head")
    refusals.append(("adapted lm_head", export(hfh, adh, "x7"), "nothing else"))
    hft, adt = model("tied", extra=("--tied",))
    refusals.append(("tied head", export(hft, adt, "x8"), "untied"))
    for name, r, text in refusals:
        check(r.returncode != 0 and text in r.stderr, f"{name}: rc {r.returncode}: {r.stderr.strip()}")
    print(f"export_jemm: {fails} failures")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
