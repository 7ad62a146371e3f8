#!/usr/bin/env python3
"""The layout rule of the design card: no process folder (frontend/, preprocessor/, executor/)
depends on another's code, and the shared folders (common/, proto/) on none of them; the offline
tools (tools/) and the tests may use every folder.

Checked in the sources (.c .h .cu .cuh .in) of those folders: every `#include "x"` or `<x>` that
names a header of the repository must resolve to the file's own top folder or an allowed one
(common/, proto/ for a process folder); a path with a directory part is resolved from the file's
own directory. Checked in their meson.build files: no include_directories() or source path that
leaves the top folder, and no use of a dependency, library or executable variable that a folder it
may not use declares. Prints every violation (file:line: what) and exits 1 when there is one.

The executor's interface headers (executor/*.h, executor/server/ex_engine.h) include no header of
its implementations (executor/cpu/, executor/cuda/).

Before the real tree it checks a generated one with a known violation of each kind and a clean
one, so that a check which finds nothing has been shown able to find something.

Usage: layout_includes.py SOURCE_ROOT
"""
import os
import re
import sys
import tempfile

PROCESS = ("frontend", "preprocessor", "executor")
SHARED = ("common", "proto")
OTHER = ("tools",)  # may use everything; its headers are named here so that using them is caught
ALLOWED = {**{p: {p, *SHARED} for p in PROCESS}, "common": {"common"}, "proto": {"proto", "common"}}
SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".in")
HEADER_EXT = (".h", ".cuh")
INTERFACE_DIRS = ("executor",)                  # every header directly in these folders
INTERFACE_FILES = ("executor/server/ex_engine.h",)
IMPLEMENTATION_DIRS = ("executor/cpu", "executor/cuda")
INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<([^>]+)>)')
ASSIGN = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(declare_dependency|static_library|"
                    r"shared_library|library|executable|custom_target|include_directories)\s*\(")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
STRING = re.compile(r"'((?:[^'\\]|\\.)*)'")


def walk(root, folder):
    for d, dirs, files in os.walk(os.path.join(root, folder)):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        for f in sorted(files):
            yield os.path.join(d, f)


def top_of(root, path):
    rel = os.path.relpath(os.path.normpath(path), root)
    return None if rel.startswith("..") else rel.split(os.sep)[0]


def strip_meson_comment(line):
    out, quoted = [], False
    for ch in line:
        if ch == "'":
            quoted = not quoted
        if ch == "#" and not quoted:
            break
        out.append(ch)
    return "".join(out)


def check(root):
    """Returns the violations in the tree at root as 'path:line: message' strings."""
    folders = [f for f in PROCESS + SHARED + OTHER if os.path.isdir(os.path.join(root, f))]
    headers = {}  # basename -> top folders holding a header of that name
    header_dirs = {}  # basename -> folders (relative to root) holding a header of that name
    for top in folders:
        for path in walk(root, top):
            if path.endswith(HEADER_EXT):
                headers.setdefault(os.path.basename(path), set()).add(top)
                header_dirs.setdefault(os.path.basename(path), set()).add(
                    os.path.relpath(os.path.dirname(path), root))
    declared = {}  # meson variable -> top folder declaring it
    for top in folders:
        for path in walk(root, top):
            if os.path.basename(path) == "meson.build":
                for line in open(path, encoding="utf-8"):
                    m = ASSIGN.match(strip_meson_comment(line))
                    if m:
                        declared[m.group(1)] = top
    bad = []
    for top in (f for f in folders if f in ALLOWED):
        allowed = ALLOWED[top]
        for path in walk(root, top):
            rel = os.path.relpath(path, root)
            interface = rel in INTERFACE_FILES or (path.endswith(HEADER_EXT) and
                                                   os.path.dirname(rel) in INTERFACE_DIRS)
            if path.endswith(SOURCE_EXT):
                for n, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    name = m.group(1) or m.group(2)
                    if interface:
                        target = os.path.normpath(os.path.join(os.path.dirname(path), name))
                        dirs = ({os.path.relpath(os.path.dirname(target), root)}
                                if os.path.exists(target) else header_dirs.get(os.path.basename(name), set()))
                        if dirs and all(d.startswith(IMPLEMENTATION_DIRS) for d in dirs):
                            bad.append(f"{rel}:{n}: interface header includes {name} of "
                                       f"{'/, '.join(sorted(dirs))}/")
                    if "/" in name:
                        target = os.path.join(os.path.dirname(path), name)
                        if os.path.exists(target):
                            owner = top_of(root, target)
                            if owner not in allowed:
                                bad.append(f"{rel}:{n}: includes {name} of {owner or 'outside'}/")
                            continue
                    owners = headers.get(os.path.basename(name), set())
                    if owners and not owners & allowed:
                        bad.append(f"{rel}:{n}: includes {name} of {'/, '.join(sorted(owners))}/")
            elif os.path.basename(path) == "meson.build":
                here = os.path.dirname(path)
                for n, line in enumerate(open(path, encoding="utf-8"), 1):
                    code = strip_meson_comment(line)
                    for s in STRING.findall(code):
                        if s.startswith(".."):
                            owner = top_of(root, os.path.join(here, s))
                            if owner not in allowed:
                                bad.append(f"{rel}:{n}: path '{s}' leaves {top}/")
                    for ident in set(IDENT.findall(STRING.sub("''", code))):
                        owner = declared.get(ident)
                        if owner and owner not in allowed:
                            bad.append(f"{rel}:{n}: uses {ident} of {owner}/")
    return bad


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def self_test():
    """The check on generated trees: each kind of violation is found, the clean tree passes."""
    with tempfile.TemporaryDirectory() as root:
        write(root, "common/cm_a.h", "int cm_a(void);\n")
        write(root, "common/meson.build", "common_dep = declare_dependency()\n")
        write(root, "preprocessor/image/pp_image.h", "int pp(void);\n")
        write(root, "preprocessor/meson.build",
              "image_dep = declare_dependency(include_directories: include_directories('image'))\n")
        write(root, "executor/ex_a.c", '#include <stdio.h>\n#include "cm_a.h"\n#include "ex_b.h"\n')
        write(root, "executor/ex_b.h", "int ex_b(void);\n")
        write(root, "executor/meson.build", "executor_dep = declare_dependency(dependencies: common_dep)\n")
        write(root, "tools/t.c", '#include "pp_image.h"\n#include "ex_b.h"\n')
        write(root, "tools/meson.build", "t = executable('t', 't.c', dependencies: [image_dep, executor_dep])\n")
        clean = check(root)
        if clean:
            sys.exit("self-test: the clean tree was refused:\n  " + "\n  ".join(clean))
        write(root, "executor/ex_c.c", '#include "pp_image.h"\n#include "../tools/t.h"\n')
        write(root, "tools/t.h", "int t(void);\n")
        write(root, "executor/cpu/meson.build",
              "x = static_library('x', '../../preprocessor/image/p.c', dependencies: [image_dep]) # image_dep\n"
              "y = include_directories('../../tools')\n")
        write(root, "common/cm_b.c", '#include "ex_b.h"\n')
        write(root, "executor/cpu/cpu_op.h", "struct ex_dims;\n")
        write(root, "executor/ex_b.h", '#include "cpu_op.h"\n')
        write(root, "executor/server/ex_engine.h", '#include "cpu/cpu_op.h"\n')
        found = check(root)
        want = ["executor/ex_c.c:1: includes pp_image.h of preprocessor/",
                "executor/ex_c.c:2: includes ../tools/t.h of tools/",
                "executor/cpu/meson.build:1: path '../../preprocessor/image/p.c' leaves executor/",
                "executor/cpu/meson.build:1: uses image_dep of preprocessor/",
                "executor/cpu/meson.build:2: path '../../tools' leaves executor/",
                "common/cm_b.c:1: includes ex_b.h of executor/",
                "executor/ex_b.h:1: interface header includes cpu_op.h of executor/cpu/",
                "executor/server/ex_engine.h:1: interface header includes cpu/cpu_op.h of executor/cpu/"]
        if sorted(found) != sorted(want):
            sys.exit("self-test: expected\n  " + "\n  ".join(sorted(want)) + "\nfound\n  " +
                     "\n  ".join(sorted(found)))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    self_test()
    root = os.path.abspath(sys.argv[1])
    for f in PROCESS + SHARED + OTHER:
        if not os.path.isdir(os.path.join(root, f)):
            sys.exit(f"layout_includes: {root}/{f} is missing")
    bad = check(root)
    for b in bad:
        print(b)
    print(f"layout_includes: {len(bad)} violations in {', '.join(PROCESS + SHARED)}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
