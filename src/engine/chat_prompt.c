/* chat_prompt.c - renders a conversation with a model's own chat template (GGUF
 * tokenizer.chat_template, or an HF folder's tokenizer_config.json), add_generation_prompt set, the
 * way transformers' apply_chat_template does: the template sees messages, add_generation_prompt,
 * bos_token and eos_token. The template is parsed once per model and rendered per turn.
 */
#include <string.h>

#include "aiinfra/generate.h"

ai_status chat_prompt_load(chat_prompt *cp, const char *model_path, ai_err *err)
{
    memset(cp, 0, sizeof *cp);
    ai_status st = chat_model_template_load(&cp->mt, model_path, err);
    if (st != AI_OK) return st;
    st = chat_template_parse(&cp->t, cp->mt.source, cp->mt.len, err);
    if (st != AI_OK) {
        ai_err_prefix(err, "%s: chat template", model_path);
        chat_model_template_free(&cp->mt);
        memset(cp, 0, sizeof *cp);
    }
    return st;
}

void chat_prompt_free(chat_prompt *cp)
{
    chat_template_free(cp->t);
    chat_model_template_free(&cp->mt);
    memset(cp, 0, sizeof *cp);
}

ai_status chat_prompt_render(const chat_prompt *cp, cJSON *messages, bool add_generation_prompt, buf *out,
                             ai_err *err)
{
    cJSON *ctx = cJSON_CreateObject();
    if (!ctx || !cJSON_AddItemReferenceToObject(ctx, "messages", messages) ||
        !cJSON_AddBoolToObject(ctx, "add_generation_prompt", add_generation_prompt) ||
        !cJSON_AddStringToObject(ctx, "bos_token", cp->mt.bos ? cp->mt.bos : "") ||
        !cJSON_AddStringToObject(ctx, "eos_token", cp->mt.eos ? cp->mt.eos : "")) {
        cJSON_Delete(ctx);
        return ai_err_set(err, AI_ERR_NOMEM, "chat prompt: out of memory");
    }
    ai_status st = chat_template_render(cp->t, ctx, out, err);
    cJSON_Delete(ctx);
    return st;
}
