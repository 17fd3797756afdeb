/* status.h - status codes and error messages returned by every library call.
 *
 * The library never exits and never prints: a fallible function returns an
 * ai_status and, when it fails, fills the caller's ai_err with a message that
 * names the file, the field and the reason. Only the CLI decides what to do.
 */
#ifndef AIINFRA_STATUS_H
#define AIINFRA_STATUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ai_status {
    AI_OK = 0,
    AI_ERR_IO,          /* open/read/mmap failed */
    AI_ERR_FORMAT,      /* the bytes do not follow the format (corrupt file, bad JSON) */
    AI_ERR_NOMEM,       /* allocation failed */
    AI_ERR_INVALID,     /* a bad argument or request */
    AI_ERR_UNSUPPORTED, /* valid input that we do not handle (yet) */
    AI_ERR_RANGE,       /* a size, count or index beyond its limit */
    AI_ERR_RUNTIME,     /* a failure while evaluating (e.g. raise_exception in a template) */
} ai_status;

typedef struct ai_err {
    ai_status code;
    char msg[512];
} ai_err;

/* Sets err (if not NULL) to code and a printf-style message; returns code so
 * callers can write `return ai_err_set(err, AI_ERR_IO, "...")`. */
ai_status ai_err_set(ai_err *err, ai_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an existing message, keeps the code. */
ai_status ai_err_prefix(ai_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

const char *ai_status_str(ai_status s);

#ifdef __cplusplus
}
#endif

#endif
