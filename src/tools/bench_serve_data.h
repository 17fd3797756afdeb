/* bench_serve_data.h - prompts and arrival times for `aiinfra bench serve`.
 *
 *   random:   n prompts of input_len words drawn (seeded) from a fixed list of common English words;
 *             every request asks for exactly output_len tokens (sent with ignore_eos).
 *   sharegpt: a JSON file [{"conversations": [{"from": "human", "value": P}, {"from": "gpt",
 *             "value": A}, ...]}, ...]; prompt = the first human turn, expected output length =
 *             ceil(chars(A) / 4) tokens (the first gpt turn after it) unless output_len > 0.
 *             Entries without both turns are skipped; the rest are shuffled (seeded) and the first
 *             n taken, cycling when the file holds fewer than n.
 */
#ifndef AIINFRA_BENCH_SERVE_DATA_H
#define AIINFRA_BENCH_SERVE_DATA_H

#include <stdint.h>

#include "aiinfra/status.h"

typedef struct bs_dataset {
    int n;              /* prompts */
    char **prompt;      /* (n) owned, NUL-terminated */
    int *output_len;    /* (n) max_tokens to request */
    int *prompt_est;    /* (n) prompt tokens estimated as ceil(chars / 4) (when usage is absent) */
} bs_dataset;

ai_status bs_dataset_random(bs_dataset *d, int n, int input_len, int output_len, uint64_t seed, ai_err *err);
ai_status bs_dataset_sharegpt(bs_dataset *d, const char *path, int n, int output_len, uint64_t seed, ai_err *err);
void bs_dataset_free(bs_dataset *d);

/* Arrival offsets in seconds (n, ascending, first at 0): gaps drawn from an exponential law with mean
 * 1/rate (a Poisson process); rate <= 0 or infinite puts every arrival at 0. */
void bs_arrivals(double *t, int n, double rate, uint64_t seed);

#endif
