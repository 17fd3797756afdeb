/* generate.c - the generation loop over one model_ctx (see generate.h).
 *
 *   prompt --(common prefix with the cache)--> prefill chunks --> logits
 *      ^                                                            |
 *      |                              sampler_sample + sampler_seq_accept
 *      |                                                            |
 *   forward(token) <-- RUNNING -- tok_stream_push --> stop_matcher_feed --> emit(text)
 *
 * Invariants:
 *  1. s->cached holds exactly the tokens whose K/V rows are valid: the prompt, then every generated
 *     token that was fed back. The last sampled token is never fed (its logits are not needed), so a
 *     following call re-evaluates it as part of its prompt.
 *  2. At least one prompt token is evaluated per call, because the first sample needs its logits.
 *  3. Text is streamed only when complete UTF-8 (tok_stream) and not a possible stop-string prefix.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aiinfra/generate.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

ai_status generate_session_init(generate_session *s, model_ctx *ctx, const tokenizer *tok, ai_err *err)
{
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->tok = tok;
    tok_ids_init(&s->cached);
    int32_t nv = model_ctx_model(ctx)->cfg.n_vocab;
    if (tokenizer_n_vocab(tok) < nv) nv = tokenizer_n_vocab(tok);
    ai_status st = sampler_init(&s->sm, model_ctx_model(ctx)->cfg.n_vocab, err);
    if (st != AI_OK) return st;
    size_t n = 0;
    for (int32_t i = 0; i < nv; i++) n += tokenizer_is_eog(tok, i);
    s->eog = malloc((n ? n : 1) * sizeof *s->eog);
    if (!s->eog) {
        sampler_free(&s->sm);
        return ai_err_set(err, AI_ERR_NOMEM, "generate: out of memory");
    }
    for (int32_t i = 0; i < nv; i++)
        if (tokenizer_is_eog(tok, i)) s->eog[s->n_eog++] = i;
    return AI_OK;
}

void generate_session_free(generate_session *s)
{
    sampler_free(&s->sm);
    tok_ids_free(&s->cached);
    free(s->eog);
    memset(s, 0, sizeof *s);
}

/* Runs tokens [from, n) of `toks` through the model in n_batch chunks, appending them to cached. */
static ai_status prefill(generate_session *s, const int32_t *toks, size_t from, size_t n, ai_err *err)
{
    int32_t nb = model_ctx_n_batch(s->ctx);
    for (size_t i = from; i < n;) {
        int32_t k = (int32_t)(n - i < (size_t)nb ? n - i : (size_t)nb);
        ai_status st = model_forward(s->ctx, toks + i, k, (int32_t)i, err);
        if (st != AI_OK) return st;
        for (int32_t j = 0; j < k; j++)
            if (!tok_ids_push(&s->cached, toks[i + j])) return ai_err_set(err, AI_ERR_NOMEM, "generate: out of memory");
        i += (size_t)k;
    }
    return AI_OK;
}

ai_status generate_run(generate_session *s, const int32_t *prompt, size_t n, const generate_params *p,
                       generate_emit_fn emit, void *user, tok_ids *out, generate_stats *st, ai_err *err)
{
    memset(st, 0, sizeof *st);
    int32_t n_ctx = model_ctx_n_ctx(s->ctx), nv = model_ctx_model(s->ctx)->cfg.n_vocab;
    if (n == 0) return ai_err_set(err, AI_ERR_INVALID, "generate: empty prompt");
    if (n >= (size_t)n_ctx)
        return ai_err_set(err, AI_ERR_RANGE, "generate: prompt of %zu tokens does not fit the context of %d", n, n_ctx);

    /* Sampler parameters: the model's end-of-generation ids join the caller's stop ids. */
    sampler_params sp = p->sp;
    size_t n_stop_ids = sp.n_stop_token_ids + s->n_eog;
    int32_t *stop_ids = malloc((n_stop_ids ? n_stop_ids : 1) * sizeof *stop_ids);
    if (!stop_ids) return ai_err_set(err, AI_ERR_NOMEM, "generate: out of memory");
    if (sp.n_stop_token_ids) memcpy(stop_ids, sp.stop_token_ids, sp.n_stop_token_ids * sizeof *stop_ids);
    if (!sp.ignore_eos && s->n_eog) memcpy(stop_ids + sp.n_stop_token_ids, s->eog, s->n_eog * sizeof *stop_ids);
    else n_stop_ids = sp.n_stop_token_ids;
    sp.stop_token_ids = stop_ids;
    sp.n_stop_token_ids = n_stop_ids;

    sampler_seq seq;
    stop_matcher sm;
    tok_stream ts;
    buf text;
    buf_init(&text);
    bool seq_ok = false, sm_ok = false;
    tok_stream_init(&ts, s->tok, TOK_SKIP_SPECIAL);
    ai_status rc = sampler_params_check(&sp, nv, err);
    if (rc == AI_OK) rc = sampler_seq_init(&seq, &sp, nv, tokenizer_eos(s->tok), p->entropy, err);
    seq_ok = rc == AI_OK;
    if (rc == AI_OK) rc = sampler_seq_add_prompt(&seq, prompt, n, err);
    if (rc == AI_OK) rc = stop_matcher_init(&sm, p->stops, p->n_stops, err);
    sm_ok = rc == AI_OK;
    if (rc != AI_OK) goto done;

    /* Reuse the cached prefix; keep at least one token to evaluate (invariant 2). */
    size_t common = 0;
    while (common < s->cached.len && common < n && s->cached.data[common] == prompt[common]) common++;
    if (common == n) common = n - 1;
    s->cached.len = common;
    st->n_prompt = (int32_t)n;
    st->n_reused = (int32_t)common;
    double t0 = now_s();
    if ((rc = prefill(s, prompt, common, n, err)) != AI_OK) goto done;
    double t1 = now_s();
    st->prefill_s = t1 - t0;
    if (p->prompt_logits) {
        int32_t rows;
        const float *lg = model_logits(s->ctx, &rows);
        memcpy(p->prompt_logits, lg + (size_t)(rows - 1) * (size_t)nv, (size_t)nv * sizeof(float));
    }

    bool stopped = false;
    while (!stopped) {
        sampler_result r;
        int32_t rows;
        const float *lg = model_logits(s->ctx, &rows);
        if (rows > 1) lg += (size_t)(rows - 1) * (size_t)nv;
        if ((rc = sampler_sample(&s->sm, &seq, lg, &r, err)) != AI_OK) goto done;
        st->n_gen++;
        if (out && !tok_ids_push(out, r.token)) { rc = ai_err_set(err, AI_ERR_NOMEM, "generate: out of memory"); goto done; }
        ai_err e2 = {.code = AI_OK};
        sampler_finish fin = sampler_seq_accept(&seq, r.token, &e2);
        if (fin == SAMPLER_RUNNING && e2.code != AI_OK) {
            if (err) *err = e2;
            rc = e2.code;
            goto done;
        }
        bool is_stop_id = fin == SAMPLER_FINISH_STOP;
        if (!is_stop_id) {
            buf_clear(&text);
            if ((rc = tok_stream_push(&ts, r.token, &text, err)) != AI_OK) goto done;
            stop_result res;
            if ((rc = stop_matcher_feed(&sm, text.data ? text.data : "", text.len, &res, err)) != AI_OK) goto done;
            if (res.emit_len && emit && !emit(user, res.emit, res.emit_len)) fin = SAMPLER_FINISH_STOP;
            if (res.stopped) {
                fin = SAMPLER_FINISH_STOP;
                st->stop_string = true;
            }
        }
        if (fin == SAMPLER_RUNNING && s->cached.len + 1 >= (size_t)n_ctx) fin = SAMPLER_FINISH_LENGTH;
        if (fin != SAMPLER_RUNNING) {
            st->finish = fin;
            stopped = true;
            break;
        }
        int32_t tok = r.token;
        if ((rc = model_forward(s->ctx, &tok, 1, (int32_t)s->cached.len, err)) != AI_OK) goto done;
        if (!tok_ids_push(&s->cached, tok)) { rc = ai_err_set(err, AI_ERR_NOMEM, "generate: out of memory"); goto done; }
        st->n_decode++;
    }
    st->decode_s = now_s() - t1;
    if (!st->stop_string) { /* release what the detokenizer and the stop matcher still hold */
        buf_clear(&text);
        tok_stream_flush(&ts, &text);
        stop_result res;
        if (text.len && (rc = stop_matcher_feed(&sm, text.data, text.len, &res, err)) != AI_OK) goto done;
        if (text.len && res.emit_len && emit) emit(user, res.emit, res.emit_len);
        if (!(text.len && res.stopped)) {
            stop_matcher_flush(&sm, &res);
            if (res.emit_len && emit) emit(user, res.emit, res.emit_len);
        }
    }
done:
    if (seq_ok) sampler_seq_free(&seq);
    if (sm_ok) stop_matcher_free(&sm);
    tok_stream_free(&ts);
    buf_free(&text);
    free(stop_ids);
    return rc;
}
