/* template.h - chat templates: a Jinja2-subset engine that renders a conversation into the
 * exact prompt text a model was trained on, byte-identical to HF transformers'
 * apply_chat_template (trim_blocks, lstrip_blocks, loopcontrols, its tojson,
 * raise_exception and strftime_now, the {% generation %} tag).
 *
 * A parsed template is immutable: any number of threads may render it at once.
 * Renders are bounded (output size, loop iterations, nesting, memory) and every failure,
 * including a template's raise_exception(), comes back as an ai_err naming the line.
 * See docs/chat-template.md.
 */
#ifndef AIINFRA_TEMPLATE_H
#define AIINFRA_TEMPLATE_H

#include <stdint.h>
#include <cjson/cJSON.h>

#include "aiinfra/buf.h"
#include "aiinfra/status.h"

typedef struct chat_template chat_template;

/* Parses template source (UTF-8). Unsupported constructs fail here when they can be seen
 * statically ("template line 12: unsupported filter 'xmlattr'"). */
ai_status chat_template_parse(chat_template **out, const char *src, size_t len, ai_err *err);
void chat_template_free(chat_template *t);

/* Renders with `context`, a JSON object whose members become template variables
 * (messages, tools, add_generation_prompt, bos_token, eos_token, ...). Appends to `out`;
 * on failure `out` is restored to its length at entry. strftime_now() uses `now`
 * (seconds since the epoch, formatted in local time); chat_template_render uses the clock. */
ai_status chat_template_render_at(const chat_template *t, const cJSON *context, int64_t now,
                                  buf *out, ai_err *err);
ai_status chat_template_render(const chat_template *t, const cJSON *context, buf *out, ai_err *err);

/* What transformers does to messages before rendering: drops members whose value is null
 * and copies reasoning under its aliases ("reasoning_content" from "thinking"/"reasoning",
 * and "thinking" for gpt-oss). Edits `messages` (a JSON array) in place. */
ai_status chat_messages_normalize(cJSON *messages, ai_err *err);

/* A model's template and special-token texts. */
typedef struct chat_model_template {
    char *source;  /* template text, NUL-terminated */
    size_t len;
    char *bos;     /* NULL when the model does not name one */
    char *eos;
} chat_model_template;

/* path: a GGUF file (tokenizer.chat_template, bos/eos from tokenizer.ggml.*_token_id),
 * a tokenizer_config.json, or an HF model folder (its tokenizer_config.json, or
 * chat_template.jinja / chat_template.json beside it). A list of named templates picks "default". */
ai_status chat_model_template_load(chat_model_template *out, const char *path, ai_err *err);
void chat_model_template_free(chat_model_template *m);

#endif
