"""The registry of kit entries: one per op, for the built-in ops and for ops that plugins add.

A plugin that contributes an op contract adds its entry in one of two ways:

* an entry point in the group ``opcore.testing`` naming a function that returns its entries (or
  an iterable of them), so that ``pytest --pyargs opcore.testing`` finds them without the
  plugin's own tests::

      [project.entry-points."opcore.testing"]
      example = "opcore_example_vendor.testing:entries"

* ``opcore.testing.add_entry(entry)`` from a conftest or a test module (for the session).

>>> sorted(e.op for e in entries())[:3]
['add', 'bmm', 'cat']
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterable
from importlib.metadata import entry_points
from typing import Any

from opcore.testing.records import ErrorInput, OpEntry, Sample

__all__ = [
    "ENTRY_POINT_GROUP",
    "add_entry",
    "builtin_entries",
    "entries",
    "entry",
    "entry_point_problems",
    "error_inputs_of",
    "remove_entry",
    "samples_of",
]

ENTRY_POINT_GROUP = "opcore.testing"

_lock = threading.RLock()
_added: dict[str, OpEntry] = {}
_from_entry_points: dict[str, OpEntry] | None = None
_problems: list[str] = []
# id(entry) -> (entry, what it generated); the entry is kept so that its id is never reused
_samples: dict[int, tuple[OpEntry, tuple[Sample, ...]]] = {}
_errors: dict[int, tuple[OpEntry, tuple[ErrorInput, ...]]] = {}


def builtin_entries() -> tuple[OpEntry, ...]:
    """The entries of the built-in ops: ``opcore.testing.ops.<family>.ENTRIES`` for each family."""
    from opcore.families import FAMILIES

    return tuple(e for f in FAMILIES for e in importlib.import_module(f"opcore.testing.ops.{f}").ENTRIES)


def add_entry(entry: OpEntry, *, replace: bool = False) -> OpEntry:
    """Add the entry of an op (a plugin's own contract) for this process.

    >>> opcore.testing.add_entry(OpEntry("myvendor.swish", swish_samples, swish_errors))   # doctest: +SKIP
    """
    if not isinstance(entry, OpEntry):
        raise TypeError(f"add_entry() expected an OpEntry, found {type(entry).__name__}")
    with _lock:
        known = {e.op: e for e in entries()}
        if entry.op in known and not replace and known[entry.op] is not entry:
            raise ValueError(
                f"add_entry(): op {entry.op!r} already has an entry (from {known[entry.op].source}); "
                "pass replace=True to replace it"
            )
        _added[entry.op] = entry
    return entry


def remove_entry(op: str) -> None:
    """Forget an entry added with add_entry (built-in entries stay)."""
    with _lock:
        _added.pop(op, None)


def entries() -> tuple[OpEntry, ...]:
    """Every entry: built-in, from ``opcore.testing`` entry points, then added ones (which win)."""
    merged = {e.op: e for e in builtin_entries()}
    merged.update(_entry_point_entries())
    merged.update(_added)
    return tuple(merged.values())


def entry(op: str) -> OpEntry:
    """The entry of ``op``; LookupError when the kit has none."""
    for found in entries():
        if found.op == op:
            return found
    raise LookupError(f"the conformance kit has no entry for op {op!r}; add one with opcore.testing.add_entry()")


def entry_point_problems() -> tuple[str, ...]:
    """One line per ``opcore.testing`` entry point that failed to load (the kit reports them)."""
    _entry_point_entries()
    return tuple(_problems)


def samples_of(op_entry: OpEntry) -> tuple[Sample, ...]:
    """The entry's samples, generated once (ids checked unique)."""
    cached = _samples.get(id(op_entry))
    if cached is not None:
        return cached[1]
    found = tuple(op_entry.samples())
    _unique(op_entry.op, "sample", [s.id for s in found])
    _samples[id(op_entry)] = (op_entry, found)
    return found


def error_inputs_of(op_entry: OpEntry) -> tuple[ErrorInput, ...]:
    """The entry's error inputs, generated once (ids checked unique)."""
    cached = _errors.get(id(op_entry))
    if cached is not None:
        return cached[1]
    found = tuple(op_entry.errors())
    _unique(op_entry.op, "error input", [e.id for e in found])
    _errors[id(op_entry)] = (op_entry, found)
    return found


def _unique(op: str, what: str, ids: list[str]) -> None:
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"{op}: several {what}s are named {', '.join(map(repr, repeated))}")


def _entry_point_entries() -> dict[str, OpEntry]:
    global _from_entry_points  # noqa: PLW0603 - loaded once per process, on first use
    if _from_entry_points is None:
        with _lock:
            if _from_entry_points is None:
                _from_entry_points = _load_entry_points()
    return _from_entry_points


def _load_entry_points() -> dict[str, OpEntry]:
    found: dict[str, OpEntry] = {}
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        source = f"{point.dist.name} {point.dist.version}" if point.dist is not None else point.value
        try:
            loaded = point.load()
            made = loaded() if callable(loaded) else getattr(loaded, "ENTRIES", loaded)
            for item in _as_entries(made):
                found[item.op] = item if item.source != "opcore" else _with_source(item, source)
        except Exception as error:  # a broken plugin's entries must not stop the kit
            _problems.append(f"entry point {point.name!r} ({point.value}, {source}): {type(error).__name__}: {error}")
    return found


def _as_entries(made: Any) -> Iterable[OpEntry]:
    items = [made] if isinstance(made, OpEntry) else list(made)
    for item in items:
        if not isinstance(item, OpEntry):
            raise TypeError(f"expected OpEntry records, found {type(item).__name__}")
    return items


def _with_source(item: OpEntry, source: str) -> OpEntry:
    from dataclasses import replace

    return replace(item, source=source)
