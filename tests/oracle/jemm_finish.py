"""JEMM finish oracle: for request bodies and BF16 label logits, the response the reference writes
(jemm/model.py softmax with NumPy's logaddexp.reduce, systemone.answer, json.dumps with
ensure_ascii=False), with a fixed latency. Candidate ids and types come from jemm_render.py.

usage: jemm_finish.py OUT.jsonl [--check]     (python with numpy)

Each line: {"name", "body", "logits" [[float per candidate] per question], "latency_ms",
"response" (the exact body text)}.
"""
import json
import os
import random
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jemm_render  # noqa: E402

TEMPERATURE = 1.3480874159655591
MM_TEMPERATURE = 1.3954832341582943
LATENCY_MS = 171.5


def bf16(x):
    """Round a float to BF16 (round to nearest even), as the LM head's output is rounded."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", u))[0]


def softmax(scores, temperature):
    values = np.asarray(scores, dtype=np.float64) / temperature
    return np.exp(values - np.logaddexp.reduce(values))


def answer(kind, probabilities, choice):
    confidence = max(probabilities.values())
    if kind == "noul":
        return {"type": "noul", "noul": probabilities["yes"], "probabilities": probabilities,
                "confidence": confidence}
    if kind == "score":
        return {"type": "score", "probabilities": probabilities, "confidence": confidence,
                "expected_value": sum(float(k) * p for k, p in probabilities.items())}
    return {"type": "choice", "choice": choice, "probabilities": probabilities, "confidence": confidence}


def case(name, body, logits):
    grids, questions = jemm_render.compile_body(body)
    temperature = MM_TEMPERATURE if grids else TEMPERATURE
    answers, ids = {}, []
    for (qid, kind, user, n), s in zip(questions, logits):
        cands = jemm_render.candidates(json.loads(body)["questions"][qid])
        probs = {c["id"]: float(p) for c, p in zip(cands, softmax(s, temperature))}
        answers[qid] = answer(kind, probs, max(probs, key=probs.get))
        ids.append(n)
    tokens = 0  # usage is the render fixture's business; the C test passes the same count
    resp = {"model": "JEMM", "answers": answers,
            "usage": {"input_tokens": tokens, "output_tokens": 0, "latency_ms": LATENCY_MS}}
    return {"name": name, "body": body, "logits": logits, "latency_ms": LATENCY_MS,
            "response": json.dumps(resp, ensure_ascii=False)}


def cases():
    rnd = random.Random(7)
    multi = json.dumps({
        "state": {"service": "payments", "healthy": True, "errors": 0},
        "questions": {
            "z-last": {"type": "noul", "instructions": "Is the service healthy?"},
            "a-first": {"type": "choice", "instructions": "Which action inspects logs?",
                        "criteria": {"deploy": "Deploy.", "inspect": "Inspect logs.", "erase": "Erase."}}}})
    yield "multi_noul_choice", multi, [[bf16(22.1), bf16(16.2)], [bf16(14.0), bf16(22.3), bf16(15.0)]]
    yield "noul_zero", '{"questions":{"n":{"type":"noul"}}}', [[0.0, 0.0]]
    yield "choice_tie_first", '{"questions":{"q":{"criteria":{"b":"x","a":"y"}}}}', [[1.0, 1.0]]
    yield "choice_tie_later", '{"questions":{"q":{"criteria":{"a":"x","b":"y","c":"z"}}}}', [[2.0, 5.0, 5.0]]
    yield "score_uniform", '{"questions":{"s":{"type":"score","criteria":[null,"mid","hi"]}}}', [[0.0, 0.0, 0.0]]
    yield "score_ties_bf16", '{"questions":{"s":{"type":"score","criteria":["a","b","c"]}}}', \
        [[bf16(19.9), bf16(20.0), bf16(19.95)]]
    yield "text_spec_j7", '{"questions":{"q":{"criteria":{"a":"x","b":"y","c":"z"}}}}', [[10.0, 12.0, 11.5]]
    yield "bf16_pair_text", '{"questions":{"q":{"criteria":{"a":"x","b":"y"}}}}', [[20.0, 19.875]]
    png = jemm_render.b64png(64, 64)
    yield "bf16_pair_image", json.dumps({"images": [png], "questions": {"q": {"criteria": {"a": "x", "b": "y"}}}}), \
        [[20.0, 19.875]]
    yield "image_mixed", json.dumps({"images": [png, png], "questions": {
        "c": {"criteria": {"first": "1", "second": "2"}}, "n": {"type": "noul"},
        "s": {"type": "score", "criteria": ["0", "1", "2"]}}}), \
        [[bf16(18.5), bf16(17.75)], [bf16(21.0), bf16(18.0)], [bf16(20.0), bf16(20.5), bf16(20.25)]]
    for k, n in enumerate((2, 5, 10, 26, 32)):
        crit = {f"option-{i:02d}": f"Option {i}" for i in range(n)}
        s = [bf16(rnd.uniform(-4.0, 30.0)) for _ in range(n)]
        s[n // 2] = s[0]  # a bf16 tie
        yield f"choice_random_{n}", json.dumps({"questions": {"q": {"criteria": crit}}}), [s]
        levels = [f"level text {i}" for i in range(n)]
        s = [bf16(rnd.gauss(20.0, 3.0)) for _ in range(n)]
        yield f"score_random_{n}", json.dumps({"questions": {"s": {"type": "score", "criteria": levels}}}), [s]
    yield "unicode_keys", json.dumps({"questions": {"\u95ee": {"criteria": {"\u7532\"": "x", "\\b": "y"}}}},
                                     ensure_ascii=False), [[bf16(3.0), bf16(-1.5)]]
    yield "extreme_margin", '{"questions":{"q":{"criteria":{"a":"x","b":"y"}}}}', [[bf16(40.0), bf16(-40.0)]]


def build():
    return "".join(json.dumps(case(*c), ensure_ascii=False) + "\n" for c in cases())


def main():
    if len(sys.argv) not in (2, 3) or sys.argv[2:] not in ([], ["--check"]):
        sys.exit(__doc__)
    jemm_render.write_or_check(sys.argv[1], build(), sys.argv[2:] == ["--check"])


if __name__ == "__main__":
    main()
