"""The OpenAPI document (frontend/openapi.json) against the code and the reference fixtures:
  1. it is an OpenAPI 3.1 document whose schemas are valid JSON Schema 2020-12 and whose
     references all resolve;
  2. its paths are exactly the routes of the table in frontend/fe_routes.c (a route missing
     from the document fails, and so does a documented path no source serves);
  3. its family schemas are as precise as the families' validation, on the oracle fixtures: every
     request the reference answers (tests/fixtures/open_jev/contract.jsonl, jemm/render.jsonl,
     omnijev/compile.jsonl, recipe/*/examples) passes its family's request schema, every answer
     of the contract fixture passes the Open-Jev answer schema and no other family's, and every
     request the reference refuses fails the schema, except the refusals listed in NOT_SCHEMA
     (token counts, image contents, totals over several questions: limits JSON Schema cannot
     state); a listed refusal that the schema does catch fails too, so the list stays true;
  4. the page at GET / (frontend/page.html) inserts no HTML (no innerHTML, outerHTML,
     insertAdjacentHTML, document.write, eval, Function) and loads nothing from elsewhere; every
     test that reads answers off its own socket checks them (trio.check_answer).
usage: test_openapi.py SOURCE_ROOT"""
import glob
import json
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1])
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import openapi_check  # noqa: E402

# Refusals of the references that no JSON Schema of one request can state, by fixture name.
NOT_SCHEMA = {
    "open_jev": {
        "model_other",                      # model names are the deployment's
        "json_int_beyond_64_bits",          # integers outside 64 bits anywhere in the body
        "json_int_beyond_64_bits_ignored_field",
        "json_int_below_64_bits_in_instructions",
        "json_overflow_float_in_state",     # 1e400 is a number to JSON Schema
        "json_overflow_float_in_instructions",
        "path_criteria_key_in_order",       # 1e400 again, in a later question's option
        "max_length_one_less",              # tokens
        "max_length_second_batch",
    },
    "jemm": {
        "j14_budget", "image_budget",       # tokens
        "tool_required_unhashable",         # a JSON text inside a description
        "image_bad_base64",                 # image contents
        "image_too_many_pixels",
        "image_placeholder_in_text",
    } | {"special_%s_image_%s" % (t, f)  # vision-marker text with an image (text and images)
         for t in ("vision_start", "vision_end", "vision_pad", "image_pad", "video_pad")
         for f in ("state", "state_key", "state_value", "instructions", "description",
                   "score_level", "tool_name")},
    "omnijev": {
        "video_short_timestamps",           # a length equal to another member's value
        "video_mosaic_too_small",           # image contents
        "panel_second_too_wide",
        "duplicate_keys",                   # answer keys derived from several members
        "too_many_options",                 # options that are not abstain
        "rows_over_1024",                   # options over all questions
        "box_wider_than_64_bits",           # an integer outside 64 bits (the strict parse)
    },
}

fails = []


def fail(msg):
    fails.append(msg)
    print("FAIL", msg)


def refs(node, out):
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            out.append(node["$ref"])
        for v in node.values():
            refs(v, out)
    elif isinstance(node, list):
        for v in node:
            refs(v, out)
    return out


def check_document(c):
    doc = c.doc
    if doc.get("openapi") != "3.1.0":
        fail("openapi is %r" % doc.get("openapi"))
    for name, s in doc["components"]["schemas"].items():
        try:
            c.V.check_schema(s)
        except Exception as e:  # SchemaError
            fail("schema %s: %s" % (name, str(e)[:300]))
    for r in refs(doc, []):
        try:
            c.resolve({"$ref": r})
        except (KeyError, AssertionError):
            fail("unresolved $ref %s" % r)
    ids = []
    for path, item in doc["paths"].items():
        if "x-s1-other-methods" not in item:
            fail("%s: no x-s1-other-methods (405) response" % path)
        for m, op in item.items():
            if m not in openapi_check.METHODS:
                continue
            ids.append(op.get("operationId"))
            for status, resp in op["responses"].items():
                resp = c.resolve(resp)
                for hname, h in resp.get("headers", {}).items():
                    if "schema" not in c.resolve(h):
                        fail("%s %s %s: header %s has no schema" % (m, path, status, hname))
                if "x-request-id" not in resp.get("headers", {}):
                    fail("%s %s %s: x-request-id is not documented" % (m, path, status))
    if len(ids) != len(set(ids)) or None in ids:
        fail("operationIds missing or not unique: %s" % ids)
    print("document: %d paths, %d operations, %d schemas, %d references"
          % (len(doc["paths"]), len(ids), len(doc["components"]["schemas"]), len(refs(doc, []))))


def check_routes(c):
    served = set()
    for name in ("fe_routes.c",):
        with open(os.path.join(ROOT, "frontend", name), encoding="utf-8") as f:
            served |= openapi_check.routes_of_source(f.read())
    documented = set(c.doc["paths"])
    if len(served) < 6:
        fail("only %d routes found in frontend/fe_routes.c: %s" % (len(served), served))
    for p in sorted(served - documented):
        fail("route %s of the frontend is missing from frontend/openapi.json" % p)
    for p in sorted(documented - served):
        fail("frontend/openapi.json documents %s, which the frontend does not serve" % p)
    print("routes: %s" % ", ".join(sorted(served)))


def family_case(c, family, name, body, refused, stats):
    """One fixture request: accepted ones must pass, refused ones fail unless in NOT_SCHEMA."""
    ref = "#/components/schemas/%sRequest" % {"open_jev": "OpenJev", "jemm": "Jemm",
                                               "omnijev": "OmniJev"}[family]
    errs = c.errors({"$ref": ref}, body)
    if not refused:
        if errs:
            fail("%s %s: the reference answers it, the schema refuses it: %s" % (family, name, errs))
        stats["accepted"] += 1
    elif name in NOT_SCHEMA[family]:
        if not errs:
            stats["not_schema"] += 1
        else:
            fail("%s %s is listed in NOT_SCHEMA but the schema refuses it (%s): drop it from the "
                 "list" % (family, name, errs[0]))
    elif errs:
        stats["refused"] += 1
    else:
        fail("%s %s: the reference refuses it, the schema lets it pass" % (family, name))


def check_families(c):
    stats = {f: {"accepted": 0, "refused": 0, "not_schema": 0} for f in NOT_SCHEMA}
    fx = os.path.join(ROOT, "tests", "fixtures")
    answers = 0
    ok_200 = {"oneOf": [{"$ref": "#/components/schemas/%sResponse" % f}
                        for f in ("OpenJev", "OmniJev", "Jemm")]}
    with open(os.path.join(fx, "open_jev", "contract.jsonl"), encoding="utf-8") as f:
        cases = [json.loads(line) for line in f][1:]
    for case in cases:
        if case["status"] == 400:
            continue  # not strict JSON: the parser's refusal, before any schema
        try:
            body = json.loads(case["body"])
        except ValueError:
            fail("open_jev %s: body does not parse" % case["name"])
            continue
        family_case(c, "open_jev", case["name"], body, case["status"] == 422, stats["open_jev"])
        if case["status"] == 200:
            resp = json.loads(case["response"])
            errs = c.errors(ok_200, resp)
            if errs:
                fail("open_jev %s: its answer fails the 200 schema: %s" % (case["name"], errs))
            answers += 1
    with open(os.path.join(fx, "jemm", "render.jsonl"), encoding="utf-8") as f:
        cases = [json.loads(line) for line in f][1:]
    for case in cases:
        body = case["body"]
        body = json.loads(body) if isinstance(body, str) else body
        family_case(c, "jemm", case["name"], body, "error" in case, stats["jemm"])
    with open(os.path.join(fx, "omnijev", "compile.jsonl"), encoding="utf-8") as f:
        cases = [json.loads(line) for line in f]
    for case in cases:
        family_case(c, "omnijev", case["name"], case["request"], "error" in case, stats["omnijev"])
    for family in ("open_jev", "omnijev", "jemm"):
        for path in sorted(glob.glob(os.path.join(ROOT, "recipe", family, "examples", "*.json"))):
            with open(path, encoding="utf-8") as f:
                family_case(c, family, os.path.relpath(path, ROOT), json.load(f), False,
                            stats[family])
    for family, s in stats.items():
        print("%s: %d accepted requests pass, %d refused ones fail the schema, %d refusals only the "
              "service can tell" % (family, s["accepted"], s["refused"], s["not_schema"]))
        if s["accepted"] < 4 or s["refused"] < 15:
            fail("%s: too few fixture cases (%s)" % (family, s))
    print("open_jev: %d reference answers pass the 200 schema as Open-Jev answers" % answers)
    if answers < 20:
        fail("only %d Open-Jev answers checked" % answers)


def check_page():
    with open(os.path.join(ROOT, "frontend", "page.html"), encoding="utf-8") as f:
        page = f.read()
    for bad in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                "Function(", "srcdoc"):
        if bad in page:
            fail("frontend/page.html uses %s: answer text must go in as text" % bad)
    for m in re.finditer(r"(?:src|href|action)\s*=\s*\"([^\"]*)\"|(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}",
                         page):
        target = m.group(1)
        if target is None or not (target.startswith(("/", "#", "data:")) or target == ""):
            fail("frontend/page.html loads from elsewhere: %r" % m.group(0))
    print("page: %d bytes, text only, nothing loaded from elsewhere" % len(page))


def check_raw_clients():
    """A test that talks HTTP on its own socket must check what it reads (trio.check_answer)."""
    for path in glob.glob(os.path.join(ROOT, "tests", "**", "*.py"), recursive=True):
        if "/oracle/" in path or path.endswith(("trio.py", "openapi_check.py")):
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        raw = re.search(r"http\.client|create_connection|urllib\.request|socket\.socket\(", text)
        # test_page.py's own HTTP client speaks WebDriver to chromedriver, not to the service
        if raw and "check_answer(" not in text and not path.endswith("frontend/test_page.py"):
            fail("%s reads HTTP answers itself (%s) without trio.check_answer"
                 % (os.path.relpath(path, ROOT), raw.group(0)))


def main():
    c = openapi_check.Contract(os.path.join(ROOT, "frontend", "openapi.json"))
    check_document(c)
    check_routes(c)
    check_families(c)
    check_page()
    check_raw_clients()
    print("%d failures" % len(fails))
    print("PASS" if not fails else "FAIL")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
