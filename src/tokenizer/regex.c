/* regex.c - PCRE2 compilation of pre-tokenizer patterns, and llama.cpp's pattern lists.
 *
 * Patterns compile with PCRE2_UTF | PCRE2_UCP (Unicode semantics for \s, \w, \d, \p{..},
 * caseless matching) and are JIT-compiled when the JIT is available. The input is always
 * valid UTF-8 (sanitized first), so matching uses PCRE2_NO_UTF_CHECK.
 *
 * One semantic gap is closed by rewriting: the references (Oniguruma in HF tokenizers, Rust's
 * regex in tiktoken) define \s as the Unicode White_Space property, which includes U+0085
 * (NEXT LINE); PCRE2's UCP \s does not. Every \s / \S is rewritten to include U+0085.
 */
#include <string.h>

#include "tokenizer/tok_internal.h"

const char TOK_RE_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const char RE_LLAMA3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RE_FALCON_PUNCT[] = "[\\p{P}\\$\\+<=>\\^~\\|`]+";
static const char RE_DIGITS3[] = "[0-9][0-9][0-9]";
static const char RE_DIGIT[] = "\\p{N}";

/* Rewrites \s and \S (outside and inside classes) to include U+0085. */
static void rewrite_space(buf *out, const char *p, size_t n)
{
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[i + 1];
            if (d == 's') buf_puts(out, in_class ? "\\s\\x{85}" : "[\\s\\x{85}]");
            else if (d == 'S' && !in_class) buf_puts(out, "[^\\s\\x{85}]");
            else { buf_putc(out, c); buf_putc(out, d); }
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            buf_putc(out, c);
            if (i + 1 < n && p[i + 1] == '^') { buf_putc(out, '^'); i++; }
            if (i + 1 < n && p[i + 1] == ']') { buf_putc(out, ']'); i++; }
            continue;
        }
        if (c == ']' && in_class) in_class = false;
        buf_putc(out, c);
    }
}

ai_status tok_regex_compile(pcre2_code **out, const char *pattern, size_t len, ai_err *err)
{
    buf p;
    buf_init(&p);
    rewrite_space(&p, pattern, len);
    if (p.oom) { buf_free(&p); return ai_err_set(err, AI_ERR_NOMEM, "out of memory (regex)"); }
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(p.data ? p.data : ""), p.len, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    buf_free(&p);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return ai_err_set(err, AI_ERR_FORMAT, "regex '%.*s': %s (at %zu)", (int)(len > 120 ? 120 : len), pattern,
                          (const char *)msg, (size_t)eo);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  /* falls back to the interpreter */
    *out = re;
    return AI_OK;
}

static ai_status add_split(tokenizer *t, const char *re, ai_err *err)
{
    if (t->n_pre >= TOK_MAX_STEPS) return ai_err_set(err, AI_ERR_RANGE, "too many pre-tokenizer steps");
    pretok_step *s = &t->pre[t->n_pre];
    memset(s, 0, sizeof *s);
    s->kind = PRETOK_SPLIT;
    s->behavior = SPLIT_ISOLATED;
    ai_status st = tok_regex_compile(&s->re, re, strlen(re), err);
    if (!st) t->n_pre++;
    return st;
}

ai_status tok_pre_from_name(tokenizer *t, const char *name, ai_err *err)
{
    static const char *const gpt2_names[] = {"gpt-2", "gpt2", "mpt", "olmo", "jais", "default", NULL};
    static const char *const llama3_names[] = {"llama-bpe", "llama3", "llama-v3", "dbrx", "smaug-bpe", "chatglm-bpe", NULL};
    static const char *const digit_names[] = {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", NULL};
    ai_status st;
    for (int i = 0; gpt2_names[i]; i++)
        if (!strcmp(name, gpt2_names[i])) return add_split(t, TOK_RE_GPT2, err);
    for (int i = 0; llama3_names[i]; i++)
        if (!strcmp(name, llama3_names[i])) return add_split(t, RE_LLAMA3, err);
    for (int i = 0; digit_names[i]; i++)
        if (!strcmp(name, digit_names[i])) {
            if ((st = add_split(t, RE_DIGIT, err))) return st;
            return add_split(t, TOK_RE_GPT2, err);
        }
    if (!strcmp(name, "qwen2") || !strcmp(name, "stablelm2") || !strcmp(name, "deepseek-r1-qwen"))
        return add_split(t, RE_QWEN2, err);
    if (!strcmp(name, "falcon")) {
        if ((st = add_split(t, RE_FALCON_PUNCT, err))) return st;
        if ((st = add_split(t, TOK_RE_GPT2, err))) return st;
        return add_split(t, RE_DIGITS3, err);
    }
    return ai_err_set(err, AI_ERR_UNSUPPORTED, "tokenizer.ggml.pre '%s' unsupported", name);
}
