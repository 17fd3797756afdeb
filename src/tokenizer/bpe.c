/* bpe.c - the byte-pair-encoding merge engine, shared by every vocabulary family.
 *
 * A word becomes a doubly linked list of symbols (bytes for byte-level models, UTF-8 chars
 * or byte-fallback tokens for char-level ones). Every adjacent pair with an entry in the
 * merge table goes into a binary min-heap keyed by (rank, position of the left symbol):
 * the lowest rank merges first and ties go to the leftmost pair, which is what HF
 * tokenizers, llama.cpp and tiktoken all do. Merging a pair pushes at most two new pairs,
 * so a word of n symbols costs O(n log n) whatever its content (a megabyte of 'a' included).
 * Stale heap entries are recognised lazily: an entry is valid only if its left symbol still
 * has the recorded id and its right neighbour is still the recorded symbol with the
 * recorded id (a symbol's id only ever grows into a longer token, so ids never repeat).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

typedef struct sym {
    int32_t id;
    int32_t prev, next;   /* -1 at the ends */
    bool unk;
} sym;

typedef struct heap_entry {
    int32_t rank;
    int32_t pos;      /* left symbol */
    int32_t right;    /* right symbol */
    int32_t lid, rid; /* ids when pushed */
    int32_t new_id;
} heap_entry;

struct bpe_scratch {
    sym *syms;
    size_t cap;
    heap_entry *heap;
    size_t hn, hcap;
};

bpe_scratch *bpe_scratch_new(void) { return calloc(1, sizeof(bpe_scratch)); }

void bpe_scratch_free(bpe_scratch *s)
{
    if (!s) return;
    free(s->syms);
    free(s->heap);
    free(s);
}

static bool less(const heap_entry *a, const heap_entry *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static bool heap_push(bpe_scratch *s, heap_entry e)
{
    if (s->hn == s->hcap) {
        size_t cap = s->hcap ? s->hcap * 2 : 64;
        heap_entry *h = realloc(s->heap, cap * sizeof *h);
        if (!h) return false;
        s->heap = h;
        s->hcap = cap;
    }
    size_t i = s->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!less(&e, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = e;
    return true;
}

static heap_entry heap_pop(bpe_scratch *s)
{
    heap_entry top = s->heap[0];
    heap_entry last = s->heap[--s->hn];
    size_t i = 0, n = s->hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static bool try_pair(const tokenizer *t, bpe_scratch *s, int32_t l, int32_t r)
{
    if (l < 0 || r < 0) return true;
    const sym *a = &s->syms[l], *b = &s->syms[r];
    if (a->id < 0 || b->id < 0) return true;
    int32_t rank, id;
    if (!tok_merge_get(t, a->id, b->id, &rank, &id)) return true;
    return heap_push(s, (heap_entry){rank, l, r, a->id, b->id, id});
}

static bool add_sym(bpe_scratch *s, size_t *n, int32_t id, bool unk)
{
    if (*n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        sym *y = realloc(s->syms, cap * sizeof *y);
        if (!y) return false;
        s->syms = y;
        s->cap = cap;
    }
    s->syms[*n] = (sym){id, (int32_t)*n - 1, (int32_t)*n + 1, unk};
    (*n)++;
    return true;
}

ai_status bpe_word(const tokenizer *t, bpe_scratch *s, const char *w, size_t n, tok_ids *out, ai_err *err)
{
    if (n == 0) return AI_OK;
    if (n > INT32_MAX / 2) return ai_err_set(err, AI_ERR_RANGE, "word of %zu bytes is too long", n);
    if (t->ignore_merges || t->has_self) {
        int32_t id = tok_lookup(t, w, n);
        if (id >= 0 && (t->ignore_merges || (t->tok[id].attr & TOK_ATTR_SELF)))
            return tok_ids_push(out, id) ? AI_OK : ai_err_set(err, AI_ERR_NOMEM, "out of memory");
    }
    size_t ns = 0;
    bool ok = true;
    if (t->model == TOK_MODEL_BYTES) {
        for (size_t i = 0; i < n && ok; i++) {
            int32_t id = t->byte_id[(unsigned char)w[i]];
            ok = id >= 0 ? add_sym(s, &ns, id, false) : t->unk_id >= 0 ? add_sym(s, &ns, t->unk_id, true) : true;
        }
    } else {
        size_t i = 0;
        while (i < n && ok) {
            size_t k = 1;
            while (i + k < n && ((unsigned char)w[i + k] & 0xC0) == 0x80) k++;
            int32_t id = tok_lookup(t, w + i, k);
            if (id >= 0) {
                ok = add_sym(s, &ns, id, false);
            } else {
                bool all = t->byte_fallback;
                for (size_t j = 0; j < k && all; j++) all = t->byte_id[(unsigned char)w[i + j]] >= 0;
                if (all) {
                    for (size_t j = 0; j < k && ok; j++) ok = add_sym(s, &ns, t->byte_id[(unsigned char)w[i + j]], false);
                } else if (t->unk_id >= 0) {
                    if (!(t->fuse_unk && ns > 0 && s->syms[ns - 1].unk)) ok = add_sym(s, &ns, t->unk_id, true);
                }
            }
            i += k;
        }
    }
    if (!ok) return ai_err_set(err, AI_ERR_NOMEM, "out of memory (BPE symbols)");
    if (ns == 0) return AI_OK;
    s->syms[ns - 1].next = -1;

    s->hn = 0;
    for (size_t i = 0; i + 1 < ns && ok; i++) ok = try_pair(t, s, (int32_t)i, (int32_t)i + 1);
    while (ok && s->hn > 0) {
        heap_entry e = heap_pop(s);
        sym *a = &s->syms[e.pos];
        if (a->id != e.lid || a->next != e.right) continue;
        sym *b = &s->syms[e.right];
        if (b->id != e.rid) continue;
        a->id = e.new_id;
        a->unk = false;
        a->next = b->next;
        if (b->next >= 0) s->syms[b->next].prev = e.pos;
        b->id = -1;
        b->prev = b->next = -1;
        ok = try_pair(t, s, a->prev, e.pos) && try_pair(t, s, e.pos, a->next);
    }
    if (!ok) return ai_err_set(err, AI_ERR_NOMEM, "out of memory (BPE heap)");
    for (int32_t i = 0; i >= 0; i = s->syms[i].next)
        if (!tok_ids_push(out, s->syms[i].id)) return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
    return AI_OK;
}

ai_status bpe_mark_self(tokenizer *t, ai_err *err)
{
    if (t->ignore_merges || t->model != TOK_MODEL_BYTES) return AI_OK;
    bpe_scratch *s = bpe_scratch_new();
    if (!s) return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
    tok_ids ids;
    tok_ids_init(&ids);
    ai_status st = AI_OK;
    for (int32_t id = 0; id < t->n_vocab && !st; id++) {
        tok_entry *e = &t->tok[id];
        if (e->attr & (TOK_ATTR_CONTROL | TOK_ATTR_NOT_MODEL) || e->key_len < 2) continue;
        size_t n;
        const char *k = tok_key(t, id, &n);
        ids.len = 0;
        st = bpe_word(t, s, k, n, &ids, err);
        if (!st && ids.len == 1 && ids.data[0] == id) e->attr |= TOK_ATTR_SELF;
    }
    tok_ids_free(&ids);
    bpe_scratch_free(s);
    if (!st) t->has_self = true;
    return st;
}
