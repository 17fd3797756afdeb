/* generate.c - the generation loop over one model_ctx (see generate.h).
 *
 *   prompt --(common prefix with the cache)--> prefill chunks --> logits
 *      ^                                                            |
 *      |                              sampler_sample + sampler_seq_accept
 *      |                                                            |
 *   forward(token) <-- RUNNING -- text_stream_push (detokenize + stop strings, text_stream.c) --> emit(text)
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
#include "engine/text_stream.h"

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
    return sampler_init(&s->sm, model_ctx_model(ctx)->cfg.n_vocab, err);
}

void generate_session_free(generate_session *s)
{
    sampler_free(&s->sm);
    tok_ids_free(&s->cached);
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
    int32_t *stop_ids = NULL;
    size_t n_stop_ids = 0;
    ai_status rc = text_stop_ids(s->tok, nv, &p->sp, &stop_ids, &n_stop_ids, err);
    if (rc != AI_OK) return rc;
    sampler_params sp = p->sp;
    sp.stop_token_ids = stop_ids;
    sp.n_stop_token_ids = n_stop_ids;

    sampler_seq seq;
    text_stream tx;
    buf text;
    buf_init(&text);
    bool seq_ok = false, tx_ok = false;
    rc = sampler_params_check(&sp, nv, err);
    if (rc == AI_OK) rc = sampler_seq_init(&seq, &sp, nv, tokenizer_eos(s->tok), p->entropy, err);
    seq_ok = rc == AI_OK;
    if (rc == AI_OK) rc = sampler_seq_add_prompt(&seq, prompt, n, err);
    if (rc == AI_OK) rc = text_stream_init(&tx, s->tok, p->stops, p->n_stops, err);
    tx_ok = rc == AI_OK;
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
            bool hit = false;
            buf_clear(&text);
            if ((rc = text_stream_push(&tx, r.token, &text, &hit, err)) != AI_OK) goto done;
            if (text.len && emit && !emit(user, text.data, text.len)) fin = SAMPLER_FINISH_STOP;
            if (hit) {
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
        if ((rc = text_stream_finish(&tx, &text, err)) != AI_OK) goto done;
        if (text.len && emit) emit(user, text.data, text.len);
    }
done:
    if (seq_ok) sampler_seq_free(&seq);
    if (tx_ok) text_stream_free(&tx);
    buf_free(&text);
    free(stop_ids);
    return rc;
}
