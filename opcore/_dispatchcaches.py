"""run()'s caches and the keys into them: the state opcore.dispatch (the cached path) and opcore._remember
(the slow path that fills them) share. A leaf: it imports no other part of the dispatcher, so both import
it and neither imports the other's internals (dispatch imports _remember on its first miss, never the
other way round).

The caches (each cleared by clear_caches, which opcore.dispatch registers with the runtime):

* INLINE: run()'s inline keys (1-3 numpy arrays or torch tensors, plain values) -> entry;
* POSITIONAL: the general positional key (positional_key) -> entry;
* KEYWORD: the general keyword key (keyword_key) of a call whose keywords hold tensors -> entry(args, kwargs);
* BOUND: the bound call's canonical key -> its plan (the slow path's own cache);
* RECOVER: each key above -> the recovery of its entry's plan (an entry that raised);
* POSITIONS: per op, the position of each parameter passed by keyword or by position;
* GUARDED and LAST: torch signatures confirmed by torch's C++ tensor guard, as slots (SLOT_* below).

A guarded slot is a tuple read by index in three places: run_python (opcore.dispatch), the slow path
that builds it (opcore._remember) and the compiled path (opcore/_fastrun.c, whose #defines carry the
same names; tests/test_slot_layout.py checks that the two sides agree).

>>> positional_key("relu", None, None, (1.5,))
('relu', None, None, (<class 'float'>, 1.5))
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import numpy

from opcore.settings import ContextPolicy, pure_python

__all__ = [
    "ALL_TENSORS",
    "BOUND",
    "GUARDED",
    "INLINE",
    "KEYWORD",
    "LAST",
    "LAST_ROW_SIZE",
    "MAX_CACHED",
    "PATTERN",
    "PLAIN",
    "POSITIONAL",
    "POSITIONS",
    "PURE_PYTHON_SET",
    "RECOVER",
    "SLOT_ARGUMENTS",
    "SLOT_BARE",
    "SLOT_CHECK",
    "SLOT_ENTRY",
    "SLOT_LAYOUT",
    "SLOT_PLAIN",
    "SLOT_RECOVERY_KEY",
    "SLOT_SIZE",
    "SLOT_VALUE",
    "TORCH_TYPES",
    "as_positional",
    "clear_caches",
    "guarded_slot",
    "keyword_key",
    "lock",
    "note_constant_types",
    "note_torch_type",
    "on_torch_tensor",
    "positional_key",
    "torch_signature",
    "torch_tensor_type",
]

MAX_CACHED = 8192  # signatures; past this the caches start over (bounds memory for varying shapes)

# OPCORE_PURE_PYTHON=1 when the dispatcher was imported: no compiled part serves this process
# (opcore.dispatch leaves opcore._fastrun out, opcore._guards opcore._torchguard)
PURE_PYTHON_SET = pure_python(os.environ)

# A guarded slot (GUARDED's values, LAST's rows' items): a tuple of SLOT_SIZE items at these indices.
SLOT_ARGUMENTS = 0  # the number of arguments (1-4)
SLOT_PLAIN = 1  # the trailing plain value's type, or ALL_TENSORS (no plain value), or PATTERN
SLOT_VALUE = (
    2  # that plain value (None for ALL_TENSORS); for PATTERN the pattern: per argument ALL_TENSORS or (type, value)
)
SLOT_CHECK = 3  # torch's guard on the tensors: check(*tensors) -> bool
SLOT_ENTRY = 4  # the cached entry, called with the raw arguments
SLOT_RECOVERY_KEY = 5  # the inline (or, for PATTERN, the general positional) key of the entry's recovery in RECOVER
SLOT_BARE = 6  # (kernel, tail) where the entry only calls kernel(*args, *tail), else None
SLOT_SIZE = 7
LAST_ROW_SIZE = 5  # a LAST row: [None, the slot of 1, 2, 3, 4 arguments]
# every index and size by name, as opcore._fastrun exports its own #defines (SLOT_LAYOUT there): the
# layout test (tests/test_slot_layout.py) compares the two
SLOT_LAYOUT = {
    "SLOT_ARGUMENTS": SLOT_ARGUMENTS,
    "SLOT_PLAIN": SLOT_PLAIN,
    "SLOT_VALUE": SLOT_VALUE,
    "SLOT_CHECK": SLOT_CHECK,
    "SLOT_ENTRY": SLOT_ENTRY,
    "SLOT_RECOVERY_KEY": SLOT_RECOVERY_KEY,
    "SLOT_BARE": SLOT_BARE,
    "SLOT_SIZE": SLOT_SIZE,
    "LAST_ROW_SIZE": LAST_ROW_SIZE,
}


def guarded_slot(
    arguments: int,
    plain: Any,
    value: Any,
    check: Callable[..., bool],
    entry: Callable[..., Any],
    *,
    recovery_key: tuple[Any, ...],
    bare: tuple[Callable[..., Any], tuple[Any, ...]] | None,
) -> tuple[Any, ...]:
    """A guarded slot, each field at its SLOT_* index (the slow path builds them; run() and
    opcore._fastrun read them)."""
    slot: list[Any] = [None] * SLOT_SIZE
    slot[SLOT_ARGUMENTS] = arguments
    slot[SLOT_PLAIN] = plain
    slot[SLOT_VALUE] = value
    slot[SLOT_CHECK] = check
    slot[SLOT_ENTRY] = entry
    slot[SLOT_RECOVERY_KEY] = recovery_key
    slot[SLOT_BARE] = bare
    return tuple(slot)


class AllTensors:
    """Marks a GUARDED slot whose arguments are all tensors (no trailing plain value), and a tensor's
    place in a PATTERN slot's pattern."""


class Pattern:
    """Marks a GUARDED slot whose constants may stand anywhere (layer_norm(x, (8,), w, b)): its
    SLOT_VALUE is the pattern, per argument ALL_TENSORS (a tensor there) or the constant's (type, value)."""


ALL_TENSORS = AllTensors
PATTERN = Pattern

# the types of plain values a key holds as they are (hashable, compared by value, immutable); torch's
# dtype and device and numpy's dtypes join when first seen (note_constant_types): a torch user's
# dtype=torch.float32 then takes the cached path instead of binding on every call
PLAIN: set[type] = {int, float, bool, str, type(None)}
TORCH_TYPES: set[type] = set()  # torch.Tensor and subclasses (Parameter), added as they are seen

KEYWORD: dict[tuple[Any, ...] | None, Callable[..., Any]] = {}  # calls with keywords holding tensors
INLINE: dict[tuple[Any, ...], Callable[..., Any]] = {}  # run()'s inline keys (numpy arrays, torch tensors)
POSITIONAL: dict[tuple[Any, ...] | None, Callable[..., Any]] = {}  # any positional call
BOUND: dict[tuple[Any, ...], Any] = {}  # the bound call's canonical key -> its opcore.call_plans.CallPlan
RECOVER: dict[tuple[Any, ...] | None, Callable[[tuple[Any, ...], Exception], Any]] = {}
# per op: the position of each parameter that may be passed by keyword or by position (keyword-only
# ones are not there); run() turns linear(x, w, b=b) into linear(x, w, b) with it, so a keyword call
# has the positional call's key and entry
POSITIONS: dict[str, dict[str, int]] = {}
# torch calls of run()'s inline shapes, by (op, policy, backend, number of arguments, first tensor's
# shape): the slot (SLOT_* above) last cached there, confirmed by torch's C++ tensor guard (opcore._guards)
# instead of the Python key
GUARDED: dict[tuple[Any, ...], tuple[Any, ...]] = {}
# the default context's (no policy, no backend named) first level in front of GUARDED: per op, by number of
# arguments, the slot that last passed its guard ([None, 1, 2, 3, 4]), tried without reading the shape (the
# guard checks sizes and strides itself); a GUARDED slot whose guard passes replaces it
LAST: dict[str, list[tuple[Any, ...] | None]] = {}
lock = threading.RLock()


def clear_caches() -> None:
    """Forget every cached signature (opcore.dispatch.clear_caches; the runtime calls it on a change)."""
    with lock:
        POSITIONAL.clear()
        INLINE.clear()
        KEYWORD.clear()
        RECOVER.clear()
        BOUND.clear()
        POSITIONS.clear()
        GUARDED.clear()
        LAST.clear()


def note_constant_types(values: Any) -> None:
    """Let the keys hold torch.dtype, torch.device and numpy.dtype values as they are (the slow path
    calls it with a call's values; the core never imports torch for it)."""
    for value in values:
        t = type(value)
        if t in PLAIN:
            continue
        if (t.__module__ == "torch" and t.__name__ in ("dtype", "device")) or isinstance(value, numpy.dtype):
            PLAIN.add(t)


class _NoTorch:
    """Stands for torch.Tensor until a torch tensor is seen (the core does not import torch)."""


_tensor_type: list[type] = [_NoTorch]
_tensor_listeners: list[Callable[[type], None]] = []


def torch_tensor_type() -> type:
    """torch.Tensor once a torch tensor was seen (note_torch_type), else a class no value has."""
    return _tensor_type[0]


def on_torch_tensor(listener: Callable[[type], None]) -> None:
    """Call ``listener(torch.Tensor)`` when the first torch tensor is seen (now, if one was): opcore.dispatch
    keeps torch.Tensor in a module global of its own, which run()'s type test reads as a plain LOAD_GLOBAL."""
    _tensor_listeners.append(listener)
    if _tensor_type[0] is not _NoTorch:
        listener(_tensor_type[0])


def note_torch_type(t: type) -> None:
    """A torch tensor type was seen: key it from now on (exactly torch.Tensor inline, subclasses in a loop)."""
    TORCH_TYPES.add(t)
    if _tensor_type[0] is _NoTorch:
        import torch

        _tensor_type[0] = torch.Tensor
        for listener in _tensor_listeners:
            listener(torch.Tensor)


def as_positional(args: tuple[Any, ...], kwargs: dict[str, Any], positions: dict[str, int]) -> tuple[Any, ...] | None:
    """``args`` extended by the keyword values when the keywords name exactly the parameters right
    after them (in any order), else None: the call then binds as it is (a gap, a keyword-only or
    unknown name, a duplicate of a positional argument: bind() keeps its own errors for these).
    """
    n = len(args)
    if len(kwargs) == 1:  # the common case (linear(x, w, b=b), softmax(x, dim=-1)) without a list
        for name, value in kwargs.items():
            if positions.get(name) == n:
                return (*args, value)
        return None
    values: list[Any] = [None] * len(kwargs)
    for name, value in kwargs.items():
        i = positions.get(name, -1) - n
        if not 0 <= i < len(values):
            return None
        values[i] = value  # distinct names have distinct positions: every slot is filled once
    return (*args, *values)


def torch_signature(a: Any) -> tuple[Any, ...]:
    """What checkers may look at in a torch tensor: dtype, shape, strides, device and layout."""
    try:
        return (a.dtype, a.shape, a.stride(), a.device, a.layout)
    except RuntimeError:  # sparse CSR tensors have no strides
        return (a.dtype, a.shape, None, a.device, a.layout)


_ndarray = numpy.ndarray


def positional_key(
    op: str, policy: ContextPolicy | None, backend: str | None, args: tuple[Any, ...]
) -> tuple[Any, ...] | None:
    """The general positional key; None when an argument (a list, an unknown object) has no cheap key."""
    key: list[Any] = [op, policy, backend]
    for a in args:
        t = type(a)
        if t in PLAIN:
            key.append((t, a))
        elif t is _ndarray:
            key.append((a.dtype, a.shape, a.strides))
        elif t in TORCH_TYPES:
            # numpy and torch dtypes never compare equal: the two kinds never share a key
            key.append(torch_signature(a))
        elif t is tuple and all(type(v) in PLAIN for v in a):  # normalized_shape=(1024,)
            key.append((t, a))
        else:
            return None
    return tuple(key)


def keyword_key(
    op: str, policy: ContextPolicy | None, backend: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...] | None:
    """The general key of a call with keywords: the positional key plus each keyword's name and key."""
    key = positional_key(op, policy, backend, args)
    if key is None:
        return None
    values = positional_key(op, policy, backend, tuple(kwargs.values()))
    if values is None:
        return None
    return (*key, *kwargs, *values[3:])
