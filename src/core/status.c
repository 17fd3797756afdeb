#include "aiinfra/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

ai_status ai_err_set(ai_err *err, ai_status code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

ai_status ai_err_prefix(ai_err *err, const char *fmt, ...)
{
    if (!err) return AI_OK;
    char head[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    size_t n = strlen(head), cap = sizeof err->msg - 1;
    if (n > cap) n = cap;
    memcpy(err->msg, head, n);
    size_t m = n + 2 <= cap ? 2 : cap - n;
    memcpy(err->msg + n, ": ", m);
    n += m;
    size_t k = strnlen(old, sizeof old - 1);
    if (k > cap - n) k = cap - n;
    memcpy(err->msg + n, old, k);
    err->msg[n + k] = '\0';
    return err->code;
}

const char *ai_status_str(ai_status s)
{
    switch (s) {
    case AI_OK: return "ok";
    case AI_ERR_IO: return "i/o error";
    case AI_ERR_FORMAT: return "format error";
    case AI_ERR_NOMEM: return "out of memory";
    case AI_ERR_INVALID: return "invalid argument";
    case AI_ERR_UNSUPPORTED: return "unsupported";
    case AI_ERR_RANGE: return "out of range";
    case AI_ERR_RUNTIME: return "runtime error";
    }
    return "unknown status";
}
