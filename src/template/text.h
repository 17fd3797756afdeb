/* text.h - Unicode string helpers for the template engine (Python str semantics). */
#ifndef AIINFRA_TEMPLATE_TEXT_H
#define AIINFRA_TEMPLATE_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "aiinfra/buf.h"

enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE };

bool cp_is_space(int32_t cp);
bool cp_is_alpha(int32_t cp);
bool cp_is_digit(int32_t cp);
bool cp_is_cased_upper(int32_t cp);
bool cp_is_cased_lower(int32_t cp);
int32_t cp_upper(int32_t cp);
int32_t cp_lower(int32_t cp);
int32_t cp_decode(const char *s, size_t n, size_t *len);  /* invalid byte -> itself, len 1 */
void cp_put(buf *b, int32_t cp);
/* [*a, *b) of s after stripping code points in set (NULL = whitespace) */
void str_strip(const char *s, size_t n, const char *set, size_t setn, bool left, bool right, size_t *a, size_t *b);
void str_case(buf *out, const char *s, size_t n, int mode);
/* str.splitlines() boundaries */
bool line_break_at(const char *s, size_t n, size_t i, size_t *len);
const char *mem_find(const char *h, size_t hn, const char *nd, size_t nn, size_t from);
const char *mem_rfind(const char *h, size_t hn, const char *nd, size_t nn);

#endif
