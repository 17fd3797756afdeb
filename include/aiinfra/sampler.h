/* sampler.h - turns one row of logits into the next token of a sequence.
 *
 * Semantics follow vLLM (and so OpenAI's request parameters); see
 * docs/sampling.md for the plain-words version and the exact definitions.
 *
 * Pieces, each with its own file under src/engine/:
 *   rng.c       sampler_rng: xoshiro256** seeded through splitmix64, per sequence
 *   sampler.c   params, per-sequence state (sparse penalty counts), the filter
 *               pipeline and the draw
 *   select.c    partial selection / ordering of candidates (no full vocab sort),
 *               internal header src/engine/sampler_select.h
 *   logprobs.c  raw log-softmax of the chosen token and the top-N alternatives
 *   stop.c      stop-string matcher for streamed, detokenized text
 *
 * Order of operations (why in sampler.c):
 *   logit_bias -> penalties -> temperature -> top-k -> top-p -> min-p -> sample
 *   greedy (temperature < SAMPLER_GREEDY_EPS) = argmax of the biased+penalized
 *   logits, ties to the lowest token id.
 *
 * Threading: a `sampler` is scratch memory for one thread (n_vocab floats, ids
 * and doubles); a `sampler_seq` is one request's state. Neither holds global state.
 */
#ifndef AIINFRA_SAMPLER_H
#define AIINFRA_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aiinfra/buf.h"
#include "aiinfra/status.h"

#define SAMPLER_MAX_LOGPROBS 20     /* top-N alternatives returned at most (OpenAI: 20) */
#define SAMPLER_GREEDY_EPS 1e-5f    /* temperature below this is greedy (vLLM's _SAMPLING_EPS) */
#define SAMPLER_MAX_STOP_LEN 4096   /* bytes of one stop string at most */

// --- random numbers ---------------------------------------------------------

/* xoshiro256** state; 32 bytes, copied freely. Never all zero. */
typedef struct sampler_rng {
    uint64_t s[4];
} sampler_rng;

void sampler_rng_seed(sampler_rng *r, uint64_t seed);  /* splitmix64 expansion of seed */
uint64_t sampler_rng_next(sampler_rng *r);             /* 64 uniform bits */
double sampler_rng_uniform(sampler_rng *r);            /* uniform in [0, 1), 53 bits */

// --- request parameters -----------------------------------------------------

typedef struct sampler_bias {
    int32_t token;
    float bias;   /* added to the raw logit; OpenAI range [-100, 100] */
} sampler_bias;

typedef struct sampler_params {
    float temperature;          /* 0 (or < SAMPLER_GREEDY_EPS) = greedy */
    int32_t top_k;              /* <= 0: off */
    float top_p;                /* (0, 1]; 1: off */
    float min_p;                /* [0, 1]; 0: off */
    float repetition_penalty;   /* > 0; 1: off. Prompt and output tokens. */
    float presence_penalty;     /* [-2, 2]; output tokens only */
    float frequency_penalty;    /* [-2, 2]; output tokens only */
    bool has_seed;              /* false: sampler_seq_init's entropy seeds the rng */
    uint64_t seed;
    const sampler_bias *logit_bias;  /* (n_logit_bias), copied by sampler_seq_init */
    size_t n_logit_bias;
    bool ignore_eos;
    const int32_t *stop_token_ids;   /* (n_stop_token_ids), copied by sampler_seq_init */
    size_t n_stop_token_ids;
    int32_t max_tokens;         /* >= 1, or 0 = no limit here (the caller caps by context) */
    int32_t logprobs;           /* -1: none; 0..20: chosen token's logprob + that many top */
} sampler_params;

/* temperature 1, every filter and penalty off, no seed, max_tokens 0, logprobs -1. */
sampler_params sampler_params_default(void);

/* Checks ranges; the message names the field. n_vocab bounds token ids. */
ai_status sampler_params_check(const sampler_params *p, int32_t n_vocab, ai_err *err);

// --- per-sequence state -----------------------------------------------------

typedef enum sampler_finish {
    SAMPLER_RUNNING = 0,
    SAMPLER_FINISH_STOP,    /* EOS, a stop token id or a stop string: OpenAI "stop" */
    SAMPLER_FINISH_LENGTH,  /* max_tokens reached: OpenAI "length" */
} sampler_finish;

const char *sampler_finish_str(sampler_finish f);  /* NULL, "stop", "length" */

/* Token seen in the prompt and/or the output, kept in a small open-addressed
 * hash so that penalties cost O(distinct tokens seen), never O(n_vocab). */
typedef struct sampler_seen {
    int32_t token;
    int32_t out_count;   /* occurrences in the output */
    bool in_prompt;
} sampler_seen;

typedef struct sampler_seq {
    sampler_params p;        /* copy; p.logit_bias / p.stop_token_ids point at owned copies */
    int32_t n_vocab;
    int32_t eos_id;          /* -1: none */
    sampler_rng rng;
    bool track;              /* some penalty is on, so `seen` is kept */
    sampler_seen *seen;      /* (n_seen) in first-seen order: the sparse touched list */
    size_t n_seen, cap_seen;
    int32_t *slot;           /* (cap_slot) hash: token -> index in seen, -1 empty */
    size_t cap_slot;         /* power of two, >= 2 * n_seen */
    int32_t n_generated;
    sampler_finish finish;
} sampler_seq;

/* entropy seeds the rng when p->has_seed is false (the caller reads the OS). */
ai_status sampler_seq_init(sampler_seq *s, const sampler_params *p, int32_t n_vocab,
                           int32_t eos_id, uint64_t entropy, ai_err *err);
void sampler_seq_free(sampler_seq *s);

/* Registers prompt tokens (for the repetition penalty). May be called in pieces. */
ai_status sampler_seq_add_prompt(sampler_seq *s, const int32_t *tokens, size_t n, ai_err *err);

/* Appends a generated token: updates counts, then returns the finish state
 * (EOS unless ignore_eos, then stop ids -> STOP; then max_tokens -> LENGTH).
 * Also stored in s->finish. Returns SAMPLER_RUNNING on an out-of-memory (err set). */
sampler_finish sampler_seq_accept(sampler_seq *s, int32_t token, ai_err *err);

/* logits[0..n_vocab) += logit_bias, then repetition, frequency and presence
 * penalties for the tokens in s->seen (in place). */
void sampler_apply_penalties(const sampler_seq *s, float *logits);

// --- the sampler (per-thread scratch) -----------------------------------------

/* A candidate token: its (biased, penalized) logit and id, kept together so
 * that selection and sorting move 8 bytes and need no context pointer. */
typedef struct sampler_cand {
    float logit;
    int32_t id;
} sampler_cand;

typedef struct sampler {
    int32_t n_vocab;
    float *work;         /* (n_vocab) biased + penalized logits of the current step */
    sampler_cand *cand;  /* (n_vocab) candidates; the kept set is a prefix after filtering */
    int32_t *idx;        /* (n_vocab) ids of the kept set */
    double *prob;        /* (n_vocab) renormalized probabilities of the kept set */
} sampler;

ai_status sampler_init(sampler *sm, int32_t n_vocab, ai_err *err);
void sampler_free(sampler *sm);

/* The filtered distribution of one step: ids[i] has probability probs[i].
 * With top-p on, ids are in the order (logit desc, id asc); otherwise in a
 * deterministic order that depends only on the logits (the draw walks it).
 * Points into the sampler's scratch; valid until its next call. */
typedef struct sampler_dist {
    const int32_t *ids;    /* (n) */
    const double *probs;   /* (n), sum 1 */
    size_t n;
    bool greedy;           /* n == 1 and chosen by argmax */
} sampler_dist;

/* Runs bias, penalties, temperature, top-k, top-p, min-p on logits (n_vocab,
 * unchanged). Fails on NaN or +inf logits or when every logit is -inf. */
ai_status sampler_filter(sampler *sm, const sampler_seq *s, const float *logits,
                         sampler_dist *out, ai_err *err);

typedef struct sampler_logprob {
    int32_t token;
    float logprob;    /* log-softmax of the raw logits (before bias, penalties, temperature) */
} sampler_logprob;

typedef struct sampler_result {
    int32_t token;
    float logprob;    /* of token; filled when p.logprobs >= 0 */
    int32_t rank;     /* 1 + number of tokens with a strictly larger raw logit */
    int32_t n_top;    /* = p.logprobs (capped at n_vocab) */
    sampler_logprob top[SAMPLER_MAX_LOGPROBS];  /* (n_top) by logprob desc, id asc */
} sampler_result;

/* One step: filter, draw from s->rng (not for greedy), logprobs if asked.
 * Does not accept the token: call sampler_seq_accept next. */
ai_status sampler_sample(sampler *sm, sampler_seq *s, const float *logits,
                         sampler_result *out, ai_err *err);

/* Raw log-softmax of logits for `token` and its rank, plus the top n (<= 20)
 * alternatives, in two passes over the row and a size-n heap (no sort). */
ai_status sampler_logprobs(const float *logits, int32_t n_vocab, int32_t token, int32_t n,
                           sampler_result *out, ai_err *err);

// --- stop strings -------------------------------------------------------------

/* Finds stop strings in text that arrives in pieces (one detokenized token at a
 * time) and says how much of it is safe to stream: everything except a tail
 * that could still become the start of a stop string. See stop.c. */
typedef struct stop_matcher {
    char **stops;      /* (n) owned copies */
    size_t *lens;      /* (n) */
    size_t n;
    size_t max_len;
    buf pending;       /* received, not yet released (a possible partial match) */
    buf out;           /* what the last feed/flush released */
    bool stopped;
    int32_t stop_index;  /* which stop string matched, -1 none */
    bool include_stop;   /* vLLM include_stop_str_in_output: release the match too.
                          * false after init; set it before the first feed. */
} stop_matcher;

ai_status stop_matcher_init(stop_matcher *m, const char *const *stops, size_t n, ai_err *err);
void stop_matcher_free(stop_matcher *m);

typedef struct stop_result {
    const char *emit;  /* (emit_len) bytes safe to send now; valid until the next call */
    size_t emit_len;
    bool stopped;      /* a stop string completed: emit ends right before it (or right
                        * after it with include_stop); stop feeding */
    int32_t stop_index;
} stop_result;

/* Feeds the next piece of text. After a stop, further feeds emit nothing. */
ai_status stop_matcher_feed(stop_matcher *m, const char *text, size_t len,
                            stop_result *res, ai_err *err);

/* End of generation without a stop string (EOS, length): releases the held tail. */
void stop_matcher_flush(stop_matcher *m, stop_result *res);

#endif
