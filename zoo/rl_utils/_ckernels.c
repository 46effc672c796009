/* Optional compiled kernels for zoo.rl_utils: the backward first-order linear recurrence behind gae,
 * lambda-returns and V-trace, as plain loops over contiguous time-major arrays.
 *
 * Built by `pip install` when a C compiler is available (setup.py marks it optional); without it, zoo falls
 * back to the numpy doubling scan in _scan.py, which gives the same results up to rounding. Arrays are passed
 * through the buffer protocol (numpy views of CPU tensors): every buffer must be C-contiguous, hold exactly
 * the expected number of items, and have the float format the caller names ('f' or 'd'). The Python wrappers
 * in _scan.py check shapes; the checks here only keep memory access safe.
 *
 * The time loop runs backwards with the batch as the inner (vectorisable) loop, so each array is read once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static int get_buffer(PyObject *obj, Py_buffer *view, int writable, const char *name, char kind,
                      Py_ssize_t items) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        return -1;
    }
    const char *format = view->format ? view->format : "B";
    if (format[0] == '<' || format[0] == '@' || format[0] == '=') {
        format++;
    }
    if (format[0] != kind || format[1] != '\0' || view->len != items * view->itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: expected a C-contiguous %s buffer of %zd items", name,
                     kind == 'f' ? "float32" : "float64", items);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* Fetches up to 6 buffers; on failure releases what it got. Optional buffers may be None (buf left NULL). */
typedef struct {
    PyObject *obj;
    const char *name;
    int writable;
    int optional;
    Py_ssize_t items;
} spec_t;

static int get_buffers(spec_t *specs, int count, char kind, Py_buffer *views, void **pointers) {
    for (int i = 0; i < count; i++) {
        pointers[i] = NULL;
        if (specs[i].optional && specs[i].obj == Py_None) {
            continue;
        }
        if (get_buffer(specs[i].obj, &views[i], specs[i].writable, specs[i].name, kind, specs[i].items) < 0) {
            for (int j = 0; j < i; j++) {
                if (pointers[j] != NULL) {
                    PyBuffer_Release(&views[j]);
                }
            }
            return -1;
        }
        pointers[i] = views[i].buf;
    }
    return 0;
}

static void release_buffers(int count, Py_buffer *views, void **pointers) {
    for (int i = 0; i < count; i++) {
        if (pointers[i] != NULL) {
            PyBuffer_Release(&views[i]);
        }
    }
}

static char kind_of(int is_double) { return is_double ? 'd' : 'f'; }

/* x[t] = x[t] + coeff[t] * x[t + 1] for t = T-2 .. 0, in place. */
#define DEFINE_RECURRENCE(NAME, REAL)                                                                  \
    static void NAME(const REAL *coeff, REAL *x, Py_ssize_t steps, Py_ssize_t width) {                 \
        for (Py_ssize_t t = steps - 2; t >= 0; t--) {                                                  \
            const REAL *c = coeff + t * width;                                                         \
            REAL *row = x + t * width;                                                                 \
            const REAL *next = row + width;                                                            \
            for (Py_ssize_t i = 0; i < width; i++) {                                                   \
                row[i] = row[i] + c[i] * next[i];                                                      \
            }                                                                                          \
        }                                                                                              \
    }
DEFINE_RECURRENCE(recurrence_f, float)
DEFINE_RECURRENCE(recurrence_d, double)

/* GAE over (T, B, A): value/next_value/out are (T, B*A); reward/done/flag are (T, B), shared by the A agents.
 * delta = reward + gamma * (1 - done) * next_value - value; adv[t] = delta[t] + gamma*lambda*(1 - flag[t])*adv[t+1]. */
#define DEFINE_GAE(NAME, REAL)                                                                         \
    static void NAME(const REAL *value, const REAL *next_value, const REAL *reward, const REAL *done,  \
                     const REAL *flag, REAL *out, Py_ssize_t steps, Py_ssize_t batch, Py_ssize_t agents, \
                     REAL gamma, REAL gamma_lambda) {                                                  \
        const Py_ssize_t width = batch * agents;                                                       \
        for (Py_ssize_t t = steps - 1; t >= 0; t--) {                                                  \
            const Py_ssize_t k0 = t * batch, i0 = t * width;                                           \
            const int last = t == steps - 1;                                                           \
            if (agents == 1) { /* the common case: one flat, vectorisable row */                       \
                for (Py_ssize_t b = 0; b < batch; b++) {                                               \
                    const REAL discount = done ? gamma * ((REAL)1 - done[k0 + b]) : gamma;             \
                    REAL adv = reward[k0 + b] + discount * next_value[i0 + b] - value[i0 + b];         \
                    if (!last) {                                                                       \
                        const REAL carry = flag ? gamma_lambda * ((REAL)1 - flag[k0 + b]) : gamma_lambda; \
                        adv = adv + carry * out[i0 + width + b];                                       \
                    }                                                                                  \
                    out[i0 + b] = adv;                                                                 \
                }                                                                                      \
                continue;                                                                              \
            }                                                                                          \
            for (Py_ssize_t b = 0; b < batch; b++) {                                                   \
                const REAL discount = done ? gamma * ((REAL)1 - done[k0 + b]) : gamma;                 \
                const REAL carry = flag ? gamma_lambda * ((REAL)1 - flag[k0 + b]) : gamma_lambda;      \
                for (Py_ssize_t a = 0; a < agents; a++) {                                              \
                    const Py_ssize_t i = i0 + b * agents + a;                                          \
                    REAL adv = reward[k0 + b] + discount * next_value[i] - value[i];                   \
                    if (!last) {                                                                       \
                        adv = adv + carry * out[i + width];                                            \
                    }                                                                                  \
                    out[i] = adv;                                                                      \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
    }
DEFINE_GAE(gae_f, float)
DEFINE_GAE(gae_d, double)

/* Plain V-trace targets: values is (T+1, N), the others (T, N).
 * corr[t] = rho[t] * (reward[t] + gamma * V[t+1] - V[t]) + gamma * lambda * c[t] * corr[t+1] (kept in out),
 * then out[t] = V[t] + corr[t]. */
#define DEFINE_VTRACE(NAME, REAL)                                                                      \
    static void NAME(const REAL *rho, const REAL *c, const REAL *reward, const REAL *values, REAL *out, \
                     Py_ssize_t steps, Py_ssize_t width, REAL gamma, REAL gamma_lambda) {              \
        for (Py_ssize_t t = steps - 1; t >= 0; t--) {                                                  \
            const REAL *v = values + t * width;                                                        \
            const Py_ssize_t o = t * width;                                                            \
            for (Py_ssize_t i = 0; i < width; i++) {                                                   \
                REAL corr = rho[o + i] * (reward[o + i] + gamma * v[width + i] - v[i]);                \
                if (t < steps - 1) {                                                                   \
                    corr = corr + gamma_lambda * c[o + i] * out[o + width + i];                        \
                }                                                                                      \
                out[o + i] = corr;                                                                     \
            }                                                                                          \
        }                                                                                              \
        for (Py_ssize_t i = 0; i < steps * width; i++) {                                               \
            out[i] = values[i] + out[i];                                                               \
        }                                                                                              \
    }
DEFINE_VTRACE(vtrace_f, float)
DEFINE_VTRACE(vtrace_d, double)

static PyObject *py_recurrence(PyObject *self, PyObject *args) {
    PyObject *coeff, *x;
    Py_ssize_t steps, width;
    int is_double;
    if (!PyArg_ParseTuple(args, "OOnnp", &coeff, &x, &steps, &width, &is_double)) {
        return NULL;
    }
    if (steps < 0 || width < 0) {
        PyErr_SetString(PyExc_ValueError, "recurrence: negative size");
        return NULL;
    }
    spec_t specs[2] = {{coeff, "coeff", 0, 0, steps * width}, {x, "x", 1, 0, steps * width}};
    Py_buffer views[2];
    void *p[2];
    if (get_buffers(specs, 2, kind_of(is_double), views, p) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (is_double) {
        recurrence_d((const double *)p[0], (double *)p[1], steps, width);
    } else {
        recurrence_f((const float *)p[0], (float *)p[1], steps, width);
    }
    Py_END_ALLOW_THREADS
    release_buffers(2, views, p);
    Py_RETURN_NONE;
}

static PyObject *py_gae(PyObject *self, PyObject *args) {
    PyObject *value, *next_value, *reward, *done, *flag, *out;
    Py_ssize_t steps, batch, agents;
    double gamma, gamma_lambda;
    int is_double;
    if (!PyArg_ParseTuple(args, "OOOOOOnnnddp", &value, &next_value, &reward, &done, &flag, &out, &steps, &batch,
                          &agents, &gamma, &gamma_lambda, &is_double)) {
        return NULL;
    }
    if (steps < 0 || batch < 0 || agents < 1) {
        PyErr_SetString(PyExc_ValueError, "gae: bad sizes");
        return NULL;
    }
    const Py_ssize_t full = steps * batch * agents, shared = steps * batch;
    spec_t specs[6] = {{value, "value", 0, 0, full},  {next_value, "next_value", 0, 0, full},
                       {reward, "reward", 0, 0, shared}, {done, "done", 0, 1, shared},
                       {flag, "traj_flag", 0, 1, shared}, {out, "out", 1, 0, full}};
    Py_buffer views[6];
    void *p[6];
    if (get_buffers(specs, 6, kind_of(is_double), views, p) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (is_double) {
        gae_d((const double *)p[0], (const double *)p[1], (const double *)p[2], (const double *)p[3],
              (const double *)p[4], (double *)p[5], steps, batch, agents, gamma, gamma_lambda);
    } else {
        gae_f((const float *)p[0], (const float *)p[1], (const float *)p[2], (const float *)p[3],
              (const float *)p[4], (float *)p[5], steps, batch, agents, (float)gamma, (float)gamma_lambda);
    }
    Py_END_ALLOW_THREADS
    release_buffers(6, views, p);
    Py_RETURN_NONE;
}

static PyObject *py_vtrace(PyObject *self, PyObject *args) {
    PyObject *rho, *c, *reward, *values, *out;
    Py_ssize_t steps, width;
    double gamma, gamma_lambda;
    int is_double;
    if (!PyArg_ParseTuple(args, "OOOOOnnddp", &rho, &c, &reward, &values, &out, &steps, &width, &gamma,
                          &gamma_lambda, &is_double)) {
        return NULL;
    }
    if (steps < 0 || width < 0) {
        PyErr_SetString(PyExc_ValueError, "vtrace: negative size");
        return NULL;
    }
    const Py_ssize_t items = steps * width;
    spec_t specs[5] = {{rho, "clipped_rhos", 0, 0, items}, {c, "clipped_cs", 0, 0, items},
                       {reward, "reward", 0, 0, items}, {values, "bootstrap_values", 0, 0, items + width},
                       {out, "out", 1, 0, items}};
    Py_buffer views[5];
    void *p[5];
    if (get_buffers(specs, 5, kind_of(is_double), views, p) < 0) {
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (is_double) {
        vtrace_d((const double *)p[0], (const double *)p[1], (const double *)p[2], (const double *)p[3],
                 (double *)p[4], steps, width, gamma, gamma_lambda);
    } else {
        vtrace_f((const float *)p[0], (const float *)p[1], (const float *)p[2], (const float *)p[3],
                 (float *)p[4], steps, width, (float)gamma, (float)gamma_lambda);
    }
    Py_END_ALLOW_THREADS
    release_buffers(5, views, p);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"recurrence", py_recurrence, METH_VARARGS,
     "recurrence(coeff, x, T, N, is_double): x[t] += coeff[t] * x[t+1] backwards, in place."},
    {"gae", py_gae, METH_VARARGS,
     "gae(value, next_value, reward, done, traj_flag, out, T, B, A, gamma, gamma_lambda, is_double)."},
    {"vtrace", py_vtrace, METH_VARARGS,
     "vtrace(rho, c, reward, values, out, T, N, gamma, gamma_lambda, is_double): plain V-trace targets."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ckernels", "Compiled loops for zoo.rl_utils.", -1,
                                    methods};

/* Bumped whenever a signature or semantics above changes; _scan.py ignores a stale build of an older version. */
#define ZOO_CKERNELS_VERSION 1

PyMODINIT_FUNC PyInit__ckernels(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "VERSION", ZOO_CKERNELS_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
