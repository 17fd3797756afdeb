/* cmd_tokenize.c - `aiinfra tokenize` and `aiinfra detokenize`.
 *
 *   tokenize -m PATH [--no-special] [-p TEXT] [--jsonl] [--stats]
 *       text from stdin (or -p) -> ids on one line. Special-token text is always matched
 *       (HF default); --no-special only leaves out BOS/EOS. --jsonl: every stdin line is a JSON
 *       string (or 'x' + hex digits, for arbitrary bytes), one id line per input line. --stats: encode MB/s on stderr (load excluded).
 *   detokenize -m PATH [--jsonl] [--stream] [--skip-special]
 *       whitespace-separated ids -> text (no newline added). --jsonl: every line a JSON array
 *       of ids -> one JSON string per line. --stream: decode through the streaming detokenizer,
 *       checking that every chunk is valid UTF-8.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aiinfra/fileio.h"
#include "aiinfra/tokenizer.h"
#include "aiinfra/utf8.h"
#include "tools/commands.h"

#define STDIN_MAX ((size_t)1 << 31)

static double now_s(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void print_ids(const tok_ids *ids, buf *out)
{
    char tmp[16];
    for (size_t i = 0; i < ids->len; i++) {
        int32_t v = ids->data[i];
        uint32_t u = v < 0 ? 0u - (uint32_t)v : (uint32_t)v;
        size_t k = sizeof tmp;
        do { tmp[--k] = (char)('0' + u % 10); u /= 10; } while (u);
        if (v < 0) tmp[--k] = '-';
        if (i) buf_putc(out, ' ');
        buf_append(out, tmp + k, sizeof tmp - k);
    }
    buf_putc(out, '\n');
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static bool parse_hex(const char *s, size_t n, buf *out)
{
    while (n && (s[n - 1] == '\r' || s[n - 1] == ' ')) n--;
    if (n % 2) return false;
    for (size_t i = 0; i < n; i += 2) {
        int a = hexval(s[i]), b = hexval(s[i + 1]);
        if (a < 0 || b < 0) return false;
        buf_putc(out, (char)(a * 16 + b));
    }
    return true;
}

static int usage(const char *cmd)
{
    if (!strcmp(cmd, "tokenize"))
        fprintf(stderr, "usage: aiinfra tokenize -m PATH [--no-special] [-p TEXT] [--jsonl] [--stats]\n");
    else
        fprintf(stderr, "usage: aiinfra detokenize -m PATH [--jsonl] [--stream] [--skip-special]\n");
    return 2;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *prompt = NULL;
    bool special = true, jsonl = false, stats = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "-p") && i + 1 < argc) prompt = argv[++i];
        else if (!strcmp(argv[i], "--no-special")) special = false;
        else if (!strcmp(argv[i], "--jsonl")) jsonl = true;
        else if (!strcmp(argv[i], "--stats")) stats = true;
        else return usage("tokenize");
    }
    if (!model) return usage("tokenize");
    ai_err err = {0};
    tokenizer *t;
    if (tokenizer_load(&t, model, &err)) {
        fprintf(stderr, "aiinfra tokenize: %s\n", err.msg);
        return 1;
    }
    char *text = NULL;
    size_t len = 0;
    if (prompt) {
        len = strlen(prompt);
    } else if (file_read_stream(stdin, STDIN_MAX, &text, &len, &err)) {
        fprintf(stderr, "aiinfra tokenize: stdin: %s\n", err.msg);
        tokenizer_free(t);
        return 1;
    }
    int flags = TOK_PARSE_SPECIAL | (special ? TOK_ADD_SPECIAL : 0);
    tok_ids ids;
    tok_ids_init(&ids);
    buf out;
    buf_init(&out);
    int rc = 0;
    size_t n_bytes = 0, n_tokens = 0;
    double t0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
    double enc_wall = 0, enc_cpu = 0;   /* --jsonl: only the encode calls (not JSON parsing or printing) */
    tok_encoder *enc = NULL;
    if (!jsonl) {
        if (tokenizer_encode(t, prompt ? prompt : text, len, flags, &ids, &err)) {
            fprintf(stderr, "aiinfra tokenize: %s\n", err.msg);
            rc = 1;
        }
        n_bytes = len;
        n_tokens = ids.len;
    } else if (tok_encoder_init(&enc, t, &err)) {
        fprintf(stderr, "aiinfra tokenize: %s\n", err.msg);
        rc = 1;
    } else {   /* one encoder for all lines: its word cache carries over, as in a server */
        const char *p = prompt ? prompt : text;
        size_t i = 0;
        int line = 0;
        while (i < len && !rc) {
            size_t j = i;
            while (j < len && p[j] != '\n') j++;
            line++;
            if (j > i && p[i] == 'x') {
                buf raw;
                buf_init(&raw);
                if (!parse_hex(p + i + 1, j - i - 1, &raw)) {
                    fprintf(stderr, "aiinfra tokenize: stdin line %d: bad hex\n", line);
                    rc = 1;
                } else {
                    ids.len = 0;
                    double a = now_s(CLOCK_MONOTONIC), b = now_s(CLOCK_PROCESS_CPUTIME_ID);
                    if (tok_encoder_encode(enc, raw.data, raw.len, flags, &ids, &err)) {
                        fprintf(stderr, "aiinfra tokenize: line %d: %s\n", line, err.msg);
                        rc = 1;
                    }
                    enc_wall += now_s(CLOCK_MONOTONIC) - a;
                    enc_cpu += now_s(CLOCK_PROCESS_CPUTIME_ID) - b;
                    print_ids(&ids, &out);
                    n_bytes += raw.len;
                    n_tokens += ids.len;
                }
                buf_free(&raw);
            } else if (j > i) {
                cJSON *s = cJSON_ParseWithLength(p + i, j - i);
                if (!cJSON_IsString(s)) {
                    fprintf(stderr, "aiinfra tokenize: stdin line %d: not a JSON string\n", line);
                    rc = 1;
                } else {
                    size_t sl = strlen(s->valuestring);
                    ids.len = 0;
                    double a = now_s(CLOCK_MONOTONIC), b = now_s(CLOCK_PROCESS_CPUTIME_ID);
                    if (tok_encoder_encode(enc, s->valuestring, sl, flags, &ids, &err)) {
                        fprintf(stderr, "aiinfra tokenize: line %d: %s\n", line, err.msg);
                        rc = 1;
                    }
                    enc_wall += now_s(CLOCK_MONOTONIC) - a;
                    enc_cpu += now_s(CLOCK_PROCESS_CPUTIME_ID) - b;
                    print_ids(&ids, &out);
                    n_bytes += sl;
                    n_tokens += ids.len;
                }
                cJSON_Delete(s);
            }
            i = j + 1;
        }
    }
    double dt = now_s(CLOCK_MONOTONIC) - t0, dc = now_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    if (jsonl) { dt = enc_wall; dc = enc_cpu; }
    if (!jsonl && !rc) print_ids(&ids, &out);
    if (out.oom) { fprintf(stderr, "aiinfra tokenize: out of memory\n"); rc = 1; }
    if (!rc) fwrite(out.data ? out.data : "", 1, out.len, stdout);
    if (stats)
        fprintf(stderr, "encode: %zu bytes -> %zu tokens in %.3f s = %.2f MB/s (cpu %.3f s = %.2f MB/s)\n", n_bytes,
                n_tokens, dt, dt > 0 ? n_bytes / dt / 1e6 : 0.0, dc, dc > 0 ? n_bytes / dc / 1e6 : 0.0);
    buf_free(&out);
    tok_ids_free(&ids);
    free(text);
    tok_encoder_free(enc);
    tokenizer_free(t);
    return rc;
}

/* Parses whitespace-separated integers; false with a message on a bad one. */
static bool parse_ids(const char *s, size_t n, tok_ids *ids, char *msg, size_t msg_len)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == ',')) i++;
        if (i >= n) break;
        char tmp[24];
        size_t k = 0;
        while (i < n && k < sizeof tmp - 1 && !(s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == ','))
            tmp[k++] = s[i++];
        tmp[k] = '\0';
        char *e;
        errno = 0;
        long v = strtol(tmp, &e, 10);
        if (*e || k == 0 || errno || v < INT32_MIN || v > INT32_MAX) {
            snprintf(msg, msg_len, "'%s' is not a token id", tmp);
            return false;
        }
        if (!tok_ids_push(ids, (int32_t)v)) { snprintf(msg, msg_len, "out of memory"); return false; }
    }
    return true;
}

/* Appends s[0..n) (valid UTF-8, may hold NULs) as a JSON string literal. */
static void json_string(buf *out, const char *s, size_t n)
{
    buf_putc(out, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { buf_putc(out, '\\'); buf_putc(out, (char)c); }
        else if (c < 0x20 || c == 0x7F) buf_printf(out, "\\u%04x", c);
        else buf_putc(out, (char)c);
    }
    buf_putc(out, '"');
}

static ai_status decode_ids(const tokenizer *t, const tok_ids *ids, int flags, bool stream, buf *out, ai_err *err)
{
    if (!stream) return tokenizer_decode(t, ids->data, ids->len, flags, out, err);
    tok_stream s;
    tok_stream_init(&s, t, flags);
    ai_status st = AI_OK;
    buf chunk;
    buf_init(&chunk);
    for (size_t i = 0; i < ids->len && !st; i++) {
        buf_clear(&chunk);
        st = tok_stream_push(&s, ids->data[i], &chunk, err);
        if (!st && !utf8_valid(chunk.data, chunk.len))
            st = ai_err_set(err, AI_ERR_RUNTIME, "stream emitted invalid UTF-8 after id %zu", i);
        buf_append(out, chunk.data, chunk.len);
    }
    if (!st) {
        buf_clear(&chunk);
        tok_stream_flush(&s, &chunk);
        if (!utf8_valid(chunk.data, chunk.len)) st = ai_err_set(err, AI_ERR_RUNTIME, "stream flush emitted invalid UTF-8");
        buf_append(out, chunk.data, chunk.len);
    }
    buf_free(&chunk);
    tok_stream_free(&s);
    return st;
}

int cmd_detokenize(int argc, char **argv)
{
    const char *model = NULL;
    bool jsonl = false, stream = false;
    int flags = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--jsonl")) jsonl = true;
        else if (!strcmp(argv[i], "--stream")) stream = true;
        else if (!strcmp(argv[i], "--skip-special")) flags |= TOK_SKIP_SPECIAL;
        else return usage("detokenize");
    }
    if (!model) return usage("detokenize");
    ai_err err = {0};
    tokenizer *t;
    if (tokenizer_load(&t, model, &err)) {
        fprintf(stderr, "aiinfra detokenize: %s\n", err.msg);
        return 1;
    }
    char *text = NULL;
    size_t len = 0;
    if (file_read_stream(stdin, STDIN_MAX, &text, &len, &err)) {
        fprintf(stderr, "aiinfra detokenize: stdin: %s\n", err.msg);
        tokenizer_free(t);
        return 1;
    }
    tok_ids ids;
    tok_ids_init(&ids);
    buf out, one;
    buf_init(&out);
    buf_init(&one);
    int rc = 0;
    char msg[96];
    size_t i = 0;
    int line = 0;
    while (i < len && !rc) {
        size_t j = jsonl ? i : len;
        while (j < len && text[j] != '\n') j++;
        line++;
        ids.len = 0;
        buf_clear(&one);
        const char *p = text + i;
        size_t n = j - i;
        if (jsonl) {   /* a JSON array of ids: strip the brackets, the rest is "a, b, c" */
            while (n && (p[n - 1] == '\r' || p[n - 1] == ' ')) n--;
            if (n < 2 || p[0] != '[' || p[n - 1] != ']') {
                fprintf(stderr, "aiinfra detokenize: line %d: not a JSON array of ids\n", line);
                rc = 1;
                break;
            }
            p++;
            n -= 2;
        }
        if (!parse_ids(p, n, &ids, msg, sizeof msg)) {
            fprintf(stderr, "aiinfra detokenize: line %d: %s\n", line, msg);
            rc = 1;
        } else if (decode_ids(t, &ids, flags, stream, &one, &err)) {
            fprintf(stderr, "aiinfra detokenize: %s\n", err.msg);
            rc = 1;
        } else if (jsonl) {
            json_string(&out, one.data, one.len);
            buf_putc(&out, '\n');
        } else {
            buf_append(&out, one.data, one.len);
        }
        i = j + 1;
    }
    if (!rc) fwrite(out.data ? out.data : "", 1, out.len, stdout);
    buf_free(&out);
    buf_free(&one);
    tok_ids_free(&ids);
    free(text);
    tokenizer_free(t);
    return rc;
}
