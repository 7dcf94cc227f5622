"""The reference backend's hooks: one numpy kernel for every built-in op, for every dtype its
contract accepts. The kernel of op ``o`` of family ``f`` is ``opcore.reference.f.o``.

>>> opcore_backend().priority
0
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import opcore
from opcore.backend import BackendSpec
from opcore.hookspecs import hookimpl
from opcore.opset import BUILTIN_CONTRACTS, BUILTIN_DTYPES
from opcore.types import DeviceType

if TYPE_CHECKING:
    from opcore.registry import Registrar

__all__ = ["KERNELS", "builtin_kernels", "opcore_backend", "opcore_register_kernels"]


def builtin_kernels() -> dict[str, str]:
    """op -> its kernel as ``"opcore.reference.<family>:<op>"``: each family module lists its ops in
    ``OPS``, read without importing the module (the kernels are imported when they first run, so
    loading the plugin costs no import of the eleven kernel modules).
    """
    from opcore.declared import family_kernels

    # tests/test_reference.py checks that every built-in op has one
    families = family_kernels("opcore.reference", BUILTIN_CONTRACTS)
    return {op: f"opcore.reference.{family}:{op}" for op, family in families.items()}


KERNELS: Mapping[str, str] = builtin_kernels()


@hookimpl
def opcore_backend() -> BackendSpec:
    """The reference backend: always available, lowest priority, CPU only."""
    return BackendSpec(
        name="reference",
        version=opcore.__version__,
        priority=0,
        device_types=(DeviceType.CPU,),
        description="numpy, float64 inside",
    )


@hookimpl
def opcore_register_kernels(registrar: Registrar) -> None:
    """One kernel per built-in op; bfloat16 inputs reach them as float32 (see _common)."""
    for op, kernel in KERNELS.items():
        registrar.add_kernel(op, kernel, dtypes=BUILTIN_DTYPES[op], array_kind="numpy")
