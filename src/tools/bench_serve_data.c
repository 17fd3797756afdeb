/* bench_serve_data.c - datasets and Poisson arrivals for `aiinfra bench serve` (bench_serve_data.h).
 *
 * Randomness is a splitmix64 stream (small, seedable, no global state); each use derives its own
 * stream from the seed so the prompts do not change when only the request rate does.
 */
#include "tools/bench_serve_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "aiinfra/buf.h"
#include "aiinfra/fileio.h"

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) /* [0, 1) */
{
    return (double)(splitmix64(s) >> 11) * 0x1.0p-53;
}

static const char *const words[] = {
    "time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world", "school",
    "state", "family", "student", "group", "country", "problem", "hand", "part", "place", "case", "week",
    "company", "system", "program", "question", "work", "government", "number", "night", "point", "home",
    "water", "room", "mother", "area", "money", "story", "fact", "month", "lot", "right", "study", "book",
    "eye", "job", "word", "business", "issue", "side", "kind", "head", "house", "service", "friend",
    "father", "power", "hour", "game", "line", "end", "member", "law",
};

static ai_status alloc_arrays(bs_dataset *d, int n, ai_err *err)
{
    memset(d, 0, sizeof *d);
    d->prompt = calloc((size_t)n, sizeof *d->prompt);
    d->output_len = calloc((size_t)n, sizeof *d->output_len);
    d->prompt_est = calloc((size_t)n, sizeof *d->prompt_est);
    if (!d->prompt || !d->output_len || !d->prompt_est) {
        bs_dataset_free(d);
        return ai_err_set(err, AI_ERR_NOMEM, "dataset: out of memory for %d prompts", n);
    }
    d->n = n;
    return AI_OK;
}

static int est_tokens(size_t chars)
{
    size_t t = (chars + 3) / 4;
    return t > 1 << 30 ? 1 << 30 : (int)t;
}

ai_status bs_dataset_random(bs_dataset *d, int n, int input_len, int output_len, uint64_t seed, ai_err *err)
{
    memset(d, 0, sizeof *d);
    if ((double)n * input_len > (double)(1 << 28)) /* ~1.5 GiB of prompt text */
        return ai_err_set(err, AI_ERR_RANGE, "random dataset: %d prompts x %d words is more than 2^28 words", n,
                          input_len);
    ai_status st = alloc_arrays(d, n, err);
    if (st) return st;
    uint64_t rng = seed ^ 0x70726f6d707473ull; /* "prompts" */
    const size_t n_words = sizeof words / sizeof words[0];
    for (int i = 0; i < n; i++) {
        buf b;
        buf_init(&b);
        for (int w = 0; w < input_len; w++) {
            if (w) buf_putc(&b, ' ');
            buf_puts(&b, words[splitmix64(&rng) % n_words]);
        }
        if (b.oom || !(d->prompt[i] = b.len ? buf_detach(&b) : strdup(""))) {
            buf_free(&b);
            bs_dataset_free(d);
            return ai_err_set(err, AI_ERR_NOMEM, "random dataset: out of memory at prompt %d", i);
        }
        d->output_len[i] = output_len;
        d->prompt_est[i] = input_len;
    }
    return AI_OK;
}

/* First human turn and the first gpt turn after it, or false. */
static bool conversation_pair(const cJSON *entry, const char **prompt, const char **answer)
{
    const cJSON *conv = cJSON_GetObjectItemCaseSensitive(entry, "conversations");
    const cJSON *t;
    *prompt = *answer = NULL;
    cJSON_ArrayForEach(t, conv)
    {
        const cJSON *from = cJSON_GetObjectItemCaseSensitive(t, "from");
        const cJSON *value = cJSON_GetObjectItemCaseSensitive(t, "value");
        if (!cJSON_IsString(from) || !cJSON_IsString(value)) continue;
        if (!*prompt && !strcmp(from->valuestring, "human")) *prompt = value->valuestring;
        else if (*prompt && !strcmp(from->valuestring, "gpt")) {
            *answer = value->valuestring;
            break;
        }
    }
    return *prompt && *answer && **prompt && **answer;
}

ai_status bs_dataset_sharegpt(bs_dataset *d, const char *path, int n, int output_len, uint64_t seed, ai_err *err)
{
    char *text = NULL;
    size_t len = 0;
    ai_status st = file_read_all(path, (size_t)4 << 30, &text, &len, err);
    if (st) return ai_err_prefix(err, "dataset %s", path);
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        return ai_err_set(err, AI_ERR_FORMAT, "dataset %s: %s", path,
                          root ? "top level is not a JSON array" : "not valid JSON");
    }
    int n_entries = cJSON_GetArraySize(root), n_ok = 0;
    const cJSON **ok = calloc((size_t)(n_entries ? n_entries : 1), sizeof *ok);
    if (!ok) {
        cJSON_Delete(root);
        return ai_err_set(err, AI_ERR_NOMEM, "dataset %s: out of memory", path);
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, root)
    {
        const char *p, *a;
        if (conversation_pair(e, &p, &a)) ok[n_ok++] = e;
    }
    if (n_ok == 0) {
        free(ok);
        cJSON_Delete(root);
        return ai_err_set(err, AI_ERR_FORMAT,
                          "dataset %s: no entry with a \"human\" turn followed by a \"gpt\" turn in \"conversations\"",
                          path);
    }
    uint64_t rng = seed ^ 0x73686172656770ull; /* "sharegp" */
    for (int i = n_ok - 1; i > 0; i--) {       /* Fisher-Yates */
        int j = (int)(splitmix64(&rng) % (uint64_t)(i + 1));
        const cJSON *tmp = ok[i];
        ok[i] = ok[j];
        ok[j] = tmp;
    }
    st = alloc_arrays(d, n, err);
    for (int i = 0; !st && i < n; i++) {
        const char *p, *a;
        conversation_pair(ok[i % n_ok], &p, &a);
        if (!(d->prompt[i] = strdup(p))) {
            bs_dataset_free(d);
            st = ai_err_set(err, AI_ERR_NOMEM, "dataset %s: out of memory", path);
            break;
        }
        d->output_len[i] = output_len > 0 ? output_len : est_tokens(strlen(a));
        d->prompt_est[i] = est_tokens(strlen(p));
    }
    free(ok);
    cJSON_Delete(root);
    return st;
}

void bs_dataset_free(bs_dataset *d)
{
    if (d->prompt)
        for (int i = 0; i < d->n; i++) free(d->prompt[i]);
    free(d->prompt);
    free(d->output_len);
    free(d->prompt_est);
    memset(d, 0, sizeof *d);
}

void bs_arrivals(double *t, int n, double rate, uint64_t seed)
{
    uint64_t rng = seed ^ 0x617272697661ull; /* "arriva" */
    bool poisson = rate > 0 && isfinite(rate);
    double at = 0;
    for (int i = 0; i < n; i++) {
        t[i] = at;
        if (poisson) at += -log1p(-uniform01(&rng)) / rate;
    }
}
