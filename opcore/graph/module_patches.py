"""Attributes set on a model's modules (or a modeling module's globals) for the length of an
export, then given back: what ``static_cache_fixes``, ``complex_rotary`` and ``llama4_export``
change while torch.export traces a transformers model.

>>> import types
>>> box = types.SimpleNamespace(kept=1)
>>> with patched([(box, "kept", 2), (box, "added", 3)]) as count:
...     (count, box.kept, box.added)
(2, 2, 3)
>>> box.kept, hasattr(box, "added")
(1, False)
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["modules_of", "patched"]

_ABSENT = object()


def modules_of(model: Any, module_name: str, class_name: str) -> list[Any]:
    """``model``'s modules of exactly transformers' ``class_name`` from ``module_name`` (a modeling
    module loaded where the model is of that family: nothing is imported here)."""
    kind = getattr(sys.modules.get(module_name), class_name, None)
    return [m for m in model.modules() if kind is not None and type(m) is kind]


@contextlib.contextmanager
def patched(changes: Iterable[tuple[Any, str, Any]]) -> Iterator[int]:
    """Within the block, each ``(target, name, value)`` set (an instance attribute shadowing its
    class's method, or a module's global); after it, each name as it was: the value it held in the
    target's own ``__dict__``, or no entry there. Yields how many were set."""
    saved: list[tuple[Any, str, Any]] = []
    try:
        for target, name, value in changes:
            saved.append((target, name, vars(target).get(name, _ABSENT)))
            setattr(target, name, value)
        yield len(saved)
    finally:
        for target, name, before in reversed(saved):
            if before is _ABSENT:
                vars(target).pop(name, None)
            else:
                setattr(target, name, before)
