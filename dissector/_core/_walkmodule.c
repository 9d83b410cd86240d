/* dissector._core._walk: the thin CPython binding of the compiled stage (walk.c).
 *
 * Input: the reader's buffer (bytes), the position of the next record, the format's
 * parameters and the reader's counters (packet number, pcapng's last timestamp).
 * Output: (pos, number[, last_ts], rows): where the walk stopped, the counters after it, and
 * the rows of the records walked: either `items` (a list holding, per packet, a Segment for
 * a plain TCP segment or a RawPacket for the Python path to parse; the types are given once
 * by set_types) or, with columns=True, a dict of column name -> bytes (native byte order).
 * Rule: nothing here reads packet bytes; it only turns walk.c's columns into Python objects.
 * Address text comes from inet_ntop (what socket.inet_ntop calls), cached in a dict that is
 * emptied when it holds PD_ADDRESS_CACHE_SIZE (layout.h) entries, as dissector.net.headers does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <arpa/inet.h>
#include <stdlib.h>

#include "_dealer.h"
#include "walk.h"

/* Rows walked per call of walk.c: bounds the column memory of one call (about 160 KiB). */
#define BATCH_ROWS 1024
/* Interfaces the pcapng walk takes per call; a file with more: the rest go to Python. */
#define MAX_INTERFACES 4096

static PyTypeObject *segment_type = NULL, *raw_type = NULL;
/* With a Dealer: the types of this shard's packets the walk dealt, and of a run of other
 * shards' packets it skipped (dissector.events.Dealt, DealtRaw, Skipped). */
static PyTypeObject *dealt_type = NULL, *dealt_raw_type = NULL, *skipped_type = NULL;
static PyObject *addresses = NULL; /* bytes -> str */
/* Items this module made since it was loaded (stats()): proof that a read took this path. */
static unsigned long long segments_made = 0, raw_made = 0;
/* Packets a walk with a Dealer skipped (other shards'), made into no object. */
static unsigned long long packets_skipped = 0;

typedef struct {
    pd_cols c;
    void *block;
} cols_mem;

static int cols_alloc(cols_mem *m) {
    int64_t n = BATCH_ROWS;
    size_t size = (size_t)n * (7 * sizeof(int64_t) + 3 * sizeof(int32_t) + 6 * sizeof(uint32_t) + 32);
    char *p = PyMem_Malloc(size);
    if (p == NULL)
        return -1;
    m->block = p;
    m->c.cap = n;
    m->c.n = 0;
#define TAKE(field, type)                                                                      \
    m->c.field = (type *)p;                                                                    \
    p += (size_t)n * sizeof(type);
    TAKE(ts, int64_t) TAKE(data_off, int64_t) TAKE(caplen, int64_t) TAKE(orig_len, int64_t)
    TAKE(pay_off, int64_t) TAKE(pay_len, int64_t) TAKE(missing, int64_t)
    TAKE(linktype, int32_t) TAKE(interface, int32_t) TAKE(kind, int32_t)
    TAKE(sport, uint32_t) TAKE(dport, uint32_t) TAKE(seq, uint32_t) TAKE(ack, uint32_t)
    TAKE(flags, uint32_t) TAKE(window, uint32_t)
#undef TAKE
    m->c.src = (uint8_t *)p;
    p += (size_t)n * 16;
    m->c.dst = (uint8_t *)p;
    return 0;
}

/* The text of a 4- or 16-byte address (a new reference), from the cache. */
static PyObject *address_text(const uint8_t *raw, int size) {
    PyObject *key = PyBytes_FromStringAndSize((const char *)raw, size), *text;
    char out[INET6_ADDRSTRLEN];
    if (key == NULL)
        return NULL;
    text = PyDict_GetItemWithError(addresses, key);
    if (text != NULL) {
        Py_DECREF(key);
        return Py_NewRef(text);
    }
    if (PyErr_Occurred() || inet_ntop(size == 4 ? AF_INET : AF_INET6, raw, out, sizeof out) == NULL) {
        Py_DECREF(key);
        return PyErr_Occurred() ? NULL : PyErr_SetFromErrno(PyExc_OSError);
    }
    if (PyDict_GET_SIZE(addresses) >= PD_ADDRESS_CACHE_SIZE)
        PyDict_Clear(addresses);
    text = PyUnicode_FromString(out);
    if (text == NULL || PyDict_SetItem(addresses, key, text) < 0) {
        Py_DECREF(key);
        Py_XDECREF(text);
        return NULL;
    }
    Py_DECREF(key);
    return text;
}

/* A tuple of `type` (a NamedTuple) holding `n` new references; NULL if one is NULL. */
static PyObject *named(PyTypeObject *type, PyObject **items, Py_ssize_t n) {
    PyObject *t = NULL;
    Py_ssize_t k;
    for (k = 0; k < n; k++)
        if (items[k] == NULL)
            goto fail;
    t = type->tp_alloc(type, n);
    if (t == NULL)
        goto fail;
    for (k = 0; k < n; k++)
        PyTuple_SET_ITEM(t, k, items[k]);
    return t;
fail:
    for (k = 0; k < n; k++)
        Py_XDECREF(items[k]);
    return NULL;
}

static PyObject *row_item(const char *base, const pd_cols *c, int64_t i, int64_t number,
                          int dealt) {
    if (c->kind[i] == PD_RAW) {
        raw_made++;
        PyObject *items[6] = {
            PyLong_FromLongLong(number),
            PyLong_FromLongLong(c->ts[i]),
            PyLong_FromLong(c->linktype[i]),
            PyBytes_FromStringAndSize(base + c->data_off[i], (Py_ssize_t)c->caplen[i]),
            PyLong_FromLongLong(c->orig_len[i]),
            PyLong_FromLong(c->interface[i]),
        };
        return named(dealt ? dealt_raw_type : raw_type, items, 6);
    } else {
        int size = c->kind[i] == PD_TCP4 ? 4 : 16;
        segments_made++;
        PyObject *items[12] = {
            PyLong_FromLongLong(number),
            PyLong_FromLongLong(c->ts[i]),
            address_text(c->src + 16 * i, size),
            address_text(c->dst + 16 * i, size),
            PyLong_FromUnsignedLong(c->sport[i]),
            PyLong_FromUnsignedLong(c->dport[i]),
            PyLong_FromUnsignedLong(c->seq[i]),
            PyLong_FromUnsignedLong(c->ack[i]),
            PyLong_FromUnsignedLong(c->flags[i]),
            PyLong_FromUnsignedLong(c->window[i]),
            PyBytes_FromStringAndSize(base + c->pay_off[i], (Py_ssize_t)c->pay_len[i]),
            PyLong_FromLongLong(c->missing[i]),
        };
        return named(dealt ? dealt_type : segment_type, items, 12);
    }
}

/* Append one batch's columns to the lists of `out` (name -> list of bytes chunks). */
static int add_columns(PyObject *out, const pd_cols *c) {
#define COL(name, field, width)                                                                \
    do {                                                                                       \
        PyObject *chunk = PyBytes_FromStringAndSize((const char *)c->field, c->n * (width));   \
        PyObject *list = PyDict_GetItemString(out, name);                                      \
        if (chunk == NULL)                                                                     \
            return -1;                                                                         \
        if (list == NULL) {                                                                    \
            list = PyList_New(0);                                                              \
            if (list == NULL || PyDict_SetItemString(out, name, list) < 0) {                   \
                Py_XDECREF(list);                                                              \
                Py_DECREF(chunk);                                                              \
                return -1;                                                                     \
            }                                                                                  \
            Py_DECREF(list);                                                                   \
        }                                                                                      \
        if (PyList_Append(list, chunk) < 0) {                                                  \
            Py_DECREF(chunk);                                                                  \
            return -1;                                                                         \
        }                                                                                      \
        Py_DECREF(chunk);                                                                      \
    } while (0)
    COL("ts", ts, 8); COL("data_off", data_off, 8); COL("caplen", caplen, 8);
    COL("orig_len", orig_len, 8); COL("pay_off", pay_off, 8); COL("pay_len", pay_len, 8);
    COL("missing", missing, 8); COL("linktype", linktype, 4); COL("interface", interface, 4);
    COL("kind", kind, 4); COL("sport", sport, 4); COL("dport", dport, 4); COL("seq", seq, 4);
    COL("ack", ack, 4); COL("flags", flags, 4); COL("window", window, 4);
    COL("src", src, 16); COL("dst", dst, 16);
#undef COL
    return 0;
}

/* A run of packets of other shards a dealing walk skipped: how many, the last one's number
 * and time, the latest time among them and the number of the packet that had it. With the
 * clock, a run ends before a packet later than its latest: the clock's steps are the runs'
 * first packets, where a one-process read would end idle connections. */
typedef struct {
    int64_t count, number, ts, top, at;
} skipped_run;

/* Append the Skipped(number, ts, top) item of a run, if any, and empty it. */
static int flush_skipped(PyObject *out, skipped_run *run) {
    PyObject *item;
    if (run->count == 0)
        return 0;
    {
        PyObject *items[4] = {PyLong_FromLongLong(run->number), PyLong_FromLongLong(run->ts),
                              PyLong_FromLongLong(run->top), PyLong_FromLongLong(run->at)};
        item = named(skipped_type, items, 4);
    }
    run->count = 0;
    if (item == NULL || PyList_Append(out, item) < 0) {
        Py_XDECREF(item);
        return -1;
    }
    Py_DECREF(item);
    return 0;
}

/* Deal row i (without a dealer: every row is an item). 2: an item of this shard the walk
 * dealt; 1: an item it did not deal (Python deals it, and the walk ends after it: the
 * deals of the next packets come after its own); 0: skipped; -1: out of memory. */
static int deal_row(pd_dealer_object *dealer, const pd_cursor *buf, const pd_cols *c,
                    int64_t i) {
    int32_t shard;
    if (dealer == NULL)
        return 1;
    shard = pd_deal_row(dealer->dealer, buf, c, i);
    if (shard == PD_DEAL_NO_MEMORY)
        return -1;
    if (shard == PD_DEAL_UNKNOWN)
        return 1;
    if (shard == dealer->mine)
        return 2;
    packets_skipped++;
    return 0;
}

/* Packet `number` at time `ts` skipped: into `run` (told first if the clock steps). */
static int skip(PyObject *out, skipped_run *run, int clock, int64_t number, int64_t ts) {
    if (run->count && clock && ts > run->top && flush_skipped(out, run) < 0)
        return -1;
    if (run->count == 0 || ts > run->top) {
        run->top = ts;
        run->at = number;
    }
    run->count++;
    run->number = number;
    run->ts = ts;
    return 0;
}

typedef struct {
    int pcapng;
    pd_pcap pcap;
    pd_pcapng ng;
} walk_format;

/* Walk `buf` from `*pos` in batches until the walk stops short of a full batch. */
static PyObject *walk_all(Py_buffer *view, int64_t *pos, const walk_format *f, int64_t *number,
                          int64_t *last_ts, int columns, pd_dealer_object *dealer) {
    pd_cursor buf = {(const uint8_t *)view->buf, (int64_t)view->len};
    cols_mem m;
    skipped_run run = {0, 0, 0, 0, 0};
    int take;
    PyObject *out = columns ? PyDict_New() : PyList_New(0);
    if (out == NULL)
        return NULL;
    if ((segment_type == NULL || (dealer != NULL && skipped_type == NULL)) && !columns) {
        PyErr_SetString(PyExc_RuntimeError, "set_types() was not called");
        goto fail;
    }
    if (cols_alloc(&m) < 0) {
        PyErr_NoMemory();
        goto fail;
    }
    if (columns)
        dealer = NULL;
    for (;;) {
        int64_t first = *number, i;
        m.c.n = 0;
        if (f->pcapng)
            *pos = pd_walk_pcapng(&buf, *pos, &f->ng, &m.c, number, last_ts);
        else
            *pos = pd_walk_pcap(&buf, *pos, &f->pcap, &m.c, number);
        if (columns) {
            if (m.c.n && add_columns(out, &m.c) < 0)
                goto fail_mem;
        } else {
            for (i = 0; i < m.c.n; i++) {
                PyObject *item;
                take = deal_row(dealer, &buf, &m.c, i);
                if (take < 0) {
                    PyErr_NoMemory();
                    goto fail_mem;
                }
                if (take == 0) {
                    if (skip(out, &run, dealer->clock, first + 1 + i, m.c.ts[i]) < 0)
                        goto fail_mem;
                    continue;
                }
                if (run.count && !dealer->clock)
                    run.count = 0; /* no clock: only a run that ends the call is told */
                if (run.count && flush_skipped(out, &run) < 0)
                    goto fail_mem;
                item = row_item((const char *)view->buf, &m.c, i, first + 1 + i, take == 2);
                if (item == NULL || PyList_Append(out, item) < 0) {
                    Py_XDECREF(item);
                    goto fail_mem;
                }
                Py_DECREF(item);
                if (take == 1 && dealer != NULL) { /* the walk goes on after Python's deal */
                    *pos = pd_row_end(&buf, &m.c, i, f->pcapng, f->ng.little);
                    *number = first + 1 + i;
                    if (last_ts != NULL)
                        *last_ts = m.c.ts[i];
                    break;
                }
            }
            if (i < m.c.n)
                break;
        }
        if (m.c.n < m.c.cap)
            break;
    }
    if (flush_skipped(out, &run) < 0) /* the last packets' time: the reader's end */
        goto fail_mem;
    PyMem_Free(m.block);
    return out;
fail_mem:
    PyMem_Free(m.block);
fail:
    Py_DECREF(out);
    return NULL;
}

/* The optional `dealer` argument: a Dealer, or None (every packet an item). */
static int dealer_arg(PyObject *obj, pd_dealer_object **out) {
    PyTypeObject *type = pd_dealer_type();
    if (type == NULL)
        return -1;
    if (obj == NULL || obj == Py_None) {
        *out = NULL;
        return 0;
    }
    if (!PyObject_TypeCheck(obj, type) || ((pd_dealer_object *)obj)->dealer == NULL) {
        PyErr_SetString(PyExc_TypeError, "dealer: a Dealer or None expected");
        return -1;
    }
    *out = (pd_dealer_object *)obj;
    return 0;
}

static PyObject *scan_pcap(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"buf", "pos", "little", "frac_div", "linktype", "number", "columns",
                            "dealer", NULL};
    PyObject *dealer_obj = NULL;
    pd_dealer_object *dealer;
    Py_buffer view;
    long long pos, frac_div, number;
    int little, linktype, columns = 0;
    walk_format f = {0};
    PyObject *rows;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*LpLiL|pO", names, &view, &pos, &little,
                                     &frac_div, &linktype, &number, &columns, &dealer_obj))
        return NULL;
    if (dealer_arg(dealer_obj, &dealer) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (pos < 0 || frac_div < 1) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "pos < 0 or frac_div < 1");
        return NULL;
    }
    f.pcap.little = little;
    f.pcap.frac_div = frac_div;
    f.pcap.linktype = linktype;
    {
        int64_t p = pos, n = number;
        rows = walk_all(&view, &p, &f, &n, NULL, columns, dealer);
        PyBuffer_Release(&view);
        if (rows == NULL)
            return NULL;
        return Py_BuildValue("(LLN)", (long long)p, (long long)n, rows);
    }
}

/* Interface tuples (position, linktype, snaplen, mul, div, offset) -> pd_iface; the ones
 * whose rule does not fit 64 bits are marked unusable (their packets go to Python). */
static int read_interfaces(PyObject *seq, pd_iface *out, int64_t *count) {
    Py_ssize_t n = PySequence_Size(seq), k;
    if (n < 0)
        return -1;
    *count = n < MAX_INTERFACES ? n : MAX_INTERFACES;
    for (k = 0; k < *count; k++) {
        PyObject *t = PySequence_GetItem(seq, k);
        long long v[6];
        int j, overflow = 0;
        if (t == NULL)
            return -1;
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 6) {
            Py_DECREF(t);
            PyErr_SetString(PyExc_TypeError, "interfaces: tuples of 6 ints expected");
            return -1;
        }
        for (j = 0; j < 6; j++) {
            int o = 0;
            v[j] = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(t, j), &o);
            if (v[j] == -1 && PyErr_Occurred()) {
                Py_DECREF(t);
                return -1;
            }
            overflow |= o;
        }
        Py_DECREF(t);
        out[k].position = (int32_t)v[0];
        out[k].linktype = (int32_t)v[1];
        out[k].mul = v[3];
        out[k].div = v[4];
        out[k].offset = v[5];
        /* raw (< 2^64) * mul must fit 127 bits; positions and link types fit 32 bits */
        out[k].usable = !overflow && v[3] >= 1 && v[3] <= (1LL << 40) && v[4] >= 1 &&
                        v[0] >= 0 && v[0] <= INT32_MAX && v[1] >= 0 && v[1] <= INT32_MAX;
    }
    return 0;
}

static PyObject *scan_pcapng(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"buf", "pos", "little", "interfaces", "number", "last_ts", "columns",
                            "dealer", NULL};
    PyObject *dealer_obj = NULL;
    pd_dealer_object *dealer;
    Py_buffer view;
    long long pos, number, last_ts;
    int little, columns = 0;
    PyObject *ifaces, *rows;
    pd_iface *table;
    walk_format f = {0};
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*LpOLL|pO", names, &view, &pos, &little,
                                     &ifaces, &number, &last_ts, &columns, &dealer_obj))
        return NULL;
    if (dealer_arg(dealer_obj, &dealer) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (pos < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "pos < 0");
        return NULL;
    }
    table = PyMem_Calloc(MAX_INTERFACES, sizeof(pd_iface));
    if (table == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    f.pcapng = 1;
    f.ng.little = little;
    f.ng.ifaces = table;
    if (read_interfaces(ifaces, table, &f.ng.count) < 0) {
        PyMem_Free(table);
        PyBuffer_Release(&view);
        return NULL;
    }
    {
        int64_t p = pos, n = number, ts = last_ts;
        rows = walk_all(&view, &p, &f, &n, &ts, columns, dealer);
        PyMem_Free(table);
        PyBuffer_Release(&view);
        if (rows == NULL)
            return NULL;
        return Py_BuildValue("(LLLN)", (long long)p, (long long)n, (long long)ts, rows);
    }
}

static PyObject *set_types(PyObject *self, PyObject *args) {
    PyObject *seg, *raw, *dealt = NULL, *dealt_raw = NULL, *skipped = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!|O!O!O!", &PyType_Type, &seg, &PyType_Type, &raw,
                          &PyType_Type, &dealt, &PyType_Type, &dealt_raw, &PyType_Type, &skipped))
        return NULL;
    if (skipped != NULL) { /* the types of a dealing walk */
        if (!PyType_IsSubtype((PyTypeObject *)dealt, (PyTypeObject *)seg) ||
            !PyType_IsSubtype((PyTypeObject *)dealt_raw, (PyTypeObject *)raw) ||
            !PyType_IsSubtype((PyTypeObject *)skipped, &PyTuple_Type)) {
            PyErr_SetString(PyExc_TypeError, "subclasses of the Segment and RawPacket types "
                                             "and a tuple subclass expected");
            return NULL;
        }
        Py_XSETREF(dealt_type, (PyTypeObject *)Py_NewRef(dealt));
        Py_XSETREF(dealt_raw_type, (PyTypeObject *)Py_NewRef(dealt_raw));
        Py_XSETREF(skipped_type, (PyTypeObject *)Py_NewRef(skipped));
    }
    if (!PyType_IsSubtype((PyTypeObject *)seg, &PyTuple_Type) ||
        !PyType_IsSubtype((PyTypeObject *)raw, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "tuple subclasses expected");
        return NULL;
    }
    Py_XSETREF(segment_type, (PyTypeObject *)Py_NewRef(seg));
    Py_XSETREF(raw_type, (PyTypeObject *)Py_NewRef(raw));
    Py_RETURN_NONE;
}

static PyObject *stats(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return Py_BuildValue("{sKsKsK}", "segments", segments_made, "raw_packets", raw_made,
                         "packets_skipped", packets_skipped);
}

static PyMethodDef methods[] = {
    {"scan_pcap", (PyCFunction)(void (*)(void))scan_pcap, METH_VARARGS | METH_KEYWORDS,
     "Walk pcap records from pos: (pos, number, items or columns)."},
    {"scan_pcapng", (PyCFunction)(void (*)(void))scan_pcapng, METH_VARARGS | METH_KEYWORDS,
     "Walk pcapng Enhanced Packet Blocks from pos: (pos, number, last_ts, items or columns)."},
    {"set_types", set_types, METH_VARARGS,
     "The Segment and RawPacket types of the items [, and those of a dealing walk]."},
    {"stats", stats, METH_NOARGS, "Segments and raw packets made since the module was loaded."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dissector._core._walk",
                                    "The compiled record walk and header parse.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__walk(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    addresses = PyDict_New();
    if (addresses == NULL || PyModule_AddIntConstant(m, "BATCH_ROWS", BATCH_ROWS) < 0 ||
        PyModule_AddIntConstant(m, "ADDRESS_CACHE_SIZE", PD_ADDRESS_CACHE_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "MAX_INTERFACES", MAX_INTERFACES) < 0 ||
        PyModule_AddIntConstant(m, "MAX_DEALER_CAPACITY", PD_DEAL_MAX_CAPACITY) < 0 ||
        pd_dealer_type() == NULL ||
        PyModule_AddObjectRef(m, "Dealer", (PyObject *)pd_dealer_type()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
