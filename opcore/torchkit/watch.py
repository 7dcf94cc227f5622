"""Watching weights a caller prepared something from (torch): has any changed since?

A prepared form of a model's weights (packed kernels, a compiled graph with the weights baked in)
goes stale when the weights change. Three kinds of change reach a parameter, and each leaves its
own trace: an in-place update (``p.mul_``, an optimizer step, ``load_state_dict`` copying in)
moves the tensor's version counter; an assignment (``module.weight = ...``,
``load_state_dict(..., assign=True)``) puts another tensor in the module's ``_parameters`` (or
``_buffers``) dict; ``p.data = t`` swaps the memory under the same tensor. A ``TensorWatch`` keeps,
per watched tensor, where it lives (that dict and its key), the tensor, its version counter and
its data pointer, and ``stale()`` compares all three: one dict lookup and two attribute reads per
tensor, cheap enough for every call (compiled where opcore._torchguard is built for this torch, the
Python loop otherwise). opcore.nn modules (``state.PreparedModule``) and opcore.graph
plans (``Plan.refresh``) both watch their weights with it.

>>> import torch
>>> layer = torch.nn.Linear(2, 2)
>>> watch = TensorWatch.of([("weight", layer._parameters, "weight")])
>>> watch.stale()
False
>>> with torch.no_grad():
...     _ = layer.weight.mul_(2)
>>> watch.changed()
['weight']
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Any

import torch

__all__ = ["TensorWatch", "version_of"]


def _columns(entries: list[tuple[Any, ...]], fields: tuple[int, ...]) -> tuple[tuple[Any, ...], ...]:
    return tuple(tuple(entry[i] for entry in entries) for i in fields)


def _compiled_watch(entries: tuple[tuple[Any, ...], ...]) -> Any:
    """opcore._torchguard.Watch over ``entries``, or None where it is not built for this torch, or a
    holder is not a plain dict (the Python loop serves then)."""
    from opcore._guards import compiled_module

    module = compiled_module()
    if module is None or not entries:
        return None
    try:
        return module.Watch(*_columns(list(entries), (1, 2, 3, 4, 5)))
    except (TypeError, ValueError, OverflowError):
        return None


def version_of(tensor: torch.Tensor) -> int:
    """The tensor's version counter; -1 for an inference tensor, which keeps none (nor changes in
    place outside inference mode)."""
    try:
        return tensor._version
    except RuntimeError:
        return -1


class TensorWatch:
    """Tensors as they were when taken: ``(label, holder, key)`` triples, the tensor being
    ``holder[key]`` (a module's ``_parameters`` or ``_buffers``, or any dict of tensors).

    ``stale()``: whether any of them changed (in place, replaced, or its memory swapped);
    ``changed()``: the labels of those that did. A key whose holder now holds None is a change.
    """

    __slots__ = ("_compiled", "_counted", "_uncounted", "entries")

    def __init__(self, entries: tuple[tuple[str, MutableMapping[str, Any], str, Any, int, int], ...]) -> None:
        # per tensor: label, holder, key, the tensor, its version counter and data pointer then
        self.entries = entries
        # what stale() compares, field by field in flat tuples: a call right after a graph runtime's run
        # finds every object here out of the CPU's caches (~0.1 ms for ~90 tensors), and one tuple per
        # tensor was one more object to fetch each (~20 % of it). Inference tensors keep no counter.
        self._counted = _columns([e for e in entries if e[4] >= 0], (1, 2, 3, 4, 5))
        self._uncounted = _columns([e for e in entries if e[4] < 0], (1, 2, 3, 5))
        # the same loop compiled (opcore._torchguard.Watch) where it serves: it reads each tensor's
        # implementation directly, so the CPU overlaps the cache misses of independent tensors
        self._compiled = _compiled_watch(entries)

    def __reduce__(self) -> tuple[Any, ...]:
        return TensorWatch, (self.entries,)

    @classmethod
    def of(cls, slots: Iterable[tuple[str, MutableMapping[str, Any], str]]) -> TensorWatch:
        """Watch ``holder[key]`` for each ``(label, holder, key)``, as they are now."""
        entries = []
        for label, holder, key in slots:
            tensor = holder[key]
            entries.append((label, holder, key, tensor, version_of(tensor), tensor.data_ptr()))
        return cls(tuple(entries))

    def __len__(self) -> int:
        return len(self.entries)

    def stale(self) -> bool:
        """Whether any watched tensor changed since it was taken."""
        if self._compiled is not None:
            return bool(self._compiled())
        return self._stale_python()

    def _stale_python(self) -> bool:
        for holder, key, tensor, version, pointer in zip(*self._counted):
            # the tensor's own counter and pointer: another tensor in its place fails the first test
            if holder.get(key) is not tensor or tensor._version != version or tensor.data_ptr() != pointer:
                return True
        for holder, key, tensor, pointer in zip(*self._uncounted):
            if holder.get(key) is not tensor or tensor.data_ptr() != pointer:
                return True
        return False

    def changed(self) -> list[str]:
        """The labels of the watched tensors that changed, in the order they were given."""
        found = []
        for label, holder, key, tensor, version, pointer in self.entries:
            now = holder.get(key)
            if now is not tensor or (version >= 0 and now._version != version) or now.data_ptr() != pointer:
                found.append(label)
        return found

    def current(self) -> dict[str, Any]:
        """Each label's tensor as its holder has it now (None where the key is gone or None)."""
        return {label: holder.get(key) for label, holder, key, _, _, _ in self.entries}

    def again(self) -> TensorWatch:
        """A watch of the same places, taking their tensors as they are now."""
        return TensorWatch.of((label, holder, key) for label, holder, key, _, _, _ in self.entries)
