/* load.c - tokenizer_load: picks the loader from what `path` is.
 *   directory with tokenizer.json      -> HF (tokenizer_config.json beside it is optional)
 *   directory with encoder.json        -> GPT-2 files
 *   *.tiktoken                         -> tiktoken
 *   a file starting with "GGUF"        -> GGUF metadata (load_gguf.c)
 *   any other file                     -> tokenizer.json (+ tokenizer_config.json in its folder)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aiinfra/fileio.h"
#include "tokenizer/tok_internal.h"

#define JSON_MAX (512u << 20)

ai_status tok_load_gguf_path(tokenizer **out, const char *path, ai_err *err);

static ai_status load_json_file(tokenizer **out, const char *path, const char *cfg_path, ai_err *err)
{
    char *json = NULL, *cfg = NULL;
    size_t len = 0, cfg_len = 0;
    ai_status st = file_read_all(path, JSON_MAX, &json, &len, err);
    if (st) return st;
    if (cfg_path && file_is_regular(cfg_path) && (st = file_read_all(cfg_path, JSON_MAX, &cfg, &cfg_len, err))) {
        free(json);
        return st;
    }
    st = tok_load_json(out, json, len, cfg, cfg_len, err);
    if (st) ai_err_prefix(err, "%s", path);
    free(json);
    free(cfg);
    return st;
}

ai_status tokenizer_load(tokenizer **out, const char *path, ai_err *err)
{
    if (!out || !path) return ai_err_set(err, AI_ERR_INVALID, "tokenizer_load: NULL argument");
    *out = NULL;
    buf p, c;
    buf_init(&p);
    buf_init(&c);
    ai_status st;
    if (file_is_dir(path)) {
        buf_printf(&p, "%s/tokenizer.json", path);
        buf_printf(&c, "%s/tokenizer_config.json", path);
        if (file_is_regular(p.data)) {
            st = load_json_file(out, p.data, c.data, err);
        } else {
            buf_clear(&p);
            buf_printf(&p, "%s/encoder.json", path);
            st = file_is_regular(p.data) ? tok_load_gpt2(out, path, err)
                                         : ai_err_set(err, AI_ERR_IO, "%s: no tokenizer.json or encoder.json in this folder", path);
        }
    } else {
        size_t n = strlen(path);
        char magic[4] = {0};
        FILE *fp = fopen(path, "rb");
        if (!fp) {
            st = ai_err_set(err, AI_ERR_IO, "%s: cannot open", path);
        } else {
            size_t got = fread(magic, 1, 4, fp);
            fclose(fp);
            if (got == 4 && !memcmp(magic, "GGUF", 4)) {
                st = tok_load_gguf_path(out, path, err);
            } else if (n >= 9 && !strcmp(path + n - 9, ".tiktoken")) {
                st = tok_load_tiktoken(out, path, err);
            } else {
                const char *slash = strrchr(path, '/');
                if (slash) buf_printf(&c, "%.*s/tokenizer_config.json", (int)(slash - path), path);
                else buf_puts(&c, "tokenizer_config.json");
                st = load_json_file(out, path, c.data, err);
            }
        }
    }
    buf_free(&p);
    buf_free(&c);
    return st;
}
