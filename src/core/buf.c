#include "aiinfra/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_init(buf *b) { memset(b, 0, sizeof *b); }

void buf_free(buf *b)
{
    free(b->data);
    buf_init(b);
}

void buf_clear(buf *b)
{
    b->len = 0;
    if (b->data) b->data[0] = '\0';
}

bool buf_reserve(buf *b, size_t extra)
{
    if (b->oom) return false;
    if (extra > (size_t)-1 / 2 - b->len) { b->oom = true; return false; }
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) { b->oom = true; return false; }
    b->data = p;
    b->cap = cap;
    return true;
}

void buf_append(buf *b, const void *p, size_t n)
{
    if (!buf_reserve(b, n)) return;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void buf_puts(buf *b, const char *s) { buf_append(b, s, strlen(s)); }

void buf_putc(buf *b, char c) { buf_append(b, &c, 1); }

void buf_printf(buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !buf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *buf_detach(buf *b)
{
    char *p = b->data;
    if (!p) p = calloc(1, 1);
    buf_init(b);
    return p;
}
