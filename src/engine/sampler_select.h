/* sampler_select.h - internal: order candidates without sorting the vocabulary.
 *
 * The order is total: a before b iff a.logit > b.logit, or equal logits and
 * a.id < b.id. Every filter's kept set is a prefix of this order, so ties
 * are resolved the same way everywhere (the lower id wins). */
#ifndef AIINFRA_SAMPLER_SELECT_H
#define AIINFRA_SAMPLER_SELECT_H

#include <stddef.h>

#include "aiinfra/sampler.h"

/* 1 if a comes before b in the total order. */
static inline int cand_before(sampler_cand a, sampler_cand b)
{
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

/* Rearranges a[0..n) so that a[0..c) are the first c of the order (in any
 * order) and a[c..n) the rest. Expected O(n); 0 < c <= n. */
void select_partition(sampler_cand *a, size_t n, size_t c);

/* Restores the heap below i in h[0..n), a heap whose root comes last in the
 * order (the worst entry kept), used to keep the best few of a stream. */
void select_heap_sift_down(sampler_cand *h, size_t n, size_t i);

/* Sorts a[0..n) into the total order. */
void select_sort(sampler_cand *a, size_t n);

#endif
