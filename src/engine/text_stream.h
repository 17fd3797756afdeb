/* text_stream.h - internal: one sample's generated tokens -> streamable text (text_stream.c).
 *
 * The piece of the generation loop that every generator needs, shared so that the serving engine
 * (engine.c, many samples at once) and the one-sequence loop (generate.c) release text the same way:
 *   token --tok_stream (complete UTF-8 only)--> stop_matcher (hold a possible stop-string prefix)
 *         --> text safe to send now
 * and, when generation ends without a stop string, the held tail. Tokens that end generation by id
 * (EOS, stop token ids) contribute no text, as in generate.c.
 */
#ifndef AIINFRA_ENGINE_TEXT_STREAM_H
#define AIINFRA_ENGINE_TEXT_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aiinfra/buf.h"
#include "aiinfra/sampler.h"
#include "aiinfra/status.h"
#include "aiinfra/tokenizer.h"

typedef struct text_stream {
    tok_stream ts;    /* detokenizer, special tokens skipped */
    stop_matcher sm;  /* stop strings */
    buf piece;        /* scratch: the text of one token */
    bool stopped;     /* a stop string completed: nothing more is released */
} text_stream;

ai_status text_stream_init(text_stream *s, const tokenizer *tok, const char *const *stops, size_t n_stops,
                           ai_err *err);
void text_stream_free(text_stream *s);
/* Detokenizes token, feeds the stop matcher and appends what is safe to send to out. *stopped is set
 * when a stop string completed (out then ends right before it). */
ai_status text_stream_push(text_stream *s, int32_t token, buf *out, bool *stopped, ai_err *err);
/* End of generation: appends what the detokenizer and the stop matcher still hold (nothing after a
 * stop string). */
ai_status text_stream_finish(text_stream *s, buf *out, ai_err *err);

/* The caller's stop token ids plus the tokenizer's end-of-generation ids below n_vocab (EOS, <|eot_id|>,
 * <|im_end|>, ...) unless sp->ignore_eos: a malloc'd array (*out, *n) the caller frees. */
ai_status text_stop_ids(const tokenizer *tok, int32_t n_vocab, const sampler_params *sp, int32_t **out, size_t *n,
                        ai_err *err);

#endif
