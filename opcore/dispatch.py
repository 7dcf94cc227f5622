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

This module is the cached path: run() and the keys it builds inline. The caches, the general keys
and the layout of a guarded slot are opcore._dispatchcaches' (a leaf, shared with the slow path). A
call found in none of them goes to the slow path, opcore._remember (bind, select, plan, remember the
signature), imported on the first miss; plans and the selection live in opcore.call_plans.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy

import opcore._dispatchcaches as caches
from opcore._dispatchcaches import MAX_CACHED, PURE_PYTHON_SET, clear_caches
from opcore.errors import ArgumentError, OpcoreError
from opcore.runtime import on_change
from opcore.settings import context_policy

__all__ = ["MAX_CACHED", "PURE_PYTHON_REASON", "clear_caches", "compiled", "run", "run_python", "use_compiled"]

# run()'s caches and keys (opcore._dispatchcaches, shared with the slow path) as this module's own globals:
# run_python reads each as one LOAD_GLOBAL, and opcore._fastrun reads _Tensor from this namespace
_ndarray = numpy.ndarray
_PLAIN = caches.PLAIN
_TORCH_TYPES = caches.TORCH_TYPES
_KEYWORD = caches.KEYWORD
_INLINE = caches.INLINE
_POSITIONAL = caches.POSITIONAL
_BOUND = caches.BOUND
_RECOVER = caches.RECOVER
_POSITIONS = caches.POSITIONS
_GUARDED = caches.GUARDED
_LAST = caches.LAST
_ALL_TENSORS = caches.ALL_TENSORS
_PATTERN = caches.PATTERN
_PLAIN_TYPE = caches.SLOT_PLAIN  # a guarded slot's fields (caches.SLOT_*; opcore/_fastrun.c reads the same)
_VALUE = caches.SLOT_VALUE
_CHECK = caches.SLOT_CHECK
_ENTRY = caches.SLOT_ENTRY
_RECOVERY_KEY = caches.SLOT_RECOVERY_KEY
_as_positional = caches.as_positional
_positional_key = caches.positional_key
_keyword_key = caches.keyword_key

on_change(clear_caches)


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
                return slot[_ENTRY](*args)
            except Exception as error:
                return _recover_cached(slot[_RECOVERY_KEY], op, args, kwargs, backend, error)
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
    plain = slot[_PLAIN_TYPE]
    if plain is _PATTERN:  # the value: per argument _ALL_TENSORS (a tensor there) or its constant (type, value)
        pattern = slot[_VALUE]
        tensors = []
        for a, want in zip(args, pattern):
            if want is _ALL_TENSORS:
                if type(a) is not _Tensor:
                    return False
                tensors.append(a)
            elif type(a) is not want[0] or a != want[1]:
                return False
        return len(args) == len(pattern) and bool(slot[_CHECK](*tensors))
    if plain is _ALL_TENSORS:
        return type(last) is _Tensor and (n < 3 or type(args[1]) is _Tensor) and bool(slot[_CHECK](*args))
    return (
        type(last) is plain
        and last == slot[_VALUE]
        and (n < 3 or type(args[1]) is _Tensor)
        and bool(slot[_CHECK](*args[:-1]))
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
    """The slow path (opcore._remember, imported on the first miss; it shares opcore._dispatchcaches with this
    module and never imports it)."""
    from opcore._remember import run_slow

    return run_slow(op, args, kwargs, backend)


_policy = context_policy.get


_Tensor: type = caches.torch_tensor_type()  # torch.Tensor once a torch tensor was seen, else a class no value has


def _note_torch_tensor(tensor: type) -> None:
    global _Tensor  # noqa: PLW0603 - one module global keeps run()'s type test a plain LOAD_GLOBAL
    _Tensor = tensor


caches.on_torch_tensor(_note_torch_tensor)


def _compiled(python: Callable[..., Any]) -> tuple[Any, str | None]:
    """run()'s guarded torch path compiled (opcore._fastrun, built from the core's own setup.py), the
    pure-Python run() behind it for everything else; or the Python function itself, with the reason,
    where the extension was not built (no C compiler where opcore was installed) or OPCORE_PURE_PYTHON=1.
    """
    if PURE_PYTHON_SET:
        return python, "OPCORE_PURE_PYTHON=1 was set when opcore.dispatch was imported"
    try:
        # by name: the extension is a leaf of its own, not the package's __init__ (which imports this module)
        _fastrun = importlib.import_module("opcore._fastrun")
    except ImportError as error:
        return python, f"opcore._fastrun was not built when opcore was installed (no C compiler there?): {error}"
    stale = _stale_build(getattr(_fastrun, "SOURCE", None))
    if stale is not None:
        return python, stale
    layout = getattr(_fastrun, "SLOT_LAYOUT", None)
    if layout != caches.SLOT_LAYOUT:  # the source digest already says so; this names the disagreement
        return python, (
            f"opcore._fastrun reads a guarded slot as {layout}, opcore._dispatchcaches writes {caches.SLOT_LAYOUT}: "
            "rebuild it (`make` or `pip install -e .`)"
        )
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
