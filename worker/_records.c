/* Records from fetched messages: the C twin of worker/fetch.py's build_batch_py.
 *
 * The fetch thread turns every message confluent-kafka's consume() returns into a
 * worker.push.Record (a tuple subclass). In Python that loop held the GIL ~1.2 us per record,
 * 15 % of what a batch-mode worker spends (bench/batch.py profile), time the event loop waits
 * for. Here the same steps run without the interpreter: the message accessors are called
 * through their method descriptors, looked up once per call, and each record is allocated and
 * filled as CPython's own tuple subtype constructor does.
 *
 * build(messages, record_type, header_sets, no_headers, header_sets_max, eof_code)
 *   -> (records: {(topic, partition): [Record, ...]}, eof: {(topic, partition): offset},
 *       errors: [(topic, partition, KafkaError), ...])
 *
 * The result must equal build_batch_py's for the same input (tests/unit/test_native_records.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

enum { M_ERROR, M_TOPIC, M_PARTITION, M_OFFSET, M_KEY, M_VALUE, M_HEADERS, M_TIMESTAMP, M_COUNT };
static const char *const METHOD_NAMES[M_COUNT] = {
    "error", "topic", "partition", "offset", "key", "value", "headers", "timestamp",
};
#define RECORD_FIELDS 8
/* What the prefetch bound counts beyond key and value (worker/push.py Record). */
#define RECORD_OVERHEAD 64

/* Length of a key or value as Record computes it: `len(x) if x else 0`. */
static int
payload_len(PyObject *x, Py_ssize_t *out)
{
    if (x == Py_None) {
        *out = 0;
        return 0;
    }
    if (PyBytes_CheckExact(x)) {
        *out = PyBytes_GET_SIZE(x);
        return 0;
    }
    int truthy = PyObject_IsTrue(x);
    if (truthy <= 0) {
        *out = 0;
        return truthy;
    }
    Py_ssize_t n = PyObject_Length(x);
    if (n < 0)
        return -1;
    *out = n;
    return 0;
}

/* key_len + value_len + RECORD_OVERHEAD as a Python int, for sums beyond Py_ssize_t: two lengths
 * fit in a size_t, the overhead is added as Python adds it. */
static PyObject *
sum_of_lengths(Py_ssize_t key_len, Py_ssize_t value_len)
{
    PyObject *lengths = PyLong_FromSize_t((size_t)key_len + (size_t)value_len), *overhead = NULL, *sum = NULL;
    if (lengths != NULL && (overhead = PyLong_FromLong(RECORD_OVERHEAD)) != NULL)
        sum = PyNumber_Add(lengths, overhead);
    Py_XDECREF(lengths);
    Py_XDECREF(overhead);
    return sum;
}

/* The shared tuple for a header list: records of a topic mostly carry the same few header
 * sets, and one tuple per record would be one more object for the collector to visit. */
static PyObject *
shared_headers(PyObject *raw, PyObject *header_sets, Py_ssize_t max_sets, PyObject *no_headers)
{
    int truthy = PyObject_IsTrue(raw);
    if (truthy < 0)
        return NULL;
    if (!truthy)
        return Py_NewRef(no_headers);
    PyObject *key = PySequence_Tuple(raw);
    if (key == NULL)
        return NULL;
    PyObject *found = PyDict_GetItemWithError(header_sets, key);
    if (found != NULL) {
        Py_DECREF(key);
        return Py_NewRef(found);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    if (PyDict_GET_SIZE(header_sets) >= max_sets)
        PyDict_Clear(header_sets);
    if (PyDict_SetItem(header_sets, key, key) < 0) {
        Py_DECREF(key);
        return NULL;
    }
    return key;
}

static PyObject *
call0(PyObject *const *methods, int which, PyObject *msg)
{
    return PyObject_CallOneArg(methods[which], msg);
}

/* A message's topic and partition, as two new references; -1 and neither on error. */
static int
topic_and_partition(PyObject *const *methods, PyObject *msg, PyObject **topic, PyObject **p)
{
    *topic = call0(methods, M_TOPIC, msg);
    if (*topic == NULL)
        return -1;
    *p = call0(methods, M_PARTITION, msg);
    if (*p == NULL) {
        Py_CLEAR(*topic);
        return -1;
    }
    return 0;
}

/* (topic, partition) of a message, as a new tuple. */
static PyObject *
topic_partition(PyObject *const *methods, PyObject *msg)
{
    PyObject *topic, *p;
    if (topic_and_partition(methods, msg, &topic, &p) < 0)
        return NULL;
    PyObject *tp = PyTuple_Pack(2, topic, p);
    Py_DECREF(topic);
    Py_DECREF(p);
    return tp;
}

/* A message that carries an error: partition EOF goes to `eof`, anything else to `errors`. */
static int
note_error(PyObject *const *methods, PyObject *msg, PyObject *err, long eof_code, PyObject *eof, PyObject *errors)
{
    int rc = -1;
    PyObject *tp = topic_partition(methods, msg), *code = NULL, *offset = NULL, *entry = NULL;
    if (tp == NULL)
        return -1;
    code = PyObject_CallMethod(err, "code", NULL);
    if (code == NULL)
        goto done;
    long c = PyLong_AsLong(code);
    if (c == -1 && PyErr_Occurred())
        goto done;
    if (c == eof_code) {
        offset = call0(methods, M_OFFSET, msg);
        if (offset == NULL || PyDict_SetItem(eof, tp, offset) < 0)
            goto done;
    } else {
        entry = PyTuple_Pack(3, PyTuple_GET_ITEM(tp, 0), PyTuple_GET_ITEM(tp, 1), err);
        if (entry == NULL || PyList_Append(errors, entry) < 0)
            goto done;
    }
    rc = 0;
done:
    Py_XDECREF(tp);
    Py_XDECREF(code);
    Py_XDECREF(offset);
    Py_XDECREF(entry);
    return rc;
}

/* One Record from a message without an error; steals nothing. */
static PyObject *
make_record(PyObject *const *methods, PyObject *msg, PyTypeObject *record_type, PyObject *topic, PyObject *p,
            PyObject *header_sets, Py_ssize_t max_sets, PyObject *no_headers)
{
    PyObject *f[RECORD_FIELDS] = {NULL};
    f[0] = Py_NewRef(topic);
    f[1] = Py_NewRef(p);
    if ((f[2] = call0(methods, M_OFFSET, msg)) == NULL || (f[3] = call0(methods, M_KEY, msg)) == NULL ||
        (f[4] = call0(methods, M_VALUE, msg)) == NULL)
        goto fail;
    PyObject *raw_headers = call0(methods, M_HEADERS, msg);
    if (raw_headers == NULL)
        goto fail;
    f[5] = shared_headers(raw_headers, header_sets, max_sets, no_headers);
    Py_DECREF(raw_headers);
    if (f[5] == NULL)
        goto fail;
    PyObject *ts = call0(methods, M_TIMESTAMP, msg);
    if (ts == NULL)
        goto fail;
    if (!PyTuple_Check(ts) || PyTuple_GET_SIZE(ts) != 2) {
        Py_DECREF(ts);
        PyErr_SetString(PyExc_TypeError, "Message.timestamp() must return a (type, ms) tuple");
        goto fail;
    }
    f[6] = Py_NewRef(PyTuple_GET_ITEM(ts, 1));
    Py_DECREF(ts);
    Py_ssize_t key_len, value_len;
    if (payload_len(f[3], &key_len) < 0 || payload_len(f[4], &value_len) < 0)
        goto fail;
    if (key_len <= PY_SSIZE_T_MAX - RECORD_OVERHEAD - value_len)
        f[7] = PyLong_FromSsize_t(key_len + value_len + RECORD_OVERHEAD);
    else /* lengths no bytes can have (a __len__ of another payload): Python's int, no overflow */
        f[7] = sum_of_lengths(key_len, value_len);
    if (f[7] == NULL)
        goto fail;
    /* As tuple.__new__(record_type, fields) does it (CPython's tuple_subtype_new): allocate the
     * subtype's instance and move the items in, without building an intermediate tuple. */
    PyObject *record = record_type->tp_alloc(record_type, RECORD_FIELDS);
    if (record == NULL)
        goto fail;
    for (int i = 0; i < RECORD_FIELDS; i++)
        PyTuple_SET_ITEM(record, i, f[i]);
#if PY_VERSION_HEX >= 0x030E0000
    /* 3.14 caches the hash in the tuple, -1 until computed; tp_alloc zeroed it, which would read as
     * a hash of 0 (tuple_subtype_new resets it too). */
    ((PyTupleObject *)record)->ob_hash = -1;
#endif
    return record;
fail:
    for (int i = 0; i < RECORD_FIELDS; i++)
        Py_XDECREF(f[i]);
    return NULL;
}

static int
lookup_methods(PyObject *msg, PyObject **methods)
{
    for (int i = 0; i < M_COUNT; i++) {
        methods[i] = PyObject_GetAttrString((PyObject *)Py_TYPE(msg), METHOD_NAMES[i]);
        if (methods[i] == NULL)
            return -1;
    }
    return 0;
}

static PyObject *
build(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *messages, *header_sets, *no_headers;
    PyTypeObject *record_type;
    Py_ssize_t max_sets;
    long eof_code;
    if (!PyArg_ParseTuple(args, "OO!O!O!nl:build", &messages, &PyType_Type, &record_type, &PyDict_Type, &header_sets,
                          &PyTuple_Type, &no_headers, &max_sets, &eof_code))
        return NULL;
    if (!PyType_IsSubtype(record_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "record_type must be a tuple subclass");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(messages, "messages must be a sequence");
    if (seq == NULL)
        return NULL;
    PyObject *methods[M_COUNT] = {NULL};
    PyObject *records = PyDict_New(), *eof = PyDict_New(), *errors = PyList_New(0);
    PyObject *last_topic = NULL, *last_p = NULL, *out = NULL, *result = NULL, *msg = NULL;
    PyTypeObject *methods_for = NULL;
    if (records == NULL || eof == NULL || errors == NULL)
        goto done;
    /* The accessors of a message of another type may run Python code that changes the list: its
     * size and items are read again for each message (where a for loop over it stops), and the
     * message is held while it is used. */
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        Py_XSETREF(msg, Py_NewRef(PySequence_Fast_GET_ITEM(seq, i)));
        if (Py_TYPE(msg) != methods_for) {
            for (int m = 0; m < M_COUNT; m++)
                Py_CLEAR(methods[m]);
            if (lookup_methods(msg, methods) < 0)
                goto done;
            methods_for = Py_TYPE(msg);
        }
        PyObject *err = call0(methods, M_ERROR, msg);
        if (err == NULL)
            goto done;
        if (err != Py_None) {
            int rc = note_error(methods, msg, err, eof_code, eof, errors);
            Py_DECREF(err);
            if (rc < 0)
                goto done;
            continue;
        }
        Py_DECREF(err);
        PyObject *topic, *p;
        if (topic_and_partition(methods, msg, &topic, &p) < 0)
            goto done;
        int same = out != NULL && PyObject_RichCompareBool(p, last_p, Py_EQ) == 1 &&
                   PyObject_RichCompareBool(topic, last_topic, Py_EQ) == 1;
        if (!same) {
            if (PyErr_Occurred()) {
                Py_DECREF(topic);
                Py_DECREF(p);
                goto done;
            }
            PyObject *tp = PyTuple_Pack(2, topic, p);
            PyObject *fresh = PyList_New(0);
            PyObject *list = (tp && fresh) ? PyDict_SetDefault(records, tp, fresh) : NULL;
            Py_XDECREF(tp);
            Py_XDECREF(fresh);
            if (list == NULL) {
                Py_DECREF(topic);
                Py_DECREF(p);
                goto done;
            }
            Py_XSETREF(out, Py_NewRef(list));
            Py_XSETREF(last_topic, Py_NewRef(topic));
            Py_XSETREF(last_p, Py_NewRef(p));
        }
        PyObject *record = make_record(methods, msg, record_type, topic, p, header_sets, max_sets, no_headers);
        Py_DECREF(topic);
        Py_DECREF(p);
        if (record == NULL)
            goto done;
        int rc = PyList_Append(out, record);
        Py_DECREF(record);
        if (rc < 0)
            goto done;
    }
    result = PyTuple_Pack(3, records, eof, errors);
done:
    for (int m = 0; m < M_COUNT; m++)
        Py_XDECREF(methods[m]);
    Py_XDECREF(msg);
    Py_XDECREF(last_topic);
    Py_XDECREF(last_p);
    Py_XDECREF(out);
    Py_XDECREF(records);
    Py_XDECREF(eof);
    Py_XDECREF(errors);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef methods_table[] = {
    {"build", build, METH_VARARGS, "Records, EOF offsets and errors from a list of fetched messages."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "worker._records",
    .m_doc = "C twin of worker.fetch.build_batch_py.",
    .m_size = -1,
    .m_methods = methods_table,
};

PyMODINIT_FUNC
PyInit__records(void)
{
    return PyModule_Create(&module_def);
}
