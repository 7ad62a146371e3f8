"""Replay: an executor started with --record writes every program and its result; s1-replay re-runs
them against the model directory and finds them identical (exit 0), also all at once through one
scheduler (--batch: the programs mixed in steps); against a model directory with another head it
reports the difference (exit 1). --describe reports each program's tokens as the answers counted
them."""
import copy
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess

import trio


def other_head(model, out):
    """A copy of the model directory whose scalar head bias is 1.0 larger (hash updated)."""
    shutil.copytree(model, out)
    path = os.path.join(out, "heads.safetensors")
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        t = json.loads(f.read(n))["open_jev.head.bias"]
        assert t["dtype"] == "F32" and t["shape"] == [1], t
        f.seek(8 + n + t["data_offsets"][0])
        (b,) = struct.unpack("<f", f.read(4))
        f.seek(8 + n + t["data_offsets"][0])
        f.write(struct.pack("<f", b + 1.0))
    with open(path, "rb") as f:
        data = f.read()
    mpath = os.path.join(out, "s1-model.json")
    with open(mpath) as f:
        m = json.load(f)
    m["files"]["heads.safetensors"] = {"sha256": hashlib.sha256(data).hexdigest(),
                                       "bytes": len(data)}
    with open(mpath, "w") as f:
        json.dump(m, f, indent=2)
    return out


def test(t):
    t.make_model()
    other = other_head(t.model, os.path.join(t.tmp, "other"))
    rec = os.path.join(t.tmp, "rec")
    os.environ["S1_EXECUTOR_STEPS"] = "1"  # the executor's step log (one stderr line per step)
    t.start_all(credits=2, record=rec)
    del os.environ["S1_EXECUTOR_STEPS"]
    score = copy.deepcopy(trio.VALID)
    score["questions"] = {"lvl": {"type": "score", "instructions": {"scale": [1, 2]},
                                  "criteria": ["low", {"mid": True}, ["high"]]}}
    noul = {"state": ["é", "漢字"], "questions": {"n": {"type": "noul", "instructions": "ok?",
                                                        "criteria": {"true": "y", "false": "n"}}}}
    answers = []
    for body in (trio.VALID, score, noul):
        s, h, b = t.post(body)
        assert s == 200, (s, b[:300])
        answers.append(b)
    s, h, b = t.post({"state": "s", "questions": {}})  # refused by compile: never reaches the executor
    assert s == 422
    t.kill("ex", 15)
    assert os.stat(rec).st_mode & 0o777 == 0o700, oct(os.stat(rec).st_mode)  # request contents
    files = sorted(os.listdir(rec))
    assert files == ["%08d.%s.msgpack" % (i, k) for i in range(3) for k in ("program", "result")], files
    # --describe reads the records without a model: each program's whole-sequence tokens are the
    # reference's count the preprocessor answered (usage.input_tokens: one forward per candidate
    # prompt), and what the backbone launches is its prefixes and rows, each token once
    r = subprocess.run([t.bin("tools/s1-replay"), rec, "--describe"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    desc = r.stdout.decode()
    assert r.returncode == 0 and "3 records described, 0 unreadable" in desc, desc
    lines = [dict(kv.split("=", 1) for kv in ln.split()[2:])
             for ln in desc.splitlines() if ln.startswith("record ")]
    assert len(lines) == 3, desc
    for d, b in zip(lines, answers):
        want = json.loads(b)["usage"]["input_tokens"]
        k = {key: int(v) for key, v in d.items() if key != "request"}
        assert k["seq_tokens"] == want, (d, want)
        assert k["launched"] == k["prefix_tokens"] + k["row_tokens"] <= want, d
        assert k["rows"] >= 1 and k["heads"] == k["rows"] and k["images"] == 0, d
        if k["rows"] == 1 and k["prefixes"] == 0:  # one causal sequence: n(n+1)/2 query-key pairs
            assert k["pairs"] == k["launched"] * (k["launched"] + 1) // 2, d
    assert sum(int(d["rows"]) for d in lines) >= 4, desc
    launched = sum(int(d["launched"]) for d in lines)
    # the executor's step log: every token the programs ask for launched once, each program
    # answered once, each step's parts within its whole
    with open(t.logs["ex"]) as f:
        steps = [dict(kv.split("=", 1) for kv in ln.split()[1:])
                 for ln in f if ln.startswith("s1-executor: step=")]
    steps = [{k: int(v) for k, v in st.items()} for st in steps]
    assert steps and [st["step"] for st in steps] == list(range(1, len(steps) + 1)), steps
    assert sum(st["tokens"] for st in steps) == launched, (steps, launched)
    assert sum(st["finished"] for st in steps) == 3, steps
    assert sum(st["rows"] for st in steps) == sum(int(d["rows"]) for d in lines), steps
    for st in steps:
        assert 1 <= st["programs"] <= st["active"] and st["images"] == 0, st
        assert st["forward_us"] + st["readout_us"] + st["heads_us"] <= st["total_us"], st
    r = subprocess.run([t.bin("tools/s1-replay"), rec, "--model", t.model],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = r.stdout.decode()
    assert r.returncode == 0 and "3 records, 3 identical, 0 differ" in out, out
    # the scheduler with the three programs at once, twice: they share steps (a budget of 300
    # tokens and 4 rows per launch spread their rows over several), and every result is the one
    # recorded alone
    r = subprocess.run([t.bin("tools/s1-replay"), rec, "--model", t.model, "--batch",
                        "--repeat", "2", "--max-batch-tokens", "300", "--max-seqs", "4"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out_b = r.stdout.decode()
    m = re.search(r"(\d+) steps, (\d+) program-steps .*, (\d+) tokens launched", out_b)
    assert r.returncode == 0 and "6 records, 6 identical, 0 differ" in out_b and m, out_b
    assert int(m.group(2)) > int(m.group(1)) * 1.5, out_b  # programs mixed in steps
    assert int(m.group(3)) == 2 * launched, (out_b, launched)  # no cache: every token twice
    # a bad option value is named (byte counts take K, M, G as the executor's do)
    r = subprocess.run([t.bin("tools/s1-replay"), rec, "--model", t.model, "--batch",
                        "--prefix-cache-bytes", "1Q"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    assert r.returncode == 2 and b'--prefix-cache-bytes "1Q": not a byte count' in r.stdout, r.stdout
    # --steps: the same run, one line per step, adding up to the scheduler's counters
    r = subprocess.run([t.bin("tools/s1-replay"), rec, "--model", t.model, "--batch",
                        "--repeat", "2", "--max-batch-tokens", "300", "--max-seqs", "4", "--steps",
                        "--prefix-cache-bytes", "0K"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out_s = r.stdout.decode()
    st = [{k: int(v) for k, v in (kv.split("=", 1) for kv in ln.split())}
          for ln in out_s.splitlines() if ln.startswith("step=")]
    assert r.returncode == 0 and m.group(0) in out_s, (out_s, out_b)
    assert len(st) == int(m.group(1)) and sum(x["programs"] for x in st) == int(m.group(2)), out_s
    assert sum(x["tokens"] for x in st) == 2 * launched and sum(x["finished"] for x in st) == 6
    assert all(x["tokens"] <= 300 or x["pieces"] + x["rows"] == 1 for x in st), out_s
    r = subprocess.run([t.bin("tools/s1-replay"), rec, "--model", other],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out2 = r.stdout.decode()
    assert r.returncode == 1 and "DIFFERS" in out2 and "0 identical, 3 differ" in out2, out2
    # the same requests answered again by a restarted executor give the same bytes (modulo timing)
    # ... recording into the same directory: it continues the numbering, overwriting nothing
    kept = {f: hashlib.sha256(open(os.path.join(rec, f), "rb").read()).hexdigest() for f in files}
    t.logs.pop("ex")
    t.start_executor(name="ex", record=rec)
    t.wait_health(200, want="ready")
    for body, before in zip((trio.VALID, score, noul), answers):
        s, h, b = t.post(body)
        assert s == 200
        strip = lambda x: x.split(b'"inference_seconds"')[0]
        assert strip(b) == strip(before), (b, before)
    t.kill("ex", 15)
    files2 = sorted(os.listdir(rec))
    assert files2 == ["%08d.%s.msgpack" % (i, k) for i in range(6) for k in ("program", "result")]
    assert all(hashlib.sha256(open(os.path.join(rec, f), "rb").read()).hexdigest() == h
               for f, h in kept.items()), "a restarted executor overwrote records"
    with open(t.logs["ex"]) as f:
        assert "holds records up to 00000002; numbering from 00000003" in f.read()
    records_dir_faults(t, rec)
    print(desc.strip())
    print(out.strip())


def msgpack_result(status, message):
    """A RESULT message (proto_result_encode's layout) with no outputs, encoded by hand."""
    def s(x):
        return bytes([0xa0 | len(x)]) + x.encode()
    return (b"\x87" + s("v") + b"\x04" + s("k") + s("result") + s("status") +
            b"\xd2" + struct.pack(">i", status) + s("message") + s(message) + s("outputs") +
            b"\x90" + s("t") + b"\x99" + b"\x00" * 9 + s("numerics") + s("fp32"))


def records_dir_faults(t, rec):
    """s1-replay on record directories that are not what it expects: it lists only the files
    named as records, never waits on a FIFO, names an unreadable program, refuses a directory
    with no record and options that do nothing, and skips a record whose recorded outcome was a
    deadline (a replay runs without deadlines)."""
    replay = t.bin("tools/s1-replay")

    def run(*args):
        r = subprocess.run([replay] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=60)
        return r.returncode, r.stdout.decode()
    odd = os.path.join(t.tmp, "odd")
    os.makedirs(odd)
    for i in range(2):
        for k in ("program", "result"):
            shutil.copy(os.path.join(rec, "%08d.%s.msgpack" % (i, k)), odd)
    for junk in ("1.result.msgpack", "+00000001.result.msgpack", "x.result.msgpack",
                 "00000001.result.msgpack.tmp", "000000001.result.msgpack"):
        shutil.copy(os.path.join(rec, "00000001.result.msgpack"), os.path.join(odd, junk))
    os.mkfifo(os.path.join(odd, "00000007.program.msgpack"))
    shutil.copy(os.path.join(rec, "00000001.result.msgpack"), odd + "/00000007.result.msgpack")
    with open(os.path.join(odd, "00000008.program.msgpack"), "wb") as f:
        f.write(b"\x81\xa1v\x04")  # a map without a kind
    shutil.copy(os.path.join(rec, "00000001.result.msgpack"), odd + "/00000008.result.msgpack")
    rc, out = run(odd, "--describe")
    assert rc == 1 and "4 records described, 2 unreadable" in out, out
    assert "record 00000007: unreadable program: %s/00000007.program.msgpack: not a regular " \
        "file" % odd in out, out
    assert re.search(r"record 00000008: unreadable program: .+", out), out
    rc, out = run(odd, "--model", t.model)
    assert rc == 1 and "4 records, 2 identical, 2 differ" in out, out
    empty = os.path.join(t.tmp, "empty")
    os.makedirs(empty)
    rc, out = run(empty, "--describe")
    assert rc == 2 and "holds no record" in out, out
    rc, out = run(rec, "--model", t.model, "--steps")
    assert rc == 2 and "are options of --batch" in out, out
    rc, out = run(rec, "--describe", "--model", t.model)
    assert rc == 2 and "--describe runs nothing" in out, out
    late = os.path.join(t.tmp, "late")
    os.makedirs(late)
    shutil.copy(os.path.join(rec, "00000000.program.msgpack"), late)
    with open(os.path.join(late, "00000000.result.msgpack"), "wb") as f:
        f.write(msgpack_result(-1015, "deadline passed while in flight"))
    for extra in ([], ["--batch", "--steps"]):
        rc, out = run(late, "--model", t.model, *extra)
        assert rc == 0 and "1 records, 0 identical, 0 differ, 1 skipped" in out, out
        assert "skipped: it recorded deadline passed (deadline passed while in flight)" in out, out


if __name__ == "__main__":
    trio.main(test)
