"""The partition interface, as the plan uses it: the protocol (``opcore.partition_protocol``,
re-exported here for the graph runtimes that import it from this module) and ``compilers()``,
which collects the loaded backends' partition compilers. This module imports neither torch nor
any runtime.

>>> from opcore.graph.partition import PartitionSpec, ValueRef
>>> ValueRef("x")
ValueRef(name='x')
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from opcore.partition_protocol import (
    HOOK,
    CompiledPartition,
    PartitionCompiler,
    PartitionError,
    PartitionSpec,
    PartNode,
    ValueRef,
)

__all__ = [
    "HOOK",
    "CompiledPartition",
    "CompilerReport",
    "PartNode",
    "PartitionCompiler",
    "PartitionError",
    "PartitionSpec",
    "ValueRef",
    "compiler_reports",
    "compilers",
]

logger = logging.getLogger("opcore.graph")


@dataclass(frozen=True, slots=True)
class CompilerReport:
    """One loaded backend's answer to ``opcore_partition_compiler``: its compiler, or why there is none
    (``reason`` empty and compiler None: the backend has no partition compiler)."""

    backend: str
    compiler: PartitionCompiler | None
    reason: str = ""


def compiler_reports() -> list[CompilerReport]:
    """Every loaded backend that implements the hook, with its compiler or why it gave none (the hook
    raised, or returned something else than a PartitionCompiler for its own backend): logged once."""
    from opcore.runtime import runtime

    loader = runtime().ensure_loaded().loader
    found: list[CompilerReport] = []
    for backend in sorted(loader.objects):
        try:
            compiler = loader.call_hook(backend, HOOK)
        except Exception as error:
            logger.warning("opcore: %s's %s() failed: %s: %s", backend, HOOK, type(error).__name__, error)
            found.append(CompilerReport(backend, None, f"{HOOK}() raised {type(error).__name__}: {error}"))
            continue
        if compiler is None:
            continue
        if not isinstance(compiler, PartitionCompiler) or compiler.backend != backend:
            logger.warning(
                "opcore: %s's %s() returned %r, not a PartitionCompiler with backend %r; ignored",
                backend,
                HOOK,
                compiler,
                backend,
            )
            reason = f"{HOOK}() returned {compiler!r}, not a PartitionCompiler with backend {backend!r}"
            found.append(CompilerReport(backend, None, reason))
            continue
        found.append(CompilerReport(backend, compiler))
    return found


def compilers() -> Mapping[str, PartitionCompiler]:
    """Every loaded backend's partition compiler, by backend name.

    A hook that raises or returns something else than a PartitionCompiler for its own backend is
    logged and left out: the plan then runs that backend's nodes one kernel at a time.

    >>> sorted(compilers())  # doctest: +SKIP
    ['example', 'onnxruntime', 'openvino']
    """
    return {r.backend: r.compiler for r in compiler_reports() if r.compiler is not None}
