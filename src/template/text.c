/* text.c - Unicode-aware string helpers shared by filters and str methods.
 *
 * Case mapping goes through utf8proc per code point (Python's special multi-character
 * mappings such as German sharp s -> "SS" are not reproduced). Whitespace is Python's
 * str.isspace() set, so strip()/split() with no argument behave like CPython.
 */
#include <string.h>
#include <utf8proc.h>

#include "template/text.h"

bool cp_is_space(int32_t cp)
{
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F) || cp == 0x85 || cp == 0xA0) return true;
    if (cp < 0x1680) return false;
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

int32_t cp_decode(const char *s, size_t n, size_t *len)
{
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &cp);
    if (k <= 0) { *len = 1; return (unsigned char)s[0]; }
    *len = (size_t)k;
    return cp;
}

void cp_put(buf *b, int32_t cp)
{
    utf8proc_uint8_t tmp[4];
    utf8proc_ssize_t k = utf8proc_encode_char(cp, tmp);
    buf_append(b, tmp, (size_t)k);
}

int32_t cp_upper(int32_t cp) { return cp < 0x80 ? (cp >= 'a' && cp <= 'z' ? cp - 32 : cp) : utf8proc_toupper(cp); }
int32_t cp_lower(int32_t cp) { return cp < 0x80 ? (cp >= 'A' && cp <= 'Z' ? cp + 32 : cp) : utf8proc_tolower(cp); }
bool cp_is_alpha(int32_t cp)
{
    if (cp < 0x80) return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
    utf8proc_category_t c = utf8proc_category(cp);
    return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}
bool cp_is_digit(int32_t cp)
{
    if (cp < 0x80) return cp >= '0' && cp <= '9';
    return utf8proc_category(cp) == UTF8PROC_CATEGORY_ND;
}
bool cp_is_cased_upper(int32_t cp) { return cp_lower(cp) != cp; }
bool cp_is_cased_lower(int32_t cp) { return cp_upper(cp) != cp; }

/* strip set: NULL = whitespace */
static bool in_set(int32_t cp, const char *set, size_t setn)
{
    if (!set) return cp_is_space(cp);
    for (size_t i = 0; i < setn;) {
        size_t k;
        if (cp_decode(set + i, setn - i, &k) == cp) return true;
        i += k;
    }
    return false;
}

void str_strip(const char *s, size_t n, const char *set, size_t setn, bool left, bool right, size_t *a, size_t *b)
{
    size_t i = 0, j = n;
    if (left)
        while (i < j) {
            size_t k;
            int32_t cp = cp_decode(s + i, j - i, &k);
            if (!in_set(cp, set, setn)) break;
            i += k;
        }
    if (right)
        while (j > i) {
            size_t p = j - 1;
            while (p > i && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
            size_t k;
            int32_t cp = cp_decode(s + p, j - p, &k);
            if (!in_set(cp, set, setn)) break;
            j = p;
        }
    *a = i;
    *b = j;
}

void str_case(buf *out, const char *s, size_t n, int mode)
{
    bool prev_cased = false, first = true;
    for (size_t i = 0; i < n;) {
        size_t k;
        int32_t cp = cp_decode(s + i, n - i, &k);
        int32_t o = cp;
        switch (mode) {
        case CASE_UPPER: o = cp_upper(cp); break;
        case CASE_LOWER: o = cp_lower(cp); break;
        case CASE_CAPITALIZE: o = first ? cp_upper(cp) : cp_lower(cp); break;
        case CASE_TITLE: /* Python str.title: upper after an uncased char, lower after a cased one */
            o = prev_cased ? cp_lower(cp) : cp_upper(cp);
            prev_cased = cp_is_alpha(cp);
            break;
        }
        first = false;
        cp_put(out, o);
        i += k;
    }
}

bool line_break_at(const char *s, size_t n, size_t i, size_t *len)
{
    unsigned char ch = (unsigned char)s[i];
    if (ch == '\r') { *len = (i + 1 < n && s[i + 1] == '\n') ? 2 : 1; return true; }
    if (ch == '\n' || ch == '\v' || ch == '\f' || ch == 0x1c || ch == 0x1d || ch == 0x1e) { *len = 1; return true; }
    if (ch == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] == 0x85) { *len = 2; return true; }
    if (ch == 0xE2 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
        ((unsigned char)s[i + 2] == 0xA8 || (unsigned char)s[i + 2] == 0xA9)) { *len = 3; return true; }
    return false;
}

const char *mem_find(const char *h, size_t hn, const char *nd, size_t nn, size_t from)
{
    if (nn == 0) return from <= hn ? h + from : NULL;
    for (size_t i = from; i + nn <= hn; i++)
        if (h[i] == nd[0] && memcmp(h + i, nd, nn) == 0) return h + i;
    return NULL;
}

const char *mem_rfind(const char *h, size_t hn, const char *nd, size_t nn)
{
    if (nn > hn) return NULL;
    for (size_t i = hn - nn + 1; i-- > 0;)
        if (memcmp(h + i, nd, nn) == 0) return h + i;
    return NULL;
}
