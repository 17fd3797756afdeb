/* load_gpt2.c - OpenAI GPT-2 files: encoder.json (token -> id) + vocab.bpe (merges, one "a b" per line).
 *
 * The pair is turned into the tokenizer.json it is equivalent to (BPE model, ByteLevel
 * pre-tokenizer with GPT-2's regex and no prefix space, ByteLevel decoder, <|endoftext|> as
 * the special token) and handed to the tokenizer.json loader, so there is one code path.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "aiinfra/fileio.h"
#include "tokenizer/tok_internal.h"

#define GPT2_MAX_FILE (256u << 20)

ai_status tok_load_gpt2(tokenizer **out, const char *dir, ai_err *err)
{
    *out = NULL;
    buf path;
    buf_init(&path);
    char *enc = NULL, *bpe = NULL;
    size_t enc_len = 0, bpe_len = 0;
    cJSON *root = NULL;
    ai_status st;
    buf_printf(&path, "%s/encoder.json", dir);
    if ((st = file_read_all(path.data, GPT2_MAX_FILE, &enc, &enc_len, err))) goto done;
    buf_clear(&path);
    buf_printf(&path, "%s/vocab.bpe", dir);
    if ((st = file_read_all(path.data, GPT2_MAX_FILE, &bpe, &bpe_len, err))) goto done;

    const char *end = NULL;
    cJSON *vocab = cJSON_ParseWithLengthOpts(enc, enc_len, &end, false);
    if (!cJSON_IsObject(vocab)) {
        cJSON_Delete(vocab);
        st = ai_err_set(err, AI_ERR_FORMAT, "%s/encoder.json: invalid JSON or not an object (near byte %zu)", dir,
                        end ? (size_t)(end - enc) : (size_t)0);
        goto done;
    }
    root = cJSON_CreateObject();
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddItemToObject(model, "vocab", vocab);
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    size_t i = 0;
    int line = 0;
    while (i < bpe_len) {
        size_t j = i;
        while (j < bpe_len && bpe[j] != '\n') j++;
        size_t n = j;
        if (n > i && bpe[n - 1] == '\r') n--;
        line++;
        if (n > i && !(line == 1 && bpe[i] == '#')) {
            bpe[n] = '\0';
            if (!strchr(bpe + i, ' ')) {
                st = ai_err_set(err, AI_ERR_FORMAT, "%s/vocab.bpe: line %d is not 'a b'", dir, line);
                goto done;
            }
            cJSON_AddItemToArray(merges, cJSON_CreateString(bpe + i));
        }
        i = j + 1;
    }
    cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
    cJSON_AddStringToObject(pre, "type", "ByteLevel");
    cJSON_AddBoolToObject(pre, "add_prefix_space", false);
    cJSON_AddBoolToObject(pre, "use_regex", true);
    cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
    cJSON_AddStringToObject(dec, "type", "ByteLevel");
    cJSON *eot = cJSON_GetObjectItemCaseSensitive(vocab, "<|endoftext|>");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    if (cJSON_IsNumber(eot)) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", eot->valuedouble);
        cJSON_AddStringToObject(a, "content", "<|endoftext|>");
        cJSON_AddBoolToObject(a, "special", true);
        cJSON_AddItemToArray(added, a);
    }
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(cfg, "bos_token", "<|endoftext|>");
    cJSON_AddStringToObject(cfg, "eos_token", "<|endoftext|>");
    st = tok_load_cjson(out, root, cfg, err);
    cJSON_Delete(cfg);
    if (st) ai_err_prefix(err, "%s", dir);
done:
    cJSON_Delete(root);
    free(enc);
    free(bpe);
    buf_free(&path);
    return st;
}
