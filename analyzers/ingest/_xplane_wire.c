/* The wire-format walker behind analyzers/ingest/xplane_decode.py: `*.xplane.pb` bytes straight
 * into preallocated flat arrays, with no Python object per event.
 *
 * Why C and not numba (which this replaced): importing numba and loading its cached machine code
 * cost ~0.5 s and ~115 MB of resident memory in every `recadvisor analyze` process, more than the
 * event table of a 5M-event trace and more than decoding a typical 10-20 MB profile.
 *
 * Arrays arrive through the buffer protocol, C-contiguous, with the dtypes xplane_decode.py
 * allocates (int64 unless said otherwise); every row written is checked against the buffer's
 * length, so a caller's mistake is an error, not a write out of bounds. The GIL is released while
 * walking, so chunks of lines decode on several threads.
 *
 * Wire format: XSpace.planes=1; XPlane.lines=3 (everything else is "rest"); XLine id=1 name=2
 * timestamp_ns=3 events=4 duration_ps=9 display_id=10 display_name=11; XEvent metadata_id=1
 * offset_ps=2 duration_ps=3 stats=4; XStat metadata_id=1 then one of double=2 uint64=3 int64=4
 * str=5 bytes=6 ref=7 (see xplane_schema.py).
 *
 * Error codes (0 = ok; the byte offset travels beside them): 1 truncated varint, 2 length runs
 * past the end of its message, 3 unsupported wire type, 4 fixed-width field runs past the end,
 * 5 field number 0, 6 output arrays too small (a caller's bug).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { E_VARINT = 1, E_LENGTH = 2, E_WIRE = 3, E_FIXED = 4, E_FIELD0 = 5, E_SPACE = 6 };

/* Reads a varint at *pos (advanced past what was read); 0 or E_VARINT. Ten bytes at most: the
 * shift stays below 64. */
static inline int varint(const uint8_t *buf, int64_t *pos, int64_t end, int64_t *out)
{
    uint64_t result = 0;
    unsigned shift = 0;
    int64_t p = *pos;
    *out = 0;
    while (p < end) {
        uint8_t b = buf[p++];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *pos = p;
            *out = (int64_t)result;
            return 0;
        }
        shift += 7;
        if (shift >= 70) {
            *pos = p;
            return E_VARINT;
        }
    }
    *pos = p;
    return E_VARINT;
}

static inline int skip(const uint8_t *buf, int64_t *pos, int64_t end, int64_t wire)
{
    int64_t n;
    int err;
    switch (wire) {
    case 0:
        return varint(buf, pos, end, &n);
    case 1:
        *pos += 8;
        return *pos > end ? E_FIXED : 0;
    case 5:
        *pos += 4;
        return *pos > end ? E_FIXED : 0;
    case 2:
        err = varint(buf, pos, end, &n);
        if (err)
            return err;
        if (n < 0 || n > end - *pos) /* not *pos + n: that overflows for lengths near 2**63 */
            return E_LENGTH;
        *pos += n;
        return 0;
    default:
        return E_WIRE;
    }
}

/* A length-delimited field at pos: its payload [*start, *stop). */
static inline int len_field(const uint8_t *buf, int64_t pos, int64_t end, int64_t *start,
                            int64_t *stop)
{
    int64_t n;
    int err = varint(buf, &pos, end, &n);
    if (!err && (n < 0 || n > end - pos)) /* not pos + n: that overflows for lengths near 2**63 */
        err = E_LENGTH;
    *start = pos;
    *stop = err ? pos : pos + n;
    return err;
}

#define FAIL(code, at)          \
    do {                        \
        counts[2] = (code);     \
        counts[3] = (at);       \
        return;                 \
    } while (0)

/* XSpace and XPlane top level only, skipping each line by its length: counts planes, lines and
 * the bytes of every non-line plane field (names, metadata maps, stats); with fill, copies those
 * bytes into `rest` and each line's (plane, payload start, payload end) into `spans`.
 * counts: [planes, rest bytes, error code, error offset, lines]. */
static void walk_rest(const uint8_t *buf, int64_t end_all, int fill, int64_t *counts,
                      int64_t *planes_rest, int64_t cap_planes, uint8_t *rest, int64_t cap_rest,
                      int64_t *spans, int64_t cap_lines)
{
    int64_t n_planes = 0, n_rest = 0, n_lines = 0, pos = 0, tag, p_start, p_end;
    int err;
    while (pos < end_all) {
        err = varint(buf, &pos, end_all, &tag);
        if (!err && tag >> 3 == 0)
            err = E_FIELD0;
        if (err)
            FAIL(err, pos);
        if (tag >> 3 != 1 || (tag & 7) != 2) {
            err = skip(buf, &pos, end_all, tag & 7);
            if (err)
                FAIL(err, pos);
            continue;
        }
        err = len_field(buf, pos, end_all, &p_start, &p_end);
        if (err)
            FAIL(err, pos);
        if (fill) {
            if (n_planes >= cap_planes)
                FAIL(E_SPACE, pos);
            planes_rest[2 * n_planes] = n_rest;
        }
        pos = p_start;
        while (pos < p_end) {
            int64_t f_start = pos, l_start, l_end;
            err = varint(buf, &pos, p_end, &tag);
            if (!err && tag >> 3 == 3 && (tag & 7) == 2) {
                err = len_field(buf, pos, p_end, &l_start, &l_end);
                if (!err) {
                    if (fill) {
                        if (n_lines >= cap_lines)
                            FAIL(E_SPACE, pos);
                        spans[3 * n_lines] = n_planes;
                        spans[3 * n_lines + 1] = l_start;
                        spans[3 * n_lines + 2] = l_end;
                    }
                    n_lines++;
                    pos = l_end;
                }
            } else if (!err) {
                err = skip(buf, &pos, p_end, tag & 7);
            }
            if (err)
                FAIL(err, pos);
            if (tag >> 3 != 3) {
                if (fill) {
                    if (n_rest + pos - f_start > cap_rest)
                        FAIL(E_SPACE, pos);
                    memcpy(rest + n_rest, buf + f_start, (size_t)(pos - f_start));
                }
                n_rest += pos - f_start;
            }
        }
        if (fill)
            planes_rest[2 * n_planes + 1] = n_rest;
        n_planes++;
    }
    counts[0] = n_planes;
    counts[1] = n_rest;
    counts[4] = n_lines;
}

/* Output arrays of walk_lines; row widths: lines_i 4 (plane, id, timestamp_ns, duration_ps),
 * lines_s 4 (name start, length, display name start, length), st_i 5 (event, column, kind,
 * value or byte start, byte length). */
typedef struct {
    int64_t *lines_i, *lines_s, *ev_mid, *ev_off, *ev_dur, *st_i;
    int32_t *ev_line;
    double *st_d;
    int64_t cap_lines, cap_events, cap_stats;
} Out;

/* Fills stat row `stat` from the XStat at buf[s_start:s_end]; returns the error, *at its
 * offset. */
static int stat_row(const uint8_t *buf, int64_t s_start, int64_t s_end, int64_t stat, int64_t col,
                    int64_t plane, const int64_t *want, int64_t width, Out *o, int64_t *at)
{
    int64_t *row = o->st_i + 5 * stat, p2 = s_start, tag, v, v_start, v_end;
    int err;
    row[1] = col;
    while (p2 < s_end) {
        err = varint(buf, &p2, s_end, &tag);
        if (err) {
            *at = p2;
            return err;
        }
        int64_t sf = tag >> 3, sw = tag & 7;
        if (sw == 0 && (sf == 1 || sf == 3 || sf == 4 || sf == 7)) {
            err = varint(buf, &p2, s_end, &v);
            if (err) {
                *at = p2;
                return err;
            }
            if (sf == 1) {
                if (col == -2)
                    row[1] = (0 <= v && v < width) ? want[plane * width + v] : -1;
            } else {
                row[2] = sf;
                row[3] = v;
            }
        } else if (sw == 1 && sf == 2) {
            if (p2 + 8 > s_end) {
                *at = p2;
                return E_FIXED;
            }
            row[2] = 2;
            memcpy(&o->st_d[stat], buf + p2, 8); /* little-endian, as the wire format */
            p2 += 8;
        } else if (sw == 2 && (sf == 5 || sf == 6)) {
            err = len_field(buf, p2, s_end, &v_start, &v_end);
            if (err) {
                *at = p2;
                return err;
            }
            row[2] = sf;
            row[3] = v_start;
            row[4] = v_end - v_start;
            p2 = v_end;
        } else {
            err = skip(buf, &p2, s_end, sw);
            if (err) {
                *at = p2;
                return err;
            }
        }
    }
    return 0;
}

/* Lines spans[first:last] (from walk_rest), their events and the wanted stats. want[plane, stat
 * metadata id] is the output column of a stat (-1: not wanted). Event and stat rows continue
 * from counts[0] and counts[1], so chunks of lines decoded one after another fill one set of
 * arrays; without fill only `counts` is written: [events, stats, error code, error offset]. */
static void walk_lines(const uint8_t *buf, const int64_t *spans, int64_t first, int64_t last,
                       int fill, const int64_t *want, int64_t want_rows, int64_t width,
                       int64_t *counts, Out *o)
{
    int64_t n_events = counts[0], n_stats = counts[1], tag, v;
    int err;
    for (int64_t line = first; line < last; line++) {
        int64_t plane = spans[3 * line], pos = spans[3 * line + 1], l_end = spans[3 * line + 2];
        const int64_t *want_row = (plane >= 0 && plane < want_rows) ? want + plane * width : NULL;
        if (fill) {
            if (line >= o->cap_lines)
                FAIL(E_SPACE, pos);
            o->lines_i[4 * line] = plane;
        }
        while (pos < l_end) {
            err = varint(buf, &pos, l_end, &tag);
            if (err)
                FAIL(err, pos);
            int64_t field = tag >> 3, wire = tag & 7;
            if (field == 4 && wire == 2) {
                int64_t e_start, e_end;
                err = len_field(buf, pos, l_end, &e_start, &e_end);
                if (err)
                    FAIL(err, pos);
                int64_t event = n_events++;
                if (fill) {
                    if (event >= o->cap_events)
                        FAIL(E_SPACE, pos);
                    o->ev_line[event] = (int32_t)line;
                }
                pos = e_start;
                while (pos < e_end) {
                    err = varint(buf, &pos, e_end, &tag);
                    if (err)
                        FAIL(err, pos);
                    int64_t ef = tag >> 3, ew = tag & 7;
                    if (ef == 4 && ew == 2) {
                        int64_t s_start, s_end, mid, p1, col = -1;
                        err = len_field(buf, pos, e_end, &s_start, &s_end);
                        if (err)
                            FAIL(err, pos);
                        /* A stat's metadata id comes first (TF writes fields in order);
                         * unwanted stats are skipped whole. */
                        if (s_start < s_end && buf[s_start] == 0x08) {
                            p1 = s_start + 1;
                            if (!varint(buf, &p1, s_end, &mid) && want_row && 0 <= mid &&
                                mid < width)
                                col = want_row[mid];
                        } else {
                            col = -2; /* unusual field order: decode it to find the id */
                        }
                        pos = s_end;
                        if (col == -1)
                            continue;
                        int64_t stat = n_stats++;
                        if (fill) {
                            int64_t at = 0;
                            if (stat >= o->cap_stats)
                                FAIL(E_SPACE, pos);
                            o->st_i[5 * stat] = event;
                            err = stat_row(buf, s_start, s_end, stat, col, plane,
                                           want_row ? want : NULL, want_row ? width : 0, o, &at);
                            if (err)
                                FAIL(err, at);
                        }
                    } else if (ew == 0 && (ef == 1 || ef == 2 || ef == 3)) {
                        err = varint(buf, &pos, e_end, &v);
                        if (err)
                            FAIL(err, pos);
                        if (fill) {
                            if (ef == 1)
                                o->ev_mid[event] = v;
                            else if (ef == 2)
                                o->ev_off[event] = v;
                            else
                                o->ev_dur[event] = v;
                        }
                    } else {
                        err = skip(buf, &pos, e_end, ew);
                        if (err)
                            FAIL(err, pos);
                    }
                }
            } else if (wire == 0 && (field == 1 || field == 3 || field == 9 || field == 10)) {
                err = varint(buf, &pos, l_end, &v);
                if (err)
                    FAIL(err, pos);
                if (fill)
                    o->lines_i[4 * line + (field == 1 ? 1 : (field == 3 ? 2 : 3))] = v;
            } else if (wire == 2 && (field == 2 || field == 11)) {
                int64_t v_start, v_end;
                err = len_field(buf, pos, l_end, &v_start, &v_end);
                if (err)
                    FAIL(err, pos);
                if (fill) {
                    int64_t c = field == 2 ? 0 : 2;
                    o->lines_s[4 * line + c] = v_start;
                    o->lines_s[4 * line + c + 1] = v_end - v_start;
                }
                pos = v_end;
            } else {
                err = skip(buf, &pos, l_end, wire);
                if (err)
                    FAIL(err, pos);
            }
        }
    }
    counts[0] = n_events;
    counts[1] = n_stats;
}

/* ---- Python bindings ---- */

/* Buffers of one call, released together. */
typedef struct {
    Py_buffer v[12];
    int n;
} Views;

static void release_all(Views *vs)
{
    for (int i = 0; i < vs->n; i++)
        PyBuffer_Release(&vs->v[i]);
    vs->n = 0;
}

/* Whether a buffer's struct-module format is the kind asked for: 'i' a signed integer, 'u' an
 * unsigned one, 'f' a float (the item size is checked beside it). */
static int format_is(const char *format, char kind)
{
    char c = format ? format[0] : 'B';
    if (c == '<' || c == '=' || c == '@')
        c = format[1];
    switch (kind) {
    case 'i':
        return c == 'b' || c == 'h' || c == 'i' || c == 'l' || c == 'q';
    case 'u':
        return c == 'B' || c == 'H' || c == 'I' || c == 'L' || c == 'Q';
    default:
        return c == 'd';
    }
}

/* A C-contiguous, aligned buffer of `obj` into *ptr, of items of `kind` (see format_is) and
 * `itemsize` bytes, at least `min_items` of them (the count into *items when given); 0 with an
 * exception set if not. */
static int view(Views *vs, PyObject *obj, int writable, char kind, Py_ssize_t itemsize,
                Py_ssize_t min_items, const char *what, void *ptr, int64_t *items)
{
    Py_buffer *b = &vs->v[vs->n];
    if (PyObject_GetBuffer(obj, b,
                           (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return 0;
    vs->n++;
    if (b->itemsize != itemsize || !format_is(b->format, kind) ||
        (uintptr_t)b->buf % (uintptr_t)itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: not an aligned array of %zd-byte %s", what, itemsize,
                     kind == 'f' ? "floats" : "integers");
        return 0;
    }
    if (b->len / itemsize < min_items) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not at least %zd items of %zd bytes",
                     what, b->len, min_items, itemsize);
        return 0;
    }
    if (items)
        *items = b->len / itemsize;
    *(void **)ptr = b->buf;
    return 1;
}

static PyObject *py_walk_rest(PyObject *self, PyObject *args)
{
    PyObject *o_buf, *o_counts, *o_planes, *o_rest, *o_spans;
    int fill;
    Views vs = {.n = 0};
    const uint8_t *buf;
    uint8_t *rest;
    int64_t *counts, *planes, *spans, n_buf, n_planes, n_rest, n_spans;
    if (!PyArg_ParseTuple(args, "OpOOOO", &o_buf, &fill, &o_counts, &o_planes, &o_rest, &o_spans))
        return NULL;
    if (!(view(&vs, o_buf, 0, 'u', 1, 0, "buf", &buf, &n_buf) &&
          view(&vs, o_counts, 1, 'i', 8, 5, "counts", &counts, NULL) &&
          view(&vs, o_planes, 1, 'i', 8, 0, "planes_rest", &planes, &n_planes) &&
          view(&vs, o_rest, 1, 'u', 1, 0, "rest", &rest, &n_rest) &&
          view(&vs, o_spans, 1, 'i', 8, 0, "spans", &spans, &n_spans))) {
        release_all(&vs);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    walk_rest(buf, n_buf, fill, counts, planes, n_planes / 2, rest, n_rest, spans, n_spans / 3);
    Py_END_ALLOW_THREADS
    release_all(&vs);
    Py_RETURN_NONE;
}

static PyObject *py_walk_lines(PyObject *self, PyObject *args)
{
    PyObject *o[12];
    Py_ssize_t first, last, width;
    int fill;
    Views vs = {.n = 0};
    Out out;
    const uint8_t *buf;
    const int64_t *spans, *want;
    int64_t *counts, n_buf, n_spans, n_want;
    if (!PyArg_ParseTuple(args, "OOnnpOnOOOOOOOOO", &o[0], &o[1], &first, &last, &fill, &o[2],
                          &width, &o[3], &o[4], &o[5], &o[6], &o[7], &o[8], &o[9], &o[10],
                          &o[11]))
        return NULL;
    int ok = view(&vs, o[0], 0, 'u', 1, 0, "buf", &buf, &n_buf) &&
             view(&vs, o[1], 0, 'i', 8, 0, "spans", &spans, &n_spans) &&
             view(&vs, o[2], 0, 'i', 8, 0, "want", &want, &n_want) &&
             view(&vs, o[3], 1, 'i', 8, 4, "counts", &counts, NULL) &&
             view(&vs, o[4], 1, 'i', 8, 0, "lines_i", &out.lines_i, &out.cap_lines) &&
             view(&vs, o[5], 1, 'i', 8, out.cap_lines, "lines_s", &out.lines_s, NULL) &&
             view(&vs, o[6], 1, 'i', 4, 0, "ev_line", &out.ev_line, &out.cap_events) &&
             view(&vs, o[7], 1, 'i', 8, out.cap_events, "ev_mid", &out.ev_mid, NULL) &&
             view(&vs, o[8], 1, 'i', 8, out.cap_events, "ev_off", &out.ev_off, NULL) &&
             view(&vs, o[9], 1, 'i', 8, out.cap_events, "ev_dur", &out.ev_dur, NULL) &&
             view(&vs, o[10], 1, 'i', 8, 0, "stats_i", &out.st_i, &out.cap_stats) &&
             view(&vs, o[11], 1, 'f', 8, out.cap_stats / 5, "stats_d", &out.st_d, NULL);
    n_spans /= 3;
    out.cap_lines /= 4; /* rows: the counts above are of int64 items */
    out.cap_stats /= 5;
    if (ok && (first < 0 || last > n_spans || first > last || width < 1 || n_want % width)) {
        PyErr_SetString(PyExc_ValueError, "walk_lines: lines or want out of range");
        ok = 0;
    }
    /* Rows continue from counts[0] and counts[1]; the >= capacity checks assume them >= 0. */
    if (ok && (counts[0] < 0 || counts[1] < 0)) {
        PyErr_SetString(PyExc_ValueError, "walk_lines: negative starting row in counts");
        ok = 0;
    }
    /* Every span must lie inside buf: the walker trusts them. They are checked here and read
     * below without the GIL, so no other thread may change `spans` during the call (the
     * decoder's own arrays: nothing else holds them). */
    for (int64_t k = first; ok && k < last; k++) {
        if (spans[3 * k + 1] < 0 || spans[3 * k + 1] > spans[3 * k + 2] ||
            spans[3 * k + 2] > n_buf) {
            PyErr_SetString(PyExc_ValueError, "walk_lines: a line's span lies outside buf");
            ok = 0;
        }
    }
    if (!ok) {
        release_all(&vs);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    walk_lines(buf, spans, first, last, fill, want, n_want / width, width, counts, &out);
    Py_END_ALLOW_THREADS
    release_all(&vs);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"walk_rest", py_walk_rest, METH_VARARGS,
     "walk_rest(buf, fill, counts, planes_rest, rest, spans): see _xplane_wire.c"},
    {"walk_lines", py_walk_lines, METH_VARARGS,
     "walk_lines(buf, spans, first, last, fill, want, width, counts, lines_i, lines_s, ev_line, "
     "ev_mid, ev_off, ev_dur, stats_i, stats_d): see _xplane_wire.c"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_xplane_wire",
                                    "Wire-format walker for *.xplane.pb (see _xplane_wire.c).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__xplane_wire(void) { return PyModule_Create(&module); }
