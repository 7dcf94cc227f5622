"""Reduction contracts: sum, mean, amax, amin over a dim list (None: every dim), argmax, cumsum.

PyTorch's rules: sum of integers or bools gives int64, mean takes floating dtypes only, amax and
amin keep the dtype and refuse an empty reduced dim, as argmax does (int64 indices).

>>> from opcore.types import TensorMeta, DType
>>> SUM.meta(TensorMeta((2, 3, 4), DType.INT32), (0, -1), True)
TensorMeta(shape=(1, 3, 1), dtype=<DType.INT64: 'int64'>, device=Device(type=<DeviceType.CPU: 'cpu'>, index=None))
"""

from __future__ import annotations

from functools import partial

from opcore.contracts import OpContract, define_op
from opcore.errors import ArgumentError, ShapeError
from opcore.meta import ALL_DTYPES, FLOATING, check_dtype, check_max_rank, normalize_dim, shape_text
from opcore.types import DType, TensorMeta

# every op defined here is of this module's family (opcore.opset.family_contracts checks it)
define = partial(define_op, family="reduction")

__all__ = ["AMAX", "AMIN", "ARGMAX", "CONTRACTS", "CUMSUM", "MEAN", "SUM", "reduced_axes", "sum_dtype"]


def reduced_axes(x: TensorMeta, dim: tuple[int, ...] | None) -> tuple[int, ...]:
    """The non-negative dims ``dim`` reduces: every dim for None or [] (as torch), each once.

    >>> reduced_axes(TensorMeta((2, 3), DType.FLOAT32), (-1,))
    (1,)
    """
    check_max_rank("x", x)
    if not dim:
        return tuple(range(x.ndim))
    axes = tuple(normalize_dim("dim", d, x.ndim) for d in dim)
    for i, axis in enumerate(axes):
        if axis in axes[:i]:
            raise ArgumentError(
                arg="dim",
                expected="each dim at most once",
                found=f"dim {axis} appears more than once in {list(dim)}",
                fix="list each dim to reduce once",
            )
    return axes if x.ndim else ()


def _reduced(x: TensorMeta, axes: tuple[int, ...], keepdim: bool, dtype: DType) -> TensorMeta:
    if keepdim:
        shape = tuple(1 if d in axes else size for d, size in enumerate(x.shape))
    else:
        shape = tuple(size for d, size in enumerate(x.shape) if d not in axes)
    return TensorMeta(shape, dtype, x.device)


def sum_dtype(dtype: DType) -> DType:
    """torch's result dtype of sum and cumsum: int64 for integers and bools, else the input's."""
    return dtype if dtype in FLOATING else DType.INT64


def _check_nonempty(x: TensorMeta, axes: tuple[int, ...], what: str) -> None:
    for axis in axes:
        if x.shape[axis] == 0:
            raise ShapeError(
                arg="x",
                expected=f"a non-empty dim {axis} to reduce ({what} of no values has no answer)",
                found=f"shape {shape_text(x.shape)}",
                fix="reduce over dims of size >= 1, or check for an empty input first",
            )


def sum_meta(x: TensorMeta, dim: tuple[int, ...] | None, keepdim: bool) -> TensorMeta:
    """Reduced shape; integers and bools sum to int64."""
    return _reduced(x, reduced_axes(x, dim), keepdim, sum_dtype(x.dtype))


def mean_meta(x: TensorMeta, dim: tuple[int, ...] | None, keepdim: bool) -> TensorMeta:
    """Reduced shape, x's dtype; floating dtypes only (an empty dim gives NaN)."""
    check_dtype("x", x, FLOATING, fix="convert x to a floating dtype first (x.to(float32)), as torch.mean asks")
    return _reduced(x, reduced_axes(x, dim), keepdim, x.dtype)


def extremum_meta(x: TensorMeta, dim: tuple[int, ...] | None, keepdim: bool) -> TensorMeta:
    """Reduced shape, x's dtype; no reduced dim may be empty."""
    axes = reduced_axes(x, dim)
    _check_nonempty(x, axes, "the extremum")
    return _reduced(x, axes, keepdim, x.dtype)


def argmax_meta(x: TensorMeta, dim: int | None, keepdim: bool) -> TensorMeta:
    """int64 indices of the first largest value along dim (None: of the flattened x, keepdim
    giving all-1 dims); NaN counts as largest; no bool, no empty reduced dim."""
    check_dtype("x", x, ALL_DTYPES - {DType.BOOL}, fix="convert a bool x to uint8 first, as torch.argmax asks")
    check_max_rank("x", x)
    axes = tuple(range(x.ndim)) if dim is None else (normalize_dim("dim", dim, x.ndim),) if x.ndim else ()
    _check_nonempty(x, axes, "argmax")
    return _reduced(x, axes, keepdim, DType.INT64)


def cumsum_meta(x: TensorMeta, dim: int, dtype: str | None) -> TensorMeta:
    """Same shape; the dtype asked for (x is converted to it first), else int64 for integers and bools."""
    normalize_dim("dim", dim, x.ndim)
    out = sum_dtype(x.dtype) if dtype is None else DType.parse(dtype)
    return TensorMeta(x.shape, out, x.device)


SUM = define(
    "sum(Tensor x, int[]? dim=None, bool keepdim=False) -> Tensor",
    meta=sum_meta,
    dtypes=ALL_DTYPES,
    doc="Sum over dim (None or []: every dim); integers and bools give int64; mirrors torch.sum.",
    tags=("reduction",),
)
MEAN = define(
    "mean(Tensor x, int[]? dim=None, bool keepdim=False) -> Tensor",
    meta=mean_meta,
    dtypes=FLOATING,
    doc="Mean over dim (None or []: every dim), floating dtypes only; mirrors torch.mean.",
    tags=("reduction",),
)
AMAX = define(
    "amax(Tensor x, int[]? dim=None, bool keepdim=False) -> Tensor",
    meta=extremum_meta,
    dtypes=ALL_DTYPES,
    doc="Largest value over dim (None or []: every dim; NaN wins); mirrors torch.amax.",
    tags=("reduction",),
)
AMIN = define(
    "amin(Tensor x, int[]? dim=None, bool keepdim=False) -> Tensor",
    meta=extremum_meta,
    dtypes=ALL_DTYPES,
    doc="Smallest value over dim (None or []: every dim; NaN wins); mirrors torch.amin.",
    tags=("reduction",),
)
ARGMAX = define(
    "argmax(Tensor x, int? dim=None, bool keepdim=False) -> Tensor",
    meta=argmax_meta,
    dtypes=ALL_DTYPES - {DType.BOOL},
    doc="int64 index of the first largest value along dim (None: flattened; NaN wins); mirrors torch.argmax.",
    tags=("reduction",),
)
CUMSUM = define(
    "cumsum(Tensor x, int dim, *, ScalarType? dtype=None) -> Tensor",
    meta=cumsum_meta,
    dtypes=ALL_DTYPES,
    doc="Running sum along dim, in dtype if given, else int64 for integers and bools; mirrors torch.cumsum.",
    tags=("reduction",),
)

CONTRACTS: tuple[OpContract, ...] = (SUM, MEAN, AMAX, AMIN, ARGMAX, CUMSUM)
