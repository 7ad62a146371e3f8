/* Prints "<16 hex digits of the double's bits> <pp_pyjson_float text>" for 200,000 doubles (a
 * seeded mix of random bit patterns, short decimals, integers, powers of ten and their neighbours,
 * subnormals and extremes); tests/oracle/open_jev_float_repr.py checks each against Python repr. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pp_pyjson.h"

static uint64_t s = 0x243f6a8885a308d3ull;
static uint64_t next(void) {
  s += 0x9e3779b97f4a7c15ull;
  uint64_t z = s;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void emit(double x) {
  if (!isfinite(x))
    return;
  char buf[PP_PYJSON_FLOAT_MAX];
  uint64_t bits;
  memcpy(&bits, &x, 8);
  pp_pyjson_float(x, buf);
  printf("%016" PRIx64 " %s\n", bits, buf);
}

int main(void) {
  for (int i = 0; i < 100000; i++) {
    uint64_t b = next();
    double x;
    memcpy(&x, &b, 8);
    emit(x);
  }
  for (int e = -330; e <= 310; e++) {
    double p = pow(10.0, e);
    emit(p);
    emit(nextafter(p, 0));
    emit(nextafter(p, INFINITY));
    emit(-p * 3);
  }
  for (int i = 0; i < 50000; i++) {
    emit((double)(int64_t)(next() % 2000001) / 1000.0 - 1000.0);
    emit((double)(next() >> (next() % 64)));
  }
  emit(5e-324);
  emit(2.2250738585072014e-308);
  emit(1.7976931348623157e308);
  emit(0.1 + 0.2);
  emit(-0.0);
  emit(0.0);
  return 0;
}
