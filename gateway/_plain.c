/* A produce request's plain records, made in one pass: the C twin of the common-record branch of
 * gateway/records.py's parse_request.
 *
 * At 100 records per request the gateway's event loop is its limit, and making each record's
 * Outgoing in Python (the checks, key.encode(), the value's JSON text, the dataclass's __init__,
 * then freeing it all) was a fifth of its time. Here each plain record costs its two byte strings,
 * its (empty) headers list and the Outgoing object, whose slots are filled directly.
 *
 * setup(outgoing, fields, dumps, encode_error)
 *     once, before plain(): the Outgoing dataclass (slots=True), its field names in order (they
 *     must be topic, key, value, headers, partition, due_ms, each a slot), orjson.dumps and the
 *     error it raises for a value it cannot write (orjson.JSONEncodeError).
 * plain(records, topic) -> (out, general)
 *     records: the request's list. out[i] is record i's Outgoing when it is plain — a dict holding
 *     at most "key" (a str or null) and "value" (anything) — else None, left to the general path
 *     (which refuses or makes it): so is a plain record whose value dumps refuses (nested too
 *     deep), so that it is refused there with its field. general: how many are None.
 *
 * read(raw, topic, most) -> list | None
 *     the Outgoings of a body whose every record is plain, read straight from its bytes without
 *     orjson.loads (gateway/_body.h says which bodies it takes); None for any other body, which
 *     the caller reads the long way (records.loads, then parse_request): the records it makes are
 *     the ones that way makes. most: the most records a request may hold.
 *
 * send_items(records) -> list | None
 *     [(record, record.topic, record.size)] — how the producer takes a request's records — when
 *     every one is an Outgoing sent now as it is: no headers, no chosen partition, not delayed;
 *     else None (the caller looks at each). The C twin of records.send_items' Python.
 *
 * digit_run(raw, n) -> bool
 *     whether bytes `raw` hold n ASCII digits in a row (records.loads asks it of every body: such a
 *     run may be an integer orjson reads inexactly), without the copy bytes.translate makes.
 *
 * The result must equal parse_request's Python branch on every input
 * (tests/unit/test_gateway_plain.py, also under ASan/UBSan in tests/integration/test_native_sanitized.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

#include "_body.h"

#define FIELDS 6
static const char *const NAMES[FIELDS] = {"topic", "key", "value", "headers", "partition", "due_ms"};
enum { TOPIC, KEY, VALUE, HEADERS, PARTITION, DUE_MS };

static PyTypeObject *outgoing;   /* the Outgoing type, once set up */
static Py_ssize_t offsets[FIELDS];
static PyObject *dumps, *encode_error;

static PyObject *
setup(PyObject *self, PyObject *args)
{
    PyObject *type, *fields, *dumps_fn, *error;
    Py_ssize_t offs[FIELDS];
    if (!PyArg_ParseTuple(args, "O!O!OO", &PyType_Type, &type, &PyTuple_Type, &fields, &dumps_fn, &error))
        return NULL;
    if (PyTuple_GET_SIZE(fields) != FIELDS) {
        PyErr_SetString(PyExc_ValueError, "Outgoing must have the fields topic, key, value, headers, partition, due_ms");
        return NULL;
    }
    for (int i = 0; i < FIELDS; i++) {
        PyObject *name = PyTuple_GET_ITEM(fields, i);
        if (!PyUnicode_Check(name) || PyUnicode_CompareWithASCIIString(name, NAMES[i]) != 0) {
            PyErr_Format(PyExc_ValueError, "Outgoing's field %d must be %s", i, NAMES[i]);
            return NULL;
        }
        PyObject *descr = PyObject_GetAttrString(type, NAMES[i]);
        if (descr == NULL)
            return NULL;
        int is_slot = Py_IS_TYPE(descr, &PyMemberDescr_Type)
                      && ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX;
        if (is_slot)
            offs[i] = ((PyMemberDescrObject *)descr)->d_member->offset;
        Py_DECREF(descr);
        if (!is_slot) {
            PyErr_Format(PyExc_ValueError, "Outgoing.%s must be a slot (a dataclass with slots=True)", NAMES[i]);
            return NULL;
        }
    }
    if (!PyCallable_Check(dumps_fn) || !PyExceptionClass_Check(error)) {
        PyErr_SetString(PyExc_TypeError, "setup() takes orjson.dumps and orjson.JSONEncodeError");
        return NULL;
    }
    Py_INCREF(type);
    Py_INCREF(dumps_fn);
    Py_INCREF(error);
    Py_XSETREF(outgoing, (PyTypeObject *)type);
    Py_XSETREF(dumps, dumps_fn);
    Py_XSETREF(encode_error, error);
    memcpy(offsets, offs, sizeof offsets);
    Py_RETURN_NONE;
}

/* Set a slot of a new Outgoing: steals `value`. */
static inline void
put(PyObject *o, int field, PyObject *value)
{
    *(PyObject **)((char *)o + offsets[field]) = value;
}

/* A plain Outgoing to `topic` (new reference), or NULL with an exception set. Steals `key` and
 * `value` (bytes or None) in either case. */
static PyObject *
new_outgoing(PyObject *topic, PyObject *key, PyObject *value)
{
    PyObject *headers = PyList_New(0), *o = NULL;
    if (headers == NULL || (o = outgoing->tp_alloc(outgoing, 0)) == NULL) {
        Py_XDECREF(headers);
        Py_DECREF(key);
        Py_DECREF(value);
        return NULL;
    }
    Py_INCREF(topic);
    put(o, TOPIC, topic);
    put(o, KEY, key);
    put(o, VALUE, value);
    put(o, HEADERS, headers);
    Py_INCREF(Py_None);
    put(o, PARTITION, Py_None);
    Py_INCREF(Py_None);
    put(o, DUE_MS, Py_None);
    return o;
}

/* Record `raw` as an Outgoing (new reference), Py_None (new reference) when it is not plain, or
 * NULL with an exception set. */
static PyObject *
make(PyObject *raw, PyObject *topic)
{
    PyObject *k, *v, *key = NULL, *value = NULL;
    Py_ssize_t pos = 0;
    if (!PyDict_CheckExact(raw))
        Py_RETURN_NONE;
    while (PyDict_Next(raw, &pos, &k, &v)) {
        if (!PyUnicode_Check(k))
            Py_RETURN_NONE;
        if (PyUnicode_CompareWithASCIIString(k, "key") == 0)
            key = v;
        else if (PyUnicode_CompareWithASCIIString(k, "value") == 0)
            value = v;
        else
            Py_RETURN_NONE;
    }
    if (key == Py_None)
        key = NULL;
    if (key != NULL && !PyUnicode_CheckExact(key))
        Py_RETURN_NONE;

    PyObject *key_bytes = Py_None, *value_bytes = Py_None;
    Py_INCREF(Py_None);
    Py_INCREF(Py_None);
    if (key != NULL) {
        Py_SETREF(key_bytes, PyUnicode_AsUTF8String(key));
        if (key_bytes == NULL)
            goto fail;
    }
    if (value != NULL && value != Py_None) {
        Py_INCREF(value); /* dumps runs no Python code, but hold it while it runs */
        Py_SETREF(value_bytes, PyUnicode_Check(value) ? PyUnicode_AsUTF8String(value) : PyObject_CallOneArg(dumps, value));
        Py_DECREF(value);
        if (value_bytes == NULL) {
            if (PyErr_ExceptionMatches(encode_error)) {
                PyErr_Clear(); /* the general path refuses it, naming its field */
                Py_DECREF(key_bytes);
                Py_RETURN_NONE;
            }
            goto fail;
        }
    }
    return new_outgoing(topic, key_bytes, value_bytes);

fail:
    Py_XDECREF(key_bytes);
    Py_XDECREF(value_bytes);
    return NULL;
}

static PyObject *
plain(PyObject *self, PyObject *args)
{
    PyObject *records, *topic;
    if (!PyArg_ParseTuple(args, "O!U", &PyList_Type, &records, &topic))
        return NULL;
    if (outgoing == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "call setup() before plain()");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(records), general = 0;
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rec, *raw;
        if (i >= PyList_GET_SIZE(records)) { /* cannot shrink while no Python code runs: a guard */
            rec = Py_None;
            Py_INCREF(rec);
        }
        else {
            raw = PyList_GET_ITEM(records, i);
            Py_INCREF(raw);
            rec = make(raw, topic);
            Py_DECREF(raw);
            if (rec == NULL) {
                Py_DECREF(out);
                return NULL;
            }
        }
        general += rec == Py_None;
        PyList_SET_ITEM(out, i, rec);
    }
    return Py_BuildValue("(Nn)", out, general);
}

/* The bytes a span of the body stands for: as they are, decoded, or compacted. */
static PyObject *
span_bytes(const unsigned char *p, Py_ssize_t n, int kind, int flag)
{
    if (!flag)
        return PyBytes_FromStringAndSize((const char *)p, n);
    return kind == V_JSON ? compact(p, n) : decode_string(p, n);
}

static PyObject *
read_body(PyObject *self, PyObject *args)
{
    Py_buffer raw;
    PyObject *topic, *out = NULL;
    Py_ssize_t most;
    if (!PyArg_ParseTuple(args, "y*Un", &raw, &topic, &most))
        return NULL;
    if (outgoing == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "call setup() before read()");
        goto done;
    }
    body_reader reader = {raw.buf, (const unsigned char *)raw.buf + raw.len, most, 0};
    plain_record rec;
    if ((out = PyList_New(0)) == NULL)
        goto done;
    for (int got; (got = next_record(&reader, &rec)) != 0;) {
        if (got != 1) {
            Py_CLEAR(out);
            if (got == NOT_PLAIN) {
                Py_INCREF(Py_None);
                out = Py_None;
            }
            goto done;
        }
        PyObject *key = rec.key == NULL ? (Py_INCREF(Py_None), Py_None) : span_bytes(rec.key, rec.key_len, V_STRING, rec.key_escaped);
        PyObject *value = rec.kind == V_NONE ? (Py_INCREF(Py_None), Py_None) : span_bytes(rec.val, rec.val_len, rec.kind, rec.val_flag);
        PyObject *o = NULL;
        if (key != NULL && value != NULL)
            o = new_outgoing(topic, key, value);
        else {
            Py_XDECREF(key);
            Py_XDECREF(value);
        }
        if (o == NULL || PyList_Append(out, o) < 0) {
            Py_XDECREF(o);
            Py_CLEAR(out);
            goto done;
        }
        Py_DECREF(o);
    }
done:
    PyBuffer_Release(&raw);
    return out;
}

static inline PyObject *
slot(PyObject *o, int field)
{
    return *(PyObject **)((char *)o + offsets[field]);
}

/* Record.size of a plain Outgoing (key, value: bytes or None; no headers), or -1 when `o` is not
 * one sent as it is. */
static Py_ssize_t
plain_size(PyObject *o)
{
    PyObject *key = slot(o, KEY), *value = slot(o, VALUE), *headers = slot(o, HEADERS);
    if (key == NULL || value == NULL || headers == NULL || slot(o, TOPIC) == NULL || slot(o, PARTITION) != Py_None ||
        slot(o, DUE_MS) != Py_None || !PyList_CheckExact(headers) || PyList_GET_SIZE(headers) != 0)
        return -1;
    if ((key != Py_None && !PyBytes_CheckExact(key)) || (value != Py_None && !PyBytes_CheckExact(value)))
        return -1;
    return (key == Py_None ? 0 : PyBytes_GET_SIZE(key)) + (value == Py_None ? 0 : PyBytes_GET_SIZE(value)) + 64;
}

static PyObject *
send_items(PyObject *self, PyObject *records)
{
    if (!PyList_Check(records)) {
        PyErr_SetString(PyExc_TypeError, "send_items() takes a list of records");
        return NULL;
    }
    if (outgoing == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "call setup() before send_items()");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(records);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        /* An allocation below may run a collection and, through a finalizer, Python code: the
         * list is read again each time, and the record held while its item is made. */
        PyObject *rec = i < PyList_GET_SIZE(records) ? PyList_GET_ITEM(records, i) : NULL;
        Py_ssize_t size = rec != NULL && Py_IS_TYPE(rec, outgoing) ? plain_size(rec) : -1;
        if (size < 0) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        PyObject *topic = slot(rec, TOPIC), *item = NULL, *bytes = PyLong_FromSsize_t(size);
        Py_INCREF(rec);
        Py_INCREF(topic);
        if (bytes != NULL)
            item = PyTuple_Pack(3, rec, topic, bytes);
        Py_XDECREF(bytes);
        Py_DECREF(topic);
        Py_DECREF(rec);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, item);
    }
    if (PyList_GET_SIZE(records) != n) { /* changed meanwhile: look at each */
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

static PyObject *
digit_run(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t n, run = 0;
    int found = 0;
    if (!PyArg_ParseTuple(args, "y*n", &buf, &n))
        return NULL;
    if (n < 1) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "digit_run() needs a run of at least one digit");
        return NULL;
    }
    const unsigned char *p = buf.buf;
    for (Py_ssize_t i = 0; i < buf.len; i++) {
        if ((unsigned)(p[i] - '0') < 10u) {
            if (++run >= n) {
                found = 1;
                break;
            }
        }
        else
            run = 0;
    }
    PyBuffer_Release(&buf);
    return PyBool_FromLong(found);
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, "setup(outgoing, fields, dumps, encode_error)"},
    {"plain", plain, METH_VARARGS, "plain(records, topic) -> (out, general)"},
    {"read", read_body, METH_VARARGS, "read(raw, topic, most) -> the plain records of body raw, or None"},
    {"send_items", send_items, METH_O, "send_items(records) -> [(record, topic, size)] when all are plain, or None"},
    {"digit_run", digit_run, METH_VARARGS, "digit_run(raw, n) -> whether raw holds n ASCII digits in a row"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_plain", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__plain(void)
{
    return PyModule_Create(&module);
}
