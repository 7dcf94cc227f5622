"""The argument forms a torch user passes, on every loaded backend, against torch's own answer:
dtype as torch.dtype or numpy dtype, device as torch.device, softmax's dtype=, pad's modes,
max_pool2d(return_indices=True), split by a list of sizes, int32 gather indices, one-element
pooling lists, None in adaptive_avg_pool2d's size. A backend that cannot declines with its reason
(a NoKernelError naming it); every other result matches torch's."""

from __future__ import annotations

import math

import numpy
import pytest

import opcore
from opcore.errors import ArgumentError, DeviceError, DTypeError, NoKernelError, ShapeError

torch = pytest.importorskip("torch")
F = torch.nn.functional

# the host backends (these inputs are CPU tensors; tests/test_opinfo.py moves its samples to the cuda backend's GPU)
BACKENDS = [
    r.name
    for r in opcore.backends()
    if r.status.value == "loaded" and r.name != "example" and r.backend and "cpu" in r.backend.device_types
]
# what a backend declines on purpose, with the words of its reason
DECLINES = {
    ("openvino", "pad-circular"): "no circular mode",
    ("openvino", "softmax-float64"): "float64",
    ("onnxruntime", "max_pool2d-indices"): "return_indices=True",
    ("openvino", "max_pool2d-indices"): "return_indices=True",
    ("openvino", "zeros-float64"): "float64",
    ("openvino", "cumsum-float64"): "float64",
}

x = torch.randn(2, 3, 6, 7, generator=torch.Generator().manual_seed(0))
i32 = torch.zeros(2, 3, 4, 7, dtype=torch.int32)
f64, half = torch.float64, x.half()
# case -> (op, args, kwargs) as opcore takes them, and torch's call of the same
CASES = {
    "zeros-float64": (("zeros", ((2, 3),), {"dtype": f64, "device": torch.device("cpu")}),
                      lambda: torch.zeros(2, 3, dtype=f64)),
    "arange-numpy-int32": (("arange", (5,), {"dtype": numpy.int32}), lambda: torch.arange(5, dtype=torch.int32)),
    "full-like-int8": (("full_like", (x, 3), {"dtype": torch.int8, "device": x.device}),
                       lambda: torch.full_like(x, 3, dtype=torch.int8)),
    "cumsum-float64": (("cumsum", (x, 1), {"dtype": f64}), lambda: torch.cumsum(x, 1, dtype=f64)),
    "cast-numpy": (("cast", (x, numpy.dtype("float16")), {}), x.half),
    "softmax-float64": (("softmax", (half, -1), {"dtype": f64}), lambda: torch.softmax(half, -1, dtype=f64)),
    "log-softmax-float32": (("log_softmax", (half, 1), {"dtype": torch.float32}),
                            lambda: torch.log_softmax(half, 1, dtype=torch.float32)),
    "pad-reflect": (("pad", (x, (2, 1, 1, 3)), {"mode": "reflect"}), lambda: F.pad(x, (2, 1, 1, 3), mode="reflect")),
    "pad-replicate": (("pad", (x[0], (2, -1)), {"mode": "replicate"}), lambda: F.pad(x[0], (2, -1), mode="replicate")),
    "pad-circular": (("pad", (x[0], (3, -2)), {"mode": "circular"}), lambda: F.pad(x[0], (3, -2), mode="circular")),
    "max_pool2d-indices": (("max_pool2d", (x, 3, 2, 1), {"return_indices": True}),
                           lambda: F.max_pool2d(x, 3, 2, 1, return_indices=True)),
    "split-sizes": (("split", (x, [1, 4, 2], -1), {}), lambda: torch.split(x, [1, 4, 2], -1)),
    "gather-int32": (("gather", (x, 2, i32), {}), lambda: torch.gather(x, 2, i32)),
    "avg_pool2d-one-element": (("avg_pool2d", (x, [3], [2], [1]), {}), lambda: F.avg_pool2d(x, [3], [2], [1])),
    "adaptive-none": (("adaptive_avg_pool2d", (x, (None, 3)), {}), lambda: F.adaptive_avg_pool2d(x, (None, 3))),
}  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_torch_style_argument(backend: str, case: str) -> None:
    (op, args, kwargs), expected = CASES[case]
    declined = DECLINES.get((backend, case))
    if declined is not None:
        with pytest.raises(NoKernelError, match=declined):
            opcore.run(op, *args, backend=backend, **kwargs)
        return
    got, want = opcore.run(op, *args, backend=backend, **kwargs), expected()
    for value, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        g = torch.as_tensor(value)
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-3 if w.dtype == torch.float16 else 1.3e-6, atol=1e-5, equal_nan=True)


def test_dtype_and_device_forms_bind_to_one_name() -> None:
    schema = opcore.runtime.runtime().ensure_loaded().registry.contract("zeros").schema
    for form in (torch.float32, numpy.float32, numpy.dtype("float32"), "fp32", opcore.DType.FLOAT32):
        assert schema.bind(((2,),), {"dtype": form})[1] == "float32"
    assert schema.bind(((2,),), {"device": torch.device("cpu")})[2] == "cpu"
    with pytest.raises(ArgumentError, match=r"zeros\(\): argument 'dtype' expected one of"):
        opcore.run("zeros", (2,), dtype=torch.complex64)
    with pytest.raises(ArgumentError, match="argument 'dtype' expected a dtype"):
        opcore.run("zeros", (2,), dtype=True)
    with pytest.raises(ArgumentError, match="argument 'device' expected"):
        opcore.run("zeros", (2,), device=3)


def test_torch_style_errors_are_opcore_errors() -> None:
    with pytest.raises(DeviceError, match="argument 'device' expected None or x's device"):
        opcore.run("zeros_like", x, device="cuda")
    with pytest.raises(DTypeError, match="argument 'dtype' expected a floating dtype"):
        opcore.run("softmax", x, 0, dtype=torch.int64)
    with pytest.raises(ArgumentError, match="no fill value for mode='reflect'"):
        opcore.run("pad", x[0], (1, 1), "reflect", 1.0)
    with pytest.raises(ArgumentError, match="no wrapping around more than once"):
        opcore.run("pad", x[0], (8, 0), mode="circular")
    with pytest.raises(ShapeError, match="at most 64 dimensions"):
        opcore.run("amax", torch.zeros([1] * 65), [-1], backend="cpu")  # torch's own raw RuntimeError before


def test_numpy_kernels_decline_tensors_beyond_numpy_dims() -> None:
    with pytest.raises(NoKernelError, match="numpy holds at most 64 dims"):
        opcore.run("relu", torch.zeros([1] * 65), backend="reference")
    assert opcore.run("relu", torch.zeros([1] * 65)).ndim == 65  # a torch kernel takes it


def test_softmax_dtype_casts_a_floating_x_and_refuses_an_integer_one_with_the_fix() -> None:
    torch.testing.assert_close(opcore.run("softmax", half, -1, torch.float64), torch.softmax(half, -1, dtype=f64))
    with pytest.raises(DTypeError, match="argument 'x' expected dtype in"):
        opcore.run("softmax", torch.arange(6).reshape(2, 3), -1, dtype=torch.float32)
    assert math.isclose(float(opcore.run("softmax", x, -1, numpy.float64).sum()), 2 * 3 * 6)


def test_a_torch_dtype_argument_takes_the_cached_path() -> None:
    """dtype=torch.float32 is part of the signature's key once seen, not bound again on every call."""
    from opcore import dispatch

    opcore.run("softmax", x, -1, dtype=torch.float32)
    opcore.run("softmax", x, -1, dtype=torch.float32)
    key = dispatch._positional_key("softmax", None, None, (x, -1, torch.float32))
    assert key is not None and key in dispatch._POSITIONAL
    assert opcore.run("softmax", x, -1, dtype=torch.float64).dtype == torch.float64  # another dtype, another key
