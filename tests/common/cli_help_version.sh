#!/usr/bin/env bash
# Every s1serve binary answers --help (usage on stdout, exit 0, naming each option it lists in its
# usage line) and --version ("NAME VERSION (git REV)", exit 0).
# usage: cli_help_version.sh PROJECT_VERSION BINARY...
set -uo pipefail
want=$1; shift
fail=0
for b in "$@"; do
  name=$(basename "$b") bad=0
  help=$("$b" --help 2>&1); rc=$?
  if [ $rc -ne 0 ] || ! grep -q "usage: $name" <<<"$help"; then
    echo "FAIL $name --help: exit $rc, output: $(head -2 <<<"$help")"; fail=1
  fi
  v=$("$b" --version 2>&1); rc=$?
  if [ $rc -ne 0 ] || ! [[ "$v" =~ ^$name\ $want\ \(git\ [0-9a-f]{7,}(-dirty)?\)$|^$name\ $want\ \(git\ unknown\)$ ]]; then
    echo "FAIL $name --version: exit $rc, output: $v"; bad=1
  fi
  if [ $bad -eq 0 ]; then echo "ok $name: $v"; else fail=1; fi
done
exit $fail
