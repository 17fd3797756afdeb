/* tokenizer.h - text <-> token ids with exact parity to Hugging Face `tokenizers`,
 * llama.cpp (GGUF vocabularies) and tiktoken.
 *
 * One engine serves every supported family:
 *   - byte-level BPE (GPT-2, Llama-3, Qwen2/3, Falcon, MPT, tiktoken cl100k/o200k),
 *   - SentencePiece-style BPE with byte fallback (Llama-2, Mistral, Phi-3), whose merges
 *     come from a merges list or from token scores.
 * A loaded tokenizer is immutable: encode/decode may run from many threads at once.
 *
 * Invalid UTF-8 input is never rejected: every ill-formed subsequence becomes U+FFFD
 * (Python's bytes.decode("utf-8", "replace")) before tokenization.
 */
#ifndef AIINFRA_TOKENIZER_H
#define AIINFRA_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aiinfra/buf.h"
#include "aiinfra/gguf.h"
#include "aiinfra/status.h"

/* A growable vector of token ids. */
typedef struct tok_ids {
    int32_t *data;  /* (cap) ids, the first len valid */
    size_t len;
    size_t cap;
} tok_ids;

void tok_ids_init(tok_ids *v);
void tok_ids_free(tok_ids *v);
bool tok_ids_push(tok_ids *v, int32_t id);   /* false on out-of-memory */

typedef struct tokenizer tokenizer;

/* encode flags */
enum {
    TOK_ADD_SPECIAL = 1 << 0,   /* BOS/EOS (or the post-processor template) per config */
    TOK_PARSE_SPECIAL = 1 << 1, /* match special-token text in the input (HF default) */
};
/* decode flags */
enum {
    TOK_SKIP_SPECIAL = 1 << 0,  /* leave control/special tokens out of the text */
};

/* path: a GGUF file, a tokenizer.json, an HF folder (tokenizer.json [+ tokenizer_config.json]),
 * a GPT-2 folder (encoder.json + vocab.bpe) or a *.tiktoken file (cl100k_base / o200k_base). */
ai_status tokenizer_load(tokenizer **out, const char *path, ai_err *err);
ai_status tokenizer_from_gguf(tokenizer **out, const gguf *g, ai_err *err);
/* tokenizer.json text already in memory (config_json may be NULL). */
ai_status tokenizer_from_json(tokenizer **out, const char *json, size_t len,
                              const char *config_json, size_t config_len, ai_err *err);
void tokenizer_free(tokenizer *t);

ai_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, int flags,
                           tok_ids *out, ai_err *err);   /* appends to out */
/* An encoder: per-thread scratch plus a word cache kept across calls (bounded, cleared when full).
 * Use one per thread for many encodes (a server, a batch job); tokenizer_encode makes a
 * throw-away one. Same ids as tokenizer_encode, only faster on repeated words. */
typedef struct tok_encoder tok_encoder;
ai_status tok_encoder_init(tok_encoder **out, const tokenizer *t, ai_err *err);
ai_status tok_encoder_encode(tok_encoder *e, const char *text, size_t len, int flags, tok_ids *out, ai_err *err);
void tok_encoder_free(tok_encoder *e);

ai_status tokenizer_decode(const tokenizer *t, const int32_t *ids, size_t n, int flags,
                           buf *out, ai_err *err);       /* appends to out */

int32_t tokenizer_n_vocab(const tokenizer *t);
int32_t tokenizer_bos(const tokenizer *t);   /* -1 if none */
int32_t tokenizer_eos(const tokenizer *t);   /* -1 if none */
bool tokenizer_is_special(const tokenizer *t, int32_t id);  /* control / special added token */
bool tokenizer_is_eog(const tokenizer *t, int32_t id);      /* ends generation (eos, eot, im_end...) */
/* The token's text as the vocabulary spells it ("Ġthe", "▁the", "<0x0A>"); NULL if out of range. */
const char *tokenizer_piece(const tokenizer *t, int32_t id, size_t *len);

/* Streaming detokenizer: push ids one by one, get only complete UTF-8 text.
 * The concatenation of everything appended equals tokenizer_decode of all ids. */
typedef struct tok_stream {
    const tokenizer *t;
    int flags;
    bool started;    /* a piece was emitted (the leading-space strip applies once) */
    buf pending;     /* bytes held back: an incomplete UTF-8 tail or a run of byte tokens */
    size_t n_bytes;  /* number of byte-fallback tokens in pending (SPM decoders) */
} tok_stream;

void tok_stream_init(tok_stream *s, const tokenizer *t, int flags);
ai_status tok_stream_push(tok_stream *s, int32_t id, buf *out, ai_err *err);
void tok_stream_flush(tok_stream *s, buf *out);
void tok_stream_free(tok_stream *s);

#endif
