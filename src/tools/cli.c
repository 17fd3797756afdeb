#include "aiinfra/backend.h"
#include "tools/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aiinfra/model.h"
#include "aiinfra/runner.h"

bool cli_parse_num(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

bool cli_parse_flags(const char *s, const cli_flag *table, size_t n, unsigned *out)
{
    while (*s) {
        const size_t len = strcspn(s, ",");
        bool ok = false;
        for (size_t i = 0; i < n; i++)
            if (strlen(table[i].name) == len && !strncmp(s, table[i].name, len)) *out |= table[i].bits, ok = true;
        if (!ok) return false;
        s += len + (s[len] == ',');
    }
    return true;
}

bool cli_emit_stdout(void *user, const char *text, size_t len)
{
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true;
}

static void progress_bar(void *user, uint64_t done, uint64_t total)
{
    (void)user;
    const int width = 40;
    int fill = total ? (int)((double)done / (double)total * width) : width;
    fprintf(stderr, "\rloading weights [");
    for (int i = 0; i < width; i++) fputc(i < fill ? '#' : '.', stderr);
    fprintf(stderr, "] %3d%% %.2f / %.2f GiB", total ? (int)(100.0 * done / total) : 100, done / 1073741824.0,
            total / 1073741824.0);
    if (done >= total) fputc('\n', stderr);
    fflush(stderr);
}

void cli_prefetch_weights(const struct model *m)
{
    bool bar = isatty(STDERR_FILENO) && model_weight_bytes(m) >= (256u << 20);
    model_prefetch(m, bar ? progress_bar : NULL, NULL);
}

ai_status cli_open_backend(const char *name, int n_threads, backend *be, ai_err *err)
{
    if (!strcmp(name, "cuda")) return backend_cuda_init(be, 0, err);
    if (!strcmp(name, "cpu")) return backend_cpu_init(be, n_threads, err);
    return ai_err_set(err, AI_ERR_INVALID, "unknown backend '%s' (cpu, cuda)", name);
}

bool cli_parse_kv_cache_dtype(const char *cmd, const char *v, struct model_ctx_params *cp)
{
    runner_kv_dtype k;
    if (!runner_kv_dtype_parse(v, &k)) {
        fprintf(stderr, "aiinfra %s: --kv-cache-dtype takes auto, f16 or fp8, not '%s'\n", cmd, v);
        return false;
    }
    cp->kv_cache_dtype = (int)k;
    if (k == RUNNER_KV_F16 || k == RUNNER_KV_F32) cp->kv_f16 = k == RUNNER_KV_F16; /* the CPU forward's cache */
    return true;
}
