/* worker/_json_check.h: the JSON check of worker._encode (included by _encode.c only).
 *
 * json_valid(p, len, max_depth) says whether p[0:len] is strict RFC 8259 JSON text in UTF-8
 * (whitespace around it allowed), with the verdicts of orjson.loads but without building
 * objects: 1 valid, 0 not, -1 error (exception set). max_depth is orjson's nesting limit
 * (-1: none). Every function reads the bytes between a pointer and `end`, never past it.
 * tests/unit/test_native_encode.py compares the verdicts with orjson's on a table of tricky
 * inputs and on mutated documents.
 *
 * Needs Python.h, stdint.h and string.h included first.
 */
#ifndef FERRY_JSON_CHECK_H
#define FERRY_JSON_CHECK_H

#include "../ferry/_json_bytes.h"

static int hex4(const unsigned char *p, const unsigned char *end) {
    if (end - p < 4) return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        int d = IS_DIGIT(c) ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v << 4 | d;
    }
    return v;
}

/* A string from its opening quote; *pp moves past the closing one. 1 valid, 0 not. */
static int scan_string(const unsigned char **pp, const unsigned char *end) {
    const unsigned char *p = *pp + 1;
    for (;;) {
        p = skip_plain(p, end); /* the common case first */
        if (p >= end) return 0;
        unsigned char c = *p;
        if (c == '"') {
            *pp = p + 1;
            return 1;
        }
        if (c == '\\') {
            if (++p >= end) return 0;
            switch (*p) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                p++;
                continue;
            case 'u':
                break;
            default:
                return 0;
            }
            int cp = hex4(p + 1, end);
            if (cp < 0) return 0;
            p += 5;
            /* orjson rejects a lone surrogate: a high one must be followed at once by an
             * escaped low one, and a low one alone is an error. */
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u') return 0;
                int low = hex4(p + 2, end);
                if (low < 0xDC00 || low > 0xDFFF) return 0;
                p += 6;
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return 0;
            }
            continue;
        }
        if (c < 0x20) return 0; /* control characters must be escaped */
        int n = utf8_len(p, end);
        if (n == 0) return 0;
        p += n;
    }
}

/* A number per the grammar; *pp moves past it. 1 valid, 0 not, -1 error (exception set).
 *
 * orjson also rejects a number whose value as a double is infinite (1e400, 400 digits):
 * the decimal exponent of the first significant digit decides, and only at exponent 308,
 * next to DBL_MAX, is the number converted (correctly rounded, as orjson does). */
static int scan_number(const unsigned char **pp, const unsigned char *end) {
    const unsigned char *start = *pp, *p = *pp, *q;
    if (*p == '-') p++;
    if (p >= end) return 0;
    Py_ssize_t int_digits = 0, first_frac = 0; /* first_frac: 1-based, 0: none non-zero */
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        for (q = p; p < end && IS_DIGIT(*p); p++) {}
        int_digits = p - q;
    } else {
        return 0;
    }
    if (p < end && *p == '.') {
        for (q = ++p; p < end && IS_DIGIT(*p); p++)
            if (*p != '0' && first_frac == 0) first_frac = p - q + 1;
        if (p == q) return 0;
    }
    long long exp = 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        int negative = 0;
        if (++p < end && (*p == '+' || *p == '-')) negative = *p++ == '-';
        for (q = p; p < end && IS_DIGIT(*p); p++)
            if (exp < 1000000000000000LL) exp = exp * 10 + (*p - '0'); /* saturates: any such exponent decides */
        if (p == q) return 0;
        if (negative) exp = -exp;
    }
    *pp = p;
    long long magnitude;
    if (int_digits) magnitude = (long long)int_digits - 1 + exp;
    else if (first_frac) magnitude = exp - first_frac;
    else return 1; /* zero */
    if (magnitude != 308) return magnitude < 308;

    size_t n = (size_t)(p - start);
    char small[64], *s = n < sizeof small ? small : PyMem_Malloc(n + 1);
    if (s == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(s, start, n);
    s[n] = '\0';
    /* Locale-independent; returns +-HUGE_VAL on overflow without raising. */
    double d = PyOS_string_to_double(s, NULL, NULL);
    if (s != small) PyMem_Free(s);
    if (d == -1.0 && PyErr_Occurred()) return -1;
    return !Py_IS_INFINITY(d);
}

/* 1: strict JSON text (whitespace around it allowed), 0: not, -1: error (exception set).
 * Iterative: the open containers are a stack of bytes ('[' or '{'), on the C stack up to
 * 256 levels and grown on the heap past that; max_depth < 0: no limit. */
static int json_valid(const unsigned char *p, Py_ssize_t len, Py_ssize_t max_depth) {
    const unsigned char *end = p + len;
    unsigned char small[256], *stack = small;
    size_t cap = sizeof small, depth = 0;
    int ok = 0, r;

    while (p < end && IS_WS(*p)) p++;
value:
    if (p >= end) goto done;
    switch (*p) {
    case '{':
    case '[':
        if (max_depth >= 0 && depth >= (size_t)max_depth) goto done;
        if (depth == cap) {
            unsigned char *grown = PyMem_Malloc(cap * 2);
            if (grown == NULL) {
                PyErr_NoMemory();
                ok = -1;
                goto done;
            }
            memcpy(grown, stack, cap);
            if (stack != small) PyMem_Free(stack);
            stack = grown;
            cap *= 2;
        }
        stack[depth++] = *p++;
        while (p < end && IS_WS(*p)) p++;
        if (stack[depth - 1] == '[') {
            if (p < end && *p == ']') {
                p++;
                depth--;
                goto after;
            }
            goto value;
        }
        if (p < end && *p == '}') {
            p++;
            depth--;
            goto after;
        }
        goto key;
    case '"':
        r = scan_string(&p, end);
        break;
    case 't':
        r = scan_literal(&p, end, "true", 4);
        break;
    case 'f':
        r = scan_literal(&p, end, "false", 5);
        break;
    case 'n':
        r = scan_literal(&p, end, "null", 4);
        break;
    default:
        if (*p != '-' && !IS_DIGIT(*p)) goto done;
        r = scan_number(&p, end);
        break;
    }
    if (r <= 0) {
        ok = r;
        goto done;
    }
after:
    while (p < end && IS_WS(*p)) p++;
    if (depth == 0) {
        ok = p == end;
        goto done;
    }
    if (p >= end) goto done;
    if (*p == ',') {
        p++;
        while (p < end && IS_WS(*p)) p++;
        if (stack[depth - 1] == '[') goto value;
        goto key;
    }
    if (*p != (stack[depth - 1] == '[' ? ']' : '}')) goto done;
    p++;
    depth--;
    goto after;
key: /* an object member; whitespace before it is skipped */
    if (p >= end || *p != '"' || !scan_string(&p, end)) goto done;
    while (p < end && IS_WS(*p)) p++;
    if (p >= end || *p != ':') goto done;
    p++;
    while (p < end && IS_WS(*p)) p++;
    goto value;
done:
    if (stack != small) PyMem_Free(stack);
    return ok;
}

#endif /* FERRY_JSON_CHECK_H */
