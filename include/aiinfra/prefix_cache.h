/* prefix_cache.h - which KV blocks hold which token prefixes, and which may be evicted.
 *
 * A block is cached once it is FULL (block_size tokens) and its KV has been computed. Its key is
 * a chained hash h_i = XXH3_64(h_{i-1} || tokens of block i), h_{-1} = 0, so one key names the
 * whole prefix up to and including block i. A lookup never trusts the hash alone: each entry also
 * stores its tokens and the exact parent entry (block id + generation), so a match is proved by
 * induction and a hash collision can only cost a miss, never a wrong block (prefix_cache.c).
 *
 * The cache owns no references: kv_blocks counts them. Cached blocks whose reference count fell
 * to 0 are "idle": they sit in an LRU list and are evicted (O(1)) only when the free list of
 * kv_blocks is empty. This module is the index and the LRU; kv_blocks (kv_blocks.h) drives it.
 */
#ifndef AIINFRA_PREFIX_CACHE_H
#define AIINFRA_PREFIX_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "aiinfra/status.h"

typedef struct prefix_cache prefix_cache;

/* Where a chain stands after its last matched or committed block: the parent of the next block.
 * The root (no block yet) is {block -1, gen 0, hash 0}. */
typedef struct prefix_link {
    int32_t block;   /* cached block holding the previous full block, -1 at the root */
    uint64_t gen;    /* its generation when linked (bumped on every eviction) */
    uint64_t hash;   /* chained hash up to the previous block */
} prefix_link;

#define PREFIX_LINK_ROOT ((prefix_link){ -1, 0, 0 })

/* Hash of one block given its parent's hash; tokens has block_size entries. Test hook type. */
typedef uint64_t (*prefix_hash_fn)(uint64_t parent, const int32_t *tokens, int32_t block_size);

typedef struct prefix_cache_stats {
    uint64_t queries;    /* prompt tokens looked up (vLLM's prefix_cache_queries) */
    uint64_t hits;       /* of those, tokens found cached (prefix_cache_hits) */
    uint64_t inserts;    /* blocks entered */
    uint64_t evictions;  /* idle blocks evicted for reuse */
} prefix_cache_stats;

/* num_blocks in [1, 2^28], block_size in [1, 4096]. */
ai_status prefix_cache_init(prefix_cache **out, int32_t num_blocks, int32_t block_size, ai_err *err);
void prefix_cache_free(prefix_cache *pc);

/* Test hook: replace XXH3 by fn (NULL restores XXH3), e.g. a constant to force collisions.
 * Only while the cache is empty (keys already stored would not match their new hash). */
ai_status prefix_cache_set_hash_fn(prefix_cache *pc, prefix_hash_fn fn, ai_err *err);
uint64_t prefix_cache_hash(const prefix_cache *pc, uint64_t parent, const int32_t *tokens);
/* The default hash: XXH3_64 over the 8 bytes of parent then the token bytes. */
uint64_t prefix_cache_xxh3(uint64_t parent, const int32_t *tokens, int32_t block_size);

/* Longest run of cached full blocks that is a prefix of tokens[0, n_tokens), capped at
 * (n_tokens - 1) / block_size blocks so the last token is always left to compute, and at
 * max_blocks. Writes the block ids to blocks_out and the link after the last one to *link; returns
 * the count. Changes nothing: a caller that acts on the match records it with prefix_cache_record. */
int32_t prefix_cache_match(const prefix_cache *pc, const int32_t *tokens, int32_t n_tokens,
                           int32_t *blocks_out, int32_t max_blocks, prefix_link *link);
/* Statistics of one admitted prompt: queries += n_tokens, hits += n_hit_tokens. */
void prefix_cache_record(prefix_cache *pc, int32_t n_tokens, int32_t n_hit_tokens);

/* Enters `block`, whose KV holds `tokens` (block_size of them) after the prefix named by *link.
 * If an equal entry (same hash, parent and tokens) exists, nothing is entered and that entry's
 * block is returned; else `block` is entered (if not cached already) and returned. Either way
 * *link moves past this block. `block` must not be idle. */
int32_t prefix_cache_insert(prefix_cache *pc, prefix_link *link, const int32_t *tokens, int32_t block);

bool prefix_cache_is_cached(const prefix_cache *pc, int32_t block);
bool prefix_cache_is_idle(const prefix_cache *pc, int32_t block);
/* Reference count of a cached block fell to 0: it becomes the most recently used idle block. */
void prefix_cache_idle_push(prefix_cache *pc, int32_t block);
/* An idle block is referenced again (a prefix hit): it leaves the LRU list. */
void prefix_cache_idle_remove(prefix_cache *pc, int32_t block);
/* Removes the least recently used idle block from the cache and returns it (-1 if none). */
int32_t prefix_cache_evict(prefix_cache *pc);
int32_t prefix_cache_num_idle(const prefix_cache *pc);
int32_t prefix_cache_num_cached(const prefix_cache *pc);
/* The idle blocks from least to most recently used (for tests); returns the count written. */
int32_t prefix_cache_idle_order(const prefix_cache *pc, int32_t *out, int32_t cap);
prefix_cache_stats prefix_cache_get_stats(const prefix_cache *pc);

/* Verifies the index and the LRU list: every cached block is reachable under its key exactly
 * once, idle <=> (cached and refcount[b] == 0) when refcount is not NULL, list links consistent,
 * counts exact. AI_OK or AI_ERR_RUNTIME naming the broken invariant. */
ai_status prefix_cache_check(const prefix_cache *pc, const int32_t *refcount, ai_err *err);

#endif
