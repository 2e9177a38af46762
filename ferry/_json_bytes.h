/* ferry/_json_bytes.h: byte-level pieces of JSON text shared by the C readers of JSON (the
 * worker's JSON check, worker/_json_check.h, and the gateway's body reader, gateway/_body.h).
 *
 * Needs stdint.h and string.h included first.
 */
#ifndef FERRY_JSON_BYTES_H
#define FERRY_JSON_BYTES_H

#define IS_WS(c) ((c) == ' ' || (c) == '\t' || (c) == '\n' || (c) == '\r')
#define IS_DIGIT(c) ((c) >= '0' && (c) <= '9')

/* The length of the UTF-8 sequence at p (p[0] >= 0x80), or 0 when it is not valid:
 * overlong forms, UTF-16 surrogates (ED A0..BF) and code points above U+10FFFF are not. */
static int utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    int n;
    unsigned char lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) n = 3, lo = 0xA0;
    else if (c == 0xED) n = 3, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) n = 3;
    else if (c == 0xF0) n = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else if (c == 0xF4) n = 4, hi = 0x8F;
    else return 0;
    if (end - p < n || p[1] < lo || p[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    return n;
}

/* Whether any of the 8 bytes of w may need a closer look in a string: a quote, a
 * backslash, a control character or a non-ASCII byte. False positives are harmless (the
 * bytes are then looked at one by one), there are no false negatives: a byte below 0x20
 * borrows in w - 0x20..20 and sets its high bit, and (v - 0x01..01) & ~v has the high bit
 * of a zero byte of v set ("Bit Twiddling Hacks", haszero). */
static inline uint64_t may_need_look(uint64_t w) {
    const uint64_t ones = 0x0101010101010101ULL;
    uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
    return (((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) | (w - ones * 0x20) | w) &
           0x8080808080808080ULL;
}

/* Past the bytes of a string's text that need no closer look (printable ASCII other than the
 * quote and the backslash), from p: 8 bytes at a time, then byte by byte. */
static inline const unsigned char *skip_plain(const unsigned char *p, const unsigned char *end) {
    for (uint64_t w; end - p >= 8 && (memcpy(&w, p, 8), !may_need_look(w));) p += 8;
    while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') p++;
    return p;
}

/* The literal `word` (n bytes: true, false, null) at *pp; *pp moves past it. 1 there, 0 not. */
static int scan_literal(const unsigned char **pp, const unsigned char *end, const char *word, size_t n) {
    if ((size_t)(end - *pp) < n || memcmp(*pp, word, n) != 0) return 0;
    *pp += n;
    return 1;
}

#endif /* FERRY_JSON_BYTES_H */
