/* bench_serve_sse.c - incremental SSE (text/event-stream) parsing, see bench_serve_sse.h.
 *
 * Follows the WHATWG event-stream rules that matter for an OpenAI-style stream:
 *   1. A line ends at "\n", "\r\n" or a lone "\r" (a "\r\n" split across two feeds is one end).
 *   2. "field: value" drops one space after the colon; a line without a colon is a field with an
 *      empty value; a line starting with ':' is a comment.
 *   3. Each "data" line appends its value and '\n'; a blank line dispatches the event with the final
 *      '\n' removed, or nothing when no data line was seen.
 */
#include "tools/bench_serve_sse.h"

#include <string.h>

void bs_sse_init(bs_sse *s, size_t max_line)
{
    memset(s, 0, sizeof *s);
    buf_init(&s->line);
    buf_init(&s->data);
    s->max_line = max_line;
}

void bs_sse_free(bs_sse *s)
{
    buf_free(&s->line);
    buf_free(&s->data);
}

static bool dispatch(bs_sse *s, bs_sse_event_fn fn, void *user, const char **why)
{
    if (!s->have_data) return true;
    s->have_data = false;
    size_t len = s->data.len;
    if (len && s->data.data[len - 1] == '\n') len--;
    char empty = '\0';
    char *d = s->data.len ? s->data.data : &empty;
    d[len] = '\0';
    bool ok = fn(user, d, len);
    buf_clear(&s->data);
    if (!ok && why) *why = NULL;
    return ok;
}

/* One complete line (without its end). */
static bool process_line(bs_sse *s, const char *l, size_t n, bs_sse_event_fn fn, void *user, const char **why)
{
    if (n == 0) return dispatch(s, fn, user, why);
    if (l[0] == ':') return true;
    const char *colon = memchr(l, ':', n);
    size_t name_len = colon ? (size_t)(colon - l) : n;
    if (name_len != 4 || memcmp(l, "data", 4)) return true;
    const char *v = colon ? colon + 1 : l + n;
    if (v < l + n && *v == ' ') v++;
    if (s->data.len + (size_t)(l + n - v) > s->max_line) { /* many data lines, no blank line */
        if (why) *why = "event too long";
        return false;
    }
    buf_append(&s->data, v, (size_t)(l + n - v));
    buf_putc(&s->data, '\n');
    if (s->data.oom) {
        if (why) *why = "out of memory";
        return false;
    }
    s->have_data = true;
    return true;
}

bool bs_sse_feed(bs_sse *s, const char *p, size_t n, bs_sse_event_fn fn, void *user, const char **why)
{
    size_t i = 0;
    while (i < n) {
        if (s->after_cr && p[i] == '\n') i++; /* second half of "\r\n" */
        s->after_cr = false;
        if (i >= n) break;
        size_t j = i;
        while (j < n && p[j] != '\n' && p[j] != '\r') j++;
        if (s->line.len + (j - i) > s->max_line) {
            if (why) *why = "line too long";
            return false;
        }
        if (j == n) { /* incomplete line: keep it for the next feed */
            buf_append(&s->line, p + i, j - i);
            if (s->line.oom) {
                if (why) *why = "out of memory";
                return false;
            }
            break;
        }
        bool ok;
        if (s->line.len) {
            buf_append(&s->line, p + i, j - i);
            if (s->line.oom) {
                if (why) *why = "out of memory";
                return false;
            }
            ok = process_line(s, s->line.data, s->line.len, fn, user, why);
            buf_clear(&s->line);
        } else {
            ok = process_line(s, p + i, j - i, fn, user, why);
        }
        if (!ok) return false;
        s->after_cr = p[j] == '\r';
        i = j + 1;
    }
    return true;
}

bool bs_sse_finish(bs_sse *s, bs_sse_event_fn fn, void *user, const char **why)
{
    if (s->line.len) {
        bool ok = process_line(s, s->line.data, s->line.len, fn, user, why);
        buf_clear(&s->line);
        if (!ok) return false;
    }
    return dispatch(s, fn, user, why);
}
