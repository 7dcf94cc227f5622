"""Sample calls of every built-in op for the graph-runtime backends (ONNX Runtime, OpenVINO), the
comparison with the reference backend, and the checks both backends' tests share.

Each backend's test runs every case pinned to the backend: a case the backend accepts must match
the reference within the output dtype's tolerance; a case it declines must say why (explain).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy
import pytest

import opcore

if TYPE_CHECKING:
    from opcore.onemodel.cache import ModelCache

__all__ = [
    "CASES",
    "TOLERANCES",
    "Case",
    "assert_batch_sizes_share_one_model",
    "assert_cache_size_comes_from_the_environment",
    "assert_embedding_indices_out_of_range_are_refused",
    "assert_loading_imports_no_runtime",
    "assert_matches_reference",
    "assert_matches_reference_or_declines",
    "assert_numpy_calls_import_only",
    "assert_prepared_linear_matches",
    "assert_threads_match_a_serial_run",
    "assert_torch_tensors_come_back",
    "outcome",
    "python_json",
    "skip_unless_loaded",
]

# rtol, atol against the float64 reference, per result dtype (float16 results are rounded once)
TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (2e-3, 2e-3),
    "float32": (2e-5, 2e-5),
    "float64": (1e-10, 1e-10),
}

FLOATS = ("float32", "float64", "float16")
INTS = ("int64", "int32", "int16", "int8", "uint8")


@dataclass(frozen=True)
class Case:
    op: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    name: str = ""

    @property
    def id(self) -> str:
        return f"{self.op}-{self.name}"


_rng = numpy.random.default_rng(20240601)


def arr(shape: tuple[int, ...], dtype: str = "float32", low: float = -3.0, high: float = 3.0) -> numpy.ndarray:
    if dtype == "bool":
        return _rng.random(shape) < 0.5
    if dtype.startswith(("int", "uint")):
        low = 0 if dtype == "uint8" else low
        return _rng.integers(int(low), int(high), size=shape, endpoint=True).astype(dtype)
    return _rng.uniform(low, high, size=shape).astype(dtype)


def _nonzero(shape: tuple[int, ...], dtype: str) -> numpy.ndarray:
    values = arr(shape, dtype, 1, 4)
    if dtype not in ("uint8",):
        values = values * numpy.where(arr(shape, "bool"), 1, -1).astype(dtype)
    return values


def _elementwise() -> Iterator[Case]:
    for op in ("add", "sub", "mul", "div"):
        dtypes = FLOATS + INTS + (() if op == "sub" else ("bool",))
        for dtype in dtypes:
            other = _nonzero((2, 3), dtype) if op == "div" and dtype != "bool" else arr((2, 3), dtype)
            yield Case(op, (arr((2, 3), dtype), other), name=dtype)
        yield Case(op, (arr((2, 1, 3)), arr((4, 3))), name="broadcast")
        yield Case(op, (arr((0, 3)), arr((3,))), name="empty")
        yield Case(op, (arr((2, 3), "int32"), 2.5), name="int-tensor-float-scalar")
        yield Case(op, (arr((2, 3), "float16"), 3), name="f16-int-scalar")
        yield Case(op, (arr((2, 3), "int8"), arr((), "int64", 1, 3)), name="int8-0d-int64")
        yield Case(op, (arr((2, 3), "int32"), arr((2, 3), "float16")), name="int32-f16-promote")
        yield Case(op, (arr((), "float32"), arr((), "float32", 1, 3)), name="0d")
        if op in ("add", "sub"):
            yield Case(op, (arr((2, 3)), arr((2, 3))), {"alpha": 2.5}, name="alpha")
            yield Case(op, (arr((2, 3), "int64"), arr((2, 3), "int64")), {"alpha": 3}, name="int-alpha")
    yield Case("add", (arr((4,), "bool"), True), name="bool-scalar")
    yield Case("mul", (arr((2, 3), "int8", -100, 100), arr((2, 3), "int8", -100, 100)), name="int8-wraps")
    yield Case("add", (arr((2, 3), "uint8", 0, 255), 300), name="uint8-scalar-wraps")
    for mode in ("trunc", "floor"):
        for dtype in ("float32", "float64", "float16", "int64", "int32", "int8"):
            yield Case(
                "div", (arr((3, 4), dtype, -9, 9), _nonzero((3, 4), dtype)), {"rounding_mode": mode}, f"{mode}-{dtype}"
            )
        yield Case("div", (arr((3, 4), "int32", -9, 9), -2), {"rounding_mode": mode}, f"{mode}-int-scalar")
        yield Case("div", (numpy.array([1.0, -1.0, 7.0], "float32"), 0.1), {"rounding_mode": mode}, f"{mode}-inexact")
    yield Case("div", (arr((3,), "int64"), arr((3,), "int64", 1, 4)), name="int-true-division")
    edge = numpy.array([5.99609375, -5.99609375], "float16"), numpy.array([0.99951171875] * 2, "float16")
    yield Case("div", edge, {"rounding_mode": "trunc"}, "trunc-float16-rounds-first")  # 5.999 -> 6.0 -> 6
    for dtype in FLOATS + INTS:
        yield Case("relu", (arr((3, 4), dtype),), name=dtype)
    yield Case("relu", (arr((), "float32"),), name="0d")
    for dtype in FLOATS:
        for approximate in ("none", "tanh"):
            yield Case("gelu", (arr((3, 4), dtype),), {"approximate": approximate}, f"{approximate}-{dtype}")
        yield Case("silu", (arr((3, 4), dtype),), name=dtype)
    for op in ("sigmoid", "tanh", "exp"):
        for dtype in (*FLOATS, "int32", "int64", "uint8", "bool"):
            yield Case(op, (arr((3, 4), dtype),), name=dtype)
        yield Case(op, (arr((0, 4)),), name="empty")


def _linear() -> Iterator[Case]:
    shapes = [
        ((2, 3), (4, 3), (4,)),
        ((2, 3), (4, 3), None),
        ((3,), (4, 3), (4,)),
        ((3,), (3,), None),
        ((2, 3), (3,), ()),
        ((5, 2, 3), (4, 3), (4,)),
        ((2, 5, 2, 3), (4, 3), (5, 2, 4)),
        ((2, 3), (4, 3), (2, 4)),
        ((2, 3), (4, 3), (2, 1)),
        ((0, 3), (4, 3), (4,)),
        ((2, 0), (4, 0), (4,)),
    ]
    for x, w, b in shapes:
        bias = None if b is None else arr(b)
        yield Case("linear", (arr(x), arr(w), bias), name=f"{x}x{w}+{b}")
    for dtype in FLOATS + INTS:
        low, high = (0, 3) if dtype == "uint8" else (-3, 3)
        args = (arr((3, 2, 8), dtype, low, high), arr((5, 8), dtype, low, high), arr((5,), dtype, low, high))
        yield Case("linear", args, name=dtype)
        yield Case("linear_relu", args, name=dtype)
    yield Case("linear", (arr((1, 4), "int8", 100, 100), arr((1, 4), "int8", 100, 100), None), name="int8-wraps")
    for dtype in FLOATS:
        args = (arr((3, 8), dtype), arr((5, 8), dtype), arr((5,), dtype))
        yield Case("linear_silu", args, name=dtype)
        for approximate in ("none", "tanh"):
            yield Case("linear_gelu", args, {"approximate": approximate}, f"{approximate}-{dtype}")
        gate, up, down = arr((6, 8), dtype, -1, 1), arr((6, 8), dtype, -1, 1), arr((5, 6), dtype, -1, 1)
        yield Case("gated_mlp", (arr((2, 3, 8), dtype, -1, 1), gate, up, down), name=dtype)
    for x, y in [
        ((2, 3), (3, 4)),
        ((3,), (3, 4)),
        ((2, 3), (3,)),
        ((3,), (3,)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((0, 3), (3, 2)),
    ]:
        yield Case("matmul", (arr(x), arr(y)), name=f"{x}@{y}")
    for dtype in (*FLOATS, "int64", "int32", "int8"):
        yield Case("matmul", (arr((2, 3, 4), dtype), arr((4, 5), dtype)), name=dtype)
        yield Case("bmm", (arr((2, 3, 4), dtype), arr((2, 4, 5), dtype)), name=dtype)


def _normalization() -> Iterator[Case]:
    for op in ("softmax", "log_softmax"):
        for dtype in FLOATS:
            yield Case(op, (arr((3, 5), dtype),), {"dim": -1}, f"{dtype}")
        yield Case(op, (arr((2, 3, 4)),), {"dim": 1}, "dim1")
        yield Case(op, (arr((2, 0)),), {"dim": 0}, "empty")
        yield Case(op, (arr(()),), {"dim": 0}, "0d")
    for dtype in FLOATS:
        yield Case("layer_norm", (arr((2, 3, 8), dtype), (8,), arr((8,), dtype), arr((8,), dtype)), name=dtype)
        yield Case("rms_norm", (arr((2, 3, 8), dtype), (8,), arr((8,), dtype)), name=dtype)
        yield Case("rms_norm", (arr((2, 3, 8), dtype), (3, 8), None, 1e-3), name=f"2d-eps-{dtype}")
    yield Case("layer_norm", (arr((2, 3, 8)), (3, 8), None, None), name="2d-no-affine")
    yield Case("layer_norm", (arr((4, 8)), (8,), None, arr((8,)), 1e-3), name="bias-only")
    yield Case("layer_norm", (arr((4, 8), "float16"), (8,), arr((8,)), arr((8,))), name="f16-f32-params")


def _nn() -> Iterator[Case]:
    for dtype in (*FLOATS, "int64", "int32", "bool", "uint8"):
        yield Case("embedding", (arr((2, 3), "int64", 0, 9), arr((10, 4), dtype)), name=dtype)
    yield Case("embedding", (arr((5,), "int32", 0, 9), arr((10, 4))), name="int32-indices")
    yield Case("embedding", (arr((0,), "int64", 0, 9), arr((10, 4))), name="empty")
    conv = [
        ((1, 4, 8, 8), (6, 2, 3, 3), True, (1, 1), (0, 0), (1, 1), 2),
        ((2, 3, 9, 7), (4, 3, 3, 2), False, (2, 1), (1, 2), (1, 1), 1),
        ((3, 8, 8), (5, 3, 3, 3), True, (1, 1), (1, 1), (2, 2), 1),
    ]
    for x, w, bias, stride, padding, dilation, groups in conv:
        b = arr((w[0],)) if bias else None
        name = f"{x}-{w}-s{stride}-p{padding}-d{dilation}-g{groups}"
        yield Case("conv2d", (arr(x), arr(w), b, stride, padding, dilation, groups), name=name)
    for dtype in ("float64", "float16"):
        yield Case("conv2d", (arr((1, 2, 5, 5), dtype), arr((3, 2, 3, 3), dtype)), name=dtype)
    yield Case("conv2d", (arr((1, 2, 5, 5), "int32"), arr((3, 2, 3, 3), "int32")), name="int32")
    sdpa = "scaled_dot_product_attention"
    for dtype in FLOATS:
        yield Case(sdpa, (arr((2, 3, 4, 8), dtype), arr((2, 3, 6, 8), dtype), arr((2, 3, 6, 5), dtype)), name=dtype)
    q, k, v = arr((2, 4, 5, 8), low=-1, high=1), arr((2, 4, 7, 8), low=-1, high=1), arr((2, 4, 7, 8))
    yield Case(sdpa, (q, k, v), {"is_causal": True}, "causal")
    yield Case(sdpa, (q, k, v, arr((5, 7), "bool")), name="bool-mask")
    yield Case(sdpa, (q, k, v, numpy.zeros((5, 7), bool)), name="all-masked")
    yield Case(sdpa, (q, k, v, arr((2, 1, 5, 7))), name="float-mask")
    yield Case(sdpa, (q, k, v), {"scale": 0.3}, "scale")
    yield Case(sdpa, (arr((3, 5, 8)), arr((3, 7, 8)), arr((3, 7, 4))), name="3d")
    gqa = (arr((2, 6, 5, 8)), arr((2, 2, 7, 8)), arr((2, 2, 7, 8)))
    yield Case(sdpa, gqa, {"enable_gqa": True}, "gqa")
    yield Case(sdpa, (arr((2, 3, 4, 8)), arr((2, 3, 0, 8)), arr((2, 3, 0, 6))), name="empty-keys")
    yield Case(sdpa, (arr((2, 3, 4, 0)), arr((2, 3, 5, 0)), arr((2, 3, 5, 6))), name="empty-embedding")


def _shape() -> Iterator[Case]:
    for dtype in (*FLOATS, *INTS, "bool"):
        x = arr((2, 3, 4), dtype)
        yield Case("transpose", (x, 0, 2), name=dtype)
        yield Case("permute", (x, (2, 0, 1)), name=dtype)
        yield Case("reshape", (x, (4, -1)), name=dtype)
        yield Case("cat", ((x, arr((2, 1, 4), dtype)), 1), name=dtype)
    yield Case("transpose", (arr(()), 0, -1), name="0d")
    yield Case("permute", (arr((2, 3)), (-1, 0)), name="negative")
    yield Case("reshape", (arr((2, 0, 3)), (5, 0, 7)), name="zero-size")
    yield Case("reshape", (arr((1,)), ()), name="to-0d")
    yield Case("cat", ((arr((2, 3)), arr((0,), "float64"), arr((1, 3), "int32")), 0), name="skip-and-promote")
    yield Case("cat", ((arr((0,)), arr((0,))), 0), name="all-skipped")
    yield Case("cat", ((arr((2, 3), "int64"), arr((2, 2), "int64")), -1), name="int64-last")


def _special() -> Iterator[Case]:
    """NaN and infinities: they propagate as in torch (a softmax row with NaN or +inf is all NaN)."""
    values = numpy.array([[-numpy.inf, -1.0, 0.0, 2.0], [1.0, numpy.nan, 2.0, 3.0], [numpy.inf, 1.0, 2.0, 0.0]])
    for dtype in ("float32", "float64", "float16"):
        special = values.astype(dtype)
        for op in ("relu", "exp", "sigmoid", "tanh", "silu"):
            yield Case(op, (special,), name=f"special-{dtype}")
        yield Case(
            "gelu", (numpy.nan_to_num(special, posinf=9.0, neginf=-9.0, nan=numpy.nan),), name=f"special-{dtype}"
        )
        for op in ("softmax", "log_softmax"):
            yield Case(op, (special,), {"dim": -1}, f"special-{dtype}")
            yield Case(op, (numpy.full((2, 3), -numpy.inf, dtype),), {"dim": -1}, f"all-minus-inf-{dtype}")


def _layouts() -> Iterator[Case]:
    """Non-contiguous and read-only inputs (views, slices, broadcasts, frozen arrays)."""
    transposed = arr((6, 4)).T
    strided = arr((4, 12))[:, ::2]
    frozen = arr((4, 6))
    frozen.flags.writeable = False
    yield Case("linear", (transposed, arr((5, 6))[:, ::1], arr((10,))[::2]), name="transposed-strided")
    yield Case("linear", (frozen, frozen[:3], None), name="read-only")
    yield Case("add", (strided, transposed), name="strided-transposed")
    yield Case("softmax", (transposed,), {"dim": 0}, "transposed")
    yield Case("matmul", (strided, transposed.T[:, :3]), name="strided")
    yield Case("relu", (numpy.broadcast_to(arr((1, 6)), (4, 6)),), name="broadcast-view")


CASES: tuple[Case, ...] = (*_elementwise(), *_linear(), *_normalization(), *_nn(), *_shape(), *_special(), *_layouts())


def outcome(case: Case, backend: str) -> tuple[str | None, str]:
    """(the backend that would run the case pinned to ``backend`` or None, the reason it declines)."""
    explanation = opcore.explain(case.op, *case.args, backend=backend, **case.kwargs)
    mine = [c for c in explanation.candidates if c.backend == backend]
    reason = mine[0].reason if mine else "no candidate row"
    return explanation.backend, reason


def assert_matches_reference(case: Case, backend: str) -> Any:
    """Run ``case`` pinned to ``backend`` and compare with the reference; returns the result."""
    expected = opcore.run(case.op, *case.args, backend="reference", **case.kwargs)
    actual = opcore.run(case.op, *case.args, backend=backend, **case.kwargs)
    assert isinstance(actual, numpy.ndarray), type(actual)
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype}, reference {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape}, reference {expected.shape}"
    rtol, atol = TOLERANCES.get(str(expected.dtype), (0.0, 0.0))
    numpy.testing.assert_allclose(
        actual.astype(numpy.float64) if actual.dtype.kind == "f" else actual,
        expected.astype(numpy.float64) if expected.dtype.kind == "f" else expected,
        rtol=rtol,
        atol=atol,
        equal_nan=True,
    )
    return actual


def assert_matches_reference_or_declines(case: Case, backend: str, phrase: str | None) -> None:
    """``phrase`` None: the backend runs ``case`` and matches the reference; else it declines with
    a reason containing ``phrase``."""
    chosen, reason = outcome(case, backend)
    if phrase is not None:
        assert chosen is None, f"{case.id} was expected to be declined ({phrase})"
        assert phrase in reason, reason
        return
    assert chosen == backend, f"declined: {reason}"
    assert_matches_reference(case, backend)


# --- checks both graph-runtime backends' tests share ------------------------------------------


def skip_unless_loaded(backend: str) -> Callable[[], None]:
    """An autouse fixture (assign it to a name in the test module) that skips the module's tests
    when ``backend``'s plugin is not loaded."""

    @pytest.fixture(autouse=True)
    def loaded() -> None:
        if not any(r.name == backend and r.ok for r in opcore.backends()):
            pytest.skip(f"the {backend} plugin is not installed (pip install -e plugins/{backend})")

    return loaded


def python_json(code: str, **env: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


_RUNTIMES = ("onnxruntime", "onnx", "openvino", "torch")


def assert_loading_imports_no_runtime(backend: str, runtimes: tuple[str, ...]) -> None:
    """Loading the plugins leaves ``backend`` loaded and none of its ``runtimes`` imported."""
    found = python_json(
        "import json, sys, opcore; reports = {r.name: r.status.value for r in opcore.backends()}; "
        f"print(json.dumps({{'status': reports.get({backend!r}), "
        f"'imported': [m for m in {_RUNTIMES!r} if m in sys.modules]}}))"
    )
    assert found["status"] == "loaded"
    for runtime in runtimes:
        assert runtime not in found["imported"]


def assert_numpy_calls_import_only(backend: str, runtime: str) -> None:
    """run, prefer, explain and resolve on ``backend`` with numpy inputs import ``runtime`` and
    neither torch nor the other runtime."""
    found = python_json(
        "import json, sys, numpy, opcore\n"
        "x = numpy.ones((2, 8), numpy.float32); w = numpy.ones((4, 8), numpy.float32)\n"
        f"with opcore.prefer({backend!r}):\n"
        "    a = opcore.run('linear', x, w)\n"
        "    chosen = opcore.explain('linear', x, w).backend\n"
        f"b = opcore.run('softmax', x, dim=-1, backend={backend!r})\n"
        f"c = opcore.resolve('linear', x, w, constants=('w',), backend={backend!r})(x)\n"
        "print(json.dumps({'chosen': chosen, 'sum': float(a.sum() + b.sum() + c.sum()), "
        "'imported': sorted(m for m in ('onnxruntime', 'torch', 'openvino') if m in sys.modules)}))"
    )
    assert found["chosen"] == backend
    assert found["sum"] == pytest.approx(2 * 4 * 8 * 2 + 2)
    assert found["imported"] == [runtime]


def assert_cache_size_comes_from_the_environment(package: str, variable: str, size: int) -> None:
    """``package.cache_size()`` is ``variable``'s value; a value that is not a size is an error naming it."""
    found = python_json(
        f"import json, {package} as o; print(json.dumps({{'size': o.cache_size()}}))", **{variable: str(size)}
    )
    assert found["size"] == size
    done = subprocess.run(
        [sys.executable, "-c", f"import {package} as o; o.cache_size()"],
        capture_output=True,
        text=True,
        env={**os.environ, variable: "lots"},
        timeout=120,
        check=False,
    )
    assert done.returncode != 0 and variable in done.stderr


def assert_prepared_linear_matches(
    backend: str, linear: Any, x: numpy.ndarray, w: numpy.ndarray, b: numpy.ndarray
) -> Any:
    """linear prepared with w and b baked in, directly and through opcore.resolve, matches x @ w.T + b
    at several batch sizes and for non-contiguous and read-only inputs; returns the prepared function."""
    prepared = linear.prepare((x, w, b), frozenset({"w", "b"}))
    for batch in (1, 4, 9):
        xs = arr((batch, x.shape[1]))
        numpy.testing.assert_allclose(prepared(xs), xs @ w.T + b, rtol=2e-5, atol=2e-5)
    resolved = opcore.resolve("linear", x, w, b, constants=("w", "b"), backend=backend)
    assert resolved.prepared and resolved.free == ("x",)
    numpy.testing.assert_allclose(resolved(x), x @ w.T + b, rtol=2e-5, atol=2e-5)
    transposed, frozen = arr((x.shape[1], 3)).T, arr((5, x.shape[1]))
    frozen.flags.writeable = False
    for layout in (transposed, frozen):  # copied once where the runtime needs contiguous memory
        numpy.testing.assert_allclose(resolved(layout), layout @ w.T + b, rtol=2e-5, atol=2e-5)
    return prepared


def assert_torch_tensors_come_back(backend: str) -> tuple[Any, Any]:
    """torch inputs give torch results of the same dtype; bfloat16 is declined with the numpy reason.
    Returns (torch, a float32 input) for the backend's own checks."""
    torch = pytest.importorskip("torch")
    x, w = torch.randn(3, 8), torch.randn(5, 8)
    y = opcore.run("linear", x, w, backend=backend)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    torch.testing.assert_close(y, torch.nn.functional.linear(x, w), rtol=2e-5, atol=2e-5)
    explanation = opcore.explain("linear", x.bfloat16(), w.bfloat16(), backend=backend)
    assert explanation.chosen is None
    assert "numpy arrays, which have no bfloat16" in str(explanation)
    return torch, x


def assert_batch_sizes_share_one_model(backend: str, cache: ModelCache) -> None:
    """Every batch size of the same ranks reuses one cached model; another rank builds another;
    Python numbers are fed, not baked in."""
    cache.lru().clear()  # models that earlier tests built would make the counts below depend on test order
    cache_stats = cache.stats
    w, b = arr((6, 10)), arr((6,))
    opcore.run("linear", arr((1, 10)), w, b, backend=backend)
    before = cache_stats().misses
    for batch in (2, 7, 64, 0):
        x = arr((batch, 10))
        numpy.testing.assert_allclose(opcore.run("linear", x, w, b, backend=backend), x @ w.T + b, rtol=2e-5, atol=2e-5)
    assert cache_stats().misses == before
    opcore.run("linear", arr((3, 4, 10)), w, b, backend=backend)  # another rank: another model
    assert cache_stats().misses == before + 1
    for value in (0.5, 2.0, -3.0):  # Python numbers are fed, not baked in
        opcore.run("add", arr((3, 4)), value, backend=backend)
    assert cache_stats().misses == before + 2


def assert_embedding_indices_out_of_range_are_refused(backend: str) -> None:
    weight = arr((5, 3))
    for bad in (numpy.array([0, 5]), numpy.array([-1, 2])):
        with pytest.raises(opcore.ArgumentError, match=r"indices in \[0, 4\]"):
            opcore.run("embedding", bad, weight, backend=backend)


_BENCH_THREADS = Path(__file__).resolve().parent.parent / "bench" / "threads.py"


def _bench_threads() -> Any:
    spec = importlib.util.spec_from_file_location("bench_threads", _BENCH_THREADS)
    assert spec is not None and spec.loader is not None, _BENCH_THREADS
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def assert_threads_match_a_serial_run(backend: str, package: str) -> None:
    """bench/threads.py for 4 s with 4 threads, the cache shrunk halfway: every result bitwise
    identical to the serial run."""
    if not any(r.name == backend and r.ok for r in opcore.backends()):
        pytest.skip(f"the {backend} plugin is not installed")
    plugin = importlib.import_module(package)
    size = plugin.cache_size()
    try:
        report = _bench_threads().run_threads(backend, seconds=4.0, threads=4, shrink_cache=plugin.set_cache_size)
    finally:
        plugin.set_cache_size(size)
    assert not report.errors, report.errors
    assert report.mismatches == 0
    assert report.calls > 100
