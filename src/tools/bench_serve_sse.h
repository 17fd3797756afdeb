/* bench_serve_sse.h - an incremental Server-Sent Events parser for `aiinfra bench serve`.
 *
 * Bytes arrive in arbitrary pieces (one curl write callback each); complete events are handed to a
 * callback as soon as their terminating blank line is seen, so the caller can timestamp each token
 * chunk when it arrives. Only the "data" field matters to us; "event", "id", "retry" and comment
 * lines (":...") are skipped.
 */
#ifndef AIINFRA_BENCH_SERVE_SSE_H
#define AIINFRA_BENCH_SERVE_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include "aiinfra/buf.h"

/* Receives one event's data (the data lines joined by '\n', NUL-terminated); false stops parsing. */
typedef bool (*bs_sse_event_fn)(void *user, const char *data, size_t len);

typedef struct bs_sse {
    buf line;       /* the current, incomplete line */
    buf data;       /* data lines of the current event, each followed by '\n' */
    bool have_data; /* a data line was seen since the last dispatch */
    bool after_cr;  /* the last byte was '\r': a following '\n' belongs to the same line end */
    size_t max_line; /* a longer line or event is an error (bounds memory on a garbage stream) */
} bs_sse;

void bs_sse_init(bs_sse *s, size_t max_line);
void bs_sse_free(bs_sse *s);

/* Feeds n bytes. Returns false when the callback asked to stop or the input is unusable; *why
 * (when not NULL) then names the reason ("line too long", "event too long", "out of memory", or NULL
 * when the callback stopped it). */
bool bs_sse_feed(bs_sse *s, const char *p, size_t n, bs_sse_event_fn fn, void *user, const char **why);

/* End of stream: dispatches a pending event that lacked its final blank line. Same return as feed. */
bool bs_sse_finish(bs_sse *s, bs_sse_event_fn fn, void *user, const char **why);

#endif
