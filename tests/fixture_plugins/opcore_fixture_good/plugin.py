"""opcore test fixture: a working backend, with a vendor op and kernels that decline, hand over and crash."""

from __future__ import annotations

import numpy

import opcore
from opcore import BackendSpec, DeviceType
from opcore.meta import unary_float

CALLS: list[str] = []  # kernels append their name, so tests can see what ran


def double_meta(x, factor):
    return unary_float(x)


DOUBLE = opcore.define_op(
    "fixture.double(Tensor x, *, float factor=2.0) -> Tensor",
    meta=double_meta,
    doc="Multiply by a factor (a vendor op).",
    tags=("vendor",),
)


@opcore.hookimpl
def opcore_backend() -> BackendSpec:
    return BackendSpec(
        name="fixture_good",
        version="1.0",
        priority=50,
        device_types=(DeviceType.CPU,),
        describe=lambda: {"widget": "v2"},
        description="test fixture",
    )


def relu(x):
    CALLS.append("relu")
    return numpy.maximum(x, 0).astype(x.dtype, copy=False)


def double(x, factor):
    CALLS.append("double")
    return (x * factor).astype(x.dtype, copy=False)


def exp_never(x):
    raise AssertionError("the checker declines, so this never runs")


def tanh_hands_over(x):
    CALLS.append("tanh")
    raise opcore.Unsupported("fixture declines at run time")


def sigmoid_crashes(x):
    CALLS.append("sigmoid")
    raise RuntimeError("fixture kernel crashed")


def small_only(x):
    return True if x.numel <= 16 else f"fixture only takes up to 16 elements, got {x.numel}"


@opcore.hookimpl
def opcore_register_contracts(registrar) -> None:
    registrar.add_contract(DOUBLE)


@opcore.hookimpl
def opcore_register_kernels(registrar) -> None:
    registrar.add_kernel("relu", relu, dtypes=["float32"], checker=small_only)
    registrar.add_kernel("fixture.double", double, dtypes=["float32", "float64"])
    registrar.add_kernel("exp", exp_never, dtypes=["float32"], checker=lambda x: "fixture never runs exp")
    registrar.add_kernel("tanh", tanh_hands_over, dtypes=["float32"])
    registrar.add_kernel("sigmoid", sigmoid_crashes, dtypes=["float32"])
