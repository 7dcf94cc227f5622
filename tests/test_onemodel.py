"""The shared machinery of one-model-per-signature backends, over a fake runtime whose "models"
are Python functions of their feeds evaluated with numpy: argument roles, the keys the kernels
build, the model cache and its size, prepare (free positions, baked constants and scalars,
checks, the through-cache path), the hooks a backend supplies, and the plugin scaffolding.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy
import pytest

import opcore
from opcore.errors import ArgumentError, DTypeError, Unsupported
from opcore.onemodel.builders import cat_through, check_embedding_indices, result_dtype, transpose_perm
from opcore.onemodel.cache import ModelCache
from opcore.onemodel.op import ATTRIBUTE, OPERAND, TENSOR, TENSORS, OneModelOp, Scalar, argument_roles, first_line
from opcore.onemodel.plugin import (
    dtype_checker,
    kernel_layout,
    probe,
    register_kernels,
    runtime_available,
    tensor_metas,
    version_tuple,
)
from opcore.opset import BUILTIN_CONTRACTS, BUILTIN_DTYPES
from opcore.types import DType, TensorMeta

Feeds = list[Any]

# the built-in ops both graph runtimes were written for
FIRST_OPS = set(
    "add sub mul div relu gelu silu sigmoid tanh exp linear matmul bmm linear_relu linear_silu linear_gelu "
    "gated_mlp softmax log_softmax layer_norm rms_norm embedding conv2d scaled_dot_product_attention "
    "transpose permute reshape cat".split()
)


class FakeGraph:
    """Values are functions of the feeds (tensor inputs and fed scalars, in feed order)."""

    def __init__(self, op: str) -> None:
        self.op = op
        self.inputs: list[tuple[numpy.dtype, int]] = []
        self.weights: list[numpy.ndarray] = []
        self.scalar_feeds: list[tuple[int, numpy.dtype]] = []
        self.finished = False

    def input(self, dtype: numpy.dtype, rank: int, dims: Sequence[int | None] | None = None) -> Any:
        index = len(self.inputs)
        self.inputs.append((numpy.dtype(dtype), rank))
        return lambda feeds: feeds[index]

    def weight(self, array: numpy.ndarray) -> Any:
        self.weights.append(array)
        return lambda feeds: array

    def scalar(self, scalar: Scalar) -> Any:
        dtype = numpy.dtype(scalar.kind)
        if scalar.value is not None:
            value = numpy.asarray(scalar.value, dtype=dtype)
            return lambda feeds: value
        fed = self.input(dtype, 0)
        self.scalar_feeds.append((len(self.inputs) - 1, dtype))
        return fed


class FakeModel:
    def __init__(self, graph: FakeGraph, output: Any) -> None:
        self.graph = graph
        self.output = output
        self.scalars = list(graph.scalar_feeds)
        scalar_at = {position for position, _ in self.scalars}
        self._tensor_at = [i for i in range(len(graph.inputs)) if i not in scalar_at]

    def __call__(self, arrays: list[Any], scalars: list[Any] | None = None) -> Any:
        assert len(arrays) == len(self._tensor_at), "every tensor input is fed, in feed order"
        feeds: Feeds = [None] * len(self.graph.inputs)
        for position, array in zip(self._tensor_at, arrays):
            feeds[position] = array
        for (position, dtype), value in zip(self.scalars, scalars or ()):
            feeds[position] = numpy.asarray(value, dtype=dtype)
        return numpy.asarray(self.output(feeds))

    def single(self) -> Any:
        def single(x: Any) -> Any:
            return self([x])

        return single


class FakeOp(OneModelOp):
    cache = ModelCache("fake models", "OPCORE_FAKE_CACHE_SIZE", 16)
    language = "FakeIR"
    model_attribute = "fake"
    compiled: ClassVar[list[FakeModel]] = []  # every model compile() built (reset per test)

    def new_graph(self) -> FakeGraph:
        return FakeGraph(self.op)

    def output(self, graph: FakeGraph, value: Any) -> Any:
        graph.finished = True
        return value

    def compile(self, graph: FakeGraph, output: Any) -> FakeModel:
        model = FakeModel(graph, output)
        FakeOp.compiled.append(model)
        return model


def build_relu(g: FakeGraph, x: Any) -> Any:
    return lambda f: numpy.maximum(x(f), 0)


def build_linear(g: FakeGraph, x: Any, w: Any, b: Any) -> Any:
    if b is None:
        return lambda f: x(f) @ w(f).T
    return lambda f: x(f) @ w(f).T + b(f)


def build_add(g: FakeGraph, x: Any, other: Any, alpha: Any) -> Any:
    if isinstance(other, Scalar):
        other = g.scalar(other)
    return lambda f: x(f) + alpha * other(f)


def build_cat(g: FakeGraph, tensors: tuple[Any, ...], dim: int, dtype: numpy.dtype) -> Any:
    return lambda f: numpy.concatenate([t(f).astype(dtype) for t in tensors], axis=dim)


def no_negative_x(x: numpy.ndarray, *rest: Any) -> None:
    if numpy.any(x < 0):
        raise ArgumentError(arg="x", expected="no negative value", found="a negative value")


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch: pytest.MonkeyPatch) -> ModelCache:
    cache = ModelCache("fake models", "OPCORE_FAKE_CACHE_SIZE", 16)
    monkeypatch.setattr(FakeOp, "cache", cache)
    monkeypatch.setattr(FakeOp, "compiled", [])
    return cache


def rand(*shape: int, dtype: str = "float32") -> numpy.ndarray:
    return numpy.random.default_rng(len(shape) + sum(shape)).uniform(-2, 2, size=shape).astype(dtype)


# --- roles and keys ---------------------------------------------------------------------------


def test_argument_roles_come_from_the_contract_schema():
    assert argument_roles("add") == (TENSOR, OPERAND, ATTRIBUTE)
    assert argument_roles("cat") == (TENSORS, ATTRIBUTE)
    assert argument_roles("linear") == (TENSOR, TENSOR, TENSOR)
    assert argument_roles("layer_norm") == (TENSOR, ATTRIBUTE, TENSOR, TENSOR, ATTRIBUTE)
    for contract in BUILTIN_CONTRACTS:
        assert len(argument_roles(contract.name)) == len(contract.schema.names)


def test_an_all_tensor_kernel_keys_by_dtype_and_rank(fresh_cache: ModelCache):
    relu = FakeOp.kernel_of("relu", build_relu)
    assert relu.__name__ == "relu" and isinstance(relu.spec, FakeOp) and relu.prepare == relu.spec.prepare
    for batch in (1, 5, 0):
        x = rand(batch, 3)
        numpy.testing.assert_array_equal(relu(x), numpy.maximum(x, 0))
    assert len(FakeOp.compiled) == 1 and ("relu", numpy.dtype("float32"), 2) in fresh_cache.lru()
    relu(rand(2, 3, 4))  # another rank: another model
    relu(rand(2, 3, dtype="float64"))  # another dtype: another model
    assert len(FakeOp.compiled) == 3
    assert FakeOp.compiled[0].graph.finished  # the backend's output hook saw the built value


def test_an_optional_third_tensor_is_keyed_as_absent(fresh_cache: ModelCache):
    linear = FakeOp("linear", build_linear).kernel()
    x, w, b = rand(4, 3), rand(5, 3), rand(5)
    numpy.testing.assert_allclose(linear(x, w, None), x @ w.T, rtol=1e-6)
    numpy.testing.assert_allclose(linear(x, w, b), x @ w.T + b, rtol=1e-6)
    f32 = numpy.dtype("float32")
    assert ("linear", f32, 2, f32, 2) in fresh_cache.lru()
    assert ("linear", f32, 2, f32, 2, f32, 1) in fresh_cache.lru()


def test_python_numbers_are_fed_and_attributes_are_keyed(fresh_cache: ModelCache):
    add = FakeOp("add", build_add).kernel()
    x = rand(2, 3)
    for value in (0.5, 2.0, -3.0):
        numpy.testing.assert_allclose(add(x, value, 1), x + value, rtol=1e-6)
    assert len(FakeOp.compiled) == 1
    assert ("add", x.dtype, 2, float, 1) in fresh_cache.lru()
    numpy.testing.assert_allclose(add(x, 3, 2), x + 6, rtol=1e-6)  # an int: another model
    numpy.testing.assert_allclose(add(x, 0.5, 2), x + 1, rtol=1e-6)  # another alpha: another model
    y = rand(2, 3)
    numpy.testing.assert_allclose(add(x, y, 1), x + y, rtol=1e-6)
    assert len(FakeOp.compiled) == 4


def test_a_tensor_list_is_keyed_by_each_dtype_and_rank(fresh_cache: ModelCache):
    cat = FakeOp("cat", build_cat, names=("tensors", "dim", "dtype"), roles=(TENSORS, ATTRIBUTE, ATTRIBUTE)).kernel()
    a, b = rand(2, 3), rand(1, 3, dtype="float64")
    f64 = numpy.dtype("float64")
    numpy.testing.assert_array_equal(cat((a, b), 0, f64), numpy.concatenate([a, b]).astype(f64))
    key = ("cat", ((a.dtype, 2), (b.dtype, 2)), 0, f64)
    assert key in fresh_cache.lru()


def test_a_check_sees_every_call_before_the_model_runs():
    relu = FakeOp("relu", build_relu, check=no_negative_x).kernel()
    numpy.testing.assert_array_equal(relu(numpy.ones(3, "float32")), numpy.ones(3, "float32"))
    with pytest.raises(ArgumentError, match="no negative value"):
        relu(-numpy.ones(3, "float32"))


def test_a_small_cache_evicts(fresh_cache: ModelCache):
    fresh_cache.resize(2)
    relu = FakeOp("relu", build_relu).kernel()
    for rank in (1, 2, 3, 1):
        relu(rand(*(2,) * rank))
    stats = fresh_cache.stats()
    assert stats.size == 2 and stats.evictions == 2 and stats.misses == 4


# --- prepare ----------------------------------------------------------------------------------


def test_prepare_without_constants_shares_the_cached_model(fresh_cache: ModelCache):
    spec = FakeOp("linear", build_linear)
    x, w, b = rand(4, 3), rand(5, 3), rand(5)
    prepared = spec.prepare((x, w, b), frozenset())
    numpy.testing.assert_allclose(prepared(x, w, b), x @ w.T + b, rtol=1e-6)
    numpy.testing.assert_allclose(prepared(rand(7, 3), w, b), rand(7, 3) @ w.T + b, rtol=1e-6)
    assert len(FakeOp.compiled) == 1 and len(fresh_cache.lru()) == 1
    no_bias = spec.prepare((x, w, None), frozenset())  # an absent tensor is no free position
    numpy.testing.assert_allclose(no_bias(x, w), x @ w.T, rtol=1e-6)


def test_prepare_bakes_constants_in_for_this_call_only(fresh_cache: ModelCache):
    spec = FakeOp("linear", build_linear)
    x, w, b = rand(4, 3), rand(5, 3), rand(5)
    # Any: the model sits on the attribute the backend names (FakeOp.model_attribute), unknown to the type
    prepared: Any = spec.prepare((x, w, b), frozenset({"w", "b"}))
    model = prepared.fake
    assert model.graph.weights[0] is w and model.graph.weights[1] is b and len(model.graph.inputs) == 1
    assert prepared.__name__ == "single"  # one free tensor: the model's leanest call
    for batch in (1, 4, 9):
        xs = rand(batch, 3)
        numpy.testing.assert_allclose(prepared(xs), xs @ w.T + b, rtol=1e-6)
    assert len(fresh_cache.lru()) == 0  # not cached: the weights belong to the caller
    partly: Any = spec.prepare((x, w, b), frozenset({"w"}))
    numpy.testing.assert_allclose(partly(x, 2 * b), x @ w.T + 2 * b, rtol=1e-6)
    assert partly.fake.graph.weights == [w]


def test_prepare_bakes_python_numbers_in():
    spec = FakeOp("add", build_add)
    x = rand(2, 3)
    prepared = spec.prepare((x, 2.5, 2), frozenset({"other"}))
    assert prepared.fake.scalars == [] and prepared.__name__ == "single"
    numpy.testing.assert_allclose(prepared(x), x + 5.0, rtol=1e-6)
    with_tensor = spec.prepare((x, rand(2, 3), 1), frozenset({"other"}))
    numpy.testing.assert_allclose(with_tensor(x), x + rand(2, 3), rtol=1e-6)


def test_a_prepared_op_with_a_check_or_a_tensor_list_checks_and_flattens():
    checked = FakeOp("linear", build_linear, check=no_negative_x).prepare(
        (rand(2, 3), rand(4, 3), None), frozenset({"w"})
    )
    x = numpy.abs(rand(2, 3))
    numpy.testing.assert_allclose(checked(x), x @ checked.fake.graph.weights[0].T, rtol=1e-6)
    with pytest.raises(ArgumentError, match="no negative value"):
        checked(-x)
    cat = FakeOp("cat", build_cat, names=("tensors", "dim", "dtype"), roles=(TENSORS, ATTRIBUTE, ATTRIBUTE))
    a, b = rand(2, 3), rand(1, 3)
    joined = cat.prepare(((a, b), 0, a.dtype), frozenset({"dim"}))  # no tensor is constant
    numpy.testing.assert_array_equal(joined((b, a)), numpy.concatenate([b, a]))


# --- errors -----------------------------------------------------------------------------------


def test_a_build_error_becomes_unsupported_naming_the_language():
    def broken(g: FakeGraph, x: Any) -> Any:
        raise KeyError("no such node")

    with pytest.raises(Unsupported, match=r"could not express relu in FakeIR: KeyError: 'no such node'"):
        FakeOp("relu", broken).kernel()(rand(2))


def test_an_opcore_error_from_a_build_passes_through():
    def refusing(g: FakeGraph, x: Any) -> Any:
        raise DTypeError(arg="x", expected="float32", found="float64")

    with pytest.raises(DTypeError):
        FakeOp("relu", refusing).kernel()(rand(2))


def test_first_line_of_an_error():
    assert first_line(RuntimeError("bad input\n  at node 3")) == "bad input"
    assert first_line(RuntimeError("")) == "RuntimeError"
    assert len(first_line(RuntimeError("x" * 1000))) == 300


# --- the model cache --------------------------------------------------------------------------


def test_the_cache_size_comes_from_the_environment_on_first_use(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPCORE_FAKE_CACHE_SIZE", "3")
    cache = ModelCache("fake models", "OPCORE_FAKE_CACHE_SIZE", 16)
    assert cache.size() == 3
    assert cache.describe() == "0/3 entries (hits 0, misses 0, evictions 0) [OPCORE_FAKE_CACHE_SIZE=3]"
    cache.resize(5)
    assert cache.size() == 5 and cache.stats().capacity == 5 and cache.stats().name == "fake models"


def test_the_default_size_and_how_to_change_it_are_described(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("OPCORE_FAKE_CACHE_SIZE", raising=False)
    cache = ModelCache("fake models", "OPCORE_FAKE_CACHE_SIZE", 16)
    assert cache.size() == 16
    assert cache.describe().endswith("[default 16; set OPCORE_FAKE_CACHE_SIZE to change]")


def test_a_bad_cache_size_names_the_variable(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OPCORE_FAKE_CACHE_SIZE", "lots")
    with pytest.raises(ArgumentError, match="OPCORE_FAKE_CACHE_SIZE"):
        ModelCache("fake models", "OPCORE_FAKE_CACHE_SIZE", 16).size()
    with pytest.raises(ArgumentError, match="capacity"):
        ModelCache("fake models", "OPCORE_UNSET_FAKE_CACHE_SIZE", 16).resize(0)


# --- builder helpers --------------------------------------------------------------------------


def test_embedding_indices_out_of_range_are_refused():
    weight = numpy.zeros((5, 3))
    check_embedding_indices(numpy.array([0, 4]), weight, None)
    check_embedding_indices(numpy.array([], numpy.int64), weight, None)
    for bad, found in ((numpy.array([0, 5]), "index 5"), (numpy.array([-1, 2]), "index -1")):
        with pytest.raises(ArgumentError, match=r"indices in \[0, 4\]") as raised:
            check_embedding_indices(bad, weight, None)
        assert found in str(raised.value)


def test_cat_promotes_over_all_tensors_and_leaves_1d_empty_ones_out():
    calls = []

    def kernel(tensors: tuple[numpy.ndarray, ...], dim: int, dtype: numpy.dtype) -> numpy.ndarray:
        calls.append(tuple(t.shape for t in tensors))
        return numpy.concatenate([t.astype(dtype) for t in tensors], axis=dim)

    cat = cat_through(kernel)
    out = cat((numpy.ones((2, 3), "float32"), numpy.zeros((0,), "float64"), numpy.ones((1, 3), "int32")), 0)
    assert out.dtype == numpy.float64 and out.shape == (3, 3) and calls == [((2, 3), (1, 3))]
    empty = cat((numpy.zeros((0,), "int8"), numpy.zeros((0,), "int16")), 0)
    assert empty.dtype == numpy.int16 and empty.shape == (0,) and len(calls) == 1


def test_tensor_metas_walks_tensor_lists_and_skips_one_position():
    x, y, z = (TensorMeta((n,), DType.FLOAT32) for n in (1, 2, 3))
    args = (x, 2.0, (y, z), None, "tanh")
    assert list(tensor_metas(args)) == [x, y, z]
    assert list(tensor_metas(args, skip=0)) == [y, z]
    assert list(tensor_metas(args, skip=2)) == [x]


def test_dtype_checker_declines_by_dtype_first_then_asks_the_op():
    def no_int8(dtype: DType) -> str | None:
        return "no int8" if dtype is DType.INT8 else None

    def small(x: TensorMeta, *rest: Any) -> bool | str:
        return True if x.shape[0] < 4 else "too long"

    check = dtype_checker("relu", no_int8, small)
    assert check.__name__ == check.__qualname__ == "check_relu"
    assert check(TensorMeta((2,), DType.FLOAT32)) is True
    assert check(TensorMeta((8,), DType.FLOAT32)) == "too long"
    assert check(TensorMeta((8,), DType.INT8)) == "no int8"  # the dtype's reason comes first
    indices = dtype_checker("embedding", no_int8, skip=0)
    assert indices(TensorMeta((8,), DType.INT8), TensorMeta((4, 2), DType.FLOAT32)) is True
    assert indices(TensorMeta((8,), DType.INT8), TensorMeta((4, 2), DType.INT8)) == "no int8"


def test_result_dtype_follows_torch_for_graph_values():
    def dtype_and_rank(value: tuple[str, int]) -> tuple[numpy.dtype, int]:
        return numpy.dtype(value[0]), value[1]

    assert result_dtype(("int8", 2), Scalar(float), dtype_and_rank) == numpy.float32
    assert result_dtype(("int8", 2), Scalar(int), dtype_and_rank) == numpy.int8
    assert result_dtype(("int8", 2), ("int64", 0), dtype_and_rank) == numpy.int8  # a 0-D tensor counts less
    assert result_dtype(("int32", 2), ("float16", 2), dtype_and_rank) == numpy.float16
    assert result_dtype(("bool", 1), Scalar(bool), dtype_and_rank) == numpy.bool_


def test_transpose_perm_swaps_two_dims_counted_from_either_end():
    assert transpose_perm(3, 0, 2) == [2, 1, 0]
    assert transpose_perm(4, -1, 1) == [0, 3, 2, 1]
    assert transpose_perm(2, 1, 1) == [0, 1]
    assert transpose_perm(0, 0, -1) == []


# --- plugin scaffolding -----------------------------------------------------------------------


class RecordingRegistrar:
    def __init__(self) -> None:
        self.kernels: list[tuple[str, str, dict[str, Any]]] = []

    def add_kernel(self, op: str, fn: str, **options: Any) -> None:
        self.kernels.append((op, fn, options))


def test_register_kernels_takes_the_ops_each_family_module_declares(tmp_path, monkeypatch):
    """A graph backend's op set is what its family modules list in OPS (read, not imported)."""
    package = tmp_path / "vendorkernels"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "linear.py").write_text(
        'import no_such_runtime\n__all__ = ["linear", "helper"]\nOPS = ("linear",)\nlinear = helper = None\n'
    )
    (package / "elementwise.py").write_text('OPS = ("relu", "exp")\n\ndef relu(x): ...\n\ndef exp(x): ...\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    registrar = RecordingRegistrar()

    def checker_for(op: str) -> Any:
        return lambda *args: f"{op} declined"

    layout = register_kernels(registrar, "vendorkernels", checker_for)
    assert (
        layout
        == kernel_layout("vendorkernels")
        == {
            "relu": ("elementwise", False),
            "exp": ("elementwise", False),
            "linear": ("linear", True),
        }
    )
    by_op = {op: (fn, options) for op, fn, options in registrar.kernels}
    assert set(by_op) == {"relu", "exp", "linear"}  # "helper" is no op; the module was never imported
    fn, options = by_op["linear"]
    assert fn == "vendorkernels.linear:linear" and options["prepare"] == "vendorkernels.linear:linear.prepare"
    assert options["dtypes"] == BUILTIN_DTYPES["linear"] and options["array_kind"] == "numpy"
    assert options["checker"]() == "linear declined"
    assert by_op["relu"][1]["prepare"] is None


@pytest.mark.parametrize("package", ["opcore_onnxruntime.kernels", "opcore_openvino.kernels"])
def test_graph_backends_declare_every_builtin_op_they_had(package):
    """Both graph runtimes take the 28 ops they were written for; the declared list is each module's
    real OPS, and names built-in ops only, each a kernel the module defines."""
    layout = kernel_layout(package)
    assert set(layout) >= FIRST_OPS
    assert set(layout) <= set(BUILTIN_DTYPES)
    for op, (module, _) in layout.items():
        kernels = importlib.import_module(f"{package}.{module}")
        assert op in kernels.OPS and callable(getattr(kernels, op))


def test_runtime_available_says_what_is_missing_or_too_old():
    assert runtime_available(("numpy",), "numpy", (1, 0), extra="demo") is True
    assert runtime_available(("numpy", "no_such_runtime"), "numpy", (1, 0), extra="demo") == (
        "no_such_runtime is not installed (pip install 'opcore[demo]')"
    )
    assert runtime_available(("numpy",), "no-such-distribution", (1, 0), extra="demo") == (
        "no-such-distribution has no distribution metadata (a broken install?)"
    )
    old = runtime_available(("numpy",), "numpy", (999, 0), extra="demo")
    assert old == f"numpy {numpy.__version__} is older than 999.0 (pip install -U numpy)"


def test_version_tuple_reads_the_first_two_numbers():
    assert version_tuple("1.17.0") == (1, 17)
    assert version_tuple("1.9.0rc1") == (1, 9)
    assert version_tuple("2026.4.1-22982-e213a147257") == (2026, 4)


def test_probe_records_a_value_or_why_it_failed() -> None:
    lines: dict[str, str] = {}
    probe(lines, "ok", lambda: "fine")
    empty: dict[str, str] = {}
    probe(lines, "broken", lambda: empty["missing"])
    assert lines == {"ok": "fine", "broken": "unavailable (KeyError: 'missing')"}


def _imported_after(modules: str, watched: str) -> list[str]:
    """Which of the modules named by the expression ``watched`` a fresh interpreter has after importing ``modules``."""
    code = f"import json, sys, {modules}; print(json.dumps(sorted(m for m in sys.modules if m in {watched})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_the_plugin_scaffolding_loads_without_the_kernel_machinery():
    parts = "('opcore.onemodel.op', 'opcore.onemodel.builders', 'opcore.onemodel.cache', 'opcore.onemodel.plugin')"
    assert _imported_after("opcore.onemodel.cache, opcore.onemodel.plugin", parts) == [
        "opcore.onemodel.cache",
        "opcore.onemodel.plugin",
    ]


def test_importing_the_package_imports_no_runtime():
    every = "opcore.onemodel.op, opcore.onemodel.cache, opcore.onemodel.builders, opcore.onemodel.plugin"
    assert _imported_after(every, "('torch', 'onnxruntime', 'openvino', 'onnx')") == []


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_resolved_operand_tensor_is_an_input_not_the_example(backend):
    """A Tensor|Scalar argument given as an array is fed at every call: resolving on examples (empty
    arrays, as opcore.graph does) must not bake the example's data into the model."""
    if backend not in {r.name for r in opcore.backends() if r.ok}:
        pytest.skip(f"{backend} is not loaded here")
    x, other = numpy.random.rand(2, 8, 4).astype("float32"), numpy.random.rand(2, 8, 1).astype("float32")
    resolved = opcore.resolve("mul", numpy.zeros_like(x), numpy.zeros_like(other), backend=backend)
    numpy.testing.assert_allclose(resolved(x, other), x * other, rtol=1e-6)
