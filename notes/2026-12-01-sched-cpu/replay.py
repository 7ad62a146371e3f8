"""The executor alone, without HTTP: each family's recipe examples (REPS times each) are recorded
by an executor (--record), then re-run by s1-replay, which also checks every result bit for bit
against the recorded one. CPU seconds (user + system of the s1-replay process, from wait4) are
less sensitive than wall time to the other jobs on this shared machine.
  before       the old executor's code: BEFORE/s1-replay on records made by BEFORE/s1-executor
               (one program at a time, one row per launch)
  alone        AFTER/s1-replay on records made by AFTER/s1-executor: one program at a time
  batch        AFTER/s1-replay --batch, caches off: every program at once, shared steps
  batch+cache  AFTER/s1-replay --batch with the prefix (1 GiB) and vision (256 MiB) caches
usage: python3 replay.py BEFORE_BIN AFTER_BIN MODELS_DIR REPS OUT.jsonl"""
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")


def record(binp, model, examples, reps, rec, port):
    d = rec + "-run"
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    logs = [open(os.path.join(d, n + ".log"), "w") for n in ("ex", "fe", "pp")]
    procs = [subprocess.Popen([binp + "/s1-executor", "--model", model, "--device", "cpu",
                               "--listen", "ipc://%s/ex.sock" % d, "--record", rec],
                              stdout=logs[0], stderr=logs[0]),
             subprocess.Popen([binp + "/s1-frontend", "--listen", "127.0.0.1:%d" % port, "--pool",
                               "ipc://%s/fe.sock" % d, "--timeout-ms", "600000"],
                              stdout=logs[1], stderr=logs[1]),
             subprocess.Popen([binp + "/s1-preprocessor", "--frontend", "ipc://%s/fe.sock" % d,
                               "--executor", "ipc://%s/ex.sock" % d, "--model", model,
                               "--credits", "1"], stdout=logs[2], stderr=logs[2])]
    try:
        for _ in range(600):
            try:
                if urllib.request.urlopen("http://127.0.0.1:%d/health" % port).status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        for _ in range(reps):
            for ex in examples:
                with open(ex, "rb") as f:
                    req = urllib.request.Request("http://127.0.0.1:%d/v1/systemone" % port,
                                                 data=f.read(),
                                                 headers={"Content-Type": "application/json"})
                assert urllib.request.urlopen(req).status == 200
    finally:
        for p in procs:
            p.terminate()
            p.wait()


def timed(argv):
    t0 = time.time()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = p.stdout.read().decode()
    _, status, ru = os.wait4(p.pid, 0)
    return time.time() - t0, ru.ru_utime + ru.ru_stime, os.waitstatus_to_exitcode(status), out


def main():
    before, after, models, reps, out = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    port = 18770
    for fam in ("open_jev", "jemm", "omnijev"):
        ex_dir = os.path.join(ROOT, "recipe", fam, "examples")
        examples = sorted(os.path.join(ex_dir, f) for f in os.listdir(ex_dir))
        model = os.path.join(models, fam)
        recs = {}
        for ver, binp in (("before", before), ("after", after)):
            rec = "/tmp/sched-replay-%s-%s" % (ver, fam)
            shutil.rmtree(rec, ignore_errors=True)
            record(binp, model, examples, reps, rec, port)
            recs[ver] = rec
            port += 1
        n = len(examples) * reps
        runs = [("before", [before + "/s1-replay", recs["before"], "--model", model]),
                ("alone", [after + "/s1-replay", recs["after"], "--model", model]),
                ("batch", [after + "/s1-replay", recs["after"], "--model", model, "--batch",
                           "--prefix-cache-bytes", "0", "--vision-cache-bytes", "0"]),
                ("batch+cache", [after + "/s1-replay", recs["after"], "--model", model, "--batch",
                                 "--prefix-cache-bytes", str(1 << 30),
                                 "--vision-cache-bytes", str(256 << 20)])]
        for name, argv in runs:
            wall, cpu, rc, text = timed(argv)
            line = {"family": fam, "mode": name, "programs": n, "wall_s": round(wall, 3),
                    "cpu_s": round(cpu, 3), "programs_per_cpu_s": round(n / cpu, 3),
                    "load1": float(open("/proc/loadavg").read().split()[0]), "exit": rc,
                    "replay": text.strip().splitlines()[-1],
                    "scheduler": next((x for x in text.splitlines() if "scheduler:" in x), None)}
            print(json.dumps(line), flush=True)
            with open(out, "a") as f:
                f.write(json.dumps(line) + "\n")


main()
