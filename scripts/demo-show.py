#!/usr/bin/env python3
"""Prints each question of a demo request next to its answer (scripts/demo).
usage: demo-show.py REQUEST.json ANSWER.json"""
import json
import sys


def short(v, n=90):
    s = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
    return s if len(s) <= n else s[: n - 1] + "…"


def find_answers(resp, ids):
    """The object mapping question ids to answers: the response itself or one of its members."""
    cands = [resp] + [v for v in resp.values() if isinstance(v, dict)]
    for c in cands:
        if ids and all(q in c for q in ids):
            return c
    return None


def main():
    req = json.load(open(sys.argv[1]))
    raw = open(sys.argv[2], encoding="utf-8").read()
    try:
        resp = json.loads(raw)
    except ValueError:
        print(raw)
        return
    qs = req.get("questions") or {}
    ans = find_answers(resp, list(qs)) if isinstance(resp, dict) else None
    if ans is None:  # an error or an unexpected shape: print it whole
        print(json.dumps(resp, indent=1, ensure_ascii=False))
        return
    for qid, q in qs.items():
        a = ans[qid]
        print(f"  {qid} ({q.get('type', 'choice')}): {short(q.get('instructions', ''))}")
        probs = a.get("probabilities") if isinstance(a, dict) else None
        if isinstance(probs, dict):
            pick = a.get("choice", a.get("noul"))
            for k, p in probs.items():
                mark = "  <- decision" if k == pick else ""
                print(f"      {p:7.4f}  {short(k, 60)}{mark}")
            rest = {k: v for k, v in a.items() if k not in ("probabilities", "type")}
            print(f"      {short(rest, 100)}")
        elif isinstance(a, dict) and isinstance(a.get("noul"), (int, float)):
            print(f"      {a['noul']:7.4f}  yes")
            rest = {k: v for k, v in a.items() if k not in ("noul", "type")}
            if rest:
                print(f"      {short(rest, 100)}")
        else:
            print(f"      {short(a, 100)}")
    rest = {k: v for k, v in resp.items() if not (isinstance(v, dict) and v is ans)}
    if ans is not resp and rest:
        print(f"  {short(rest, 100)}")


if __name__ == "__main__":
    main()
