#include "aiinfra/utf8.h"

size_t utf8_seq_len(unsigned char c)
{
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* Valid range of the second byte for a given lead (Unicode Table 3-7). */
static void second_range(unsigned char lead, unsigned char *lo, unsigned char *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (lead == 0xE0) *lo = 0xA0;
    else if (lead == 0xED) *hi = 0x9F;
    else if (lead == 0xF0) *lo = 0x90;
    else if (lead == 0xF4) *hi = 0x8F;
}

size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (n == 0) { *cp = 0xFFFD; return 0; }
    unsigned char c = s[0];
    size_t len = utf8_seq_len(c);
    if (len == 1) { *cp = c; return 1; }
    if (len == 0) { *cp = 0xFFFD; return 1; }
    unsigned char lo, hi;
    second_range(c, &lo, &hi);
    uint32_t v = c & (0xFF >> (len + 1));
    for (size_t i = 1; i < len; i++) {
        if (i >= n) { *cp = 0xFFFD; return i; }
        unsigned char b = s[i];
        unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) { *cp = 0xFFFD; return i; }
        v = (v << 6) | (b & 0x3F);
    }
    *cp = v;
    return len;
}

size_t utf8_encode(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp > 0x10FFFF) cp = 0xFFFD;
    if (cp == 0xFFFD) return utf8_encode(cp, out);
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

int utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) { i++; continue; }
        uint32_t cp;
        size_t k = utf8_decode(p + i, n - i, &cp);
        if (cp == 0xFFFD && !(k == 3 && p[i] == 0xEF && p[i + 1] == 0xBF && p[i + 2] == 0xBD)) return 0;
        i += k;
    }
    return 1;
}

void utf8_sanitize(buf *out, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        if (p[i] < 0x80) { i++; continue; }
        uint32_t cp;
        size_t k = utf8_decode(p + i, n - i, &cp);
        int bad = cp == 0xFFFD && !(k == 3 && p[i] == 0xEF && p[i + 1] == 0xBF && p[i + 2] == 0xBD);
        if (bad) {
            buf_append(out, s + run, i - run);
            buf_append(out, "\xEF\xBF\xBD", 3);
            run = i + k;
        }
        i += k;
    }
    buf_append(out, s + run, n - run);
}

size_t utf8_incomplete_tail(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    /* Look back at most 3 bytes for a lead byte whose sequence runs past the end. */
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = p[n - back];
        if ((c & 0xC0) == 0x80) continue; /* continuation: keep looking */
        size_t len = utf8_seq_len(c);
        if (len <= back) return 0;        /* complete (or invalid lead) */
        uint32_t cp;
        size_t k = utf8_decode(p + n - back, back, &cp);
        return k == back ? back : 0;      /* a valid prefix so far: hold it back */
    }
    return 0;
}
