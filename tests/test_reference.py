"""The reference backend: its spec, its registrations, and that every dtype a contract accepts
runs on its kernel. Runs without torch (bfloat16 cases need it and skip otherwise).
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy
import pytest
from opcase import CONTRACTS, REGISTRY, call, call_bound

import opcore
from opcore.errors import DTypeError, OpcoreError
from opcore.opset import BUILTIN_CONTRACTS, BUILTIN_DTYPES
from opcore.reference import plugin
from opcore.types import DeviceType, DType, TensorMeta

# For each op, its arguments in schema order, built with ``t(shape, dtype=None)``: a tensor of the
# dtype under test (or of ``dtype``). The dtype under test goes to the argument that picks the kernel.
Factory = Callable[..., Any]
SAMPLES: dict[str, Callable[[Factory], tuple[Any, ...]]] = {
    "add": lambda t: (t((2, 3)), t((3,)), 1),
    "sub": lambda t: (t((2, 3)), t((3,)), 1),
    "mul": lambda t: (t((2, 3)), t(())),
    "div": lambda t: (t((2, 3)), t((2, 3)), None),
    "relu": lambda t: (t((2, 3)),),
    "gelu": lambda t: (t((2, 3)), "tanh"),
    "silu": lambda t: (t((4,)),),
    "sigmoid": lambda t: (t((2, 3)),),
    "tanh": lambda t: (t(()),),
    "exp": lambda t: (t((0, 3)),),
    "neg": lambda t: (t((2, 3)),),
    "abs": lambda t: (t(()),),
    "sqrt": lambda t: (t((2, 3)),),
    "rsqrt": lambda t: (t((3,)),),
    "erf": lambda t: (t((0, 2)),),
    "cos": lambda t: (t((2, 3)),),
    "sin": lambda t: (t((2, 1)),),
    "eq": lambda t: (t((2, 3)), t((3,))),
    "ne": lambda t: (t((2, 3)), 1),
    "lt": lambda t: (t(()), t((2,))),
    "le": lambda t: (t((2, 3)), t((2, 3))),
    "gt": lambda t: (t((0, 3)), t((3,))),
    "ge": lambda t: (t((2, 3)), 2.5),
    "logical_and": lambda t: (t((2, 3)), t((3,))),
    "logical_or": lambda t: (t((2, 3)), t((2, 3), DType.BOOL)),
    "logical_not": lambda t: (t((2, 3)),),
    "linear": lambda t: (t((2, 3)), t((4, 3)), t((4,))),
    "matmul": lambda t: (t((2, 3)), t((3, 4))),
    "bmm": lambda t: (t((2, 2, 3)), t((2, 3, 4))),
    "addmm": lambda t: (t((4,)), t((3, 2)), t((2, 4)), 1, 1),
    "clone": lambda t: (t((2, 3)),),
    "linear_relu": lambda t: (t((2, 3)), t((4, 3)), None),
    "linear_silu": lambda t: (t((2, 3)), t((4, 3)), t((4,))),
    "linear_gelu": lambda t: (t((2, 3)), t((4, 3)), None, "none"),
    "gated_mlp": lambda t: (t((2, 3)), t((5, 3)), t((5, 3)), t((4, 5))),
    "linear_wq": lambda t: (t((2, 64)), t((4, 32), DType.UINT8), t((4, 2), DType.FLOAT32), None, None, 4, 32),
    "softmax": lambda t: (t((2, 3)), 1),
    "log_softmax": lambda t: (t((2, 3)), 0),
    "layer_norm": lambda t: (t((2, 3)), (3,), t((3,)), t((3,)), 1e-5),
    "rms_norm": lambda t: (t((2, 3)), (3,), t((3,)), None),
    "embedding": lambda t: (t((2, 2), DType.INT64), t((3, 4)), None),
    "conv2d": lambda t: (t((1, 2, 4, 4)), t((3, 2, 3, 3)), t((3,)), (1, 1), (1, 1), (1, 1), 1),
    "conv1d": lambda t: (t((1, 2, 5)), t((3, 2, 2)), t((3,)), (1,), "same", (1,), 1),
    "scaled_dot_product_attention": lambda t: (t((1, 2, 3, 4)), t((1, 2, 5, 4)), t((1, 2, 5, 2)), None, 0.0, True,
                                               None, False),
    "transpose": lambda t: (t((2, 3)), 0, 1),
    "permute": lambda t: (t((2, 3, 4)), (2, 0, 1)),
    "reshape": lambda t: (t((2, 3)), (3, -1)),
    "cat": lambda t: ((t((2, 3)), t((1, 3))), 0),
    "unsqueeze": lambda t: (t((2, 3)), -1),
    "squeeze": lambda t: (t((1, 3, 1)), None),
    "flatten": lambda t: (t((2, 3, 4)), 1, -1),
    "expand": lambda t: (t((3, 1)), (2, -1, 4)),
    "slice": lambda t: (t((4, 3)), 0, 1, None, 2),
    "select": lambda t: (t((4, 3)), 1, -1),
    "gather": lambda t: (t((3, 4)), 1, t((3, 2), DType.INT64)),
    "index": lambda t: (t((3, 4)), (None, t((2,), DType.INT64))),
    "split": lambda t: (t((5, 2)), 2, 0),
    "split_with_sizes": lambda t: (t((5, 2)), (1, 4), 0),
    "chunk": lambda t: (t((5, 2)), 2, 0),
    "pad": lambda t: (t((2, 3)), (1, -1, 0, 2), "constant", 1),
    "pow": lambda t: (t((2, 3)), 2),
    "cast": lambda t: (t((2, 3)), "float16"),
    "softplus": lambda t: (t((2, 3)), 1, 20),
    "hardswish": lambda t: (t((2, 3)),),
    "sum": lambda t: (t((2, 3)), (1,), False),
    "mean": lambda t: (t((2, 3)), None, True),
    "amax": lambda t: (t((2, 3)), (0, -1), False),
    "amin": lambda t: (t((2, 3)), None, True),
    "argmax": lambda t: (t((2, 3)), 1, False),
    "cumsum": lambda t: (t((2, 3)), -1, None),
    "where": lambda t: (t((2, 3)), t((3,)), 2.5),
    "masked_fill": lambda t: (t((2, 3)), t((3,), DType.BOOL), 1),
    "clamp": lambda t: (t((2, 3)), 0, 2),
    "zeros_like": lambda t: (t((2, 3)), None),
    "ones_like": lambda t: (t(()), "int32"),
    "full_like": lambda t: (t((0, 3)), 1, None),
    # creation ops without a tensor: the dtype under test is their dtype attribute
    "zeros": lambda t: ((2, 3), _dtype_name(t), "cpu"),
    "ones": lambda t: ((0,), _dtype_name(t), "cpu"),
    "full": lambda t: ((), 1, _dtype_name(t), "cpu"),
    "arange": lambda t: (1, 7, 2, _dtype_name(t), "cpu"),
    "max_pool2d": lambda t: (t((1, 2, 5, 5)), (3, 3), (2, 2), (1, 1), (1, 1), True),
    "avg_pool2d": lambda t: (t((1, 2, 5, 5)), (3, 3), None, (1, 1), False, False, None),
    "adaptive_avg_pool2d": lambda t: (t((2, 5, 5)), (2, 3)),
    "group_norm": lambda t: (t((2, 4, 3)), 2, t((4,)), t((4,)), 1e-5),
    "batch_norm": lambda t: (t((2, 3, 4)), t((3,)), t((3,)), t((3,)), None, False, 0.1, 1e-5),
}  # fmt: skip


def _dtype_name(t: Factory) -> str:
    """The dtype under test, as a creation op's dtype attribute takes it."""
    made = t(())
    return (made.dtype if isinstance(made, TensorMeta) else TensorMeta.of(made).dtype).value


def _meta_factory(dtype: DType) -> Factory:
    return lambda shape, fixed=None: TensorMeta(shape, fixed or dtype)


def _array_factory(dtype: DType) -> Factory:
    def make(shape: tuple[int, ...], fixed: DType | None = None) -> Any:
        wanted = fixed or dtype
        data = numpy.ones(shape) if wanted is not DType.INT64 or fixed is None else numpy.zeros(shape)
        if wanted is DType.BFLOAT16:
            torch = pytest.importorskip("torch")
            return torch.from_numpy(data).to(torch.bfloat16)
        return data.astype(wanted.value)

    return make


def test_every_builtin_op_has_a_sample():
    assert set(SAMPLES) == {c.name for c in BUILTIN_CONTRACTS} == set(BUILTIN_DTYPES) == set(plugin.KERNELS)


def test_backend_spec():
    spec = plugin.opcore_backend()
    assert (spec.name, spec.version, spec.priority) == ("reference", opcore.__version__, 0)
    assert spec.device_types == (DeviceType.CPU,)
    assert spec.description == "numpy, float64 inside"
    assert spec.check_availability() is True


@pytest.mark.parametrize("op", sorted(SAMPLES))
def test_one_numpy_kernel_per_op_for_exactly_the_accepted_dtypes(op):
    kernels = REGISTRY.kernels_of(op)
    assert len(kernels) == 1
    kernel = kernels[0]
    assert kernel.backend == "reference" and kernel.array_kind.value == "numpy"
    assert kernel.device_type is DeviceType.CPU and kernel.checker is None
    assert kernel.dtypes == BUILTIN_DTYPES[op]
    assert kernel.source.startswith("opcore.reference.")
    if DType.FLOAT32 in kernel.dtypes:
        assert DType.BFLOAT16 in kernel.dtypes


@pytest.mark.parametrize("op", sorted(SAMPLES))
@pytest.mark.parametrize("dtype", list(DType))
def test_dtype_table_matches_the_meta_function(op, dtype):
    contract = CONTRACTS[op]
    accepted = True
    try:
        contract.meta(*SAMPLES[op](_meta_factory(dtype)))
    except DTypeError:
        accepted = False
    assert accepted == (dtype in BUILTIN_DTYPES[op])


@pytest.mark.parametrize(
    ("op", "dtype"), [(op, dtype) for op in sorted(SAMPLES) for dtype in DType if dtype in BUILTIN_DTYPES[op]]
)
def test_every_accepted_dtype_runs_on_the_kernel(op, dtype):
    call_bound(op, SAMPLES[op](_array_factory(dtype)))  # checks the result's shape and dtype against the meta


def test_float16_stays_float16_and_float32_stands_in_for_bfloat16():
    x = numpy.ones((2, 3), "float16")
    assert call_bound("gelu", (x, "none")).dtype == numpy.float16
    assert call_bound("linear", (x, x, None)).dtype == numpy.float16
    # what a bfloat16 torch tensor looks like to a numpy kernel: float32, and float32 comes back
    fn = REGISTRY.ranked("softmax")[(DeviceType.CPU, DType.BFLOAT16)][0].function()
    assert fn(numpy.ones((2, 3), "float32"), -1).dtype == numpy.float32


def test_integer_math_is_exact():
    big = numpy.array([2**53 + 1, -(2**53) - 1], dtype="int64")
    numpy.testing.assert_array_equal(call_bound("add", (big, big, 1)), big * 2)
    numpy.testing.assert_array_equal(call_bound("matmul", (big, numpy.array([1, 1]))), numpy.array(0))
    numpy.testing.assert_array_equal(call_bound("div", (big, 3, "floor")), big // 3)


def test_no_numpy_warnings_leak(recwarn):
    x = numpy.array([0.0, 1e30, -1e30, numpy.inf, numpy.nan], "float32")
    for op, args in [
        ("exp", (x,)),
        ("div", (x, 0.0, None)),
        ("mul", (numpy.array([6e4, -6e4, numpy.inf], "float16"), 1e10)),
        ("softmax", (x, 0)),
        ("sigmoid", (-x,)),
        ("layer_norm", (x, (5,), None, None, 1e-5)),
    ]:
        call_bound(op, args)
    assert not recwarn.list  # (pytest's filterwarnings=error would also turn any into a failure)


def test_kernel_errors_are_opcore_errors():
    with pytest.raises(OpcoreError, match=r"embedding\(\): argument 'input' expected indices in \[0, 2\]"):
        call_bound("embedding", (numpy.array([5]), numpy.ones((3, 2)), None))


def test_importing_the_plugin_does_not_import_torch():
    code = "import sys, opcore.reference.plugin; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def _installed_entry_point() -> importlib.metadata.EntryPoint | None:
    found = [ep for ep in importlib.metadata.entry_points(group="opcore.backends") if ep.name == "reference"]
    return found[0] if found else None


@pytest.mark.skipif(_installed_entry_point() is None, reason="opcore is not installed (pip install -e .)")
def test_entry_point_and_discovery():
    assert _installed_entry_point().value == "opcore.reference.plugin"
    assert any(r.name == "reference" and r.status.value == "loaded" for r in opcore.backends())
    x = numpy.arange(6.0, dtype="float32").reshape(2, 3)
    result = opcore.run("softmax", x, -1, backend="reference")
    numpy.testing.assert_allclose(result, call_bound("softmax", (x, -1)))


def test_batched_linear_with_no_input_features():
    # regression: reshape(-1, 0) cannot infer the batch size when K == 0
    y = call("linear", numpy.ones((2, 3, 0), numpy.float32), numpy.ones((4, 0), numpy.float32))
    assert y.shape == (2, 3, 4) and not y.any()
