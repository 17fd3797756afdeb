/* fuzz_template.c - libFuzzer target: the input bytes are a chat template; parse it and,
 * if it parses, render it with a small fixed conversation. Any crash, sanitizer report,
 * leak or hang (limits must stop runaway loops/recursion) is a bug.
 * Seeds: the real templates in ../shared/data/chat_templates (see docs/chat-template.md).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "aiinfra/template.h"

static const char CONTEXT[] =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hi \\\"there\\\" \\u00fc\"}]},"
    "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"hmm\",\"tool_calls\":[{\"id\":\"c1\","
    "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"x\":1.5,\"y\":[true,null]}}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"},{\"role\":\"user\",\"content\":\"ok\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"}},\"required\":[\"x\"]}}}],"
    "\"add_generation_prompt\":true,\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
    static cJSON *ctx;  /* built once, read-only afterwards */
    if (!ctx) ctx = cJSON_Parse(CONTEXT);
    chat_template *t = NULL;
    ai_err err;
    if (chat_template_parse(&t, (const char *)d, n, &err) != AI_OK) return 0;
    buf out;
    buf_init(&out);
    (void)chat_template_render_at(t, ctx, 1764547200, &out, &err);
    buf_free(&out);
    chat_template_free(t);
    return 0;
}
