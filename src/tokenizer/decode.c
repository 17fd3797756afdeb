/* decode.c - ids -> text, one-shot and streaming (the one-shot path is the stream, so the two
 * can never disagree).
 *
 * Decoders (parsed from tokenizer.json or implied by the GGUF model type):
 *   byte-level    a token's text maps back to raw bytes (a token with a char outside the
 *                 byte alphabet contributes its UTF-8 as is, like HF); the concatenation is
 *                 decoded leniently: every ill-formed sequence becomes U+FFFD.
 *   byte fallback consecutive <0xXX> tokens form one group: valid UTF-8 is emitted as is,
 *                 otherwise one U+FFFD per token (HF's ByteFallback).
 *   metaspace     U+2581 becomes ' '; dec_strip_lead leading spaces of the text are dropped.
 *
 * Streaming invariants:
 *  1. Emitted text is always valid UTF-8 and a prefix of the one-shot decode.
 *  2. Held back: an incomplete UTF-8 tail (byte-level), or the current group of byte tokens
 *     (it can still turn invalid), nothing else.
 */
#include <string.h>

#include "aiinfra/utf8.h"
#include "tokenizer/tok_internal.h"

void tok_stream_init(tok_stream *s, const tokenizer *t, int flags)
{
    s->t = t;
    s->flags = flags;
    s->started = false;
    buf_init(&s->pending);
    s->n_bytes = 0;
}

void tok_stream_free(tok_stream *s)
{
    buf_free(&s->pending);
    s->n_bytes = 0;
}

/* Appends text (already valid UTF-8) to out, applying the leading-space strip once. */
static void emit(tok_stream *s, const char *p, size_t n, buf *out)
{
    if (!s->started && n) {
        s->started = true;
        for (int k = 0; k < s->t->dec_strip_lead && n && *p == ' '; k++) { p++; n--; }
    }
    buf_append(out, p, n);
}

static void emit_sanitized(tok_stream *s, const char *p, size_t n, buf *out)
{
    if (utf8_valid(p, n)) { emit(s, p, n, out); return; }
    buf tmp;
    buf_init(&tmp);
    utf8_sanitize(&tmp, p, n);
    emit(s, tmp.data ? tmp.data : "", tmp.len, out);
    buf_free(&tmp);
}

/* Ends the current group of byte-fallback tokens. */
static void close_byte_run(tok_stream *s, buf *out)
{
    if (!s->n_bytes) return;
    if (utf8_valid(s->pending.data, s->pending.len)) {
        emit(s, s->pending.data, s->pending.len, out);
    } else {
        for (size_t i = 0; i < s->n_bytes; i++) emit(s, "\xEF\xBF\xBD", 3, out);
    }
    buf_clear(&s->pending);
    s->n_bytes = 0;
}

static void emit_meta(tok_stream *s, const char *p, size_t n, buf *out)
{
    /* U+2581 = E2 96 81 -> ' ' */
    size_t last = 0;
    for (size_t i = 0; i + 2 < n; i++)
        if ((unsigned char)p[i] == 0xE2 && (unsigned char)p[i + 1] == 0x96 && (unsigned char)p[i + 2] == 0x81) {
            emit_sanitized(s, p + last, i - last, out);
            emit(s, " ", 1, out);
            i += 2;
            last = i + 1;
        }
    emit_sanitized(s, p + last, n - last, out);
}

ai_status tok_stream_push(tok_stream *s, int32_t id, buf *out, ai_err *err)
{
    const tokenizer *t = s->t;
    if (id < 0 || id >= t->n_vocab)
        return ai_err_set(err, AI_ERR_RANGE, "token id %d out of range (vocabulary size %d)", (int)id, (int)t->n_vocab);
    const tok_entry *e = &t->tok[id];
    if ((s->flags & TOK_SKIP_SPECIAL) && (e->attr & TOK_ATTR_CONTROL)) return AI_OK;
    size_t n;
    if (t->dec_bytelevel) {
        const char *p = tok_key(t, id, &n);
        buf_append(&s->pending, p, n);
        size_t keep = utf8_incomplete_tail(s->pending.data, s->pending.len);
        size_t ready = s->pending.len - keep;
        emit_sanitized(s, s->pending.data, ready, out);
        memmove(s->pending.data, s->pending.data + ready, keep);
        s->pending.len = keep;
    } else if (t->dec_byte_fallback && (e->attr & TOK_ATTR_BYTE)) {
        buf_putc(&s->pending, (char)e->byte_val);
        s->n_bytes++;
    } else {
        close_byte_run(s, out);
        const char *p = tok_text(t, id, &n);
        if (t->dec_meta) emit_meta(s, p, n, out);
        else emit_sanitized(s, p, n, out);
    }
    if (out->oom || s->pending.oom) return ai_err_set(err, AI_ERR_NOMEM, "out of memory (decode)");
    return AI_OK;
}

void tok_stream_flush(tok_stream *s, buf *out)
{
    if (s->n_bytes) close_byte_run(s, out);
    else if (s->pending.len) emit_sanitized(s, s->pending.data, s->pending.len, out);
    buf_clear(&s->pending);
}

ai_status tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, int flags, buf *out, ai_err *err)
{
    if (!t || (!ids && n)) return ai_err_set(err, AI_ERR_INVALID, "tokenizer_decode: NULL argument");
    tok_stream s;
    tok_stream_init(&s, t, flags);
    ai_status st = AI_OK;
    for (size_t i = 0; i < n && !st; i++) st = tok_stream_push(&s, ids[i], out, err);
    if (!st) tok_stream_flush(&s, out);
    tok_stream_free(&s);
    return st;
}
