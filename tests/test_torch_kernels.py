"""The shared torch kernels (opcore.torchkit.torch_kernels, registered by opcore.torchkit.registration),
run through the dispatcher pinned to the cpu backend and compared with the reference backend on
the same inputs: every built-in op, every dtype the cpu backend declares, scalars, empty
dimensions, broadcasting and non-contiguous inputs. Result dtypes must equal the contract's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy
import pytest

torch = pytest.importorskip("torch")

from opcase import TOLERANCES, rand, reseed  # noqa: E402

import opcore  # noqa: E402
from opcore.opset import BUILTIN_DTYPES  # noqa: E402
from opcore.torchkit.registration import ATEN_LABEL, FALLBACK_LABEL, register_torch_kernels  # noqa: E402
from opcore.types import DType, TensorMeta  # noqa: E402

pytestmark = pytest.mark.filterwarnings("error")

FLOATS = ["float32", "float64", "float16", "bfloat16"]
INTS = ["int64", "int32", "int16", "int8", "uint8"]
# chained roundings in a reduced dtype (gated_mlp, sdpa) drift further from float64 than one op
LOOSE = {"float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)}


@pytest.fixture(autouse=True)
def _same_data():
    reseed()


def _metas(value: Any) -> Any:
    if isinstance(value, (torch.Tensor, numpy.ndarray)):
        return TensorMeta.of(value)
    if isinstance(value, (list, tuple)) and value and any(isinstance(v, torch.Tensor) for v in value):
        return [_metas(v) for v in value]
    return value


def check(op: str, *args: Any, loose: bool = False, label: str = ATEN_LABEL, **kwargs: Any) -> Any:
    """cpu result == reference result (dtype tolerance), dtype and shape == the contract's meta."""
    explanation = opcore.explain(op, *args, backend="cpu", **kwargs)
    assert explanation.chosen == f"cpu/{label}", str(explanation)
    actual = opcore.run(op, *args, backend="cpu", **kwargs)
    expected = opcore.run(op, *args, backend="reference", **kwargs)
    meta = opcore.infer_meta(op, *(_metas(a) for a in args), **kwargs)
    assert isinstance(actual, torch.Tensor) and isinstance(meta, TensorMeta)
    assert DType.from_torch(actual.dtype) is meta.dtype, f"{op}: {actual.dtype}, the contract says {meta.dtype}"
    assert tuple(actual.shape) == meta.shape
    name = str(expected.dtype).removeprefix("torch.")
    if name.startswith(("int", "uint", "bool")):
        rtol = atol = 0.0
    else:
        rtol, atol = (LOOSE if loose and name in LOOSE else TOLERANCES)[name]
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    return actual


def _ints(dtype: str) -> dict[str, float]:
    return {"low": 0, "high": 3} if dtype == "uint8" else {"low": -3, "high": 3}


def r(shape: tuple[int, ...], dtype: str = "float32", layout: str = "", **options: Any) -> Any:
    if dtype in INTS and not options:
        options = _ints(dtype)
    return rand(shape, dtype, layout=layout, **options)


# --- elementwise -------------------------------------------------------------------------------

BINARY_SHAPES = [((2, 3), (2, 3)), ((2, 3), (3,)), ((4, 1, 3), (5, 1)), ((), (2, 3)), ((2, 3), ()), ((0, 3), (3,))]


@pytest.mark.parametrize("dtype", FLOATS + INTS + ["bool"])
@pytest.mark.parametrize("op", ["add", "mul", "sub", "div"])
def test_binary_dtypes(op, dtype):
    if op == "sub" and dtype == "bool":
        pytest.skip("sub refuses bool (the contract's DTypeError, tested in test_ops_elementwise)")
    divisor = {"low": 1, "high": 3} if op == "div" and dtype in INTS else {}
    for x_shape, y_shape in BINARY_SHAPES:
        check(op, r(x_shape, dtype), r(y_shape, dtype, **divisor))


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_binary_scalars_promotion_and_layouts(op):
    check(op, r((3, 4), "int32"), 2.5)
    check(op, r((3, 4), "float16"), 3)
    check(op, r((3, 4), "bfloat16"), r((4,), "float32"))
    check(op, r((3, 4), "int8"), r((), "int64", low=1, high=3))
    check(op, r((3, 4), layout="transposed"), r((3, 4), layout="strided"))
    if op in ("add", "sub"):
        check(op, r((3, 4)), r((3, 4)), alpha=2)


@pytest.mark.parametrize("mode", ["trunc", "floor"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int64", "int8"])
def test_div_rounding(mode, dtype):
    check("div", r((4, 5), dtype), r((5,), dtype, low=1, high=3), rounding_mode=mode)


def test_integer_division_by_zero_is_the_callers_error():
    with pytest.raises(opcore.ArgumentError, match="div\\(\\): argument 'other'"):
        opcore.run("div", torch.tensor([1, 2]), torch.tensor([1, 0]), rounding_mode="floor", backend="cpu")


UNARY = {
    "relu": FLOATS + INTS,
    "silu": FLOATS,
    "sigmoid": FLOATS + INTS + ["bool"],
    "tanh": FLOATS + INTS + ["bool"],
    "exp": FLOATS + INTS + ["bool"],
}


@pytest.mark.parametrize(("op", "dtype"), [(op, d) for op, dtypes in UNARY.items() for d in dtypes])
def test_unary(op, dtype):
    for shape, layout in [((), ""), ((0, 4), ""), ((3, 5), ""), ((3, 5), "transposed"), ((2, 6), "strided")]:
        check(op, r(shape, dtype, layout=layout))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_gelu(dtype, approximate):
    for shape, layout in [((), ""), ((0, 2), ""), ((4, 6), "transposed")]:
        check("gelu", r(shape, dtype, layout=layout), approximate=approximate)


# --- matrix products ---------------------------------------------------------------------------

LINEAR_SHAPES = [
    ((2, 3), (4, 3), (4,)),
    ((2, 3), (4, 3), None),
    ((3,), (4, 3), (4,)),
    ((3,), (3,), ()),
    ((2, 3), (3,), ()),  # torch's addmv refuses this bias; the kernel adds it apart
    ((5, 2, 3), (4, 3), (5, 2, 4)),
    ((0, 3), (4, 3), (4,)),
    ((2, 0), (4, 0), (4,)),
    ((2, 3), (0, 3), (0,)),
]


@pytest.mark.parametrize("op", ["linear", "linear_relu", "linear_silu", "linear_gelu"])
@pytest.mark.parametrize("dtype", [*FLOATS, "int64", "int8"])
def test_linear_family(op, dtype):
    if dtype in INTS and op not in ("linear", "linear_relu"):
        pytest.skip(f"{op} takes floating dtypes only")
    for x_shape, w_shape, b_shape in LINEAR_SHAPES:
        bias = None if b_shape is None else r(b_shape, dtype)
        check(op, r(x_shape, dtype), r(w_shape, dtype), bias)
    check(op, r((4, 6), dtype, layout="transposed"), r((5, 6), dtype, layout="strided"), r((5,), dtype))


def test_linear_gelu_tanh():
    check("linear_gelu", r((4, 8)), r((3, 8)), r((3,)), approximate="tanh")


@pytest.mark.parametrize("op", ["linear", "linear_relu", "linear_silu", "linear_gelu"])
@pytest.mark.parametrize("dtype", [*FLOATS, "int64"])
def test_linear_family_prepared_weights(op, dtype):
    """resolve with constant weights: the shared prepare keeps w transposed and calls addmm for 2-D x."""
    if dtype == "int64" and op not in ("linear", "linear_relu"):
        pytest.skip(f"{op} takes floating dtypes only")
    for x_shape, w_shape, b_shape in LINEAR_SHAPES:
        x, w = r(x_shape, dtype), r(w_shape, dtype)
        b = None if b_shape is None else r(b_shape, dtype)
        resolved = opcore.resolve(op, x, w, b, constants=("w",) if b is None else ("w", "b"), backend="cpu")
        assert resolved.kernel.label == ATEN_LABEL and resolved.prepared
        k = x_shape[-1]
        others = [x_shape]
        if len(x_shape) > 1 and k and (b_shape is None or len(b_shape) <= 1):  # else the bias fixes the batch
            others += [(k,), (1, k), (5, k), (2, 3, k)]
        for shape in others:
            other = r(shape, dtype)
            expected = opcore.run(op, other, w, b, backend="reference")
            name = str(expected.dtype).removeprefix("torch.")
            rtol, atol = (0.0, 0.0) if name.startswith("int") else TOLERANCES[name]
            torch.testing.assert_close(resolved(other), expected, rtol=rtol, atol=atol)
    x, w, b = r((4, 6), dtype), r((5, 6), dtype), r((5,), dtype)
    free_weight = opcore.resolve(op, x, w, b, constants=("b",), backend="cpu")
    assert free_weight.free == ("x", "w")
    torch.testing.assert_close(free_weight(x, w), opcore.run(op, x, w, b, backend="cpu"))


@pytest.mark.parametrize("dtype", [*FLOATS, "int32", "uint8"])
def test_matmul_and_bmm(dtype):
    for x_shape, y_shape in [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 1, 2, 3), (5, 3, 4)), ((0, 3), (3, 2))]:
        check("matmul", r(x_shape, dtype), r(y_shape, dtype))
    check("matmul", r((2, 3), dtype, layout="transposed"), r((3, 4), dtype, layout="strided"))
    check("bmm", r((2, 3, 4), dtype), r((2, 4, 5), dtype))
    check("bmm", r((0, 3, 4), dtype), r((0, 4, 5), dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_gated_mlp(dtype):
    x, gate, up, down = r((3, 8), dtype, low=-1, high=1), r((16, 8), dtype), r((16, 8), dtype), r((6, 16), dtype)
    check("gated_mlp", x, gate, up, down, loose=True)
    check("gated_mlp", r((2, 0, 8), dtype), gate, up, down, loose=True)


# --- normalization -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_family(op, dtype):
    check(op, r((), dtype), 0)
    check(op, r((0, 3), dtype), 1)
    check(op, r((3, 5), dtype, layout="transposed"), 0)
    check(op, r((2, 3, 4), dtype), -1)


@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm(dtype):
    x = r((3, 4, 5), dtype)
    check("layer_norm", x, (5,), r((5,), dtype), r((5,), dtype))
    check("layer_norm", x, (4, 5), None, None, 1e-3)
    check("layer_norm", r((0, 5), dtype), (5,))
    check("layer_norm", r((4, 5), dtype, layout="transposed"), (5,), r((5,), dtype), None)
    if dtype in ("float16", "bfloat16"):  # float32 parameters of a reduced-precision input
        check("layer_norm", x, (5,), r((5,)), r((5,)))


@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm(dtype):
    x = r((3, 4, 5), dtype)
    check("rms_norm", x, (5,), r((5,), dtype))
    check("rms_norm", x, (4, 5), None, 1e-3)
    check("rms_norm", r((0, 5), dtype), (5,))
    check("rms_norm", r((4, 5), dtype, layout="strided"), (5,), None)
    other = "float32" if dtype != "float32" else "float64"
    check("rms_norm", x, (5,), r((5,), other))  # a weight of another dtype: no warning, x's dtype out


# --- nn ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS + INTS + ["bool"])
def test_embedding(dtype):
    weight = r((5, 3), dtype)
    check("embedding", torch.tensor([[0, 4], [2, 2]]), weight)
    check("embedding", torch.tensor([1, 3], dtype=torch.int32), weight, 1)
    check("embedding", torch.tensor([], dtype=torch.int64), weight)
    check("embedding", torch.tensor(2), weight, -1)


def test_embedding_index_out_of_range_names_the_argument():
    with pytest.raises(opcore.ArgumentError, match="embedding\\(\\): argument 'input'"):
        opcore.run("embedding", torch.tensor([5]), torch.zeros(3, 2), backend="cpu")


@pytest.mark.parametrize("dtype", [*FLOATS, "int64", "int32"])
def test_conv2d(dtype):
    check("conv2d", r((2, 4, 7, 7), dtype), r((6, 2, 3, 3), dtype), r((6,), dtype), 2, 1, (1, 2), 2)
    check("conv2d", r((3, 6, 5), dtype), r((2, 3, 2, 2), dtype))
    check("conv2d", r((0, 3, 5, 5), dtype), r((2, 3, 3, 3), dtype))
    check("conv2d", r((1, 5, 5, 3), dtype).permute(0, 3, 1, 2), r((2, 3, 3, 3), dtype), None, 1, 1)


@pytest.mark.parametrize("op", ["conv2d_relu", "conv2d_silu"])
@pytest.mark.parametrize("dtype", ["float64", "float16", "float32"])
def test_conv2d_activation_plain(op, dtype):
    check(op, r((1, 4, 6, 6), dtype), r((4, 2, 3, 3), dtype), r((4,), dtype), 1, 1, 1, 2)


@pytest.mark.parametrize("dtype", FLOATS)
def test_scaled_dot_product_attention(dtype):
    q, k, v = r((2, 3, 4, 8), dtype, low=-1, high=1), r((2, 3, 5, 8), dtype, low=-1, high=1), r((2, 3, 5, 6), dtype)
    check("scaled_dot_product_attention", q, k, v, loose=True)
    check("scaled_dot_product_attention", q, k, v, torch.rand(4, 5) < 0.7, loose=True)
    check("scaled_dot_product_attention", q, k, v, r((3, 1, 5), dtype), loose=True)
    check(
        "scaled_dot_product_attention", q, r((2, 3, 4, 8), dtype), r((2, 3, 4, 6), dtype), None, 0.0, True, loose=True
    )
    check("scaled_dot_product_attention", q, k, v, scale=0.3, loose=True)
    check("scaled_dot_product_attention", q, k[:, :1], v[:, :1], enable_gqa=True, loose=True)
    check("scaled_dot_product_attention", r((0, 3, 4, 8), dtype), k[:0], v[:0], loose=True)


# --- shape -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "bool"])
def test_shape_ops(dtype):
    x = r((2, 3, 4), dtype)
    check("transpose", x, 0, -1)
    check("transpose", r((), dtype), 0, -1)
    check("permute", x, (2, 0, 1))
    check("permute", r((3, 4), dtype, layout="transposed"), (1, 0))
    check("reshape", x, (4, -1))
    check("reshape", r((3, 4), dtype, layout="transposed"), (12,))
    check("reshape", r((0, 3), dtype), (3, 0))
    check("cat", [x, r((2, 1, 4), dtype)], 1)
    check("cat", [r((0,), dtype), r((2, 2), dtype)])
    check("cat", [r((2,), dtype), r((3,), "float64")])


# --- numpy callers, and the registration helper --------------------------------------------------


def test_numpy_inputs_reach_the_cpu_backend_and_come_back_as_numpy():
    x, w = numpy.ones((2, 8), "float32"), numpy.ones((4, 8), "float32")
    assert opcore.explain("linear", x, w).chosen == "cpu/aten"
    y = opcore.run("linear", x, w)
    assert isinstance(y, numpy.ndarray) and y.dtype == numpy.float32
    numpy.testing.assert_allclose(y, opcore.run("linear", x, w, backend="reference"))
    view = opcore.run("transpose", x, 0, 1)
    assert isinstance(view, numpy.ndarray) and numpy.shares_memory(view, x)  # zero-copy both ways


def test_declared_dtypes_follow_the_contracts():
    from opcore_cpu.dtypes import CPU_DIFFERENCES, CPU_DTYPES
    from opcore_cuda.dtypes import CUDA_DIFFERENCES, CUDA_DTYPES

    for op, dtypes in BUILTIN_DTYPES.items():
        assert CPU_DTYPES[op] == CPU_DIFFERENCES.get(op, dtypes), f"{op}: cpu declares {sorted(CPU_DTYPES[op])}"
        assert CUDA_DTYPES[op] == CUDA_DIFFERENCES.get(op, dtypes), f"{op}: cuda declares {sorted(CUDA_DTYPES[op])}"
    assert not CPU_DIFFERENCES  # probed: torch on CPU takes every dtype the contracts do


def test_the_shared_kernel_list_is_what_the_module_exports():
    """register_torch_kernels reads kernels.OPS from the source; it must be the real one."""
    from opcore.torchkit import torch_kernels as kernels
    from opcore.torchkit.registration import shared_kernel_ops

    assert shared_kernel_ops() == kernels.OPS
    assert all(callable(getattr(kernels, op)) for op in kernels.OPS)


class _TorchOnlyPlugin:
    """A torch backend declaring only relu: every other built-in op gets the by-name ATen fallback."""

    def __init__(self, dtypes_by_op: dict[str, Any]) -> None:
        self.dtypes_by_op = dtypes_by_op  # the ops it takes, and their dtypes

    @opcore.hookimpl
    def opcore_backend(self) -> opcore.BackendSpec:
        return opcore.BackendSpec(name="torchonly", version="1", priority=500, device_types=(opcore.DeviceType.CPU,))

    @opcore.hookimpl
    def opcore_register_kernels(self, registrar: opcore.Registrar) -> None:
        register_torch_kernels(registrar, "cpu", self.dtypes_by_op, ops=self.dtypes_by_op)


def _with_plugin(plugin: Any, body: Callable[[], None]) -> None:
    opcore.register_plugin(plugin)
    try:
        body()
    finally:
        opcore.unregister_plugin("torchonly")


def test_register_torch_kernels_labels_and_by_name_fallback():
    def body() -> None:
        x = r((3, 4))
        assert opcore.explain("relu", x).chosen == "torchonly/aten"
        # tanh is not in dtypes_by_op: torch.ops.aten.tanh serves it by name, and explain says so
        explanation = opcore.explain("tanh", x)
        assert explanation.chosen == f"torchonly/{FALLBACK_LABEL}", str(explanation)
        torch.testing.assert_close(opcore.run("tanh", x), torch.tanh(x))
        torch.testing.assert_close(
            opcore.run("gelu", x, approximate="tanh"), torch.nn.functional.gelu(x, approximate="tanh")
        )
        torch.testing.assert_close(opcore.run("add", x, x, alpha=3), x + 3 * x)
        # a built-in op whose name ATen lacks: the fallback's checker declines, the next backend runs it
        declined = opcore.explain("linear_relu", x, r((2, 4)))
        row = next(c for c in declined.candidates if c.title == f"torchonly/{FALLBACK_LABEL}")
        assert row.status.value == "declined" and "ATen has no op named 'linear_relu'" in row.reason

    _with_plugin(_TorchOnlyPlugin({"relu": ["float32"]}), body)


def test_by_name_fallback_hands_over_what_torch_cannot_do():
    from opcore.torchkit.aten import builtin_fallback

    with pytest.raises(opcore.Unsupported, match="not implemented for 'Long'"):
        builtin_fallback.gelu(torch.tensor([1, 2]), "none")
    with pytest.raises(opcore.ArgumentError, match=r"torch.ops.aten.mul refused"):
        builtin_fallback.mul(torch.zeros(2), torch.zeros(3))
