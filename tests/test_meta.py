"""Meta-function building blocks: checks, broadcasting, PyTorch's type promotion."""

from __future__ import annotations

import itertools

import pytest

from opcore.errors import ArgumentError, DeviceError, DTypeError, ShapeError
from opcore.meta import (
    broadcast_shapes,
    check_choice,
    check_floating,
    check_rank,
    check_same_dtype,
    common_device,
    normalize_dim,
    promote_types,
    result_type,
    unary_promote_to_float,
)
from opcore.types import Device, DeviceType, DType, TensorMeta


def m(shape, dtype=DType.FLOAT32, device=None) -> TensorMeta:
    return TensorMeta(shape, dtype, device or Device(DeviceType.CPU))


def test_promotion_matches_torch_for_every_pair() -> None:
    torch = pytest.importorskip("torch")
    for a, b in itertools.product(DType, DType):
        assert promote_types(a, b).to_torch() == torch.promote_types(a.to_torch(), b.to_torch()), (a, b)
        for shapes in (((2,), ()), ((), (2,)), ((), ())):
            expected = torch.result_type(
                torch.zeros(shapes[0], dtype=a.to_torch()), torch.zeros(shapes[1], dtype=b.to_torch())
            )
            assert result_type(m(shapes[0], a), m(shapes[1], b)).to_torch() == expected, (a, b, shapes)
        for scalar in (True, 2, 2.5):
            expected = torch.result_type(torch.zeros(2, dtype=a.to_torch()), scalar)
            assert result_type(m((2,), a), scalar).to_torch() == expected, (a, scalar)


def test_checks_raise_the_right_errors() -> None:
    with pytest.raises(ShapeError, match="argument 'w' expected a 2-D tensor, found a 3-D tensor of shape"):
        check_rank("w", m((1, 2, 3)), 2)
    with pytest.raises(ShapeError, match="expected a 1-D or 2-D tensor"):
        check_rank("w", m(()), (1, 2))
    with pytest.raises(DTypeError, match=r"argument 'x' expected dtype in \(float16, bfloat16, float32, float64\)"):
        check_floating("x", m((2,), DType.INT64))
    with pytest.raises(DTypeError, match="argument 'w' expected the dtype of 'x' \\(float32\\), found float64"):
        check_same_dtype(("x", m((2,))), ("w", m((2,), DType.FLOAT64)), ("b", None))
    with pytest.raises(ArgumentError, match="argument 'approximate' expected one of 'none', 'tanh', found 'fast'"):
        check_choice("approximate", "fast", ("none", "tanh"))


def test_dims_and_broadcasting() -> None:
    assert normalize_dim("dim", -1, 3) == 2 and normalize_dim("dim", 0, 0) == 0
    with pytest.raises(ShapeError, match=r"a dim in the range \[-2, 1\] for a 2-D tensor, found 2"):
        normalize_dim("dim", 2, 2)
    assert broadcast_shapes(("x", (4, 1, 3)), ("y", (2, 1))) == (4, 2, 3)
    with pytest.raises(ShapeError, match=r"found x \(2, 3\), other \(4,\)"):
        broadcast_shapes(("x", (2, 3)), ("other", (4,)))


def test_common_device() -> None:
    cuda = Device(DeviceType.CUDA, 0)
    assert common_device([("x", m((1,), device=cuda)), ("y", m((1,), device=cuda))]) == cuda
    with pytest.raises(DeviceError, match="argument 'y' expected the device of 'x' \\(cuda:0\\), found cpu"):
        common_device([("x", m((1,), device=cuda)), ("y", m((1,)))])


def test_unary_promotion() -> None:
    assert unary_promote_to_float(m((2,), DType.INT64)).dtype is DType.FLOAT32
    assert unary_promote_to_float(m((2,), DType.FLOAT16)).dtype is DType.FLOAT16
