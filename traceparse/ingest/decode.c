/* The compiled decoder of a batch of Kineto events: the fields the events table reads, as columns.

   decode(buf, start, end, coerce) reads the events of buf from start: up to end exactly (end >= 0: a batch cut by
   the splitter, "ev, ev, ..."), or up to the ']' that closes traceEvents (end < 0: the file's tail). It returns

     (n_events, n_complete, names, cat, name, ints, valid, rare, stop)

   where, for the complete (ph "X") events in file order, cat and name are int32 indices into names (a list of
   str, each distinct text once; -1: null), ints holds eight int64 columns one after another (pid, tid, ts_ns,
   dur_ns, External id, correlation, stream, device) and valid one byte per value (0: null); rare lists
   (complete index or -1, start, end) of the events Python decodes whole (traceparse/ingest/column_batch.py): complete
   events with communication or shape args, metadata and memory events. stop is where reading stopped.

   It returns None (the caller decodes the batch as before, with msgspec) for anything but the common case: text
   that is not strict JSON, a key with an escape, a key traceparse reads given twice, a ts or dur of a complete
   event that is not a plain decimal of at most 16 digits and 3 decimals within range, a negative duration, a
   category or name that is not a string, an id that is a float or a boolean, a float anywhere with an exponent or
   integer digits past 250 either way,
   nesting deeper than 64, a string that is not valid UTF-8 or holds an unpaired surrogate escape. So whenever it
   answers, msgspec would have decoded the same batch to the same values (tests/test_decode.py holds the two to
   each other on every bundled trace and on damaged ones). An id given as a string, or an integer beyond int64,
   is passed to coerce(field, text, quoted) (traceparse's own conversion, which counts what is out of range). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define NINT 8
enum { F_PID, F_TID, F_TS, F_DUR, F_EXT, F_CORR, F_STREAM, F_DEVICE };
#define MAX_DEPTH 64

/* bounds of ts and dur in ns (traceparse/ingest/columns.py: TS_NS, DUR_NS) */
static const int64_t TS_LO = -((int64_t)1 << 60), TS_HI = (int64_t)1 << 62;
static const int64_t DUR_HI = (int64_t)1 << 61;

typedef struct { const char *p; Py_ssize_t n; } span;

typedef struct {
    const char *buf;
    const char *end;
    PyObject *coerce;
    /* columns of the complete events */
    Py_ssize_t m, cap;
    int32_t *cat, *name;
    int64_t *ints[NINT];
    uint8_t *valid[NINT];
    /* distinct texts of cat and name: open addressing on their raw spans */
    PyObject *names;
    Py_ssize_t *slots;  /* -1 empty, else index into keys */
    span *keys;
    Py_ssize_t nkeys, keycap, nslots;
    PyObject *rare;
    Py_ssize_t n_events;
    int failed;  /* a Python error is set */
} state;

static inline const char *ws(const char *p, const char *e) {
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int hex4(const char *p) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* UTF-8 as Python's strict decoder takes it: no overlong form, no surrogate, nothing above U+10FFFF. */
static const char *utf8(const char *p, const char *e) {
    unsigned char c = (unsigned char)*p;
    int n;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) { n = 1; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 2; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 3; cp = c & 0x07; }
    else return NULL;
    if (e - p <= n) return NULL;
    for (int i = 1; i <= n; i++) {
        unsigned char d = (unsigned char)p[i];
        if ((d & 0xC0) != 0x80) return NULL;
        cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
        return NULL;
    return p + n + 1;
}

/* A string from its opening quote: returns the position after its closing quote, or NULL. *esc: whether it holds
   an escape. Control characters, bad escapes, unpaired surrogates and bad UTF-8 are refused. */
static const char *string(const char *p, const char *e, int *esc) {
    p++;
    *esc = 0;
    while (p < e) {
        unsigned char c = (unsigned char)*p;
        if (c == '"') return p + 1;
        if (c < 0x20) return NULL;
        if (c == '\\') {
            *esc = 1;
            if (e - p < 2) return NULL;
            char k = p[1];
            if (k == 'u') {
                if (e - p < 6) return NULL;
                int v = hex4(p + 2);
                if (v < 0) return NULL;
                p += 6;
                if (v >= 0xD800 && v <= 0xDBFF) {  /* a high surrogate: its low one must follow */
                    if (e - p < 6 || p[0] != '\\' || p[1] != 'u') return NULL;
                    int w = hex4(p + 2);
                    if (w < 0xDC00 || w > 0xDFFF) return NULL;
                    p += 6;
                } else if (v >= 0xDC00 && v <= 0xDFFF) {
                    return NULL;
                }
                continue;
            }
            if (!(k == '"' || k == '\\' || k == '/' || k == 'b' || k == 'f' || k == 'n' || k == 'r' || k == 't'))
                return NULL;
            p += 2;
            continue;
        }
        if (c >= 0x80) {
            p = utf8(p, e);
            if (p == NULL) return NULL;
            continue;
        }
        p++;
    }
    return NULL;
}

/* A JSON number: returns its end or NULL; *integer: no fraction nor exponent. A float with an exponent or integer
   digits past 250 is refused, an integer past 1000 digits too (msgspec refuses a float out of a double's range where
   it decodes it, Python an integer of more than 4300 digits): well inside both. */
static const char *number(const char *p, const char *e, int *integer) {
    const char *q = p;
    if (q < e && *q == '-') q++;
    if (q >= e) return NULL;
    const char *digits = q;
    if (*q == '0') q++;
    else if (*q >= '1' && *q <= '9') { while (q < e && *q >= '0' && *q <= '9') q++; }
    else return NULL;
    long whole = (long)(q - digits);
    *integer = 1;
    if (q < e && *q == '.') {
        *integer = 0;
        q++;
        const char *f = q;
        while (q < e && *q >= '0' && *q <= '9') q++;
        if (q == f) return NULL;
    }
    if (q < e && (*q == 'e' || *q == 'E')) {
        *integer = 0;
        q++;
        if (q < e && (*q == '+' || *q == '-')) q++;
        const char *x = q;
        long ex = 0;
        while (q < e && *q >= '0' && *q <= '9') {
            if (ex < 100000) ex = ex * 10 + (*q - '0');
            q++;
        }
        if (q == x) return NULL;
        if (ex > 250 || whole > 250) return NULL;
    } else if (whole > (*integer ? 1000 : 250)) {
        return NULL;
    }
    return q;
}

/* Any JSON value from p (not blank): returns its end, or NULL. */
static const char *skip(const char *p, const char *e) {
    char stack[MAX_DEPTH];
    int depth = 0, esc, integer;
    for (;;) {
        p = ws(p, e);
        if (p >= e) return NULL;
        char c = *p;
        if (c == '{' || c == '[') {
            if (depth == MAX_DEPTH) return NULL;
            stack[depth++] = c;
            p = ws(p + 1, e);
            if (p >= e) return NULL;
            if (*p == (c == '{' ? '}' : ']')) { p++; depth--; goto after; }
            if (c == '{') goto key;
            continue;
        } else if (c == '"') {
            p = string(p, e, &esc);
        } else if (c == 't') {
            p = (e - p >= 4 && memcmp(p, "true", 4) == 0) ? p + 4 : NULL;
        } else if (c == 'f') {
            p = (e - p >= 5 && memcmp(p, "false", 5) == 0) ? p + 5 : NULL;
        } else if (c == 'n') {
            p = (e - p >= 4 && memcmp(p, "null", 4) == 0) ? p + 4 : NULL;
        } else {
            p = number(p, e, &integer);
        }
        if (p == NULL) return NULL;
    after:
        for (;;) {
            if (depth == 0) return p;
            p = ws(p, e);
            if (p >= e) return NULL;
            char top = stack[depth - 1];
            if (*p == ',') {
                p = ws(p + 1, e);
                if (top == '{') goto key;
                break;
            }
            if (*p == (top == '{' ? '}' : ']')) { p++; depth--; continue; }
            return NULL;
        }
        continue;
    key:
        if (p >= e || *p != '"') return NULL;
        p = string(p, e, &esc);
        if (p == NULL) return NULL;
        p = ws(p, e);
        if (p >= e || *p != ':') return NULL;
        p++;
    }
}

/* The text of a string span (quotes excluded), escapes resolved, as str; NULL with an error set or (bad) not. */
static PyObject *text(const char *p, Py_ssize_t n, int esc) {
    if (!esc) return PyUnicode_DecodeUTF8(p, n, "strict");
    char *out = PyMem_Malloc(n > 0 ? n : 1);
    if (out == NULL) return PyErr_NoMemory();
    Py_ssize_t k = 0;
    const char *e = p + n;
    while (p < e) {
        if (*p != '\\') { out[k++] = *p++; continue; }
        char c = p[1];
        if (c != 'u') {
            out[k++] = c == 'b' ? '\b' : c == 'f' ? '\f' : c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c;
            p += 2;
            continue;
        }
        uint32_t cp = (uint32_t)hex4(p + 2);
        p += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)hex4(p + 2) - 0xDC00);
            p += 6;
        }
        if (cp < 0x80) out[k++] = (char)cp;
        else if (cp < 0x800) { out[k++] = (char)(0xC0 | (cp >> 6)); out[k++] = (char)(0x80 | (cp & 0x3F)); }
        else if (cp < 0x10000) {
            out[k++] = (char)(0xE0 | (cp >> 12)); out[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            out[k++] = (char)(0x80 | (cp & 0x3F));
        } else {
            out[k++] = (char)(0xF0 | (cp >> 18)); out[k++] = (char)(0x80 | ((cp >> 12) & 0x3F));
            out[k++] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[k++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    PyObject *s = PyUnicode_DecodeUTF8(out, k, "strict");
    PyMem_Free(out);
    return s;
}

static uint64_t hash(const char *p, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h;
}

static int grow_slots(state *s) {
    Py_ssize_t n = s->nslots ? s->nslots * 2 : 1024;
    Py_ssize_t *slots = PyMem_Malloc(n * sizeof(Py_ssize_t));
    if (slots == NULL) return -1;
    for (Py_ssize_t i = 0; i < n; i++) slots[i] = -1;
    for (Py_ssize_t k = 0; k < s->nkeys; k++) {
        uint64_t i = hash(s->keys[k].p, s->keys[k].n) & (uint64_t)(n - 1);
        while (slots[i] >= 0) i = (i + 1) & (uint64_t)(n - 1);
        slots[i] = k;
    }
    PyMem_Free(s->slots);
    s->slots = slots;
    s->nslots = n;
    return 0;
}

/* The index in names of the string span (its raw text, quotes excluded): -1 on an error (set, or bad text). */
static Py_ssize_t intern(state *s, const char *p, Py_ssize_t n, int esc) {
    if (2 * (s->nkeys + 1) > s->nslots && grow_slots(s) < 0) { s->failed = 1; PyErr_NoMemory(); return -1; }
    uint64_t i = hash(p, n) & (uint64_t)(s->nslots - 1);
    while (s->slots[i] >= 0) {
        span *k = &s->keys[s->slots[i]];
        if (k->n == n && memcmp(k->p, p, n) == 0) return s->slots[i];
        i = (i + 1) & (uint64_t)(s->nslots - 1);
    }
    PyObject *t = text(p, n, esc);
    if (t == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) PyErr_Clear();
        else s->failed = 1;
        return -1;
    }
    int r = PyList_Append(s->names, t);
    Py_DECREF(t);
    if (r < 0) { s->failed = 1; return -1; }
    if (s->nkeys == s->keycap) {
        Py_ssize_t cap = s->keycap ? s->keycap * 2 : 256;
        span *keys = PyMem_Realloc(s->keys, cap * sizeof(span));
        if (keys == NULL) { s->failed = 1; PyErr_NoMemory(); return -1; }
        s->keys = keys;
        s->keycap = cap;
    }
    s->keys[s->nkeys] = (span){p, n};
    s->slots[i] = s->nkeys;
    return s->nkeys++;
}

static int grow_columns(state *s) {
    Py_ssize_t cap = s->cap ? s->cap * 2 : 4096;
    int32_t *cat = PyMem_Realloc(s->cat, cap * sizeof(int32_t));
    if (cat == NULL) return -1;
    s->cat = cat;
    int32_t *name = PyMem_Realloc(s->name, cap * sizeof(int32_t));
    if (name == NULL) return -1;
    s->name = name;
    for (int f = 0; f < NINT; f++) {
        int64_t *v = PyMem_Realloc(s->ints[f], cap * sizeof(int64_t));
        if (v == NULL) return -1;
        s->ints[f] = v;
        uint8_t *ok = PyMem_Realloc(s->valid[f], cap);
        if (ok == NULL) return -1;
        s->valid[f] = ok;
    }
    s->cap = cap;
    return 0;
}

/* A value read for an id: kind 0 absent or null, 1 an int64 (*v), 2 a string or an integer beyond int64 (for
   coerce), 3 a JSON value coerce would read as null (an array, an object); -1: not the common case. */
typedef struct { int kind; int64_t v; const char *p; Py_ssize_t n; int esc; int quoted; } idval;

static const char *id_value(const char *p, const char *e, idval *out) {
    out->kind = 0;
    if (*p == 'n') {
        if (e - p >= 4 && memcmp(p, "null", 4) == 0) return p + 4;
        return NULL;
    }
    if (*p == '"') {
        const char *q = string(p, e, &out->esc);
        if (q == NULL) return NULL;
        out->kind = 2; out->p = p + 1; out->n = q - p - 2; out->quoted = 1;
        return q;
    }
    if (*p == '-' || (*p >= '0' && *p <= '9')) {
        int integer;
        const char *q = number(p, e, &integer);
        if (q == NULL || !integer) { out->kind = -1; return q; }
        const char *d = p + (*p == '-');
        uint64_t acc = 0;
        int over = q - d > 19;
        for (const char *c = d; c < q && !over; c++) {
            uint64_t x = acc * 10 + (uint64_t)(*c - '0');
            if (acc > UINT64_MAX / 10 || x < acc * 10) over = 1;
            acc = x;
        }
        if (!over && (*p == '-' ? acc <= (uint64_t)INT64_MAX + 1 : acc <= (uint64_t)INT64_MAX)) {
            out->kind = 1;
            out->v = *p == '-' ? (int64_t)(0 - acc) : (int64_t)acc;
        } else {
            out->kind = 2; out->p = p; out->n = q - p; out->esc = 0; out->quoted = 0;
        }
        return q;
    }
    if (*p == '[' || *p == '{') {
        out->kind = 3;
        return skip(p, e);
    }
    out->kind = -1;  /* true, false */
    return skip(p, e);
}

/* A ts or dur: a plain decimal (at most 16 digits, at most 3 decimals) in ns, 1 when it is one, else 0. */
static int plain_ns(const char *p, Py_ssize_t n, int64_t *out) {
    const char *e = p + n, *q = p;
    int neg = 0;
    if (q < e && *q == '-') { neg = 1; q++; }
    const char *d = q;
    if (q < e && *q == '0') q++;
    else while (q < e && *q >= '0' && *q <= '9') q++;
    Py_ssize_t whole = q - d;
    if (whole == 0 || whole > 16 || (whole > 1 && *d == '0')) return 0;
    int64_t v = 0;
    for (const char *c = d; c < q; c++) v = v * 10 + (*c - '0');
    int frac = 0;
    int64_t f = 0;
    if (q < e && *q == '.') {
        q++;
        while (q < e && *q >= '0' && *q <= '9' && frac < 4) { f = f * 10 + (*q - '0'); frac++; q++; }
        if (frac == 0 || frac > 3) return 0;
    }
    if (q != e) return 0;
    for (int i = frac; i < 3; i++) f *= 10;
    /* at 2^62 ns or more it is out of range for ts and dur alike: declined before v * 1000 could overflow */
    if (v >= ((int64_t)1 << 62) / 1000) return 0;
    int64_t ns = v * 1000 + f;
    *out = neg ? -ns : ns;
    return 1;
}

static int coerce_id(state *s, int field, idval *iv, int64_t *v, uint8_t *ok) {
    if (iv->kind == 0 || iv->kind == 3) { *ok = 0; *v = 0; return 0; }
    if (iv->kind == 1) { *ok = 1; *v = iv->v; return 0; }
    PyObject *t = text(iv->p, iv->n, iv->esc);
    if (t == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { PyErr_Clear(); return -1; }
        s->failed = 1;
        return -1;
    }
    PyObject *r = PyObject_CallFunction(s->coerce, "iOi", field, t, iv->quoted);
    Py_DECREF(t);
    if (r == NULL) { s->failed = 1; return -1; }
    if (r == Py_None) { *ok = 0; *v = 0; }
    else {
        *v = PyLong_AsLongLong(r);
        if (*v == -1 && PyErr_Occurred()) { Py_DECREF(r); s->failed = 1; return -1; }
        *ok = 1;
    }
    Py_DECREF(r);
    return 0;
}

#define KEY(lit) (key.n == (Py_ssize_t)sizeof(lit) - 1 && memcmp(key.p, lit, sizeof(lit) - 1) == 0)

/* An object's member from its key's opening quote: the key (an escape refused: msgspec would not match it to a field
   either, so it could be read as another) in *key; returns where its value starts, or NULL. */
static const char *member(const char *p, const char *e, span *key) {
    int esc;
    if (p >= e || *p != '"') return NULL;
    const char *q = string(p, e, &esc);
    if (q == NULL || esc) return NULL;
    *key = (span){p + 1, q - p - 2};
    p = ws(q, e);
    if (p >= e || *p != ':') return NULL;
    p = ws(p + 1, e);
    return p < e ? p : NULL;
}

/* args of an event from its '{': the ids (ids[0..3]: External id, external id, correlation, stream, device as
   ids[0..4]) and whether it holds a key that makes the event rare. */
static const char *args(const char *p, const char *e, idval *ids, int *rare) {
    unsigned seen = 0;
    span key;
    p = ws(p + 1, e);
    if (p < e && *p == '}') return p + 1;
    for (;;) {
        p = member(p, e, &key);
        if (p == NULL) return NULL;
        int f = KEY("External id") ? 0 : KEY("external id") ? 1 : KEY("correlation") ? 2 : KEY("stream") ? 3
                : KEY("device") ? 4 : -1;
        if (f >= 0) {
            if (seen & (1u << f)) return NULL;
            seen |= 1u << f;
            p = id_value(p, e, &ids[f]);
            if (p == NULL || ids[f].kind < 0) return NULL;
        } else {
            if (KEY("Collective name") || KEY("Input Dims")) *rare = 1;
            p = skip(p, e);
            if (p == NULL) return NULL;
        }
        p = ws(p, e);
        if (p < e && *p == ',') { p = ws(p + 1, e); continue; }
        if (p < e && *p == '}') return p + 1;
        return NULL;
    }
}

static int add_rare(state *s, Py_ssize_t idx, const char *a, const char *b) {
    PyObject *t = Py_BuildValue("(nnn)", idx, (Py_ssize_t)(a - s->buf), (Py_ssize_t)(b - s->buf));
    if (t == NULL) { s->failed = 1; return -1; }
    int r = PyList_Append(s->rare, t);
    Py_DECREF(t);
    if (r < 0) s->failed = 1;
    return r;
}

static int is_text(const char *p, Py_ssize_t n, const char *lit) {
    return n == (Py_ssize_t)strlen(lit) && memcmp(p, lit, n) == 0;
}

/* One event from its '{': returns its end, or NULL (not the common case, or s->failed). */
static const char *event(state *s, const char *p) {
    const char *e = s->end, *start = p;
    unsigned seen = 0;
    /* strings: 0 ph, 1 cat, 2 name: kind 0 absent/null, 1 string, 2 another value */
    int skind[3] = {0, 0, 0}, sesc[3] = {0, 0, 0};
    span str[3] = {{NULL, 0}, {NULL, 0}, {NULL, 0}};
    span ts = {NULL, 0}, dur = {NULL, 0};
    idval pid = {0}, tid = {0}, ids[5] = {{0}};
    int rare = 0;
    span key;
    const char *q;
    p = ws(p + 1, e);
    if (p < e && *p == '}') { p++; goto done; }
    for (;;) {
        p = member(p, e, &key);
        if (p == NULL) return NULL;
        int f = KEY("ph") ? 0 : KEY("cat") ? 1 : KEY("name") ? 2 : KEY("pid") ? 3 : KEY("tid") ? 4 : KEY("ts") ? 5
                : KEY("dur") ? 6 : KEY("args") ? 7 : -1;
        if (f >= 0) {
            if (seen & (1u << f)) return NULL;
            seen |= 1u << f;
        }
        if (f >= 0 && f <= 2) {
            if (*p == '"') {
                q = string(p, e, &sesc[f]);
                if (q == NULL) return NULL;
                skind[f] = 1;
                str[f] = (span){p + 1, q - p - 2};
                p = q;
            } else if (e - p >= 4 && memcmp(p, "null", 4) == 0) {
                p += 4;
            } else {
                p = skip(p, e);
                skind[f] = 2;
            }
        } else if (f == 3 || f == 4) {
            idval *iv = f == 3 ? &pid : &tid;
            p = id_value(p, e, iv);  /* (a float or a boolean, kind -1, declines a complete event below) */
        } else if (f == 5 || f == 6) {
            q = skip(p, e);
            if (q == NULL) return NULL;
            if (f == 5) ts = (span){p, q - p}; else dur = (span){p, q - p};
            p = q;
        } else if (f == 7) {
            if (*p == '{') p = args(p, e, ids, &rare);
            else if (e - p >= 4 && memcmp(p, "null", 4) == 0) p += 4;
            else return NULL;  /* msgspec refuses args that are not an object */
        } else {
            p = skip(p, e);
        }
        if (p == NULL) return NULL;
        p = ws(p, e);
        if (p < e && *p == ',') { p = ws(p + 1, e); continue; }
        if (p < e && *p == '}') { p++; break; }
        return NULL;
    }
done:
    s->n_events++;
    if (skind[0] == 1 && sesc[0]) return NULL;
    int complete = skind[0] == 1 && is_text(str[0].p, str[0].n, "X");
    if (!complete) {
        /* metadata and memory events (and any with a ph, cat or name that is not plain text) go to Python */
        int keep = skind[0] == 1 && is_text(str[0].p, str[0].n, "M");
        for (int i = 0; i < 3; i++) keep |= skind[i] == 2 || (skind[i] == 1 && sesc[i]);
        keep |= (skind[1] == 1 && is_text(str[1].p, str[1].n, "[memory]"))
                || (skind[2] == 1 && is_text(str[2].p, str[2].n, "[memory]"));
        if (keep && add_rare(s, -1, start, p) < 0) return NULL;
        return p;
    }
    if (skind[1] == 2 || skind[2] == 2 || pid.kind < 0 || tid.kind < 0) return NULL;
    if (s->m == s->cap && grow_columns(s) < 0) { s->failed = 1; PyErr_NoMemory(); return NULL; }
    Py_ssize_t m = s->m;
    int64_t t, d;
    if (ts.p == NULL || !plain_ns(ts.p, ts.n, &t) || t < TS_LO || t >= TS_HI) return NULL;
    if (dur.p == NULL || !plain_ns(dur.p, dur.n, &d) || d < 0 || d >= DUR_HI) return NULL;
    s->ints[F_TS][m] = t; s->valid[F_TS][m] = 1;
    s->ints[F_DUR][m] = d; s->valid[F_DUR][m] = 1;
    for (int i = 1; i < 3; i++) {
        int32_t *col = i == 1 ? s->cat : s->name;
        if (skind[i] == 1) {
            Py_ssize_t x = intern(s, str[i].p, str[i].n, sesc[i]);
            if (x < 0) return NULL;
            col[m] = (int32_t)x;
        } else {
            col[m] = -1;
        }
    }
    if (coerce_id(s, F_PID, &pid, &s->ints[F_PID][m], &s->valid[F_PID][m]) < 0) return NULL;
    if (coerce_id(s, F_TID, &tid, &s->ints[F_TID][m], &s->valid[F_TID][m]) < 0) return NULL;
    /* External id, else Kineto's spelling before PyTorch 1.11, chosen by which is given (columns._events) */
    idval *ext = ids[0].kind != 0 ? &ids[0] : &ids[1];
    if (coerce_id(s, F_EXT, ext, &s->ints[F_EXT][m], &s->valid[F_EXT][m]) < 0) return NULL;
    for (int i = 2; i < 5; i++)
        if (coerce_id(s, F_EXT + i - 1, &ids[i], &s->ints[F_EXT + i - 1][m], &s->valid[F_EXT + i - 1][m]) < 0)
            return NULL;
    if (rare && add_rare(s, m, start, p) < 0) return NULL;
    s->m++;
    return p;
}

static void release(state *s) {
    PyMem_Free(s->cat);
    PyMem_Free(s->name);
    for (int f = 0; f < NINT; f++) { PyMem_Free(s->ints[f]); PyMem_Free(s->valid[f]); }
    PyMem_Free(s->slots);
    PyMem_Free(s->keys);
    Py_XDECREF(s->names);
    Py_XDECREF(s->rare);
}

static PyObject *result(state *s, const char *stop) {
    Py_ssize_t m = s->m;
    PyObject *ints = PyByteArray_FromStringAndSize(NULL, m * NINT * (Py_ssize_t)sizeof(int64_t));
    PyObject *valid = PyByteArray_FromStringAndSize(NULL, m * NINT);
    PyObject *cat = PyBytes_FromStringAndSize((const char *)s->cat, m * (Py_ssize_t)sizeof(int32_t));
    PyObject *name = PyBytes_FromStringAndSize((const char *)s->name, m * (Py_ssize_t)sizeof(int32_t));
    if (ints == NULL || valid == NULL || cat == NULL || name == NULL) {
        Py_XDECREF(ints); Py_XDECREF(valid); Py_XDECREF(cat); Py_XDECREF(name);
        return NULL;
    }
    char *iv = PyByteArray_AS_STRING(ints), *vv = PyByteArray_AS_STRING(valid);
    for (int f = 0; f < NINT; f++) {
        if (m) {
            memcpy(iv + f * m * sizeof(int64_t), s->ints[f], m * sizeof(int64_t));
            memcpy(vv + f * m, s->valid[f], m);
        }
    }
    return Py_BuildValue("(nnONNNNOn)", s->n_events, m, s->names, cat, name, ints, valid, s->rare,
                         (Py_ssize_t)(stop - s->buf));
}

static PyObject *decode(PyObject *Py_UNUSED(self), PyObject *a) {
    Py_buffer view;
    Py_ssize_t start, end;
    PyObject *coerce;
    if (!PyArg_ParseTuple(a, "y*nnO", &view, &start, &end, &coerce)) return NULL;
    state s;
    memset(&s, 0, sizeof s);
    s.buf = view.buf;
    s.coerce = coerce;
    int tail = end < 0;
    if (tail || end > view.len) end = view.len;
    if (start < 0 || start > end) start = end;
    s.end = s.buf + end;
    s.names = PyList_New(0);
    s.rare = PyList_New(0);
    PyObject *out = NULL;
    if (s.names == NULL || s.rare == NULL) goto finish;
    const char *p = ws(s.buf + start, s.end);
    const char *e = s.end;
    if (tail && p < e && *p == ']') { out = result(&s, p + 1); goto finish; }
    if (!tail && p == e) { out = result(&s, p); goto finish; }
    for (;;) {
        if (p >= e || *p != '{') break;
        p = event(&s, p);
        if (p == NULL) break;
        p = ws(p, e);
        if (p < e && *p == ',') { p = ws(p + 1, e); continue; }
        if (tail && p < e && *p == ']') { out = result(&s, p + 1); break; }
        if (!tail && p == e) { out = result(&s, p); break; }
        break;
    }
    if (out == NULL && !s.failed && !PyErr_Occurred()) {
        out = Py_None;
        Py_INCREF(out);
    }
finish:
    release(&s);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, "decode(buf, start, end, coerce): a batch of events as columns, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_decode", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__decode(void) { return PyModule_Create(&module); }
