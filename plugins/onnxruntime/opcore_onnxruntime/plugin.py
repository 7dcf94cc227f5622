"""The ONNX Runtime backend's hooks: one kernel per built-in op, each a one-op ONNX model run
through a cached InferenceSession.

Loading this module imports neither onnxruntime nor onnx: kernels are named as
"module:qualname" and imported when one first runs; ``is_available`` reads package metadata.

>>> opcore_backend().name, opcore_backend().priority
('onnxruntime', 100)
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
from opcore_onnxruntime import __version__
from opcore_onnxruntime.checks import checker_for

if TYPE_CHECKING:
    from opcore.extend import PartitionCompiler, Registrar

__all__ = ["KERNELS", "MIN_ONNXRUNTIME", "opcore_backend", "opcore_partition_compiler", "opcore_register_kernels"]

MIN_ONNXRUNTIME = (1, 20)  # pyproject.toml's floor: the oldest make test-oldest passes with
ONEMODEL_BUILT_FOR = 1  # the one-model builder surface (ONEMODEL_API_VERSION) these kernels are written against

# op -> (module of its kernel, whether resolve's constants are baked in): the ops whose family
# module under opcore_onnxruntime.kernels lists them in OPS (each module-level kernel is named as its op)
KERNELS: Mapping[str, tuple[str, bool]] = kernel_layout("opcore_onnxruntime.kernels")


def is_available() -> bool | str:
    """True when this opcore's one-model builders are the ones these kernels were written for and
    onnxruntime (>= 1.20) and onnx are installed; never imports them. An invalid
    OPCORE_ORT_CACHE_SIZE raises here (ArgumentError naming it), so the plugin fails at load time.
    """
    from opcore_onnxruntime.cache import SESSIONS

    SESSIONS.check_setting()
    mismatch = version_mismatch("onemodel", ONEMODEL_BUILT_FOR, ONEMODEL_API_VERSION, "opcore-onnxruntime")
    if mismatch is not None:
        return mismatch
    return runtime_available(("onnxruntime", "onnx"), "onnxruntime", MIN_ONNXRUNTIME, extra="onnxruntime")


def describe() -> Mapping[str, str]:
    """Versions, providers, plugin-EP devices and the session cache, for ``opcore doctor``."""
    from opcore_onnxruntime.doctor import describe as collect

    return collect()


@hookimpl
def opcore_backend() -> BackendSpec:
    return BackendSpec(
        name="onnxruntime",
        version=__version__,
        priority=100,
        device_types=(DeviceType.CPU,),
        is_available=is_available,
        describe=describe,
        description="ONNX Runtime (CPUExecutionProvider): one-op ONNX models, cached sessions",
        install_hint="pip install 'opcore[onnxruntime]'",
    )


@hookimpl
def opcore_register_kernels(registrar: Registrar) -> None:
    """One numpy kernel per op for every dtype its contract accepts; the checker declines the rest."""
    register_kernels(registrar, "opcore_onnxruntime.kernels", checker_for, KERNELS)


@hookimpl
def opcore_partition_compiler() -> PartitionCompiler:
    """Partitions of captured models as one model each, chaining the kernels' builders (imports
    onnxruntime only when it first compiles)."""
    return _partition_compiler()


# the ops whose partition builders take sizes computed at run time (0-D values) for their ints
SIZED = frozenset({"reshape", "expand", "slice", "arange", "zeros", "ones", "full"})


@functools.cache
def _partition_compiler() -> PartitionCompiler:
    from opcore.extend import GraphPartitionCompiler

    return GraphPartitionCompiler(
        "onnxruntime",
        kernel_targets("opcore_onnxruntime.kernels", KERNELS),
        "opcore_onnxruntime.partition",
        sized=SIZED,
    )
