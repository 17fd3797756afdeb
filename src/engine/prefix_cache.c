/* prefix_cache.c - index of full KV blocks by chained hash, and the LRU list of idle ones.
 *
 * Why a chained hash and not a radix tree (SGLang's RadixAttention uses a tree):
 *   - Sharing happens at block granularity anyway (a block is the unit of KV memory), so a tree
 *     whose edges are token runs would have to be cut at block boundaries: it degenerates into a
 *     tree of blocks, which is exactly what the chained hash names: h_i identifies the path
 *     root -> block i without storing the tree's edges.
 *   - A lookup is one hash-table probe per block, a flat array per field, no pointer-chasing
 *     through child maps; insert and evict are O(1) with no tree rebalancing or node splitting.
 *   - Eviction of any idle block is local: no parent/child pointers to repair. A child whose
 *     parent was evicted simply becomes unreachable (see 3 below) and ages out of the LRU.
 *   The cost: no "longest common prefix inside a block" (partial blocks are never shared) and a
 *   lookup cannot enumerate children; neither is needed by the scheduler.
 *
 * Invariants (checked by prefix_cache_check):
 *   1. A block is cached iff it is in exactly one bucket chain, the one of hash[b]; n_cached
 *      counts them.
 *   2. A block is idle iff it is in the LRU list; idle implies cached; with kv_blocks' refcounts,
 *      idle <=> cached and refcount == 0. n_idle counts them. Head = least recently used.
 *   3. An entry stores (hash, parent block, parent generation, tokens). gen[b] is bumped each time
 *      b leaves the cache, so a link (b, g) is live iff b is cached and gen[b] == g. A match of
 *      block i requires equal hash, equal tokens AND parent == the live entry matched for block
 *      i-1: by induction the whole prefix is equal token for token, whatever the hash does. A
 *      collision costs at most a miss (both entries coexist in one chain), never a wrong block.
 */
#include "aiinfra/prefix_cache.h"

#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY  /* XXH3_state_t on the stack: streaming without malloc */
#include <xxhash.h>

#define PC_MAX_BLOCKS (1 << 28)
#define PC_MAX_BLOCK_SIZE 4096

struct prefix_cache {
    int32_t num_blocks, block_size;
    prefix_hash_fn hash_fn;     /* NULL = XXH3 */
    uint32_t bucket_mask;       /* n_buckets - 1, n_buckets a power of two >= 2 * num_blocks */
    int32_t *bucket;            /* (n_buckets) first block of each chain, -1 = empty */
    /* per block (num_blocks) */
    uint64_t *hash;             /* chained hash of the prefix ending with this block */
    int32_t *parent;            /* parent block, -1 at the root */
    uint64_t *parent_gen;       /* parent's generation when entered */
    uint64_t *gen;              /* bumped when the block leaves the cache */
    int32_t *hnext;             /* next block in the bucket chain, -1 = end */
    int32_t *prev, *next;       /* LRU links, -1 = none */
    uint8_t *cached, *idle;
    int32_t *tokens;            /* (num_blocks, block_size) the tokens of each cached block */
    int32_t lru_head, lru_tail; /* least / most recently used idle block */
    int32_t n_cached, n_idle;
    prefix_cache_stats stats;
};

ai_status prefix_cache_init(prefix_cache **out, int32_t num_blocks, int32_t block_size, ai_err *err)
{
    *out = NULL;
    if (num_blocks < 1 || num_blocks > PC_MAX_BLOCKS)
        return ai_err_set(err, AI_ERR_RANGE, "prefix_cache: num_blocks %d not in [1, %d]",
                          (int)num_blocks, PC_MAX_BLOCKS);
    if (block_size < 1 || block_size > PC_MAX_BLOCK_SIZE)
        return ai_err_set(err, AI_ERR_RANGE, "prefix_cache: block_size %d not in [1, %d]",
                          (int)block_size, PC_MAX_BLOCK_SIZE);
    prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc) return ai_err_set(err, AI_ERR_NOMEM, "prefix_cache: out of memory");
    size_t n = (size_t)num_blocks, nb = 16;
    while (nb < 2 * n) nb *= 2;
    pc->num_blocks = num_blocks;
    pc->block_size = block_size;
    pc->bucket_mask = (uint32_t)(nb - 1);
    pc->bucket = malloc(nb * sizeof *pc->bucket);
    pc->hash = calloc(n, sizeof *pc->hash);
    pc->parent = calloc(n, sizeof *pc->parent);
    pc->parent_gen = calloc(n, sizeof *pc->parent_gen);
    pc->gen = calloc(n, sizeof *pc->gen);
    pc->hnext = calloc(n, sizeof *pc->hnext);
    pc->prev = calloc(n, sizeof *pc->prev);
    pc->next = calloc(n, sizeof *pc->next);
    pc->cached = calloc(n, 1);
    pc->idle = calloc(n, 1);
    pc->tokens = calloc(n * (size_t)block_size, sizeof *pc->tokens);
    if (!pc->bucket || !pc->hash || !pc->parent || !pc->parent_gen || !pc->gen || !pc->hnext ||
        !pc->prev || !pc->next || !pc->cached || !pc->idle || !pc->tokens) {
        prefix_cache_free(pc);
        return ai_err_set(err, AI_ERR_NOMEM, "prefix_cache: out of memory for %d blocks of %d tokens",
                          (int)num_blocks, (int)block_size);
    }
    for (size_t i = 0; i < nb; i++) pc->bucket[i] = -1;
    for (size_t i = 0; i < n; i++) pc->hnext[i] = pc->prev[i] = pc->next[i] = -1;
    pc->lru_head = pc->lru_tail = -1;
    *out = pc;
    return AI_OK;
}

void prefix_cache_free(prefix_cache *pc)
{
    if (!pc) return;
    free(pc->bucket);
    free(pc->hash);
    free(pc->parent);
    free(pc->parent_gen);
    free(pc->gen);
    free(pc->hnext);
    free(pc->prev);
    free(pc->next);
    free(pc->cached);
    free(pc->idle);
    free(pc->tokens);
    free(pc);
}

// --- hashing -----------------------------------------------------------------------------------

uint64_t prefix_cache_xxh3(uint64_t parent, const int32_t *tokens, int32_t block_size)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, &parent, sizeof parent);
    XXH3_64bits_update(&st, tokens, (size_t)block_size * sizeof *tokens);
    return XXH3_64bits_digest(&st);
}

ai_status prefix_cache_set_hash_fn(prefix_cache *pc, prefix_hash_fn fn, ai_err *err)
{
    if (pc->n_cached)
        return ai_err_set(err, AI_ERR_INVALID, "prefix_cache: hash function changed with %d blocks cached",
                          (int)pc->n_cached);
    pc->hash_fn = fn;
    return AI_OK;
}

uint64_t prefix_cache_hash(const prefix_cache *pc, uint64_t parent, const int32_t *tokens)
{
    return pc->hash_fn ? pc->hash_fn(parent, tokens, pc->block_size)
                       : prefix_cache_xxh3(parent, tokens, pc->block_size);
}

static uint32_t bucket_of(const prefix_cache *pc, uint64_t h)
{
    return (uint32_t)(h ^ (h >> 29) ^ (h >> 47)) & pc->bucket_mask;
}

/* The cached entry equal to (h, link, tokens), or -1 (invariant 3). */
static int32_t find_entry(const prefix_cache *pc, uint64_t h, const prefix_link *link, const int32_t *tokens)
{
    size_t bytes = (size_t)pc->block_size * sizeof *tokens;
    for (int32_t b = pc->bucket[bucket_of(pc, h)]; b >= 0; b = pc->hnext[b]) {
        if (pc->hash[b] == h && pc->parent[b] == link->block && pc->parent_gen[b] == link->gen &&
            memcmp(pc->tokens + (size_t)b * (size_t)pc->block_size, tokens, bytes) == 0)
            return b;
    }
    return -1;
}

// --- lookup and insert -------------------------------------------------------------------------

int32_t prefix_cache_match(const prefix_cache *pc, const int32_t *tokens, int32_t n_tokens,
                           int32_t *blocks_out, int32_t max_blocks, prefix_link *link)
{
    *link = PREFIX_LINK_ROOT;
    if (n_tokens < 1) return 0;
    int32_t cap = (n_tokens - 1) / pc->block_size, n = 0;
    if (cap > max_blocks) cap = max_blocks;
    while (n < cap) {
        const int32_t *t = tokens + (size_t)n * (size_t)pc->block_size;
        uint64_t h = prefix_cache_hash(pc, link->hash, t);
        int32_t b = find_entry(pc, h, link, t);
        if (b < 0) break;
        blocks_out[n++] = b;
        *link = (prefix_link){ b, pc->gen[b], h };
    }
    return n;
}

void prefix_cache_record(prefix_cache *pc, int32_t n_tokens, int32_t n_hit_tokens)
{
    pc->stats.queries += (uint64_t)(n_tokens > 0 ? n_tokens : 0);
    pc->stats.hits += (uint64_t)(n_hit_tokens > 0 ? n_hit_tokens : 0);
}

int32_t prefix_cache_insert(prefix_cache *pc, prefix_link *link, const int32_t *tokens, int32_t block)
{
    uint64_t h = prefix_cache_hash(pc, link->hash, tokens);
    int32_t e = find_entry(pc, h, link, tokens);
    if (e < 0 && !pc->cached[block]) {
        e = block;
        size_t bs = (size_t)pc->block_size;
        memcpy(pc->tokens + (size_t)e * bs, tokens, bs * sizeof *tokens);
        pc->hash[e] = h;
        pc->parent[e] = link->block;
        pc->parent_gen[e] = link->gen;
        uint32_t k = bucket_of(pc, h);
        pc->hnext[e] = pc->bucket[k];
        pc->bucket[k] = e;
        pc->cached[e] = 1;
        pc->n_cached++;
        pc->stats.inserts++;
    } else if (e < 0) {
        e = block;  /* already cached under another key: a caller bug, kept harmless */
    }
    *link = (prefix_link){ e, pc->gen[e], h };
    return e;
}

bool prefix_cache_is_cached(const prefix_cache *pc, int32_t block) { return pc->cached[block] != 0; }
bool prefix_cache_is_idle(const prefix_cache *pc, int32_t block) { return pc->idle[block] != 0; }
int32_t prefix_cache_num_idle(const prefix_cache *pc) { return pc->n_idle; }
int32_t prefix_cache_num_cached(const prefix_cache *pc) { return pc->n_cached; }
prefix_cache_stats prefix_cache_get_stats(const prefix_cache *pc) { return pc->stats; }

// --- LRU of idle blocks ------------------------------------------------------------------------

void prefix_cache_idle_push(prefix_cache *pc, int32_t b)
{
    pc->prev[b] = pc->lru_tail;
    pc->next[b] = -1;
    if (pc->lru_tail >= 0) pc->next[pc->lru_tail] = b;
    else pc->lru_head = b;
    pc->lru_tail = b;
    pc->idle[b] = 1;
    pc->n_idle++;
}

void prefix_cache_idle_remove(prefix_cache *pc, int32_t b)
{
    if (pc->prev[b] >= 0) pc->next[pc->prev[b]] = pc->next[b];
    else pc->lru_head = pc->next[b];
    if (pc->next[b] >= 0) pc->prev[pc->next[b]] = pc->prev[b];
    else pc->lru_tail = pc->prev[b];
    pc->prev[b] = pc->next[b] = -1;
    pc->idle[b] = 0;
    pc->n_idle--;
}

int32_t prefix_cache_evict(prefix_cache *pc)
{
    int32_t b = pc->lru_head;
    if (b < 0) return -1;
    prefix_cache_idle_remove(pc, b);
    int32_t *p = &pc->bucket[bucket_of(pc, pc->hash[b])];
    while (*p != b) p = &pc->hnext[*p];  /* b is in this chain (invariant 1) */
    *p = pc->hnext[b];
    pc->hnext[b] = -1;
    pc->cached[b] = 0;
    pc->gen[b]++;
    pc->n_cached--;
    pc->stats.evictions++;
    return b;
}

int32_t prefix_cache_idle_order(const prefix_cache *pc, int32_t *out, int32_t cap)
{
    int32_t n = 0;
    for (int32_t b = pc->lru_head; b >= 0 && n < cap; b = pc->next[b]) out[n++] = b;
    return n;
}

// --- invariants --------------------------------------------------------------------------------

ai_status prefix_cache_check(const prefix_cache *pc, const int32_t *refcount, ai_err *err)
{
    int32_t n_chain = 0, n_cached = 0, n_idle = 0;
    for (uint32_t k = 0; k <= pc->bucket_mask; k++) {
        for (int32_t b = pc->bucket[k]; b >= 0; b = pc->hnext[b]) {
            if (b >= pc->num_blocks)
                return ai_err_set(err, AI_ERR_RUNTIME, "prefix_cache: invariant 1: bad block %d in a chain", (int)b);
            if (!pc->cached[b] || bucket_of(pc, pc->hash[b]) != k)
                return ai_err_set(err, AI_ERR_RUNTIME, "prefix_cache: invariant 1: block %d in the wrong chain", (int)b);
            if (++n_chain > pc->n_cached)
                return ai_err_set(err, AI_ERR_RUNTIME, "prefix_cache: invariant 1: chains hold more than %d blocks",
                                  (int)pc->n_cached);
        }
    }
    for (int32_t b = 0; b < pc->num_blocks; b++) {
        n_cached += pc->cached[b] != 0;
        n_idle += pc->idle[b] != 0;
        if (pc->idle[b] && !pc->cached[b])
            return ai_err_set(err, AI_ERR_RUNTIME, "prefix_cache: invariant 2: block %d idle but not cached", (int)b);
        if (refcount && pc->idle[b] != (pc->cached[b] && refcount[b] == 0))
            return ai_err_set(err, AI_ERR_RUNTIME,
                              "prefix_cache: invariant 2: block %d cached=%d idle=%d refcount=%d",
                              (int)b, pc->cached[b], pc->idle[b], (int)refcount[b]);
    }
    if (n_cached != pc->n_cached || n_chain != pc->n_cached)
        return ai_err_set(err, AI_ERR_RUNTIME, "prefix_cache: invariant 1: %d flagged, %d in chains, count %d",
                          (int)n_cached, (int)n_chain, (int)pc->n_cached);
    if (n_idle != pc->n_idle)
        return ai_err_set(err, AI_ERR_RUNTIME, "prefix_cache: invariant 2: %d flagged idle, count %d",
                          (int)n_idle, (int)pc->n_idle);
    int32_t walked = 0, prev = -1;
    for (int32_t b = pc->lru_head; b >= 0; b = pc->next[b]) {
        if (!pc->idle[b] || pc->prev[b] != prev || ++walked > pc->n_idle)
            return ai_err_set(err, AI_ERR_RUNTIME, "prefix_cache: invariant 2: LRU list broken at block %d", (int)b);
        prev = b;
    }
    if (walked != pc->n_idle || pc->lru_tail != prev)
        return ai_err_set(err, AI_ERR_RUNTIME, "prefix_cache: invariant 2: LRU list holds %d of %d idle blocks",
                          (int)walked, (int)pc->n_idle);
    return AI_OK;
}
