/* dissector._core._frames: the thin CPython binding of the compiled framing stage (frames.c).
 *
 * Input: a buffer holding one direction's stream from a frame boundary, a position, the
 * frame size limit.
 * Output: scan_frames -> (pos, stop, columns): where the scan stopped, why (STOP_*), and per
 * column (COLUMNS names them) the rows as bytes of native int64; scan_rows -> (pos, stop,
 * rows): one tuple per frame, what FrameDecoder reads; scan_block -> (pos, stop, n, block):
 * a frame run's rows in one bytes object; crc32c(data) for tests.
 * Rule: nothing here reads stream bytes; it only hands frames.c's columns to Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "crc32c.h"
#include "frames.h"

/* Frames scanned per call at most: bounds the column memory of one call
 * (PD_FC_NCOLS * 8 bytes a row: about 180 KiB). */
#define BATCH_FRAMES 1024

static const char *const column_names[PD_FC_NCOLS] = {PD_FC_NAMES};

static PyObject *scan_frames(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"buf", "pos", "max_frame_size", "rows", NULL};
    Py_buffer view;
    long long pos, max_size, rows = BATCH_FRAMES;
    int64_t *block;
    pd_frames out;
    pd_cursor c;
    int stop = PD_STOP_END;
    PyObject *cols, *result;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*LL|L", names, &view, &pos, &max_size, &rows))
        return NULL;
    if (pos < 0 || pos > view.len || rows < 1 || rows > BATCH_FRAMES || max_size < 8) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "pos outside the buffer, rows or max_frame_size");
        return NULL;
    }
    block = PyMem_Malloc((size_t)rows * PD_FC_NCOLS * sizeof(int64_t));
    if (block == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    out.cap = rows;
    out.n = 0;
    for (int k = 0; k < PD_FC_NCOLS; k++)
        out.col[k] = block + (size_t)k * (size_t)rows;
    c.base = view.buf;
    c.len = view.len;
    Py_BEGIN_ALLOW_THREADS
    pos = pd_scan_frames(&c, pos, max_size, PD_ANY_TYPE, &out, &stop);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    cols = PyTuple_New(PD_FC_NCOLS);
    if (cols == NULL) {
        PyMem_Free(block);
        return NULL;
    }
    for (int k = 0; k < PD_FC_NCOLS; k++) {
        PyObject *b = PyBytes_FromStringAndSize((const char *)out.col[k],
                                                (Py_ssize_t)(out.n * (int64_t)sizeof(int64_t)));
        if (b == NULL) {
            PyMem_Free(block);
            Py_DECREF(cols);
            return NULL;
        }
        PyTuple_SET_ITEM(cols, k, b);
    }
    PyMem_Free(block);
    result = Py_BuildValue("(LiN)", pos, stop, cols);
    return result;
}

/* Frames taken per scan_rows call: the rows live on the stack (PD_FC_NCOLS * 8 bytes
 * each, ~12 KiB); the decoder calls again after a FULL stop. */
#define ROW_FRAMES 64

/* Frames scan_rows and scan_block took since the module was loaded (stats()): proof that
 * reads use them. */
static unsigned long long frames_taken = 0;

/* scan_rows(buf, pos, max_frame_size) -> (pos, stop, rows): what the Python FrameDecoder
 * needs of each frame taken, one tuple per frame: (offset, total_size, command_size,
 * checksum, crc_expected, crc_computed, meta_at, meta_len), the last five 0 for a command
 * without payload. One small call per piece of stream: no column objects. */
static PyObject *scan_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    static const int keep[8] = {PD_FC_OFFSET,       PD_FC_TOTAL_SIZE,        PD_FC_COMMAND_SIZE,
                                PD_FC_CHECKSUM,     PD_FC_CRC_EXPECTED, PD_FC_CRC_COMPUTED,
                                PD_FC_META_AT,      PD_FC_META_LEN};
    int64_t block[PD_FC_NCOLS][ROW_FRAMES];
    Py_buffer view;
    long long pos, max_size;
    pd_frames out;
    pd_cursor c;
    int stop = PD_STOP_END;
    PyObject *rows;
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "scan_rows(buf, pos, max_frame_size)");
        return NULL;
    }
    pos = PyLong_AsLongLong(args[1]);
    max_size = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (pos < 0 || pos > view.len || max_size < 8) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "pos outside the buffer or max_frame_size");
        return NULL;
    }
    out.cap = ROW_FRAMES;
    out.n = 0;
    for (int k = 0; k < PD_FC_NCOLS; k++)
        out.col[k] = block[k];
    c.base = view.buf;
    c.len = view.len;
    pos = pd_scan_frames(&c, pos, max_size, PD_ANY_TYPE, &out, &stop);
    PyBuffer_Release(&view);
    frames_taken += (unsigned long long)out.n;
    rows = PyList_New((Py_ssize_t)out.n);
    if (rows == NULL)
        return NULL;
    for (int64_t i = 0; i < out.n; i++) {
        PyObject *row = PyTuple_New(8);
        if (row == NULL) {
            Py_DECREF(rows);
            return NULL;
        }
        PyList_SET_ITEM(rows, (Py_ssize_t)i, row);
        for (int k = 0; k < 8; k++) {
            PyObject *v = PyLong_FromLongLong(block[keep[k]][i]);
            if (v == NULL) {
                Py_DECREF(rows);
                return NULL;
            }
            PyTuple_SET_ITEM(row, k, v);
        }
    }
    return Py_BuildValue("(LiN)", pos, stop, rows);
}

/* scan_block(buf, pos, max_frame_size, only_types) -> (pos, stop, n, block): the frames a
 * frame run takes (only the command types of the mask `only_types`, no bad checksum), as
 * one bytes object of n rows of PD_FC_NCOLS native int64 each (row-major: row i's column
 * k at i * PD_FC_NCOLS + k). One call per piece of stream and one object per call, whatever
 * the number of frames: the frames table reads the block as columns. */
static PyObject *scan_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    int64_t block[PD_FC_NCOLS][ROW_FRAMES];
    Py_buffer view;
    long long pos, max_size;
    unsigned long long only;
    pd_frames out;
    pd_cursor c;
    int stop = PD_STOP_END;
    PyObject *bytes;
    int64_t *rows;
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "scan_block(buf, pos, max_frame_size, only_types)");
        return NULL;
    }
    pos = PyLong_AsLongLong(args[1]);
    max_size = PyLong_AsLongLong(args[2]);
    only = PyLong_AsUnsignedLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (pos < 0 || pos > view.len || max_size < 8) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "pos outside the buffer or max_frame_size");
        return NULL;
    }
    out.cap = ROW_FRAMES;
    out.n = 0;
    for (int k = 0; k < PD_FC_NCOLS; k++)
        out.col[k] = block[k];
    c.base = view.buf;
    c.len = view.len;
    pos = pd_scan_frames(&c, pos, max_size, (uint64_t)only, &out, &stop);
    PyBuffer_Release(&view);
    frames_taken += (unsigned long long)out.n;
    bytes = PyBytes_FromStringAndSize(NULL,
                                      (Py_ssize_t)(out.n * PD_FC_NCOLS * (int64_t)sizeof(int64_t)));
    if (bytes == NULL)
        return NULL;
    rows = (int64_t *)PyBytes_AS_STRING(bytes);
    for (int64_t i = 0; i < out.n; i++)
        for (int k = 0; k < PD_FC_NCOLS; k++)
            rows[i * PD_FC_NCOLS + k] = block[k][i];
    return Py_BuildValue("(LiLN)", pos, stop, (long long)out.n, bytes);
}

static PyObject *crc32c(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"data", "software", NULL};
    Py_buffer view;
    int software = 0, ok;
    uint32_t crc;
    pd_cursor c;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|p", names, &view, &software))
        return NULL;
    c.base = view.buf;
    c.len = view.len;
    pd_crc32c_software(software);
    crc = pd_crc32c(&c, 0, view.len, &ok);
    pd_crc32c_software(0);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *crc32c_hardware(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyBool_FromLong(pd_crc32c_hardware());
}

static PyObject *stats(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return Py_BuildValue("{sK}", "frames_taken", frames_taken);
}

static PyMethodDef methods[] = {
    {"scan_frames", (PyCFunction)(void (*)(void))scan_frames, METH_VARARGS | METH_KEYWORDS,
     "Scan Pulsar frames from pos: (pos, stop, columns)."},
    {"scan_rows", (PyCFunction)(void (*)(void))scan_rows, METH_FASTCALL,
     "Scan Pulsar frames from pos: (pos, stop, rows) for the Python FrameDecoder."},
    {"scan_block", (PyCFunction)(void (*)(void))scan_block, METH_FASTCALL,
     "scan_block(buf, pos, max_frame_size, only_types) -> (pos, stop, n, block)"},
    {"crc32c", (PyCFunction)(void (*)(void))crc32c, METH_VARARGS | METH_KEYWORDS,
     "CRC32C of a buffer (software=True: the table path even where SSE4.2 is)."},
    {"crc32c_hardware", crc32c_hardware, METH_NOARGS, "Whether CRC32C uses SSE4.2."},
    {"stats", stats, METH_NOARGS, "Frames scan_rows took since the module was loaded."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dissector._core._frames",
                                    "The compiled Pulsar framing and command scan.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__frames(void) {
    PyObject *m = PyModule_Create(&module), *names;
    if (m == NULL)
        return NULL;
    names = PyTuple_New(PD_FC_NCOLS);
    if (names == NULL)
        goto fail;
    for (int k = 0; k < PD_FC_NCOLS; k++) {
        PyObject *s = PyUnicode_FromString(column_names[k]);
        if (s == NULL) {
            Py_DECREF(names);
            goto fail;
        }
        PyTuple_SET_ITEM(names, k, s);
    }
    if (PyModule_AddObject(m, "COLUMNS", names) < 0) {
        Py_DECREF(names);
        goto fail;
    }
#define CONST(name, value)                                                                     \
    if (PyModule_AddIntConstant(m, name, value) < 0)                                           \
        goto fail;
    CONST("BATCH_FRAMES", BATCH_FRAMES)
    CONST("STOP_END", PD_STOP_END)
    CONST("STOP_MORE", PD_STOP_MORE)
    CONST("STOP_PYTHON", PD_STOP_PYTHON)
    CONST("STOP_FULL", PD_STOP_FULL)
    CONST("HAS_REQUEST_ID", PD_HAS_REQUEST_ID)
    CONST("HAS_PRODUCER_ID", PD_HAS_PRODUCER_ID)
    CONST("HAS_CONSUMER_ID", PD_HAS_CONSUMER_ID)
    CONST("HAS_SEQUENCE_ID", PD_HAS_SEQUENCE_ID)
    CONST("HAS_TOPIC", PD_HAS_TOPIC)
    CONST("HAS_MESSAGE_ID", PD_HAS_MESSAGE_ID)
    CONST("HAS_NUM_MESSAGES", PD_HAS_NUM_MESSAGES)
    CONST("HAS_ENTRY_TS", PD_HAS_ENTRY_TS)
    CONST("HAS_ENTRY_INDEX", PD_HAS_ENTRY_INDEX)
    CONST("HAS_PAYLOAD", PD_HAS_PAYLOAD)
    CONST("CHECKSUM_NONE", PD_CHECKSUM_NONE)
    CONST("CHECKSUM_ABSENT", PD_CHECKSUM_ABSENT)
    CONST("CHECKSUM_VALID", PD_CHECKSUM_VALID)
    CONST("CHECKSUM_INVALID", PD_CHECKSUM_INVALID)
#undef CONST
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
