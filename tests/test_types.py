"""Types: dtypes and their conversions, devices, tensor metadata, and what `import opcore` imports."""

from __future__ import annotations

import subprocess
import sys

import numpy
import pytest

from opcore.errors import ArgumentError
from opcore.types import CPU, ArrayKind, Device, DeviceType, DType, TensorMeta, array_kind_of, contiguous_strides


def test_dtype_parse_accepts_names_aliases_numpy_and_torch() -> None:
    assert DType.parse("bf16") is DType.BFLOAT16
    assert DType.parse("torch.float16") is DType.FLOAT16
    assert DType.parse(numpy.float64) is DType.FLOAT64
    assert DType.parse(numpy.dtype("int8")) is DType.INT8
    with pytest.raises(ArgumentError, match="argument 'dtype' expected one of bool, uint8"):
        DType.parse("float8")
    with pytest.raises(ArgumentError, match="numpy dtype opcore supports"):
        DType.from_numpy(numpy.dtype("complex64"))


def test_dtype_properties() -> None:
    assert DType.BFLOAT16.is_floating and not DType.INT32.is_floating
    assert DType.UINT8.is_integer and not DType.BOOL.is_integer
    assert DType.FLOAT16.itemsize == 2 and str(DType.INT64) == "int64"


def test_bfloat16_as_numpy() -> None:
    """numpy has no bfloat16: ml_dtypes' stands for it (graph runtimes take bfloat16 arrays so); without
    ml_dtypes the error says what to install."""
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes gives numpy its bfloat16")
    assert DType.BFLOAT16.to_numpy() == numpy.dtype(ml_dtypes.bfloat16)
    assert DType.from_numpy(numpy.dtype(ml_dtypes.bfloat16)) is DType.BFLOAT16
    assert DType.parse(ml_dtypes.bfloat16) is DType.BFLOAT16


def test_bfloat16_without_ml_dtypes(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import ml_dtypes raises ImportError
    with pytest.raises(ArgumentError, match="pip install ml_dtypes"):
        DType.BFLOAT16.to_numpy()


def test_dtype_round_trips_with_torch() -> None:
    torch = pytest.importorskip("torch")
    for dtype in DType:
        assert DType.from_torch(dtype.to_torch()) is dtype
        assert DType.parse(dtype.to_torch()) is dtype
    with pytest.raises(ArgumentError):
        DType.from_torch(torch.complex64)


def test_devices() -> None:
    assert Device.parse("cuda:1") == Device(DeviceType.CUDA, 1)
    assert str(Device.parse("cpu")) == "cpu" and Device.parse(DeviceType.CPU) == CPU
    with pytest.raises(ArgumentError, match="argument 'device' expected 'cpu', 'cuda', 'cuda:N'"):
        Device.parse("tpu:0")


def test_tensor_meta_of_numpy_uses_element_strides() -> None:
    array = numpy.zeros((2, 3), numpy.float32).T
    meta = TensorMeta.of(array)
    assert meta.shape == (3, 2) and meta.strides == (1, 3) and not meta.is_contiguous
    assert meta.describe() == "float32[3, 2] on cpu"
    assert meta.ndim == 2 and meta.numel == 6
    assert TensorMeta((0, 4), DType.BOOL).numel == 0


def test_tensor_meta_of_torch() -> None:
    torch = pytest.importorskip("torch")
    meta = TensorMeta.of(torch.zeros((2, 3), dtype=torch.bfloat16)[:, ::2])
    assert meta.shape == (2, 2) and meta.dtype is DType.BFLOAT16 and meta.strides == (3, 2)
    assert TensorMeta.of(torch.zeros(2, device="meta")).device == Device(DeviceType.META)
    with pytest.raises(ArgumentError, match="expected a numpy.ndarray or a torch.Tensor"):
        TensorMeta.of([1, 2])


def test_contiguous_strides_and_array_kinds() -> None:
    assert contiguous_strides((2, 0, 4)) == (4, 4, 1)
    assert array_kind_of(numpy.zeros(1)) is ArrayKind.NUMPY
    assert array_kind_of(numpy.float32(1)) is None


def test_import_opcore_imports_no_runtime() -> None:
    code = (
        "import sys, opcore, numpy; opcore.run('relu', numpy.ones(3, 'float32'), backend='reference'); "
        "print(sorted(m for m in ('torch', 'onnxruntime', 'openvino', 'onnx') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_empty_tensor_is_contiguous_whatever_its_strides() -> None:
    empty = numpy.zeros((3, 0, 2), "float32")  # numpy gives it zero strides
    assert TensorMeta.of(empty).is_contiguous and not TensorMeta.of(numpy.zeros((2, 3)).T).is_contiguous


def test_a_numpy_bfloat16_array_is_refused_by_single_calls_with_the_fix() -> None:
    """ml_dtypes' bfloat16 crosses to graph runtimes only: numpy kernels would compute on it as if it
    were an integer (its numpy kind is "V"), so a single call refuses it and says what to pass."""
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes gives numpy its bfloat16")
    import opcore
    from opcore.types import TensorMeta

    x = numpy.asarray([[1.5, -2.25]], dtype=ml_dtypes.bfloat16)
    with pytest.raises(ArgumentError, match=r"numpy bfloat16 array \(ml_dtypes\).*view\(torch.bfloat16\)"):
        TensorMeta.of(x)
    with pytest.raises(ArgumentError, match="linear\\(\\): argument 'x'"):
        opcore.run("linear", x, x, backend="reference")
