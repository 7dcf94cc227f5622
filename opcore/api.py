"""The public functions behind ``import opcore`` (run and resolve live in their own modules)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opcore.call_plans import selection_for
from opcore.contracts import OpContract
from opcore.errors import ArgumentError, OpcoreError
from opcore.explanation import Explanation, explanation_of
from opcore.kernel_walk import check_named
from opcore.reports import PluginReport
from opcore.runtime import runtime
from opcore.settings import UNSET, ContextPolicy, Settings, context_policy
from opcore.types import TensorMeta

__all__ = [
    "backends",
    "configure",
    "explain",
    "infer_meta",
    "ops",
    "prefer",
    "register_plugin",
    "reload_plugins",
    "strict",
    "unregister_plugin",
]


def explain(op: str, /, *args: Any, backend: str | None = None, **kwargs: Any) -> Explanation:
    """Which backend would run this call, and why each other one would not (nothing runs).

    >>> print(opcore.explain("linear", x, w))   # doctest: +SKIP
    """
    rt = runtime().ensure_loaded()
    selection, _ = selection_for(rt, op, args, kwargs, backend)
    return explanation_of(selection)


@contextmanager
def prefer(*backends: str) -> Iterator[None]:
    """Try these backends first, in this order, for calls in this thread or task.

    >>> with opcore.prefer("onnxruntime", "cpu"):   # doctest: +SKIP
    ...     y = opcore.run("linear", x, w)
    """
    if not backends or not all(isinstance(b, str) for b in backends):
        raise ArgumentError(
            op="opcore.prefer", arg="backends", expected="one or more backend names", found=repr(backends)
        )
    rt = runtime().ensure_loaded()
    check_named(rt, backends, "opcore.prefer")
    current = context_policy.get()
    token = context_policy.set(
        ContextPolicy.make(tuple(backends), current.strict if current else None, current.pin if current else None)
    )
    try:
        yield
    finally:
        context_policy.reset(token)


@contextmanager
def strict(enabled: bool = True) -> Iterator[None]:
    """Within this block, a call runs on its first-choice backend or raises: no silent fallback.

    >>> with opcore.strict():   # doctest: +SKIP
    ...     y = opcore.run("linear", x, w)
    """
    current = context_policy.get()
    token = context_policy.set(
        ContextPolicy.make(current.order if current else None, bool(enabled), current.pin if current else None)
    )
    try:
        yield
    finally:
        context_policy.reset(token)


def configure(
    *,
    backends: Any = UNSET,
    disable: Any = UNSET,
    strict: Any = UNSET,
    autoload: Any = UNSET,
    tune: Any = UNSET,
    reset: bool = False,
) -> Settings:
    """Process-wide settings over the environment; returns the settings in effect before.

    backends: an order of names (``()``: plain priority, whatever OPCORE_BACKENDS says);
    disable: names, ``"*"`` for all (a load-time setting: plugins reload); strict: bool;
    autoload: bool; tune: bool (as OPCORE_TUNE: measure each new signature's kernels first).
    None for any of them drops that override, so the environment applies again; reset=True
    drops them all.

    >>> opcore.configure(backends=["openvino", "cpu"], strict=True)   # doctest: +SKIP
    """
    rt = runtime()
    if reset:
        rt.overrides.clear()
    try:
        return rt.configure(backends=backends, disable=disable, strict=strict, autoload=autoload, tune=tune)
    except OpcoreError as error:
        error.op = error.op or "opcore.configure"
        raise


def backends() -> tuple[PluginReport, ...]:
    """The load report of every plugin: loaded, unavailable, failed and disabled ones.

    >>> [(r.name, r.status.value) for r in opcore.backends()]   # doctest: +SKIP
    [('cpu', 'loaded'), ('cuda', 'unavailable'), ('reference', 'loaded')]
    """
    return tuple(runtime().ensure_loaded().loader.reports.values())


def ops() -> tuple[OpContract, ...]:
    """Every known op contract (built-in, from plugins, and namespaced ones used so far).

    >>> sorted(c.name for c in opcore.ops())[:3]   # doctest: +SKIP
    ['add', 'bmm', 'cat']
    """
    return tuple(sorted(runtime().ensure_loaded().registry.contracts.values(), key=lambda c: c.name))


def infer_meta(op: str, /, *args: Any, **kwargs: Any) -> TensorMeta | tuple[TensorMeta, ...]:
    """Output shape and dtype for inputs described by TensorMeta, without data or a backend.

    >>> x, w = TensorMeta((2, 8), DType.FLOAT32), TensorMeta((4, 8), DType.FLOAT32)
    >>> opcore.infer_meta("linear", x, w).shape
    (2, 4)
    """
    contract = runtime().ensure_loaded().registry.contract(op)
    try:
        bound = contract.schema.bind(args, kwargs, metas=True)
        from opcore.kernel_walk import tensor_arguments
        from opcore.meta import common_device

        common_device(tensor_arguments(contract, bound))
        return contract.meta(*bound)
    except OpcoreError as error:
        if error.op is None:
            error.op = op
        raise


def register_plugin(plugin: Any, name: str | None = None) -> PluginReport:
    """Load a plugin object (a module or any object with opcore hooks) in-process.

    Raises PluginError when it fails; the failure is in ``opcore.backends()`` as well.

    >>> opcore.register_plugin(my_plugin_module)   # doctest: +SKIP
    """
    from opcore.errors import PluginError
    from opcore.reports import PluginStatus

    report = runtime().register_plugin(plugin, name)
    if report.status is PluginStatus.FAILED:
        raise PluginError(
            f"register_plugin({report.name!r}) failed: {report.reason}", fix="see opcore.backends() for the traceback"
        )
    return report


def unregister_plugin(name: str) -> None:
    """Remove a backend and its kernels and contracts (entry-point plugins come back on reload)."""
    runtime().unregister_plugin(name)


def reload_plugins() -> None:
    """Re-read the OPCORE_* environment and load every plugin again on next use."""
    runtime().reload()
