"""Checks lines "<hex bits> <text>" on stdin against Python's repr(float): the C pp_pyjson_float
must write exactly what json.dumps writes for every double (spec/open_jev.md §3.1)."""
import struct
import sys

n = bad = 0
for line in sys.stdin:
    bits, text = line.split()
    x = struct.unpack("<d", bytes.fromhex(bits)[::-1])[0]
    n += 1
    if repr(x) != text:
        bad += 1
        if bad <= 10:
            print(f"{bits}: C {text}, Python {x!r}")
print(f"{n - bad}/{n} doubles written as Python repr")
sys.exit(1 if bad or n < 100000 else 0)
