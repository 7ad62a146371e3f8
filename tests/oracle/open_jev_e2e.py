#!/usr/bin/env python3
"""End-to-end Open-Jev oracle on a tiny random model (GPU machine: torch 2.11, transformers 5.17,
peft, tokenizers). Builds the upstream package the way Open-Jev ships one (torch-written head.pt,
a PEFT LoRA adapter saved on the bare text model, model.json, temperature.json) on top of a base
from s1-mkmodel (fixed seed; CI rebuilds the same bytes and checks the recorded SHA-256), then
answers a handful of requests exactly as the reference does:
  bf16 model (SDPA), unmerged PEFT adapter, batches of 32 right-padded prompts, final-norm hidden
  at each sequence's last real token -> fp32 head on the GPU -> float64 temperature softmax;
and again in float32 on the CPU (eager attention, each sequence alone) for the float32 backend.
Prompts, chat wrapping, token ids and the response rules come from open_jev_contract.py; the chat
prefix/suffix is checked against tokenizer.apply_chat_template(enable_thinking=False).
It also writes small torch-written .pt files for the C .pt reader test, and loads the stdlib
head writer's file (recipe/open_jev/write_head_pt.py) with torch.load to check that format.

usage: open_jev_e2e.py --mkmodel S1_MKMODEL --tokenizer-dir DIR --stdlib-pt FILE --out DIR
"""
import argparse
import collections
import hashlib
import json
import os
import shutil
import subprocess
import sys
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import open_jev_contract as oc  # noqa: E402

SEED_BASE = 4242
MKMODEL_ARGS = ["--shape", "tiny", "--seed", str(SEED_BASE)]
TEMPERATURE = 1.3862943611198906
MODEL_ID = "s1serve/open-jev-tiny-random"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "out_proj"]
LOG = []

REQUESTS = [
    ("choice", {"state": "A customer says: I was charged twice for one order.", "questions": {
        "route": {"type": "choice", "instructions": "Which team should handle this issue?",
                  "criteria": {"billing": "Problems with charges, invoices, refunds or payments.",
                               "security": "Unauthorized access or account compromise.",
                               "technical": "Service unavailable or a software malfunction."}}}}),
    ("noul", {"state": "The parcel arrived two weeks late and the box was damaged.", "questions": {
        "late": {"type": "noul", "instructions": "Was the delivery late?"},
        "refund": {"type": "noul", "instructions": "Should we refund?",
                   "criteria": {"true": "Refund the order.", "false": {"action": "apologise"}}}}}),
    ("score", {"state": "The service has been down for all users since 09:00.", "questions": {
        "urgency": {"type": "score", "instructions": "Assess the urgency.",
                    "criteria": ["Routine.", "Elevated.", ["Urgent", {"pager": True}],
                                 {"level": "critical", "notify": ["oncall", "cto"]}]}}}),
    ("structured_state", {"model": "open-jev", "state": {
        "ticket": {"id": 1729, "tags": ["billing", "vip"], "amount": 12.5, "currency": "EUR"},
        "customer": {"name": "Zoë", "since": 2019, "notes": None}, "flags": [True, False]},
        "questions": {
            "kind": {"type": "choice", "instructions": {"task": "classify", "labels": 3},
                     "criteria": {"refund": None, "question": "A plain question.",
                                  "complaint": ["angry", "upset"]}},
            "vip": {"type": "noul", "instructions": "Is the customer a VIP?"},
            "effort": {"type": "score", "instructions": "Effort to resolve.",
                       "criteria": ["low", "high"]}}}),
]


def log(msg):
    LOG.append(str(msg))
    print(msg, flush=True)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def make_package(base, pkg, hidden):
    from peft import LoraConfig, get_peft_model
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
    os.makedirs(pkg, exist_ok=True)
    full = mq.Qwen3_5ForConditionalGeneration.from_pretrained(base, dtype=torch.float32)
    lm = full.model.language_model
    names = {n.split(".")[-1] for n, _ in lm.named_modules()}
    targets = [t for t in TARGETS if t in names]
    torch.manual_seed(7)
    cfg = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, bias="none", target_modules=targets,
                     init_lora_weights=False)
    pm = get_peft_model(lm, cfg)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.mul_(0.25)
    pm.save_pretrained(os.path.join(pkg, "adapter"))
    n_modules = sum(1 for n, _ in pm.named_modules() if n.endswith(".lora_A"))
    torch.manual_seed(11)
    head = torch.nn.Linear(hidden, 1)
    with torch.no_grad():
        torch.nn.init.normal_(head.weight, std=0.5)
        head.bias.fill_(0.1)
    torch.save(head.state_dict(), os.path.join(pkg, "head.pt"))
    with open(os.path.join(pkg, "model.json"), "w") as f:
        json.dump({"model_id": MODEL_ID, "revision": "s1-mkmodel " + " ".join(MKMODEL_ARGS),
                   "max_length": 4096, "lora_rank": 8,
                   "method": "independent_candidate_lora_nll_brier"}, f, indent=2)
    with open(os.path.join(pkg, "temperature.json"), "w") as f:
        json.dump({"temperature": TEMPERATURE}, f)
    return targets, n_modules


def load_reference(base, pkg, dtype, device, attn):
    from peft import PeftModel
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
    full = mq.Qwen3_5ForConditionalGeneration.from_pretrained(base, dtype=dtype,
                                                              attn_implementation=attn)
    lm = full.model.language_model.to(device)
    pm = PeftModel.from_pretrained(lm, os.path.join(pkg, "adapter")).to(device).eval()
    sd = torch.load(os.path.join(pkg, "head.pt"), weights_only=True)
    head = torch.nn.Linear(sd["weight"].shape[1], 1).to(device).float()
    head.load_state_dict(sd)
    dtypes = sorted({str(p.dtype) for p in pm.parameters()})
    return pm, head, dtypes


def scores_for(pm, head, hf_tok, chat_texts, device, batch):
    """batch=None: each sequence alone; else right-padded batches of `batch` in order."""
    out = []
    step = batch or 1
    with torch.inference_mode():
        for i in range(0, len(chat_texts), step):
            texts = chat_texts[i:i + step]
            enc = hf_tok(texts, padding=True, truncation=False, return_tensors="pt")
            ids, mask = enc["input_ids"].to(device), enc["attention_mask"].to(device)
            hidden = pm(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state
            last = mask.sum(dim=1) - 1
            h = hidden[torch.arange(hidden.shape[0], device=device), last].float()
            out.extend(head(h).squeeze(-1).float().cpu().tolist())
    return out


def batch_order(records):
    """Sequence indices in the reference's candidate_batches order (spec §6.4)."""
    first, pos = [], 0
    for r in records:
        first.append(pos)
        pos += len(r["prompts"])
    batches = []
    for b in oc.candidate_batches(records, oc.BATCH):
        batches.append([first[i] + s + k for i, s, n in b for k in range(n)])
    return batches


def run_requests(base, pkg, tok_dir, out):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    hf_tok = AutoTokenizer.from_pretrained(base)
    hf_tok.padding_side = "right"
    fast = Tokenizer.from_file(os.path.join(tok_dir, "tokenizer.json"))
    chat = oc.MANIFEST["chat"]
    oc.MANIFEST["open_jev"].update(model_id=MODEL_ID, temperature=TEMPERATURE)
    results, checks = [], {"chat_template_equal": True, "ids_equal": True}
    models = {}
    models["bf16"] = load_reference(base, pkg, torch.bfloat16, "cuda", "sdpa")
    models["fp32"] = load_reference(base, pkg, torch.float32, "cpu", "eager")
    for name, body in REQUESTS:
        raw = json.dumps(body, ensure_ascii=False).encode()
        req = json.loads(raw)
        records, prompts = oc.compile_request(req["state"], req["questions"])
        texts = []
        for p in prompts:
            t = hf_tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                           add_generation_prompt=True, enable_thinking=False)
            if t != chat["prefix"] + p + chat["suffix"]:
                checks["chat_template_equal"] = False
                log(f"{name}: chat template differs: {t!r}")
            texts.append(t)
        ids = [hf_tok(t)["input_ids"] for t in texts]
        if ids != [fast.encode(t).ids for t in texts]:
            checks["ids_equal"] = False
        entry = {"name": name, "body": raw.decode(), "ids": ids}
        for kind, (pm, head, dtypes) in models.items():
            if kind == "bf16":
                scores = [None] * len(texts)
                for idx in batch_order(records):
                    for j, s in zip(idx, scores_for(pm, head, hf_tok, [texts[k] for k in idx],
                                                    "cuda", oc.BATCH)):
                        scores[j] = s
            else:
                scores = scores_for(pm, head, hf_tok, texts, "cpu", None)
            _, _, response = oc.predict(raw, scores, fast, 4096)
            resp = json.loads(response)
            entry[f"scores_{kind}"] = scores
            entry[f"answers_{kind}"] = resp["answers"]
            entry["usage"] = resp["usage"]
            entry[f"dtypes_{kind}"] = dtypes
        results.append(entry)
        log(f"{name}: {len(texts)} sequences, bf16 {entry['answers_bf16']}")
    return results, checks


def pt_fixtures(out, stdlib_pt):
    """Small torch-written files for the C reader, and torch.load of the stdlib writer's file."""
    t = torch.arange(6, dtype=torch.float32).view(2, 3) / 7
    sd = collections.OrderedDict(
        weight=torch.randn(3, 5, generator=torch.Generator().manual_seed(5)),
        half=torch.tensor([0.5, -2.25, 65504.0, 1e-3], dtype=torch.float16),
        bf=torch.tensor([[1.0, -0.1], [3.14159, 1e30]], dtype=torch.bfloat16),
        full=t, row=t[1], scalar=torch.tensor(2.5))
    torch.save(sd, os.path.join(out, "variety.pt"))
    torch.save({"t": t.t()}, os.path.join(out, "noncontig.pt"))
    torch.save({"i": torch.arange(3)}, os.path.join(out, "int64.pt"))
    expect = {k: {"shape": list(v.shape), "dtype": str(v.dtype),
                  "values": v.float().flatten().tolist()} for k, v in sd.items()}
    with open(os.path.join(out, "variety.json"), "w") as f:
        json.dump(expect, f)
    loaded = torch.load(stdlib_pt, weights_only=True)
    return {"stdlib_pt_keys": list(loaded.keys()),
            "stdlib_pt_weight_shape": list(loaded["weight"].shape),
            "stdlib_pt_weight_sum": float(loaded["weight"].double().sum()),
            "stdlib_pt_bias": loaded["bias"].tolist()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mkmodel", required=True)
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--stdlib-pt", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/ojev-e2e")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    base, pkg = os.path.join(a.work, "base"), os.path.join(a.out, "package")
    fix = {"versions": {"torch": torch.__version__, "python": sys.version}}
    try:
        import peft
        import transformers
        fix["versions"].update(transformers=transformers.__version__, peft=peft.__version__)
        subprocess.run([a.mkmodel, *MKMODEL_ARGS, "--tokenizer",
                        os.path.join(a.tokenizer_dir, "tokenizer.json"), "--out", base], check=True)
        shutil.copy(os.path.join(a.tokenizer_dir, "tokenizer_config.json"), base)
        fix["base"] = {"mkmodel_args": MKMODEL_ARGS,
                       "sha256": {f: sha256(os.path.join(base, f)) for f in sorted(os.listdir(base))
                                  if f.endswith(".safetensors") or f == "config.json"}}
        hidden = json.load(open(os.path.join(base, "config.json")))["text_config"]["hidden_size"]
        targets, n_modules = make_package(base, pkg, hidden)
        fix["package"] = {"targets": targets, "lora_modules": n_modules, "model_id": MODEL_ID,
                          "temperature": TEMPERATURE}
        fix["requests"], fix["checks"] = run_requests(base, pkg, a.tokenizer_dir, a.out)
    except Exception:
        log(traceback.format_exc())
        fix["error"] = traceback.format_exc()
    try:
        fix["pt"] = pt_fixtures(a.out, a.stdlib_pt)
    except Exception:
        log(traceback.format_exc())
        fix["pt_error"] = traceback.format_exc()
    fix["log"] = LOG
    with open(os.path.join(a.out, "e2e.json"), "w") as f:
        json.dump(fix, f, indent=1, ensure_ascii=False)
    print("done", "error" in fix)


if __name__ == "__main__":
    main()
