"""Closed intervals ``(lo, hi)`` of one kind of number: the arithmetic that ``opcore.graph.ranges``
(integer values) and ``opcore.graph.real_ranges`` (float values) share. An unknown interval (None)
gives None; a result has the kind of its arguments.

>>> negated((2, 5)), magnitude((-3.0, 2.0)), hull((0, 1), (4, 9))
((-5, -2), (0.0, 3.0), (0, 9))
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["hull", "larger", "magnitude", "negated", "smaller", "summed"]

N = TypeVar("N", int, float)


def negated(a: tuple[N, N] | None) -> tuple[N, N] | None:
    """The values ``-x`` for ``x`` in ``a``.

    >>> negated((-1.5, 4.0))
    (-4.0, 1.5)
    """
    return None if a is None else (-a[1], -a[0])


def magnitude(a: tuple[N, N] | None) -> tuple[N, N] | None:
    """The values ``|x|`` for ``x`` in ``a``: from 0 where ``a`` holds 0.

    >>> magnitude((-7, -2)), magnitude((-1, 3))
    ((2, 7), (0, 3))
    """
    if a is None:
        return None
    lo = type(a[0])(0) if a[0] <= 0 <= a[1] else min(abs(a[0]), abs(a[1]))
    return (lo, max(abs(a[0]), abs(a[1])))


def hull(*intervals: tuple[N, N] | None) -> tuple[N, N] | None:
    """The smallest interval holding all of ``intervals``; None if there are none or one is unknown.

    >>> hull((0, 2), (-1, 1)), hull((0, 2), None)
    ((-1, 2), None)
    """
    if not intervals or any(i is None for i in intervals):
        return None
    found = [i for i in intervals if i is not None]
    return (min(i[0] for i in found), max(i[1] for i in found))


def smaller(a: tuple[N, N] | None, b: tuple[N, N] | None) -> tuple[N, N] | None:
    """The values ``min(x, y)`` for ``x`` in ``a`` and ``y`` in ``b``.

    >>> smaller((0, 10), (3, 5))
    (0, 5)
    """
    return None if a is None or b is None else (min(a[0], b[0]), min(a[1], b[1]))


def larger(a: tuple[N, N] | None, b: tuple[N, N] | None) -> tuple[N, N] | None:
    """The values ``max(x, y)`` for ``x`` in ``a`` and ``y`` in ``b``.

    >>> larger((0, 10), (3, 5))
    (3, 10)
    """
    return None if a is None or b is None else (max(a[0], b[0]), max(a[1], b[1]))


def summed(a: tuple[N, N] | None, count: int) -> tuple[N, N] | None:
    """Any sum of up to ``count`` values in ``a`` (a running sum's prefixes too) and the empty sum 0;
    a negative count (a size known only at run time) gives None.

    >>> summed((1, 3), 4), summed((-0.5, 2.0), 10), summed((1, 1), -1)
    ((0, 12), (-5.0, 20.0), None)
    """
    if a is None or count < 0:
        return None
    zero = type(a[0])(0)
    return (min(zero, count * a[0]), max(zero, count * a[1]))
