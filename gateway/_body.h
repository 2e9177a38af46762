/* gateway/_body.h: a produce request's body read straight from its bytes, in the common case
 * (included by _plain.c only).
 *
 * A body {"records": [R, ...]} whose every record is plain ({"key"?: string | null, "value"?:
 * any}, nothing else) is read here without building its JSON objects: each record comes out as
 * spans of the body (next_record). The gateway writes a value that is not a string as
 * orjson.dumps(orjson.loads(its text)); a span is taken only where that is the text itself, less
 * its whitespace. Any other body, and any doubt, is "not plain" (-1): the caller then reads it the
 * long way (records.loads and parse_request), which makes or refuses it. So this reader only has to
 * be right about the bodies it takes: strict RFC 8259 JSON in valid UTF-8, and
 *   - strings: in a value, only the escapes orjson writes (\" \\ \b \f \n \r \t); in a key or a
 *     value that is a string, also \/ (they are decoded: decode_string); never \u;
 *   - numbers: integers of at most 18 digits, not -0; decimals without an exponent that are
 *     their own shortest form (1.5 and 0.25, not 1.50, 1e3 or 0.00001), which is how orjson writes
 *     a double in that range (the same digits as Python's repr);
 *   - objects: at most MAX_MEMBERS members, none named twice (orjson keeps the last);
 *   - nesting: at most MAX_NESTING levels in a value;
 *   - at most `most` records, and at least one.
 * Every function reads the bytes between a pointer and `end`, never past it.
 *
 * tests/unit/test_gateway_body.py compares what it takes with parse_request on tables and random
 * bodies; tests/support/fuzz_native.py fuzzes it ("body"), also under ASan/UBSan.
 *
 * Needs Python.h, stdint.h and string.h included first.
 */
#ifndef FERRY_GATEWAY_BODY_H
#define FERRY_GATEWAY_BODY_H

#include "../ferry/_json_bytes.h"

#define MAX_MEMBERS 32
#define MAX_NESTING 64
#define MAX_DECIMAL 32 /* bytes of a decimal number's text */

enum { NOT_PLAIN = -1, FAILED = -2 }; /* FAILED: an exception is set (memory) */
enum { V_NONE, V_STRING, V_JSON };

typedef struct {
    const unsigned char *p, *end; /* the next byte to read; the body's end */
    Py_ssize_t left;              /* how many more records may come */
    int state;                    /* 0: before the list, 1: in it, 2: after it */
} body_reader;

typedef struct {
    const unsigned char *key; /* NULL: no key (absent or null) */
    Py_ssize_t key_len;
    int key_escaped;
    int kind; /* V_NONE (absent or null), V_STRING (the string's bytes), V_JSON (its text) */
    const unsigned char *val;
    Py_ssize_t val_len;
    int val_flag; /* V_STRING: it holds escapes; V_JSON: it holds whitespace */
} plain_record;

/* Past whitespace; *seen set when there was some. */
static inline const unsigned char *skip_ws(const unsigned char *p, const unsigned char *end, int *seen) {
    const unsigned char *q = p;
    while (p < end && IS_WS(*p)) p++;
    if (p != q) *seen = 1;
    return p;
}

/* A string from its opening quote; *pp moves past the closing one. in_value: only the escapes
 * orjson writes; else also \/, and *escaped says whether it holds any. 1 taken, 0 not plain. */
static int plain_string(const unsigned char **pp, const unsigned char *end, int in_value, int *escaped) {
    const unsigned char *p = *pp + 1;
    for (;;) {
        p = skip_plain(p, end);
        if (p >= end) return 0;
        unsigned char c = *p;
        if (c == '"') {
            *pp = p + 1;
            return 1;
        }
        if (c == '\\') {
            if (++p >= end) return 0;
            switch (*p) {
            case '/':
                if (in_value) return 0;
                /* fall through */
            case '"': case '\\': case 'b': case 'f': case 'n': case 'r': case 't':
                *escaped = 1;
                p++;
                continue;
            default: /* \u, or not JSON */
                return 0;
            }
        }
        if (c < 0x20) return 0; /* not JSON: control characters must be escaped */
        int n = utf8_len(p, end);
        if (n == 0) return 0;
        p += n;
    }
}

/* A number; *pp moves past it. 1 taken, 0 not plain, FAILED. */
static int plain_number(const unsigned char **pp, const unsigned char *end) {
    const unsigned char *start = *pp, *p = *pp, *digits;
    if (*p == '-') p++;
    if (p >= end || !IS_DIGIT(*p)) return 0;
    for (digits = p; p < end && IS_DIGIT(*p); p++) {}
    if (*digits == '0' && p - digits > 1) return 0; /* not JSON: a leading zero */
    int decimal = p < end && *p == '.';
    if (!decimal) {
        if (p < end && (*p == 'e' || *p == 'E')) return 0;
        if (p - digits >= 19) return 0; /* may be beyond 64 bits: records.loads decides */
        if (p - start == 2 && start[0] == '-' && start[1] == '0') return 0; /* written as 0 */
        *pp = p;
        return 1;
    }
    const unsigned char *fraction = ++p;
    while (p < end && IS_DIGIT(*p)) p++;
    if (p == fraction || (p < end && (*p == 'e' || *p == 'E'))) return 0;
    size_t n = (size_t)(p - start);
    if (n > MAX_DECIMAL) return 0;
    char text[MAX_DECIMAL + 1];
    memcpy(text, start, n);
    text[n] = '\0';
    double d = PyOS_string_to_double(text, NULL, NULL); /* correctly rounded, as orjson reads it */
    if (d == -1.0 && PyErr_Occurred()) return FAILED;
    char *shortest = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (shortest == NULL) return FAILED;
    int same = strcmp(shortest, text) == 0;
    PyMem_Free(shortest);
    if (!same) return 0;
    *pp = p;
    return 1;
}

/* After an element or member: 1 past a ',' and the whitespace after it (another follows), 0 at
 * `close` (*pp on it), -1 at anything else (not plain). */
static int after_item(const unsigned char **pp, const unsigned char *end, unsigned char close, int *ws) {
    const unsigned char *p = skip_ws(*pp, end, ws);
    if (p >= end || (*p != close && *p != ',')) return -1;
    if (*p == close) {
        *pp = p;
        return 0;
    }
    *pp = skip_ws(p + 1, end, ws);
    return 1;
}

/* A JSON value that orjson writes back as its own text less whitespace (*ws set if it holds
 * some); *pp moves past it. depth: the containers it is in. 1 taken, 0 not plain, FAILED. */
static int plain_value(const unsigned char **pp, const unsigned char *end, int depth, int *ws) {
    const unsigned char *p = *pp;
    int r, escaped = 0;
    if (p >= end) return 0;
    switch (*p) {
    case '"':
        r = plain_string(&p, end, 1, &escaped);
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
    case '[':
        if (depth >= MAX_NESTING) return 0;
        p = skip_ws(p + 1, end, ws);
        if (p < end && *p == ']') {
            p++;
            r = 1;
            break;
        }
        for (int more = 1; more;) {
            if ((r = plain_value(&p, end, depth + 1, ws)) != 1) return r;
            if ((more = after_item(&p, end, ']', ws)) < 0) return 0;
        }
        p++;
        break;
    case '{': {
        const unsigned char *names[MAX_MEMBERS];
        Py_ssize_t lengths[MAX_MEMBERS];
        int members = 0;
        if (depth >= MAX_NESTING) return 0;
        p = skip_ws(p + 1, end, ws);
        if (p < end && *p == '}') {
            p++;
            r = 1;
            break;
        }
        for (int more = 1; more;) {
            const unsigned char *name = p;
            if (p >= end || *p != '"' || members == MAX_MEMBERS || !plain_string(&p, end, 1, &escaped)) return 0;
            /* Escapes have one form each here, so names are equal exactly when their bytes are. */
            for (int i = 0; i < members; i++)
                if (lengths[i] == p - name && memcmp(names[i], name, (size_t)(p - name)) == 0) return 0;
            names[members] = name;
            lengths[members++] = p - name;
            p = skip_ws(p, end, ws);
            if (p >= end || *p != ':') return 0;
            p = skip_ws(p + 1, end, ws);
            if ((r = plain_value(&p, end, depth + 1, ws)) != 1) return r;
            if ((more = after_item(&p, end, '}', ws)) < 0) return 0;
        }
        p++;
        r = 1;
        break;
    }
    default:
        if (*p != '-' && !IS_DIGIT(*p)) return 0;
        r = plain_number(&p, end);
        break;
    }
    if (r == 1) *pp = p;
    return r;
}

/* Whether the bytes at p are `lit` (a string literal). */
#define AT(p, end, lit) ((size_t)((end) - (p)) >= sizeof(lit) - 1 && memcmp((p), (lit), sizeof(lit) - 1) == 0)

/* One record from its opening brace. 1 taken, 0 not plain, FAILED. */
static int plain_record_at(const unsigned char **pp, const unsigned char *end, plain_record *out) {
    const unsigned char *p = *pp + 1;
    int seen_key = 0, seen_value = 0, ws = 0, r;
    out->key = NULL;
    out->kind = V_NONE;
    p = skip_ws(p, end, &ws);
    if (p < end && *p == '}') {
        *pp = p + 1;
        return 1;
    }
    for (int more = 1; more;) {
        int is_key = AT(p, end, "\"key\"");
        if (!is_key && !AT(p, end, "\"value\"")) return 0; /* another field: the long way */
        if (is_key ? seen_key++ : seen_value++) return 0;    /* given twice: the long way */
        p = skip_ws(p + (is_key ? 5 : 7), end, &ws);
        if (p >= end || *p != ':') return 0;
        p = skip_ws(p + 1, end, &ws);
        if (p >= end) return 0;
        if (AT(p, end, "null")) {
            p += 4;
        } else if (*p == '"') {
            const unsigned char *start = p;
            int escaped = 0;
            if (!plain_string(&p, end, 0, &escaped)) return 0;
            if (is_key) {
                out->key = start + 1;
                out->key_len = p - start - 2;
                out->key_escaped = escaped;
            } else {
                out->kind = V_STRING;
                out->val = start + 1;
                out->val_len = p - start - 2;
                out->val_flag = escaped;
            }
        } else if (is_key) {
            return 0; /* refused on its own: the long way names its field */
        } else {
            const unsigned char *start = p;
            int inner = 0;
            if ((r = plain_value(&p, end, 0, &inner)) != 1) return r;
            out->kind = V_JSON;
            out->val = start;
            out->val_len = p - start;
            out->val_flag = inner;
        }
        if ((more = after_item(&p, end, '}', &ws)) < 0) return 0;
    }
    *pp = p + 1;
    return 1;
}

/* The next record: 1 (*out is it), 0 (the body ended, well formed), NOT_PLAIN or FAILED. */
static int next_record(body_reader *r, plain_record *out) {
    const unsigned char *p = r->p, *end = r->end;
    int ws = 0, got;
    if (r->state == 2) return 0;
    if (r->state == 0) {
        p = skip_ws(p, end, &ws);
        if (p >= end || *p != '{') return NOT_PLAIN;
        p = skip_ws(p + 1, end, &ws);
        if (!AT(p, end, "\"records\"")) return NOT_PLAIN;
        p = skip_ws(p + 9, end, &ws);
        if (p >= end || *p != ':') return NOT_PLAIN;
        p = skip_ws(p + 1, end, &ws);
        if (p >= end || *p != '[') return NOT_PLAIN;
        p = skip_ws(p + 1, end, &ws);
        r->state = 1; /* an empty list is not plain: the long way refuses it */
    } else {
        p = skip_ws(p, end, &ws);
        if (p < end && *p == ']') {
            p = skip_ws(p + 1, end, &ws);
            if (p >= end || *p != '}') return NOT_PLAIN;
            p = skip_ws(p + 1, end, &ws);
            if (p != end) return NOT_PLAIN;
            r->state = 2;
            r->p = p;
            return 0;
        }
        if (p >= end || *p != ',') return NOT_PLAIN;
        p = skip_ws(p + 1, end, &ws);
    }
    if (p >= end || *p != '{' || r->left-- <= 0) return NOT_PLAIN;
    if ((got = plain_record_at(&p, end, out)) != 1) return got == 0 ? NOT_PLAIN : FAILED;
    r->p = p;
    return 1;
}

/* A string's bytes (between its quotes) decoded: its escapes (\" \\ \/ \b \f \n \r \t) replaced.
 * A new bytes object, or NULL with an exception set. */
static PyObject *decode_string(const unsigned char *p, Py_ssize_t n) {
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL) return NULL;
    char *o = PyBytes_AS_STRING(out), *start = o;
    for (const unsigned char *end = p + n; p < end; p++) {
        if (*p != '\\') {
            *o++ = (char)*p;
            continue;
        }
        switch (*++p) {
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        default: *o++ = (char)*p; break; /* " \ / */
        }
    }
    if (_PyBytes_Resize(&out, o - start) < 0) return NULL;
    return out;
}

/* A value's JSON text without its whitespace (outside strings). A new bytes object, or NULL. */
static PyObject *compact(const unsigned char *p, Py_ssize_t n) {
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL) return NULL;
    char *o = PyBytes_AS_STRING(out), *start = o;
    int in_string = 0;
    for (const unsigned char *end = p + n; p < end; p++) {
        if (in_string) {
            if (*p == '\\') *o++ = (char)*p++; /* and the escaped byte, below */
            else if (*p == '"') in_string = 0;
        } else if (IS_WS(*p)) {
            continue;
        } else if (*p == '"') {
            in_string = 1;
        }
        *o++ = (char)*p;
    }
    if (_PyBytes_Resize(&out, o - start) < 0) return NULL;
    return out;
}

#endif /* FERRY_GATEWAY_BODY_H */
