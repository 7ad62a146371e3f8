/* Error codes and diagnostics shared by every process (see cm_error.h). */
#include "cm_error.h"

#include <errno.h>
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
  case CM_EJSON: return "invalid JSON";
  case CM_ETOOLARGE: return "body too large";
  case CM_EMEDIA: return "unsupported media type";
  case CM_EREQUEST: return "invalid request";
  case CM_EOVERLOADED: return "overloaded";
  case CM_ENOTREADY: return "not ready";
  case CM_EUNAVAILABLE: return "unavailable";
  case CM_ETIMEOUT: return "deadline passed";
  case CM_EINTERNAL: return "internal error";
  case CM_EVERSION: return "protocol version mismatch";
  case CM_EPROGRAM: return "program not runnable";
  case CM_ECUDA: return "CUDA failure";
  case CM_ECANCELLED: return "cancelled";
  default: break;
  }
  if (code < 0 && -code < CM_EFORMAT)
    return strerror(-code);
  return "unknown error";
}

int cm_error_http(int code, const char **ret_type) {
  int status = 500;
  const char *type = "internal";
  switch (-code) {
  case 0: status = 200, type = NULL; break;
  case CM_EJSON:
  case CM_EUTF8: status = 400, type = "invalid_json"; break;
  case CM_ETOOLARGE: status = 413, type = "too_large"; break;
  case CM_EMEDIA: status = 415, type = "unsupported_media_type"; break;
  case CM_EREQUEST:
  case CM_ELIMIT:
  case CM_EFORMAT:
  case CM_EUNSUPPORTED:
  case CM_EMISSING:
  case ERANGE:
  case EINVAL: status = 422, type = "invalid_request"; break;
  case CM_EOVERLOADED: status = 503, type = "overloaded"; break;
  case CM_ENOTREADY: status = 503, type = "not_ready"; break;
  case CM_EUNAVAILABLE: status = 503, type = "unavailable"; break;
  case CM_ETIMEOUT:
  case ETIMEDOUT: status = 504, type = "timeout"; break;
  case CM_ECANCELLED: status = 499, type = "cancelled"; break;
  default: break;
  }
  if (ret_type)
    *ret_type = type;
  return status;
}
