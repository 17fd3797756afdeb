/* logprobs.c - OpenAI/vLLM logprobs: the chosen token's log-probability and
 * the top-N alternatives, from the raw logits.
 *
 * Like vLLM's default ("raw" logprobs), these are the log-softmax of the
 * model's logits before bias, penalties and temperature: they describe the
 * model, not the sampling knobs.
 *
 * Why no sort: the top N (N <= 20) come from one pass with a size-N heap whose
 * root is the worst entry kept so far (O(n_vocab log N)); only those N are
 * ordered at the end. A second pass gives the log-sum-exp and the rank.
 *
 * Invariants:
 *   1. ordering is (logit desc, id asc), the sampler's total order;
 *   2. rank = 1 + count of tokens with a strictly larger logit (vLLM's rank).
 */
#include "aiinfra/sampler.h"

#include <math.h>
#include <string.h>

#include "sampler_select.h"

static void heap_sift_up(sampler_cand *h, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_before(h[p], h[i])) return;
        sampler_cand t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

ai_status sampler_logprobs(const float *logits, int32_t n_vocab, int32_t token, int32_t n, sampler_result *out,
                           ai_err *err)
{
    if (n_vocab <= 0 || token < 0 || token >= n_vocab)
        return ai_err_set(err, AI_ERR_RANGE, "logprobs: token %d outside [0, %d)", token, n_vocab);
    if (n < 0 || n > SAMPLER_MAX_LOGPROBS)
        return ai_err_set(err, AI_ERR_INVALID, "logprobs: %d alternatives asked, at most %d", n,
                          SAMPLER_MAX_LOGPROBS);
    if (n > n_vocab) n = n_vocab;
    float lmax = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) {
        float v = logits[i];
        if (isnan(v) || v == INFINITY)
            return ai_err_set(err, AI_ERR_INVALID, "logprobs: logit of token %d is %s", i, isnan(v) ? "NaN" : "+inf");
        if (v > lmax) lmax = v;
    }
    if (lmax == -INFINITY) return ai_err_set(err, AI_ERR_INVALID, "logprobs: every logit is -inf");

    sampler_cand heap[SAMPLER_MAX_LOGPROBS];
    size_t nh = 0;
    double sum = 0;
    int32_t above = 0;
    const float lt = logits[token];
    for (int32_t i = 0; i < n_vocab; i++) {
        float v = logits[i];
        sum += exp((double)v - lmax);
        above += v > lt;
        sampler_cand c = { v, i };
        if (nh < (size_t)n) {
            heap[nh++] = c;
            heap_sift_up(heap, nh - 1);
        } else if (n > 0 && cand_before(c, heap[0])) {
            heap[0] = c;
            select_heap_sift_down(heap, nh, 0);
        }
    }
    const double lse = (double)lmax + log(sum);
    select_sort(heap, nh);
    out->token = token;
    out->logprob = (float)((double)lt - lse);
    out->rank = above + 1;
    out->n_top = (int32_t)nh;
    for (size_t i = 0; i < nh; i++) {
        out->top[i].token = heap[i].id;
        out->top[i].logprob = (float)((double)heap[i].logit - lse);
    }
    return AI_OK;
}
