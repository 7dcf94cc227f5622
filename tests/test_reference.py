"""The reference backend: its spec, its registrations, and that every dtype a contract accepts
runs on its kernel. Runs without torch (bfloat16 cases need it and skip otherwise).
"""

from __future__ import annotations

import functools
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
from opcore.testing import Sample, TensorInput, builtin_entries, entry, samples_of
from opcore.types import DeviceType, DType, TensorMeta

# The samples are the conformance kit's (opcore.testing), the one sample table: every op has an
# entry, with samples in every dtype its contract accepts (tests/test_testing_kit.py checks that).
OPS = sorted(c.name for c in BUILTIN_CONTRACTS)


def _make(value: Any, make: Callable[[TensorInput], Any]) -> Any:
    if isinstance(value, TensorInput):
        return make(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_make(v, make) for v in value)
    return value


def _call_of(sample: Sample, make: Callable[[TensorInput], Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return tuple(_make(v, make) for v in sample.args), {k: _make(v, make) for k, v in sample.kwargs.items()}


def _bound_metas(op: str, sample: Sample, retype: Callable[[DType], DType] = lambda d: d) -> tuple[Any, ...]:
    """The sample's arguments in schema order, tensors as TensorMeta with their dtype passed through ``retype``."""
    args, kwargs = _call_of(sample, lambda t: TensorMeta(t.shape, retype(t.dtype)))
    return CONTRACTS[op].schema.bind(args, kwargs, metas=True)


def _picking_dtype(op: str, bound: tuple[Any, ...]) -> DType:
    """The dtype that picks the kernel: of the contract's dtype argument (a creation op's dtype attribute)."""
    contract = CONTRACTS[op]
    value = bound[contract.dtype_position]
    if isinstance(value, tuple):
        value = next(v for v in value if isinstance(v, TensorMeta))
    return DType.parse(value) if contract.creates else value.dtype


def _kit_samples(op: str, dtype: DType) -> list[Sample]:
    return _samples_by_dtype(op).get(dtype, [])


@functools.cache
def _samples_by_dtype(op: str) -> dict[DType, list[Sample]]:
    found: dict[DType, list[Sample]] = {}
    for sample in samples_of(entry(op)):
        found.setdefault(_picking_dtype(op, _bound_metas(op, sample)), []).append(sample)
    return found


def _retyped(op: str, dtype: DType) -> tuple[Any, ...]:
    """A kit sample of the op (float32 where it has one) as metas in ``dtype``: the dtype argument and the
    tensors that share its dtype in the sample take ``dtype`` (a creation op: its dtype attribute)."""
    contract = CONTRACTS[op]
    base = next((s for s in _kit_samples(op, DType.FLOAT32)), None) or next(iter(samples_of(entry(op))))
    was = _picking_dtype(op, _bound_metas(op, base))
    bound = list(_bound_metas(op, base, lambda d: dtype if d is was else d))
    if contract.creates:
        bound[contract.dtype_position] = dtype.value
    return tuple(bound)


def test_every_builtin_op_has_a_kit_entry_and_a_kernel():
    assert {e.op for e in builtin_entries()} == set(OPS) == set(BUILTIN_DTYPES) == set(plugin.KERNELS)


def test_backend_spec():
    spec = plugin.opcore_backend()
    assert (spec.name, spec.version, spec.priority) == ("reference", opcore.__version__, 0)
    assert spec.device_types == (DeviceType.CPU,)
    assert spec.description == "numpy, float64 inside"
    assert spec.check_availability() is True


@pytest.mark.parametrize("op", OPS)
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


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", list(DType))
def test_dtype_table_matches_the_meta_function(op, dtype):
    """The kit's samples of an accepted dtype pass the meta function; a kit sample made of a dtype the
    table leaves out is refused with a DTypeError."""
    contract = CONTRACTS[op]
    if dtype in BUILTIN_DTYPES[op]:
        samples = _kit_samples(op, dtype)
        assert samples, f"the kit has no {dtype.value} sample of {op}"
        for sample in samples:
            contract.meta(*_bound_metas(op, sample))
    else:
        with pytest.raises(DTypeError):
            contract.meta(*_retyped(op, dtype))


@pytest.mark.parametrize(("op", "dtype"), [(op, dtype) for op in OPS for dtype in DType if dtype in BUILTIN_DTYPES[op]])
def test_every_accepted_dtype_runs_on_the_kernel(op, dtype):
    samples = _kit_samples(op, dtype)
    assert samples, f"the kit has no {dtype.value} sample of {op}"
    if dtype is DType.BFLOAT16 or any(t.dtype is DType.BFLOAT16 for t in samples[0].tensors()):
        pytest.importorskip("torch")
        args, kwargs = _call_of(samples[0], lambda t: t.to_torch())
    else:
        args, kwargs = _call_of(samples[0], lambda t: t.to_numpy())
    call(op, *args, **kwargs)  # checks the result's shape and dtype against the meta


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
