/* worker._encode: the batch body of worker/batch.py's EventEncoder, in C.
 *
 * encode_batch(encoder, records, attempts, max_depth) returns the bytes that
 * worker.batch's pure-Python path returns ("[" + ",".join(encoder.events(...)) + "]",
 * UTF-8), byte for byte, or NotImplemented when an input is not of the shape this code
 * handles (then the caller runs the Python path, which is the reference).
 *
 * Per record this does what EventEncoder.events() does: dictionary lookups in the
 * encoder's caches, the JSON check of the value, base64 of a non-JSON value, decimal
 * offsets, attempts and milliseconds, all written into one growing buffer. On a cache
 * miss it calls the encoder's own method (_header_set, _where_of, _key, _second_of), so
 * all escaping stays in Python. Those calls run Python code, which may clear a cache or
 * switch threads: every object used after a call is held by a strong reference.
 *
 * is_json(data, max_depth=-1) is the JSON check alone: strict RFC 8259 JSON text in
 * UTF-8, with the verdicts of orjson.loads (tests/unit/test_native_encode.py compares
 * them), without building objects. max_depth is orjson's nesting limit (1024 since
 * 3.9.15, none before: -1); worker/batch.py probes it once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ---- output buffer: PyMem-allocated, doubled as needed ---------------------------- */

typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->cap - b->len >= extra) return 0;
    size_t need = b->len + extra;
    if (need < b->len || need > (size_t)PY_SSIZE_T_MAX) {
        PyErr_NoMemory();
        return -1;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need) cap = cap > (size_t)PY_SSIZE_T_MAX / 2 ? need : cap * 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

/* A str's UTF-8 form; CPython keeps it in the str object, so the pointer is valid while
 * the caller holds a reference to the str. */
typedef struct {
    const char *s;
    size_t n;
} Text;

static int text_of(PyObject *str, Text *t) {
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(str, &n);
    if (u == NULL) return -1;
    t->s = u;
    t->n = (size_t)n;
    return 0;
}

/* Decimal digits of v into tmp (at least 21 bytes); returns the length. */
static size_t format_ll(char *tmp, long long v) {
    char rev[24];
    size_t n = 0, len = 0;
    /* The magnitude as unsigned, so LLONG_MIN does not overflow. */
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        rev[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) tmp[len++] = '-';
    while (n) tmp[len++] = rev[--n];
    return len;
}

/* f"{o}" of an offset or attempt: an exact int in range as digits in tmp (24 bytes),
 * anything else (a huge int, a bool, a subclass) through format(o, ""), which is what the
 * f-string calls, held in *owned. */
static int int_text(PyObject *o, char *tmp, PyObject **owned, Text *t) {
    Py_CLEAR(*owned);
    if (PyLong_CheckExact(o)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (v == -1 && PyErr_Occurred()) return -1;
        if (!overflow) {
            t->s = tmp;
            t->n = format_ll(tmp, v);
            return 0;
        }
    }
    if ((*owned = PyObject_Format(o, NULL)) == NULL) return -1;
    return text_of(*owned, t);
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* base64.b64encode (standard alphabet, '=' padding) of s into o, which has room for
 * (n + 2) / 3 * 4 bytes; returns the end. */
static char *put_base64(char *o, const unsigned char *s, size_t n) {
    size_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *o++ = B64[v >> 18];
        *o++ = B64[(v >> 12) & 63];
        *o++ = B64[(v >> 6) & 63];
        *o++ = B64[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0);
        *o++ = B64[v >> 18];
        *o++ = B64[(v >> 12) & 63];
        *o++ = i + 1 < n ? B64[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    return o;
}

/* Unchecked writes into room reserved beforehand. */
#define W(o, src, len) (memcpy((o), (src), (len)), (o) += (len))
#define WL(o, lit) W((o), (lit), sizeof(lit) - 1)

/* The JSON check (json_valid) lives in its own file. */
#include "_json_check.h"

static PyObject *is_json(PyObject *module, PyObject *args) {
    Py_buffer data;
    Py_ssize_t max_depth = -1;
    (void)module;
    if (!PyArg_ParseTuple(args, "y*|n:is_json", &data, &max_depth)) return NULL;
    int ok = json_valid(data.buf, data.len, max_depth);
    PyBuffer_Release(&data);
    if (ok < 0) return NULL;
    return PyBool_FromLong(ok);
}

/* ---- the batch ------------------------------------------------------------------------ */

/* Attribute and method names of EventEncoder, interned at import. */
enum { A_HEADER_SETS, A_KEYS, A_WHERE, A_SECOND, A_SECOND_TEXT, M_CONTENT_TYPE, M_HEADER_SET, M_WHERE_OF, M_KEY,
       M_SECOND_OF, N_NAMES };
static const char *const NAME_TEXT[N_NAMES] = {"_header_sets", "_keys", "_where", "_second", "_second_text",
                                               "_content_type", "_header_set", "_where_of", "_key", "_second_of"};
static PyObject *NAMES[N_NAMES];

/* The fields of worker.push.Record (a tuple subclass), by position. */
enum { F_TOPIC, F_PARTITION, F_OFFSET, F_KEY, F_VALUE, F_HEADERS, F_TIMESTAMP, N_FIELDS };

/* A cached tuple of n items, or else the result of the encoder's method for the miss,
 * called with key, or with key's two items when spread (a new reference either way,
 * NULL with an exception set). */
static PyObject *cached(PyObject *cache, PyObject *key, Py_ssize_t n, PyObject *encoder, int method, int spread) {
    PyObject *found = PyDict_GetItemWithError(cache, key);
    if (found != NULL && PyTuple_Check(found) && PyTuple_GET_SIZE(found) == n) return Py_NewRef(found);
    if (found == NULL && PyErr_Occurred()) return NULL;
    PyObject *made = !spread ? PyObject_CallMethodOneArg(encoder, NAMES[method], key)
                                  : PyObject_CallMethodObjArgs(encoder, NAMES[method], PyTuple_GET_ITEM(key, 0),
                                                               PyTuple_GET_ITEM(key, 1), NULL);
    if (made != NULL && (!PyTuple_Check(made) || PyTuple_GET_SIZE(made) != n)) {
        PyErr_Format(PyExc_TypeError, "EventEncoder.%s must return a %zd-tuple", NAME_TEXT[method], n);
        Py_CLEAR(made);
    }
    return made;
}

static PyObject *encode_batch(PyObject *module, PyObject *args) {
    PyObject *encoder, *records_arg, *attempts_arg;
    Py_ssize_t max_depth;
    (void)module;
    if (!PyArg_ParseTuple(args, "OOOn:encode_batch", &encoder, &records_arg, &attempts_arg, &max_depth)) return NULL;

    PyObject *result = NULL, *records = NULL, *attempts = NULL, *header_sets = NULL, *keys = NULL, *where = NULL;
    PyObject *plain = NULL, *second_obj = NULL, *second_text = NULL, *last_headers = NULL, *header_set = NULL;
    PyObject *topic = NULL, *partition = NULL, *where_pair = NULL, *key_attr = NULL, *offset_str = NULL;
    PyObject *attempt_str = NULL;
    Buf buf = {NULL, 0, 0};
    /* UTF-8 of the strs the events are made of, taken when they change. */
    Text t_ctype, t_extra = {"", 0}, t_id = {"", 0}, t_kafka = {"", 0}, t_second = {"", 0};

    /* Tuples: records and attempts cannot change under us while a callback runs. */
    if ((records = PySequence_Tuple(records_arg)) == NULL) goto done;
    if ((attempts = PySequence_Tuple(attempts_arg)) == NULL) goto done;
    Py_ssize_t n = PyTuple_GET_SIZE(records);
    if (PyTuple_GET_SIZE(attempts) != n) {
        /* What zip(..., strict=True) says. */
        PyErr_Format(PyExc_ValueError, "zip() argument 2 is %s than argument 1",
                     PyTuple_GET_SIZE(attempts) < n ? "shorter" : "longer");
        goto done;
    }
    if ((header_sets = PyObject_GetAttr(encoder, NAMES[A_HEADER_SETS])) == NULL) goto done;
    if ((keys = PyObject_GetAttr(encoder, NAMES[A_KEYS])) == NULL) goto done;
    if ((where = PyObject_GetAttr(encoder, NAMES[A_WHERE])) == NULL) goto done;
    if (!PyDict_CheckExact(header_sets) || !PyDict_CheckExact(keys) || !PyDict_CheckExact(where)) goto fallback;

    /* (escaped content type, names JSON) for records without headers; its "extra" is "". */
    if ((plain = PyObject_CallMethodOneArg(encoder, NAMES[M_CONTENT_TYPE], Py_None)) == NULL) goto done;
    if (!PyTuple_Check(plain) || PyTuple_GET_SIZE(plain) != 2) goto fallback;

    /* The encoder's current second, as the Python loop starts from it. */
    long long second = 0;
    int have_second = 0;
    if ((second_obj = PyObject_GetAttr(encoder, NAMES[A_SECOND])) == NULL) goto done;
    if ((second_text = PyObject_GetAttr(encoder, NAMES[A_SECOND_TEXT])) == NULL) goto done;
    if (PyLong_CheckExact(second_obj)) {
        int overflow;
        second = PyLong_AsLongLongAndOverflow(second_obj, &overflow);
        if (second == -1 && PyErr_Occurred()) goto done;
        have_second = !overflow;
        if (have_second && text_of(second_text, &t_second) < 0) goto done;
    }

    /* The current header set: its escaped content type, JSON flag and extra attributes
     * (borrowed from header_set, or from plain with extra ""). */
    PyObject *ctype = PyTuple_GET_ITEM(plain, 0), *extra = NULL;
    int json_type = PyObject_IsTrue(PyTuple_GET_ITEM(plain, 1));
    if (json_type < 0 || text_of(ctype, &t_ctype) < 0) goto done;
    /* As the Python loop starts: topic None, partition -1. */
    topic = Py_NewRef(Py_None);
    if ((partition = PyLong_FromLong(-1)) == NULL) goto done;

    if (buf_reserve(&buf, 2) < 0) goto done;
    buf.p[buf.len++] = '[';
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyTuple_GET_ITEM(records, i), *attempt = PyTuple_GET_ITEM(attempts, i);
        if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) < N_FIELDS) goto fallback;
        /* Borrowed: the record tuple is held by records. */
        PyObject *headers = PyTuple_GET_ITEM(r, F_HEADERS), *key = PyTuple_GET_ITEM(r, F_KEY);
        PyObject *value = PyTuple_GET_ITEM(r, F_VALUE), *ts = PyTuple_GET_ITEM(r, F_TIMESTAMP);

        /* Records of a topic share one headers tuple (worker/fetch.py): identity first. */
        if (headers != last_headers) {
            Py_XSETREF(last_headers, Py_NewRef(headers));
            int nonempty = PyObject_IsTrue(headers);
            if (nonempty < 0) goto done;
            Py_CLEAR(header_set);
            if (nonempty) {
                PyObject *hkey = PySequence_Tuple(headers);
                if (hkey == NULL) goto done;
                header_set = cached(header_sets, hkey, 3, encoder, M_HEADER_SET, 0);
                Py_DECREF(hkey);
                if (header_set == NULL) goto done;
                ctype = PyTuple_GET_ITEM(header_set, 0);
                extra = PyTuple_GET_ITEM(header_set, 2);
                if ((json_type = PyObject_IsTrue(PyTuple_GET_ITEM(header_set, 1))) < 0) goto done;
            } else {
                ctype = PyTuple_GET_ITEM(plain, 0);
                extra = NULL;
                if ((json_type = PyObject_IsTrue(PyTuple_GET_ITEM(plain, 1))) < 0) goto done;
            }
            if (text_of(ctype, &t_ctype) < 0 || (extra != NULL && text_of(extra, &t_extra) < 0)) goto done;
            if (extra == NULL) t_extra.n = 0;
        }

        PyObject *r_topic = PyTuple_GET_ITEM(r, F_TOPIC), *r_partition = PyTuple_GET_ITEM(r, F_PARTITION);
        int changed = PyObject_RichCompareBool(r_partition, partition, Py_NE);
        if (changed == 0) changed = PyObject_RichCompareBool(r_topic, topic, Py_NE);
        if (changed < 0) goto done;
        if (changed) {
            Py_SETREF(topic, Py_NewRef(r_topic));
            Py_SETREF(partition, Py_NewRef(r_partition));
            PyObject *tp = PyTuple_Pack(2, topic, partition);
            if (tp == NULL) goto done;
            Py_XSETREF(where_pair, cached(where, tp, 2, encoder, M_WHERE_OF, 1));
            Py_DECREF(tp);
            if (where_pair == NULL || text_of(PyTuple_GET_ITEM(where_pair, 0), &t_id) < 0 ||
                text_of(PyTuple_GET_ITEM(where_pair, 1), &t_kafka) < 0)
                goto done;
        }

        /* Floor division and modulo as Python's, without overflow at LLONG_MIN. */
        if (!PyLong_CheckExact(ts)) goto fallback;
        int overflow;
        long long ms = PyLong_AsLongLongAndOverflow(ts, &overflow);
        if (ms == -1 && PyErr_Occurred()) goto done;
        if (overflow) goto fallback;
        long long sec = ms / 1000 - (ms % 1000 < 0);
        int milli = (int)(ms % 1000 + (ms % 1000 < 0 ? 1000 : 0));
        if (!have_second || sec != second) {
            PyObject *pair = PyObject_CallMethodOneArg(encoder, NAMES[M_SECOND_OF], ts);
            if (pair == NULL) goto done;
            if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
                Py_DECREF(pair);
                goto fallback;
            }
            Py_SETREF(second_text, Py_NewRef(PyTuple_GET_ITEM(pair, 1)));
            Py_DECREF(pair);
            if (text_of(second_text, &t_second) < 0) goto done;
            second = sec;
            have_second = 1;
        }

        Py_CLEAR(key_attr);
        if (key != Py_None) {
            /* Held: its truth test may run Python code that clears the cache. */
            PyObject *found = Py_XNewRef(PyDict_GetItemWithError(keys, key));
            int usable = found != NULL ? PyObject_IsTrue(found) : 0; /* keys.get(key) or ... */
            if (usable < 0 || (found == NULL && PyErr_Occurred())) {
                Py_XDECREF(found);
                goto done;
            }
            key_attr = usable ? Py_NewRef(found) : PyObject_CallMethodOneArg(encoder, NAMES[M_KEY], key);
            Py_XDECREF(found);
            if (key_attr == NULL) goto done;
        }
        /* Exact bytes: orjson.loads refuses a subclass, which the Python path then sends as base64. */
        if (value != Py_None && !PyBytes_CheckExact(value)) goto fallback;

        /* No more callbacks for this record: its texts, its data, then one reservation and
         * unchecked writes. */
        char offset_digits[24], attempt_digits[24];
        Text t_offset, t_attempt, t_key = {"", 0};
        if (int_text(PyTuple_GET_ITEM(r, F_OFFSET), offset_digits, &offset_str, &t_offset) < 0 ||
            int_text(attempt, attempt_digits, &attempt_str, &t_attempt) < 0 ||
            (key_attr != NULL && text_of(key_attr, &t_key) < 0))
            goto done;
        const unsigned char *data = NULL;
        size_t size = 0, data_room = 0;
        int embed = 0;
        if (value != Py_None) {
            data = (const unsigned char *)PyBytes_AS_STRING(value);
            size = (size_t)PyBytes_GET_SIZE(value);
            if (json_type && (embed = json_valid(data, (Py_ssize_t)size, max_depth)) < 0) goto done;
            data_room = 20 + (embed ? size : (size + 2) / 3 * 4);
        }
        size_t room = 64 + t_id.n + 2 * t_offset.n + t_second.n + t_ctype.n + t_kafka.n + t_attempt.n + t_key.n +
                      t_extra.n + data_room; /* 64: the literals, the comma and the braces */
        if (buf_reserve(&buf, room) < 0) goto done;
        char *o = buf.p + buf.len;
        char millis[5] = {(char)('0' + milli / 100), (char)('0' + milli / 10 % 10), (char)('0' + milli % 10), 'Z', '"'};
        if (i > 0) *o++ = ',';
        W(o, t_id.s, t_id.n);
        W(o, t_offset.s, t_offset.n);
        WL(o, "\",\"time\":\"");
        W(o, t_second.s, t_second.n);
        W(o, millis, 5);
        WL(o, ",\"datacontenttype\":");
        W(o, t_ctype.s, t_ctype.n);
        W(o, t_kafka.s, t_kafka.n);
        W(o, t_offset.s, t_offset.n);
        WL(o, ",\"ferryattempt\":");
        W(o, t_attempt.s, t_attempt.n);
        W(o, t_key.s, t_key.n);
        W(o, t_extra.s, t_extra.n);
        if (data != NULL && embed) {
            WL(o, ",\"data\":");
            W(o, data, size); /* valid UTF-8: what value.decode() then .encode() would give */
        } else if (data != NULL) {
            WL(o, ",\"data_base64\":\"");
            o = put_base64(o, data, size);
            *o++ = '"';
        }
        *o++ = '}';
        buf.len = (size_t)(o - buf.p);
    }
    buf.p[buf.len++] = ']'; /* room: the reservation of "[" or of the last event */
    result = PyBytes_FromStringAndSize(buf.p, (Py_ssize_t)buf.len);
    goto done;

fallback:
    /* Not a shape handled here: the caller runs the Python path. Caches filled so far are
     * the same the Python path fills, and the output does not depend on them. */
    result = Py_NewRef(Py_NotImplemented);
done:
    PyMem_Free(buf.p);
    Py_XDECREF(records);
    Py_XDECREF(attempts);
    Py_XDECREF(header_sets);
    Py_XDECREF(keys);
    Py_XDECREF(where);
    Py_XDECREF(plain);
    Py_XDECREF(second_obj);
    Py_XDECREF(second_text);
    Py_XDECREF(last_headers);
    Py_XDECREF(header_set);
    Py_XDECREF(topic);
    Py_XDECREF(partition);
    Py_XDECREF(where_pair);
    Py_XDECREF(key_attr);
    Py_XDECREF(offset_str);
    Py_XDECREF(attempt_str);
    return result;
}

static PyMethodDef METHODS[] = {
    {"encode_batch", encode_batch, METH_VARARGS,
     "encode_batch(encoder, records, attempts, max_depth) -> bytes or NotImplemented\n\n"
     "The CloudEvents batch body worker.batch.encode_batch builds, byte for byte."},
    {"is_json", is_json, METH_VARARGS,
     "is_json(data, max_depth=-1) -> bool\n\nWhether orjson.loads(data) succeeds, without building objects."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "worker._encode",
                                    "C twin of worker.batch's event encoding (see worker/_encode.c).", -1, METHODS,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__encode(void) {
    for (int i = 0; i < N_NAMES; i++)
        if (NAMES[i] == NULL && (NAMES[i] = PyUnicode_InternFromString(NAME_TEXT[i])) == NULL) return NULL;
    return PyModule_Create(&MODULE);
}
