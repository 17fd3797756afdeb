/* kv_blocks.h - the KV block manager: a pool of fixed-size KV blocks and per-sequence block tables.
 *
 * Pure bookkeeping, no tensors: block b stands for the KV of block_size token positions at slot b
 * of the pool the executor owns. A sequence's block table lists, in position order, the blocks
 * holding its KV: position p lives in table[p / block_size] at offset p % block_size.
 *
 * Blocks are shared by reference count: a fork (n > 1 samples of one prompt) shares all of its
 * parent's blocks, and a prefix-cache hit shares another request's full prompt blocks. Before a
 * sequence writes into a shared, partly filled last block it gets a private copy (copy-on-write):
 * kv_blocks_append returns the (src, dst) pair the executor must copy before the forward.
 *
 * Sequences here are small integer handles (slots); the scheduler maps its requests onto them.
 * Every mutating call is all-or-nothing: when it fails nothing has changed. In builds without
 * NDEBUG every mutating call ends with kv_blocks_check (O(blocks + table entries)); a broken
 * invariant is returned as AI_ERR_RUNTIME. Invariants: top of src/engine/kv_blocks.c.
 */
#ifndef AIINFRA_KV_BLOCKS_H
#define AIINFRA_KV_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>

#include "aiinfra/prefix_cache.h"
#include "aiinfra/status.h"

typedef struct kv_blocks kv_blocks;

typedef struct kv_blocks_config {
    int32_t num_blocks;        /* blocks in the pool, [1, 2^28] */
    int32_t block_size;        /* tokens per block, [1, 4096] (16 is usual) */
    bool enable_prefix_cache;  /* keep full computed blocks for reuse (prefix_cache.h) */
    bool skip_debug_checks;    /* debug builds: do not run kv_blocks_check after every call
                                  (benchmarks; the check is O(pool) per call) */
} kv_blocks_config;

/* One copy the executor performs before the step's forward: KV of block src -> block dst.
 * Perform a step's copies in order (a block freed in a step may be reused by a later copy). */
typedef struct kv_copy {
    int32_t src, dst;
} kv_copy;

ai_status kv_blocks_init(kv_blocks **out, const kv_blocks_config *cfg, ai_err *err);
void kv_blocks_free(kv_blocks *kv);

// --- sequences --------------------------------------------------------------------------------

/* A new sequence with no tokens and no blocks. */
ai_status kv_blocks_seq_open(kv_blocks *kv, int32_t *seq, ai_err *err);
/* Releases every block of seq (last block first, so a prompt's tail is evicted before its head)
 * and the handle. Full cached blocks stay in the prefix cache, idle. */
ai_status kv_blocks_seq_close(kv_blocks *kv, int32_t seq, ai_err *err);
/* A new sequence sharing all of parent's blocks (refcount + 1 each) and its token count. */
ai_status kv_blocks_fork(kv_blocks *kv, int32_t parent, int32_t *child, ai_err *err);

/* Room for n_new more tokens of seq: copy-on-write of a shared partly filled last block, then
 * fresh blocks. *n_cow (0 or 1) copies are written to cow (room for 1). Out of blocks ->
 * AI_ERR_RANGE with nothing changed. Blocks come from the free list first, then by evicting the
 * least recently used idle cached block. */
ai_status kv_blocks_append(kv_blocks *kv, int32_t seq, int32_t n_new, kv_copy *cow, int32_t *n_cow,
                           ai_err *err);
/* Blocks kv_blocks_append(seq, n_new) would take (copy-on-write included). */
int32_t kv_blocks_needed(const kv_blocks *kv, int32_t seq, int32_t n_new);

/* Opens a sequence for a prompt tokens[0, n_tokens): adopts the longest cached prefix of full
 * blocks (never the whole prompt: at least the last token is left), then makes room for the next
 * min(n_tokens - cached, max_compute) tokens, written to *n_compute; *n_cached = cached tokens.
 * Out of blocks -> AI_ERR_RANGE with nothing changed (not even the LRU order). max_compute >= 1. */
ai_status kv_blocks_admit(kv_blocks *kv, const int32_t *tokens, int32_t n_tokens, int32_t max_compute,
                          int32_t *seq, int32_t *n_cached, int32_t *n_compute, ai_err *err);
/* The KV of tokens[0, n_computed) of seq is computed: enters its full blocks not yet entered
 * into the prefix cache (no-op without one). tokens are the sequence's tokens. */
ai_status kv_blocks_commit(kv_blocks *kv, int32_t seq, const int32_t *tokens, int32_t n_computed,
                           ai_err *err);

// --- queries -----------------------------------------------------------------------------------

const int32_t *kv_blocks_table(const kv_blocks *kv, int32_t seq, int32_t *n_blocks);
int32_t kv_blocks_seq_tokens(const kv_blocks *kv, int32_t seq);  /* token slots held */
int32_t kv_blocks_refcount(const kv_blocks *kv, int32_t block);
int32_t kv_blocks_block_size(const kv_blocks *kv);
int32_t kv_blocks_num_blocks(const kv_blocks *kv);
int32_t kv_blocks_num_free(const kv_blocks *kv);       /* on the free list */
int32_t kv_blocks_num_idle(const kv_blocks *kv);       /* cached, unreferenced, evictable */
int32_t kv_blocks_num_used(const kv_blocks *kv);       /* referenced by some table */
int32_t kv_blocks_num_available(const kv_blocks *kv);  /* free + idle */
int32_t kv_blocks_num_seqs(const kv_blocks *kv);       /* open sequences */
prefix_cache *kv_blocks_prefix_cache(kv_blocks *kv);   /* NULL without prefix caching */

/* Verifies every invariant of kv_blocks.c (and prefix_cache_check). AI_OK or AI_ERR_RUNTIME
 * naming the invariant, the block and the sequence. */
ai_status kv_blocks_check(const kv_blocks *kv, ai_err *err);

#endif
