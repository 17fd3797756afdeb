/* cmd_info.c - `aiinfra info MODEL`: architecture, config, parameter count, dtype mix and the
 * memory ledger (weights, bytes a decode step reads, KV bytes per token and for the full context).
 * Opens the model exactly as `run` does, so a file `info` accepts is one `run` can load.
 */
#include <stdio.h>
#include <string.h>

#include "aiinfra/model.h"
#include "tools/commands.h"

static void mib(const char *label, double bytes)
{
    printf("  %-34s %14.0f bytes  %10.2f MiB\n", label, bytes, bytes / (1024.0 * 1024.0));
}

int cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    char defpath[4096];
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) path = argv[++i];
        else if (argv[i][0] != '-' && !path) path = argv[i];
        else {
            fprintf(stderr, "usage: aiinfra info [MODEL]   (default: the default model)\n");
            return 2;
        }
    }
    ai_err err = {0};
    if (!path) {
        if (model_default_path(defpath, sizeof defpath, &err) != AI_OK) {
            fprintf(stderr, "aiinfra info: %s\n", err.msg);
            return 1;
        }
        path = defpath;
    }
    model *m;
    if (model_open(&m, path, &err) != AI_OK) {
        fprintf(stderr, "aiinfra info: %s\n", err.msg);
        return 1;
    }
    const model_config *c = &m->cfg;
    model_stats st;
    model_stats_get(m, &st);
    gguf_str name = {0};
    if (m->g) gguf_get_str(m->g, "general.name", &name);
    printf("model:          %s\n", path);
    if (name.len) printf("name:           %.*s\n", (int)(name.len > 200 ? 200 : name.len), name.ptr);
    printf("architecture:   %s\n", model_arch_name(c->arch));
    printf("parameters:     %lld (%.1f M)\n", (long long)st.n_params, (double)st.n_params / 1e6);
    printf("layers:         %d\n", c->n_layer);
    printf("dim:            %d   ffn: %d   vocab: %d\n", c->dim, c->n_ff, c->n_vocab);
    printf("heads:          %d query, %d key/value (GQA group %d), head dim %d\n", c->n_head, c->n_head_kv,
           c->n_head / c->n_head_kv, c->head_dim);
    printf("rope:           %s, base %g, dims %d%s\n", c->rope_kind == MODEL_ROPE_NORM ? "normal (adjacent pairs)" : "neox (halves)",
           c->rope_base, c->rope_dim,
           c->rope_scaling == MODEL_ROPE_SCALING_LLAMA3 ? ", llama3 scaling"
           : c->rope_scaling == MODEL_ROPE_SCALING_LINEAR ? ", linear scaling" : "");
    printf("norm eps:       %g\n", c->norm_eps);
    printf("context:        %d tokens (trained)\n", c->n_ctx_train);
    printf("output:         %s\n", c->tied_output ? "tied to token_embd" : "output.weight");
    printf("dtype mix:\n");
    for (int d = 0; d < DTYPE_COUNT; d++)
        if (st.n_by_dtype[d])
            printf("  %-6s %4lld tensors %14llu bytes (%5.1f%%)\n", dtype_name((dtype)d), (long long)st.n_by_dtype[d],
                   (unsigned long long)st.bytes_by_dtype[d], 100.0 * (double)st.bytes_by_dtype[d] / (double)st.weight_bytes);
    printf("memory ledger:\n");
    mib("weights (mmapped)", (double)st.weight_bytes);
    mib("weights read per decoded token", (double)st.weight_bytes_per_token);
    mib("KV cache per token (f32)", (double)st.kv_bytes_per_token);
    char label[64];
    snprintf(label, sizeof label, "KV cache for %d tokens (f32)", c->n_ctx_train);
    mib(label, (double)st.kv_bytes_per_token * c->n_ctx_train);
    snprintf(label, sizeof label, "KV cache for %d tokens (f16)", c->n_ctx_train);
    mib(label, (double)st.kv_bytes_per_token / 2 * c->n_ctx_train);
    model_close(m);
    return 0;
}
