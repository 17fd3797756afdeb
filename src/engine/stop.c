/* stop.c - stop strings over streamed, detokenized text.
 *
 * The engine detokenizes one token at a time and feeds the new text here. A
 * stop string may span several tokens ("wor" + "ld"), so the matcher holds
 * back the shortest tail that could still grow into a stop string and
 * releases everything before it at once: a streaming client sees text as
 * early as possible and never sees any byte of a stop string.
 *
 * Which match wins: the one that completes first (smallest end offset in the
 * whole output); among those ending at the same byte, the one that starts
 * first (the longest). That is what a reader of the stream would see happen,
 * and it makes the result independent of how the text was cut into pieces.
 * The output is truncated right before the winning match (OpenAI: the stop
 * sequence is not returned), or right after it with include_stop (vLLM's
 * include_stop_str_in_output).
 *
 * Invariants:
 *   1. pending holds at most max_len - 1 bytes after a feed, and they are the
 *      longest suffix of the text so far that is a proper prefix of some stop
 *      string; so any later match starts inside pending, never in released text;
 *   2. a stop string is valid text of >= 1 byte; when the text is valid UTF-8
 *      the held tail starts at a code-point boundary (it starts where a stop
 *      string starts), so released text never ends inside a code point that
 *      the matcher split;
 *   3. after a stop, nothing more is released.
 * Cost per feed: O(new bytes * total stop length) for the search plus
 * O(max_len * total stop length) for the tail; stop strings are few and short.
 */
#include "aiinfra/sampler.h"

#include <stdlib.h>
#include <string.h>

ai_status stop_matcher_init(stop_matcher *m, const char *const *stops, size_t n, ai_err *err)
{
    memset(m, 0, sizeof *m);
    buf_init(&m->pending);
    buf_init(&m->out);
    m->stop_index = -1;
    if (n == 0) return AI_OK;
    if (!stops) return ai_err_set(err, AI_ERR_INVALID, "stop: NULL list with %zu strings", n);
    m->stops = calloc(n, sizeof *m->stops);
    m->lens = calloc(n, sizeof *m->lens);
    if (!m->stops || !m->lens) {
        stop_matcher_free(m);
        return ai_err_set(err, AI_ERR_NOMEM, "stop: no memory for %zu strings", n);
    }
    m->n = n;
    for (size_t i = 0; i < n; i++) {
        size_t len = stops[i] ? strlen(stops[i]) : 0;
        if (len == 0 || len > SAMPLER_MAX_STOP_LEN) {
            stop_matcher_free(m);
            return ai_err_set(err, len ? AI_ERR_RANGE : AI_ERR_INVALID, "stop: string %zu is %s", i,
                              len ? "longer than SAMPLER_MAX_STOP_LEN bytes" : "empty");
        }
        m->stops[i] = malloc(len + 1);
        if (!m->stops[i]) {
            stop_matcher_free(m);
            return ai_err_set(err, AI_ERR_NOMEM, "stop: no memory for string %zu", i);
        }
        memcpy(m->stops[i], stops[i], len + 1);
        m->lens[i] = len;
        if (len > m->max_len) m->max_len = len;
    }
    return AI_OK;
}

void stop_matcher_free(stop_matcher *m)
{
    for (size_t i = 0; m->stops && i < m->n; i++) free(m->stops[i]);
    free(m->stops);
    free(m->lens);
    buf_free(&m->pending);
    buf_free(&m->out);
    memset(m, 0, sizeof *m);
    m->stop_index = -1;
}

static void result_set(stop_matcher *m, stop_result *res)
{
    res->emit = m->out.len ? m->out.data : "";
    res->emit_len = m->out.len;
    res->stopped = m->stopped;
    res->stop_index = m->stop_index;
}

/* Moves pending[0..k) to out and drops it from pending. */
static void release(stop_matcher *m, size_t k)
{
    if (k == 0) return; /* pending may be empty and unallocated: memmove(NULL, ...) is undefined */
    buf_append(&m->out, m->pending.data, k);
    memmove(m->pending.data, m->pending.data + k, m->pending.len - k);
    m->pending.len -= k;
    if (m->pending.data) m->pending.data[m->pending.len] = '\0';
}

ai_status stop_matcher_feed(stop_matcher *m, const char *text, size_t len, stop_result *res, ai_err *err)
{
    buf_clear(&m->out);
    if (m->stopped || len == 0) {
        result_set(m, res);
        return AI_OK;
    }
    size_t old = m->pending.len;
    buf_append(&m->pending, text, len);
    if (m->pending.oom) return ai_err_set(err, AI_ERR_NOMEM, "stop: no memory for %zu pending bytes", old + len);
    const char *p = m->pending.data;
    const size_t n = m->pending.len;

    /* matches can only end in the new bytes (invariant 1) */
    for (size_t end = old + 1; end <= n; end++) {
        size_t cut = SIZE_MAX;
        int32_t which = -1;
        for (size_t s = 0; s < m->n; s++) {
            size_t l = m->lens[s];
            if (l <= end && end - l < cut && memcmp(p + end - l, m->stops[s], l) == 0) {
                cut = end - l;
                which = (int32_t)s;
            }
        }
        if (which >= 0) {
            release(m, m->include_stop ? end : cut);
            buf_clear(&m->pending);
            m->stopped = true;
            m->stop_index = which;
            if (m->out.oom) return ai_err_set(err, AI_ERR_NOMEM, "stop: no memory for the output");
            result_set(m, res);
            return AI_OK;
        }
    }

    /* hold the longest tail that is a proper prefix of some stop string */
    size_t hold = 0;
    size_t kmax = m->max_len ? m->max_len - 1 : 0;
    if (kmax > n) kmax = n;
    for (size_t k = kmax; k > 0 && hold == 0; k--)
        for (size_t s = 0; s < m->n; s++)
            if (m->lens[s] > k && memcmp(p + n - k, m->stops[s], k) == 0) {
                hold = k;
                break;
            }
    release(m, n - hold);
    if (m->out.oom) return ai_err_set(err, AI_ERR_NOMEM, "stop: no memory for the output");
    result_set(m, res);
    return AI_OK;
}

void stop_matcher_flush(stop_matcher *m, stop_result *res)
{
    buf_clear(&m->out);
    if (!m->stopped) release(m, m->pending.len);
    result_set(m, res);
}
