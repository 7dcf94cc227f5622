"""opcore.graph.real_ranges: float intervals op by op (widened for float32 rounding, infinities kept,
NaN refused), the cast back to integers, and the behaviour of the runtimes that cast relies on:
torch and OpenVINO's CPU plugin both truncate a float toward zero inside int32, and disagree beyond it
(OpenVINO does not saturate), so a cast is proven only for a finite interval inside the dtype."""

from __future__ import annotations

import math

import numpy
import pytest
import torch

from opcore.graph.real_ranges import Reals, measured, real, real_range, to_integers, widened
from opcore.types import DType, TensorMeta

INT32 = (-(2**31), 2**31 - 1)
INF = math.inf


def close(got: tuple[float, float] | None, lo: float, hi: float) -> bool:
    """``got`` holds [lo, hi] and is no wider than the slack (1e-4 relative, 1e-5 absolute)."""
    if got is None:
        return False
    slack = [1e-4 * abs(v) + 1e-5 if math.isfinite(v) else 0.0 for v in (lo, hi)]
    return got[0] <= lo and got[1] >= hi and got[0] >= lo - slack[0] and got[1] <= hi + slack[1]


def test_arguments() -> None:
    assert real(Reals(-1.0, 2.0)) == (-1.0, 2.0)
    assert real(TensorMeta((4,), DType.INT64, bounds=(0, 63))) == (0.0, 63.0)
    assert real(TensorMeta((4,), DType.BOOL)) == (0.0, 1.0)
    assert real(TensorMeta((4,), DType.FLOAT32)) is None  # a float nothing bounds (it may be NaN)
    assert real(2.5) == (2.5, 2.5) and real(float("nan")) is None


@pytest.mark.parametrize(
    ("op", "args", "lo", "hi"),
    [
        ("cast", (TensorMeta((4,), DType.INT64, bounds=(8, 63)), "float32"), 8.0, 63.0),
        ("div", (Reals(8.0, 63.0), 8), 1.0, 63 / 8),
        ("div", (Reals(-4.0, 6.0), Reals(-4.0, -2.0)), -3.0, 2.0),
        ("log", (Reals(1.0, 63 / 8),), 0.0, math.log(63 / 8)),
        ("log", (Reals(0.0, 1.0),), -INF, 0.0),  # log(0) is -inf: kept, not a NaN
        ("mul", (Reals(-INF, 0.5), 8.0), -INF, 4.0),
        ("mul", (Reals(-2.0, 3.0), Reals(-1.0, 1.0)), -3.0, 3.0),
        ("add", (Reals(0.25, 0.5), 16, 1), 16.25, 16.5),
        ("sub", (Reals(0.25, 0.5), Reals(1.0, 2.0), 2), -3.75, -1.5),
        ("ceil", (Reals(-0.5, 14.2),), 0.0, 15.0),  # -0.0 == 0.0
        ("floor", (Reals(-0.5, 14.2),), -1.0, 14.0),
        ("neg", (Reals(-INF, 2.0),), -2.0, INF),
        ("abs", (Reals(-3.0, 2.0),), 0.0, 3.0),
        ("sign", (Reals(-3.0, 2.0),), -1.0, 1.0),
        ("where", (TensorMeta((4,), DType.BOOL), Reals(-63.0, 63.0), Reals(-31.0, 31.0)), -63.0, 63.0),
        ("minimum", (Reals(-INF, 20.0), 15), -INF, 15.0),
        ("clamp", (Reals(-INF, INF), 0, 63), 0.0, 63.0),
        ("amax", (Reals(-1.0, 127.0), (1,), False), -1.0, 127.0),  # a maximum of values in [lo, hi]
        ("amin", (Reals(-INF, 3.0),), -INF, 3.0),
        ("full_like", (TensorMeta((4,), DType.FLOAT32), 2.5, None, None), 2.5, 2.5),
        ("unsqueeze", (Reals(1.0, 2.0), 0), 1.0, 2.0),
        ("ones", ((2, 8),), 1.0, 1.0),
        ("full", ((2, 8), -0.5), -0.5, -0.5),
    ],
)
def test_rules(op: str, args: tuple[object, ...], lo: float, hi: float) -> None:
    assert close(real_range(op, args), lo, hi), real_range(op, args)


@pytest.mark.parametrize(
    ("op", "args"),
    [
        ("mul", (Reals(-INF, 1.0), Reals(0.0, 1.0))),  # -inf x 0 is NaN
        ("div", (Reals(1.0, 2.0), Reals(-1.0, 1.0))),  # a divisor that may be 0
        ("div", (Reals(1.0, 2.0), 2, "floor")),  # a rounding mode: not tracked
        ("log", (Reals(-1.0, 1.0),)),  # the log of a negative is NaN
        ("div", (TensorMeta((4,), DType.FLOAT32), 2)),  # an unbounded float may be NaN
        ("exp", (Reals(0.0, 1.0),)),  # no rule
        ("cumsum", (Reals(1.0, 1.0, shape=(2, -1)), 1)),  # a dim of unknown size: no count
        ("cumsum", (Reals(0.0, INF, shape=(4,)), 0)),  # an infinite term
    ],
)
def test_unknown_where_a_nan_may_appear(op: str, args: tuple[object, ...]) -> None:
    assert real_range(op, args) is None


def test_running_sums_count_the_dims_largest_size() -> None:
    # OPT's positions: a running sum of a run-time mask of ones over a sequence of at most 64 (the
    # widening: float32 rounding, plus the accumulation, 2 * n * the largest sum * 2**-24)
    lo, hi = real_range("cumsum", (Reals(1.0, 1.0, shape=(2, 64)), 1, None))  # type: ignore[misc]
    assert -5e-4 <= lo <= 0.0 and 64.0 <= hi <= 64.002
    assert to_integers((lo, hi), INT32) == (-1, 65)
    lo, hi = real_range("cumsum", (Reals(-0.5, 2.0, shape=(10,)), 0))  # type: ignore[misc]
    assert -5.001 <= lo <= -5.0 and 20.0 <= hi <= 20.001


def test_a_float32_running_sum_stays_inside_its_interval() -> None:
    # the widening covers float32's accumulation error: 4096 terms near the interval's top
    values = torch.full((4096,), 0.1, dtype=torch.float32) + torch.rand(4096) * 1e-3
    lo, hi = real_range("cumsum", (Reals(0.1, 0.101, shape=(4096,)), 0))  # type: ignore[misc]
    sums = values.cumsum(0)
    assert lo <= float(sums.min()) and float(sums.max()) <= hi


def test_widening_covers_float32_rounding() -> None:
    """Every float32 value computed from the interval's ends lies inside the widened interval."""
    ends = numpy.array([1.0, 63.0 / 8.0], dtype=numpy.float32)
    computed = numpy.log(ends) / numpy.float32(math.log(16.0)) * numpy.float32(8.0)
    logs = real_range("log", (Reals(1.0, 63 / 8),))
    ratios = real_range("div", (Reals(*logs), math.log(16.0))) if logs else None
    lo, hi = real_range("mul", (Reals(*ratios), 8.0)) or (math.nan, math.nan) if ratios else (math.nan, math.nan)
    assert lo <= float(computed.min()) and float(computed.max()) <= hi
    assert widened((0.0, 0.0)) == (0.0, 0.0)  # a 0 stays 0: rounding keeps signs
    assert widened((1.0, INF)) == (1.0 - 1e-5 - 1e-44, INF)


def test_cast_to_integers_only_finite_inside_the_dtype() -> None:
    assert to_integers((-0.5, 5.96), INT32) == (-1, 6)  # outwards: truncation and rounding both inside
    assert to_integers((-INF, 5.0), INT32) is None
    assert to_integers((0.0, 3e9), INT32) is None
    assert to_integers((0.0, 3e9), (-(2**63), 2**63 - 1)) == (0, 3000000000)
    assert measured(torch.tensor([1.5, -2.0])) == (-2.0, 1.5)
    assert measured(torch.tensor([1.0, float("nan")])) is None


def test_openvino_and_torch_casts_agree_inside_int32_only() -> None:
    """What ``to_integers`` relies on, on the real runtimes: inside int32 both truncate toward zero;
    beyond it OpenVINO's f32 -> int64 Convert (computed in int32 on the CPU plugin) gives int32's
    minimum where torch gives the value: no saturation that a later clamp could rely on."""
    openvino = pytest.importorskip("openvino")
    from openvino import opset13

    inside = numpy.array([2.7, -2.7, 5.5, -0.5, 2.0e9, -2.0e9], dtype=numpy.float32)
    beyond = numpy.array([3.0e9, -3.0e9, math.inf, -math.inf], dtype=numpy.float32)
    values = numpy.concatenate([inside, beyond])
    parameter = opset13.parameter([values.size], openvino.Type.f32)
    model = openvino.Model([opset13.convert(parameter, openvino.Type.i64)], [parameter])
    compiled = openvino.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    got = numpy.asarray(compiled(values)[0]).astype(numpy.int64)
    want = torch.from_numpy(values).to(torch.int64).numpy()
    assert (got[: inside.size] == want[: inside.size]).all(), (got, want)
    assert (got[inside.size :] != want[inside.size :]).any(), (got, want)
