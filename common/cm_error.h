/* Project error codes and a heap-owned diagnostic message.
 * Functions return 0 or a negative code: negative errno where one fits (-ENOMEM, -EINVAL, -ENOENT,
 * -EIO), the CM_E* codes below otherwise. A `struct cm_diag` carries the human message naming the
 * file, field, tensor or byte offset; it never decides control flow. cm_error_http() is the one
 * place where a code becomes an HTTP status and error type (spec/wire.md). */
#ifndef S1_CM_ERROR_H
#define S1_CM_ERROR_H

#include <stdarg.h>

enum {
  CM_EFORMAT = 1000,  /* malformed input file or message (JSON, safetensors header, image bytes) */
  CM_ESHAPE,          /* tensor shape or size disagrees with the config or the file */
  CM_EDTYPE,          /* unsupported or unexpected tensor dtype */
  CM_EHASH,           /* SHA-256 of a file does not match the manifest */
  CM_EUNSUPPORTED,    /* a valid input that this implementation refuses (named in the message) */
  CM_ELIMIT,          /* a documented size limit was exceeded */
  CM_EUTF8,           /* invalid UTF-8 (the message gives the byte offset) */
  CM_EMISSING,        /* a required file, key or tensor is absent */
  CM_EJSON,           /* request body is not strict JSON (duplicate keys, NaN, surrogates, depth) */
  CM_ETOOLARGE,       /* request body over the size limit */
  CM_EMEDIA,          /* request content type is not application/json */
  CM_EREQUEST,        /* valid JSON that the family refuses (wrong type, unknown value, limits) */
  CM_EOVERLOADED,     /* the bounded queue is full */
  CM_ENOTREADY,       /* no preprocessor connected or warm-up not finished */
  CM_EUNAVAILABLE,    /* no executor can serve: retired, crashed or unreachable */
  CM_ETIMEOUT,        /* the request deadline passed */
  CM_EINTERNAL,       /* a preprocessor or executor failure */
  CM_EVERSION,        /* a peer speaks another proto version */
  CM_EPROGRAM,        /* a program the executor's model cannot run (ids, positions, images) */
  CM_ECUDA,           /* a CUDA runtime or cuBLAS call failed (sticky: the executor retires) */
  CM_ECANCELLED,      /* the request was cancelled (its client is gone): only counted */
  CM_ECODE_END,
};

/* A diagnostic: the first error's code and message. Embedded by the caller, zero-initialised. */
struct cm_diag {
  int code;  /* 0 while no error was recorded; else the negative code of the first error */
  char *msg; /* heap string (malloc), NULL when none; freed by cm_diag_fini */
};

/* Records code + printf-style message in `diag` (if non-NULL and still empty) and returns `code`,
 * so callers write `return cm_diag_set(d, -CM_EFORMAT, "%s: ...", path);`.
 * Ownership: the message is copied into diag->msg. Returns: `code` unchanged. */
int cm_diag_set(struct cm_diag *diag, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int cm_diag_setv(struct cm_diag *diag, int code, const char *fmt, va_list ap);

/* Frees the message and clears the diagnostic; accepts NULL. */
void cm_diag_fini(struct cm_diag *diag);

/* The one mapping of a code to the HTTP status and error type of spec/wire.md:
 * -CM_EJSON, -CM_EUTF8 → 400 "invalid_json"; -CM_ETOOLARGE → 413 "too_large"; -CM_EMEDIA → 415
 * "unsupported_media_type"; -CM_EREQUEST, -CM_ELIMIT, -CM_EFORMAT, -CM_EUNSUPPORTED, -CM_EMISSING,
 * -EINVAL, -ERANGE → 422 "invalid_request"; -CM_EOVERLOADED → 503 "overloaded"; -CM_ENOTREADY → 503
 * "not_ready"; -CM_EUNAVAILABLE → 503 "unavailable"; -CM_ETIMEOUT, -ETIMEDOUT → 504 "timeout";
 * -CM_ECANCELLED → 499 "cancelled" (nginx's "client closed request": the client is gone, so the
 * answer is only counted in /metrics, never read); 0 → 200 and type NULL; anything else → 500
 * "internal".
 * Returns: the HTTP status; *ret_type (if non-NULL) gets a static string. */
int cm_error_http(int code, const char **ret_type);

/* Static English text for a code (negative errno or -CM_E*). Never NULL. */
const char *cm_strerror(int code);

#endif
