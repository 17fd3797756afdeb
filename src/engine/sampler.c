/* sampler.c - request parameters, per-sequence state and the filter pipeline.
 *
 * Order of operations, and why:
 *   1. logit_bias    OpenAI adds the bias to the model's logits; everything
 *                    after sees the biased logits (vLLM applies it first too).
 *   2. penalties     repetition (prompt + output tokens: positive logits / p,
 *                    others * p), then frequency (- f * count) and presence
 *                    (- r if count > 0) over output tokens only. They reshape
 *                    the model's preferences, so they come before anything
 *                    that looks at the shape of the distribution.
 *   3. temperature   logits / T. Before the filters because top-p and min-p
 *                    are defined on the probabilities the draw will use; a
 *                    different T changes which tokens make up the top-p mass.
 *                    T < SAMPLER_GREEDY_EPS is greedy: argmax of the logits
 *                    after step 2, ties to the lowest id, no rng draw.
 *   4. top-k         keep the k first tokens of the order (logit desc, id asc).
 *   5. top-p         on the softmax of what top-k kept: keep token j (in that
 *                    order) iff the probability of the tokens before it is < p;
 *                    the first token is always kept.
 *   6. min-p         keep token j iff p_j / p_max = exp((l_j - l_max) / T) >= min_p.
 *                    The ratio does not depend on the normalisation, so min-p is
 *                    the same on any superset that holds the top token. (vLLM v1
 *                    runs min-p before top-k/top-p; with top-p also on, its set
 *                    is a subset of ours - docs/sampling.md.)
 *   7. sample        inverse CDF: u in [0,1) from the sequence's rng, walk the
 *                    kept list until the cumulative probability exceeds u.
 * Tokens at -inf (masked) are never kept. NaN or +inf logits are an error.
 *
 * Invariants:
 *   1. every kept set is a prefix of the total order (logit desc, id asc):
 *      top-k and min-p are thresholds on the logit, top-p a cut of the order;
 *      so the final set is the first min(k, m_p, m_minp) tokens;
 *   2. no step sorts the vocabulary: candidates are selected by quickselect in
 *      growing chunks (select.c) and only the chunk is sorted;
 *   3. penalties touch only tokens in seq->seen (O(distinct tokens seen));
 *   4. the sampler holds no state between calls apart from scratch memory.
 */
#include "aiinfra/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sampler_select.h"

// --- params -----------------------------------------------------------------

sampler_params sampler_params_default(void)
{
    sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repetition_penalty = 1.0f;
    p.logprobs = -1;
    return p;
}

ai_status sampler_params_check(const sampler_params *p, int32_t n_vocab, ai_err *err)
{
    if (n_vocab <= 0) return ai_err_set(err, AI_ERR_INVALID, "sampler: n_vocab %d must be > 0", n_vocab);
    if (!isfinite(p->temperature) || p->temperature < 0)
        return ai_err_set(err, AI_ERR_INVALID, "sampler: temperature %g must be finite and >= 0",
                          (double)p->temperature);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return ai_err_set(err, AI_ERR_INVALID, "sampler: top_p %g must be in (0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return ai_err_set(err, AI_ERR_INVALID, "sampler: min_p %g must be in [0, 1]", (double)p->min_p);
    if (!(p->repetition_penalty > 0) || !isfinite(p->repetition_penalty))
        return ai_err_set(err, AI_ERR_INVALID, "sampler: repetition_penalty %g must be finite and > 0",
                          (double)p->repetition_penalty);
    if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2))
        return ai_err_set(err, AI_ERR_INVALID, "sampler: presence_penalty %g must be in [-2, 2]",
                          (double)p->presence_penalty);
    if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
        return ai_err_set(err, AI_ERR_INVALID, "sampler: frequency_penalty %g must be in [-2, 2]",
                          (double)p->frequency_penalty);
    if (p->max_tokens < 0)
        return ai_err_set(err, AI_ERR_INVALID, "sampler: max_tokens %d must be >= 0", p->max_tokens);
    if (p->logprobs < -1 || p->logprobs > SAMPLER_MAX_LOGPROBS)
        return ai_err_set(err, AI_ERR_INVALID, "sampler: logprobs %d must be in [-1, %d]", p->logprobs,
                          SAMPLER_MAX_LOGPROBS);
    if (p->n_logit_bias && !p->logit_bias)
        return ai_err_set(err, AI_ERR_INVALID, "sampler: logit_bias is NULL with %zu entries", p->n_logit_bias);
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        const sampler_bias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= n_vocab)
            return ai_err_set(err, AI_ERR_RANGE, "sampler: logit_bias[%zu] token %d outside [0, %d)", i,
                              b->token, n_vocab);
        if (!(b->bias >= -100 && b->bias <= 100))
            return ai_err_set(err, AI_ERR_INVALID, "sampler: logit_bias[%zu] = %g must be in [-100, 100]", i,
                              (double)b->bias);
    }
    if (p->n_stop_token_ids && !p->stop_token_ids)
        return ai_err_set(err, AI_ERR_INVALID, "sampler: stop_token_ids is NULL with %zu entries",
                          p->n_stop_token_ids);
    for (size_t i = 0; i < p->n_stop_token_ids; i++)
        if (p->stop_token_ids[i] < 0)
            return ai_err_set(err, AI_ERR_RANGE, "sampler: stop_token_ids[%zu] = %d is negative", i,
                              p->stop_token_ids[i]);
    return AI_OK;
}

const char *sampler_finish_str(sampler_finish f)
{
    switch (f) {
    case SAMPLER_FINISH_STOP: return "stop";
    case SAMPLER_FINISH_LENGTH: return "length";
    default: return NULL;
    }
}

// --- per-sequence state -------------------------------------------------------

static size_t hash_tok(int32_t t, size_t mask)
{
    uint32_t x = (uint32_t)t * 0x9E3779B1u;  /* Fibonacci hashing spreads nearby ids */
    return (size_t)(x ^ (x >> 15)) & mask;
}

/* Grows the hash so that it stays at most half full; rebuilds it from seen[]. */
static ai_status seen_grow(sampler_seq *s, ai_err *err)
{
    size_t cap = s->cap_slot ? s->cap_slot * 2 : 64;
    int32_t *slot = malloc(cap * sizeof *slot);
    sampler_seen *seen = realloc(s->seen, (cap / 2) * sizeof *seen);
    if (!slot || !seen) {
        free(slot);
        if (seen) s->seen = seen;
        return ai_err_set(err, AI_ERR_NOMEM, "sampler: no memory for %zu penalty slots", cap);
    }
    s->seen = seen;
    s->cap_seen = cap / 2;
    for (size_t i = 0; i < cap; i++) slot[i] = -1;
    for (size_t i = 0; i < s->n_seen; i++) {
        size_t h = hash_tok(seen[i].token, cap - 1);
        while (slot[h] >= 0) h = (h + 1) & (cap - 1);
        slot[h] = (int32_t)i;
    }
    free(s->slot);
    s->slot = slot;
    s->cap_slot = cap;
    return AI_OK;
}

/* The entry for token, created (zeroed) when absent; NULL on no memory. */
static sampler_seen *seen_get(sampler_seq *s, int32_t token, ai_err *err)
{
    if (s->n_seen + 1 > s->cap_seen && seen_grow(s, err) != AI_OK) return NULL;
    size_t mask = s->cap_slot - 1, h = hash_tok(token, mask);
    while (s->slot[h] >= 0) {
        sampler_seen *e = &s->seen[s->slot[h]];
        if (e->token == token) return e;
        h = (h + 1) & mask;
    }
    s->slot[h] = (int32_t)s->n_seen;
    sampler_seen *e = &s->seen[s->n_seen++];
    e->token = token;
    e->out_count = 0;
    e->in_prompt = false;
    return e;
}

ai_status sampler_seq_init(sampler_seq *s, const sampler_params *p, int32_t n_vocab, int32_t eos_id,
                           uint64_t entropy, ai_err *err)
{
    memset(s, 0, sizeof *s);
    ai_status st = sampler_params_check(p, n_vocab, err);
    if (st != AI_OK) return st;
    s->p = *p;
    s->p.logit_bias = NULL;
    s->p.stop_token_ids = NULL;
    if (p->n_logit_bias) {
        sampler_bias *b = malloc(p->n_logit_bias * sizeof *b);
        if (!b) return ai_err_set(err, AI_ERR_NOMEM, "sampler: no memory for logit_bias");
        memcpy(b, p->logit_bias, p->n_logit_bias * sizeof *b);
        s->p.logit_bias = b;
    }
    if (p->n_stop_token_ids) {
        int32_t *t = malloc(p->n_stop_token_ids * sizeof *t);
        if (!t) {
            sampler_seq_free(s);
            return ai_err_set(err, AI_ERR_NOMEM, "sampler: no memory for stop_token_ids");
        }
        memcpy(t, p->stop_token_ids, p->n_stop_token_ids * sizeof *t);
        s->p.stop_token_ids = t;
    }
    s->n_vocab = n_vocab;
    s->eos_id = eos_id;
    s->track = p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    sampler_rng_seed(&s->rng, p->has_seed ? p->seed : entropy);
    return AI_OK;
}

void sampler_seq_free(sampler_seq *s)
{
    free((void *)s->p.logit_bias);
    free((void *)s->p.stop_token_ids);
    free(s->seen);
    free(s->slot);
    memset(s, 0, sizeof *s);
}

ai_status sampler_seq_add_prompt(sampler_seq *s, const int32_t *tokens, size_t n, ai_err *err)
{
    if (s->p.repetition_penalty == 1.0f) return AI_OK;  /* only repetition looks at the prompt */
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= s->n_vocab)
            return ai_err_set(err, AI_ERR_RANGE, "sampler: prompt token %zu = %d outside [0, %d)", i, tokens[i],
                              s->n_vocab);
        sampler_seen *e = seen_get(s, tokens[i], err);
        if (!e) return AI_ERR_NOMEM;
        e->in_prompt = true;
    }
    return AI_OK;
}

sampler_finish sampler_seq_accept(sampler_seq *s, int32_t token, ai_err *err)
{
    if (s->track && token >= 0 && token < s->n_vocab) {
        sampler_seen *e = seen_get(s, token, err);
        if (!e) return SAMPLER_RUNNING;
        e->out_count++;
    }
    s->n_generated++;
    sampler_finish f = SAMPLER_RUNNING;
    if (!s->p.ignore_eos && s->eos_id >= 0 && token == s->eos_id) f = SAMPLER_FINISH_STOP;
    for (size_t i = 0; f == SAMPLER_RUNNING && i < s->p.n_stop_token_ids; i++)
        if (s->p.stop_token_ids[i] == token) f = SAMPLER_FINISH_STOP;
    if (f == SAMPLER_RUNNING && s->p.max_tokens > 0 && s->n_generated >= s->p.max_tokens)
        f = SAMPLER_FINISH_LENGTH;
    s->finish = f;
    return f;
}

void sampler_apply_penalties(const sampler_seq *s, float *logits)
{
    for (size_t i = 0; i < s->p.n_logit_bias; i++) logits[s->p.logit_bias[i].token] += s->p.logit_bias[i].bias;
    const float rep = s->p.repetition_penalty, freq = s->p.frequency_penalty, pres = s->p.presence_penalty;
    for (size_t i = 0; i < s->n_seen; i++) {
        const sampler_seen *e = &s->seen[i];
        float l = logits[e->token];
        if (rep != 1.0f) l = l > 0 ? l / rep : l * rep;  /* seen in prompt or output */
        if (e->out_count > 0) {
            if (freq != 0.0f) l -= freq * (float)e->out_count;
            if (pres != 0.0f) l -= pres;
        }
        logits[e->token] = l;
    }
}

// --- the sampler ----------------------------------------------------------------

ai_status sampler_init(sampler *sm, int32_t n_vocab, ai_err *err)
{
    memset(sm, 0, sizeof *sm);
    if (n_vocab <= 0) return ai_err_set(err, AI_ERR_INVALID, "sampler: n_vocab %d must be > 0", n_vocab);
    size_t n = (size_t)n_vocab;
    sm->n_vocab = n_vocab;
    sm->work = malloc(n * sizeof *sm->work);
    sm->cand = malloc(n * sizeof *sm->cand);
    sm->idx = malloc(n * sizeof *sm->idx);
    sm->prob = malloc(n * sizeof *sm->prob);
    if (!sm->work || !sm->cand || !sm->idx || !sm->prob) {
        sampler_free(sm);
        return ai_err_set(err, AI_ERR_NOMEM, "sampler: no memory for a vocabulary of %d", n_vocab);
    }
    return AI_OK;
}

void sampler_free(sampler *sm)
{
    free(sm->work);
    free(sm->cand);
    free(sm->idx);
    free(sm->prob);
    memset(sm, 0, sizeof *sm);
}

/* Top-p cut inside the first `pool` candidates (pool = the top-k set, or all
 * finite tokens), whose softmax mass is z. Sorts in growing chunks until the
 * cut or `limit` is reached; returns how many of the order to keep. */
static size_t top_p_cut(sampler_cand *c, size_t pool, size_t limit, double z, double lmax, double inv_t,
                        double top_p)
{
    const double target = top_p * z;
    double cum = 0;
    size_t sorted = 0, chunk = 64;
    while (sorted < pool) {
        size_t want = pool - sorted < chunk ? pool : sorted + chunk;
        select_partition(c + sorted, pool - sorted, want - sorted);
        select_sort(c + sorted, want - sorted);
        for (size_t j = sorted; j < want; j++) {
            if (j >= limit || cum >= target) return j;
            cum += exp(((double)c[j].logit - lmax) * inv_t);
        }
        sorted = want;
        chunk *= 4;
    }
    return pool < limit ? pool : limit;
}

ai_status sampler_filter(sampler *sm, const sampler_seq *s, const float *logits, sampler_dist *out, ai_err *err)
{
    if (sm->n_vocab != s->n_vocab)
        return ai_err_set(err, AI_ERR_INVALID, "sampler: scratch is for %d tokens, sequence for %d", sm->n_vocab,
                          s->n_vocab);
    const size_t nv = (size_t)sm->n_vocab;
    float *w = sm->work;
    memcpy(w, logits, nv * sizeof *w);
    sampler_apply_penalties(s, w);

    /* one pass: reject NaN/+inf, find the max (first = lowest id on ties) */
    size_t arg = 0;
    float lmaxf = -INFINITY;
    for (size_t i = 0; i < nv; i++) {
        float v = w[i];
        if (isnan(v) || v == INFINITY)
            return ai_err_set(err, AI_ERR_INVALID, "sampler: logit of token %zu is %s%s", i,
                              isnan(logits[i]) || logits[i] == INFINITY ? "" : "(after bias/penalties) ",
                              isnan(v) ? "NaN" : "+inf");
        if (v > lmaxf) {
            lmaxf = v;
            arg = i;
        }
    }
    if (lmaxf == -INFINITY) return ai_err_set(err, AI_ERR_INVALID, "sampler: every logit is -inf");

    if (s->p.temperature < SAMPLER_GREEDY_EPS) {
        sm->idx[0] = (int32_t)arg;
        sm->prob[0] = 1.0;
        *out = (sampler_dist){ sm->idx, sm->prob, 1, true };
        return AI_OK;
    }

    const double lmax = lmaxf, inv_t = 1.0 / (double)s->p.temperature;
    const bool use_p = s->p.top_p < 1.0f, use_minp = s->p.min_p > 0.0f;
    const double log_minp = use_minp ? log((double)s->p.min_p) : -INFINITY;

    /* top-p needs the softmax mass of what top-k keeps: when top-k cuts, of
     * those k (summed later); otherwise of all finite tokens (one exp each) */
    size_t n_finite = nv;
    if (use_p && s->p.top_k > 0 && (size_t)s->p.top_k < nv) {
        n_finite = 0;
        for (size_t i = 0; i < nv; i++) n_finite += w[i] != -INFINITY;
    }
    const bool k_cuts = s->p.top_k > 0 && (!use_p || (size_t)s->p.top_k < n_finite);
    double z_all = 0;
    if (use_p && !k_cuts) {
        n_finite = 0;
        for (size_t i = 0; i < nv; i++)
            if (w[i] != -INFINITY) {
                z_all += exp(((double)w[i] - lmax) * inv_t);
                n_finite++;
            }
    }
    /* Exact tail bound for top-p without top-k: a token of weight w_i has at
     * most n_finite tokens at or after it, so the mass before it is at least
     * Z - n_finite * w_i; when n_finite * w_i <= (1 - p) * Z it is >= p*Z and
     * the token is cut. Dropped here (with a 1e-6 safety margin in log space)
     * so the ordering below only sees the head of the distribution. */
    const double tail = use_p && !k_cuts
                            ? log((1.0 - (double)s->p.top_p) * z_all / (double)n_finite) - 1e-6
                            : -INFINITY;
    /* min-p survivors may be pre-selected unless top-k and top-p are both on
     * (then top-p's mass is over the top-k set, min-p survivors or not) */
    const bool pre_minp = !(use_p && k_cuts);

    sampler_cand *c = sm->cand;
    size_t n = 0, n_minp = 0;
    for (size_t i = 0; i < nv; i++) {
        if (w[i] == -INFINITY) continue;
        double x = ((double)w[i] - lmax) * inv_t;  /* <= 0 */
        /* min-p in log space with a margin, exact exp() comparison near the edge */
        bool pass_minp = !use_minp || x > log_minp + 1e-9 || (x > log_minp - 1e-9 && exp(x) >= s->p.min_p);
        n_minp += pass_minp;
        if ((pre_minp && !pass_minp) || x <= tail) continue;
        c[n++] = (sampler_cand){ w[i], (int32_t)i };
    }

    /* invariant 1: the kept set is the first `keep` of the order */
    size_t pool = n;
    if (k_cuts && (size_t)s->p.top_k < n) {
        pool = (size_t)s->p.top_k;
        select_partition(c, n, pool);
    }
    size_t keep = pool < n_minp ? pool : n_minp;
    if (use_p) {
        double z = z_all;
        if (k_cuts) {
            z = 0;
            for (size_t j = 0; j < pool; j++) z += exp(((double)c[j].logit - lmax) * inv_t);
        }
        keep = top_p_cut(c, pool, keep, z, lmax, inv_t, (double)s->p.top_p);
    }
    /* without top-p, c[0..n) are the min-p survivors and c[0..pool) the best
     * of them, so keep == pool: the set, in quickselect's deterministic order */

    double zk = 0;
    for (size_t j = 0; j < keep; j++) {
        sm->idx[j] = c[j].id;
        sm->prob[j] = exp(((double)c[j].logit - lmax) * inv_t);
        zk += sm->prob[j];
    }
    for (size_t j = 0; j < keep; j++) sm->prob[j] /= zk;
    *out = (sampler_dist){ sm->idx, sm->prob, keep, false };
    return AI_OK;
}

ai_status sampler_sample(sampler *sm, sampler_seq *s, const float *logits, sampler_result *out, ai_err *err)
{
    sampler_dist d;
    ai_status st = sampler_filter(sm, s, logits, &d, err);
    if (st != AI_OK) return st;
    memset(out, 0, sizeof *out);
    size_t pick = 0;
    if (!d.greedy) {
        double u = sampler_rng_uniform(&s->rng), cum = 0;
        size_t j = 0;
        for (; j < d.n; j++) {
            cum += d.probs[j];
            if (d.probs[j] > 0) pick = j;
            if (u < cum) break;
        }
        /* rounding: a u beyond the last partial sum lands on the last token
         * with a non-zero probability (pick), never on an underflowed one */
    }
    out->token = d.ids[pick];
    if (s->p.logprobs >= 0) return sampler_logprobs(logits, s->n_vocab, out->token, s->p.logprobs, out, err);
    return AI_OK;
}
