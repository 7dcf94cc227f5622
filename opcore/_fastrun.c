/* opcore._fastrun: run()'s guarded torch path (and inline numpy key) as a compiled callable (issue 15).
 *
 * opcore.dispatch.run() first tries, for a torch call of 1-4 arguments, a cached signature confirmed by
 * torch's C++ tensor guard (opcore._guards), and calls that signature's entry: in the default context
 * (no policy, no backend named) the one that last passed its guard for (op, number of arguments), in
 * dispatch._LAST, with no key built and no shape read (the guard checks sizes and strides itself); else,
 * or where that guard says no, the one last cached for (op, policy, backend, number of arguments, first
 * tensor's shape) in dispatch._GUARDED, which then becomes _LAST's. This file does exactly that per-call
 * work without CPython's bytecode: the keyword move (linear(x, w, b=b) -> linear(x, w, b)), the context
 * policy read, the lookups, the guard calls and the entry call (or the kernel with the entry's appended
 * tail, one Python frame less: linear(x, w) -> F.linear(x, w, None)). Anything else, a slot missing or
 * the guards saying no, is handed to the pure-Python run() with the call as it came, which takes it from
 * the start (so a miss costs the guards twice). An entry that
 * raises an Exception is recovered by dispatch._recover_cached, as run() does, with the error set as the
 * exception being handled (a new error raised there chains to it, as in run()'s except block).
 * Calls of 1-3 numpy arrays (no keywords left) take run()'s inline numpy key here too: (op, policy,
 * backend, and per array its dtype, shape and strides) looked up in dispatch._INLINE, the entry called.
 *
 * Only the Python C API is used: no torch headers, no libtorch; torch's tensor type, the guard and the
 * tensors are plain Python objects here. Thread safety: the GIL is held throughout, except inside the
 * Python code this calls (a policy's __eq__, the guard, the entry); every object used across such a
 * call holds a strong reference first, so another thread clearing the caches meanwhile changes nothing
 * for this call. OPCORE_PURE_PYTHON=1 keeps this module out (dispatch.run is then the Python function),
 * and FastRun.enabled = False (dispatch.use_compiled) forwards every call to it (the tests run both paths in one process).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback;    /* the pure-Python run(op, /, *args, backend=None, **kwargs) */
    PyObject *guarded;     /* dispatch._GUARDED: slot key -> slot (SLOT_* below) */
    PyObject *last;        /* dispatch._LAST: op -> [None, slot of 1, 2, 3, 4 arguments] (default context) */
    PyObject *positions;   /* dispatch._POSITIONS: op -> {parameter name: position} */
    PyObject *policy;      /* settings.context_policy, a ContextVar (default None) */
    PyObject *recover;     /* dispatch._recover_cached(key, op, args, kwargs, backend, error) */
    PyObject *all_tensors; /* dispatch._ALL_TENSORS: a slot without a trailing plain value; a tensor's mark */
    PyObject *pattern;     /* dispatch._PATTERN: a slot whose constants are anywhere (slot[2]: the pattern) */
    PyObject *globals;     /* dispatch's namespace: _Tensor is read from it per call (it is rebound once) */
    PyObject *inline_;     /* dispatch._INLINE: run()'s inline keys -> entries (numpy arrays here) */
    PyObject *ndarray;     /* numpy.ndarray (exactly: subclasses take the Python path) */
    PyObject *dict;        /* __dict__: __doc__, __wrapped__, ... (functools.update_wrapper) */
    int enabled;
} FastRun;

#define MAX_ARGUMENTS 8 /* a kernel's arguments, tail included (opcore._calls.MAX_ARITY) */

/* A guarded slot (dispatch._GUARDED's values, the items of dispatch._LAST's rows): a tuple of SLOT_SIZE
 * fields at these indices. The names and values are opcore._dispatchcaches' SLOT_*, which builds the
 * slots; the module exports them as SLOT_LAYOUT and tests/test_slot_layout.py compares the two sides. */
#define SLOT_ARGUMENTS 0    /* the number of arguments (1-4) */
#define SLOT_PLAIN 1        /* the trailing plain value's type, or all_tensors, or pattern */
#define SLOT_VALUE 2        /* that plain value; for pattern: per argument all_tensors or (type, value) */
#define SLOT_CHECK 3        /* torch's guard on the tensors: check(*tensors) -> bool */
#define SLOT_ENTRY 4        /* the cached entry, called with the raw arguments */
#define SLOT_RECOVERY_KEY 5 /* the key of the entry's recovery in dispatch._RECOVER */
#define SLOT_BARE 6         /* (kernel, tail) where the entry only calls kernel(*args, *tail), else None */
#define SLOT_SIZE 7
#define LAST_ROW_SIZE 5 /* a dispatch._LAST row: [None, the slot of 1, 2, 3, 4 arguments] */

static PyObject *str_backend, *str_shape, *str_tensor, *str_dtype, *str_strides; /* interned names */
static PyObject *small_ints[LAST_ROW_SIZE];             /* 0..4: the slot key's number of arguments */

static PyObject *
forward(FastRun *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

/* Truth of a Python value that may be NULL (an error): 1, 0, or -1 with the error set. Steals `value`. */
static int
truth(PyObject *value)
{
    if (value == NULL)
        return -1;
    int result = value == Py_True ? 1 : value == Py_False ? 0 : PyObject_IsTrue(value);
    Py_DECREF(value);
    return result;
}

/* An Exception being raised, taken out of the error indicator, normalized, its traceback attached. */
typedef struct {
    PyObject *type, *error, *traceback;
} Raised;

/* 1 and the raised error in *raised where it is an Exception; 0, the error left raised, for any other
 * BaseException (KeyboardInterrupt, SystemExit...: not caught by an `except Exception` either). */
static int
take_exception(Raised *raised)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return 0;
    PyErr_Fetch(&raised->type, &raised->error, &raised->traceback);
    PyErr_NormalizeException(&raised->type, &raised->error, &raised->traceback);
    if (raised->traceback != NULL)
        PyException_SetTraceback(raised->error, raised->traceback);
    return 1;
}

static void
drop_exception(Raised *raised)
{
    Py_XDECREF(raised->type);
    Py_XDECREF(raised->error);
    Py_XDECREF(raised->traceback);
}

/* callable(*stack) with the raised error as the exception being handled, as inside `except Exception as
 * error:` (a new error raised there chains to it); the handled exception is restored afterwards. Takes
 * over the references in *raised. */
static PyObject *
call_handling(Raised *raised, PyObject *callable, PyObject *const *stack, size_t n)
{
    PyObject *error = raised->error;
    PyObject *handled_type, *handled, *handled_traceback;
    PyErr_GetExcInfo(&handled_type, &handled, &handled_traceback);
    Py_INCREF(error);
    PyErr_SetExcInfo(raised->type, error, raised->traceback); /* steals the type, the traceback and that reference */
    PyObject *result = PyObject_Vectorcall(callable, stack, n, NULL);
    PyErr_SetExcInfo(handled_type, handled, handled_traceback);
    Py_DECREF(error);
    return result;
}

/* The entry raised: run()'s `except Exception as error: return _recover_cached(key, op, args, {},
 * backend, error)`, with the error as the exception being handled while the recovery runs. */
static PyObject *
recover(FastRun *self, PyObject *key, PyObject *op, PyObject *const *call, Py_ssize_t n, PyObject *backend)
{
    Raised raised;
    if (!take_exception(&raised))
        return NULL;
    PyObject *args = PyTuple_New(n);
    PyObject *kwargs = PyDict_New();
    if (args == NULL || kwargs == NULL) {
        Py_XDECREF(args);
        Py_XDECREF(kwargs);
        drop_exception(&raised);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(call[i]);
        PyTuple_SET_ITEM(args, i, call[i]);
    }
    PyObject *stack[] = {key, op, args, kwargs, backend, raised.error};
    PyObject *result = call_handling(&raised, self->recover, stack, 6);
    Py_DECREF(args);
    Py_DECREF(kwargs);
    return result;
}

/* run()'s inline key of 1-3 numpy arrays, (op, policy, backend, and per array dtype, shape, strides),
 * looked up in _INLINE and its entry called; a miss goes to the Python run() as the call came. */
static PyObject *
run_numpy(FastRun *self, PyObject *op, PyObject *const *call, Py_ssize_t n, PyObject *backend,
          PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    for (Py_ssize_t i = 1; i < n; i++)
        if ((PyObject *)Py_TYPE(call[i]) != self->ndarray)
            return forward(self, args, nargsf, kwnames);
    PyObject *key = PyTuple_New(3 + 3 * n);
    if (key == NULL)
        return NULL;
    PyObject *policy;
    if (PyContextVar_Get(self->policy, NULL, &policy) < 0) {
        Py_DECREF(key);
        return NULL;
    }
    if (policy == NULL) { /* the variable has a default; never reached */
        policy = Py_None;
        Py_INCREF(policy);
    }
    PyTuple_SET_ITEM(key, 0, op);
    Py_INCREF(op);
    PyTuple_SET_ITEM(key, 1, policy); /* the reference PyContextVar_Get gave */
    PyTuple_SET_ITEM(key, 2, backend);
    Py_INCREF(backend);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *names[3] = {str_dtype, str_shape, str_strides};
        for (int f = 0; f < 3; f++) {
            PyObject *value = PyObject_GetAttr(call[i], names[f]);
            if (value == NULL) {
                Py_DECREF(key); /* the unset items are NULL: tuple dealloc skips them */
                return NULL;
            }
            PyTuple_SET_ITEM(key, 3 + 3 * i + f, value);
        }
    }
    PyObject *entry = PyDict_GetItemWithError(self->inline_, key);
    if (entry == NULL) {
        Py_DECREF(key);
        if (PyErr_Occurred())
            return NULL;
        return forward(self, args, nargsf, kwnames);
    }
    Py_INCREF(entry); /* kept while it runs: another thread may clear the caches */
    PyObject *result = PyObject_Vectorcall(entry, call, n, NULL);
    if (result == NULL)
        result = recover(self, key, op, call, n, backend);
    Py_DECREF(entry);
    Py_DECREF(key);
    return result;
}

/* Whether `slot` (SLOT_* fields) serves this call: the argument types, the trailing plain
 * value and torch's guard on the tensors. 1, 0, or -1 with an error set. The caller holds `slot`. */
static int
confirm(FastRun *self, PyObject *slot, PyObject *const *call, Py_ssize_t n, PyObject *tensor)
{
    PyObject *last = call[n - 1];
    PyObject *plain = PyTuple_GET_ITEM(slot, SLOT_PLAIN);
    PyObject *check = PyTuple_GET_ITEM(slot, SLOT_CHECK);
    int hit;
    if (plain == self->pattern) {
        /* the value: per argument the tensor mark (all_tensors) or its constant (type, value) */
        PyObject *pattern = PyTuple_GET_ITEM(slot, SLOT_VALUE);
        PyObject *tensors[4];
        Py_ssize_t k = 0;
        if (!PyTuple_CheckExact(pattern) || PyTuple_GET_SIZE(pattern) != n)
            return 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *want = PyTuple_GET_ITEM(pattern, i);
            if (want == self->all_tensors) {
                if ((PyObject *)Py_TYPE(call[i]) != tensor)
                    return 0;
                tensors[k++] = call[i];
            }
            else {
                if (!PyTuple_CheckExact(want) || PyTuple_GET_SIZE(want) != 2 ||
                    (PyObject *)Py_TYPE(call[i]) != PyTuple_GET_ITEM(want, 0))
                    return 0;
                int same = PyObject_RichCompareBool(call[i], PyTuple_GET_ITEM(want, 1), Py_EQ);
                if (same <= 0)
                    return same;
            }
        }
        return truth(PyObject_Vectorcall(check, tensors, k, NULL));
    }
    if (plain == self->all_tensors) {
        hit = (PyObject *)Py_TYPE(last) == tensor && (n < 3 || (PyObject *)Py_TYPE(call[1]) == tensor);
        if (hit)
            hit = truth(PyObject_Vectorcall(check, call, n, NULL));
    }
    else {
        hit = (PyObject *)Py_TYPE(last) == plain;
        if (hit)
            hit = truth(PyObject_RichCompare(last, PyTuple_GET_ITEM(slot, SLOT_VALUE), Py_EQ));
        if (hit > 0)
            hit = n < 3 || (PyObject *)Py_TYPE(call[1]) == tensor;
        if (hit > 0)
            hit = truth(PyObject_Vectorcall(check, call, n - 1, NULL));
    }
    return hit;
}

static PyObject *
fastrun_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    FastRun *self = (FastRun *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (!self->enabled || nargs < 2 || nargs > 5 || !PyUnicode_CheckExact(args[0]))
        return forward(self, args, nargsf, kwnames);
    PyObject *op = args[0];
    PyObject *call[4];
    Py_ssize_t n = nargs - 1;
    PyObject *backend = Py_None;
    for (Py_ssize_t i = 0; i < n; i++)
        call[i] = args[1 + i];
    if (kwnames != NULL) {
        /* run()'s keyword move: keywords naming exactly the parameters right after the positional ones, in
         * any order (linear(x, w, b=b), layer_norm(x, (8,), weight=w, bias=b)); anything else, run()'s */
        PyObject *moved[4] = {NULL, NULL, NULL, NULL}; /* by position after the positional ones */
        PyObject *positions = NULL;
        Py_ssize_t count = 0;
        Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t k = 0; k < nk; k++) {
            PyObject *key = PyTuple_GET_ITEM(kwnames, k);
            /* kwnames are interned by the compiler: identity decides, a compare only for a built name */
            if (key == str_backend || (!PyUnicode_CHECK_INTERNED(key) && PyUnicode_Compare(key, str_backend) == 0)) {
                backend = args[nargs + k];
                continue;
            }
            if (positions == NULL) {
                positions = PyDict_GetItemWithError(self->positions, op); /* borrowed */
                if (positions == NULL || !PyDict_CheckExact(positions)) {
                    if (PyErr_Occurred())
                        return NULL;
                    return forward(self, args, nargsf, kwnames);
                }
            }
            PyObject *position = PyDict_GetItemWithError(positions, key); /* str keys: no Python code runs */
            if (position == NULL || !PyLong_CheckExact(position)) {
                if (PyErr_Occurred())
                    return NULL;
                return forward(self, args, nargsf, kwnames);
            }
            Py_ssize_t i = PyLong_AsSsize_t(position) - n;
            if (i < 0 || n + i >= 4 || moved[i] != NULL) {
                if (PyErr_Occurred())
                    return NULL;
                return forward(self, args, nargsf, kwnames);
            }
            moved[i] = args[nargs + k];
            count++;
        }
        for (Py_ssize_t i = 0; i < count; i++) {
            if (moved[i] == NULL) /* a gap: bound as given by run() */
                return forward(self, args, nargsf, kwnames);
            call[n + i] = moved[i];
        }
        n += count;
    }
    if (backend != Py_None && !PyUnicode_Check(backend))
        return forward(self, args, nargsf, kwnames); /* run() raises its ArgumentError */
    PyObject *tensor = PyDict_GetItemWithError(self->globals, str_tensor); /* borrowed: dispatch._Tensor */
    if (tensor == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return forward(self, args, nargsf, kwnames);
    }
    if ((PyObject *)Py_TYPE(call[0]) != tensor) {
        if ((PyObject *)Py_TYPE(call[0]) == self->ndarray && n <= 3)
            return run_numpy(self, op, call, n, backend, args, nargsf, kwnames);
        return forward(self, args, nargsf, kwnames);
    }
    PyObject *policy;
    if (PyContextVar_Get(self->policy, NULL, &policy) < 0)
        return NULL;
    if (policy == NULL) { /* the variable has a default; never reached */
        policy = Py_None;
        Py_INCREF(policy);
    }
    /* first level (the default context only): the signature that last passed its guard for (op, n), in
     * dispatch._LAST[op][n], without reading the shape: the guard checks sizes and strides itself */
    PyObject *row = NULL, *first = NULL, *slot = NULL;
    int hit = 0;
    if (policy == Py_None && backend == Py_None) {
        row = PyDict_GetItemWithError(self->last, op); /* borrowed; str keys: no Python code runs */
        if (row == NULL && PyErr_Occurred()) {
            Py_DECREF(policy);
            return NULL;
        }
        if (row != NULL && PyList_CheckExact(row) && PyList_GET_SIZE(row) == LAST_ROW_SIZE) {
            Py_INCREF(row); /* kept: promoted into below; a clear meanwhile detaches it, harmlessly */
            first = PyList_GET_ITEM(row, n);
            if (PyTuple_CheckExact(first) && PyTuple_GET_SIZE(first) > SLOT_RECOVERY_KEY) {
                Py_INCREF(first); /* kept while the guard and the entry run: another thread may clear the caches */
                hit = confirm(self, first, call, n, tensor);
                if (hit > 0)
                    slot = first;
            }
            else
                first = NULL;
        }
        else
            row = NULL;
    }
    if (hit == 0) {
        /* second level: the slot of (op, policy, backend, n, first tensor's shape), promoted to the first
         * level when its guard passes (a call of another shape than the last one pays this) */
        PyObject *shape = PyObject_GetAttr(call[0], str_shape);
        PyObject *key = shape == NULL ? NULL : PyTuple_Pack(5, op, policy, backend, small_ints[n], shape);
        Py_XDECREF(shape);
        PyObject *found = key == NULL ? NULL : PyDict_GetItemWithError(self->guarded, key);
        if (found == NULL && PyErr_Occurred())
            hit = -1;
        else if (found != NULL && found != first && PyTuple_CheckExact(found) && PyTuple_GET_SIZE(found) > SLOT_RECOVERY_KEY) {
            Py_INCREF(found);
            hit = confirm(self, found, call, n, tensor);
            if (hit > 0) {
                slot = found;
                /* still the slot of its key (the guard ran Python code: the caches may have changed); no
                 * Python code runs from this lookup to the store */
                PyObject *now = row == NULL ? NULL : PyDict_GetItemWithError(self->guarded, key);
                if (now == found) {
                    Py_INCREF(found);
                    PyList_SetItem(row, n, found); /* steals; drops the one it replaces */
                }
                else if (now == NULL && PyErr_Occurred())
                    PyErr_Clear(); /* only the promotion is lost */
            }
            else
                Py_DECREF(found);
        }
        Py_XDECREF(key);
    }
    Py_DECREF(policy);
    if (first != NULL && first != slot)
        Py_DECREF(first);
    Py_XDECREF(row);
    if (hit < 0) {
        Py_XDECREF(slot);
        return NULL;
    }
    if (hit == 0)
        return forward(self, args, nargsf, kwnames);
    PyObject *result;
    {
        /* the kernel itself with the tail appended where the slot has it (SLOT_BARE: (kernel, tail)),
         * else the entry (which may be a Python wrapper doing just that: one frame more) */
        PyObject *bare = PyTuple_GET_SIZE(slot) > SLOT_BARE ? PyTuple_GET_ITEM(slot, SLOT_BARE) : Py_None;
        PyObject *tail = NULL;
        if (PyTuple_CheckExact(bare) && PyTuple_GET_SIZE(bare) == 2) {
            tail = PyTuple_GET_ITEM(bare, 1);
            if (!PyTuple_CheckExact(tail) || n + PyTuple_GET_SIZE(tail) > MAX_ARGUMENTS)
                tail = NULL;
        }
        if (tail != NULL) {
            PyObject *full[MAX_ARGUMENTS];
            Py_ssize_t m = n;
            for (Py_ssize_t i = 0; i < n; i++)
                full[i] = call[i];
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tail); i++)
                full[m++] = PyTuple_GET_ITEM(tail, i); /* borrowed: the slot holds the tail */
            result = PyObject_Vectorcall(PyTuple_GET_ITEM(bare, 0), full, m, NULL);
        }
        else
            result = PyObject_Vectorcall(PyTuple_GET_ITEM(slot, SLOT_ENTRY), call, n, NULL);
        if (result == NULL)
            result = recover(self, PyTuple_GET_ITEM(slot, SLOT_RECOVERY_KEY), op, call, n, backend);
    }
    Py_DECREF(slot);
    return result;
}

static int
fastrun_traverse(FastRun *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fallback);
    Py_VISIT(self->guarded);
    Py_VISIT(self->last);
    Py_VISIT(self->positions);
    Py_VISIT(self->policy);
    Py_VISIT(self->recover);
    Py_VISIT(self->all_tensors);
    Py_VISIT(self->pattern);
    Py_VISIT(self->globals);
    Py_VISIT(self->inline_);
    Py_VISIT(self->ndarray);
    Py_VISIT(self->dict);
    return 0;
}

static int
fastrun_clear(FastRun *self)
{
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->guarded);
    Py_CLEAR(self->last);
    Py_CLEAR(self->positions);
    Py_CLEAR(self->policy);
    Py_CLEAR(self->recover);
    Py_CLEAR(self->all_tensors);
    Py_CLEAR(self->pattern);
    Py_CLEAR(self->globals);
    Py_CLEAR(self->inline_);
    Py_CLEAR(self->ndarray);
    Py_CLEAR(self->dict);
    return 0;
}

static void
fastrun_dealloc(FastRun *self)
{
    PyObject_GC_UnTrack(self);
    fastrun_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
fastrun_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"fallback", "guarded", "positions", "policy", "recover", "all_tensors", "globals",
                            "inline", "ndarray", "last", "pattern", NULL};
    PyObject *fallback, *guarded, *positions, *policy, *recover_, *all_tensors, *globals, *inline_, *ndarray, *last,
        *pattern;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!O!O!OOO!O!O!O!O:FastRun", names, &fallback, &PyDict_Type,
                                     &guarded, &PyDict_Type, &positions, &PyContextVar_Type, &policy, &recover_,
                                     &all_tensors, &PyDict_Type, &globals, &PyDict_Type, &inline_, &PyType_Type,
                                     &ndarray, &PyDict_Type, &last, &pattern))
        return NULL;
    if (!PyCallable_Check(fallback) || !PyCallable_Check(recover_)) {
        PyErr_SetString(PyExc_TypeError, "FastRun: fallback and recover must be callable");
        return NULL;
    }
    FastRun *self = (FastRun *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = fastrun_vectorcall;
    Py_INCREF(fallback);
    self->fallback = fallback;
    Py_INCREF(guarded);
    self->guarded = guarded;
    Py_INCREF(last);
    self->last = last;
    Py_INCREF(positions);
    self->positions = positions;
    Py_INCREF(policy);
    self->policy = policy;
    Py_INCREF(recover_);
    self->recover = recover_;
    Py_INCREF(all_tensors);
    self->all_tensors = all_tensors;
    Py_INCREF(pattern);
    self->pattern = pattern;
    Py_INCREF(globals);
    self->globals = globals;
    Py_INCREF(inline_);
    self->inline_ = inline_;
    Py_INCREF(ndarray);
    self->ndarray = ndarray;
    self->enabled = 1;
    return (PyObject *)self;
}

static PyObject *
fastrun_repr(FastRun *self)
{
    return PyUnicode_FromFormat("<compiled fast path of %R%s>", self->fallback, self->enabled ? "" : ", disabled");
}

/* pickled (multiprocessing, copy) by reference, as the function it stands for: the global of that name
 * in its __module__ (opcore.dispatch.run) */
static PyObject *
fastrun_reduce(FastRun *self, PyObject *unused)
{
    return PyUnicode_FromString("run");
}

static PyMethodDef fastrun_methods[] = {
    {"__reduce__", (PyCFunction)fastrun_reduce, METH_NOARGS, NULL},
    {NULL},
};

static PyMemberDef fastrun_members[] = {
    {"enabled", T_BOOL, offsetof(FastRun, enabled), 0,
     "False: every call goes to the pure-Python run() as it came (the tests run both paths)"},
    {"fallback", T_OBJECT, offsetof(FastRun, fallback), READONLY, "the pure-Python run()"},
    {NULL},
};

static PyGetSetDef fastrun_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyTypeObject FastRunType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "opcore._fastrun.FastRun",
    .tp_doc = "run() with its guarded torch path compiled; see opcore.dispatch.run for the call itself.",
    .tp_basicsize = sizeof(FastRun),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = fastrun_new,
    .tp_dealloc = (destructor)fastrun_dealloc,
    .tp_traverse = (traverseproc)fastrun_traverse,
    .tp_clear = (inquiry)fastrun_clear,
    .tp_repr = (reprfunc)fastrun_repr,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(FastRun, vectorcall),
    .tp_dictoffset = offsetof(FastRun, dict),
    .tp_methods = fastrun_methods,
    .tp_members = fastrun_members,
    .tp_getset = fastrun_getset,
};

/* opcore.resolved.ResolvedOp's base where this module is built: a call of a resolved op goes straight to
 * its entry (vectorcall, no method lookup). A Python class's __call__, even a slot holding the entry,
 * goes through type slot dispatch (the __call__ lookup, the descriptor, an argument tuple): ~0.2 us of
 * a resolved call on the developer machine. The entry is the resolved op's generated function.
 *
 * Once armed (_arm, by opcore.resolved once the examples' signature was checked), a call of exactly
 * `nargs` positional arguments first asks the tensor guard (opcore._guards) here and, where it passes,
 * calls the kernel with the arguments and the armed tail appended: the entry's own fast branch without
 * its Python frame. The kernel raising an Exception goes to `failed(error, *args)` (the entry's recovery),
 * with the error as the exception being handled; the guard saying no, or any other call, goes to the
 * entry, which answers as it always does. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *entry;
    PyObject *guard;  /* the tensor guard of the examples' signature (opcore._guards), or NULL: not armed */
    PyObject *kernel; /* what the entry's fast branch calls */
    PyObject *tail;   /* a tuple of values appended to the arguments (the non-tensor arguments), or NULL */
    PyObject *failed; /* failed(error, *args): the entry's recovery after the kernel raised */
    Py_ssize_t nargs; /* the free arguments the guard checks */
} ResolvedBase;

/* The kernel raised: the entry's `except Exception as error: return failed(error, *args)`. */
static PyObject *
resolved_failed(PyObject *failed, PyObject *const *args, Py_ssize_t n)
{
    Raised raised;
    if (!take_exception(&raised))
        return NULL;
    PyObject *stack[MAX_ARGUMENTS + 1];
    stack[0] = raised.error;
    for (Py_ssize_t i = 0; i < n; i++)
        stack[i + 1] = args[i];
    return call_handling(&raised, failed, stack, (size_t)(n + 1));
}

/* The armed path: 1 the guard passed and the kernel ran (result or NULL in *out), 0 not taken. */
static int
resolved_armed(ResolvedBase *self, PyObject *const *args, Py_ssize_t n, PyObject **out)
{
    PyObject *guard = self->guard, *kernel = self->kernel, *tail = self->tail, *failed = self->failed;
    Py_ssize_t extra = tail == NULL ? 0 : PyTuple_GET_SIZE(tail);
    if (n + extra > MAX_ARGUMENTS)
        return 0;
    /* strong references while Python code runs: the op may be disarmed or re-armed meanwhile */
    Py_INCREF(guard);
    Py_INCREF(kernel);
    Py_XINCREF(tail);
    Py_INCREF(failed);
    int taken = 1;
    int passed = truth(PyObject_Vectorcall(guard, args, (size_t)n, NULL));
    if (passed < 0) {
        *out = NULL; /* the guard raised: as the entry's `if G(...)` would */
    } else if (passed == 0) {
        taken = 0;
    } else {
        PyObject *stack[MAX_ARGUMENTS];
        for (Py_ssize_t i = 0; i < n; i++)
            stack[i] = args[i];
        for (Py_ssize_t i = 0; i < extra; i++)
            stack[n + i] = PyTuple_GET_ITEM(tail, i);
        PyObject *result = PyObject_Vectorcall(kernel, stack, (size_t)(n + extra), NULL);
        *out = result != NULL ? result : resolved_failed(failed, args, n);
    }
    Py_DECREF(guard);
    Py_DECREF(kernel);
    Py_XDECREF(tail);
    Py_DECREF(failed);
    return taken;
}

static PyObject *
resolved_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    ResolvedBase *self = (ResolvedBase *)callable;
    if (self->guard != NULL && kwnames == NULL && PyVectorcall_NARGS(nargsf) == self->nargs) {
        PyObject *result;
        if (resolved_armed(self, args, self->nargs, &result))
            return result;
    }
    PyObject *entry = self->entry;
    if (entry == NULL) {
        PyErr_SetString(PyExc_TypeError, "this resolved op has no entry yet: make it with opcore.resolve");
        return NULL;
    }
    Py_INCREF(entry); /* kept while it runs: the op may be given another entry meanwhile */
    PyObject *result = PyObject_Vectorcall(entry, args, nargsf, kwnames);
    Py_DECREF(entry);
    return result;
}

static void
resolved_disarm(ResolvedBase *self)
{
    Py_CLEAR(self->guard);
    Py_CLEAR(self->kernel);
    Py_CLEAR(self->tail);
    Py_CLEAR(self->failed);
    self->nargs = -1;
}

static PyObject *
resolved_arm(ResolvedBase *self, PyObject *args)
{
    PyObject *guard, *kernel, *tail, *failed;
    Py_ssize_t nargs;
    if (!PyArg_ParseTuple(args, "OOO!On:_arm", &guard, &kernel, &PyTuple_Type, &tail, &failed, &nargs))
        return NULL;
    if (nargs < 1 || nargs + PyTuple_GET_SIZE(tail) > MAX_ARGUMENTS) {
        PyErr_Format(PyExc_ValueError, "_arm: %zd arguments and a tail of %zd: at most %d in all", nargs,
                     PyTuple_GET_SIZE(tail), MAX_ARGUMENTS);
        return NULL;
    }
    if (!PyCallable_Check(guard) || !PyCallable_Check(kernel) || !PyCallable_Check(failed)) {
        PyErr_SetString(PyExc_TypeError, "_arm: the guard, the kernel and failed must be callable");
        return NULL;
    }
    resolved_disarm(self);
    Py_INCREF(guard);
    Py_INCREF(kernel);
    Py_INCREF(failed);
    self->kernel = kernel;
    self->failed = failed;
    if (PyTuple_GET_SIZE(tail) > 0) {
        Py_INCREF(tail);
        self->tail = tail;
    }
    self->nargs = nargs;
    self->guard = guard; /* last: the vectorcall reads the others only where a guard is set */
    Py_RETURN_NONE;
}

static PyObject *
resolved_disarm_method(ResolvedBase *self, PyObject *Py_UNUSED(ignored))
{
    resolved_disarm(self);
    Py_RETURN_NONE;
}

static PyObject *
resolved_armed_get(ResolvedBase *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->guard != NULL);
}

static PyMethodDef resolved_methods[] = {
    {"_arm", (PyCFunction)resolved_arm, METH_VARARGS,
     "_arm(guard, kernel, tail, failed, nargs): calls of nargs positional arguments that pass the guard go "
     "to kernel(*args, *tail) here, an Exception to failed(error, *args)"},
    {"_disarm", (PyCFunction)resolved_disarm_method, METH_NOARGS, "every call goes to the entry again"},
    {NULL},
};

static PyObject *
resolved_entry_get(ResolvedBase *self, void *Py_UNUSED(closure))
{
    if (self->entry == NULL)
        Py_RETURN_NONE;
    Py_INCREF(self->entry);
    return self->entry;
}

/* a new entry disarms: every call goes to it until it is armed again */
static int
resolved_entry_set(ResolvedBase *self, PyObject *value, void *Py_UNUSED(closure))
{
    resolved_disarm(self);
    Py_XSETREF(self->entry, value == NULL || value == Py_None ? NULL : Py_NewRef(value));
    return 0;
}

static PyGetSetDef resolved_getset[] = {
    {"_entry", (getter)resolved_entry_get, (setter)resolved_entry_set,
     "the function a call of the resolved op goes to (setting it disarms)", NULL},
    {"_armed", (getter)resolved_armed_get, NULL, "whether calls are guarded here before the entry", NULL},
    {NULL},
};

static PyObject *
resolved_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    ResolvedBase *self = (ResolvedBase *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->vectorcall = resolved_vectorcall;
        self->nargs = -1;
    }
    return (PyObject *)self;
}

static int
resolved_traverse(ResolvedBase *self, visitproc visit, void *arg)
{
    Py_VISIT(self->entry);
    Py_VISIT(self->guard);
    Py_VISIT(self->kernel);
    Py_VISIT(self->tail);
    Py_VISIT(self->failed);
    return 0;
}

static int
resolved_clear(ResolvedBase *self)
{
    Py_CLEAR(self->entry);
    resolved_disarm(self);
    return 0;
}

static void
resolved_dealloc(ResolvedBase *self)
{
    PyObject_GC_UnTrack(self);
    resolved_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject ResolvedBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "opcore._fastrun.ResolvedBase",
    .tp_doc = "A resolved op's call, compiled: straight to its entry (opcore.resolved.ResolvedOp).",
    .tp_basicsize = sizeof(ResolvedBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = resolved_new,
    .tp_dealloc = (destructor)resolved_dealloc,
    .tp_traverse = (traverseproc)resolved_traverse,
    .tp_clear = (inquiry)resolved_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(ResolvedBase, vectorcall),
    .tp_methods = resolved_methods,
    .tp_getset = resolved_getset,
};

/* Python 3.11 does not pass Py_TPFLAGS_HAVE_VECTORCALL on to a heap subclass (3.12 does, where the
 * subclass keeps the inherited tp_call): a call of opcore.resolved.ResolvedOp would then go through
 * tp_call (an argument tuple, PyVectorcall_Call) instead of straight to resolved_vectorcall. Sets the flag
 * on such a subclass, which must not define __call__ itself. */
static PyObject *
inherit_vectorcall(PyObject *Py_UNUSED(module), PyObject *cls)
{
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &ResolvedBaseType)) {
        PyErr_SetString(PyExc_TypeError, "inherit_vectorcall: a subclass of ResolvedBase expected");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    if (type->tp_call != PyVectorcall_Call || type->tp_vectorcall_offset != offsetof(ResolvedBase, vectorcall)) {
        PyErr_SetString(PyExc_TypeError, "inherit_vectorcall: the subclass defines its own __call__");
        return NULL;
    }
    type->tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL;
    Py_RETURN_NONE;
}

static PyMethodDef fastrun_functions[] = {
    {"inherit_vectorcall", inherit_vectorcall, METH_O,
     "inherit_vectorcall(cls): calls of instances of this ResolvedBase subclass go straight to its vectorcall"},
    {NULL},
};

/* sha256 of this file (16 hex digits), passed by setup.py: opcore.dispatch compares it with the file
 * beside the module and keeps the pure-Python run() where they differ (a stale build) */
#ifndef FASTRUN_SOURCE
#define FASTRUN_SOURCE "unknown"
#endif

/* SLOT_LAYOUT: {name: value} of the slot's #defines above, for the layout test against opcore._dispatchcaches */
static int
add_layout(PyObject *module)
{
    PyObject *layout = Py_BuildValue("{sisisisisisisisisi}", "SLOT_ARGUMENTS", SLOT_ARGUMENTS, "SLOT_PLAIN", SLOT_PLAIN,
                                     "SLOT_VALUE", SLOT_VALUE, "SLOT_CHECK", SLOT_CHECK, "SLOT_ENTRY", SLOT_ENTRY,
                                     "SLOT_RECOVERY_KEY", SLOT_RECOVERY_KEY, "SLOT_BARE", SLOT_BARE, "SLOT_SIZE",
                                     SLOT_SIZE, "LAST_ROW_SIZE", LAST_ROW_SIZE);
    if (layout == NULL)
        return -1;
    if (PyModule_AddObject(module, "SLOT_LAYOUT", layout) < 0) {
        Py_DECREF(layout);
        return -1;
    }
    return 0;
}

static struct PyModuleDef fastrun_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "opcore._fastrun",
    .m_doc = "run()'s guarded torch path, compiled (opcore.dispatch uses it unless OPCORE_PURE_PYTHON=1).",
    .m_size = -1,
    .m_methods = fastrun_functions,
};

PyMODINIT_FUNC
PyInit__fastrun(void)
{
    str_backend = PyUnicode_InternFromString("backend");
    str_shape = PyUnicode_InternFromString("shape");
    str_tensor = PyUnicode_InternFromString("_Tensor");
    str_dtype = PyUnicode_InternFromString("dtype");
    str_strides = PyUnicode_InternFromString("strides");
    if (str_backend == NULL || str_shape == NULL || str_tensor == NULL || str_dtype == NULL || str_strides == NULL)
        return NULL;
    for (int i = 0; i < LAST_ROW_SIZE; i++) {
        small_ints[i] = PyLong_FromLong(i);
        if (small_ints[i] == NULL)
            return NULL;
    }
    if (PyType_Ready(&FastRunType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&fastrun_module);
    if (module == NULL)
        return NULL;
    if (PyModule_AddStringConstant(module, "SOURCE", FASTRUN_SOURCE) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    if (add_layout(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&FastRunType);
    if (PyModule_AddObject(module, "FastRun", (PyObject *)&FastRunType) < 0) {
        Py_DECREF(&FastRunType);
        Py_DECREF(module);
        return NULL;
    }
    if (PyType_Ready(&ResolvedBaseType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&ResolvedBaseType);
    if (PyModule_AddObject(module, "ResolvedBase", (PyObject *)&ResolvedBaseType) < 0) {
        Py_DECREF(&ResolvedBaseType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
