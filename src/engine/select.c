/* select.c - partial selection and sorting of sampler candidates.
 *
 * Why: top-k / top-p / min-p only ever keep a prefix of the candidates in the
 * order (logit desc, id asc), and that prefix is usually tiny (tens of tokens
 * out of 150k). Quickselect moves the best c to the front in expected O(n);
 * only those c are then sorted. A caller that needs more (top-p walking down
 * a flat distribution) selects the next chunk from the remainder.
 *
 * Two ways to select, chosen by size: for a small c (<= n/16, the usual top-k
 * of 20-100 out of 150k) a size-c heap whose root is the worst kept entry: on
 * random data almost every element loses one well-predicted comparison with
 * the root, about 10x faster than quickselect's unpredictable partitions. For
 * a large c, quickselect (expected O(n)).
 *
 * Invariants:
 *   1. the order is total (ids differ), so the result does not depend on the
 *      input permutation: the same set always comes out;
 *   2. quickselect recursion is bounded: past 2*log2(n)+8 rounds it sorts the
 *      remaining range instead (worst case O(n log n), never quadratic).
 */
#include "sampler_select.h"

#include <stdlib.h>

static int cand_cmp(const void *pa, const void *pb)
{
    sampler_cand a = *(const sampler_cand *)pa, b = *(const sampler_cand *)pb;
    if (cand_before(a, b)) return -1;
    if (cand_before(b, a)) return 1;
    return 0;
}

void select_sort(sampler_cand *a, size_t n)
{
    if (n > 1) qsort(a, n, sizeof *a, cand_cmp);
}

static void swap(sampler_cand *a, size_t i, size_t j)
{
    sampler_cand t = a[i];
    a[i] = a[j];
    a[j] = t;
}

/* Index of the median (in the order) of a[i], a[j], a[k]. */
static size_t median3(const sampler_cand *a, size_t i, size_t j, size_t k)
{
    if (cand_before(a[i], a[j])) {
        if (cand_before(a[j], a[k])) return j;
        return cand_before(a[i], a[k]) ? k : i;
    }
    if (cand_before(a[i], a[k])) return i;
    return cand_before(a[j], a[k]) ? k : j;
}

void select_heap_sift_down(sampler_cand *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, worst = i;
        if (l < n && cand_before(h[worst], h[l])) worst = l;
        if (r < n && cand_before(h[worst], h[r])) worst = r;
        if (worst == i) return;
        swap(h, i, worst);
        i = worst;
    }
}

/* a[0..c) becomes a heap of the best c; displaced entries go to a[c..n). */
static void heap_select(sampler_cand *a, size_t n, size_t c)
{
    for (size_t i = c / 2; i-- > 0;) select_heap_sift_down(a, c, i);
    for (size_t i = c; i < n; i++)
        if (cand_before(a[i], a[0])) {
            swap(a, 0, i);
            select_heap_sift_down(a, c, 0);
        }
}

void select_partition(sampler_cand *a, size_t n, size_t c)
{
    if (c == 0 || c >= n) return;
    if (c <= n / 16) {
        heap_select(a, n, c);
        return;
    }
    size_t lo = 0, hi = n;  /* the boundary c lies in [lo, hi) */
    int budget = 8;
    for (size_t m = n; m > 1; m >>= 1) budget += 2;
    while (hi - lo > 16) {
        if (budget-- == 0) {  /* invariant 2 */
            select_sort(a + lo, hi - lo);
            return;
        }
        size_t mid = lo + (hi - lo) / 2;
        size_t pv = median3(a, lo, mid, hi - 1);
        swap(a, pv, hi - 1);
        sampler_cand pivot = a[hi - 1];
        size_t store = lo;
        for (size_t i = lo; i < hi - 1; i++)
            if (cand_before(a[i], pivot)) swap(a, i, store++);
        swap(a, store, hi - 1);  /* a[store] = pivot, all before it come first */
        if (store == c || store + 1 == c) return;
        if (store > c) hi = store;
        else lo = store + 1;
    }
    select_sort(a + lo, hi - lo);
}
