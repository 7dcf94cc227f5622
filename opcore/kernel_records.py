"""Kernel records: one implementation of one op on one backend.

>>> kernel = Kernel(op="relu", fn=lambda x: x.clip(min=0), dtypes=frozenset({DType.FLOAT32}))
>>> kernel.device_type, kernel.array_kind
(<DeviceType.CPU: 'cpu'>, <ArrayKind.NUMPY: 'numpy'>)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import field
from typing import Any

from opcore.fast_records import record
from opcore.types import ArrayKind, DeviceType, DType

__all__ = ["Checker", "Costly", "Kernel", "Prepare", "as_dtypes", "load_callable"]

# Called with the bound arguments: a TensorMeta for each tensor, plain values for the rest.
# Returns True to accept, or a string saying why it declines. Its answer is cached per call
# signature (shapes, dtypes, devices, attribute values), so it must not look at data.
# A Costly string declines on speed alone (the kernel could run, but a constant says another
# is faster here): without a measurement it is a decline like any other, and a measured ranking
# (opcore.tune) overrides it.
Checker = Callable[..., "bool | str"]


class Costly(str):
    """A checker's reason that is about speed, not ability: the static fallback of measured ranking.

    >>> def checker(x, w, b):
    ...     return Costly("M*K*N below the measured crossover") if x.numel < 64 else True
    >>> isinstance(Costly("too small to pay the fixed cost"), str)
    True
    """

    __slots__ = ()


# Called once by opcore.resolve with the bound arguments (tensors already in the kernel's
# array kind; the non-constant ones are the examples) and the names of the constant ones.
# Returns a function taking the non-constant tensor arguments, in schema order, that
# computes the op with the constants baked in (packed weights, initializers, ...).
Prepare = Callable[[tuple[Any, ...], frozenset[str]], Callable[..., Any]]


@record
class Kernel:
    """One implementation. ``fn`` takes the bound arguments in schema order, tensors in
    ``array_kind``, and returns the result in that kind (a tuple for several outputs).
    """

    op: str
    # A callable, or "module:qualname" imported when the kernel first runs, so that loading the
    # plugin does not import its runtime (torch, onnxruntime, openvino). If the callable has a
    # ``specialize(*metas)`` attribute, the dispatcher runs what it returns for a signature instead
    # (None: fn itself): a faster callable where the signature makes fn's branches unnecessary.
    fn: Callable[..., Any] | str
    dtypes: frozenset[DType]
    device_type: DeviceType = DeviceType.CPU
    array_kind: ArrayKind = ArrayKind.NUMPY
    # Added to the backend's priority; higher runs first.
    priority: int = 0
    # None: always accepts the inputs its dtypes and device type admit.
    checker: Checker | None = None
    # None: resolve() binds constants as they are and calls fn. Also "module:qualname".
    prepare: Prepare | str | None = None
    # Short name shown by explain when one backend has several kernels for an op ("onednn").
    label: str = ""
    # Dtypes of the contract this kernel never serves, each with why (explain shows it); they are
    # not in ``dtypes``, so dispatch never offers them and ``opcore ops --matrix`` says "no".
    # (): it declines no dtype outright (its checker may still decline a call).
    declined: tuple[tuple[DType, str], ...] = ()
    # True: the function ``prepare`` returns reads the constant tensors themselves (bound as given,
    # or views of them), so an in-place update reaches it without preparing again. False (the
    # default): it may hold its own form of them (packed, copied, compiled in), and resolve compares
    # the torch constants' version counters before each call, preparing again after a change.
    live_constants: bool = False
    # Filled in at registration: the backend's name, and module:qualname of fn.
    backend: str = ""
    source: str = field(default="", compare=False)

    @property
    def title(self) -> str:
        return f"{self.backend}/{self.label}" if self.label else self.backend

    def declined_reason(self, dtype: DType | None) -> str | None:
        """Why this kernel never serves ``dtype`` (its ``declined`` entry), or None."""
        return next((reason for declined, reason in self.declined if declined is dtype), None)

    def function(self) -> Callable[..., Any]:
        """fn, imported if it was given as "module:qualname"."""
        return load_callable(self.fn)


_LOADED: dict[str, Callable[..., Any]] = {}


def load_callable(value: Callable[..., Any] | str) -> Callable[..., Any]:
    """A callable as is, or the object "module:qualname" names (imported once, then cached).

    >>> load_callable("math:sqrt")(4.0)
    2.0
    """
    if not isinstance(value, str):
        return value
    loaded = _LOADED.get(value)
    if loaded is None:
        module_name, _, qualname = value.partition(":")
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
        loaded = _LOADED[value] = found
    return loaded


def as_dtypes(values: Iterable[DType | str] | DType | str) -> frozenset[DType]:
    """A frozenset of DType from names or DTypes.

    >>> sorted(as_dtypes(["float32", "bf16"]))
    [<DType.BFLOAT16: 'bfloat16'>, <DType.FLOAT32: 'float32'>]
    """
    if isinstance(values, (str, DType)):
        values = (values,)
    elif type(values) is frozenset and all(type(v) is DType for v in values):
        return values  # the common case at registration (~350 kernels at the first call): nothing to parse
    return frozenset(DType.parse(v) for v in values)
