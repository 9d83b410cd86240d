/* dissector._core._recent: the thin CPython binding of recent.c.
 *
 * Input: what dissector.flow.reassembly.HalfStream gives dissector/flow/recent.py's
 * RecentBytes: add(offset, data, keep), differs(offset, data), clear().
 * Output: a `RecentBytes` type with that interface (len(), `kept`, `compared`); stats() ->
 * {"recent_pieces": pieces added since the module was loaded}.
 * Rule: nothing here compares bytes; a piece kept as it came keeps its bytes object alive
 * (a reference, released when recent.c drops it), any other bytes-like piece is copied to a
 * bytes object first.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "recent.h"

/* Pieces added (a non-empty add) since the module was loaded: proof that reads used it. */
static long long pieces_added;

typedef struct {
    PyObject_HEAD
    pd_recent r;
} Recent;

static void release(void *owner) { Py_DECREF((PyObject *)owner); }

static int recent_init(Recent *self, PyObject *args, PyObject *kw) {
    static char *names[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "", names))
        return -1;
    pd_recent_free(&self->r);
    pd_recent_init(&self->r, release);
    return 0;
}

static PyObject *recent_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    (void)args;
    (void)kw;
    Recent *self = (Recent *)type->tp_alloc(type, 0);
    if (self != NULL)
        pd_recent_init(&self->r, release);
    return (PyObject *)self;
}

static void recent_dealloc(Recent *self) {
    pd_recent_free(&self->r);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *recent_add(Recent *self, PyObject *const *args, Py_ssize_t nargs) {
    long long offset, keep;
    PyObject *data;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "add(offset, data, keep)");
        return NULL;
    }
    offset = PyLong_AsLongLong(args[0]);
    keep = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    if (keep < 0 || keep > PD_RECENT_MAX_KEEP || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "add: offset < 0, or keep outside 0..2**30");
        return NULL;
    }
    if (PyBytes_CheckExact(args[1])) {
        data = args[1];
        Py_INCREF(data);
    } else {
        data = PyBytes_FromObject(args[1]);
        if (data == NULL)
            return NULL;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    int kept = pd_recent_add(&self->r, offset, (const uint8_t *)PyBytes_AS_STRING(data), n,
                             keep, data);
    if (kept < 0) {
        Py_DECREF(data);
        return PyErr_NoMemory();
    }
    if (!kept)
        Py_DECREF(data);
    if (n)
        pieces_added++;
    Py_RETURN_NONE;
}

static PyObject *recent_differs(Recent *self, PyObject *const *args, Py_ssize_t nargs) {
    long long offset;
    int64_t lo, hi;
    Py_buffer view;
    int found;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "differs(offset, data)");
        return NULL;
    }
    offset = PyLong_AsLongLong(args[0]);
    if (offset == -1 && PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    found = pd_recent_differs(&self->r, offset, view.buf, view.len, &lo, &hi);
    PyBuffer_Release(&view);
    if (!found)
        Py_RETURN_NONE;
    return Py_BuildValue("(LL)", (long long)lo, (long long)hi);
}

static PyObject *recent_clear(Recent *self, PyObject *unused) {
    (void)unused;
    pd_recent_clear(&self->r);
    Py_RETURN_NONE;
}

static Py_ssize_t recent_len(Recent *self) { return (Py_ssize_t)self->r.count; }

static PyObject *get_kept(Recent *self, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(self->r.kept);
}

static PyObject *get_compared(Recent *self, void *closure) {
    (void)closure;
    return PyLong_FromLongLong(self->r.compared);
}

static PyMethodDef recent_methods[] = {
    {"add", (PyCFunction)(void (*)(void))recent_add, METH_FASTCALL,
     "Keep data, delivered at stream offset, then drop the oldest past keep bytes."},
    {"differs", (PyCFunction)(void (*)(void))recent_differs, METH_FASTCALL,
     "The range (start, stop) of the first kept piece data contradicts, or None."},
    {"clear", (PyCFunction)recent_clear, METH_NOARGS, "Drop every piece."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef recent_getset[] = {
    {"kept", (getter)get_kept, NULL, "Bytes in the pieces kept.", NULL},
    {"compared", (getter)get_compared, NULL, "Blocks compared, all calls together.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods recent_sequence = {.sq_length = (lenfunc)recent_len};

static PyTypeObject RecentType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dissector._core._recent.RecentBytes",
    .tp_basicsize = sizeof(Recent),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The bytes one TCP direction delivered lately (dissector/flow/recent.py in C).",
    .tp_new = recent_new,
    .tp_init = (initproc)recent_init,
    .tp_dealloc = (destructor)recent_dealloc,
    .tp_methods = recent_methods,
    .tp_getset = recent_getset,
    .tp_as_sequence = &recent_sequence,
};

static PyObject *stats(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return Py_BuildValue("{sL}", "recent_pieces", pieces_added);
}

static PyMethodDef functions[] = {
    {"stats", stats, METH_NOARGS, "Pieces added since the module was loaded."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dissector._core._recent",
                                    "The recent bytes of a TCP direction (recent.c).", -1,
                                    functions, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__recent(void) {
    if (PyType_Ready(&RecentType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&RecentType);
    if (PyModule_AddObject(m, "RecentBytes", (PyObject *)&RecentType) < 0) {
        Py_DECREF(&RecentType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
