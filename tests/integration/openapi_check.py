"""Checks HTTP answers against the OpenAPI 3.1 document of the service (frontend/openapi.json) with
Debian's python3-jsonschema (installed by scripts/install-deps; loaded from Debian's dist-packages
whichever python3 runs the tests, and a missing package fails the test, never skips it).

For one answer it finds the operation (path without the query, method; a path not in the document
takes `x-s1-unknown-path`, another method the path item's `x-s1-other-methods`) and the response of
its status (an undocumented status fails), then checks every header the response documents
(present when `required`, its value against its schema when present), the content type against
the response's content keys, and the body against the media type's schema (JSON bodies strictly
parsed; HEAD answers must have no body). For a 200 of POST /v1/systemone it also checks the request
body against the request schema of the family whose answer schema matched (`FooResponse` →
`FooRequest`): the document may not refuse a request the service answers.
trio.Trio.http calls check() for every answer, so every test that talks HTTP through the trio
helpers is checked; code that opens its own socket calls check() itself.
Stdlib + jsonschema."""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DOCUMENT = os.path.join(HERE, "..", "..", "frontend", "openapi.json")
DEBIAN_DIST = "/usr/lib/python3/dist-packages"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def _jsonschema():
    """Debian's jsonschema (python3-jsonschema), imported with its dependencies from dist-packages."""
    saved = list(sys.path)
    if os.path.isfile(os.path.join(DEBIAN_DIST, "jsonschema", "__init__.py")):
        sys.path.insert(0, DEBIAN_DIST)
    try:
        import jsonschema  # noqa: F401
        import jsonschema.exceptions  # noqa: F401
    except ImportError as e:
        raise AssertionError("openapi_check: jsonschema is missing (python3-jsonschema; run "
                             "scripts/install-deps): %s" % e)
    finally:
        sys.path[:] = saved
    return sys.modules["jsonschema"]


def _strict_json(data):
    def bad(name):
        raise ValueError("non-finite number %s" % name)
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    return json.loads(text, parse_constant=bad)


class Contract:
    """The document and one validator per schema pointer. Counts what it checked."""

    def __init__(self, path=DOCUMENT):
        self.path = os.path.abspath(path)
        with open(self.path, "rb") as f:
            self.raw = f.read()
        self.doc = json.loads(self.raw)
        self.js = _jsonschema()
        self.V = self.js.Draft202012Validator
        self._validators = {}
        self.counts = {}  # status -> answers checked
        self.routes = set()  # operations seen

    # -- schemas ---------------------------------------------------------------------------------
    def resolve(self, node):
        """Follows a local $ref (components of the document)."""
        while isinstance(node, dict) and "$ref" in node and len(node) == 1:
            ref = node["$ref"]
            assert ref.startswith("#/"), ref
            node = self.doc
            for part in ref[2:].split("/"):
                node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def validator(self, schema):
        """A 2020-12 validator of `schema` whose #/ references resolve in the document."""
        key = json.dumps(schema, sort_keys=True)
        v = self._validators.get(key)
        if v is None:
            root = dict(self.doc)
            root.pop("$ref", None)
            root["allOf"] = [schema]
            v = self._validators[key] = self.V(root)
        return v

    def errors(self, schema, value):
        """The messages of every way `value` fails `schema` (empty when it is valid)."""
        errs = list(self.validator(schema).iter_errors(value))
        if not errs:
            return []
        best = self._explain(max(errs, key=lambda e: len(e.absolute_path)))
        where = "/".join(str(p) for p in best.absolute_path)
        return ["at /%s: %s" % (where, best.message[:300])] + ["(%d errors)" % len(errs)]

    def _explain(self, e):
        """Inside a failed oneOf/anyOf, the error of the branch that came closest (fewest errors,
        then the deepest): for a member told apart by `type`, the branch of its type."""
        while e.context:
            branches = {}
            for sub in e.context:
                branches.setdefault(sub.relative_schema_path[0], []).append(sub)
            group = min(branches.values(),
                        key=lambda g: (len(g), -max(len(s.absolute_path) for s in g)))
            e = max(group, key=lambda s: len(s.absolute_path))
        return e

    def is_valid(self, pointer, value):
        return not self.errors({"$ref": pointer}, value)

    # -- operations -------------------------------------------------------------------------------
    def response_of(self, method, path, status):
        """(operation label, response object) for an answer; AssertionError when undocumented."""
        path = path.split("?", 1)[0]
        item = self.doc["paths"].get(path)
        if item is None:
            label = "unknown path %s" % path
            resp = self.resolve(self.doc["x-s1-unknown-path"])
            return label, resp if status == 404 else None
        op = item.get(method.lower())
        if op is None:
            resp = self.resolve(item["x-s1-other-methods"])
            return "%s %s (not served)" % (method, path), resp if status == 405 else None
        responses = op["responses"]
        resp = responses.get(str(status), responses.get("default"))
        return "%s %s" % (method, path), self.resolve(resp) if resp is not None else None

    def check(self, method, path, status, headers, body, request_body=None):
        """Checks one answer (headers: lower-case names → values; body: bytes). Returns the
        parsed JSON body (or the text, or None). Raises AssertionError naming what differs."""
        label, resp = self.response_of(method, path, status)
        where = "%s -> %d" % (label, status)
        assert resp is not None, "openapi: %s: status %d is not documented" % (label, status)
        headers = {k.lower(): v for k, v in headers.items()}
        for name, h in resp.get("headers", {}).items():
            h = self.resolve(h)
            value = headers.get(name.lower())
            if value is None:
                assert not h.get("required"), "openapi: %s: header %s missing" % (where, name)
                continue
            errs = self.errors(h["schema"], value)
            assert not errs, "openapi: %s: header %s: %r: %s" % (where, name, value, errs)
        content = resp.get("content", {})
        is_head = method.upper() == "HEAD"
        if is_head or not content:
            assert not body, "openapi: %s: %d body bytes where none belong" % (where, len(body))
        if not content:
            self._count(label, status)
            return None
        ctype = headers.get("content-type")
        assert ctype is not None, "openapi: %s: no content-type" % where
        media = content.get(ctype)
        if media is None:  # a content key without parameters matches any parameters
            media = content.get(ctype.split(";", 1)[0].strip())
        assert media is not None, "openapi: %s: content-type %r, documented %s" % (
            where, ctype, sorted(content))
        if is_head:
            self._count(label, status)
            return None
        if ctype.split(";", 1)[0].strip().endswith("json"):
            try:
                value = _strict_json(body)
            except ValueError as e:
                raise AssertionError("openapi: %s: body is not strict JSON: %s" % (where, e))
        else:
            value = body.decode("utf-8")
        errs = self.errors(media["schema"], value)
        assert not errs, "openapi: %s: body: %s\n  body: %s" % (where, errs, str(value)[:600])
        if request_body is not None and method.upper() == "POST" and status == 200:
            self._check_request(where, media["schema"], value, request_body)
        self._count(label, status)
        return value

    def _check_request(self, where, schema, answer, request_body):
        """The request of a 200 answer must pass its family's request schema."""
        matched = [s["$ref"] for s in schema.get("oneOf", [])
                   if "$ref" in s and self.is_valid(s["$ref"], answer)]
        assert len(matched) == 1, (where, matched)
        assert matched[0].endswith("Response"), matched
        request_ref = matched[0][:-len("Response")] + "Request"
        self.resolve({"$ref": request_ref})  # exists
        try:
            request = _strict_json(request_body)
        except ValueError as e:
            raise AssertionError("openapi: %s: answered 200, but the request is not strict JSON "
                                 "(%s)" % (where, e))
        errs = self.errors({"$ref": request_ref}, request)
        assert not errs, "openapi: %s: answered 200, but %s refuses the request: %s" % (
            where, request_ref.rsplit("/", 1)[1], errs)

    def _count(self, label, status):
        self.counts[status] = self.counts.get(status, 0) + 1
        self.routes.add(label)

    def summary(self):
        n = sum(self.counts.values())
        return "openapi: %d answers on %d routes checked against %s (by status: %s)" % (
            n, len(self.routes), os.path.join(*self.path.split(os.sep)[-2:]),
            ", ".join("%d: %d" % kv for kv in sorted(self.counts.items())))


_CONTRACT = None


def contract():
    """The process-wide Contract (loaded once)."""
    global _CONTRACT
    if _CONTRACT is None:
        _CONTRACT = Contract()
    return _CONTRACT


def check(method, path, status, headers, body, request_body=None):
    """contract().check(...): see Contract.check."""
    return contract().check(method, path, status, headers, body, request_body)


def routes_of_source(text):
    """The paths a frontend source serves, read from the {"/x", ...} rows of its route table
    (fe_routes.c) and from route comparisons h2o_memis(path..., H2O_STRLIT("/x"))."""
    paths = set(re.findall(r'h2o_memis\(path\.base, path\.len, H2O_STRLIT\("(/[^"]*)"\)\)', text))
    paths |= set(re.findall(r'^\s*\{"(/[^"]*)",', text, re.M))
    return paths
