/* hf_config.c - config.json (llama family) -> struct hf_config.
 *
 * Each field is read by a small typed getter that knows whether it is required and its
 * default, so every error names the field. Consistency checks after reading: positive
 * sizes, heads divisible by kv heads, hidden_size divisible by heads when head_dim is
 * derived, positive eps/theta, and rope-scaling parameters present for the chosen type.
 * Rope types other than none/linear/llama3 (yarn, dynamic, longrope) are reported as
 * unsupported rather than silently ignored: ignoring them would change the model's output.
 */
#include "aiinfra/hf_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "aiinfra/fileio.h"

#define CONFIG_MAX_BYTES (16u << 20)

static const cJSON *field(const cJSON *o, const char *key)
{
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    return cJSON_IsNull(v) ? NULL : v;  /* null counts as absent */
}

static bool json_int(const cJSON *v, int64_t *out)
{
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (floor(d) != d || fabs(d) >= 9007199254740992.0) return false;
    *out = (int64_t)d;
    return true;
}

/* required: error when absent; else *out = def. */
static ai_status get_int(const cJSON *o, const char *key, bool required, int64_t def, int64_t *out, ai_err *err)
{
    const cJSON *v = field(o, key);
    if (!v) {
        if (required) return ai_err_set(err, AI_ERR_FORMAT, "missing required field '%s'", key);
        *out = def;
        return AI_OK;
    }
    if (!json_int(v, out)) return ai_err_set(err, AI_ERR_FORMAT, "field '%s' must be an integer", key);
    return AI_OK;
}

static ai_status get_num(const cJSON *o, const char *key, bool required, double def, double *out, ai_err *err)
{
    const cJSON *v = field(o, key);
    if (!v) {
        if (required) return ai_err_set(err, AI_ERR_FORMAT, "missing required field '%s'", key);
        *out = def;
        return AI_OK;
    }
    if (!cJSON_IsNumber(v)) return ai_err_set(err, AI_ERR_FORMAT, "field '%s' must be a number", key);
    *out = v->valuedouble;
    return AI_OK;
}

static ai_status get_bool(const cJSON *o, const char *key, bool def, bool *out, ai_err *err)
{
    const cJSON *v = field(o, key);
    if (!v) { *out = def; return AI_OK; }
    if (!cJSON_IsBool(v)) return ai_err_set(err, AI_ERR_FORMAT, "field '%s' must be true or false", key);
    *out = cJSON_IsTrue(v);
    return AI_OK;
}

static ai_status get_str(const cJSON *v, const char *key, char *dst, size_t cap, ai_err *err)
{
    dst[0] = '\0';
    if (!v) return AI_OK;
    if (!cJSON_IsString(v)) return ai_err_set(err, AI_ERR_FORMAT, "field '%s' must be a string", key);
    size_t n = strlen(v->valuestring);
    if (n >= cap) return ai_err_set(err, AI_ERR_FORMAT, "field '%s' is longer than %zu bytes", key, cap - 1);
    memcpy(dst, v->valuestring, n + 1);
    return AI_OK;
}

const char *hf_rope_scaling_name(enum hf_rope_scaling t)
{
    switch (t) {
    case HF_ROPE_NONE: return "none";
    case HF_ROPE_LINEAR: return "linear";
    case HF_ROPE_LLAMA3: return "llama3";
    }
    return "unknown";
}

/* rope: a rope_scaling (v4) or rope_parameters (v5) object, or NULL. */
static ai_status read_rope(hf_config *c, const cJSON *rope, const char *key, ai_err *err)
{
    c->rope_scaling.type = HF_ROPE_NONE;
    if (!rope) return AI_OK;
    if (!cJSON_IsObject(rope)) return ai_err_set(err, AI_ERR_FORMAT, "field '%s' must be an object", key);
    const cJSON *t = field(rope, "rope_type");
    if (!t) t = field(rope, "type");
    if (t && !cJSON_IsString(t)) return ai_err_set(err, AI_ERR_FORMAT, "%s.rope_type must be a string", key);
    const char *type = t ? t->valuestring : "default";
    ai_status rc = AI_OK;
    if (!strcmp(type, "default")) return AI_OK;
    if (!strcmp(type, "linear")) {
        c->rope_scaling.type = HF_ROPE_LINEAR;
        rc = get_num(rope, "factor", true, 0, &c->rope_scaling.factor, err);
    } else if (!strcmp(type, "llama3")) {
        c->rope_scaling.type = HF_ROPE_LLAMA3;
        rc = get_num(rope, "factor", true, 0, &c->rope_scaling.factor, err);
        if (rc == AI_OK) rc = get_num(rope, "low_freq_factor", true, 0, &c->rope_scaling.low_freq_factor, err);
        if (rc == AI_OK) rc = get_num(rope, "high_freq_factor", true, 0, &c->rope_scaling.high_freq_factor, err);
        if (rc == AI_OK)
            rc = get_int(rope, "original_max_position_embeddings", true, 0,
                         &c->rope_scaling.original_max_position_embeddings, err);
        if (rc == AI_OK && !(c->rope_scaling.low_freq_factor > 0 &&
                             c->rope_scaling.high_freq_factor > c->rope_scaling.low_freq_factor &&
                             c->rope_scaling.original_max_position_embeddings > 0))
            rc = ai_err_set(err, AI_ERR_FORMAT,
                            "llama3 rope needs 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0");
    } else {
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "%s type '%.40s' is not supported (only default, linear, llama3)",
                          key, type);
    }
    if (rc == AI_OK && !(c->rope_scaling.factor > 0))
        rc = ai_err_set(err, AI_ERR_FORMAT, "%s.factor must be > 0", key);
    return rc == AI_OK ? AI_OK : ai_err_prefix(err, "%s", key);
}

static ai_status read_ids(hf_config *c, const cJSON *o, ai_err *err)
{
    ai_status rc = get_int(o, "bos_token_id", false, -1, &c->bos_token_id, err);
    if (rc != AI_OK) return rc;
    const cJSON *eos = field(o, "eos_token_id");
    c->n_eos = 0;
    if (!eos) return AI_OK;
    if (!cJSON_IsArray(eos)) {
        if (!json_int(eos, &c->eos_token_ids[0]))
            return ai_err_set(err, AI_ERR_FORMAT, "field 'eos_token_id' must be an integer or a list of them");
        c->n_eos = 1;
        return AI_OK;
    }
    for (const cJSON *e = eos->child; e; e = e->next) {
        if (c->n_eos == HF_MAX_EOS)
            return ai_err_set(err, AI_ERR_UNSUPPORTED, "field 'eos_token_id' lists more than %d ids", HF_MAX_EOS);
        if (!json_int(e, &c->eos_token_ids[c->n_eos]))
            return ai_err_set(err, AI_ERR_FORMAT, "eos_token_id[%d] must be an integer", c->n_eos);
        c->n_eos++;
    }
    return AI_OK;
}

static ai_status read_config(hf_config *c, const cJSON *o, ai_err *err)
{
    if (!cJSON_IsObject(o)) return ai_err_set(err, AI_ERR_FORMAT, "not a JSON object");
    const cJSON *arch = field(o, "architectures");
    if (arch && (!cJSON_IsArray(arch) || !cJSON_IsString(arch->child)))
        return ai_err_set(err, AI_ERR_FORMAT, "field 'architectures' must be a list of strings");
    ai_status rc = get_str(arch ? arch->child : NULL, "architectures[0]", c->architecture, sizeof c->architecture, err);
    if (rc == AI_OK) rc = get_str(field(o, "model_type"), "model_type", c->model_type, sizeof c->model_type, err);
    if (rc == AI_OK && !c->model_type[0]) rc = ai_err_set(err, AI_ERR_FORMAT, "missing required field 'model_type'");
    if (rc != AI_OK) return rc;

    struct { const char *key; int64_t *dst; } req[] = {
        {"hidden_size", &c->hidden_size}, {"intermediate_size", &c->intermediate_size},
        {"num_hidden_layers", &c->num_hidden_layers}, {"num_attention_heads", &c->num_attention_heads},
        {"vocab_size", &c->vocab_size},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        rc = get_int(o, req[i].key, true, 0, req[i].dst, err);
        if (rc == AI_OK && *req[i].dst <= 0) rc = ai_err_set(err, AI_ERR_FORMAT, "field '%s' must be > 0", req[i].key);
        if (rc != AI_OK) return rc;
    }
    int64_t heads = c->num_attention_heads;
    bool derived_head_dim = !field(o, "head_dim");
    rc = get_int(o, "num_key_value_heads", false, heads, &c->num_key_value_heads, err);
    if (rc == AI_OK) rc = get_int(o, "head_dim", false, c->hidden_size / heads, &c->head_dim, err);
    if (rc == AI_OK) rc = get_int(o, "max_position_embeddings", false, 2048, &c->max_position_embeddings, err);
    if (rc == AI_OK) rc = get_num(o, "rms_norm_eps", false, 1e-6, &c->rms_norm_eps, err);
    if (rc == AI_OK) rc = get_bool(o, "tie_word_embeddings", false, &c->tie_word_embeddings, err);
    if (rc == AI_OK) rc = get_bool(o, "attention_bias", false, &c->attention_bias, err);
    if (rc == AI_OK) {
        const cJSON *dt = field(o, "torch_dtype");
        rc = get_str(dt ? dt : field(o, "dtype"), dt ? "torch_dtype" : "dtype", c->dtype, sizeof c->dtype, err);
    }
    if (rc == AI_OK) rc = read_ids(c, o, err);
    if (rc != AI_OK) return rc;

    /* rope: v5 rope_parameters carries rope_theta and the scaling; v4 has them apart */
    const cJSON *params = field(o, "rope_parameters");
    if (params && cJSON_IsObject(params) && field(params, "rope_theta"))
        rc = get_num(params, "rope_theta", false, 10000.0, &c->rope_theta, err);
    else
        rc = get_num(o, "rope_theta", false, 10000.0, &c->rope_theta, err);
    if (rc == AI_OK) {
        const cJSON *scaling = field(o, "rope_scaling");
        rc = scaling ? read_rope(c, scaling, "rope_scaling", err) : read_rope(c, params, "rope_parameters", err);
    }
    if (rc != AI_OK) return rc;

    if (c->num_key_value_heads <= 0 || heads % c->num_key_value_heads)
        return ai_err_set(err, AI_ERR_FORMAT, "num_key_value_heads %lld must be > 0 and divide num_attention_heads %lld",
                          (long long)c->num_key_value_heads, (long long)heads);
    if (derived_head_dim && c->hidden_size % heads)
        return ai_err_set(err, AI_ERR_FORMAT, "no head_dim, and hidden_size %lld is not a multiple of num_attention_heads %lld",
                          (long long)c->hidden_size, (long long)heads);
    if (c->head_dim <= 0) return ai_err_set(err, AI_ERR_FORMAT, "field 'head_dim' must be > 0");
    if (c->max_position_embeddings <= 0) return ai_err_set(err, AI_ERR_FORMAT, "field 'max_position_embeddings' must be > 0");
    if (!(c->rms_norm_eps > 0)) return ai_err_set(err, AI_ERR_FORMAT, "field 'rms_norm_eps' must be > 0");
    if (!(c->rope_theta > 0)) return ai_err_set(err, AI_ERR_FORMAT, "field 'rope_theta' must be > 0");
    return AI_OK;
}

ai_status hf_config_parse(hf_config *c, const char *json, size_t len, const char *name, ai_err *err)
{
    memset(c, 0, sizeof *c);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return ai_err_set(err, AI_ERR_FORMAT, "%s: not valid JSON", name);
    ai_status rc = read_config(c, root, err);
    cJSON_Delete(root);
    if (rc != AI_OK) ai_err_prefix(err, "%s", name);
    return rc;
}

ai_status hf_config_load(hf_config *c, const char *path, ai_err *err)
{
    char *file = NULL;
    if (file_is_dir(path)) {
        size_t n = strlen(path) + sizeof "/config.json";
        file = malloc(n);
        if (!file) return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
        snprintf(file, n, "%s/config.json", path);
    }
    const char *p = file ? file : path;
    char *text = NULL;
    size_t len = 0;
    ai_status rc = file_read_all(p, CONFIG_MAX_BYTES, &text, &len, err);
    if (rc == AI_OK) rc = hf_config_parse(c, text, len, p, err);
    free(text);
    free(file);
    return rc;
}
