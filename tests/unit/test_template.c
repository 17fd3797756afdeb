/* test_template.c - chat-template engine: language semantics, errors with line numbers,
 * limits, concurrency.
 *
 * The expected strings in RENDER_CASES were produced by Jinja2 3.1 through transformers'
 * environment (transformers.utils.chat_template_utils._compile_jinja_template(src).render),
 * not by this code. Whole real templates are checked in tests/py/test_template_parity.py.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "aiinfra/template.h"

typedef struct render_case { const char *src, *ctx, *want; } render_case;

static const render_case RENDER_CASES[] = {
    { "a\n  {% if true %}\nb\n  {% endif %}\nc\n",
      "{}",
      "a\nb\nc" },
    { "{{ 1.0 }}|{{ 1e20 }}|{{ 0.1+0.2 }}|{{ 10/4 }}|{{ 7//2 }}|{{ -7//2 }}|{{ -7 % 3 }}|{{ 2**10 }}|{{ 1e-5 }}|{{ 123456789.0*1e8 }}",
      "{}",
      "1.0|1e+20|0.30000000000000004|2.5|3|-4|2|1024|1e-05|1.23456789e+16" },
    { "{{ 'h\303\251llo'[1] }}{{ 'h\303\251llo'|length }}{{ 'abcdef'[::-2] }}{{ [1,2,3][-1] }}{{ 'h\303\251llo'[1:3] }}",
      "{}",
      "\303\2515fdb3\303\251l" },
    { "{{ {'a': 1, 'b': [True, None, 'x', \"it's\"]} }}",
      "{}",
      "{'a': 1, 'b': [True, None, 'x', \"it's\"]}" },
    { "{{ {'k': '\303\274\"\\n\\u0001', 'n': [1, 2.5, none, true]} | tojson }}",
      "{}",
      "{\"k\": \"\303\274\\\"\\n\\u0001\", \"n\": [1, 2.5, null, true]}" },
    { "{{ {'a': [1, {}], 'b': []} | tojson(indent=2) }}",
      "{}",
      "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}" },
    { "{% for x in 'abc' %}{{ loop.index }}{{ x }}{% if loop.last %}!{% endif %}{% endfor %}",
      "{}",
      "1a2b3c!" },
    { "{% for x in range(10) if x is odd %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}",
      "{}",
      "153555" },
    { "{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
      "{}",
      "3" },
    { "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}",
      "{}",
      "1" },
    { "{% macro m(a, b='d') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}",
      "{}",
      "[1d][23]" },
    { "{% set s %}x{{ 1 }}{% endset %}{{ s|length }}",
      "{}",
      "2" },
    { "{{ '  a,b ,c '.strip().split(',') }}{{ 'a b  c'.split() }}{{ 'x.y.z'.rsplit('.', 1) }}{{ 'Hello'.startswith(('He', 'x')) }}",
      "{}",
      "['a', 'b ', 'c']['a', 'b', 'c']['x.y', 'z']True" },
    { "{{ [3,1,2]|sort|join(',') }}{{ ['B','a']|sort|join }}{{ {'b':1,'A':2}|dictsort }}",
      "{}",
      "1,2,3aB[('A', 2), ('b', 1)]" },
    { "{{ 'a\nb\n\nc'|indent(2) }}|{{ 'x'|indent(2, true) }}",
      "{}",
      "a\n  b\n\n  c|  x" },
    { "{{ none is none }}{{ x is defined }}{{ 3 is divisibleby 3 }}{{ none.x }}{{ foo }}",
      "{}",
      "TrueFalseTrue" },
    { "{%- for k, v in d.items() -%} {{ k }}={{ v }} {%+ endfor %}",
      "{\"d\": {\"z\": 1, \"a\": 2}}",
      "z=1 a=2 " },
    { "{{ '<a>'|safe + '&' }}{{ 'x' ~ 1 ~ none }}{{ [1,2]|map('string')|join('-') }}{{ [{'a':1},{'a':2}]|selectattr('a','equalto',2)|list }}",
      "{}",
      "<a>&amp;x1None1-2[{'a': 2}]" },
    { "{{ 'Hello wORLD-x'|title }}|{{ 'hello wORLD-x'.title() }}|{{ 'aBc'|capitalize }}|{{ ' x '|trim }}|{{ 'aXbX'.replace('X','y', 1) }}",
      "{}",
      "Hello World-X|Hello World-X|Abc|x|aybX" },
    { "{{ 3.7|int }}{{ '12'|int + 1 }}{{ 'x'|int }}{{ '2.5'|float }}{{ 2.675|round(2) }}{{ 2.5|round }}{{ -3|abs }}",
      "{}",
      "31302.52.672.03" },
};

/* renders src with JSON ctx; returns malloc'd output or NULL with *err filled */
static char *render(const char *src, const char *ctx_json, ai_err *err)
{
    chat_template *t = NULL;
    if (chat_template_parse(&t, src, strlen(src), err) != AI_OK) return NULL;
    cJSON *ctx = cJSON_Parse(ctx_json ? ctx_json : "{}");
    buf out;
    buf_init(&out);
    ai_status st = chat_template_render_at(t, ctx, 0, &out, err);
    cJSON_Delete(ctx);
    chat_template_free(t);
    if (st != AI_OK) { buf_free(&out); return NULL; }
    if (!out.data) return strdup("");
    return buf_detach(&out);
}

static void test_render_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof RENDER_CASES / sizeof RENDER_CASES[0]; i++) {
        ai_err err = { 0 };
        char *got = render(RENDER_CASES[i].src, RENDER_CASES[i].ctx, &err);
        if (!got) fail_msg("case %zu (%s): %s", i, RENDER_CASES[i].src, err.msg);
        if (strcmp(got, RENDER_CASES[i].want) != 0)
            fail_msg("case %zu (%s):\n got  [%s]\n want [%s]", i, RENDER_CASES[i].src, got, RENDER_CASES[i].want);
        free(got);
    }
}

/* a render that must fail with a message containing `want` */
static void expect_error(const char *src, const char *ctx, const char *want)
{
    ai_err err = { 0 };
    char *got = render(src, ctx, &err);
    if (got) fail_msg("%s: rendered [%.80s] but should fail with '%s'", src, got, want);
    if (!strstr(err.msg, want)) fail_msg("%s: error '%s' lacks '%s'", src, err.msg, want);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("\n\n{{ raise_exception('boom') }}", NULL, "template line 3: raise_exception: boom");
    expect_error("a\n{% if x %}\nb", NULL, "template line 3: unexpected end of template, expected 'endif'");
    expect_error("{% include 'x.j2' %}", NULL, "template line 1: unsupported statement 'include'");
    expect_error("\n{{ x | xmlattr }}", NULL, "template line 2: unsupported filter 'xmlattr'");
    expect_error("{{ 'a' < 1 }}", NULL, "'<' not supported between instances of 'str' and 'int'");
    expect_error("{{ 'a' + 1 }}", NULL, "unsupported operand type(s) for +: 'str' and 'int'");
    expect_error("{{ foo.bar }}", NULL, "'foo' is undefined");
    expect_error("{% set l = [] %}{{ l.append(1) }}", NULL, "unsafe");
    expect_error("{{ 1 // 0 }}", NULL, "division or modulo by zero");
    expect_error("{{ 'x' ", NULL, "unexpected end of template");
    expect_error("{{ 'abc }}", NULL, "unterminated string literal");
    expect_error("{{ [1,2] | tojson }}{{ [1,2]|map('string')|tojson }}", NULL, "not JSON serializable");
    expect_error("{% for a, b in [1] %}{% endfor %}", NULL, "'int' object is not iterable");
    expect_error("{% for a, b in [[1, 2, 3]] %}{% endfor %}", NULL, "cannot unpack");
    expect_error("{% endif %}", NULL, "unexpected 'endif'");
    expect_error("{{ 99999999999999999999 }}", NULL, "too large");
}

static void test_limits(void **state)
{
    (void)state;
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, "nested deeper");
    expect_error("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}", NULL, "output larger than");
    expect_error("{% for i in range(100000) %}{% for j in range(100) %}{% endfor %}{% endfor %}", NULL,
                 "loop iterations");
    expect_error("{{ 'x' * 100000000000 }}", NULL, "too large");
    expect_error("{{ range(1000000000) }}", NULL, "range too big");
    /* 5000 nested parentheses / lists: a clear error, no stack overflow */
    size_t n = 5000;
    char *src = malloc(2 * n + 8);
    strcpy(src, "{{ ");
    for (size_t i = 0; i < n; i++) src[3 + i] = '[';
    for (size_t i = 0; i < n; i++) src[3 + n + i] = ']';
    strcpy(src + 3 + 2 * n, " }}");
    expect_error(src, NULL, "nesting deeper than");
    free(src);
}

static void test_whitespace_control(void **state)
{
    (void)state;
    /* trim_blocks + lstrip_blocks, "-" and "+" modifiers, comments (Jinja2 semantics) */
    ai_err err = { 0 };
    char *got = render("  {#- c -#}  x  {%- if true -%}  y  {%- endif %}\n  {%+ if true %}z{% endif %}\n", NULL, &err);
    assert_non_null(got);
    assert_string_equal(got, "xy  z");
    free(got);
    got = render("a\r\n  {% if true %}\r\nb\r\n{% endif %}\r\n", NULL, &err);
    assert_non_null(got);
    assert_string_equal(got, "a\nb\n");
    free(got);
}

static void test_strftime_now(void **state)
{
    (void)state;
    setenv("TZ", "UTC", 1);
    tzset();
    chat_template *t = NULL;
    ai_err err;
    const char *src = "{{ strftime_now('%Y-%m-%d %d %b %Y') }}";
    assert_int_equal(chat_template_parse(&t, src, strlen(src), &err), AI_OK);
    buf out;
    buf_init(&out);
    assert_int_equal(chat_template_render_at(t, NULL, 1764547200, &out, &err), AI_OK);
    assert_string_equal(out.data, "2025-12-01 01 Dec 2025");
    buf_free(&out);
    chat_template_free(t);
}

typedef struct thread_arg { const chat_template *t; const char *want; int ok; } thread_arg;

static void *render_thread(void *p)
{
    thread_arg *a = p;
    cJSON *ctx = cJSON_Parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"yo\"}]}");
    a->ok = 1;
    for (int i = 0; i < 200; i++) {
        buf out;
        buf_init(&out);
        ai_err err;
        if (chat_template_render_at(a->t, ctx, 0, &out, &err) != AI_OK || strcmp(out.data, a->want) != 0) a->ok = 0;
        buf_free(&out);
    }
    cJSON_Delete(ctx);
    return NULL;
}

static void test_concurrent_renders(void **state)
{
    (void)state;
    const char *src = "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% if not loop.last %}|{% endif %}"
                      "{% endfor %}{% set ns = namespace(k=0) %}{% for m in messages %}{% set ns.k = ns.k + 1 %}{% endfor %}"
                      "#{{ ns.k }}";
    chat_template *t = NULL;
    ai_err err;
    assert_int_equal(chat_template_parse(&t, src, strlen(src), &err), AI_OK);
    pthread_t th[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){ t, "<user>hi|<assistant>yo#2", 0 };
        pthread_create(&th[i], NULL, render_thread, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].ok, 1);
    }
    chat_template_free(t);
}

static void test_output_restored_on_error(void **state)
{
    (void)state;
    chat_template *t = NULL;
    ai_err err;
    const char *src = "partial{{ raise_exception('no') }}";
    assert_int_equal(chat_template_parse(&t, src, strlen(src), &err), AI_OK);
    buf out;
    buf_init(&out);
    buf_puts(&out, "keep");
    assert_int_equal(chat_template_render_at(t, NULL, 0, &out, &err), AI_ERR_RUNTIME);
    assert_string_equal(out.data, "keep");
    buf_free(&out);
    chat_template_free(t);
}

static void test_normalize_messages(void **state)
{
    (void)state;
    cJSON *m = cJSON_Parse("[{\"role\":\"assistant\",\"content\":null,\"reasoning\":\"r\"}]");
    ai_err err;
    assert_int_equal(chat_messages_normalize(m, &err), AI_OK);
    char *s = cJSON_PrintUnformatted(m);
    /* transformers: {"thinking": r, **message (None dropped), "reasoning_content": r} */
    assert_string_equal(s, "[{\"thinking\":\"r\",\"role\":\"assistant\",\"reasoning\":\"r\",\"reasoning_content\":\"r\"}]");
    free(s);
    cJSON_Delete(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_cases),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_whitespace_control),
        cmocka_unit_test(test_strftime_now),
        cmocka_unit_test(test_concurrent_renders),
        cmocka_unit_test(test_output_restored_on_error),
        cmocka_unit_test(test_normalize_messages),
    };
    return cmocka_run_group_tests_name("template", tests, NULL, NULL);
}
