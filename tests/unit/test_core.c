/* test_core.c - status, buf, utf8 helpers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "aiinfra/buf.h"
#include "aiinfra/status.h"
#include "aiinfra/utf8.h"

static void test_err_prefix(void **state)
{
    (void)state;
    ai_err e;
    assert_int_equal(ai_err_set(&e, AI_ERR_FORMAT, "bad magic %x", 0x12), AI_ERR_FORMAT);
    ai_err_prefix(&e, "%s", "file.gguf");
    assert_string_equal(e.msg, "file.gguf: bad magic 12");
    assert_int_equal(e.code, AI_ERR_FORMAT);
}

static void test_buf(void **state)
{
    (void)state;
    buf b;
    buf_init(&b);
    for (int i = 0; i < 1000; i++) buf_printf(&b, "%d,", i);
    assert_int_equal(b.len, strlen(b.data));
    assert_memory_equal(b.data, "0,1,2,", 6);
    char *s = buf_detach(&b);
    assert_null(b.data);
    free(s);
}

static void test_utf8_decode(void **state)
{
    (void)state;
    uint32_t cp;
    assert_int_equal(utf8_decode((const unsigned char *)"\xE4\xB8\xAD", 3, &cp), 3);
    assert_int_equal(cp, 0x4E2D);
    assert_int_equal(utf8_decode((const unsigned char *)"\xF0\x9F\x98\x80", 4, &cp), 4);
    assert_int_equal(cp, 0x1F600);
    /* truncated: maximal subpart is the two valid bytes */
    assert_int_equal(utf8_decode((const unsigned char *)"\xE4\xB8", 2, &cp), 2);
    assert_int_equal(cp, 0xFFFD);
    /* surrogate lead E0 80 is ill-formed after one byte */
    assert_int_equal(utf8_decode((const unsigned char *)"\xED\xA0\x80", 3, &cp), 1);
    char out[4];
    assert_int_equal(utf8_encode(0x1F600, out), 4);
    assert_memory_equal(out, "\xF0\x9F\x98\x80", 4);
}

static void test_utf8_sanitize(void **state)
{
    (void)state;
    buf b;
    buf_init(&b);
    /* Python: b"a\xffb\xe4\xb8c\xef\xbf\xbd".decode("utf-8","replace") */
    utf8_sanitize(&b, "a\xff" "b\xe4\xb8" "c\xef\xbf\xbd", 9);
    assert_string_equal(b.data, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c\xEF\xBF\xBD");
    assert_true(utf8_valid(b.data, b.len));
    assert_false(utf8_valid("\xC0\xAF", 2));
    buf_free(&b);
    assert_int_equal(utf8_incomplete_tail("ab\xE4\xB8", 4), 2);
    assert_int_equal(utf8_incomplete_tail("ab\xE4\xB8\xAD", 5), 0);
    assert_int_equal(utf8_incomplete_tail("ab\xF0", 3), 1);
    assert_int_equal(utf8_incomplete_tail("ab\xFF", 3), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_err_prefix),
        cmocka_unit_test(test_buf),
        cmocka_unit_test(test_utf8_decode),
        cmocka_unit_test(test_utf8_sanitize),
    };
    return cmocka_run_group_tests_name("core", tests, NULL, NULL);
}
