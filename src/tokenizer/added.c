/* added.c - matching added/special tokens in raw text, before normalization and BPE.
 *
 * HF splits the input on added tokens first (leftmost match, longest at that position),
 * then encodes the text between them. Tokens are indexed by first byte and sorted longest
 * first, so at each position the first hit is the longest one; a position whose first byte
 * starts no token costs one array read.
 * Flags follow HF: lstrip/rstrip widen the match over adjacent whitespace, single_word
 * requires non-word characters (or the text edge) on both sides. Without TOK_PARSE_SPECIAL
 * only non-special added tokens match (HF's split_special_tokens=True).
 * Simplification: `normalized` tokens are matched on the raw text too (none of the supported
 * vocabularies has a normalized added token whose raw and normalized forms differ).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static int cmp_added(const void *pa, const void *pb)
{
    const tok_added *a = pa, *b = pb;
    unsigned char ca = (unsigned char)a->content[0], cb = (unsigned char)b->content[0];
    if (ca != cb) return ca < cb ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

void tok_added_index(tokenizer *t)
{
    if (t->n_added) qsort(t->added, t->n_added, sizeof *t->added, cmp_added);
    size_t j = 0;
    for (int b = 0; b <= 256; b++) {
        while (j < t->n_added && (unsigned char)t->added[j].content[0] < b) j++;
        t->added_first[b] = (int32_t)j;
    }
}

static bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
static bool is_word(unsigned char c) { return c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z'); }

bool tok_added_next(const tokenizer *t, const char *s, size_t n, size_t from, bool parse_special,
                    size_t *start, size_t *end, int32_t *id)
{
    if (!t->n_added) return false;
    for (size_t i = from; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        for (int32_t k = t->added_first[b]; k < t->added_first[b + 1]; k++) {
            const tok_added *a = &t->added[k];
            if (a->special && !parse_special) continue;
            if (a->len > n - i || memcmp(s + i, a->content, a->len)) continue;
            size_t ms = i, me = i + a->len;
            if (a->single_word && ((ms > 0 && is_word((unsigned char)s[ms - 1])) || (me < n && is_word((unsigned char)s[me]))))
                continue;
            if (a->lstrip) while (ms > from && is_space((unsigned char)s[ms - 1])) ms--;
            if (a->rstrip) while (me < n && is_space((unsigned char)s[me])) me++;
            *start = ms;
            *end = me;
            *id = a->id;
            return true;
        }
    }
    return false;
}
