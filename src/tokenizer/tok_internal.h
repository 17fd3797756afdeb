/* tok_internal.h - the private layout of a tokenizer, shared by the files of src/tokenizer/.
 *
 * Data flow of an encode call (encode.c):
 *   sanitize UTF-8 -> split on added tokens (added.c) -> per segment: normalize (normalize.c)
 *   -> pre-tokenize into words (pretok.c) -> BPE each word (bpe.c, with a per-call word cache)
 *   -> post-process (BOS/EOS template).
 * Loaders (load_*.c) fill the struct; tok_finish() (vocab.c) then builds the hash maps.
 *
 * Invariants:
 *  1. Every token 0 <= id < n_vocab has a text (possibly empty) in `strings`.
 *  2. key(id) is the string the model looks words up with: the raw bytes for byte-level
 *     models (the GPT-2 byte->char mapping is undone at load time, so encode never maps
 *     bytes to chars), the vocabulary text for char-level (SentencePiece-style) models.
 *  3. merges map (left id, right id) -> (rank, merged id); lower rank merges first, ties
 *     go to the leftmost pair. Score- and rank-defined vocabularies are turned into this
 *     table at load time, so bpe.c has one algorithm.
 *  4. After load nothing is written: all per-call state lives on the caller's stack/heap.
 */
#ifndef AIINFRA_TOK_INTERNAL_H
#define AIINFRA_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stdint.h>

#include "aiinfra/buf.h"
#include "aiinfra/tokenizer.h"

enum tok_model {
    TOK_MODEL_BYTES = 0,  /* byte-level BPE: initial symbols are bytes */
    TOK_MODEL_CHARS = 1,  /* char-level BPE: initial symbols are UTF-8 chars, byte fallback */
};

enum tok_attr {
    TOK_ATTR_UNKNOWN = 1 << 0,
    TOK_ATTR_CONTROL = 1 << 1,  /* special: BOS/EOS, <|im_start|> ... */
    TOK_ATTR_USER = 1 << 2,     /* user-defined added token (not special) */
    TOK_ATTR_UNUSED = 1 << 3,
    TOK_ATTR_BYTE = 1 << 4,     /* <0xXX> byte-fallback token */
    TOK_ATTR_EOG = 1 << 5,
    TOK_ATTR_NOT_MODEL = 1 << 6, /* an added token outside the model vocabulary */
    TOK_ATTR_SELF = 1 << 7,      /* BPE of this token's key, as a word, is this token alone */
};

typedef struct tok_entry {
    uint32_t text_off, text_len; /* vocabulary spelling, in t->strings */
    uint32_t key_off, key_len;   /* lookup key (invariant 2), in t->strings */
    uint8_t attr;
    uint8_t byte_val;            /* for TOK_ATTR_BYTE */
} tok_entry;

/* string -> id (open addressing on xxh3; 0 = empty) */
typedef struct tok_strmap {
    uint64_t *slots;  /* (hash >> 32) << 32 | (id + 1) */
    uint32_t mask;
} tok_strmap;

/* (left, right) -> (rank, id) */
typedef struct tok_merge {
    uint64_t key;     /* ((uint64)left << 32 | right) + 1, 0 = empty */
    int32_t rank;
    int32_t id;
} tok_merge;

typedef struct tok_mergemap {
    tok_merge *slots; /* one 16-byte slot per entry: a lookup touches one cache line */
    uint32_t mask;
    uint32_t count;
} tok_mergemap;

typedef struct tok_added {
    int32_t id;
    char *content;
    size_t len;
    bool special, lstrip, rstrip, single_word, normalized;
} tok_added;

enum split_behavior {
    SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS
};

enum pretok_kind {
    PRETOK_SPLIT,        /* regex or literal string, a behavior, invert */
    PRETOK_BYTELEVEL,    /* add_prefix_space (+ GPT-2 regex when use_regex: stored as re) */
    PRETOK_DIGITS,       /* individual_digits */
    PRETOK_METASPACE,    /* replacement, prepend_scheme, split */
    PRETOK_WHITESPACE,   /* \w+|[^\w\s]+ (as re) */
    PRETOK_WSPLIT,       /* split on whitespace, removed */
    PRETOK_PUNCT,        /* each punctuation char, behavior */
};

enum prepend_scheme { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };

typedef struct pretok_step {
    enum pretok_kind kind;
    pcre2_code *re;           /* SPLIT (regex), BYTELEVEL (use_regex), WHITESPACE */
    char *literal;            /* SPLIT with a String pattern */
    size_t literal_len;
    enum split_behavior behavior;
    bool invert;
    bool add_prefix_space;    /* BYTELEVEL */
    bool individual;          /* DIGITS */
    char repl[8];             /* METASPACE replacement (UTF-8) */
    size_t repl_len;
    enum prepend_scheme scheme;
    bool split;
} pretok_step;

enum norm_kind { NORM_NFC, NORM_NFKC, NORM_NFD, NORM_NFKD, NORM_LOWER, NORM_PREPEND, NORM_REPLACE, NORM_STRIP };

typedef struct norm_step {
    enum norm_kind kind;
    char *a; size_t a_len;    /* PREPEND text / REPLACE pattern (literal) */
    char *b; size_t b_len;    /* REPLACE content */
    pcre2_code *re;           /* REPLACE with a Regex pattern */
    bool left, right;         /* STRIP */
} norm_step;

#define TOK_MAX_STEPS 16
#define TOK_MAX_AFFIX 8

struct tokenizer {
    enum tok_model model;
    int32_t n_vocab;
    tok_entry *tok;          /* (n_vocab) */
    buf strings;             /* all token texts and keys */
    tok_strmap map;          /* key -> id over model tokens */
    tok_mergemap merges;
    int32_t byte_id[256];    /* BYTES: id of each single byte; CHARS: <0xXX> ids; -1 absent */

    bool ignore_merges;      /* a word that is itself a token is emitted as is */
    bool has_self;           /* TOK_ATTR_SELF marks are set (bpe_mark_self) */
    bool byte_fallback;
    bool fuse_unk;
    int32_t unk_id;
    int32_t bos_id, eos_id;

    tok_added *added;        /* (n_added) sorted by first byte, then longest first */
    size_t n_added;
    int32_t added_first[257];/* index range into added per first byte */

    norm_step norm[TOK_MAX_STEPS];
    size_t n_norm;
    pretok_step pre[TOK_MAX_STEPS];
    size_t n_pre;

    int32_t prefix[TOK_MAX_AFFIX]; size_t n_prefix;  /* added with TOK_ADD_SPECIAL */
    int32_t suffix[TOK_MAX_AFFIX]; size_t n_suffix;

    /* decoder */
    bool dec_bytelevel;      /* pieces are byte-level text (keys hold the bytes) */
    bool dec_byte_fallback;  /* <0xXX> -> byte; an invalid run -> one U+FFFD per token */
    bool dec_meta;           /* replace U+2581 by ' ' */
    int dec_strip_lead;      /* leading spaces stripped from the whole text */
};

/* vocab.c */
ai_status tok_alloc(tokenizer **out, int32_t n_vocab, ai_err *err);
ai_status tok_set_token(tokenizer *t, int32_t id, const char *text, size_t len, uint8_t attr, ai_err *err);
ai_status tok_finish(tokenizer *t, ai_err *err);   /* keys, maps, byte ids, added index */
int32_t tok_lookup(const tokenizer *t, const char *key, size_t len);       /* -1 if absent */
int32_t tok_find_text(const tokenizer *t, const char *text, size_t len);   /* linear scan, -1 if absent */
ai_status tok_merge_reserve(tokenizer *t, size_t n, ai_err *err);
ai_status tok_merge_add(tokenizer *t, int32_t left, int32_t right, int32_t rank, int32_t id, ai_err *err);
bool tok_merge_get(const tokenizer *t, int32_t left, int32_t right, int32_t *rank, int32_t *id);
ai_status tok_merges_from_ranks(tokenizer *t, const int32_t *rank, ai_err *err);
ai_status tok_add_added(tokenizer *t, int32_t id, const char *content, size_t len, bool special,
                        bool lstrip, bool rstrip, bool single_word, bool normalized, ai_err *err);
static inline const char *tok_text(const tokenizer *t, int32_t id, size_t *len)
{
    *len = t->tok[id].text_len;
    return t->strings.data + t->tok[id].text_off;
}
static inline const char *tok_key(const tokenizer *t, int32_t id, size_t *len)
{
    *len = t->tok[id].key_len;
    return t->strings.data + t->tok[id].key_off;
}

/* bytelevel.c: GPT-2's byte <-> printable char mapping */
void bytelevel_encode(buf *out, const char *s, size_t n);
/* Decodes byte-level text to raw bytes; false (out untouched) if a char is outside the alphabet. */
bool bytelevel_decode(buf *out, const char *s, size_t n);

/* regex.c */
ai_status tok_regex_compile(pcre2_code **out, const char *pattern, size_t len, ai_err *err);
/* GPT-2's pattern, the llama.cpp pattern lists per tokenizer.ggml.pre name */
extern const char TOK_RE_GPT2[];
/* Fills pre-tokenizer steps for a llama.cpp pre name; AI_ERR_UNSUPPORTED when unknown. */
ai_status tok_pre_from_name(tokenizer *t, const char *name, ai_err *err);

/* normalize.c: applies t->norm to s; out receives the normalized text. */
ai_status tok_normalize(const tokenizer *t, const char *s, size_t n, bool first, buf *out, ai_err *err);

/* pretok.c: splits s into words; `words` receives (offset, length) pairs into `text`,
 * which holds the (possibly rewritten) text. */
typedef struct tok_words {
    buf text;
    size_t *span;    /* (2 * n) */
    size_t n, cap;
} tok_words;
void tok_words_init(tok_words *w);
void tok_words_free(tok_words *w);
ai_status tok_pretokenize(const tokenizer *t, const char *s, size_t n, bool first, tok_words *w, ai_err *err);

/* bpe.c: one word -> ids (appended). */
typedef struct bpe_scratch bpe_scratch;
bpe_scratch *bpe_scratch_new(void);
void bpe_scratch_free(bpe_scratch *s);
ai_status bpe_word(const tokenizer *t, bpe_scratch *s, const char *w, size_t n, tok_ids *out, ai_err *err);
/* Marks TOK_ATTR_SELF by running BPE on every token's key once (call after the merges are in):
 * a word equal to such a token then costs one lookup, with exactly the ids BPE would give. */
ai_status bpe_mark_self(tokenizer *t, ai_err *err);

/* added.c: the next added-token match in s[from..n): start/end of the matched span (incl.
 * stripped whitespace) and the id; false if none. */
bool tok_added_next(const tokenizer *t, const char *s, size_t n, size_t from, bool parse_special,
                    size_t *start, size_t *end, int32_t *id);
void tok_added_index(tokenizer *t);

/* loaders */
/* root, cfg: cJSON objects (tokenizer.json, tokenizer_config.json or NULL) */
ai_status tok_load_cjson(tokenizer **out, const void *root, const void *cfg, ai_err *err);
ai_status tok_load_json(tokenizer **out, const char *json, size_t len, const char *cfg, size_t cfg_len, ai_err *err);
ai_status tok_load_gpt2(tokenizer **out, const char *dir, ai_err *err);
ai_status tok_load_tiktoken(tokenizer **out, const char *path, ai_err *err);

#endif
