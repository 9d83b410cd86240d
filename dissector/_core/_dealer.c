/* dissector._core._walk.Dealer: the CPython face of the compiled dealer (deal.c).
 *
 * Input: Dealer(n, mine, capacity, clock); deal(a, a_port, b, b_port) with a and b address
 * bytes of one size (4 or 16) and ports 0..65535.
 * Output: the shard of that connection, dealt by the one state the walks share.
 * Rule: no packet bytes are read here; arguments out of range are a ValueError.
 */
#include "_dealer.h"

static int dealer_init(pd_dealer_object *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"n", "mine", "capacity", "clock", NULL};
    int n, mine, clock = 0;
    long long capacity;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iiL|p", names, &n, &mine, &capacity, &clock))
        return -1;
    if (n < 1 || n > PD_DEAL_MAX_SHARDS || mine < 0 || mine >= n || capacity < 0 ||
        capacity > PD_DEAL_MAX_CAPACITY) {
        PyErr_SetString(PyExc_ValueError, "Dealer: n, mine or capacity out of range");
        return -1;
    }
    pd_dealer_free(self->dealer);
    self->dealer = pd_dealer_new(n, capacity);
    if (self->dealer == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->mine = mine;
    self->clock = clock;
    return 0;
}

static void dealer_dealloc(pd_dealer_object *self) {
    pd_dealer_free(self->dealer);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *dealer_deal(pd_dealer_object *self, PyObject *args) {
    Py_buffer a, b;
    unsigned int a_port, b_port;
    int32_t shard;
    if (self->dealer == NULL) {
        PyErr_SetString(PyExc_ValueError, "Dealer not initialised");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*Iy*I", &a, &a_port, &b, &b_port))
        return NULL;
    if (a.len != b.len || (a.len != 4 && a.len != 16) || a_port > 65535 || b_port > 65535) {
        PyBuffer_Release(&a);
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "deal: addresses of 4 or 16 bytes, ports < 65536");
        return NULL;
    }
    shard = pd_deal(self->dealer, a.buf, a_port, b.buf, b_port, (int)a.len);
    PyBuffer_Release(&a);
    PyBuffer_Release(&b);
    if (shard == PD_DEAL_NO_MEMORY)
        return PyErr_NoMemory();
    return PyLong_FromLong(shard);
}

static PyMethodDef dealer_methods[] = {
    {"deal", (PyCFunction)dealer_deal, METH_VARARGS,
     "deal(a, a_port, b, b_port): the shard of the connection between the two endpoints."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject dealer_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dissector._core._walk.Dealer",
    .tp_basicsize = sizeof(pd_dealer_object),
    .tp_dealloc = (destructor)dealer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Dealer(n, mine, capacity, clock=False): connections to shards (deal.h).",
    .tp_methods = dealer_methods,
    .tp_init = (initproc)dealer_init,
    .tp_new = PyType_GenericNew,
};

PyTypeObject *pd_dealer_type(void) {
    if (PyType_Ready(&dealer_type) < 0)
        return NULL;
    return &dealer_type;
}
