/* kv_blocks.c - KV block pool, reference counts, block tables, copy-on-write, prefix adoption.
 *
 * Invariants (kv_blocks_check verifies all of them; debug builds after every mutating call):
 *   1. Every block is in exactly one state:
 *        FREE  on the free list: refcount 0, not cached;
 *        USED  refcount > 0 (cached or not);
 *        IDLE  refcount 0, cached, in the prefix cache's LRU list (evictable).
 *      n_free + n_used + n_idle == num_blocks: no block is leaked, none is on the free list twice.
 *   2. refcount[b] == number of entries equal to b over all open block tables. The prefix cache
 *      holds no reference of its own (an idle block has refcount 0), so "freed" is exact.
 *   3. A table holds a block at most once, and has exactly ceil(n_tokens / block_size) entries.
 *   4. A sequence only writes into a block whose refcount is 1: kv_blocks_append copies a shared
 *      partly filled last block first. Full blocks are never written again, so sharing them
 *      (fork, prefix hit) needs no copy.
 *   5. Only full, computed blocks are cached: a sequence's first n_committed blocks were entered
 *      (or found equal) in the prefix cache, n_committed * block_size <= n_tokens.
 *   6. Every mutating call checks its needs (blocks, memory) before changing anything, so a
 *      failure leaves the state as it was.
 *
 * Design: the free list is a LIFO stack (a block freed last is reused first, its memory is warm);
 * it is always used before an idle cached block is evicted, so the cache keeps as much as the
 * pool allows. Sequence handles are slots in a growable array with a free-slot chain.
 */
#include "aiinfra/kv_blocks.h"

#include <stdlib.h>
#include <string.h>

typedef struct kv_seq {
    int32_t *blocks;       /* (cap) block table, n_blocks used */
    int32_t n_blocks, cap;
    int32_t n_tokens;      /* token positions with room in the table */
    int32_t n_committed;   /* leading blocks entered in the prefix cache (invariant 5) */
    prefix_link link;      /* chain position after block n_committed - 1 */
    bool open;
    int32_t next_free;     /* free-slot chain when closed */
} kv_seq;

struct kv_blocks {
    kv_blocks_config cfg;
    int32_t *ref;          /* (num_blocks) reference counts */
    int32_t *free_list;    /* (num_blocks) stack of FREE blocks, n_free on it */
    int32_t n_free, n_used;
    prefix_cache *pc;      /* NULL without prefix caching */
    int32_t *scratch;      /* (num_blocks) matched blocks during admit */
    kv_seq *seqs;
    int32_t n_slots, slot_cap, free_slot, n_open;
};

#ifndef NDEBUG
#define KV_DEBUG_CHECK(kv, err)                                                   \
    do {                                                                          \
        if (!(kv)->cfg.skip_debug_checks) {                                       \
            ai_status st_ = kv_blocks_check((kv), (err));                         \
            if (st_ != AI_OK) {                                                   \
                ai_err_prefix((err), "kv_blocks: after %s", __func__);            \
                return st_;                                                       \
            }                                                                     \
        }                                                                         \
    } while (0)
#else
#define KV_DEBUG_CHECK(kv, err) do { (void)(kv); (void)(err); } while (0)
#endif

static int32_t ceil_div(int32_t a, int32_t b) { return (int32_t)(((int64_t)a + b - 1) / b); }

ai_status kv_blocks_init(kv_blocks **out, const kv_blocks_config *cfg, ai_err *err)
{
    *out = NULL;
    if (cfg->num_blocks < 1 || cfg->num_blocks > (1 << 28))
        return ai_err_set(err, AI_ERR_RANGE, "kv_blocks: num_blocks %d not in [1, 2^28]", (int)cfg->num_blocks);
    if (cfg->block_size < 1 || cfg->block_size > 4096)
        return ai_err_set(err, AI_ERR_RANGE, "kv_blocks: block_size %d not in [1, 4096]", (int)cfg->block_size);
    kv_blocks *kv = calloc(1, sizeof *kv);
    if (!kv) return ai_err_set(err, AI_ERR_NOMEM, "kv_blocks: out of memory");
    kv->cfg = *cfg;
    size_t n = (size_t)cfg->num_blocks;
    kv->ref = calloc(n, sizeof *kv->ref);
    kv->free_list = malloc(n * sizeof *kv->free_list);
    kv->scratch = malloc(n * sizeof *kv->scratch);
    kv->free_slot = -1;
    if (!kv->ref || !kv->free_list || !kv->scratch) {
        kv_blocks_free(kv);
        return ai_err_set(err, AI_ERR_NOMEM, "kv_blocks: out of memory for %d blocks", (int)cfg->num_blocks);
    }
    /* pushed high to low so block 0 is handed out first (readable tests and dumps) */
    for (int32_t i = 0; i < cfg->num_blocks; i++) kv->free_list[i] = cfg->num_blocks - 1 - i;
    kv->n_free = cfg->num_blocks;
    if (cfg->enable_prefix_cache) {
        ai_status st = prefix_cache_init(&kv->pc, cfg->num_blocks, cfg->block_size, err);
        if (st != AI_OK) {
            kv_blocks_free(kv);
            return st;
        }
    }
    *out = kv;
    return AI_OK;
}

void kv_blocks_free(kv_blocks *kv)
{
    if (!kv) return;
    for (int32_t i = 0; i < kv->n_slots; i++) free(kv->seqs[i].blocks);
    free(kv->seqs);
    free(kv->ref);
    free(kv->free_list);
    free(kv->scratch);
    prefix_cache_free(kv->pc);
    free(kv);
}

// --- blocks ------------------------------------------------------------------------------------

/* A block with refcount 1: from the free list, else the LRU idle block (-1 if neither). */
static int32_t block_take(kv_blocks *kv)
{
    int32_t b = -1;
    if (kv->n_free > 0) b = kv->free_list[--kv->n_free];
    else if (kv->pc) b = prefix_cache_evict(kv->pc);
    if (b >= 0) {
        kv->ref[b] = 1;
        kv->n_used++;
    }
    return b;
}

/* One more reference to a block that is USED or IDLE (prefix hit, fork). */
static void block_share(kv_blocks *kv, int32_t b)
{
    if (kv->ref[b] == 0) {
        prefix_cache_idle_remove(kv->pc, b);  /* only cached blocks are shared while unreferenced */
        kv->n_used++;
    }
    kv->ref[b]++;
}

static void block_release(kv_blocks *kv, int32_t b)
{
    if (--kv->ref[b] > 0) return;
    kv->n_used--;
    if (kv->pc && prefix_cache_is_cached(kv->pc, b)) prefix_cache_idle_push(kv->pc, b);
    else kv->free_list[kv->n_free++] = b;
}

int32_t kv_blocks_num_available(const kv_blocks *kv)
{
    return kv->n_free + (kv->pc ? prefix_cache_num_idle(kv->pc) : 0);
}

// --- sequences ---------------------------------------------------------------------------------

static kv_seq *seq_get(const kv_blocks *kv, int32_t seq)
{
    if (seq < 0 || seq >= kv->n_slots || !kv->seqs[seq].open) return NULL;
    return &kv->seqs[seq];
}

static ai_status table_reserve(kv_seq *s, int32_t n, ai_err *err)
{
    if (n <= s->cap) return AI_OK;
    int32_t cap = s->cap ? s->cap : 8;
    while (cap < n) cap = cap > (1 << 29) ? n : cap * 2;
    int32_t *p = realloc(s->blocks, (size_t)cap * sizeof *p);
    if (!p) return ai_err_set(err, AI_ERR_NOMEM, "kv_blocks: out of memory for a table of %d blocks", (int)n);
    s->blocks = p;
    s->cap = cap;
    return AI_OK;
}

/* A closed slot made open and empty (no side effect visible to invariants on failure). */
static ai_status slot_open(kv_blocks *kv, int32_t *out, ai_err *err)
{
    int32_t i = kv->free_slot;
    if (i >= 0) {
        kv->free_slot = kv->seqs[i].next_free;
    } else {
        if (kv->n_slots == kv->slot_cap) {
            int32_t cap = kv->slot_cap ? kv->slot_cap * 2 : 16;
            kv_seq *p = realloc(kv->seqs, (size_t)cap * sizeof *p);
            if (!p) return ai_err_set(err, AI_ERR_NOMEM, "kv_blocks: out of memory for %d sequences", (int)cap);
            kv->seqs = p;
            kv->slot_cap = cap;
        }
        i = kv->n_slots++;
        kv->seqs[i] = (kv_seq){ 0 };
    }
    kv_seq *s = &kv->seqs[i];
    s->n_blocks = s->n_tokens = s->n_committed = 0;
    s->link = PREFIX_LINK_ROOT;
    s->open = true;
    s->next_free = -1;
    kv->n_open++;
    *out = i;
    return AI_OK;
}

static void slot_close(kv_blocks *kv, int32_t i)
{
    kv_seq *s = &kv->seqs[i];
    s->open = false;
    s->n_blocks = s->n_tokens = 0;
    s->next_free = kv->free_slot;
    kv->free_slot = i;
    kv->n_open--;
}

ai_status kv_blocks_seq_open(kv_blocks *kv, int32_t *seq, ai_err *err)
{
    ai_status st = slot_open(kv, seq, err);
    if (st != AI_OK) return st;
    KV_DEBUG_CHECK(kv, err);
    return AI_OK;
}

ai_status kv_blocks_seq_close(kv_blocks *kv, int32_t seq, ai_err *err)
{
    kv_seq *s = seq_get(kv, seq);
    if (!s) return ai_err_set(err, AI_ERR_INVALID, "kv_blocks: close of sequence %d, which is not open", (int)seq);
    for (int32_t i = s->n_blocks - 1; i >= 0; i--) block_release(kv, s->blocks[i]);
    slot_close(kv, seq);
    KV_DEBUG_CHECK(kv, err);
    return AI_OK;
}

ai_status kv_blocks_fork(kv_blocks *kv, int32_t parent, int32_t *child, ai_err *err)
{
    if (!seq_get(kv, parent))
        return ai_err_set(err, AI_ERR_INVALID, "kv_blocks: fork of sequence %d, which is not open", (int)parent);
    int32_t c;
    ai_status st = slot_open(kv, &c, err);
    if (st != AI_OK) return st;
    kv_seq *p = &kv->seqs[parent], *s = &kv->seqs[c];  /* after slot_open: seqs may have moved */
    st = table_reserve(s, p->n_blocks, err);
    if (st != AI_OK) {
        slot_close(kv, c);
        return st;
    }
    if (p->n_blocks) memcpy(s->blocks, p->blocks, (size_t)p->n_blocks * sizeof *s->blocks);
    s->n_blocks = p->n_blocks;
    s->n_tokens = p->n_tokens;
    s->n_committed = p->n_committed;
    s->link = p->link;
    for (int32_t i = 0; i < s->n_blocks; i++) block_share(kv, s->blocks[i]);
    *child = c;
    KV_DEBUG_CHECK(kv, err);
    return AI_OK;
}

static bool needs_cow(const kv_blocks *kv, const kv_seq *s, int32_t n_new)
{
    return n_new > 0 && s->n_tokens % kv->cfg.block_size != 0 && kv->ref[s->blocks[s->n_blocks - 1]] > 1;
}

int32_t kv_blocks_needed(const kv_blocks *kv, int32_t seq, int32_t n_new)
{
    const kv_seq *s = seq_get(kv, seq);
    if (!s || n_new < 0) return 0;
    return ceil_div(s->n_tokens + n_new, kv->cfg.block_size) - s->n_blocks + (needs_cow(kv, s, n_new) ? 1 : 0);
}

ai_status kv_blocks_append(kv_blocks *kv, int32_t seq, int32_t n_new, kv_copy *cow, int32_t *n_cow,
                           ai_err *err)
{
    *n_cow = 0;
    kv_seq *s = seq_get(kv, seq);
    if (!s) return ai_err_set(err, AI_ERR_INVALID, "kv_blocks: append to sequence %d, which is not open", (int)seq);
    if (n_new < 0 || n_new > INT32_MAX - s->n_tokens)
        return ai_err_set(err, AI_ERR_RANGE, "kv_blocks: append of %d tokens to sequence %d holding %d",
                          (int)n_new, (int)seq, (int)s->n_tokens);
    int32_t bs = kv->cfg.block_size;
    int32_t n_blocks = ceil_div(s->n_tokens + n_new, bs);
    bool cow_needed = needs_cow(kv, s, n_new);
    int32_t needed = n_blocks - s->n_blocks + (cow_needed ? 1 : 0);
    if (needed > kv_blocks_num_available(kv))
        return ai_err_set(err, AI_ERR_RANGE, "kv_blocks: out of blocks: sequence %d needs %d, %d available",
                          (int)seq, (int)needed, (int)kv_blocks_num_available(kv));
    ai_status st = table_reserve(s, n_blocks, err);
    if (st != AI_OK) return st;
    if (cow_needed) {
        int32_t last = s->blocks[s->n_blocks - 1];
        int32_t b = block_take(kv);
        block_release(kv, last);  /* refcount > 1: stays USED for the other sharers */
        s->blocks[s->n_blocks - 1] = b;
        cow[0] = (kv_copy){ last, b };
        *n_cow = 1;
    }
    while (s->n_blocks < n_blocks) s->blocks[s->n_blocks++] = block_take(kv);
    s->n_tokens += n_new;
    KV_DEBUG_CHECK(kv, err);
    return AI_OK;
}

// --- prefix cache ------------------------------------------------------------------------------

ai_status kv_blocks_admit(kv_blocks *kv, const int32_t *tokens, int32_t n_tokens, int32_t max_compute,
                          int32_t *seq, int32_t *n_cached, int32_t *n_compute, ai_err *err)
{
    if (n_tokens < 1 || max_compute < 1)
        return ai_err_set(err, AI_ERR_INVALID, "kv_blocks: admit of %d tokens with max_compute %d",
                          (int)n_tokens, (int)max_compute);
    int32_t bs = kv->cfg.block_size;
    prefix_link link = PREFIX_LINK_ROOT;
    int32_t m = kv->pc ? prefix_cache_match(kv->pc, tokens, n_tokens, kv->scratch, kv->cfg.num_blocks, &link) : 0;
    int32_t cached = m * bs;
    int32_t chunk = n_tokens - cached < max_compute ? n_tokens - cached : max_compute;
    int32_t fresh = ceil_div(cached + chunk, bs) - m;
    int32_t idle_hits = 0;
    for (int32_t i = 0; i < m; i++) idle_hits += kv->ref[kv->scratch[i]] == 0;
    int32_t available = kv_blocks_num_available(kv) - idle_hits;
    if (fresh > available)
        return ai_err_set(err, AI_ERR_RANGE, "kv_blocks: out of blocks: a prompt of %d tokens (%d cached) needs %d, %d available",
                          (int)n_tokens, (int)cached, (int)fresh, (int)available);
    int32_t i;
    ai_status st = slot_open(kv, &i, err);
    if (st != AI_OK) return st;
    kv_seq *s = &kv->seqs[i];
    st = table_reserve(s, m + fresh, err);
    if (st != AI_OK) {
        slot_close(kv, i);
        return st;
    }
    for (int32_t j = 0; j < m; j++) {
        block_share(kv, kv->scratch[j]);
        s->blocks[j] = kv->scratch[j];
    }
    s->n_blocks = m;
    s->n_committed = m;
    s->link = link;
    for (int32_t j = 0; j < fresh; j++) s->blocks[s->n_blocks++] = block_take(kv);
    s->n_tokens = cached + chunk;
    if (kv->pc) prefix_cache_record(kv->pc, n_tokens, cached);
    *seq = i;
    *n_cached = cached;
    *n_compute = chunk;
    KV_DEBUG_CHECK(kv, err);
    return AI_OK;
}

ai_status kv_blocks_commit(kv_blocks *kv, int32_t seq, const int32_t *tokens, int32_t n_computed, ai_err *err)
{
    kv_seq *s = seq_get(kv, seq);
    if (!s) return ai_err_set(err, AI_ERR_INVALID, "kv_blocks: commit of sequence %d, which is not open", (int)seq);
    if (n_computed < 0 || n_computed > s->n_tokens)
        return ai_err_set(err, AI_ERR_RANGE, "kv_blocks: commit of %d tokens to sequence %d holding %d",
                          (int)n_computed, (int)seq, (int)s->n_tokens);
    if (!kv->pc) return AI_OK;
    int32_t bs = kv->cfg.block_size, full = n_computed / bs;
    for (; s->n_committed < full; s->n_committed++) {
        int32_t j = s->n_committed;
        prefix_cache_insert(kv->pc, &s->link, tokens + (size_t)j * (size_t)bs, s->blocks[j]);
    }
    KV_DEBUG_CHECK(kv, err);
    return AI_OK;
}

// --- queries -----------------------------------------------------------------------------------

const int32_t *kv_blocks_table(const kv_blocks *kv, int32_t seq, int32_t *n_blocks)
{
    const kv_seq *s = seq_get(kv, seq);
    *n_blocks = s ? s->n_blocks : 0;
    return s ? s->blocks : NULL;
}

int32_t kv_blocks_seq_tokens(const kv_blocks *kv, int32_t seq)
{
    const kv_seq *s = seq_get(kv, seq);
    return s ? s->n_tokens : 0;
}

int32_t kv_blocks_refcount(const kv_blocks *kv, int32_t block)
{
    return block >= 0 && block < kv->cfg.num_blocks ? kv->ref[block] : 0;
}

int32_t kv_blocks_block_size(const kv_blocks *kv) { return kv->cfg.block_size; }
int32_t kv_blocks_num_blocks(const kv_blocks *kv) { return kv->cfg.num_blocks; }
int32_t kv_blocks_num_free(const kv_blocks *kv) { return kv->n_free; }
int32_t kv_blocks_num_idle(const kv_blocks *kv) { return kv->pc ? prefix_cache_num_idle(kv->pc) : 0; }
int32_t kv_blocks_num_used(const kv_blocks *kv) { return kv->n_used; }
int32_t kv_blocks_num_seqs(const kv_blocks *kv) { return kv->n_open; }
prefix_cache *kv_blocks_prefix_cache(kv_blocks *kv) { return kv->pc; }

// --- invariants --------------------------------------------------------------------------------

ai_status kv_blocks_check(const kv_blocks *kv, ai_err *err)
{
    int32_t n = kv->cfg.num_blocks, bs = kv->cfg.block_size;
    int32_t *count = calloc((size_t)n, sizeof *count), *seen = malloc((size_t)n * sizeof *seen);
    if (!count || !seen) {
        free(count);
        free(seen);
        return ai_err_set(err, AI_ERR_NOMEM, "kv_blocks_check: out of memory");
    }
    ai_status st = AI_OK;
    for (int32_t b = 0; b < n; b++) seen[b] = -1;
    int32_t n_open = 0;
    for (int32_t i = 0; i < kv->n_slots && st == AI_OK; i++) {
        const kv_seq *s = &kv->seqs[i];
        if (!s->open) continue;
        n_open++;
        if (s->n_blocks != ceil_div(s->n_tokens, bs) || s->n_tokens < 0) {
            st = ai_err_set(err, AI_ERR_RUNTIME, "kv_blocks: invariant 3: sequence %d has %d blocks for %d tokens",
                            (int)i, (int)s->n_blocks, (int)s->n_tokens);
            break;
        }
        if (s->n_committed < 0 || (int64_t)s->n_committed * bs > s->n_tokens) {
            st = ai_err_set(err, AI_ERR_RUNTIME, "kv_blocks: invariant 5: sequence %d committed %d blocks of %d tokens",
                            (int)i, (int)s->n_committed, (int)s->n_tokens);
            break;
        }
        for (int32_t j = 0; j < s->n_blocks; j++) {
            int32_t b = s->blocks[j];
            if (b < 0 || b >= n) {
                st = ai_err_set(err, AI_ERR_RUNTIME, "kv_blocks: sequence %d entry %d holds block %d", (int)i, (int)j, (int)b);
                break;
            }
            if (seen[b] == i) {
                st = ai_err_set(err, AI_ERR_RUNTIME, "kv_blocks: invariant 3: sequence %d holds block %d twice", (int)i, (int)b);
                break;
            }
            seen[b] = i;
            count[b]++;
        }
    }
    if (st == AI_OK && n_open != kv->n_open)
        st = ai_err_set(err, AI_ERR_RUNTIME, "kv_blocks: %d sequences open, count says %d", (int)n_open, (int)kv->n_open);
    /* seen[] is reused as "on the free list" */
    for (int32_t b = 0; b < n && st == AI_OK; b++) seen[b] = 0;
    for (int32_t k = 0; k < kv->n_free && st == AI_OK; k++) {
        int32_t b = kv->free_list[k];
        if (b < 0 || b >= n || seen[b])
            st = ai_err_set(err, AI_ERR_RUNTIME, "kv_blocks: invariant 1: block %d on the free list twice or out of range", (int)b);
        else
            seen[b] = 1;
    }
    int32_t n_used = 0, n_idle = 0;
    for (int32_t b = 0; b < n && st == AI_OK; b++) {
        bool cached = kv->pc && prefix_cache_is_cached(kv->pc, b);
        bool idle = kv->pc && prefix_cache_is_idle(kv->pc, b);
        if (kv->ref[b] != count[b]) {
            st = ai_err_set(err, AI_ERR_RUNTIME, "kv_blocks: invariant 2: block %d refcount %d but %d table entries",
                            (int)b, (int)kv->ref[b], (int)count[b]);
        } else if (kv->ref[b] > 0) {
            n_used++;
            if (seen[b] || idle)
                st = ai_err_set(err, AI_ERR_RUNTIME, "kv_blocks: invariant 1: block %d referenced but %s",
                                (int)b, seen[b] ? "on the free list" : "idle");
        } else if (seen[b]) {
            if (cached) st = ai_err_set(err, AI_ERR_RUNTIME, "kv_blocks: invariant 1: free block %d is cached", (int)b);
        } else if (idle) {
            n_idle++;
        } else {
            st = ai_err_set(err, AI_ERR_RUNTIME, "kv_blocks: invariant 1: block %d leaked (refcount 0, not free, not idle)", (int)b);
        }
    }
    if (st == AI_OK && (n_used != kv->n_used || kv->n_free + n_used + n_idle != n))
        st = ai_err_set(err, AI_ERR_RUNTIME, "kv_blocks: invariant 1: free %d + used %d (count %d) + idle %d != %d",
                        (int)kv->n_free, (int)n_used, (int)kv->n_used, (int)n_idle, (int)n);
    if (st == AI_OK && kv->pc) st = prefix_cache_check(kv->pc, kv->ref, err);
    free(count);
    free(seen);
    return st;
}
