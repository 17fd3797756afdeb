/* bytelevel.c - GPT-2's reversible byte <-> printable-char mapping.
 *
 * Byte-level BPE vocabularies spell every byte as a printable code point: the bytes
 * '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves, the other 68 bytes map in
 * order to U+0100..U+0143 (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A). We undo the
 * mapping once, at load time, so that encoding works on raw bytes and never builds the
 * mapped string (tok_internal.h invariant 2).
 */
#include "tokenizer/tok_internal.h"
#include "aiinfra/utf8.h"

static bool self_mapped(unsigned b)
{
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

/* The 68 remapped bytes, in order: 0x00..0x20, 0x7F..0xA0, 0xAD -> U+0100.. */
static uint32_t byte_to_cp(unsigned b)
{
    if (self_mapped(b)) return b;
    if (b <= 32) return 256 + b;
    if (b >= 127 && b <= 160) return 256 + 33 + (b - 127);
    return 256 + 67;  /* 0xAD */
}

/* Inverse: code point -> byte, or -1. */
static int cp_to_byte(uint32_t cp)
{
    if (cp < 256) return self_mapped(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    unsigned n = cp - 256;
    if (n < 33) return (int)n;
    if (n < 67) return (int)(127 + n - 33);
    return 173;
}

void bytelevel_encode(buf *out, const char *s, size_t n)
{
    char tmp[4];
    for (size_t i = 0; i < n; i++) {
        size_t k = utf8_encode(byte_to_cp((unsigned char)s[i]), tmp);
        buf_append(out, tmp, k);
    }
}

bool bytelevel_decode(buf *out, const char *s, size_t n)
{
    size_t start = out->len, i = 0;
    const unsigned char *p = (const unsigned char *)s;
    while (i < n) {
        uint32_t cp;
        size_t k = utf8_decode(p + i, n - i, &cp);
        int b = cp_to_byte(cp);
        if (b < 0) { out->len = start; if (out->data) out->data[start] = '\0'; return false; }
        buf_putc(out, (char)b);
        i += k;
    }
    return true;
}
