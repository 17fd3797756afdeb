/* buf.h - a growable byte buffer (always NUL-terminated when non-empty). */
#ifndef AIINFRA_BUF_H
#define AIINFRA_BUF_H

#include <stdbool.h>
#include <stddef.h>

#include "aiinfra/status.h"

typedef struct buf {
    char *data;  /* (cap) bytes, data[len] == '\0' once anything was appended */
    size_t len;
    size_t cap;
    bool oom;    /* sticky: an append failed; the content is truncated */
} buf;

void buf_init(buf *b);
void buf_free(buf *b);
void buf_clear(buf *b);                         /* len = 0, keeps the memory */
bool buf_reserve(buf *b, size_t extra);         /* room for `extra` more bytes + NUL */
void buf_append(buf *b, const void *p, size_t n);
void buf_puts(buf *b, const char *s);
void buf_putc(buf *b, char c);
void buf_printf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *buf_detach(buf *b);                       /* caller frees; b is reset */

#endif
