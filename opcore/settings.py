"""Where preferences come from: the environment, ``opcore.configure``, and the
per-thread / per-task context of ``opcore.prefer`` and ``opcore.strict``.

Precedence, highest first: ``backend=`` on the call > context (prefer / strict) >
``configure(...)`` > environment (``OPCORE_BACKENDS``, ``OPCORE_DISABLE``,
``OPCORE_STRICT``, ``OPCORE_AUTOLOAD``) > each backend's priority.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from opcore.errors import ArgumentError

__all__ = ["ContextPolicy", "ENV_VARS", "Settings", "UNSET", "context_policy", "settings_from"]

ENV_VARS = ("OPCORE_AUTOLOAD", "OPCORE_BACKENDS", "OPCORE_CHECK", "OPCORE_DISABLE", "OPCORE_STRICT", "OPCORE_TUNE")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()  # "not given": keeps the value from the next lower level


@dataclass(frozen=True, slots=True)
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
    # setting name -> where its value came from ("OPCORE_BACKENDS", "opcore.configure", "default")
    sources: Mapping[str, str] | None = None

    def source(self, name: str) -> str:
        return (self.sources or {}).get(name, "default")

    def disabled(self, backend: str) -> bool:
        return "*" in self.disable or backend in self.disable


def _names(value: str | Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        value = value.split(",")
    return tuple(name.strip() for name in value if name.strip())


def _flag(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ArgumentError(arg=name, expected="1 or 0 (also true/false, yes/no, on/off)", found=repr(text))


def settings_from(environ: Mapping[str, str], overrides: Mapping[str, Any]) -> Settings:
    """Merge configure() overrides (UNSET entries skipped) over the environment."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    if environ.get("OPCORE_BACKENDS", "").strip():
        values["backends"], sources["backends"] = _names(environ["OPCORE_BACKENDS"]), "OPCORE_BACKENDS"
    if environ.get("OPCORE_DISABLE", "").strip():
        values["disable"], sources["disable"] = frozenset(_names(environ["OPCORE_DISABLE"])), "OPCORE_DISABLE"
    if "OPCORE_STRICT" in environ:
        values["strict"], sources["strict"] = _flag("OPCORE_STRICT", environ["OPCORE_STRICT"]), "OPCORE_STRICT"
    if "OPCORE_TUNE" in environ:
        values["tune"], sources["tune"] = _flag("OPCORE_TUNE", environ["OPCORE_TUNE"]), "OPCORE_TUNE"
    if "OPCORE_CHECK" in environ:
        values["check"], sources["check"] = _flag("OPCORE_CHECK", environ["OPCORE_CHECK"]), "OPCORE_CHECK"
    if "OPCORE_AUTOLOAD" in environ:
        values["autoload"], sources["autoload"] = (
            _flag("OPCORE_AUTOLOAD", environ["OPCORE_AUTOLOAD"]),
            "OPCORE_AUTOLOAD",
        )
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


@dataclass(frozen=True, slots=True, eq=False)
class ContextPolicy:
    """What prefer() / strict() set for the current thread or task (None: not set here).

    Instances are interned, so the dispatch cache can key on identity.
    """

    order: tuple[str, ...] | None = None
    strict: bool | None = None
    # The backend a pinned call's decomposition must keep to (PACE's rule: parts follow the whole).
    pin: str | None = None

    @staticmethod
    def make(order: tuple[str, ...] | None, strict: bool | None, pin: str | None) -> ContextPolicy:
        key = (order, strict, pin)
        found = _INTERNED.get(key)
        if found is None:
            found = _INTERNED.setdefault(key, ContextPolicy(order, strict, pin))
        return found


_INTERNED: dict[tuple[Any, ...], ContextPolicy] = {}
context_policy: ContextVar[ContextPolicy | None] = ContextVar("opcore_policy", default=None)
