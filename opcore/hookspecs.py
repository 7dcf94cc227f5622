"""The hooks a backend plugin implements (pluggy project ``opcore``).

A plugin is a module (or object) named by an entry point in the group
``opcore.backends``; the entry point's name is the backend's name::

    [project.entry-points."opcore.backends"]
    mine = "opcore_mine.plugin"

and in ``opcore_mine/plugin.py``::

    import opcore

    @opcore.hookimpl
    def opcore_backend():
        return opcore.BackendSpec(name="mine", version="1.0", priority=150, device_types=("cpu",))

    @opcore.hookimpl
    def opcore_register_kernels(registrar):
        registrar.add_kernel("relu", relu_kernel, dtypes=["float32"])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from opcore.backend import BackendSpec
    from opcore.partition_protocol import PartitionCompiler
    from opcore.registry import Registrar

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT = "opcore"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def opcore_backend() -> BackendSpec:
    """Return the backend's BackendSpec. Must be cheap: no heavy imports here."""
    # a specification: pluggy calls the plugins' implementations, never this body
    raise NotImplementedError


@hookspec
def opcore_register_contracts(registrar: Registrar) -> None:
    """Add new op contracts (a vendor's own ops) with ``registrar.add_contract``.

    Called for every available plugin before any plugin registers kernels, so a
    plugin may register kernels for another plugin's contracts.
    """


@hookspec
def opcore_register_kernels(registrar: Registrar) -> None:
    """Add kernels with ``registrar.add_kernel`` or the ``registrar.kernel`` decorator.

    Runs only when the backend is available. Each kernel is validated against its
    op's schema here; one invalid kernel fails the whole plugin, which is reported
    and registers nothing. Keep heavy imports inside the kernels.
    """


@hookspec
def opcore_partition_compiler() -> PartitionCompiler | None:
    """Return the backend's partition compiler (``opcore.partition_protocol.PartitionCompiler``), or
    None: a graph runtime compiles whole runs of a captured model's nodes as one model.

    Called when a plan is made, only for loaded (available) backends. Must be cheap: return an
    object that imports its runtime when it first compiles or loads (see
    ``opcore.onemodel.partition.GraphPartitionCompiler``).
    """
