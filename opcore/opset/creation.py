"""Creation contracts: zeros_like, ones_like, full_like take their shape and device from a tensor;
zeros, ones, full and arange take none (their ``dtype`` and ``device`` attributes pick the kernel).

>>> from opcore.types import TensorMeta, DType
>>> FULL_LIKE.meta(TensorMeta((2, 3), DType.FLOAT32), 7, "int8", None).dtype
<DType.INT8: 'int8'>
>>> ARANGE.meta(1, 2.5, 0.5, None, "cpu").shape, ARANGE.meta(1, 2.5, 0.5, None, "cpu").dtype
((3,), <DType.FLOAT32: 'float32'>)
"""

from __future__ import annotations

import math
from functools import partial

from opcore.contracts import OpContract, define_op
from opcore.errors import ArgumentError, DeviceError, DTypeError, ShapeError
from opcore.meta import ALL_DTYPES, INTEGRAL, NUMERIC, shape_text
from opcore.opset.elementwise import check_fits
from opcore.types import Device, DType, TensorMeta

# every op defined here is of this module's family (opcore.opset.family_contracts checks it)
define = partial(define_op, family="creation")

__all__ = [
    "ARANGE",
    "CONTRACTS",
    "FULL",
    "FULL_LIKE",
    "ONES",
    "ONES_LIKE",
    "ZEROS",
    "ZEROS_LIKE",
    "arange_bounds",
    "arange_length",
    "fill_dtype",
]

DEFAULT_FLOAT = DType.FLOAT32  # torch's default dtype (torch.get_default_dtype() unchanged)


def _check_same_device(x: TensorMeta, device: str | None) -> None:
    """torch's ``device=`` of a ``*_like`` op: None or x's own device (another one is a copy to make)."""
    if device is not None and Device.parse(device) != x.device:
        raise DeviceError(
            arg="device",
            expected=f"None or x's device ({x.device})",
            found=device,
            fix=f"create it on {device} with zeros/ones/full(x.shape, device={device!r}), or move x there first",
        )


def like_meta(x: TensorMeta, dtype: str | None, device: str | None = None) -> TensorMeta:
    """x's shape and device (``device``, torch's argument, may only name x's); dtype if given, else x's."""
    _check_same_device(x, device)
    return TensorMeta(x.shape, x.dtype if dtype is None else DType.parse(dtype), x.device)


def full_like_meta(
    x: TensorMeta, fill_value: bool | int | float, dtype: str | None, device: str | None = None
) -> TensorMeta:
    """As zeros_like; fill_value must convert to the result dtype without overflow (floats truncate into integers)."""
    out = like_meta(x, dtype, device)
    check_fits("fill_value", fill_value, out.dtype)
    return out


ZEROS_LIKE = define(
    "zeros_like(Tensor x, *, ScalarType? dtype=None, Device? device=None) -> Tensor",
    meta=like_meta,
    dtypes=ALL_DTYPES,
    doc="Zeros of x's shape, in dtype (default: x's); mirrors torch.zeros_like.",
    tags=("creation",),
)
ONES_LIKE = define(
    "ones_like(Tensor x, *, ScalarType? dtype=None, Device? device=None) -> Tensor",
    meta=like_meta,
    dtypes=ALL_DTYPES,
    doc="Ones of x's shape, in dtype (default: x's); mirrors torch.ones_like.",
    tags=("creation",),
)
FULL_LIKE = define(
    "full_like(Tensor x, Scalar fill_value, *, ScalarType? dtype=None, Device? device=None) -> Tensor",
    meta=full_like_meta,
    dtypes=ALL_DTYPES,
    doc="fill_value in x's shape, in dtype (default: x's; floats truncate into integers); mirrors torch.full_like.",
    tags=("creation",),
)


def _size_checked(size: tuple[int, ...]) -> tuple[int, ...]:
    if any(n < 0 for n in size):
        raise ShapeError(
            arg="size",
            expected="non-negative sizes",
            found=shape_text(size),
            fix="every size must be >= 0 (0 gives an empty tensor)",
        )
    return size


def sized_meta(size: tuple[int, ...], dtype: str | None, device: str) -> TensorMeta:
    """A tensor of ``size``, in dtype (default float32, as torch's default dtype), on device."""
    return TensorMeta(_size_checked(size), DEFAULT_FLOAT if dtype is None else DType.parse(dtype), Device.parse(device))


def fill_dtype(fill_value: bool | int | float, dtype: str | None = None) -> DType:
    """torch.full's dtype: ``dtype`` when given, else from the fill value: bool, int64 for an int,
    else float32."""
    if dtype is not None:
        return DType.parse(dtype)
    if isinstance(fill_value, bool):
        return DType.BOOL
    return DType.INT64 if isinstance(fill_value, int) else DEFAULT_FLOAT


def arange_dtype(
    start: bool | int | float, end: bool | int | float, step: bool | int | float, dtype: str | None
) -> DType:
    """torch.arange's result dtype: ``dtype`` when given, else float32 when any bound is a float and
    int64 otherwise (``end`` already filled in: arange(n) is arange(0, n)).

    >>> arange_dtype(0, 5, 1, None), arange_dtype(0, 2.5, 1, None), arange_dtype(0, 5, 1, "int8")
    (<DType.INT64: 'int64'>, <DType.FLOAT32: 'float32'>, <DType.INT8: 'int8'>)
    """
    if dtype is not None:
        return DType.parse(dtype)
    return DEFAULT_FLOAT if any(isinstance(v, float) for v in (start, end, step)) else DType.INT64


def full_meta(size: tuple[int, ...], fill_value: bool | int | float, dtype: str | None, device: str) -> TensorMeta:
    """As zeros, with the dtype inferred from fill_value when dtype is None (torch.full's rule);
    fill_value must convert to that dtype without overflow."""
    out = TensorMeta(_size_checked(size), fill_dtype(fill_value, dtype), Device.parse(device))
    check_fits("fill_value", fill_value, out.dtype)
    return out


def arange_bounds(
    start: bool | int | float, end: bool | int | float, step: bool | int | float, dtype: DType
) -> tuple[float | int, float | int, float | int]:
    """The start, end and step torch checks and counts with: int64 converts them to ints first
    (so arange(0, 5, 0.5, dtype=int64) has step 0); every other dtype keeps them as given."""
    if dtype is DType.INT64:
        return int(start), int(end), int(step)
    return start, end, step


def arange_length(start: float | int, end: float | int, step: float | int) -> int:
    """torch.arange's length: ceil((end - start) / step), exact for ints, in double for floats."""
    if all(isinstance(v, int) for v in (start, end, step)):
        return max(0, -((int(start) - int(end)) // int(step)))
    return max(0, math.ceil((end - start) / step))


def arange_meta(
    start: bool | int | float, end: bool | int | float | None, step: bool | int | float, dtype: str | None, device: str
) -> TensorMeta:
    """torch.arange's checks and dtype rule: arange(end) or arange(start, end, step); int64 when all
    three are ints, float32 when any is a float; finite bounds, a non-zero step whose sign agrees
    with end - start; no bool result. An integer dtype counts from int(start) by int(step)."""
    if end is None:
        start, end = 0, start
    out = arange_dtype(start, end, step, dtype)
    if out not in NUMERIC:
        raise DTypeError(
            arg="dtype",
            expected="a numeric dtype (torch has no bool arange)",
            found=out.value,
            fix="create an integer arange and compare it, or pass dtype='int64'",
        )
    if not (math.isfinite(start) and math.isfinite(end)):
        raise ArgumentError(
            arg="end" if math.isfinite(start) else "start",
            expected="finite bounds (torch: unsupported range)",
            found=f"start={start!r}, end={end!r}",
            fix="pass finite start and end",
        )
    if not math.isfinite(step):
        raise ArgumentError(arg="step", expected="a finite step", found=repr(step), fix="pass a finite step")
    _check_accumulable(start, end, step, out)
    # torch checks the sign in double, on the values as given (before an integer dtype's int()):
    # arange(0, 0.1, -1, dtype=int64) is refused although int(0.1) - int(0) is 0
    if (step > 0 and end < start) or (step < 0 and end > start):
        raise ArgumentError(
            arg="step",
            expected=f"a step whose sign agrees with end - start = {end - start!r} (torch: upper bound and lower "
            "bound inconsistent with step sign)",
            found=repr(step),
            fix="swap start and end, or negate step",
        )
    first, last, stride = arange_bounds(start, end, step, out)
    # an integer dtype counts by int(step): 0 is refused for every one (torch's CPU kernel returns
    # zeros for the narrower ones, its int64 and meta kernels raise)
    if stride == 0 or (out in INTEGRAL and int(step) == 0):
        raise ArgumentError(
            arg="step",
            expected="a non-zero step (an integer dtype converts the step to an int first)",
            found=repr(step),
            fix="pass step != 0 (an integer step for an integer dtype)",
        )
    # the sign, checked above on the values as given, holds for the converted ones too (int() keeps
    # the order of start and end and, where it is not 0, the sign of step)
    return TensorMeta((arange_length(first, last, stride),), out, Device.parse(device))


# what torch counts an arange of these dtypes in (at::acc_type on the CPU): start, end and step must
# convert to it ("value cannot be converted to type int64_t without overflow")
_INT64_RANGE = (-(2**63), 2**63 - 1)
_FLOAT32_MAX = 3.4028234663852886e38


def _check_accumulable(start: float | int, end: float | int, step: float | int, out: DType) -> None:
    low: float
    high: float
    if out in INTEGRAL:
        low, high, kind = _INT64_RANGE[0], _INT64_RANGE[1], "int64"
    elif out in (DType.FLOAT16, DType.BFLOAT16):
        low, high, kind = -_FLOAT32_MAX, _FLOAT32_MAX, "float32"
    else:
        return
    for name, value in (("start", start), ("end", end), ("step", step)):
        if not low <= value <= high:  # exact: Python compares an int bound with a float value exactly
            raise ArgumentError(
                arg=name,
                expected=f"a value that converts to {kind}, which torch counts a {out.value} arange in",
                found=repr(value),
                fix=f"pass {name} within [{low:g}, {high:g}], or a float64 dtype",
            )


_DEVICE_DOC = " on device (default 'cpu')"
ZEROS = define(
    'zeros(int[] size, *, ScalarType? dtype=None, Device device="cpu") -> Tensor',
    meta=sized_meta,
    dtypes=ALL_DTYPES,
    doc=f"Zeros of shape size, in dtype (default float32),{_DEVICE_DOC}; mirrors torch.zeros.",
    tags=("creation",),
    dtype_arg="dtype",
)
ONES = define(
    'ones(int[] size, *, ScalarType? dtype=None, Device device="cpu") -> Tensor',
    meta=sized_meta,
    dtypes=ALL_DTYPES,
    doc=f"Ones of shape size, in dtype (default float32),{_DEVICE_DOC}; mirrors torch.ones.",
    tags=("creation",),
    dtype_arg="dtype",
)
FULL = define(
    'full(int[] size, Scalar fill_value, *, ScalarType? dtype=None, Device device="cpu") -> Tensor',
    meta=full_meta,
    dtypes=ALL_DTYPES,
    doc="fill_value in shape size, in dtype (default: bool, int64 or float32 from fill_value)"
    f"{_DEVICE_DOC}; mirrors torch.full.",
    tags=("creation",),
    dtype_arg="dtype",
)
ARANGE = define(
    'arange(Scalar start, Scalar? end=None, Scalar step=1, *, ScalarType? dtype=None, Device device="cpu") -> Tensor',
    meta=arange_meta,
    dtypes=NUMERIC,
    doc="start, start + step, ... up to end (excluded); arange(n) is 0..n-1; int64 for int bounds, else "
    f"float32 (or dtype){_DEVICE_DOC}; mirrors torch.arange.",
    tags=("creation",),
    dtype_arg="dtype",
)

CONTRACTS: tuple[OpContract, ...] = (ZEROS_LIKE, ONES_LIKE, FULL_LIKE, ZEROS, ONES, FULL, ARANGE)
