"""The dispatch walk: caching, array kinds, hand-over, crashes, decomposition, errors, threads."""

from __future__ import annotations

import threading
import types
import warnings
from typing import Any

import numpy
import pytest

import opcore
from opcore import BackendSpec, DeviceType
from opcore._remember import inline_key
from opcore.dispatch import (
    _BOUND,
    _GUARDED,
    _INLINE,
    _KEYWORD,
    _LAST,
    _POSITIONAL,
    MAX_CACHED,
    _keyword_key,
    _positional_key,
    clear_caches,
)

torch = pytest.importorskip("torch", reason="array-kind conversions are tested with real torch tensors")

pytestmark = pytest.mark.usefixtures("only_reference", "run_path")

X = numpy.array([[-1.0, 2.0], [3.0, -4.0]], dtype=numpy.float32)
W = numpy.arange(6, dtype=numpy.float32).reshape(3, 2)
T, TW, TB, TB3 = torch.ones(2, 3), torch.ones(4, 3), torch.zeros(4), torch.zeros(3)  # torch x, w, b, a 3-bias


def make_plugin(name: str, kernels: dict, priority: int = 50, contracts: tuple = (), **spec):
    """An in-process plugin registering ``{op: (fn, options)}``."""

    def opcore_backend() -> BackendSpec:
        return BackendSpec(name=name, version="0", priority=priority, device_types=(DeviceType.CPU,), **spec)

    def opcore_register_contracts(registrar: opcore.Registrar) -> None:
        for contract in contracts:
            registrar.add_contract(contract)

    def opcore_register_kernels(registrar: opcore.Registrar) -> None:
        for op, (fn, options) in kernels.items():
            registrar.add_kernel(op, fn, **{"dtypes": ["float32"], **options})

    hooks = {
        f.__name__: opcore.hookimpl(f) for f in (opcore_backend, opcore_register_contracts, opcore_register_kernels)
    }
    return types.SimpleNamespace(__name__=name, **hooks)


def relu_counting(calls: list):
    def relu(x):
        calls.append(x.shape)
        return numpy.maximum(x, 0)

    return relu


# --- results and array kinds ---------------------------------------------------------------------


def test_numpy_in_numpy_out() -> None:
    y = opcore.run("linear", X, W)
    assert isinstance(y, numpy.ndarray)
    numpy.testing.assert_allclose(y, X @ W.T)


def test_torch_in_torch_out_through_a_numpy_kernel() -> None:
    x = torch.from_numpy(X)
    y = opcore.run("relu", x, backend="reference")
    assert isinstance(y, torch.Tensor)
    assert y.tolist() == [[0.0, 2.0], [3.0, 0.0]]


def test_bfloat16_travels_through_numpy_and_comes_back_bfloat16() -> None:
    x = torch.tensor([[1.5, -2.0]], dtype=torch.bfloat16)
    y = opcore.run("relu", x, backend="reference")
    assert y.dtype is torch.bfloat16
    assert y.tolist() == [[1.5, 0.0]]


def test_results_follow_the_first_tensor_argument() -> None:
    y = opcore.run("add", torch.from_numpy(X), X, backend="reference")
    assert isinstance(y, torch.Tensor)
    y = opcore.run("add", X, torch.from_numpy(X), backend="reference")
    assert isinstance(y, numpy.ndarray)


def test_python_numbers_where_the_schema_allows_them() -> None:
    numpy.testing.assert_allclose(opcore.run("mul", X, 2), X * 2)
    assert opcore.run("add", X.astype(numpy.int32), 2.5).dtype == numpy.float32


# --- the caches ----------------------------------------------------------------------------------


def test_second_call_takes_the_cached_path_without_the_meta_check() -> None:
    calls: list = []
    meta_calls: list = []

    def meta(x):
        meta_calls.append(x.shape)
        return opcore.TensorMeta(x.shape, x.dtype)

    contract = opcore.define_op("test.counted(Tensor x) -> Tensor", meta=meta)
    opcore.register_plugin(make_plugin("counting", {"test.counted": (relu_counting(calls), {})}, contracts=(contract,)))
    for _ in range(3):
        opcore.run("test.counted", X)
    assert len(calls) == 3
    assert len(meta_calls) == 1
    opcore.run("test.counted", X[:1])  # a new shape is a new signature: checked again
    assert len(meta_calls) == 2
    opcore.run("test.counted", x=X)  # keywords take the bound path, cached by signature too
    assert len(meta_calls) == 2


def test_cache_keys_cover_policy_and_pin(fixture_plugins) -> None:
    from opcore_fixture_good.plugin import CALLS

    CALLS.clear()
    opcore.run("relu", X)
    opcore.run("relu", X, backend="reference")
    with opcore.prefer("reference"):
        opcore.run("relu", X)
    opcore.run("relu", X)
    assert CALLS == ["relu", "relu"]


def test_caches_clear_when_plugins_change() -> None:
    opcore.run("relu", X)
    assert _POSITIONAL and _INLINE and _BOUND
    calls: list = []
    opcore.register_plugin(make_plugin("newer", {"relu": (relu_counting(calls), {})}))
    opcore.run("relu", X)
    assert calls == [(2, 2)]


def test_a_signatures_walk_is_remembered_until_the_runtime_changes() -> None:
    """kernel_walk.select remembers a signature's walk (a graph plan asks each node's kernels
    several times, a decoder's layers the same signatures): the checker and the meta function run
    once per signature; a Python number of another type is another signature (1 and 1.0 are equal
    keys in Python, not to a meta function); each caller gets its own Selection; a plugin registered
    afterwards is seen."""
    from opcore.call_plans import selection_for
    from opcore.runtime import runtime

    checked: list = []
    metas: list = []

    def meta(x, alpha):
        metas.append(type(alpha))
        return opcore.TensorMeta(x.shape, x.dtype)

    def checker(x, alpha):
        checked.append(x.shape)
        return True

    contract = opcore.define_op("test.scaled(Tensor x, Scalar alpha) -> Tensor", meta=meta)
    kernels = {"test.scaled": (lambda x, alpha: x * alpha, {"checker": checker})}
    opcore.register_plugin(make_plugin("walked", kernels, contracts=(contract,)))
    rt = runtime().ensure_loaded()
    first, _ = selection_for(rt, "test.scaled", (X, 2), {}, None)
    again, _ = selection_for(rt, "test.scaled", (X, 2), {}, None)
    assert (checked, metas) == ([(2, 2)], [int])
    assert again is not first and again.accepted == first.accepted and again.candidates == first.candidates
    again.candidates.clear()
    assert selection_for(rt, "test.scaled", (X, 2), {}, None)[0].candidates == first.candidates
    selection_for(rt, "test.scaled", (X, 2.0), {}, None)
    assert metas == [int, float] and len(checked) == 2
    opcore.register_plugin(make_plugin("later", {"test.scaled": (lambda x, alpha: x * alpha, {})}, priority=90))
    chosen, _ = selection_for(rt, "test.scaled", (X, 2), {}, None)
    assert chosen.accepted[0].backend == "later" and len(checked) == 3


def test_caches_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("opcore._dispatchcaches.MAX_CACHED", 4)  # the slow path bounds the caches with it
    for n in range(1, 12):
        opcore.run("relu", numpy.ones((n,), numpy.float32))
    assert len(_BOUND) <= 4 and len(_POSITIONAL) <= 4
    assert MAX_CACHED == 8192


def test_threads_get_the_same_results_as_a_serial_run() -> None:
    rng = numpy.random.default_rng(0)
    inputs = [rng.standard_normal((n % 5 + 1, 4)).astype(numpy.float32) for n in range(40)]
    w = rng.standard_normal((3, 4)).astype(numpy.float32)
    serial = [opcore.run("linear", x, w) for x in inputs]
    results: dict[int, list] = {}

    def work(index: int) -> None:
        opcore.reload_plugins() if index == 0 else None
        results[index] = [opcore.run("linear", x, w) for x in inputs for _ in range(3)][::3]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got in results.values():
        for a, b in zip(got, serial):
            numpy.testing.assert_array_equal(a, b)


# --- hand-over, crashes, decomposition -------------------------------------------------------------


def test_unsupported_hands_over_to_the_next(fixture_plugins) -> None:
    from opcore_fixture_good.plugin import CALLS

    CALLS.clear()
    for _ in range(2):  # also through the cached path
        numpy.testing.assert_allclose(opcore.run("tanh", X), numpy.tanh(X), rtol=1e-6)
    assert CALLS == ["tanh", "tanh"]


def test_a_crashing_kernel_falls_back_with_one_warning(fixture_plugins) -> None:
    with pytest.warns(opcore.FallbackWarning, match="fixture kernel crashed"):
        y = opcore.run("sigmoid", X)
    numpy.testing.assert_allclose(y, 1 / (1 + numpy.exp(-X)), rtol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opcore.run("sigmoid", X)  # the same (op, backend, error type): no second warning


def test_a_crash_raises_when_pinned_or_strict(fixture_plugins) -> None:
    with pytest.raises(RuntimeError, match="fixture kernel crashed") as info:
        opcore.run("sigmoid", X, backend="fixture_good")
    assert any("no fallback because of pinned to 'fixture_good'" in n for n in info.value.__notes__)
    with opcore.strict(), pytest.raises(RuntimeError, match="fixture kernel crashed"):
        opcore.run("sigmoid", X)


def test_unsupported_when_pinned_is_a_no_kernel_error(fixture_plugins) -> None:
    with pytest.raises(opcore.NoKernelError, match="handed over at run time: fixture declines at run time"):
        opcore.run("tanh", X, backend="fixture_good")


def test_a_checker_that_raises_declines_with_a_warning() -> None:
    def bad_checker(x):
        raise ZeroDivisionError("checker bug")

    opcore.register_plugin(make_plugin("badcheck", {"relu": (numpy.abs, {"checker": bad_checker})}))
    with pytest.warns(opcore.FallbackWarning, match="checker bug"):
        explanation = opcore.explain("relu", X)
    assert explanation.chosen == "reference"
    assert "its checker raised ZeroDivisionError: checker bug" in str(explanation)


def test_decomposition_runs_when_no_kernel_exists() -> None:
    opcore.configure(disable=[*opcore.runtime.runtime().settings.disable, "reference"])
    calls: list = []

    def linear(x, w, b):
        calls.append("linear")
        return x @ w.T

    opcore.register_plugin(make_plugin("parts", {"linear": (linear, {}), "relu": (relu_counting(calls), {})}))
    y = opcore.run("linear_relu", X, W)
    numpy.testing.assert_allclose(y, numpy.maximum(X @ W.T, 0))
    assert calls == ["linear", (2, 3)]
    assert opcore.explain("linear_relu", X, W).chosen == "decomposition"


def test_pinned_decomposition_keeps_its_parts_on_the_pinned_backend() -> None:
    calls: list = []

    def linear(x, w, b):
        calls.append("parts.linear")
        return x @ w.T

    opcore.register_plugin(
        make_plugin("parts", {"linear": (linear, {}), "relu": (relu_counting(calls), {})}, priority=-10)
    )
    opcore.run("linear_relu", X, W, backend="parts")
    assert calls == ["parts.linear", (2, 3)]  # reference outranks 'parts', yet the parts ran on 'parts'


def test_strict_mode_does_not_decompose() -> None:
    opcore.configure(disable=[*opcore.runtime.runtime().settings.disable, "reference"])
    opcore.register_plugin(make_plugin("parts", {"linear": (lambda x, w, b: x @ w.T, {})}))
    with opcore.strict(), pytest.raises(opcore.NoKernelError, match="decomposition: not tried in strict mode"):
        opcore.run("linear_relu", X, W)


# --- errors ----------------------------------------------------------------------------------------


def test_no_kernel_error_lists_every_candidate_and_the_fix() -> None:
    opcore.register_plugin(make_plugin("narrow", {"relu": (numpy.abs, {"checker": lambda x: "too narrow"})}))
    with pytest.raises(opcore.NoKernelError) as info:
        opcore.run("relu", X, backend="narrow")
    text = str(info.value)
    assert text.startswith("relu(): no kernel accepts float32 inputs on cpu")
    assert "narrow: declined: too narrow" in text
    assert "reference: passed over: the call is pinned to 'narrow'" in text
    assert "Fix:" in text and "opcore doctor" in text


def test_unknown_op_suggests_close_names() -> None:
    with pytest.raises(opcore.UnknownOpError, match="did you mean 'linear'"):
        opcore.run("linera", X, W)


def test_unknown_backend_is_a_plugin_error() -> None:
    with pytest.raises(opcore.PluginError, match="names backend 'cpuu', which is not installed"):
        opcore.run("relu", X, backend="cpuu")


def test_failed_backend_named_explicitly_is_an_error(fixture_plugins) -> None:
    with pytest.raises(opcore.PluginError, match="which is failed: import failed: ImportError"):
        opcore.run("relu", X, backend="fixture_importerror")
    with pytest.raises(opcore.PluginError, match="which is unavailable: no widget attached"):
        opcore.run("relu", X, backend="fixture_unavailable")


def test_binding_errors_name_the_op() -> None:
    with pytest.raises(opcore.ArgumentError, match=r"^relu\(\): argument 'x' expected a tensor"):
        opcore.run("relu", [1.0, 2.0])
    with pytest.raises(opcore.ArgumentError, match=r"linear\(\): missing required argument 'w'"):
        opcore.run("linear", X)
    with pytest.raises(opcore.ArgumentError, match="unexpected keyword argument 'bias'"):
        opcore.run("linear", X, W, bias=None)
    with pytest.raises(opcore.ArgumentError, match="takes 3 positional arguments but 4 were given"):
        opcore.run("linear", X, W, None, None)


def test_mixed_devices_are_a_device_error() -> None:
    on_meta = torch.empty((2, 2), device="meta")
    with pytest.raises(opcore.DeviceError, match=r"add\(\): argument 'other' expected the device of 'x' \(cpu\)"):
        opcore.run("add", torch.from_numpy(X), on_meta)


def test_a_broken_meta_function_is_a_plugin_error() -> None:
    contract = opcore.define_op("test.brokenmeta(Tensor x) -> Tensor", meta=lambda x: x.no_such_field)
    opcore.register_plugin(make_plugin("brokenmeta", {"test.brokenmeta": (numpy.abs, {})}, contracts=(contract,)))
    with pytest.raises(opcore.PluginError, match="meta function .* raised AttributeError"):
        opcore.run("test.brokenmeta", X)


def test_an_opcore_error_from_a_kernel_propagates_with_the_op_name() -> None:
    def picky(x):
        raise opcore.ShapeError(arg="x", expected="sorted data", found="unsorted data")

    opcore.register_plugin(make_plugin("picky", {"relu": (picky, {})}))
    with pytest.raises(opcore.ShapeError, match=r"^relu\(\): argument 'x' expected sorted data"):
        opcore.run("relu", X)


def test_fallback_kernels_get_their_arrays_converted_too() -> None:
    # the first kernel consumes numpy and hands over; the torch kernel behind it must still receive torch
    def declines(x):
        raise opcore.Unsupported("not today")

    def torch_relu(x):
        assert isinstance(x, torch.Tensor), type(x)
        return torch.relu(x)

    opcore.register_plugin(make_plugin("first", {"relu": (declines, {})}, priority=60))
    opcore.register_plugin(make_plugin("second", {"relu": (torch_relu, {"array_kind": "torch"})}, priority=55))
    for _ in range(2):
        y = opcore.run("relu", X)
        assert isinstance(y, numpy.ndarray) and y.tolist() == [[0.0, 2.0], [3.0, 0.0]]


def test_negative_strides_reach_torch_kernels() -> None:
    seen = []

    def relu(x: Any) -> Any:  # torch comes from importorskip: no static type
        seen.append(1)
        return torch.relu(x)

    opcore.register_plugin(make_plugin("torchy", {"relu": (relu, {"array_kind": "torch"})}))
    y = opcore.run("relu", X[::-1])
    assert seen and y.tolist() == [[3.0, 0.0], [0.0, 2.0]]


def test_pinned_decomposition_missing_a_part_names_the_whole_op() -> None:
    opcore.register_plugin(make_plugin("halfway", {"relu": (lambda x: numpy.maximum(x, 0), {})}))
    explanation = opcore.explain("linear_relu", X, W, backend="halfway")
    assert explanation.chosen == "decomposition" and "each pinned to 'halfway'" in str(explanation)
    with pytest.raises(opcore.NoKernelError, match=r"^linear_relu\(\): no kernel of 'halfway' accepts it") as info:
        opcore.run("linear_relu", X, W, backend="halfway")
    assert "linear(): no kernel accepts float32" in str(info.value)


# --- the inline keys of run(): numpy arrays, torch tensors, plain values and keywords ---------------


def counting_kernels(calls: list) -> dict:
    """A torch-kind plugin's kernels that record which kernel ran (and the strides it saw)."""

    def relu(x):
        calls.append(("relu", x.stride()))
        return torch.relu(x)

    def softmax(x, dim, dtype):
        calls.append(("softmax", dim))
        return torch.softmax(x, dim, dtype=dtype)

    def linear(x, w, b):
        calls.append(("linear", b is None))
        return torch.nn.functional.linear(x, w, b)

    torch_kind = {"array_kind": "torch"}
    return {"relu": (relu, torch_kind), "softmax": (softmax, torch_kind), "linear": (linear, torch_kind)}


@pytest.mark.parametrize(
    ("op", "args", "kwargs"),
    [
        ("relu", (torch.ones(2, 3),), {}),
        ("softmax", (torch.ones(2, 3), -1), {}),
        ("gelu", (torch.ones(2, 3),), {"approximate": "tanh"}),  # keyword-only: a constant at the key's end
        ("linear", (torch.ones(2, 3), torch.ones(4, 3)), {}),
        ("linear", (torch.ones(2, 3), torch.ones(4, 3), None), {}),
        ("linear", (torch.ones(2, 3), torch.ones(4, 3), torch.ones(4)), {}),
        ("relu", (X,), {}),
        ("linear", (X, W), {}),
    ],
)
def test_run_finds_its_inline_key_in_the_cache(op, args, kwargs) -> None:
    calls: list = []
    opcore.register_plugin(make_plugin("torchy", counting_kernels(calls), priority=500))
    first = opcore.run(op, *args, **kwargs)
    key = inline_key(op, None, None, args, kwargs)
    assert key is not None and key in _INLINE  # what the slow path stored is what run() looks up
    _GUARDED.clear()  # the Python key's path (the guarded slots before it: test_guarded_torch_signatures)
    _LAST.clear()
    _INLINE[key] = lambda *raw: "from the cache"
    assert opcore.run(op, *args, **kwargs) == "from the cache"
    assert first is not None


def test_tensors_with_other_strides_or_devices_are_other_signatures() -> None:
    calls: list = []
    opcore.register_plugin(make_plugin("torchy", counting_kernels(calls), priority=500))
    x = torch.ones(4, 6)
    opcore.run("relu", x)
    opcore.run("relu", x.t())  # same dtype, a transposed view: other strides, so its own plan
    opcore.run("relu", torch.ones(6, 4))
    assert calls == [("relu", (6, 1)), ("relu", (1, 6)), ("relu", (4, 1))]
    assert len([k for k in _INLINE if k[0] == "relu"]) == 3
    meta = torch.ones(4, 6, device="meta")
    assert inline_key("relu", None, None, (meta,), {}) != inline_key("relu", None, None, (x,), {})


@pytest.mark.parametrize(
    ("op", "args", "kwargs", "positional"),
    [
        ("softmax", (T,), {"dim": -1}, (T, -1)),
        ("linear", (T, TW), {"b": TB}, (T, TW, TB)),
        ("linear", (), {"b": TB, "x": T, "w": TW}, (T, TW, TB)),  # any order
        ("linear", (T,), {"w": TW, "b": None}, (T, TW, None)),
        ("layer_norm", (T, (3,)), {"bias": TB3, "weight": TB3}, (T, (3,), TB3, TB3)),
    ],
)
def test_keyword_calls_share_the_positional_calls_key_and_entry(op, args, kwargs, positional) -> None:
    calls: list = []
    opcore.register_plugin(make_plugin("torchy", counting_kernels(calls), priority=500))
    first = opcore.run(op, *args, **kwargs)
    key = inline_key(op, None, None, positional, {})
    cache: dict[Any, Any] = _INLINE
    if key is None:  # layer_norm's list argument: the general positional key
        key = _positional_key(op, None, None, positional)
        cache = _POSITIONAL
    assert key in cache and not _KEYWORD  # stored under the positional call's key, no keyword entry
    torch.testing.assert_close(opcore.run(op, *positional), first)
    _GUARDED.clear()  # the Python key's path
    _LAST.clear()
    cache[key] = lambda *raw: ("from the cache", raw)
    assert opcore.run(op, *args, **kwargs) == ("from the cache", positional)


_Marked = type("_Marked", (torch.Tensor,), {})  # a subclass: never served by a plain tensor's guarded entry


def substitute(key: tuple[Any, ...]) -> None:
    """The _GUARDED slot of ``key`` (and _LAST's, where it holds it) with an entry answering "guarded"."""
    slot = _GUARDED[key]
    _GUARDED[key] = (*slot[:4], lambda *raw: "guarded", slot[5])
    row = _LAST.get(key[0])
    if row is not None and row[key[3]] is slot:
        row[key[3]] = _GUARDED[key]


def test_guarded_torch_signatures_serve_exactly_their_signature() -> None:
    calls: list = []
    opcore.register_plugin(make_plugin("torchy", counting_kernels(calls), priority=500))
    x, w, b = torch.ones(2, 3), torch.ones(4, 3), torch.zeros(4)
    opcore.run("linear", x, w, b)
    opcore.run("softmax", x, -1)
    slots = {key[0]: slot for key, slot in _GUARDED.items()}
    if not slots:
        pytest.skip(f"torch {torch.__version__} has no torch._C._dynamo.guards.TensorGuards")
    assert set(slots) == {"linear", "softmax"}
    substitute(("linear", None, None, 3, x.shape))
    substitute(("softmax", None, None, 2, x.shape))
    assert opcore.run("linear", torch.zeros(2, 3), torch.ones(4, 3), torch.ones(4)) == "guarded"  # other data
    assert opcore.run("linear", x, w, b=b) == "guarded"
    assert opcore.run("softmax", x, -1) == "guarded"
    others = [
        (x, w, b.double()),  # another dtype
        (x, w.t().contiguous().t(), b),  # other strides (a column-major w)
        (x, w, torch.ones(8)[::2]),  # other strides, same shape
        (x, w, b.to("meta")),  # another device
        (x, w, torch.ones(4).requires_grad_()),  # autograd (not in the Python key: a miss costs nothing)
        (x, w, torch.ones(1).expand(4)),  # an expanded bias, strides (0,)
        (x, w, torch.ones(4).as_subclass(_Marked)),  # a subclass
        (x.as_subclass(_Marked), w, b),
        (x, w, torch.ones(5)),  # another shape
        (x, w),  # fewer arguments
        (x, w, None),
    ]
    opcore.run("linear", x, w)  # the same op and first shape with two arguments: a slot of its own
    assert opcore.run("linear", x, w, b) == "guarded"
    for args in others:
        try:
            result = opcore.run("linear", *args)
        except opcore.OpcoreError:
            continue  # the meta device with cpu tensors: refused, as by the Python key
        assert not isinstance(result, str), args
    for dim in (0, 1):  # another plain value
        torch.testing.assert_close(opcore.run("softmax", x, dim), torch.softmax(x, dim))
    sparse = torch.eye(3).to_sparse()
    opcore.run("relu", torch.ones(1).expand(3, 3))  # same strides (0, 0) and shape as the sparse tensor
    for key in list(_GUARDED):
        if key[0] == "relu":
            substitute(key)
    try:  # the layout tells them apart: the sparse tensor is not served the dense tensor's entry
        assert opcore.run("relu", sparse) != "guarded"
    except opcore.OpcoreError:
        pass  # no kernel takes a sparse tensor: refused, as by the Python key


def test_guards_keep_no_tensor_alive_and_the_python_key_serves_without_them(monkeypatch) -> None:
    import weakref

    from opcore import _guards

    x = torch.ones(2, 3)
    ref = weakref.ref(x)
    opcore.run("relu", x)
    del x
    assert ref() is None
    clear_caches()
    monkeypatch.setattr(_guards, "_TensorGuards", False)  # a torch without its guard
    monkeypatch.setattr(_guards, "_Guard", False)  # and opcore without its own
    x = torch.ones(2, 3)
    for _ in range(3):
        torch.testing.assert_close(opcore.run("softmax", x, -1), torch.softmax(x, -1))
    assert not _GUARDED
    assert inline_key("softmax", None, None, (x, -1), {}) in _INLINE


def test_keywords_that_are_not_the_next_positions_take_the_general_path() -> None:
    calls: list = []
    opcore.register_plugin(make_plugin("torchy", counting_kernels(calls), priority=500))
    x, w, b = torch.ones(2, 3), torch.ones(3), torch.zeros(3)
    want = torch.nn.functional.layer_norm(x, (3,), None, b)
    for bias in (b, b + 1, b + 2):  # weight left out: a gap, so bound as keywords
        want = torch.nn.functional.layer_norm(x, (3,), None, bias)
        torch.testing.assert_close(opcore.run("layer_norm", x, (3,), bias=bias), want)
    key = _keyword_key("layer_norm", None, None, (x, (3,)), {"bias": b})
    assert key is not None and key in _KEYWORD  # cached by its signature: the tensors themselves are not kept
    assert all(v is not b for v in key)
    _KEYWORD[key] = lambda args, kwargs: "from the cache"
    assert opcore.run("layer_norm", x, (3,), bias=torch.ones(3)) == "from the cache"
    assert opcore.run("layer_norm", x, (3,), w, eps=1e-5) is not None  # eps after a gap: keyword too
    with pytest.raises(opcore.ArgumentError, match="multiple values for argument 'w'"):
        opcore.run("linear", x, w, w=w)  # a keyword repeating a positional one keeps bind()'s error
    with pytest.raises(opcore.ArgumentError, match="unexpected keyword argument 'bias'"):
        opcore.run("linear", x, w, bias=b)


def test_a_second_tensor_on_another_device_is_refused_as_on_the_slow_path() -> None:
    calls: list = []
    opcore.register_plugin(make_plugin("torchy", counting_kernels(calls), priority=500))
    x, w = torch.ones(2, 3), torch.ones(4, 3)
    opcore.run("linear", x, w)  # cached: the inline key holds x's device only
    for _ in range(2):
        with pytest.raises(opcore.DeviceError, match="linear"):
            opcore.run("linear", x, torch.ones(4, 3, device="meta"))


def test_layouts_are_part_of_the_key() -> None:
    sparse = torch.eye(3).to_sparse()  # strides (0, 0), as an expanded dense tensor has
    expanded = torch.ones(1).expand(3, 3)
    assert sparse.stride() == expanded.stride()
    keys = {inline_key("relu", None, None, (t,), {}) for t in (sparse, expanded)}
    assert len(keys) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "Sparse CSR tensor support is in beta state"
        csr = torch.eye(3).to_sparse_csr()
    assert inline_key("relu", None, None, (csr,), {}) is None  # no strides at all: the general path


@pytest.mark.parametrize("backend", [["reference"], 3, object()])
def test_a_backend_that_is_no_name_is_an_argument_error(backend) -> None:
    """Before any cache key holds it (an unhashable one raised a bare TypeError from a dict lookup)."""
    for x in (X, torch.from_numpy(X)):
        opcore.run("relu", x)  # cached: the fast paths see the bad value first
        with pytest.raises(opcore.ArgumentError, match="backend") as caught:
            opcore.run("relu", x, backend=backend)
        assert caught.value.op == "relu" and "backend=" in str(caught.value)
