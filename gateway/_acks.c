/* One request's acknowledgements from librdkafka: the C twin of gateway/acks.py.
 *
 * librdkafka calls a delivery callback per record on the gateway producer's poll thread, which
 * must take the GIL for each. In Python that callback (a functools.partial over a method that
 * stores the ack and counts under a lock) held the GIL long enough for the event loop to wait on
 * it: at 100 records per request the gateway spent 7.1-9.0 us of CPU per record with it and
 * 5.0-5.9 with this (bench notes in docs/design/performance-history.md). Here each record's
 * callback is a small object whose call stores (err, partition, offset) and counts without the
 * interpreter; every step runs under the GIL and calls nothing that could release it, so the
 * counters need no lock.
 *
 * Pending(fut, n, done)               a request of n records; `done`: the producer's list
 *   .batch(items, start, stop)        -> [{"value", "key", "callback"}] for items[start:stop]
 *   .callback(i)                      -> record i's callback(err, msg)
 *   .seal(unqueued)                   -> True when every queued record is already settled
 *   .placed()                         -> b'[{"partition":p,"offset":o},...]' when every record was
 *                                        acknowledged without an error, else None
 *   .acks .fut .done .size .left .failed .sealed
 * take(done)                          -> done's items; done emptied
 *
 * The state after any sequence of these calls must equal gateway/acks.py's
 * (tests/unit/test_gateway_acks.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyObject *acks; /* list of n: None, or (err, partition, offset) */
    PyObject *done; /* the producer's list of settled requests */
    PyObject *fut;
    Py_ssize_t left;
    Py_ssize_t size;
    Py_ssize_t failed;
    char sealed;
} Pending;

typedef struct {
    PyObject_HEAD
    Pending *pending;
    Py_ssize_t i;
} Slot;

static PyTypeObject PendingType, SlotType;
static PyObject *s_partition, *s_offset, *s_value, *s_key, *s_callback;

/* --- Slot: record i's delivery callback ------------------------------------------------------ */

static void
Slot_dealloc(Slot *self)
{
    Py_XDECREF(self->pending);
    PyObject_Free(self);
}

static PyObject *
Slot_call(Slot *self, PyObject *args, PyObject *kwargs)
{
    PyObject *err, *msg;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "a delivery callback takes (err, msg)");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "callback", 2, 2, &err, &msg))
        return NULL;
    Pending *p = self->pending;
    /* As the message gives them, as in the reference: None stays None (an offset librdkafka did
     * not learn: a retried write the broker had already taken). */
    PyObject *partition = PyObject_CallMethodNoArgs(msg, s_partition);
    if (partition == NULL)
        return NULL;
    PyObject *offset = PyObject_CallMethodNoArgs(msg, s_offset);
    if (offset == NULL) {
        Py_DECREF(partition);
        return NULL;
    }
    PyObject *ack = PyTuple_Pack(3, err, partition, offset);
    Py_DECREF(partition);
    Py_DECREF(offset);
    if (ack == NULL || PyList_SetItem(p->acks, self->i, ack) < 0) /* steals ack */
        return NULL;
    if (err != Py_None)
        p->failed++;
    p->left--;
    if (p->left == 0 && p->sealed && PyList_Append(p->done, (PyObject *)p) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyTypeObject SlotType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ferry.gateway._acks.Slot",
    .tp_basicsize = sizeof(Slot),
    .tp_dealloc = (destructor)Slot_dealloc,
    .tp_call = (ternaryfunc)Slot_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One record's delivery callback (made by Pending.batch and Pending.callback).",
};

static PyObject *
new_slot(Pending *pending, Py_ssize_t i)
{
    if (i < 0 || i >= PyList_GET_SIZE(pending->acks)) {
        PyErr_Format(PyExc_IndexError, "record %zd of a request of %zd", i, PyList_GET_SIZE(pending->acks));
        return NULL;
    }
    Slot *slot = PyObject_New(Slot, &SlotType);
    if (slot == NULL)
        return NULL;
    Py_INCREF(pending);
    slot->pending = pending;
    slot->i = i;
    return (PyObject *)slot;
}

/* --- Pending ---------------------------------------------------------------------------------- */

static int
Pending_traverse(Pending *self, visitproc visit, void *arg)
{
    Py_VISIT(self->acks);
    Py_VISIT(self->done);
    Py_VISIT(self->fut);
    return 0;
}

static int
Pending_clear(Pending *self)
{
    Py_CLEAR(self->acks);
    Py_CLEAR(self->done);
    Py_CLEAR(self->fut);
    return 0;
}

static void
Pending_dealloc(Pending *self)
{
    PyObject_GC_UnTrack(self);
    Pending_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
Pending_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"fut", "n", "done", NULL};
    PyObject *fut, *done;
    Py_ssize_t n;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OnO!", names, &fut, &n, &PyList_Type, &done))
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "n must be >= 0");
        return NULL;
    }
    Pending *self = (Pending *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->acks = PyList_New(n);
    if (self->acks == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        PyList_SET_ITEM(self->acks, i, Py_NewRef(Py_None));
    self->fut = Py_NewRef(fut);
    self->done = Py_NewRef(done);
    self->left = n;
    return (PyObject *)self;
}

static PyObject *
Pending_batch(Pending *self, PyObject *args)
{
    PyObject *items;
    Py_ssize_t start, stop;
    if (!PyArg_ParseTuple(args, "Onn", &items, &start, &stop))
        return NULL;
    if (start < 0 || stop < start || stop > PyList_GET_SIZE(self->acks)) {
        PyErr_Format(PyExc_IndexError, "records %zd:%zd of a request of %zd", start, stop, PyList_GET_SIZE(self->acks));
        return NULL;
    }
    PyObject *out = PyList_New(stop - start);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *message = NULL, *value = NULL, *key = NULL, *slot = NULL;
        PyObject *item = PySequence_GetItem(items, i);
        if (item == NULL)
            goto fail;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 1) {
            Py_DECREF(item);
            PyErr_SetString(PyExc_TypeError, "items are (record, topic, size) tuples");
            goto fail;
        }
        PyObject *record = PyTuple_GET_ITEM(item, 0);
        int bad = (message = PyDict_New()) == NULL || (value = PyObject_GetAttr(record, s_value)) == NULL ||
                  (key = PyObject_GetAttr(record, s_key)) == NULL || (slot = new_slot(self, i)) == NULL ||
                  PyDict_SetItem(message, s_value, value) < 0 || PyDict_SetItem(message, s_key, key) < 0 ||
                  PyDict_SetItem(message, s_callback, slot) < 0;
        Py_DECREF(item);
        Py_XDECREF(value);
        Py_XDECREF(key);
        Py_XDECREF(slot);
        if (bad) {
            Py_XDECREF(message);
            goto fail;
        }
        PyList_SET_ITEM(out, i - start, message);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *
Pending_callback(Pending *self, PyObject *arg)
{
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    return new_slot(self, i);
}

static PyObject *
Pending_seal(Pending *self, PyObject *arg)
{
    Py_ssize_t unqueued = PyLong_AsSsize_t(arg);
    if (unqueued == -1 && PyErr_Occurred())
        return NULL;
    self->left -= unqueued;
    self->sealed = 1;
    return PyBool_FromLong(self->left == 0);
}

/* The decimal digits of v at o; returns the end. */
static char *
put_int(char *o, long long v)
{
    char digits[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    if (v < 0)
        *o++ = '-';
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (n)
        *o++ = digits[--n];
    return o;
}

#define PUT(o, lit) (memcpy((o), (lit), sizeof(lit) - 1), (o) += sizeof(lit) - 1)

static PyObject *
Pending_placed(Pending *self, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t n = PyList_GET_SIZE(self->acks);
    /* [ ] and per record {"partition":<20>,"offset":<20>}, at most 52 bytes */
    PyObject *out = PyBytes_FromStringAndSize(NULL, 2 + n * 53);
    if (out == NULL)
        return NULL;
    char *o = PyBytes_AS_STRING(out), *start = o;
    *o++ = '[';
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ack = PyList_GET_ITEM(self->acks, i);
        if (!PyTuple_Check(ack) || PyTuple_GET_SIZE(ack) != 3 || PyTuple_GET_ITEM(ack, 0) != Py_None ||
            !PyLong_CheckExact(PyTuple_GET_ITEM(ack, 1))) {
            Py_DECREF(out);
            Py_RETURN_NONE; /* not acknowledged, or with an error */
        }
        PyObject *offset = PyTuple_GET_ITEM(ack, 2);
        if (offset != Py_None && !PyLong_CheckExact(offset)) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        long long partition = PyLong_AsLongLong(PyTuple_GET_ITEM(ack, 1)), at = 0;
        if (partition == -1 && PyErr_Occurred())
            goto overflow;
        if (offset != Py_None && (at = PyLong_AsLongLong(offset)) == -1 && PyErr_Occurred())
            goto overflow;
        if (i)
            *o++ = ',';
        PUT(o, "{\"partition\":");
        o = put_int(o, partition);
        PUT(o, ",\"offset\":");
        if (offset == Py_None)
            PUT(o, "null");
        else
            o = put_int(o, at);
        *o++ = '}';
    }
    *o++ = ']';
    if (_PyBytes_Resize(&out, o - start) < 0)
        return NULL;
    return out;
overflow: /* beyond 64 bits: no Kafka offset is */
    Py_DECREF(out);
    PyErr_Clear();
    Py_RETURN_NONE;
}

static PyMethodDef Pending_methods[] = {
    {"batch", (PyCFunction)Pending_batch, METH_VARARGS, "produce_batch()'s messages for items[start:stop]."},
    {"callback", (PyCFunction)Pending_callback, METH_O, "Record i's delivery callback."},
    {"seal", (PyCFunction)Pending_seal, METH_O, "Every record offered; True when all are settled."},
    {"placed", (PyCFunction)Pending_placed, METH_NOARGS, "The results as JSON text when every record was written."},
    {NULL},
};

static PyMemberDef Pending_members[] = {
    {"acks", T_OBJECT, offsetof(Pending, acks), READONLY, NULL},
    {"done", T_OBJECT, offsetof(Pending, done), READONLY, NULL},
    {"fut", T_OBJECT, offsetof(Pending, fut), READONLY, NULL},
    {"size", T_PYSSIZET, offsetof(Pending, size), 0, NULL},
    {"left", T_PYSSIZET, offsetof(Pending, left), READONLY, NULL},
    {"failed", T_PYSSIZET, offsetof(Pending, failed), READONLY, NULL},
    {"sealed", T_BOOL, offsetof(Pending, sealed), READONLY, NULL},
    {NULL},
};

static PyTypeObject PendingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ferry.gateway._acks.Pending",
    .tp_basicsize = sizeof(Pending),
    .tp_dealloc = (destructor)Pending_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One request's acknowledgements (gateway/acks.py's Pending).",
    .tp_traverse = (traverseproc)Pending_traverse,
    .tp_clear = (inquiry)Pending_clear,
    .tp_methods = Pending_methods,
    .tp_members = Pending_members,
    .tp_new = Pending_new,
};

/* --- module ----------------------------------------------------------------------------------- */

static PyObject *
take(PyObject *module, PyObject *done)
{
    if (!PyList_Check(done)) {
        PyErr_SetString(PyExc_TypeError, "take() empties a list");
        return NULL;
    }
    PyObject *out = PyList_GetSlice(done, 0, PyList_GET_SIZE(done));
    if (out != NULL && PyList_SetSlice(done, 0, PyList_GET_SIZE(done), NULL) < 0)
        Py_CLEAR(out);
    return out;
}

static PyMethodDef module_methods[] = {
    {"take", take, METH_O, "Empty the list; what it held, in order."},
    {NULL},
};

static struct PyModuleDef acks_module = {
    PyModuleDef_HEAD_INIT, "ferry.gateway._acks", "C twin of gateway/acks.py.", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__acks(void)
{
    if (PyType_Ready(&PendingType) < 0 || PyType_Ready(&SlotType) < 0)
        return NULL;
    if ((s_partition = PyUnicode_InternFromString("partition")) == NULL ||
        (s_offset = PyUnicode_InternFromString("offset")) == NULL ||
        (s_value = PyUnicode_InternFromString("value")) == NULL ||
        (s_key = PyUnicode_InternFromString("key")) == NULL ||
        (s_callback = PyUnicode_InternFromString("callback")) == NULL)
        return NULL;
    PyObject *module = PyModule_Create(&acks_module);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "Pending", (PyObject *)&PendingType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
