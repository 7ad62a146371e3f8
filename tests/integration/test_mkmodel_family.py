"""The family directories s1-mkmodel --s1-out --family writes (the real-shape benchmark staging of
issue 18, here at the tiny shape) are served by the real trio on the CPU: OmniJev (vision, tied,
kept rank-4 adapter, random heads, option-token rows; the Qwen3.5 tokenizer), Open-Jev (merged,
random head) and JEMM (vision, kept rank-16 adapter on every language projection); each answers
the first two requests of its family's e2e fixture with status 200, the family's model id and one
answer per question with its probabilities summing to 1. Stdlib only.

usage: test_mkmodel_family.py BUILD_ROOT SHARED_DIR QWEN35_TOKENIZER_JSON
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "cuda"))
import trio_cuda_stage as stage  # noqa: E402

OMNI_T = "q_proj,k_proj,v_proj,o_proj,in_proj_qkv,in_proj_z,out_proj,gate_proj,up_proj,down_proj"
JEMM_T = ("in_proj_qkv,in_proj_z,in_proj_a,in_proj_b,out_proj,q_proj,k_proj,v_proj,o_proj,"
          "gate_proj,up_proj,down_proj")
MODEL_IDS = {"omnijev": "tinnel123/OmniJev", "open_jev": "s1serve/open-jev-tiny-random",
             "jemm": "JEMM"}


def main():
    build, shared, tok35 = (os.path.abspath(p) for p in sys.argv[1:4])
    tok3 = os.path.join(shared, "tokenizers", "qwen3", "tokenizer.json")
    mk = [os.path.join(build, "tools", "mkmodel", "s1-mkmodel"), "--shape", "tiny"]
    args = {"omnijev": ["--vision", "--tied", "--seed", "3", "--tokenizer", tok35, "--adapter-rank",
                        "4", "--adapter-alpha", "8", "--adapter-targets", OMNI_T, "--head-width",
                        "32", "--ord-width", "16"],
            "open_jev": ["--seed", "4242", "--tokenizer", tok3],
            "jemm": ["--vision", "--seed", "4242", "--tokenizer", tok3, "--adapter-rank", "16",
                     "--adapter-alpha", "32", "--adapter-targets", JEMM_T, "--tokenizer-config",
                     os.path.join(shared, "tokenizers", "qwen3", "tokenizer_config.json")]}
    w = tempfile.mkdtemp(prefix="s1-mkfam-", dir="/tmp")
    fails = []
    try:
        for fam, extra in args.items():
            d = os.path.join(w, fam)
            subprocess.run(mk + extra + ["--family", fam, "--s1-out", d], check=True,
                           stdout=subprocess.DEVNULL)
            reqs, max_body = stage.requests(fam)
            outs = stage.serve_cpu(build, shared, d, reqs[:2], max_body)
            for r, o in zip(reqs, outs):
                a = o["answer"]
                qs = list(json.loads(r["body"])["questions"])
                ok = (o["status"] == 200 and a.get("model") == MODEL_IDS[fam] and
                      list(a.get("answers", {})) == qs)
                for ans in a.get("answers", {}).values():
                    p = ans.get("probabilities")
                    if p is not None:
                        ok = ok and abs(sum(p.values()) - 1.0) < 1e-6
                print(("ok   " if ok else "FAIL ") + f"{fam} {r['name']}: {json.dumps(a)[:200]}",
                      flush=True)
                if not ok:
                    fails.append(f"{fam} {r['name']}")
    finally:
        shutil.rmtree(w, ignore_errors=True)
    print(f"{len(fails)} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
