/* generate.h - the generation loop: prompt tokens -> prefill -> sample -> streaming detokenize ->
 * stop (EOS / stop token / stop string / max tokens / full context), with a callback for text.
 *
 * A generate_session is one conversation on one model_ctx: it remembers which tokens the KV cache
 * holds, so the next call (a chat's next turn) only evaluates the tokens after the longest common
 * prefix with the new prompt. Prefill runs in chunks of the context's n_batch; decode runs one token
 * per forward. Times are measured separately for prefill and decode (monotonic clock).
 */
#ifndef AIINFRA_GENERATE_H
#define AIINFRA_GENERATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aiinfra/model.h"
#include "aiinfra/sampler.h"
#include "aiinfra/template.h"
#include "aiinfra/status.h"
#include "aiinfra/tokenizer.h"

/* Receives streamed text (complete UTF-8, stop strings withheld). Return false to stop early. */
typedef bool (*generate_emit_fn)(void *user, const char *text, size_t len);

typedef struct generate_params {
    sampler_params sp;            /* max_tokens 0 = until EOS or the context is full */
    const char *const *stops;     /* (n_stops) stop strings, not included in the text */
    size_t n_stops;
    uint64_t entropy;             /* seeds the rng when sp.has_seed is false */
    float *prompt_logits;         /* (n_vocab) or NULL: receives the logits of the last prompt token */
} generate_params;

typedef struct generate_stats {
    int32_t n_prompt;      /* prompt tokens */
    int32_t n_reused;      /* of which the KV cache already held */
    int32_t n_gen;         /* tokens sampled (including a final EOS) */
    int32_t n_decode;      /* decode forwards (one token each) */
    double prefill_s;      /* seconds in prefill forwards */
    double decode_s;       /* seconds in decode forwards + sampling */
    sampler_finish finish; /* STOP (eos/stop token/stop string/callback) or LENGTH (max tokens/context) */
    bool stop_string;      /* finished by a stop string */
} generate_stats;

typedef struct generate_session {
    model_ctx *ctx;          /* borrowed */
    const tokenizer *tok;    /* borrowed */
    sampler sm;
    tok_ids cached;          /* tokens whose K/V rows [0, len) are in the cache */
} generate_session;

ai_status generate_session_init(generate_session *s, model_ctx *ctx, const tokenizer *tok, ai_err *err);
void generate_session_free(generate_session *s);

/* Generates after prompt[0..n). Generated ids are appended to out (may be NULL), text goes to emit
 * (may be NULL). */
ai_status generate_run(generate_session *s, const int32_t *prompt, size_t n, const generate_params *p,
                       generate_emit_fn emit, void *user, tok_ids *out, generate_stats *st, ai_err *err);

/* --- chat prompts (src/engine/chat_prompt.c) ---------------------------------------
 * A model's chat template, parsed once, rendered for a conversation with add_generation_prompt,
 * as transformers' apply_chat_template does (bos_token / eos_token from the model). */
typedef struct chat_prompt {
    chat_model_template mt;
    chat_template *t;
} chat_prompt;

ai_status chat_prompt_load(chat_prompt *cp, const char *model_path, ai_err *err);
void chat_prompt_free(chat_prompt *cp);
/* messages: a JSON array of {"role", "content"}. Appends the prompt text to out. */
ai_status chat_prompt_render(const chat_prompt *cp, cJSON *messages, bool add_generation_prompt, buf *out,
                             ai_err *err);

#endif
