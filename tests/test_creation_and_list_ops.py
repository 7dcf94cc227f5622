"""Two shapes of op the new built-in ops need, checked with in-process plugin contracts:

- creation ops, without a tensor argument (``zeros(int[] size, *, str? dtype=None, str
  device="cpu")``): the contract names its dtype attribute (``dtype_arg``), its meta function
  returns the output with the dtype and device asked for, and those pick the kernel; the result
  is a numpy array on the CPU;
- list results (``-> Tensor[]``, as split/chunk): the meta returns one TensorMeta per output, the
  kernel a sequence of arrays, and the caller gets a tuple, each converted back to its kind.
"""

from __future__ import annotations

import types

import numpy
import pytest

import opcore
from opcore import BackendSpec, DeviceType
from opcore.contracts import define_op
from opcore.errors import ArgumentError, NoKernelError, ShapeError
from opcore.types import CPU, Device, DType, TensorMeta

torch = pytest.importorskip("torch", reason="the list results are converted to torch tensors too")

pytestmark = pytest.mark.usefixtures("only_reference")


def zeros_meta(size: tuple[int, ...], dtype: str | None, device: str) -> TensorMeta:
    for i, s in enumerate(size):
        if s < 0:
            raise ShapeError(arg=f"size[{i}]", expected="a size >= 0", found=str(s))
    return TensorMeta(tuple(size), DType.FLOAT32 if dtype is None else DType.parse(dtype), Device.parse(device))


def split_meta(x: TensorMeta, size: int, dim: int) -> tuple[TensorMeta, ...]:
    if size <= 0:
        raise ArgumentError(arg="size", expected="a size > 0", found=str(size))
    # as torch.split: an empty dim gives one empty piece
    pieces = [min(size, x.shape[dim] - start) for start in range(0, x.shape[dim], size)] or [0]
    return tuple(TensorMeta((*x.shape[:dim], p, *x.shape[dim + 1 :]), x.dtype, x.device) for p in pieces)


ZEROS = define_op(
    'toy.zeros(int[] size, *, str? dtype=None, str device="cpu") -> Tensor',
    meta=zeros_meta,
    dtype_arg="dtype",
    dtypes=("float32", "int64"),
)
SPLIT = define_op("toy.split(Tensor x, int size, int dim=0) -> Tensor[]", meta=split_meta)


def numpy_zeros(size, dtype, device):
    return numpy.zeros(size, dtype or "float32")


def numpy_split(x, size, dim):
    return tuple(numpy.split(x, range(size, x.shape[dim], size), axis=dim))


@pytest.fixture
def toy_plugin():
    def opcore_backend() -> BackendSpec:
        return BackendSpec(name="toy", version="0", priority=50, device_types=(DeviceType.CPU,))

    def opcore_register_contracts(registrar: opcore.Registrar) -> None:
        registrar.add_contract(ZEROS)
        registrar.add_contract(SPLIT)

    def opcore_register_kernels(registrar: opcore.Registrar) -> None:
        registrar.add_kernel("toy.zeros", numpy_zeros, dtypes=["float32", "int64"])
        registrar.add_kernel("toy.split", numpy_split, dtypes=["float32", "int64"])

    functions = (opcore_backend, opcore_register_contracts, opcore_register_kernels)
    hooks = {f.__name__: opcore.hookimpl(f) for f in functions}
    opcore.register_plugin(types.SimpleNamespace(__name__="toy", **hooks))
    yield
    opcore.unregister_plugin("toy")


def test_a_creation_op_takes_its_dtype_and_device_from_attributes(toy_plugin):
    assert ZEROS.creates and not SPLIT.creates
    default = opcore.run("toy.zeros", (2, 3))
    assert isinstance(default, numpy.ndarray) and default.dtype == numpy.float32 and default.shape == (2, 3)
    ints = opcore.run("toy.zeros", [4], dtype="int64")
    assert ints.dtype == numpy.int64 and ints.tolist() == [0, 0, 0, 0]
    assert opcore.run("toy.zeros", ()).shape == ()
    assert opcore.infer_meta("toy.zeros", (5,), dtype="int64") == TensorMeta((5,), DType.INT64, CPU)
    assert opcore.explain("toy.zeros", (2,), dtype="int64").chosen == "toy"


def test_a_creation_op_refuses_what_no_kernel_takes(toy_plugin):
    with pytest.raises(NoKernelError, match="float16"):
        opcore.run("toy.zeros", (2,), dtype="float16")
    with pytest.raises(NoKernelError, match="cuda"):
        opcore.run("toy.zeros", (2,), device="cuda")
    with pytest.raises(ShapeError, match=r"toy.zeros\(\): argument 'size\[0\]'"):
        opcore.run("toy.zeros", (-1,))


def test_define_op_without_a_tensor_needs_a_str_dtype_attribute():
    with pytest.raises(ArgumentError, match="has no tensor argument"):
        define_op("toy.ones(int[] size) -> Tensor", meta=zeros_meta)
    with pytest.raises(ArgumentError, match="dtype_arg"):
        define_op("toy.ones(int[] size, int dtype=0) -> Tensor", meta=zeros_meta, dtype_arg="dtype")


def test_a_list_result_comes_back_as_a_tuple_of_the_callers_kind(toy_plugin):
    assert SPLIT.schema.returns == ("Tensor[]",)
    x = numpy.arange(10, dtype=numpy.float32).reshape(5, 2)
    pieces = opcore.run("toy.split", x, 2)
    assert isinstance(pieces, tuple) and [p.shape for p in pieces] == [(2, 2), (2, 2), (1, 2)]
    numpy.testing.assert_array_equal(numpy.concatenate(pieces), x)
    metas = opcore.infer_meta("toy.split", TensorMeta((5, 2), DType.FLOAT32), 3)
    assert [m.shape for m in metas] == [(3, 2), (2, 2)]
    as_torch = opcore.run("toy.split", torch.from_numpy(x), 1, dim=1)
    assert all(isinstance(p, torch.Tensor) for p in as_torch) and [tuple(p.shape) for p in as_torch] == [(5, 1)] * 2
    (empty,) = opcore.run("toy.split", numpy.zeros((0, 2), numpy.float32), 2)
    assert empty.shape == (0, 2)
