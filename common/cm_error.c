/* Error codes and diagnostics shared by every process (see cm_error.h). */
#include "cm_error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cm_diag_setv(struct cm_diag *diag, int code, const char *fmt, va_list ap) {
  if (!diag || diag->code != 0)
    return code;
  diag->code = code;
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0)
    return code;
  diag->msg = malloc((size_t)n + 1);
  if (diag->msg)
    vsnprintf(diag->msg, (size_t)n + 1, fmt, ap);
  return code;
}

int cm_diag_set(struct cm_diag *diag, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cm_diag_setv(diag, code, fmt, ap);
  va_end(ap);
  return code;
}

void cm_diag_fini(struct cm_diag *diag) {
  if (!diag)
    return;
  free(diag->msg);
  diag->msg = NULL;
  diag->code = 0;
}

const char *cm_strerror(int code) {
  switch (-code) {
  case 0: return "success";
  case CM_EFORMAT: return "malformed input";
  case CM_ESHAPE: return "shape mismatch";
  case CM_EDTYPE: return "unsupported dtype";
  case CM_EHASH: return "hash mismatch";
  case CM_EUNSUPPORTED: return "unsupported";
  case CM_ELIMIT: return "limit exceeded";
  case CM_EUTF8: return "invalid UTF-8";
  case CM_EMISSING: return "missing";
  default: break;
  }
  if (code < 0 && -code < CM_EFORMAT)
    return strerror(-code);
  return "unknown error";
}
