"""Closed-loop HTTP load client for the CPU before/after numbers of the executor scheduler
(issue 14), until `scripts/bench serve` (branch route) lands: C clients each send the next request
of a list as soon as their previous answer came (aiohttp, Debian's python3-aiohttp), for a warm-up
of W seconds (excluded) and then D seconds measured. Prints one JSON line: requests/s,
decisions/s (a decision is one question), latency p50/p95 (nearest rank), failures.

usage: python3 load.py URL CONCURRENCY WARMUP_S DURATION_S REQUEST.json [REQUEST.json...]"""
import asyncio
import json
import sys
import time

import aiohttp


async def client(session, url, bodies, k, t_measure, t_end, out):
    i = k
    while True:
        body, n_dec = bodies[i % len(bodies)]
        i += 1
        t0 = time.monotonic()
        if t0 >= t_end:
            return
        try:
            async with session.post(url, data=body,
                                    headers={"Content-Type": "application/json"}) as r:
                await r.read()
                ok = r.status == 200
        except aiohttp.ClientError:
            ok = False
        t1 = time.monotonic()
        if t0 >= t_measure and t1 <= t_end:
            out.append((t1 - t0, ok, n_dec))


async def main():
    url, conc, warm, dur = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    bodies = []
    for path in sys.argv[5:]:
        with open(path, "rb") as f:
            raw = f.read()
        bodies.append((raw, len(json.loads(raw)["questions"])))
    out = []
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout,
                                     connector=aiohttp.TCPConnector(limit=conc)) as s:
        t_measure = time.monotonic() + warm
        t_end = t_measure + dur
        await asyncio.gather(*(client(s, url, bodies, k, t_measure, t_end, out)
                               for k in range(conc)))
    lat = sorted(x[0] for x in out if x[1])
    n_ok = len(lat)

    def rank(p):
        return lat[max(0, -(-len(lat) * p // 100) - 1)] if lat else None
    print(json.dumps({"concurrency": conc, "seconds": dur, "requests": n_ok,
                      "failures": len(out) - n_ok, "requests_per_s": n_ok / dur,
                      "decisions_per_s": sum(x[2] for x in out if x[1]) / dur,
                      "p50_ms": rank(50) and rank(50) * 1e3, "p95_ms": rank(95) and rank(95) * 1e3}))


asyncio.run(main())
