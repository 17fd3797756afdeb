/* utf8.h - UTF-8 decoding helpers shared by the tokenizer and the template engine.
 *
 * Invalid input follows Python's bytes.decode("utf-8", errors="replace"):
 * each maximal ill-formed subsequence becomes one U+FFFD. */
#ifndef AIINFRA_UTF8_H
#define AIINFRA_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "aiinfra/buf.h"

/* Decodes one code point at s[0..n). Returns the number of bytes consumed
 * (>= 1 when n >= 1) and stores the code point, or 0xFFFD for an ill-formed
 * sequence (then the return value is the length of its maximal subpart). */
size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* Encodes cp into out (4 bytes room); returns the byte count (1..4). */
size_t utf8_encode(uint32_t cp, char *out);

/* Length of a valid, complete UTF-8 sequence starting with byte c (1..4), 0 if c is a continuation/invalid lead. */
size_t utf8_seq_len(unsigned char c);

/* 1 if s[0..n) is entirely well-formed UTF-8. */
int utf8_valid(const char *s, size_t n);

/* Appends s[0..n) to out with every ill-formed subsequence replaced by U+FFFD. */
void utf8_sanitize(buf *out, const char *s, size_t n);

/* Number of bytes at the end of s[0..n) that form an incomplete (but so far
 * valid) UTF-8 sequence: what a streaming decoder must hold back. */
size_t utf8_incomplete_tail(const char *s, size_t n);

#endif
