"""The conformance kit's entry for example.swiglu (entry point ``opcore.testing``: ``example``).

Built-in ops (silu) already have entries in opcore.testing; a plugin adds entries only for the
contracts it contributes. The reference is opcore's ``reference`` backend, which runs this op
through its decomposition.

>>> [e.op for e in entries()]
['example.swiglu']
"""

from __future__ import annotations

from collections.abc import Iterable

from opcore.extend import DTypeError, ErrorInput, OpEntry, Sample, SampleSet, ShapeError, shape_id, tensor_of, z

__all__ = ["entries", "swiglu_errors", "swiglu_samples"]


def swiglu_samples() -> Iterable[Sample]:
    """Every floating dtype, scalars, empty and 1-D inputs, broadcasting, layouts, magnitudes."""
    s = SampleSet("example.swiglu")
    for dtype in ("float32", "float16", "float64", "bfloat16"):
        s.add(dtype, s.tensor((3, 4), dtype), s.tensor((3, 4), dtype))
    for x_shape, gate_shape in [((), ()), ((0,), (0,)), ((7,), (7,)), ((4, 1, 3), (2, 1)), ((2, 0, 3), (3,))]:
        s.add(f"{shape_id(x_shape)}-{shape_id(gate_shape)}", s.tensor(x_shape), s.tensor(gate_shape))
    for layout in ("transposed", "strided", "expanded"):
        s.add(layout, s.tensor((3, 4), layout=layout), s.tensor((3, 4), layout=layout))
    s.add("large", s.tensor((3, 4), low=-1e4, high=1e4), s.tensor((3, 4), low=-1e4, high=1e4))
    s.add("small", s.tensor((3, 4), low=-1e-4, high=1e-4), s.tensor((3, 4), low=-1e-4, high=1e-4))
    s.add("special", tensor_of([1.0, 2.0, -3.0, 0.0], "float32"), tensor_of([-1e4, 1e4, float("nan"), -0.0], "float32"))
    return s


def swiglu_errors() -> Iterable[ErrorInput]:
    """One bad input per check in swiglu_meta."""
    return [
        ErrorInput("int", (z(2, dtype="int32"), z(2, dtype="int32")), DTypeError, "x", "found int32"),
        ErrorInput("gate-dtype", (z(2), z(2, dtype="float64")), DTypeError, "gate", r"the dtype of 'x' \(float32\)"),
        ErrorInput("broadcast", (z(2, 3), z(4)), ShapeError, "gate", "shapes that broadcast together"),
    ]


def entries() -> list[OpEntry]:
    """What the ``opcore.testing`` entry point returns."""
    return [OpEntry("example.swiglu", swiglu_samples, swiglu_errors, source="opcore-example-vendor")]
