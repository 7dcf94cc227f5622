"""Where preferences come from: the environment, ``opcore.configure``, and the
per-thread / per-task context of ``opcore.prefer`` and ``opcore.strict``.

Precedence, highest first: ``backend=`` on the call > context (prefer / strict) >
``configure(...)`` > environment (``OPCORE_BACKENDS``, ``OPCORE_DISABLE``,
``OPCORE_STRICT``, ``OPCORE_AUTOLOAD``) > each backend's priority.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from typing import Any

from opcore.errors import ArgumentError
from opcore.fast_records import record

__all__ = [
    "ContextPolicy", "ENV_VARS", "Settings", "UNSET", "context_policy", "pure_python", "runtime_threads",
    "settings_from",
]  # fmt: skip

ENV_VARS = (
    "OPCORE_AUTOLOAD", "OPCORE_BACKENDS", "OPCORE_CHECK", "OPCORE_COMPILE_TIMEOUT", "OPCORE_DISABLE",
    "OPCORE_LOAD_CACHE", "OPCORE_PROBE_TIMEOUT", "OPCORE_PURE_PYTHON", "OPCORE_RUNTIME_THREADS", "OPCORE_STRICT",
    "OPCORE_TUNE",
)  # fmt: skip
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
# names are separated by commas (also accepted: semicolons and spaces, which people write too)
_SEPARATORS = re.compile(r"[,;\s]+")


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()  # "not given": keeps the value from the next lower level


@record
class Settings:
    """Process-wide settings: configure() overrides on top of the environment.

    backends None: no order given, backends rank by priority.
    """

    backends: tuple[str, ...] | None = None
    disable: frozenset[str] = frozenset()
    strict: bool = False
    autoload: bool = True
    # True: the first call of a signature without a measurement in the tuning file measures its kernels
    # (opcore.tune) before running; cached calls never do.
    tune: bool = False
    # check every kernel result against the contract (not only each signature's first call)
    check: bool = False
    # seconds a backend's is_available() may take at load time; None: the loader's default (2 s)
    probe_timeout: float | None = None
    # seconds a partition compiler's compile()/load() may take; None: opcore.graph.partition_guard's default
    compile_timeout: float | None = None
    # False: the installed plugins' entry points are scanned on every load, not read from plugins.json
    # (opcore.discovery); OPCORE_LOAD_CACHE=0
    load_cache: bool = True
    # setting name -> where its value came from ("OPCORE_BACKENDS", "opcore.configure", "default")
    sources: Mapping[str, str] | None = None

    def source(self, name: str) -> str:
        return (self.sources or {}).get(name, "default")

    def disabled(self, backend: str, distribution: str | None = None) -> bool:
        """Disabled by its backend name or its distribution's name (case and -/_ ignored, as pip does)."""
        if not self.disable:
            return False
        folded = {_folded(name) for name in self.disable}
        if "*" in folded or _folded(backend) in folded:
            return True
        return distribution is not None and _folded(distribution) in folded


def _folded(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def _names(value: str | Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        value = _SEPARATORS.split(value)
    return tuple(name.strip() for name in value if name.strip())


def _seconds(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):  # NaN fails this too
        raise ArgumentError(
            arg=name, expected="a positive number of seconds", found=repr(text), fix=f"set {name}=2, or unset it"
        )
    return value


def _flag(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ArgumentError(arg=name, expected="1 or 0 (also true/false, yes/no, on/off)", found=repr(text))


def pure_python(environ: Mapping[str, str]) -> bool:
    """``OPCORE_PURE_PYTHON=1``: run() without its compiled fast path (opcore._fastrun), read once
    when opcore.dispatch is imported (the choice of what ``opcore.run`` is cannot change later).

    >>> pure_python({"OPCORE_PURE_PYTHON": "1"}), pure_python({})
    (True, False)
    """
    text = environ.get("OPCORE_PURE_PYTHON", "")
    return bool(text.strip()) and _flag("OPCORE_PURE_PYTHON", text)


def runtime_threads(environ: Mapping[str, str]) -> int | None:
    """``OPCORE_RUNTIME_THREADS=N``: the intra-op threads of the graph runtimes' sessions and compiled
    models opened from then on (ONNX Runtime's ``intra_op_num_threads``, OpenVINO's
    ``INFERENCE_NUM_THREADS``), so that they and torch (``torch.set_num_threads``) can share one budget
    of cores; unset, empty or invalid: each runtime's default (the machine's cores).

    >>> runtime_threads({"OPCORE_RUNTIME_THREADS": "2"}), runtime_threads({})
    (2, None)
    """
    text = environ.get("OPCORE_RUNTIME_THREADS", "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def settings_from(environ: Mapping[str, str], overrides: Mapping[str, Any]) -> Settings:
    """Merge configure() overrides (UNSET entries skipped) over the environment."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if environ.get("OPCORE_BACKENDS", "").strip():
        values["backends"], sources["backends"] = _names(environ["OPCORE_BACKENDS"]), "OPCORE_BACKENDS"
    if environ.get("OPCORE_DISABLE", "").strip():
        values["disable"], sources["disable"] = frozenset(_names(environ["OPCORE_DISABLE"])), "OPCORE_DISABLE"
    # every variable set to an empty string means "not set", as for OPCORE_BACKENDS
    flags = (("strict", "OPCORE_STRICT"), ("tune", "OPCORE_TUNE"), ("check", "OPCORE_CHECK"))
    for key, variable in (*flags, ("autoload", "OPCORE_AUTOLOAD"), ("load_cache", "OPCORE_LOAD_CACHE")):
        if environ.get(variable, "").strip():
            values[key], sources[key] = _flag(variable, environ[variable]), variable
    if environ.get("OPCORE_PROBE_TIMEOUT", "").strip():
        values["probe_timeout"] = _seconds("OPCORE_PROBE_TIMEOUT", environ["OPCORE_PROBE_TIMEOUT"].strip())
        sources["probe_timeout"] = "OPCORE_PROBE_TIMEOUT"
    if environ.get("OPCORE_COMPILE_TIMEOUT", "").strip():
        values["compile_timeout"] = _seconds("OPCORE_COMPILE_TIMEOUT", environ["OPCORE_COMPILE_TIMEOUT"].strip())
        sources["compile_timeout"] = "OPCORE_COMPILE_TIMEOUT"
    for key, value in overrides.items():
        if value is UNSET:
            continue
        if key == "backends":
            values[key] = _names(value) or None
        elif key == "disable":
            values[key] = frozenset(_names(value or ()))
        elif isinstance(value, bool):
            values[key] = value
        else:
            raise ArgumentError(op="opcore.configure", arg=key, expected="a bool", found=type(value).__name__)
        sources[key] = "opcore.configure"
    return Settings(sources=sources, **values)


def current_environment() -> Mapping[str, str]:
    return os.environ


class ContextPolicy:
    """What prefer() / strict() set for the current thread or task (None: not set here).

    Instances are interned, so the dispatch cache can key on identity; they are immutable. A plain
    slotted class, not a dataclass: made while the first opcore.run loads opcore, where generating
    a dataclass's methods costs ~1 ms (issue 15).
    """

    __slots__ = ("order", "pin", "strict")

    order: tuple[str, ...] | None
    strict: bool | None
    # The backend a pinned call's decomposition must keep to (PACE's rule: parts follow the whole).
    pin: str | None

    def __init__(
        self, order: tuple[str, ...] | None = None, strict: bool | None = None, pin: str | None = None
    ) -> None:
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "strict", strict)
        object.__setattr__(self, "pin", pin)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"ContextPolicy is immutable (interned): cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"ContextPolicy is immutable (interned): cannot delete {name!r}")

    def __repr__(self) -> str:
        return f"ContextPolicy(order={self.order!r}, strict={self.strict!r}, pin={self.pin!r})"

    @staticmethod
    def make(order: tuple[str, ...] | None, strict: bool | None, pin: str | None) -> ContextPolicy:
        key = (order, strict, pin)
        found = _INTERNED.get(key)
        if found is None:
            found = _INTERNED.setdefault(key, ContextPolicy(order, strict, pin))
        return found


_INTERNED: dict[tuple[Any, ...], ContextPolicy] = {}
context_policy: ContextVar[ContextPolicy | None] = ContextVar("opcore_policy", default=None)
