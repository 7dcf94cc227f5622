/* opcore._torchguard: a check of torch tensors against the signature of examples (and a check of watched
 * weights, Watch below), compiled against the installed torch's headers (issue 15).
 * opcore._guards uses it where it was built for this torch, in place
 * of torch's own TensorGuards: the same answer for every field opcore's keys hold, without TensorGuards'
 * per-call argument tuple, keyword parsing and thread-local dispatch state (~0.12 us for one tensor and
 * ~0.26 for three on the developer machine; this: a few ns a tensor over one call).
 *
 * Guard(*examples)(*tensors) is True where there are as many tensors as examples and each has its
 * example's exact Python type, dispatch key set (device type, layout, autograd, inference, wrappers),
 * dtype, device (index included), requires_grad, sizes and strides; False otherwise, never an error.
 * A tensor with symbolic sizes (under tracing) is never matched. The examples must be strided tensors
 * with concrete sizes; no reference to them is kept.
 *
 * Watch(holders, keys, tensors, versions, pointers)() is opcore.torchkit.watch.TensorWatch.stale()'s loop:
 * True where holders[i][keys[i]] is no longer tensors[i], or tensors[i]'s version counter moved from
 * versions[i] (-1: an inference tensor, which keeps none), or its data pointer from pointers[i]. Right
 * after a graph runtime's run every object it reads is out of the CPU's caches; the interpreter's loop
 * waits for each miss in turn (~0.5-1.7 us a tensor on the developer machines), this loop reads each
 * tensor's implementation directly and lets the CPU overlap the misses of independent tensors.
 *
 * The module is tied to the torch it was compiled against (its C++ ABI): TORCH_VERSION is compiled in,
 * and opcore._guards uses the module only where torch.__version__ equals it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <torch/csrc/autograd/python_variable.h>

#include <cstring>
#include <memory>
#include <vector>

#ifndef TORCHGUARD_TORCH_VERSION
#define TORCHGUARD_TORCH_VERSION "unknown"
#endif
#ifndef TORCHGUARD_SOURCE
#define TORCHGUARD_SOURCE "unknown"
#endif

namespace {

struct Expected {
    PyTypeObject *type;
    c10::DispatchKeySet keys;
    c10::ScalarType dtype;
    c10::Device device;
    bool requires_grad;
    std::vector<int64_t> sizes;
    std::vector<int64_t> strides;
};

struct Guard {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    std::vector<Expected> *expected;
};

bool
matches(const Expected &e, PyObject *obj)
{
    if (Py_TYPE(obj) != e.type)
        return false;
    const at::Tensor &t = THPVariable_Unpack(obj);
    c10::TensorImpl *impl = t.unsafeGetTensorImpl();
    if (impl->key_set() != e.keys || impl->has_symbolic_sizes_strides())
        return false;
    if (impl->dtype().toScalarType() != e.dtype || impl->device() != e.device || t.requires_grad() != e.requires_grad)
        return false;
    c10::IntArrayRef sizes = impl->sizes();
    c10::IntArrayRef strides = impl->strides();
    size_t rank = e.sizes.size();
    return sizes.size() == rank && strides.size() == rank &&
           std::memcmp(sizes.data(), e.sizes.data(), rank * sizeof(int64_t)) == 0 &&
           std::memcmp(strides.data(), e.strides.data(), rank * sizeof(int64_t)) == 0;
}

PyObject *
guard_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    const std::vector<Expected> &expected = *reinterpret_cast<Guard *>(self)->expected;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames != nullptr || static_cast<size_t>(n) != expected.size())
        Py_RETURN_FALSE;
    try {
        for (Py_ssize_t i = 0; i < n; i++)
            if (!matches(expected[i], args[i]))
                Py_RETURN_FALSE;
    } catch (...) { /* a tensor whose sizes or strides torch refuses to give: not the examples' signature */
        Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

PyObject *
guard_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (kwargs != nullptr && PyDict_GET_SIZE(kwargs) > 0) {
        PyErr_SetString(PyExc_TypeError, "Guard(*tensors) takes no keyword arguments");
        return nullptr;
    }
    auto expected = std::make_unique<std::vector<Expected>>();
    try {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); i++) {
            PyObject *obj = PyTuple_GET_ITEM(args, i);
            if (!THPVariable_Check(obj)) {
                PyErr_Format(PyExc_TypeError, "Guard: argument %zd is a %s, not a torch tensor", i,
                             Py_TYPE(obj)->tp_name);
                return nullptr;
            }
            const at::Tensor &t = THPVariable_Unpack(obj);
            c10::TensorImpl *impl = t.unsafeGetTensorImpl();
            if (t.layout() != c10::kStrided || impl->has_symbolic_sizes_strides()) {
                PyErr_Format(PyExc_ValueError, "Guard: argument %zd is not a strided tensor of concrete sizes", i);
                return nullptr;
            }
            c10::IntArrayRef sizes = impl->sizes(), strides = impl->strides();
            expected->push_back(Expected{Py_TYPE(obj), impl->key_set(), impl->dtype().toScalarType(), impl->device(),
                                         t.requires_grad(), std::vector<int64_t>(sizes.begin(), sizes.end()),
                                         std::vector<int64_t>(strides.begin(), strides.end())});
        }
    } catch (const std::exception &error) {
        PyErr_Format(PyExc_ValueError, "Guard: %s", error.what());
        return nullptr;
    }
    Guard *self = reinterpret_cast<Guard *>(type->tp_alloc(type, 0));
    if (self == nullptr)
        return nullptr;
    self->vectorcall = guard_vectorcall;
    self->expected = expected.release();
    return reinterpret_cast<PyObject *>(self);
}

void
guard_dealloc(PyObject *self)
{
    delete reinterpret_cast<Guard *>(self)->expected;
    Py_TYPE(self)->tp_free(self);
}

PyTypeObject GuardType = {PyVarObject_HEAD_INIT(nullptr, 0)};

struct Watched {
    int64_t version; /* -1: not counted (an inference tensor) */
    const void *data;
};

struct Watch {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *holders; /* tuples, as given */
    PyObject *keys;
    PyObject *tensors;
    std::vector<Watched> *watched;
};

bool
watch_stale(Watch *self)
{
    Py_ssize_t n = PyTuple_GET_SIZE(self->tensors);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *now = PyDict_GetItemWithError(PyTuple_GET_ITEM(self->holders, i), PyTuple_GET_ITEM(self->keys, i));
        if (now != PyTuple_GET_ITEM(self->tensors, i)) {
            PyErr_Clear(); /* a key that cannot be looked up any more is a change too */
            return true;
        }
        /* the implementation read through the tensor each time, never kept: torch.utils.swap_tensors
         * (module.to with swapping on) gives a tensor object another implementation */
        const c10::TensorImpl *impl = THPVariable_Unpack(now).unsafeGetTensorImpl();
        const Watched &w = (*self->watched)[i];
        if (w.version >= 0 && static_cast<int64_t>(impl->version_counter().current_version()) != w.version)
            return true;
        if (impl->data() != w.data)
            return true;
    }
    return false;
}

PyObject *
watch_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) != 0 || kwnames != nullptr) {
        PyErr_SetString(PyExc_TypeError, "a Watch is called with no arguments");
        return nullptr;
    }
    try {
        if (watch_stale(reinterpret_cast<Watch *>(self)))
            Py_RETURN_TRUE;
    } catch (...) { /* torch refusing to say: prepare again rather than trust what was */
        PyErr_Clear();
        Py_RETURN_TRUE;
    }
    Py_RETURN_FALSE;
}

PyObject *
watch_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *holders, *keys, *tensors, *versions, *pointers;
    if (kwargs != nullptr && PyDict_GET_SIZE(kwargs) > 0) {
        PyErr_SetString(PyExc_TypeError, "Watch(holders, keys, tensors, versions, pointers) takes no keywords");
        return nullptr;
    }
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!:Watch", &PyTuple_Type, &holders, &PyTuple_Type, &keys, &PyTuple_Type,
                          &tensors, &PyTuple_Type, &versions, &PyTuple_Type, &pointers))
        return nullptr;
    Py_ssize_t n = PyTuple_GET_SIZE(tensors);
    if (PyTuple_GET_SIZE(holders) != n || PyTuple_GET_SIZE(keys) != n || PyTuple_GET_SIZE(versions) != n ||
        PyTuple_GET_SIZE(pointers) != n) {
        PyErr_SetString(PyExc_ValueError, "Watch: the five tuples must have one entry per tensor");
        return nullptr;
    }
    auto watched = std::make_unique<std::vector<Watched>>();
    try {
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *holder = PyTuple_GET_ITEM(holders, i), *tensor = PyTuple_GET_ITEM(tensors, i);
            if (!PyDict_CheckExact(holder) || !THPVariable_Check(tensor)) {
                PyErr_Format(PyExc_TypeError, "Watch: entry %zd is not a tensor held in a dict", i);
                return nullptr;
            }
            int64_t version = PyLong_AsLongLong(PyTuple_GET_ITEM(versions, i));
            void *pointer = PyLong_AsVoidPtr(PyTuple_GET_ITEM(pointers, i));
            if (PyErr_Occurred())
                return nullptr;
            watched->push_back(Watched{version, pointer});
        }
    } catch (const std::exception &error) {
        PyErr_Format(PyExc_ValueError, "Watch: %s", error.what());
        return nullptr;
    }
    Watch *self = reinterpret_cast<Watch *>(type->tp_alloc(type, 0));
    if (self == nullptr)
        return nullptr;
    self->vectorcall = watch_vectorcall;
    self->holders = Py_NewRef(holders);
    self->keys = Py_NewRef(keys);
    self->tensors = Py_NewRef(tensors);
    self->watched = watched.release();
    return reinterpret_cast<PyObject *>(self);
}

int
watch_traverse(PyObject *self, visitproc visit, void *arg)
{
    Watch *w = reinterpret_cast<Watch *>(self);
    Py_VISIT(w->holders);
    Py_VISIT(w->keys);
    Py_VISIT(w->tensors);
    return 0;
}

int
watch_clear(PyObject *self)
{
    Watch *w = reinterpret_cast<Watch *>(self);
    Py_CLEAR(w->holders);
    Py_CLEAR(w->keys);
    Py_CLEAR(w->tensors);
    return 0;
}

void
watch_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    watch_clear(self);
    delete reinterpret_cast<Watch *>(self)->watched;
    Py_TYPE(self)->tp_free(self);
}

PyTypeObject WatchType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT};

} // namespace

PyMODINIT_FUNC
PyInit__torchguard(void)
{
    GuardType.tp_name = "opcore._torchguard.Guard";
    GuardType.tp_doc = "Guard(*examples)(*tensors): True where each tensor has its example's signature";
    GuardType.tp_basicsize = sizeof(Guard);
    GuardType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
    GuardType.tp_new = guard_new;
    GuardType.tp_dealloc = guard_dealloc;
    GuardType.tp_call = PyVectorcall_Call;
    GuardType.tp_vectorcall_offset = offsetof(Guard, vectorcall);
    WatchType.tp_name = "opcore._torchguard.Watch";
    WatchType.tp_doc = "Watch(holders, keys, tensors, versions, pointers)(): whether any watched tensor changed";
    WatchType.tp_basicsize = sizeof(Watch);
    WatchType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC;
    WatchType.tp_new = watch_new;
    WatchType.tp_dealloc = watch_dealloc;
    WatchType.tp_traverse = watch_traverse;
    WatchType.tp_clear = watch_clear;
    WatchType.tp_call = PyVectorcall_Call;
    WatchType.tp_vectorcall_offset = offsetof(Watch, vectorcall);
    module_def.m_name = "opcore._torchguard";
    module_def.m_doc = "A compiled check of torch tensors against examples' signatures (opcore._guards).";
    module_def.m_size = -1;
    PyObject *module = PyModule_Create(&module_def);
    if (module == nullptr)
        return nullptr;
    /* PyModule_AddType readies each type and adds it under the last part of its tp_name */
    if (PyModule_AddStringConstant(module, "TORCH_VERSION", TORCHGUARD_TORCH_VERSION) < 0 ||
        PyModule_AddStringConstant(module, "SOURCE", TORCHGUARD_SOURCE) < 0 ||
        PyModule_AddType(module, &GuardType) < 0 || PyModule_AddType(module, &WatchType) < 0) {
        Py_DECREF(module);
        return nullptr;
    }
    return module;
}
