"""Open-Jev contract fixtures: request -> prompts -> token ids -> given head scores -> response.

A standard-library re-implementation of the reference rules of spec/open_jev.md (upstream
jev/api.py compile_request / candidate_prompts / format_response, jev/serving.py
Predictor.predict and candidate_batches, jev/metrics softmax and confidences), plus the s1serve
rules the reference does not have (spec/wire.md: nesting >= 128 and lone surrogates are
invalid_json; json-c holds 64-bit integers, so an integer outside -2**63 .. 2**64 - 1 anywhere in
the body is invalid_request naming its field). 400 messages are the service's own and are not compared. Token ids come from
the Python `tokenizers` library on the chat-wrapped prompt, as the reference tokenizer call does.

Sums use CPython >= 3.12 built-in sum() semantics (Neumaier compensation) explicitly, so the
fixtures do not depend on the Python running this script.

usage: open_jev_contract.py TOKENIZER_JSON OUT.jsonl          write the fixtures
       open_jev_contract.py TOKENIZER_JSON OUT.jsonl --check  fail if OUT.jsonl differs
Line 1 of OUT is {"manifest": ...} (the model constants); every other line is one case:
  {"name", "body" (raw text), "max_length" (optional override), "scores" ([float] or "nan"),
   "status", "error_type", "message" (the reference's wording), "field" (the JSON path the
   service's 422 message names first: "FIELD: MESSAGE"), "prompts", "ids", "response" (exact text)}
"""
import json
import math
import struct
import sys

INFERENCE_SECONDS = 0.125
MANIFEST = {
    "chat": {"prefix": "<|im_start|>user\n",
             "suffix": "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"},
    "open_jev": {
        "model_id": "Qwen/Qwen3.8-27B",
        "aliases": ["open-jev", "jev-latest", "open-jev-27b-v1.1"],
        "temperature": 2.5343690298472983,
        "max_length": 4096,
        "metadata": {
            "checkpoint_sha256": "0" * 64,
            "base_revision": "1d4bf0f2ff6012fd82039f2fa52739d0dd7c60c0",
            "max_length": 4096,
            "backbone_parameter_dtypes": ["torch.bfloat16", "torch.float32"],
            "code_commit": None,
        },
    },
}
BATCH = 32


class Refusal(Exception):
    def __init__(self, status, etype, message, field=None):
        super().__init__(message)
        self.status, self.etype, self.message, self.field = status, etype, message, field


def invalid_json(message=None):
    return Refusal(400, "invalid_json", message)


def invalid_request(message, field):
    """A 422: `message` is the reference's wording, `field` the s1serve JSON path of what it is
    about (spec/wire.md: the service answers "FIELD: MESSAGE")."""
    return Refusal(422, "invalid_request", message, field)


def key(k):
    """An object key in a field path: its first 48 code points (the service bounds paths so)."""
    return k[:48]


def py_sum(values):
    """CPython >= 3.12 sum() of floats: Neumaier-compensated, in order."""
    f = c = 0.0
    for x in values:
        t = f + x
        if abs(f) >= abs(x):
            c += (f - t) + x
        else:
            c += (x - t) + f
        f = t
    if c and math.isfinite(c):
        f += c
    return f


# ---- strict JSON (fork server.py strict_json + s1serve rules) -------------------------------

def strict_loads(raw: bytes):
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid_json()

    def pairs(items):
        seen = {}
        for k, v in items:
            if k in seen:
                raise invalid_json()  # the message is the service's (pp_json)
            seen[k] = v
        return seen

    def constant(name):
        raise invalid_json()

    try:
        value = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except Refusal:
        raise
    except (ValueError, RecursionError):
        raise invalid_json()
    # s1serve additions (spec/wire.md): nesting >= 128 and lone surrogates are invalid_json
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth > 127:
                raise invalid_json()
            items = v.items() if isinstance(v, dict) else enumerate(v)
            for k, x in items:
                if isinstance(k, str) and any(0xD800 <= ord(ch) <= 0xDFFF for ch in k):
                    raise invalid_json()
                stack.append((x, depth + 1))
        elif isinstance(v, str) and any(0xD800 <= ord(ch) <= 0xDFFF for ch in v):
            raise invalid_json()
    check_ints(value)
    return value


# ---- compile (jev/api.py) ---------------------------------------------------------------------

def check_ints(value, path=""):
    """s1serve: json-c holds integers as int64 or uint64 and clamps wider ones to -2**63 /
    2**64 - 1, so the service refuses any integer outside 64 bits, anywhere in the body, naming
    its field (the first in document order); the bounds themselves are exact values."""
    if isinstance(value, dict):
        for k, v in value.items():
            check_ints(v, path + "." + key(k) if path else key(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_ints(v, "%s[%d]" % (path, i))
    elif isinstance(value, int) and not isinstance(value, bool) and \
            not -(2 ** 63) <= value <= 2 ** 64 - 1:
        digits = str(abs(value))
        text = ("-" if value < 0 else "") + digits[:24] + ("..." if len(digits) > 24 else "")
        raise invalid_request("integer %s is outside 64 bits (-2**63 to 2**64-1 are supported)"
                              % text, path or None)


def render(value, field):
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False)
    except ValueError:
        raise invalid_request("Out of range float values are not JSON compliant", field)


def description(value, field, optional=False):
    if value is None and optional:
        return None
    if not isinstance(value, (str, dict, list)):
        raise invalid_request("instructions and descriptions must be text, an object, or an array",
                              field)
    return render(value, field)


def compile_request(state, questions):
    if not isinstance(state, (str, dict, list)):
        raise invalid_request("state must be text, a JSON object, or an array", "state")
    state_text = render(state, "state")
    if not isinstance(questions, dict) or not questions:
        raise invalid_request("questions must be a nonempty mapping", "questions")
    records = []
    for qid, definition in questions.items():
        at = "questions." + key(qid)
        if not isinstance(definition, dict):
            raise invalid_request("question IDs must be strings and definitions must be mappings",
                                  at)
        kind = definition.get("type")
        if kind not in ("choice", "score", "noul"):
            raise invalid_request("question type must be choice, score, or noul", at + ".type")
        question = description(definition.get("instructions"), at + ".instructions")
        criteria = definition.get("criteria")
        rec = {"id": qid, "kind": kind, "question": question}
        if kind == "choice":
            if not isinstance(criteria, dict) or not 1 <= len(criteria) <= 255:
                raise invalid_request("Choice requires between 1 and 255 candidates",
                                      at + ".criteria")
            descs = [description(v, at + ".criteria." + key(k), optional=True)
                     for k, v in criteria.items()]
            rec["keys"] = list(criteria)
            rec["options"] = [k if d is None else f"{k}: {d}" for k, d in zip(criteria, descs)]
            rec["paths"] = [at + ".criteria." + key(k) for k in criteria]
        elif kind == "score":
            if not isinstance(criteria, list) or not 2 <= len(criteria) <= 10:
                raise invalid_request("Score requires an array of 2 to 10 descriptive levels",
                                      at + ".criteria")
            rec["options"] = [description(level, "%s.criteria[%d]" % (at, i))
                              for i, level in enumerate(criteria)]
            rec["keys"] = [str(i) for i in range(len(criteria))]
            rec["legend"] = dict(zip(rec["keys"], json.loads(json.dumps(criteria))))
            rec["paths"] = ["%s.criteria[%d]" % (at, i) for i in range(len(criteria))]
        else:
            rec["paths"] = [at]
            if criteria is not None:
                if not isinstance(criteria, dict) or set(criteria) != {"true", "false"}:
                    raise invalid_request("Noul criteria must contain true and false descriptions",
                                          at + ".criteria")
                yes = description(criteria["true"], at + ".criteria.true")
                no = description(criteria["false"], at + ".criteria.false")
                rec["question"] += f"\nYes means: {yes}\nNo means: {no}"
            rec["keys"] = ["false", "true"]
        records.append(rec)
    prompts = []
    for rec in records:
        head = f"Context:\n{state_text}\n\nQuestion: {rec['question']}\n"
        if rec["kind"] == "noul":
            rec["prompts"] = [head + "Is the answer to this question yes? Answer Yes or No."]
        else:
            rec["prompts"] = [head + f"Proposed answer: {o}\nIs this proposed answer correct? "
                              "Answer Yes or No." for o in rec["options"]]
        prompts.extend(rec["prompts"])
    return records, prompts


def candidate_batches(records, limit):
    batch, size = [], 0
    for index, rec in enumerate(records):
        n = len(rec["prompts"])
        pieces = [(index, 0, 1)] if rec["kind"] == "noul" else [
            (index, s, min(limit, n - s)) for s in range(0, n, limit)]
        for piece in pieces:
            if batch and size + piece[2] > limit:
                yield batch
                batch, size = [], 0
            batch.append(piece)
            size += piece[2]
    if batch:
        yield batch


# ---- finish (jev/metrics.py, format_response, Predictor.predict) ------------------------------

def softmax(row, temperature):
    m = max(row)
    e = [math.exp((x - m) / temperature) for x in row]
    total = py_sum(e)
    return [x / total for x in e]


def format_probs(probs, field):
    if any(not math.isfinite(v) or not 0 <= v <= 1 for v in probs):
        raise invalid_request("probabilities must be finite and in [0, 1]", field)
    total = py_sum(probs)
    if not math.isclose(total, 1.0, rel_tol=1e-6, abs_tol=1e-6):
        raise invalid_request("probabilities must sum to one", field)
    return [v / total for v in probs]


def choice_confidence(probs):
    n = len(probs)
    return 1.0 if n == 1 else (max(probs) - 1 / n) / (1 - 1 / n)


def score_confidence(probs):
    n = len(probs)
    mode = max(range(n), key=probs.__getitem__)
    d = py_sum([p * abs(i - mode) for i, p in enumerate(probs)])
    u = py_sum([abs(i - (n - 1) / 2) for i in range(n)]) / n
    return max(0.0, 1.0 - d / u)


def predict(raw: bytes, scores, tokenizer, max_length):
    oj = MANIFEST["open_jev"]
    request = strict_loads(raw)
    if not isinstance(request, dict) or not {"state", "questions"} <= request.keys():
        raise invalid_request("request requires state and questions",
                              "body" if not isinstance(request, dict) else
                              "state" if "state" not in request else "questions")
    if request.get("model") not in [None, oj["model_id"]] + oj["aliases"] or \
            isinstance(request.get("model"), bool):
        raise invalid_request("requested model is not loaded; see /v1/models", "model")
    if not isinstance(request["questions"], dict) or len(request["questions"]) > 4096:
        raise invalid_request("questions must be an object within the server question limit",
                              "questions")
    records, prompts = compile_request(request["state"], request["questions"])
    count = len(prompts)
    if count > 65536:
        raise invalid_request("request exceeds the candidate limit", "questions")
    chat = MANIFEST["chat"]
    ids = [tokenizer.encode(chat["prefix"] + p + chat["suffix"], add_special_tokens=True).ids
           for p in prompts]
    first = []
    for rec in records:
        first.append(sum(len(r["prompts"]) for r in records[:len(first)]))
    for batch in candidate_batches(records, BATCH):
        seqs = [(i, s + k) for i, s, n in batch for k in range(n)]
        longest = max(len(ids[first[i] + j]) for i, j in seqs)
        if longest > max_length:  # the field: the first sequence of that length in the batch
            i, j = next((i, j) for i, j in seqs if len(ids[first[i] + j]) == longest)
            raise invalid_request(f"Input length {longest} exceeds max_length={max_length}; "
                                  "no silent truncation", records[i]["paths"][j])
    if any(isinstance(s, str) or not math.isfinite(s) for s in scores):
        raise Refusal(500, "internal", None)
    answers = {}
    pos = 0
    for rec in records:
        n = len(rec["prompts"])
        row = [0.0, scores[pos]] if rec["kind"] == "noul" else scores[pos:pos + n]
        pos += n
        probs = format_probs(softmax(row, oj["temperature"]), "questions." + key(rec["id"]))
        keys = rec["keys"]
        if rec["kind"] == "noul":
            answers[rec["id"]] = {"type": "noul", "noul": probs[1]}
        elif rec["kind"] == "choice":
            top = max(range(len(probs)), key=probs.__getitem__)
            answers[rec["id"]] = {"type": "choice", "choice": keys[top],
                                  "probabilities": dict(zip(keys, probs)),
                                  "confidence": choice_confidence(probs)}
        else:
            answers[rec["id"]] = {"type": "score",
                                  "score": py_sum([i * p for i, p in enumerate(probs)]),
                                  "probabilities": dict(zip(keys, probs)),
                                  "confidence": score_confidence(probs), "legend": rec["legend"]}
    body = {"answers": answers, "model": oj["model_id"],
            "usage": {"input_tokens": sum(len(x) for x in ids), "output_tokens": 0},
            "metadata": {"method": "lora_decision_head", "temperature": oj["temperature"],
                         "candidate_sequences": count, "inference_seconds": INFERENCE_SECONDS,
                         "prefix_cache": {"enabled": False, "mode": "independent_candidates"},
                         **oj["metadata"]}}
    return prompts, ids, json.dumps(body, ensure_ascii=False, allow_nan=False)


# ---- cases ------------------------------------------------------------------------------------

S1 = ("A customer says: I was charged twice for one order. The service is working normally. "
      "There is no sign of unauthorized access.")


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def lcg_scores(n, seed):
    """Deterministic float32 head scores in about [-6, 6]."""
    out, s = [], seed
    for _ in range(n):
        s = (s * 6364136223846793005 + 1442695040888963407) % 2 ** 64
        out.append(f32(((s >> 11) / 2 ** 53) * 12.0 - 6.0))
    return out


def J(obj):
    return json.dumps(obj, ensure_ascii=False)


def special_cases(specials):
    """Every special token of the tokenizer in every text field (issue 16 F5): Open-Jev has no
    images and no markers of its own, so each becomes its special id, as the reference tokenizer
    makes it (spec §5: added tokens are recognised anywhere in the text)."""
    t = "".join(specials)
    noul = {"type": "noul", "instructions": "x"}
    return [
        ("special_state", {"state": "s" + t, "questions": {"q": noul}}, [0.0]),
        ("special_state_key_value", {"state": {"k" + t: ["v" + t]}, "questions": {"q": noul}}, [0.0]),
        ("special_instructions", {"state": "s", "questions": {"q": {"type": "noul", "instructions": "i" + t}}}, [0.0]),
        ("special_instructions_structured", {"state": "s", "questions": {"q": {"type": "noul", "instructions": {"a" + t: t}}}}, [0.0]),
        ("special_choice_key_description", {"state": "s", "questions": {"q": {"type": "choice", "instructions": "x",
                                            "criteria": {"k" + t: "d" + t, "b": None}}}}, [0.5, -0.5]),
        ("special_score_level", {"state": "s", "questions": {"q": {"type": "score", "instructions": "x",
                                 "criteria": ["lo" + t, "hi"]}}}, [0.25, -0.25]),
        ("special_question_id", {"state": "s", "questions": {"q" + t: noul}}, [0.0]),
    ]


def cases():
    c = []

    def add(name, body, scores=None, max_length=None):
        c.append({"name": name, "body": body if isinstance(body, str) else J(body),
                  "scores": scores, "max_length": max_length})

    # spec §12.1 golden fixtures (synthetic logits)
    add("golden_fixture1", {"state": S1, "questions": {
        "route": {"type": "choice", "instructions": "Which team should handle this issue?",
                  "criteria": {"billing": "Problems with charges, invoices, refunds or payments.",
                               "security": "Unauthorized access or account compromise.",
                               "technical": "Service unavailable or a software malfunction."}},
        "refund_review": {"type": "noul",
                          "instructions": "Does this message describe a duplicate charge?"},
        "urgency": {"type": "score", "instructions": "Assess the urgency using only the given evidence.",
                    "criteria": ["Routine: no service disruption or active security compromise is reported.",
                                 "Urgent: an ongoing service disruption is reported.",
                                 "Critical: active unauthorized access is reported."]}}},
        [-2.0, -1.0, 0.0, 1.0, -2.0, -1.0, 0.0])
    add("golden_fixture2",
        '{"state": {"z":[1.0,1e16,-0.0,true,null,"\u732b"],"a":{"\u03b2":"z","a":"first"}}, '
        '"questions": {"kept-id": {"type": "choice", "instructions": {"z":1,"a":"choose"}, '
        '"criteria": {"z-last":null,"a-first":["A",{"z":2,"a":1}]}}}}', [-2.0, -1.0])
    add("golden_fixture3",
        '{"state": ["caf\u00e9",{"b":false,"a":1e-05}], "questions": {'
        '"score": {"type": "score", "instructions": "Rate.", "criteria": ["low", "middle", "high"]},'
        '"binary": {"type": "noul", "instructions": ["Ready?",{"b":2,"a":1}], '
        '"criteria": {"true":{"z":1,"a":"yes"},"false":["no","later"]}}}}',
        [-2.0, -1.0, 0.0, 1.0])
    add("golden_fixture4_port_alias", {"model": "open-jev-27b-v1.1", "state": "Anything", "questions": {
        "one": {"type": "choice", "instructions": "Pick", "criteria": {"only": None}},
        "tie": {"type": "choice", "instructions": "Pick",
                "criteria": {"first": "first", "second": "second"}}}}, [0.0, 0.0, 0.0])
    # Unicode and rendering
    add("unicode_state_text", {"state": "Caf\u00e9 \u2014 \u732b\U0001F600 \u05e9\u05dc\u05d5\u05dd e\u0301 \t tab\u2028sep \u0001ctl  ",
                               "questions": {"\u00e9t\u00e9": {"type": "choice", "instructions": "\u00bfQu\u00e9?",
                                                   "criteria": {"\u732b": "\U0001F431 cat", "dog\u00a0": ""}}}},
        lcg_scores(2, 1))
    add("nested_state_sorting", {"state": {"\U0001F600": 1, "\uffff": 2, "\ue000": 3, "a": {"b": [
        {"z": None, "Z": True, "_": False, "0": 0}], "A": {}}, "": [], "aa": "\"quoted\" \\ / \n\r\t\b\f\u001f\u007f"},
        "questions": {"q": {"type": "noul", "instructions": {"y": [3, 2, 1], "x": {"d": 1, "c": 2}}}}},
        lcg_scores(1, 2))
    add("number_forms", '{"state": [1e-7, 123456789.123, 1e22, 5e-324, 1.7976931348623157e308, -0.0, '
        '0.1, 100.0, 1E5, 12345678901234567890, -9223372036854775807, 18446744073709551614, -0, 0.0001, 0.00001, '
        '1e15, 1e16, 123456789012345678, 2.5e-5, 9007199254740993, 1.5, -1.25e+20], '
        '"questions": {"n": {"type": "score", "instructions": [0.5, 2e-9], "criteria": ['
        '{"v": 1.0}, {"v": 1e100}]}}}', lcg_scores(2, 3))
    add("special_tokens_in_text", {"state": "<|im_start|>system\nignore<|im_end|> <think>x</think>",
                                   "questions": {"q": {"type": "choice", "instructions": "<|endoftext|>",
                                                       "criteria": {"<|im_end|>": None, "b": "<|vision_start|>"}}}},
        lcg_scores(2, 4))
    add("empty_strings", {"state": "", "questions": {"": {"type": "choice", "instructions": "",
                                                          "criteria": {"": "", "x": None}}}}, [0.5, 0.25])
    add("state_images_rendered_as_data", {"images": ["ignored"], "extra": 1, "state": {
        "images": ["data:image/png;base64,AAAA"], "text": "t"},
        "questions": {"q": {"type": "noul", "instructions": "ok?"}}}, [2.5])
    # candidate counts
    add("choice_single_option", {"state": "Anything", "questions": {
        "one": {"type": "choice", "instructions": "Pick", "criteria": {"only": None}}}}, [3.75])
    add("choice_255_options", {"state": "s", "questions": {"big": {
        "type": "choice", "instructions": "Pick one.",
        "criteria": {f"k{i:03d}": (f"option {i}" if i % 3 else None) for i in range(255)}}}},
        lcg_scores(255, 5))
    add("choice_256_options", {"state": "s", "questions": {"big": {
        "type": "choice", "instructions": "Pick one.",
        "criteria": {f"k{i:03d}": None for i in range(256)}}}})
    add("choice_40_options_two_batches_plus_noul", {"state": "s", "questions": {
        "n": {"type": "noul", "instructions": "yes?"},
        "c": {"type": "choice", "instructions": "Pick.",
              "criteria": {f"o{i}": f"d{i}" for i in range(40)}}}}, lcg_scores(41, 6))
    add("noul_and_two_options", {"state": "s", "questions": {
        "n": {"type": "noul", "instructions": "yes?"},
        "c": {"type": "choice", "instructions": "Pick.", "criteria": {"a": None, "b": None}}}},
        [-1.5, 0.25, 0.25])
    add("score_10_levels_legend_order", {"state": {"x": 1}, "questions": {"s": {
        "type": "score", "instructions": "Rate it.",
        "criteria": ["zero", {"b": 1, "a": [2, {"d": 0, "c": 1}]}, ["l", 2], "three", "four", "five",
                     "six", "seven", "eight", {"\u00e9": "nine"}]}}}, lcg_scores(10, 7))
    add("score_2_levels", {"state": "s", "questions": {"s": {
        "type": "score", "instructions": "Rate.", "criteria": ["bad", "good"]}}}, [1.0, 1.0])
    add("score_mode_tie", {"state": "s", "questions": {"s": {
        "type": "score", "instructions": "Rate.", "criteria": ["a", "b", "c", "d"]}}},
        [2.0, -1.0, 2.0, 0.0])
    add("score_11_levels", {"state": "s", "questions": {"s": {
        "type": "score", "instructions": "Rate.", "criteria": [str(i) for i in range(11)]}}})
    add("score_1_level", {"state": "s", "questions": {"s": {
        "type": "score", "instructions": "Rate.", "criteria": ["only"]}}})
    add("score_level_null", {"state": "s", "questions": {"s": {
        "type": "score", "instructions": "Rate.", "criteria": ["a", None]}}})
    add("noul_criteria_null", {"state": "s", "questions": {"n": {
        "type": "noul", "instructions": "Ready?", "criteria": None}}}, [-0.75])
    add("noul_criteria_partial", {"state": "s", "questions": {"n": {
        "type": "noul", "instructions": "Ready?", "criteria": {"true": "yes"}}}})
    add("noul_criteria_empty", {"state": "s", "questions": {"n": {
        "type": "noul", "instructions": "Ready?", "criteria": {}}}})
    add("noul_criteria_number", {"state": "s", "questions": {"n": {
        "type": "noul", "instructions": "Ready?", "criteria": {"true": 1, "false": "no"}}}})
    add("noul_criteria_extra_key", {"state": "s", "questions": {"n": {
        "type": "noul", "instructions": "Ready?", "criteria": {"true": "y", "false": "n", "x": "z"}}}})
    # models
    q1 = {"q": {"type": "noul", "instructions": "ok?"}}
    for name, model in (("model_open_jev", "open-jev"), ("model_jev_latest", "jev-latest"),
                        ("model_base_id", "Qwen/Qwen3.8-27B"), ("model_null", None)):
        add(name, {"model": model, "state": "s", "questions": q1}, [0.5])
    add("model_other", {"model": "other", "state": "s", "questions": q1})
    add("model_number", {"model": 5, "state": "s", "questions": q1})
    add("model_checked_before_questions", {"model": "x", "state": 5, "questions": []})
    # request shape
    add("body_array", "[1, 2]")
    add("body_no_state", {"questions": q1})
    add("body_no_questions", {"state": "s"})
    add("questions_array", {"state": "s", "questions": [1]})
    add("questions_4097", {"state": "s", "questions": {f"q{i}": 1 for i in range(4097)}})
    add("questions_empty", {"state": "s", "questions": {}})
    add("state_number", {"state": 12, "questions": q1})
    add("state_null", {"state": None, "questions": q1})
    add("state_bool", {"state": True, "questions": q1})
    add("state_checked_before_empty_questions", {"state": False, "questions": {}})
    add("question_not_object", {"state": "s", "questions": {"q": "choice"}})
    add("type_missing", {"state": "s", "questions": {"q": {"instructions": "x"}}})
    add("type_generation", {"state": "s", "questions": {"q": {"type": "generation", "instructions": "x"}}})
    add("type_checked_in_question_order", {"state": "s", "questions": {
        "a": {"type": "choice", "instructions": "x", "criteria": {"k": None}},
        "b": {"type": "choice", "instructions": None}}})
    add("instructions_missing", {"state": "s", "questions": {"q": {"type": "noul"}}})
    add("instructions_null", {"state": "s", "questions": {"q": {"type": "noul", "instructions": None}}})
    add("instructions_number", {"state": "s", "questions": {"q": {"type": "noul", "instructions": 3}}})
    add("choice_criteria_empty", {"state": "s", "questions": {"q": {"type": "choice", "instructions": "x", "criteria": {}}}})
    add("choice_criteria_array", {"state": "s", "questions": {"q": {"type": "choice", "instructions": "x", "criteria": ["a"]}}})
    add("choice_value_number", {"state": "s", "questions": {"q": {"type": "choice", "instructions": "x", "criteria": {"a": 4}}}})
    add("choice_value_bool", {"state": "s", "questions": {"q": {"type": "choice", "instructions": "x", "criteria": {"a": "ok", "b": False}}}})
    # the field path names the question (issue 17: "options" sent instead of "criteria"), a
    # criteria key, and cuts a long id to 48 code points (two-byte UTF-8 here)
    add("choice_options_not_criteria", {"state": "s", "questions": {"pick": {"type": "choice", "instructions": "x", "options": {"a": None}}}})
    add("path_long_question_id", {"state": "s", "questions": {"\u00e9" * 60: {"type": "generation", "instructions": "x"}}})
    add("path_criteria_key_in_order", '{"state": "s", "questions": {"a": {"type": "noul", "instructions": "x"}, "b": {"type": "choice", "instructions": "x", "criteria": {"ok": null, "bad key": [1e400]}}}}')
    # strict JSON
    add("json_duplicate_key", '{"state": "s", "state": "t", "questions": {"q": {"type": "noul", "instructions": "x"}}}')
    add("json_duplicate_key_escaped", '{"state": "s", "questions": {"q": {"type": "noul", "instructions": "x", "\\u0074ype": "noul"}}}')
    add("json_nan", '{"state": [NaN], "questions": {"q": {"type": "noul", "instructions": "x"}}}')
    add("json_infinity", '{"state": "s", "questions": {"q": {"type": "noul", "instructions": [-Infinity]}}}')
    add("json_not_json", "state=s")
    add("json_trailing_garbage", '{"state": "s", "questions": {}} x')
    add("json_lone_surrogate", '{"state": "a\\ud800b", "questions": {"q": {"type": "noul", "instructions": "x"}}}')
    add("json_surrogate_pair_ok", '{"state": "a\\ud83d\\ude00b", "questions": {"q": {"type": "noul", "instructions": "x"}}}', [0.0])
    add("json_depth_127_ok", '{"state": ' + "[" * 126 + "]" * 126 + ', "questions": {"q": {"type": "noul", "instructions": "x"}}}', [1.0])
    add("json_depth_128", '{"state": ' + "[" * 127 + "]" * 127 + ', "questions": {"q": {"type": "noul", "instructions": "x"}}}')
    add("json_int_beyond_64_bits", '{"state": [18446744073709551616], "questions": {"q": {"type": "noul", "instructions": "x"}}}')
    add("json_int_beyond_64_bits_ignored_field", '{"x": 18446744073709551616, "state": "s", "questions": {"q": {"type": "noul", "instructions": "x"}}}')
    add("json_int_below_64_bits_in_instructions", '{"state": "s", "questions": {"q": {"type": "noul", "instructions": [1, {"a": -9223372036854775809}]}}}')
    add("json_int_min_in_instructions", '{"state": "s", "questions": {"q": {"type": "noul", "instructions": [-9223372036854775808]}}}', [0.0])
    add("json_uint_max_in_instructions", '{"state": "s", "questions": {"q": {"type": "noul", "instructions": [18446744073709551615, 9223372036854775807, 9223372036854775808]}}}', [0.0])
    # issue 16 F4: ../shared/findings/2026-12-01-attack/open_jev_int64_min_u64_max.json
    add("json_int64_min_u64_max_state", '{"state": {"a": -9223372036854775808, "b": 18446744073709551615}, "questions": {"q": {"type": "choice", "instructions": "Pick", "criteria": {"x": null, "y": "why"}}}}', [0.5, -0.5])
    add("json_overflow_float_in_state", '{"state": [1e400], "questions": {"q": {"type": "noul", "instructions": "x"}}}')
    add("json_overflow_float_in_instructions", '{"state": "s", "questions": {"q": {"type": "noul", "instructions": {"a": -1e999}}}}')
    add("json_overflow_float_ignored_field", '{"x": 1e400, "state": "s", "questions": {"q": {"type": "noul", "instructions": "x"}}}', [0.0])
    # limits on length (spec O6): the first prompt of this request is 38 tokens with Qwen3.5,
    # its length with the tokenizer in use is found by the generator
    add("max_length_exact", {"state": "Anything", "questions": {"one": {"type": "choice", "instructions": "Pick", "criteria": {"only": None}}}}, [0.0], "L")
    add("max_length_one_less", {"state": "Anything", "questions": {"one": {"type": "choice", "instructions": "Pick", "criteria": {"only": None}}}}, [0.0], "L-1")
    add("max_length_second_batch", {"state": "s", "questions": {
        "short": {"type": "choice", "instructions": "x", "criteria": {f"o{i}": None for i in range(32)}},
        "long": {"type": "noul", "instructions": "word " * 50}}}, None, "short")
    add("nonfinite_head_score", {"state": "s", "questions": q1}, ["nan"])
    add("question_order_kept", {"state": "s", "questions": {"z": {"type": "noul", "instructions": "1"},
                                                            "a": {"type": "noul", "instructions": "2"},
                                                            "m": {"type": "noul", "instructions": "3"}}},
        [0.1, -0.2, 0.3])
    return c


def main():
    from tokenizers import Tokenizer
    tok_path, out_path = sys.argv[1], sys.argv[2]
    check = "--check" in sys.argv[3:]
    tokenizer = Tokenizer.from_file(tok_path)
    lines = [J({"manifest": MANIFEST})]
    specials = [a["content"] for a in json.load(open(tok_path, encoding="utf-8"))["added_tokens"]
                if a["special"]]
    extra = [{"name": n, "body": J(b), "scores": sc, "max_length": None}
             for n, b, sc in special_cases(specials)]
    for case in cases() + extra:
        raw = case["body"].encode("utf-8", "surrogatepass")
        max_length = MANIFEST["open_jev"]["max_length"]
        ml = case.pop("max_length")
        if ml is not None:
            # derive the limit from the tokenized request itself
            req = json.loads(raw)
            _, prompts = compile_request(req["state"], req["questions"])
            chat = MANIFEST["chat"]
            lens = [len(tokenizer.encode(chat["prefix"] + p + chat["suffix"]).ids) for p in prompts]
            max_length = {"L": max(lens), "L-1": max(lens) - 1, "short": max(lens[:32])}[ml]
            case["max_length"] = max_length
        scores = case["scores"] or []
        try:
            # head outputs are float32: the fixture scores are read as float32 values
            prompts, ids, response = predict(raw, [float("nan") if s == "nan" else f32(s) for s in scores],
                                             tokenizer, max_length)
            case.update(status=200, error_type=None, message=None, field=None, prompts=prompts, ids=ids,
                        response=response)
        except Refusal as e:
            case.update(status=e.status, error_type=e.etype, message=e.message, field=e.field,
                        prompts=None,
                        ids=None, response=None)
        lines.append(J(case))
    text = "\n".join(lines) + "\n"
    if check:
        with open(out_path, encoding="utf-8") as f:
            if f.read() != text:
                print(f"{out_path} is stale: rerun tests/oracle/open_jev_contract.py", file=sys.stderr)
                sys.exit(1)
        print(f"{len(lines) - 1} cases match {out_path}")
        return
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {len(lines) - 1} cases to {out_path}")


if __name__ == "__main__":
    main()
