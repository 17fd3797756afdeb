/* fuzz_stop.c - libFuzzer target for the streaming stop-string matcher.
 *
 * Input: byte 0 = number of stop strings (1..4), then per stop string a length byte (1..16) and its
 * bytes, then one byte of split seed, then the text. The text is fed in pieces whose sizes come from
 * the seed. Checked against a direct search of the whole text: the released bytes must be exactly the
 * text before the reported stop string, that string must end where the first stop string completes,
 * and with no stop the flush must release the whole text.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aiinfra/buf.h"
#include "aiinfra/sampler.h"

/* the end offset of the earliest completed stop string in t, or 0 if none */
static size_t first_stop_end(const char *t, size_t n, char **stops, const size_t *lens, size_t k)
{
    for (size_t end = 1; end <= n; end++)
        for (size_t i = 0; i < k; i++)
            if (lens[i] <= end && !memcmp(t + end - lens[i], stops[i], lens[i])) return end;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    if (n < 1) return 0;
    size_t k = (size_t)(d[0] % 4) + 1, p = 1;
    char *stops[4];
    size_t lens[4];
    for (size_t i = 0; i < k; i++) {
        if (p >= n) return 0;
        lens[i] = (size_t)(d[p++] % 16) + 1;
        if (p + lens[i] > n) return 0;
        stops[i] = (char *)d + p;
        p += lens[i];
    }
    if (p >= n) return 0;
    uint32_t seed = d[p++] * 2654435761u + 1;
    const char *text = (const char *)d + p;
    size_t len = n - p;

    char *copies[4];
    for (size_t i = 0; i < k; i++) {
        copies[i] = malloc(lens[i] + 1);
        memcpy(copies[i], stops[i], lens[i]);
        copies[i][lens[i]] = '\0';
        if (strlen(copies[i]) != lens[i]) { /* the API takes C strings: skip stops with NUL bytes */
            for (size_t j = 0; j <= i; j++) free(copies[j]);
            return 0;
        }
    }
    stop_matcher m;
    ai_err err;
    if (stop_matcher_init(&m, (const char *const *)copies, k, &err) != AI_OK) abort();
    buf got;
    buf_init(&got);
    stop_result r = {0};
    size_t pos = 0;
    while (pos < len && !r.stopped) {
        seed = seed * 1103515245u + 12345u;
        size_t piece = 1 + (seed >> 16) % 7;
        if (piece > len - pos) piece = len - pos;
        if (stop_matcher_feed(&m, text + pos, piece, &r, &err) != AI_OK) abort();
        buf_append(&got, r.emit, r.emit_len);
        pos += piece;
    }
    size_t end = first_stop_end(text, len, copies, lens, k);
    if (!r.stopped) {
        stop_matcher_flush(&m, &r);
        buf_append(&got, r.emit, r.emit_len);
        if (end != 0 || got.len != len || (len && memcmp(got.data, text, len))) abort();
    } else {
        if (r.stop_index < 0 || (size_t)r.stop_index >= k || end == 0) abort();
        size_t si = (size_t)r.stop_index;
        if (lens[si] > end || memcmp(text + end - lens[si], copies[si], lens[si])) abort(); /* ends at `end` */
        if (got.len != end - lens[si] || (got.len && memcmp(got.data, text, got.len))) abort();
    }
    buf_free(&got);
    stop_matcher_free(&m);
    for (size_t i = 0; i < k; i++) free(copies[i]);
    return 0;
}
