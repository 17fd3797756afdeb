/* text_stream.c - generated tokens -> streamable text (see text_stream.h).
 *
 * Invariants:
 *  1. The concatenation of everything appended by push and finish equals tokenizer_decode of the pushed
 *     tokens (TOK_SKIP_SPECIAL), cut right before the first stop string when one completed.
 *  2. After a stop string nothing is appended, whatever is pushed.
 */
#include "text_stream.h"

#include <stdlib.h>
#include <string.h>

ai_status text_stream_init(text_stream *s, const tokenizer *tok, const char *const *stops, size_t n_stops,
                           ai_err *err)
{
    memset(s, 0, sizeof *s);
    ai_status st = stop_matcher_init(&s->sm, stops, n_stops, err);
    if (st != AI_OK) return st;
    tok_stream_init(&s->ts, tok, TOK_SKIP_SPECIAL);
    buf_init(&s->piece);
    return AI_OK;
}

void text_stream_free(text_stream *s)
{
    stop_matcher_free(&s->sm);
    tok_stream_free(&s->ts);
    buf_free(&s->piece);
    memset(s, 0, sizeof *s);
}

/* Feeds piece to the stop matcher and appends what it releases. */
static ai_status feed(text_stream *s, buf *out, ai_err *err)
{
    stop_result res;
    ai_status st = stop_matcher_feed(&s->sm, s->piece.data ? s->piece.data : "", s->piece.len, &res, err);
    if (st != AI_OK) return st;
    if (res.emit_len) buf_append(out, res.emit, res.emit_len);
    if (res.stopped) s->stopped = true;
    return AI_OK;
}

ai_status text_stream_push(text_stream *s, int32_t token, buf *out, bool *stopped, ai_err *err)
{
    *stopped = s->stopped;
    if (s->stopped) return AI_OK;
    buf_clear(&s->piece);
    ai_status st = tok_stream_push(&s->ts, token, &s->piece, err);
    if (st == AI_OK && s->piece.len) st = feed(s, out, err);
    *stopped = s->stopped;
    return st;
}

ai_status text_stream_finish(text_stream *s, buf *out, ai_err *err)
{
    if (s->stopped) return AI_OK;
    buf_clear(&s->piece);
    tok_stream_flush(&s->ts, &s->piece);
    if (s->piece.len) {
        ai_status st = feed(s, out, err);
        if (st != AI_OK || s->stopped) return st;
    }
    stop_result res;
    stop_matcher_flush(&s->sm, &res);
    if (res.emit_len) buf_append(out, res.emit, res.emit_len);
    return AI_OK;
}

ai_status text_stop_ids(const tokenizer *tok, int32_t n_vocab, const sampler_params *sp, int32_t **out, size_t *n,
                        ai_err *err)
{
    int32_t nv = tokenizer_n_vocab(tok) < n_vocab ? tokenizer_n_vocab(tok) : n_vocab;
    size_t n_eog = 0;
    if (!sp->ignore_eos)
        for (int32_t i = 0; i < nv; i++) n_eog += tokenizer_is_eog(tok, i);
    size_t total = sp->n_stop_token_ids + n_eog;
    int32_t *ids = malloc((total ? total : 1) * sizeof *ids);
    if (!ids) return ai_err_set(err, AI_ERR_NOMEM, "stop ids: out of memory");
    if (sp->n_stop_token_ids) memcpy(ids, sp->stop_token_ids, sp->n_stop_token_ids * sizeof *ids);
    size_t k = sp->n_stop_token_ids;
    if (n_eog)
        for (int32_t i = 0; i < nv; i++)
            if (tokenizer_is_eog(tok, i)) ids[k++] = i;
    *out = ids;
    *n = k;
    return AI_OK;
}
