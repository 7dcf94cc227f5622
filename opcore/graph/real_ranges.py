"""Real ranges: a conservative ``[lo, hi]`` for the values of a graph's float tensors, so that a float
cast back to an integer (a relative position's log-spaced bucket: T5, DeBERTa) gets an integer range.

The rules (``REAL_RULES``) compute the exact interval of an op's result on its arguments' intervals
and widen it outwards (``widened``): a runtime computes in float32, rounding each result (and a
transcendental one, ``log``, to within a few units in the last place), so the interval must hold
whatever value either runtime computes, not only the exact one. Infinities are kept (``log(0)`` is
``-inf``); anything that may be NaN (``0 * inf``, ``log`` of a negative, a division by an interval
holding 0) is unknown (None), and so is every op without a rule.

A cast to an integer dtype of a float interval (``to_integers``) is proven only where the interval is
finite and inside the dtype: torch truncates toward zero, OpenVINO's Convert too, but out of the
dtype's range they differ (torch's f32 -> int64 of 3e9 is 3000000000, OpenVINO's CPU plugin, which
computes int64 in int32, gives -2147483648 and does not saturate; pinned by tests/test_graph_ranges.py).

>>> real_range("log", (Reals(1.0, 8.0),))[1] > 2.079
True
>>> to_integers((-0.5, 5.96), (-(2**31), 2**31 - 1))
(-1, 6)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy

from opcore.graph.intervals import hull, larger, magnitude, negated, smaller, summed
from opcore.types import DType, TensorMeta

__all__ = [
    "REAL_DTYPES", "REAL_RULES", "RealInterval", "Reals", "measured", "real", "real_range", "to_integers", "widened",
]  # fmt: skip

RealInterval = tuple[float, float]
RealRule = Callable[..., "RealInterval | None"]

# the dtypes whose values are tracked: float16 and bfloat16 round too coarsely for the slack below
REAL_DTYPES = frozenset({DType.FLOAT32, DType.FLOAT64})

# relative slack per op: float32 rounds to 2**-24, transcendental functions to a few ulp; 1e-5 is
# about 80 float32 ulp, so runtimes' approximations (OpenVINO's, SLEEF's) stay inside
_RELATIVE = 1e-5
_ABSOLUTE = 1e-6  # near a transcendental's zero (log near 1) an error is absolute, not relative


@dataclass(frozen=True, slots=True)
class Reals:
    """A float tensor as the real rules get it: its values lie in ``[lo, hi]`` (infinities allowed, no NaN);
    ``shape``: its sizes, a dynamic one's declared largest (-1: unknown), for the rules that count."""

    lo: float
    hi: float
    shape: tuple[int, ...] = ()


def real(value: Any) -> RealInterval | None:
    """The real interval of an argument: a ``Reals``, an integer tensor's bounds (else its dtype's), a
    Python number; None for anything else (a float tensor nothing bounds, a NaN)."""
    if isinstance(value, Reals):
        return (value.lo, value.hi)
    if isinstance(value, TensorMeta):  # an integer tensor: its proven bounds, else its dtype's range
        if value.bounds is not None:
            return (float(value.bounds[0]), float(value.bounds[1]))
        if value.dtype is DType.BOOL:
            return (0.0, 1.0)
        if value.dtype.is_integer:
            info = numpy.iinfo(value.dtype.to_numpy())
            return (float(info.min), float(info.max))
        return None
    if isinstance(value, (bool, int, float, numpy.integer, numpy.floating)):
        number = float(value)
        return None if math.isnan(number) else (number, number)
    return None


def widened(interval: RealInterval | None, absolute: float = 0.0) -> RealInterval | None:
    """``interval`` widened outwards by the slack a float32 computation of it may have; a bound that is
    0 stays 0 unless ``absolute`` (rounding keeps a result's sign and maps 0 to 0)."""
    if interval is None or any(math.isnan(v) for v in interval):
        return None
    lo, hi = interval

    def out(v: float, direction: int) -> float:
        if math.isinf(v) or (v == 0 and not absolute):
            return v
        return v + direction * (_RELATIVE * abs(v) + absolute + 1e-44)

    return (out(lo, -1), out(hi, 1))


def _corners(
    a: RealInterval | None, b: RealInterval | None, op: Callable[[float, float], float]
) -> RealInterval | None:
    if a is None or b is None:
        return None
    try:
        values = [op(x, y) for x in a for y in b]
    except (ZeroDivisionError, OverflowError):
        return None
    if any(math.isnan(v) for v in values):
        return None
    return (min(values), max(values))


def _product(x: float, y: float) -> float:
    return 0.0 if x == 0 or y == 0 else x * y  # an endpoint 0 times an infinite one: checked below


def _mul(x: Any, other: Any) -> RealInterval | None:
    a, b = real(x), real(other)
    if a is None or b is None:
        return None
    # 0 x inf is NaN: an interval holding 0 times one reaching an infinity may be NaN
    if (a[0] <= 0 <= a[1] and any(math.isinf(v) for v in b)) or (b[0] <= 0 <= b[1] and any(math.isinf(v) for v in a)):
        return None
    return widened(_corners(a, b, _product))


def _add(x: Any, other: Any, alpha: Any = 1) -> RealInterval | None:
    scaled = _mul(other, alpha) if alpha != 1 else real(other)
    return widened(_corners(real(x), scaled, lambda p, q: p + q))


def _sub(x: Any, other: Any, alpha: Any = 1) -> RealInterval | None:
    scaled = _mul(other, alpha) if alpha != 1 else real(other)
    return widened(_corners(real(x), scaled, lambda p, q: p - q))


def _div(x: Any, other: Any, rounding_mode: Any = None) -> RealInterval | None:
    a, b = real(x), real(other)
    if rounding_mode is not None or a is None or b is None or b[0] <= 0 <= b[1]:
        return None  # a divisor that may be 0 gives inf or NaN
    if any(math.isinf(v) for v in a) and any(math.isinf(v) for v in b):
        return None
    return widened(_corners(a, b, lambda p, q: p / q))


def _log(x: Any) -> RealInterval | None:
    a = real(x)
    if a is None or a[0] < 0:
        return None  # the log of a negative is NaN

    def log(v: float) -> float:
        return -math.inf if v == 0 else math.inf if math.isinf(v) else math.log(v)

    return widened((log(a[0]), log(a[1])), _ABSOLUTE)


def _rounding(function: Callable[[float], int]) -> RealRule:
    def rule(x: Any) -> RealInterval | None:
        a = real(x)
        return None if a is None else (_whole(a[0], function), _whole(a[1], function))

    return rule


def _whole(v: float, function: Callable[[float], int]) -> float:
    return v if math.isinf(v) else float(function(v))


def _sign(x: Any) -> RealInterval | None:
    a = real(x)
    return None if a is None else (float(numpy.sign(a[0])), float(numpy.sign(a[1])))


def _where(condition: Any, x: Any, other: Any) -> RealInterval | None:
    return hull(real(x), real(other))


def _minimum(x: Any, other: Any) -> RealInterval | None:
    return smaller(real(x), real(other))


def _maximum(x: Any, other: Any) -> RealInterval | None:
    return larger(real(x), real(other))


def _clamp(x: Any, low: Any = None, high: Any = None) -> RealInterval | None:
    a = real(x)
    if a is None:
        return None
    if low is not None:
        a = _maximum(Reals(*a), low)
    if high is not None and a is not None:
        a = _minimum(Reals(*a), high)
    return a


def _same(x: Any, *rest: Any) -> RealInterval | None:
    return real(x)


def _cast(x: Any, dtype: Any) -> RealInterval | None:
    return widened(real(x))  # a float32 result rounds an int64 or float64 value


def _fill(x: Any, fill_value: Any, *rest: Any) -> RealInterval | None:
    return real(fill_value)


def _cumsum(x: Any, dim: int, dtype: Any = None) -> RealInterval | None:
    """Running sums of up to ``count`` values (and the empty sum 0), widened by what float32
    accumulation can add: each of the count additions rounds by at most 2**-24 of the largest sum."""
    a = real(x)
    shape = x.shape if isinstance(x, (Reals, TensorMeta)) else ()
    count = shape[dim] if shape else 1
    interval = summed(a, count) if a is not None and all(math.isfinite(v) for v in a) else None
    if interval is None:
        return None
    largest = max(abs(interval[0]), abs(interval[1]))
    return widened(interval, absolute=count * largest * 2.0**-23)


# op -> its rule, called with the node's arguments in schema order (float tensors with a proven
# interval as Reals, integer tensors as TensorMeta with their bounds)
REAL_RULES: Mapping[str, RealRule] = {
    "add": _add,
    "sub": _sub,
    "mul": _mul,
    "div": _div,
    "neg": lambda x: negated(real(x)),
    "abs": lambda x: magnitude(real(x)),
    "log": _log,
    "ceil": _rounding(math.ceil),
    "floor": _rounding(math.floor),
    "sign": _sign,
    "where": _where,
    "minimum": _minimum,
    "clamp": _clamp,
    "cast": _cast,
    "full_like": _fill,
    "full": _fill,
    "zeros": lambda size, *rest: (0.0, 0.0),
    "ones": lambda size, *rest: (1.0, 1.0),
    "cumsum": _cumsum,
    "zeros_like": lambda x, *rest: (0.0, 0.0),
    "ones_like": lambda x, *rest: (1.0, 1.0),
    **dict.fromkeys(
        # a maximum or minimum of values in [lo, hi] is in [lo, hi] too
        ("unsqueeze", "squeeze", "reshape", "flatten", "expand", "slice", "select", "permute", "transpose", "clone",
         "amax", "amin"),
        _same,
    ),
}  # fmt: skip


def real_range(op: str, args: tuple[Any, ...]) -> RealInterval | None:
    """The interval of ``op``'s result for these arguments; None when the op has no rule, an argument
    is unknown or the result may be NaN.

    >>> real_range("div", (Reals(0.0, 63.0), 8))
    (0.0, 7.87507875)
    """
    rule = REAL_RULES.get(op)
    if rule is None:
        return None
    try:
        return rule(*args)
    except (TypeError, ValueError, IndexError, KeyError):  # an argument only known at run time
        return None


def to_integers(interval: RealInterval | None, limit: tuple[int, int] | None) -> tuple[int, int] | None:
    """The integers a cast of values in ``interval`` gives (truncated or rounded: outwards to whole
    numbers), where the interval is finite and inside ``limit`` (the target dtype's range); else None:
    beyond it torch and the runtimes disagree (see the module docstring)."""
    if interval is None or limit is None or not all(math.isfinite(v) for v in interval):
        return None
    lo, hi = math.floor(interval[0]), math.ceil(interval[1])
    return (lo, hi) if limit[0] <= lo and hi <= limit[1] else None


def measured(values: Any) -> RealInterval | None:
    """A float constant's interval (its min and max); None if it holds a NaN or nothing. ``values``: a
    numpy array or a torch tensor on any device (a cuda plan's constants live on the GPU)."""
    if hasattr(values, "detach"):
        values = values.detach().cpu()
    array = numpy.asarray(values)
    if array.size == 0 or numpy.isnan(array).any():
        return None
    return (float(array.min()), float(array.max()))
