"""The dispatcher's entry point: opcore.run (resolve is opcore.resolved, explain opcore.api).

The walk for a call (done once per signature, then cached):
bind the arguments -> read the input metas -> one device for all -> the contract's meta
function -> the ranked kernels for (device type, dtype) in the order the policy says ->
the first whose checker accepts. A kernel raising Unsupported hands over to the next;
one that crashes falls back with a warning (an error when pinned or strict). No kernel
at all: the contract's decomposition. Still nothing: NoKernelError with every candidate.

The cached path costs one key (op, policy, and per argument: dtype, shape and strides, or
type and value) and one dict lookup before the kernel runs; the meta check and the checkers
are skipped there because they passed for exactly that signature (layout included) before.
A torch call of run()'s inline shapes first tries the signature last cached for its op and first
tensor's shape, confirmed by torch's C++ tensor guard (opcore._guards): ~2x cheaper than the
Python key, which serves every call the guard does not confirm.
The first call of a signature checks the kernel's result against the contract's output metas
(opcore.results); strict mode and ``OPCORE_CHECK=1`` check every call.

This module is the cached path: run(), its caches and the keys it builds. A call it finds in none
of them goes to the slow path, opcore._remember (bind, select, plan, remember the signature);
plans and the selection live in opcore.plans.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy

from opcore.errors import ArgumentError, OpcoreError
from opcore.runtime import on_change
from opcore.settings import ContextPolicy, context_policy, pure_python

if TYPE_CHECKING:
    from opcore.plans import Plan

__all__ = ["MAX_CACHED", "PURE_PYTHON_REASON", "clear_caches", "compiled", "run", "run_python", "use_compiled"]

MAX_CACHED = 8192  # signatures; past this the caches start over (bounds memory for varying shapes)

_ndarray = numpy.ndarray
# the types of plain values a key holds as they are (hashable, compared by value, immutable); torch's
# dtype and device and numpy's dtypes join when first seen (note_constant_types): a torch user's
# dtype=torch.float32 then takes the cached path instead of binding on every call
_PLAIN: set[type] = {int, float, bool, str, type(None)}


def note_constant_types(values: Any) -> None:
    """Let the keys hold torch.dtype, torch.device and numpy.dtype values as they are (the slow path
    calls it with a call's values; the core never imports torch for it)."""
    for value in values:
        t = type(value)
        if t in _PLAIN:
            continue
        if (t.__module__ == "torch" and t.__name__ in ("dtype", "device")) or isinstance(value, numpy.dtype):
            _PLAIN.add(t)


_TORCH_TYPES: set[type] = set()  # torch.Tensor and subclasses (Parameter), added as they are seen
_KEYWORD: dict[tuple[Any, ...] | None, Callable[..., Any]] = {}  # calls with keywords holding tensors
_INLINE: dict[tuple[Any, ...], Callable[..., Any]] = {}  # run()'s inline keys (numpy arrays, torch tensors)
_POSITIONAL: dict[tuple[Any, ...] | None, Callable[..., Any]] = {}  # any positional call
_BOUND: dict[tuple[Any, ...], Plan] = {}
_RECOVER: dict[tuple[Any, ...] | None, Callable[[tuple[Any, ...], Exception], Any]] = {}
# per op: the position of each parameter that may be passed by keyword or by position (keyword-only
# ones are not there); run() turns linear(x, w, b=b) into linear(x, w, b) with it, so a keyword call
# has the positional call's key and entry
_POSITIONS: dict[str, dict[str, int]] = {}
# torch calls of run()'s inline shapes, by (op, policy, backend, number of arguments, first tensor's
# shape): the last signature cached there, confirmed by torch's C++ tensor guard (opcore._guards)
# instead of the Python key: (number of arguments, the trailing plain value's type or _ALL_TENSORS, that value,
# the guard's check, the entry, the inline key for its recovery, and (kernel, tail) where the entry only
# calls kernel(*args, *tail) (linear(x, w) -> F.linear(x, w, None)), else None: the compiled path's call)
_GUARDED: dict[tuple[Any, ...], tuple[Any, ...]] = {}
# the default context's (no policy, no backend named) first level in front of _GUARDED: per op, by number of
# arguments, the slot that last passed its guard ([None, 1, 2, 3, 4]), tried without reading the shape (the
# guard checks sizes and strides itself); a _GUARDED slot whose guard passes replaces it
_LAST: dict[str, list[tuple[Any, ...] | None]] = {}
_lock = threading.RLock()


def clear_caches() -> None:
    with _lock:
        _POSITIONAL.clear()
        _INLINE.clear()
        _KEYWORD.clear()
        _RECOVER.clear()
        _BOUND.clear()
        _POSITIONS.clear()
        _GUARDED.clear()
        _LAST.clear()


on_change(clear_caches)


def _as_positional(args: tuple[Any, ...], kwargs: dict[str, Any], positions: dict[str, int]) -> tuple[Any, ...] | None:
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


def run_python(op: str, /, *args: Any, backend: str | None = None, **kwargs: Any) -> Any:
    """Run ``op`` on the best available backend; see the module docstring for the walk.

    >>> opcore.run("linear", x, w, b)              # doctest: +SKIP
    >>> opcore.run("softmax", x, dim=-1, backend="reference")  # doctest: +SKIP
    """
    # The common calls build their key inline, without a loop (measured 0.18 us for two numpy arrays,
    # against 0.37-0.51 us for a loop): 1-3 numpy arrays; 1-3 plain torch tensors, or one or two
    # followed by a plain value (softmax(x, -1)) or None (linear(x, w, None)); plus keyword arguments
    # with plain values (softmax(x, dim=-1)), which are constants of the signature. A torch tensor
    # gives its dtype, shape, strides, device and layout: all a checker or the meta check may look
    # at (strides alone do not tell a sparse COO tensor from an expanded dense one, and torch runs a
    # CPU tensor with a meta one without complaint, so no field can be left to the kernel to catch).
    # opcore._remember.inline_key builds the same key for the slow path; test_dispatch checks that the two agree.
    if backend is not None and not isinstance(backend, str):  # before any key holds it (an unhashable one)
        raise _backend_error(op, backend)
    if kwargs:  # keywords naming the parameters right after the positional ones become positional
        positions = _POSITIONS.get(op)
        if positions is not None:
            if len(kwargs) == 1:  # _as_positional's common case inline (saves its frame, ~0.2 us)
                for name in kwargs:  # noqa: PLC0206 - no items() view, no unpacking: ~70 ns less
                    if positions.get(name) == len(args):
                        args += (kwargs[name],)
                        kwargs = {}
            else:
                moved = _as_positional(args, kwargs, positions)
                if moved is not None:
                    args, kwargs = moved, {}
    n = len(args)
    if n and not kwargs and (t := type(args[0])) is _Tensor and n < 5:  # a guarded torch signature, if one is this one
        policy = _policy()
        row = _LAST.get(op) if policy is None and backend is None else None
        first = None if row is None else row[n]
        slot = first if first is not None and _confirmed(first, args, n) else None
        if slot is None:
            key5 = (op, policy, backend, n, args[0].shape)
            found = _GUARDED.get(key5)
            if found is not None and found is not first and _confirmed(found, args, n):
                slot = found
                if row is not None:  # a row taken before a clear is detached: storing in it is harmless
                    row[n] = found
        if slot is not None:
            try:
                return slot[4](*args)
            except Exception as error:
                return _recover_cached(slot[5], op, args, kwargs, backend, error)
    key: tuple[Any, ...] | None = None
    try:
        if n == 1:
            a = args[0]
            t = type(a)
            if t is _Tensor:
                key = (op, _policy(), backend, a.dtype, a.shape, a.stride(), a.device, a.layout)
            elif t is _ndarray:
                key = (op, _policy(), backend, a.dtype, a.shape, a.strides)
        elif n == 2:
            a, b = args
            t = type(a)
            if t is _Tensor:
                u = type(b)
                if u is _Tensor:
                    key = (op, _policy(), backend, a.dtype, a.shape, a.stride(), a.device, a.layout, b.dtype, b.shape,
                           b.stride(), b.device, b.layout)  # fmt: skip
                elif u in _PLAIN:
                    key = (op, _policy(), backend, a.dtype, a.shape, a.stride(), a.device, a.layout, u, b)
            elif t is _ndarray and type(b) is _ndarray:
                key = (op, _policy(), backend, a.dtype, a.shape, a.strides, b.dtype, b.shape, b.strides)
        elif n == 3:
            a, b, c = args
            t = type(a)
            if t is _Tensor and type(b) is _Tensor:
                u = type(c)
                if u is _Tensor:
                    key = (op, _policy(), backend, a.dtype, a.shape, a.stride(), a.device, a.layout, b.dtype,
                           b.shape, b.stride(), b.device, b.layout, c.dtype, c.shape, c.stride(), c.device,
                           c.layout)  # fmt: skip
                elif u in _PLAIN:
                    key = (op, _policy(), backend, a.dtype, a.shape, a.stride(), a.device, a.layout, b.dtype, b.shape,
                           b.stride(), b.device, b.layout, u, c)  # fmt: skip
            elif t is _ndarray and type(b) is _ndarray and type(c) is _ndarray:
                key = (op, _policy(), backend, a.dtype, a.shape, a.strides, b.dtype, b.shape, b.strides, c.dtype,
                       c.shape, c.strides)  # fmt: skip
    except RuntimeError:  # a sparse CSR tensor has no strides: the general path keys its layout
        key = None
    if key is not None:
        if kwargs:
            for value in kwargs.values():
                if type(value) not in _PLAIN:
                    key = None
                    break
            else:
                key += tuple(kwargs.items())
        if key is not None:
            entry = _INLINE.get(key)
            if entry is not None:
                try:
                    return entry(*args)
                except Exception as error:
                    return _recover_cached(key, op, args, kwargs, backend, error)
    if not kwargs:
        key = _positional_key(op, _policy(), backend, args)
        entry = _POSITIONAL.get(key)
        if entry is not None:
            try:
                return entry(*args)
            except Exception as error:
                return _recover_cached(key, op, args, kwargs, backend, error)
    else:  # keywords holding tensors (linear(x, w, b=b)) or other values
        key = _keyword_key(op, _policy(), backend, args, kwargs)
        called = _KEYWORD.get(key)
        if called is not None:
            try:
                return called(args, kwargs)
            except Exception as error:
                return _recover_cached(key, op, args, kwargs, backend, error, keywords=True)
    return _run_slow(op, args, kwargs, backend)


def _confirmed(slot: tuple[Any, ...], args: tuple[Any, ...], n: int) -> bool:
    """Whether a _GUARDED slot serves this call: the argument types, the trailing plain value, torch's guard."""
    last = args[-1]
    if slot[1] is _PATTERN:  # slot[2]: per argument _ALL_TENSORS (a tensor there) or its constant (type, value)
        tensors = []
        for a, want in zip(args, slot[2]):
            if want is _ALL_TENSORS:
                if type(a) is not _Tensor:
                    return False
                tensors.append(a)
            elif type(a) is not want[0] or a != want[1]:
                return False
        return len(args) == len(slot[2]) and bool(slot[3](*tensors))
    if slot[1] is _ALL_TENSORS:
        return type(last) is _Tensor and (n < 3 or type(args[1]) is _Tensor) and bool(slot[3](*args))
    return (
        type(last) is slot[1] and last == slot[2] and (n < 3 or type(args[1]) is _Tensor) and bool(slot[3](*args[:-1]))
    )


def _recover_cached(
    key: tuple[Any, ...] | None,
    op: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    backend: str | None,
    error: Exception,
    keywords: bool = False,
) -> Any:
    """A cached entry raised: its recovery, or (the caches were cleared meanwhile by another thread)
    the call dispatched afresh, whose own plan handles the failure. keywords: the entry was a
    keyword entry, whose recovery takes (args, kwargs).
    """
    recover = _RECOVER.get(key)
    if recover is None:
        return _run_slow(op, args, kwargs, backend)
    return recover((args, kwargs) if keywords else args, error)


def _backend_error(op: str, backend: object) -> OpcoreError:
    return ArgumentError(
        op=op if isinstance(op, str) else None,
        arg="backend",
        expected="a backend name (str) or None",
        found=f"{type(backend).__name__} {backend!r}",
        fix='pass one name, e.g. backend="cpu"; opcore.backends() lists them',
    )


def _run_slow(op: str, args: tuple[Any, ...], kwargs: dict[str, Any], backend: str | None) -> Any:
    """The slow path (opcore._remember, imported on the first miss: it imports this module)."""
    from opcore._remember import run_slow

    return run_slow(op, args, kwargs, backend)


_policy = context_policy.get


class _NoTorch:
    """Stands for torch.Tensor until a torch tensor is seen (the core does not import torch)."""


_Tensor: type = _NoTorch


def _note_torch_type(t: type) -> None:
    """A torch tensor type was seen: key it from now on (exactly torch.Tensor inline, subclasses in a loop)."""
    global _Tensor  # noqa: PLW0603 - one module global keeps run()'s type test a plain LOAD_GLOBAL
    _TORCH_TYPES.add(t)
    if _Tensor is _NoTorch:
        import torch

        _Tensor = torch.Tensor


def _torch_signature(a: Any) -> tuple[Any, ...]:
    """What checkers may look at in a torch tensor: dtype, shape, strides, device and layout."""
    try:
        return (a.dtype, a.shape, a.stride(), a.device, a.layout)
    except RuntimeError:  # sparse CSR tensors have no strides
        return (a.dtype, a.shape, None, a.device, a.layout)


def _positional_key(
    op: str, policy: ContextPolicy | None, backend: str | None, args: tuple[Any, ...]
) -> tuple[Any, ...] | None:
    """The general positional key; None when an argument (a list, an unknown object) has no cheap key."""
    key: list[Any] = [op, policy, backend]
    for a in args:
        t = type(a)
        if t in _PLAIN:
            key.append((t, a))
        elif t is _ndarray:
            key.append((a.dtype, a.shape, a.strides))
        elif t in _TORCH_TYPES:
            # numpy and torch dtypes never compare equal: the two kinds never share a key
            key.append(_torch_signature(a))
        elif t is tuple and all(type(v) in _PLAIN for v in a):  # normalized_shape=(1024,)
            key.append((t, a))
        else:
            return None
    return tuple(key)


def _keyword_key(
    op: str, policy: ContextPolicy | None, backend: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...] | None:
    """The general key of a call with keywords: the positional key plus each keyword's name and key."""
    key = _positional_key(op, policy, backend, args)
    if key is None:
        return None
    values = _positional_key(op, policy, backend, tuple(kwargs.values()))
    if values is None:
        return None
    return (*key, *kwargs, *values[3:])


class _AllTensors:
    """Marks a _GUARDED slot whose arguments are all tensors (no trailing plain value)."""


_ALL_TENSORS = _AllTensors


class _Pattern:
    """Marks a _GUARDED slot whose constants may stand anywhere (layer_norm(x, (8,), w, b)): slot[2] is
    the pattern, per argument _ALL_TENSORS (a tensor there) or the constant's (type, value)."""


_PATTERN = _Pattern


# OPCORE_PURE_PYTHON=1 when this module was imported: no compiled part serves this process (opcore._guards reads it too)
PURE_PYTHON_SET = pure_python(os.environ)


def _compiled(python: Callable[..., Any]) -> tuple[Any, str | None]:
    """run()'s guarded torch path compiled (opcore._fastrun, built from the core's own setup.py), the
    pure-Python run() behind it for everything else; or the Python function itself, with the reason,
    where the extension was not built (no C compiler where opcore was installed) or OPCORE_PURE_PYTHON=1.
    """
    if PURE_PYTHON_SET:
        return python, "OPCORE_PURE_PYTHON=1 was set when opcore.dispatch was imported"
    try:
        from opcore import _fastrun  # type: ignore[attr-defined,unused-ignore]
    except ImportError as error:
        return python, f"opcore._fastrun was not built when opcore was installed (no C compiler there?): {error}"
    stale = _stale_build(getattr(_fastrun, "SOURCE", None))
    if stale is not None:
        return python, stale
    try:
        fast = _fastrun.FastRun(
            python, _GUARDED, _POSITIONS, context_policy, _recover_cached, _ALL_TENSORS, globals(), _INLINE, _ndarray,
            _LAST, _PATTERN,
        )  # fmt: skip
    except Exception as error:  # a build that does not fit this dispatch.py never takes the import down
        return python, f"opcore._fastrun refused this opcore.dispatch ({type(error).__name__}: {error}): rebuild it"
    functools.update_wrapper(fast, python)  # docstring, and __wrapped__ for inspect.signature
    fast.__name__ = fast.__qualname__ = "run"
    return fast, None


def _stale_build(built_from: str | None) -> str | None:
    """Why the compiled module must not be used: it was built from another _fastrun.c than the one
    beside it (an editable install after a pull, not rebuilt); None where they agree, or where the
    source is not installed (a wheel ships the module, not the file)."""
    source = Path(__file__).with_name("_fastrun.c")
    if not source.is_file():
        return None
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    if built_from == digest:
        return None
    return (
        f"opcore._fastrun was built from another version of opcore/_fastrun.c (built from {built_from}, the "
        f"file is {digest}): run `make` or `pip install -e .` again to rebuild it"
    )


# opcore.run: the compiled fast path in front of run_python, or run_python itself (PURE_PYTHON_REASON says why)
if TYPE_CHECKING:
    run = run_python
    PURE_PYTHON_REASON: str | None = None
else:
    run, PURE_PYTHON_REASON = _compiled(run_python)


def compiled() -> bool:
    """Whether ``opcore.run`` takes the compiled fast path now (False: PURE_PYTHON_REASON, or the
    path turned off by use_compiled(False), which forwards every call to run_python).

    >>> compiled() in (True, False)
    True
    """
    return run is not run_python and bool(getattr(run, "enabled", False))


def compiled_part(name: str) -> Any:
    """A type or function of the compiled module (opcore._fastrun) where it serves this process (built
    from the source beside it, OPCORE_PURE_PYTHON not set), else None: opcore.resolved takes its
    ResolvedBase and inherit_vectorcall.

    >>> compiled_part("ResolvedBase") is None or callable(compiled_part("ResolvedBase"))
    True
    """
    if run is run_python:
        return None
    return getattr(sys.modules.get("opcore._fastrun"), name, None)


def use_compiled(enabled: bool) -> None:
    """Turn the compiled fast path on or off in this process (off: every call goes to run_python as it
    came); nothing to do where it is absent (PURE_PYTHON_REASON). The tests run both paths with it.

    >>> use_compiled(False); compiled()
    False
    """
    if run is not run_python:
        setattr(run, "enabled", bool(enabled))  # noqa: B010 - an attribute of the compiled callable only
