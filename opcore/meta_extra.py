"""Small additions to opcore.meta used by the built-in contracts.

>>> shape_text((3,))
'(3,)'
>>> check_min_rank("x", TensorMeta((), DType.FLOAT32), 1)
Traceback (most recent call last):
...
opcore.errors.ShapeError: argument 'x' expected a tensor with at least 1 dimension, found a 0-D tensor of shape ().
"""

from __future__ import annotations

from collections.abc import Iterable

from opcore.errors import ArgumentError, ShapeError
from opcore.types import DType, TensorMeta

__all__ = ["ALL_DTYPES", "check_min_rank", "check_positive", "shape_text"]

ALL_DTYPES = frozenset(DType)


def shape_text(shape: Iterable[int]) -> str:
    """A shape as Python writes a tuple: ``(2, 3)``, ``(3,)``, ``()``."""
    shape = tuple(shape)
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def check_min_rank(arg: str, meta: TensorMeta, minimum: int, *, what: str | None = None) -> None:
    """The tensor must have at least ``minimum`` dimensions."""
    if meta.ndim < minimum:
        plural = "s" if minimum != 1 else ""
        raise ShapeError(
            arg=arg,
            expected=what or f"a tensor with at least {minimum} dimension{plural}",
            found=f"a {meta.ndim}-D tensor of shape {shape_text(meta.shape)}",
        )


def check_positive(arg: str, values: tuple[int, ...], *, allow_zero: bool = False) -> None:
    """Every value must be > 0 (or >= 0 with ``allow_zero``), as torch's conv attributes."""
    bad = [v for v in values if v < 0 or (v == 0 and not allow_zero)]
    if bad:
        raise ArgumentError(
            arg=arg,
            expected="non-negative values" if allow_zero else "positive values",
            found=repr(list(values)),
        )
