/* cmd_safetensors.c - `aiinfra safetensors PATH [--json] [--data]`: list the tensors of a
 * .safetensors file or a model folder (sharded via model.safetensors.index.json, or one
 * model.safetensors), and the folder's config.json when there is one.
 *
 * Text mode: one line per tensor (name, dtype, shape, bytes, shard). --json: one object
 * {"shards": [...], "tensors": [{name, dtype, shape, nbytes, shard[, data]}],
 *  "metadata": {...first shard's __metadata__}, "config": {...} (folder with config.json)}
 * for tests; --data adds each tensor's bytes as hex (small test files only).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "aiinfra/fileio.h"
#include "aiinfra/hf_config.h"
#include "aiinfra/safetensors.h"
#include "tools/commands.h"

static cJSON *config_json(const hf_config *c)
{
    cJSON *o = cJSON_CreateObject(), *eos = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "architecture", c->architecture);
    cJSON_AddStringToObject(o, "model_type", c->model_type);
    struct { const char *k; int64_t v; } ints[] = {
        {"hidden_size", c->hidden_size}, {"intermediate_size", c->intermediate_size},
        {"num_hidden_layers", c->num_hidden_layers}, {"num_attention_heads", c->num_attention_heads},
        {"num_key_value_heads", c->num_key_value_heads}, {"head_dim", c->head_dim},
        {"vocab_size", c->vocab_size}, {"max_position_embeddings", c->max_position_embeddings},
        {"bos_token_id", c->bos_token_id},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) cJSON_AddNumberToObject(o, ints[i].k, (double)ints[i].v);
    cJSON_AddNumberToObject(o, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta);
    cJSON_AddStringToObject(o, "rope_type", hf_rope_scaling_name(c->rope_scaling.type));
    cJSON_AddNumberToObject(o, "rope_factor", c->rope_scaling.factor);
    cJSON_AddNumberToObject(o, "rope_low_freq_factor", c->rope_scaling.low_freq_factor);
    cJSON_AddNumberToObject(o, "rope_high_freq_factor", c->rope_scaling.high_freq_factor);
    cJSON_AddNumberToObject(o, "rope_original_max_position_embeddings",
                            (double)c->rope_scaling.original_max_position_embeddings);
    cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddBoolToObject(o, "attention_bias", c->attention_bias);
    cJSON_AddStringToObject(o, "dtype", c->dtype);
    for (int i = 0; i < c->n_eos; i++) cJSON_AddItemToArray(eos, cJSON_CreateNumber((double)c->eos_token_ids[i]));
    cJSON_AddItemToObject(o, "eos_token_ids", eos);
    return o;
}

static char *hex(const void *p, uint64_t n)
{
    static const char digits[] = "0123456789abcdef";
    char *s = malloc(2 * n + 1);
    if (!s) return NULL;
    for (uint64_t i = 0; i < n; i++) {
        s[2 * i] = digits[((const unsigned char *)p)[i] >> 4];
        s[2 * i + 1] = digits[((const unsigned char *)p)[i] & 15];
    }
    s[2 * n] = '\0';
    return s;
}

/* The shard index holding t (pointer identity). */
static size_t shard_of(const safetensors_model *m, const safetensors_tensor *t)
{
    for (size_t s = 0; s < safetensors_model_n_shards(m); s++)
        if (safetensors_find(safetensors_model_shard(m, s), t->name) == t) return s;
    return 0;
}

int cmd_safetensors(int argc, char **argv)
{
    const char *path = NULL;
    bool json = false, data = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--data")) data = true;
        else if (!path && argv[i][0] != '-') path = argv[i];
        else {
            fprintf(stderr, "usage: aiinfra safetensors PATH [--json] [--data]\n");
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "usage: aiinfra safetensors PATH [--json] [--data]\n");
        return 2;
    }
    safetensors_model *m;
    ai_err err;
    if (safetensors_model_open(&m, path, &err) != AI_OK) {
        fprintf(stderr, "aiinfra safetensors: %s\n", err.msg);
        return 1;
    }
    hf_config cfg;
    bool has_cfg = false;
    if (file_is_dir(path)) {
        char cpath[4096];
        snprintf(cpath, sizeof cpath, "%s/config.json", path);
        if (file_is_regular(cpath)) {
            if (hf_config_load(&cfg, cpath, &err) != AI_OK) {
                fprintf(stderr, "aiinfra safetensors: %s\n", err.msg);
                safetensors_model_close(m);
                return 1;
            }
            has_cfg = true;
        }
    }
    /* every tensor, shard by shard, in header order */
    cJSON *root = cJSON_CreateObject(), *shards = cJSON_CreateArray(), *ts = cJSON_CreateArray();
    cJSON_AddItemToObject(root, "shards", shards);
    cJSON_AddItemToObject(root, "tensors", ts);
    int rc = 0;
    for (size_t s = 0; s < safetensors_model_n_shards(m); s++) {
        const safetensors *st = safetensors_model_shard(m, s);
        cJSON_AddItemToArray(shards, cJSON_CreateNumber((double)safetensors_n_tensors(st)));
        for (uint64_t i = 0; i < safetensors_n_tensors(st); i++) {
            const safetensors_tensor *t = safetensors_tensor_at(st, i);
            if (safetensors_model_find(m, t->name) != t) continue; /* not in the index */
            if (!json) {
                printf("%s  %s  [", t->name, safetensors_dtype_name(t->dtype));
                for (uint32_t d = 0; d < t->n_dims; d++) printf(d ? ", %" PRIu64 : "%" PRIu64, t->shape[d]);
                printf("]  %" PRIu64 " bytes  shard %zu\n", t->nbytes, shard_of(m, t));
                continue;
            }
            cJSON *o = cJSON_CreateObject(), *shape = cJSON_CreateArray();
            cJSON_AddStringToObject(o, "name", t->name);
            cJSON_AddStringToObject(o, "dtype", safetensors_dtype_name(t->dtype));
            for (uint32_t d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
            cJSON_AddItemToObject(o, "shape", shape);
            cJSON_AddNumberToObject(o, "nbytes", (double)t->nbytes);
            cJSON_AddNumberToObject(o, "shard", (double)s);
            if (data) {
                char *h = hex(t->data, t->nbytes);
                if (h) cJSON_AddStringToObject(o, "data", h);
                else rc = 1;
                free(h);
            }
            cJSON_AddItemToArray(ts, o);
        }
    }
    if (json) {
        const safetensors *st0 = safetensors_model_shard(m, 0);
        cJSON *meta = cJSON_CreateObject();
        const char *k, *v;
        for (uint64_t i = 0; safetensors_metadata_at(st0, i, &k, &v); i++) cJSON_AddStringToObject(meta, k, v);
        cJSON_AddItemToObject(root, "metadata", meta);
        if (has_cfg) cJSON_AddItemToObject(root, "config", config_json(&cfg));
        char *s = cJSON_PrintUnformatted(root);
        if (s) { puts(s); free(s); }
        else rc = 1;
    } else if (has_cfg) {
        printf("config: %s (%s), %" PRId64 " layers, hidden %" PRId64 ", heads %" PRId64 "/%" PRId64
               ", head_dim %" PRId64 ", vocab %" PRId64 ", rope %s theta %g\n",
               cfg.architecture, cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads,
               cfg.num_key_value_heads, cfg.head_dim, cfg.vocab_size, hf_rope_scaling_name(cfg.rope_scaling.type),
               cfg.rope_theta);
    }
    cJSON_Delete(root);
    safetensors_model_close(m);
    if (rc) fprintf(stderr, "aiinfra safetensors: out of memory\n");
    return rc;
}
