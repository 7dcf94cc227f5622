"""Creation contracts that take their shape (and device) from a tensor: zeros_like, ones_like,
full_like. The ops without a tensor (zeros, ones, full, arange) are not built-in yet: graphs fold
them into constants, and the kit cannot yet place a tensor-less op on a device backend.

>>> from opcore.types import TensorMeta, DType
>>> FULL_LIKE.meta(TensorMeta((2, 3), DType.FLOAT32), 7, "int8").dtype
<DType.INT8: 'int8'>
"""

from __future__ import annotations

from opcore.contracts import OpContract, define_op
from opcore.meta import ALL_DTYPES
from opcore.opset.elementwise import check_fits
from opcore.types import DType, TensorMeta

__all__ = ["CONTRACTS", "FULL_LIKE", "ONES_LIKE", "ZEROS_LIKE"]


def like_meta(x: TensorMeta, dtype: str | None) -> TensorMeta:
    """x's shape and device; dtype if given, else x's."""
    return TensorMeta(x.shape, x.dtype if dtype is None else DType.parse(dtype), x.device)


def full_like_meta(x: TensorMeta, fill_value: bool | int | float, dtype: str | None) -> TensorMeta:
    """As zeros_like; fill_value must convert to the result dtype without overflow (floats truncate into integers)."""
    out = like_meta(x, dtype)
    check_fits("fill_value", fill_value, out.dtype)
    return out


ZEROS_LIKE = define_op(
    "zeros_like(Tensor x, *, str? dtype=None) -> Tensor",
    meta=like_meta,
    dtypes=ALL_DTYPES,
    family="creation",
    doc="Zeros of x's shape, in dtype (default: x's); mirrors torch.zeros_like.",
    tags=("creation",),
)
ONES_LIKE = define_op(
    "ones_like(Tensor x, *, str? dtype=None) -> Tensor",
    meta=like_meta,
    dtypes=ALL_DTYPES,
    family="creation",
    doc="Ones of x's shape, in dtype (default: x's); mirrors torch.ones_like.",
    tags=("creation",),
)
FULL_LIKE = define_op(
    "full_like(Tensor x, Scalar fill_value, *, str? dtype=None) -> Tensor",
    meta=full_like_meta,
    dtypes=ALL_DTYPES,
    family="creation",
    doc="fill_value in x's shape, in dtype (default: x's; floats truncate into integers); mirrors torch.full_like.",
    tags=("creation",),
)

CONTRACTS: tuple[OpContract, ...] = (ZEROS_LIKE, ONES_LIKE, FULL_LIKE)
