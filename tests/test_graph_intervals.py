"""The interval arithmetic shared by the integer and the real ranges (opcore.graph.intervals)."""

from __future__ import annotations

import math

from opcore.graph.intervals import hull, magnitude, negated


def test_results_keep_the_kind_of_their_arguments() -> None:
    whole, real = magnitude((-1, 3)), magnitude((-1.0, 3.0))
    assert whole == (0, 3) and real == (0.0, 3.0)
    assert [type(v) for v in (*(whole or ()), *(real or ()))] == [int, int, float, float]
    assert negated((-math.inf, 2.0)) == (-2.0, math.inf)


def test_magnitude_of_an_interval_on_one_side_of_zero() -> None:
    assert magnitude((-7, -2)) == (2, 7)
    assert magnitude((2.5, math.inf)) == (2.5, math.inf)
    assert magnitude((-math.inf, -1.0)) == (1.0, math.inf)


def test_an_unknown_interval_gives_none() -> None:
    assert negated(None) is None and magnitude(None) is None
    assert hull((0, 1), None) is None and hull() is None
    assert hull((0, 1), (-3, 0), (5, 6)) == (-3, 6)
