"""The ``example`` backend's hooks (entry point ``example = "opcore_example_vendor.plugin"``).

Loading this module must stay cheap: kernels are named as ``"module:qualname"`` strings and
imported when one first runs; checkers see TensorMeta (shapes, dtypes), never data.

>>> opcore_backend().name, opcore_backend().priority
('example', 150)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opcore.extend import API_VERSION, BackendSpec, DeviceType, TensorMeta, hookimpl
from opcore_example_vendor import __version__
from opcore_example_vendor.contracts import SWIGLU

if TYPE_CHECKING:
    from opcore.extend import PartitionCompiler, Registrar

__all__ = [
    "PRIORITY",
    "SILU_PRIORITY",
    "opcore_backend",
    "opcore_partition_compiler",
    "opcore_register_contracts",
    "opcore_register_kernels",
]

# Above reference (0) and onnxruntime (100), below openvino (200), cpu (300) and cuda (400).
PRIORITY = 150
# Added to PRIORITY for the silu kernel: 250 ranks it above openvino, still below cpu.
SILU_PRIORITY = 100


def contiguous_only(x: TensorMeta) -> bool | str:
    """Accept contiguous inputs; say why otherwise (opcore.explain shows the reason)."""
    return True if x.is_contiguous else "example's silu takes contiguous inputs only"


def scalar_bounds(x: TensorMeta, min: object, max: object) -> bool | str:
    """Accept bounds that are Python numbers or None (an attribute of the node, in a partition)."""
    if isinstance(min, TensorMeta) or isinstance(max, TensorMeta):
        return "example's clamp takes number bounds only"
    if isinstance(min, complex) or isinstance(max, complex):
        return "example's clamp takes real bounds only"
    return True


@hookimpl
def opcore_backend() -> BackendSpec:
    return BackendSpec(
        name="example",
        version=__version__,
        priority=PRIORITY,
        device_types=(DeviceType.CPU,),
        api_version=API_VERSION,
        is_available=None,  # numpy is always there; a real plugin checks its runtime cheaply here
        describe=lambda: {"kernels": "numpy"},
        description="example third-party backend (numpy)",
        install_hint="pip install opcore-example-vendor",
    )


@hookimpl
def opcore_register_contracts(registrar: Registrar) -> None:
    registrar.add_contract(SWIGLU)


@hookimpl
def opcore_register_kernels(registrar: Registrar) -> None:
    registrar.add_kernel(
        "silu",
        "opcore_example_vendor.kernels:silu",
        dtypes=["float32", "float64"],
        priority=SILU_PRIORITY,
        checker=contiguous_only,
    )
    registrar.add_kernel(
        "example.swiglu", "opcore_example_vendor.kernels:swiglu", dtypes=["float16", "float32", "float64"]
    )
    # an op with attributes and optional (None) arguments: clamp(x, min=None, max=None)
    registrar.add_kernel(
        "clamp", "opcore_example_vendor.kernels:clamp", dtypes=["float32", "float64"], checker=scalar_bounds
    )


@hookimpl
def opcore_partition_compiler() -> PartitionCompiler:
    """Runs of captured silu / example.swiglu / clamp nodes as one partition (optional: a backend without
    this hook still runs every node its kernels accept, one at a time)."""
    from opcore_example_vendor.partition import ExampleCompiler

    return ExampleCompiler()
