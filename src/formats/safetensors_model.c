/* safetensors_model.c - a Hugging Face model folder as one tensor namespace.
 *
 * Layouts, tried in this order:
 *   1. PATH is a file: that one .safetensors file.
 *   2. PATH/model.safetensors.index.json: its "weight_map" names, for every tensor, the
 *      shard file (in PATH) holding it. Each distinct shard is opened once; every
 *      weight_map entry must exist in its shard (else the index and shards disagree).
 *   3. PATH/model.safetensors: a single-file model.
 * Shard names must be plain file names (no '/', not "." or ".."), so an index cannot
 * point outside the folder. Lookups go through one name table over all tensors.
 */
#include "aiinfra/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "aiinfra/fileio.h"
#include "formats/name_table.h"

#define INDEX_NAME "model.safetensors.index.json"
#define INDEX_MAX_BYTES (64u << 20)

struct safetensors_model {
    safetensors **shards;  /* (n_shards) */
    size_t n_shards;
    uint64_t n_tensors;
    name_table names;      /* tensor name -> const safetensors_tensor * */
};

static char *join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p) snprintf(p, a + b + 2, "%s/%s", dir, name);
    return p;
}

static ai_status open_shard(safetensors_model *m, const char *path, ai_err *err)
{
    safetensors **s = realloc(m->shards, (m->n_shards + 1) * sizeof *s);
    if (!s) return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
    m->shards = s;
    ai_status rc = safetensors_open(&s[m->n_shards], path, err);
    if (rc == AI_OK) m->n_shards++;
    return rc;
}

static ai_status open_single(safetensors_model *m, const char *path, ai_err *err)
{
    ai_status rc = open_shard(m, path, err);
    if (rc != AI_OK) return rc;
    const safetensors *st = m->shards[0];
    m->n_tensors = safetensors_n_tensors(st);
    if (!name_table_init(&m->names, m->n_tensors)) return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < m->n_tensors; i++) {
        const safetensors_tensor *t = safetensors_tensor_at(st, i);
        name_table_put(&m->names, t->name, t); /* unique: checked by safetensors_open */
    }
    return AI_OK;
}

static bool plain_file_name(const char *s)
{
    return s[0] && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static ai_status open_index(safetensors_model *m, const char *dir, const char *index_path, ai_err *err)
{
    char *text = NULL;
    size_t len = 0;
    ai_status rc = file_read_all(index_path, INDEX_MAX_BYTES, &text, &len, err);
    if (rc != AI_OK) return rc;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    const char **shard_names = NULL;
    if (!root) rc = ai_err_set(err, AI_ERR_FORMAT, "%s: not valid JSON", index_path);
    else if (!cJSON_IsObject(wm)) rc = ai_err_set(err, AI_ERR_FORMAT, "%s: no \"weight_map\" object", index_path);

    /* pass 1: validate entries, count them, collect distinct shard names */
    uint64_t n = 0;
    for (const cJSON *e = rc == AI_OK ? wm->child : NULL; e && rc == AI_OK; e = e->next, n++) {
        if (!cJSON_IsString(e) || !plain_file_name(e->valuestring)) {
            rc = ai_err_set(err, AI_ERR_FORMAT, "%s: weight_map '%.200s': shard must be a file name in the folder",
                            index_path, e->string);
            break;
        }
        size_t k = 0;
        while (k < m->n_shards && strcmp(shard_names[k], e->valuestring)) k++;
        if (k < m->n_shards) continue;
        const char **sn = realloc(shard_names, (m->n_shards + 1) * sizeof *sn);
        if (!sn) { rc = ai_err_set(err, AI_ERR_NOMEM, "out of memory"); break; }
        shard_names = sn;
        char *p = join(dir, e->valuestring);
        rc = p ? open_shard(m, p, err) : ai_err_set(err, AI_ERR_NOMEM, "out of memory");
        free(p);
        if (rc == AI_OK) shard_names[m->n_shards - 1] = e->valuestring;
    }
    if (rc == AI_OK && n == 0) rc = ai_err_set(err, AI_ERR_FORMAT, "%s: weight_map is empty", index_path);
    if (rc == AI_OK && !name_table_init(&m->names, n)) rc = ai_err_set(err, AI_ERR_NOMEM, "out of memory");

    /* pass 2: every entry must be in its shard, and names unique */
    for (const cJSON *e = rc == AI_OK ? wm->child : NULL; e && rc == AI_OK; e = e->next) {
        size_t k = 0;
        while (strcmp(shard_names[k], e->valuestring)) k++;
        const safetensors_tensor *t = safetensors_find(m->shards[k], e->string);
        if (!t)
            rc = ai_err_set(err, AI_ERR_FORMAT, "%s: tensor '%.200s' is mapped to %s, which does not hold it",
                            index_path, e->string, e->valuestring);
        else if (name_table_put(&m->names, t->name, t))
            rc = ai_err_set(err, AI_ERR_FORMAT, "%s: weight_map lists '%.200s' twice", index_path, e->string);
        else
            m->n_tensors++;
    }
    free(shard_names);
    cJSON_Delete(root);
    return rc;
}

ai_status safetensors_model_open(safetensors_model **out, const char *path, ai_err *err)
{
    *out = NULL;
    safetensors_model *m = calloc(1, sizeof *m);
    if (!m) return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
    ai_status rc;
    char *index = NULL, *single = NULL;
    if (file_is_regular(path)) {
        rc = open_single(m, path, err);
    } else if (!file_is_dir(path)) {
        rc = ai_err_set(err, AI_ERR_IO, "%s: no such file or folder", path);
    } else if (!(index = join(path, INDEX_NAME)) || !(single = join(path, "model.safetensors"))) {
        rc = ai_err_set(err, AI_ERR_NOMEM, "out of memory");
    } else if (file_is_regular(index)) {
        rc = open_index(m, path, index, err);
    } else if (file_is_regular(single)) {
        rc = open_single(m, single, err);
    } else {
        rc = ai_err_set(err, AI_ERR_IO, "%s: neither %s nor model.safetensors found", path, INDEX_NAME);
    }
    free(index);
    free(single);
    if (rc != AI_OK) {
        safetensors_model_close(m);
        return rc;
    }
    *out = m;
    return AI_OK;
}

void safetensors_model_close(safetensors_model *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n_shards; i++) safetensors_close(m->shards[i]);
    free(m->shards);
    name_table_free(&m->names);
    free(m);
}

size_t safetensors_model_n_shards(const safetensors_model *m) { return m->n_shards; }

const safetensors *safetensors_model_shard(const safetensors_model *m, size_t i)
{
    return i < m->n_shards ? m->shards[i] : NULL;
}

uint64_t safetensors_model_n_tensors(const safetensors_model *m) { return m->n_tensors; }

const safetensors_tensor *safetensors_model_find(const safetensors_model *m, const char *name)
{
    return name_table_find(&m->names, name);
}
