"""The OpenVINO backend's hooks: one kernel per built-in op, each a one-op model built with
``openvino.opset13`` and run through a cached compiled model.

Loading this module does not import openvino: kernels are named as "module:qualname" and
imported when one first runs; ``is_available`` reads package metadata.

>>> opcore_backend().name, opcore_backend().priority
('openvino', 200)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING

from opcore.extend import (
    ONEMODEL_API_VERSION,
    BackendSpec,
    DeviceType,
    hookimpl,
    kernel_layout,
    kernel_targets,
    register_kernels,
    runtime_available,
    version_mismatch,
)
from opcore_openvino import __version__
from opcore_openvino.checks import checker_for

if TYPE_CHECKING:
    from opcore.extend import PartitionCompiler, Registrar

__all__ = ["KERNELS", "MIN_OPENVINO", "opcore_backend", "opcore_partition_compiler", "opcore_register_kernels"]

MIN_OPENVINO = (2025, 4)  # pyproject.toml's floor: the oldest make test-oldest passes with
ONEMODEL_BUILT_FOR = 1  # the one-model builder surface (ONEMODEL_API_VERSION) these kernels are written against

# op -> (module of its kernel, whether resolve's constants are baked in): the ops whose family
# module under opcore_openvino.kernels lists them in OPS (each module-level kernel is named as its op)
KERNELS: Mapping[str, tuple[str, bool]] = kernel_layout("opcore_openvino.kernels")


def is_available() -> bool | str:
    """True when this opcore's one-model builders are the ones these kernels were written for,
    openvino (>= 2025.4) is installed and no oneDNN ISA cap below this CPU's would crash
    it (opcore_openvino.isa); never imports it. Invalid cache-size settings raise here (ArgumentError
    naming the variable), so the plugin fails at load time.
    """
    from opcore.extend import capacity_from_env
    from opcore_openvino.cache import MODELS
    from opcore_openvino.isa import isa_cap_reason

    MODELS.check_setting()
    capacity_from_env("OPCORE_OPENVINO_RUNTIME_CACHE", 16)
    mismatch = version_mismatch("onemodel", ONEMODEL_BUILT_FOR, ONEMODEL_API_VERSION, "opcore-openvino")
    if mismatch is not None:
        return mismatch
    available = runtime_available(("openvino",), "openvino", MIN_OPENVINO, extra="openvino")
    return (isa_cap_reason() or True) if available is True else available


def describe() -> Mapping[str, str]:
    """Versions, devices, the precision hint and the compiled-model cache, for ``opcore doctor``."""
    from opcore_openvino.doctor import describe as collect

    return collect()


@hookimpl
def opcore_backend() -> BackendSpec:
    return BackendSpec(
        name="openvino",
        version=__version__,
        priority=200,
        device_types=(DeviceType.CPU,),
        is_available=is_available,
        describe=describe,
        description="OpenVINO (CPU plugin): models built with openvino.opset13, cached compiled models",
        install_hint="pip install 'opcore[openvino]'",
    )


@hookimpl
def opcore_register_kernels(registrar: Registrar) -> None:
    """One numpy kernel per op for every dtype its contract accepts; the checker declines the rest."""
    register_kernels(registrar, "opcore_openvino.kernels", checker_for, KERNELS)


@hookimpl
def opcore_partition_compiler() -> PartitionCompiler:
    """Partitions of captured models as one model each, chaining the kernels' builders (imports
    openvino only when it first compiles)."""
    return _partition_compiler()


# the ops whose partition builders take sizes computed at run time (0-D values) for their ints
SIZED = frozenset({"reshape", "expand", "slice", "arange", "zeros", "ones", "full"})


@functools.cache
def _partition_compiler() -> PartitionCompiler:
    from opcore.extend import GraphPartitionCompiler

    # the CPU plugin computes int64 in int32: plans show it the int64 values they prove to fit; under
    # the f32 precision hint it computes bfloat16 in float32 (bfloat16 weights stay bfloat16 in memory)
    return GraphPartitionCompiler(
        "openvino",
        kernel_targets("opcore_openvino.kernels", KERNELS),
        "opcore_openvino.partition",
        int64_as="int32",
        sized=SIZED,
        bfloat16_as="float32",
    )
