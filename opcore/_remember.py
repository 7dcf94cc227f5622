"""run()'s slow path: bind, select and plan a new signature, then remember it for run()'s cached path.

A call run() finds in none of its caches comes here (opcore.dispatch imports this module on the
first such call). The plan is cached under the bound call's canonical key (BOUND), and an entry
taking the caller's raw arguments under each key run() builds for that call: the inline key, the
general positional key, or the keyword key; a torch call of the inline shapes also gets a slot
confirmed by torch's tensor guard (GUARDED). The caches themselves live in opcore._dispatchcaches,
which opcore.dispatch reads too (this module never imports opcore.dispatch).

>>> run_slow("relu", (x,), {}, None)   # what run() does on a miss   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy

import opcore._dispatchcaches as caches
from opcore._calls import fixed_arity
from opcore._dispatchcaches import (
    ALL_TENSORS,
    BOUND,
    GUARDED,
    INLINE,
    KEYWORD,
    LAST,
    LAST_ROW_SIZE,
    PATTERN,
    PLAIN,
    POSITIONAL,
    POSITIONS,
    RECOVER,
    TORCH_TYPES,
    as_positional,
    clear_caches,
    guarded_slot,
    keyword_key,
    lock,
    note_constant_types,
    note_torch_type,
    positional_key,
    torch_signature,
    torch_tensor_type,
)
from opcore.call_plans import CallPlan, bind, build_plan
from opcore.contracts import OpContract
from opcore.runtime import runtime
from opcore.settings import ContextPolicy, context_policy
from opcore.tuning.selecting import select_tuned
from opcore.types import array_kind_of

__all__ = ["inline_key", "run_slow"]


def _positions_of(contract: OpContract) -> dict[str, int]:
    """The contract's keyword -> position table (see POSITIONS)."""
    schema = contract.schema
    return {a.name: i for i, a in enumerate(schema.arguments) if i < schema.n_positional and not a.kwarg_only}


def inline_key(
    op: str, policy: ContextPolicy | None, backend: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...] | None:
    """run()'s inline key as a function (None when run() builds none for these arguments)."""
    if any(type(v) not in PLAIN for v in kwargs.values()):
        return None
    types = [type(a) for a in args]
    if 1 <= len(args) <= 3 and all(t is numpy.ndarray for t in types):
        key: list[Any] = [op, policy, backend]
        for a in args:
            key += (a.dtype, a.shape, a.strides)
        return (*key, *kwargs.items())
    tensors = len(args) if types and types[-1] is torch_tensor_type() else len(args) - 1
    if not 1 <= len(args) <= 3 or tensors < 1 or (tensors == 1 and len(args) == 3):
        return None
    if any(t is not torch_tensor_type() for t in types[:tensors]) or (tensors < len(args) and types[-1] not in PLAIN):
        return None
    key = [op, policy, backend]
    try:
        for a in args[:tensors]:
            key += (a.dtype, a.shape, a.stride(), a.device, a.layout)
    except RuntimeError:
        return None
    if tensors < len(args):
        key += (types[-1], args[-1])
    return (*key, *kwargs.items())


def _bound_key(values: tuple[Any, ...]) -> list[Any]:
    key: list[Any] = []
    for a in values:
        t = type(a)
        if t is numpy.ndarray:
            key += (a.dtype, a.shape, a.strides)
        elif t is tuple:
            key.append(tuple(_bound_key(a)))
        elif isinstance(a, numpy.ndarray):  # a subclass (np.matrix, masked): select refuses it, with the fix
            key += (t, a.dtype, a.shape, a.strides)
        elif array_kind_of(a) is not None:
            if t not in TORCH_TYPES:
                note_torch_type(t)
            key.append(torch_signature(a))
        else:
            key += (t, a)
    return key


def run_slow(op: str, args: tuple[Any, ...], kwargs: dict[str, Any], backend: str | None) -> Any:
    rt = runtime().ensure_loaded()
    contract = rt.registry.contract(op)
    positions = POSITIONS.get(op)
    if positions is None:  # also for positional calls: a later keyword call then finds it in run()
        positions = POSITIONS[op] = _positions_of(contract)
    if kwargs:
        moved = as_positional(args, kwargs, positions)
        if moved is not None:  # cached under the positional call's key (run() moves them the same way)
            args, kwargs = moved, {}
    bound = bind(contract, op, args, kwargs)
    note_constant_types((*args, *kwargs.values()))
    policy = context_policy.get()
    canonical = (op, policy, backend, *_bound_key(bound))
    plan = BOUND.get(canonical)
    if plan is not None:
        _remember(op, policy, backend, args, kwargs, bound, plan)
        return plan(*bound)
    pin = backend if backend is not None else (policy.pin if policy is not None else None)
    selection = select_tuned(rt, contract, bound, policy, pin)
    if selection.error is not None:
        raise selection.error
    plan = build_plan(selection, bound, rt.settings.check)
    result = plan.first_call(bound)  # checks the result; drops a kernel that broke the contract
    with lock:
        if len(BOUND) >= caches.MAX_CACHED:
            clear_caches()
        BOUND[canonical] = plan
    _remember(op, policy, backend, args, kwargs, bound, plan)
    return result


def _remember(
    op: str,
    policy: ContextPolicy | None,
    backend: str | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    bound: tuple[Any, ...],
    plan: CallPlan,
) -> None:
    """Cache an entry taking the raw positional arguments, under run()'s inline key and (without
    keywords) the general positional key, when such a key is well defined.

    The entry runs the first kernel bare; run() hands its errors to the matching recovery.
    """
    inline = inline_key(op, policy, backend, args, kwargs)
    if kwargs and inline is None:
        _remember_keywords(op, policy, backend, args, kwargs, bound, plan)
        return
    key = None if kwargs else positional_key(op, policy, backend, args)
    if key is None and inline is None:
        return
    first = plan.first
    n = len(args)
    bare: tuple[Callable[..., Any], tuple[Any, ...]] | None = None
    if all(bound[i] is args[i] for i in range(n)):
        tail = bound[n:]
        entry = fixed_arity(first, n, tail)  # first itself when nothing is appended
        if entry is not first:  # the compiled path appends the tail itself: one Python frame less
            bare = (first, tail)

        def to_bound(raw: tuple[Any, ...]) -> tuple[Any, ...]:
            return raw + tail

    else:
        template = list(bound)
        tensors = [i for i in range(n) if array_kind_of(args[i]) is not None]
        for i in tensors:
            template[i] = None  # never keep the example's data alive

        def to_bound(raw: tuple[Any, ...]) -> tuple[Any, ...]:
            call = template.copy()
            for i in tensors:
                call[i] = raw[i]
            return tuple(call)

        def entry(*raw: Any) -> Any:
            return first(*to_bound(raw))

    def recover(raw: tuple[Any, ...], error: Exception) -> Any:
        return plan.recover(to_bound(raw), error)

    with lock:
        if len(POSITIONAL) + len(INLINE) >= caches.MAX_CACHED:
            POSITIONAL.clear()
            INLINE.clear()
            RECOVER.clear()
            GUARDED.clear()
            LAST.clear()
        if key is not None:
            RECOVER[key] = recover
            POSITIONAL[key] = entry
        if inline is not None:
            RECOVER[inline] = recover
            INLINE[inline] = entry
    if inline is not None and not kwargs and type(args[0]) is torch_tensor_type():
        _guard(op, policy, backend, args, entry, inline, bare)
    elif key is not None and len(args) <= 4 and type(args[0]) is torch_tensor_type():
        _guard_pattern(op, policy, backend, args, entry, key, bare)


def _guard(
    op: str,
    policy: ContextPolicy | None,
    backend: str | None,
    args: tuple[Any, ...],
    entry: Callable[..., Any],
    inline: tuple[Any, ...],
    bare: tuple[Callable[..., Any], tuple[Any, ...]] | None = None,
) -> None:
    """Put a newly cached torch signature of an inline shape in its GUARDED slot (see there). bare:
    (kernel, tail) where the entry only calls kernel(*args, *tail), for the compiled path to do so.
    """
    from opcore._guards import tensor_guard

    last = args[-1]
    tensors = args if type(last) is torch_tensor_type() else args[:-1]
    check = tensor_guard(tensors)
    if check is None:
        return
    plain = ALL_TENSORS if tensors is args else type(last)
    value = None if plain is ALL_TENSORS else last
    slot = guarded_slot(len(args), plain, value, check, entry, recovery_key=inline, bare=bare)
    _store_guarded(op, policy, backend, args, slot)  # bounded with INLINE, which is cleared with it


def _guard_pattern(
    op: str,
    policy: ContextPolicy | None,
    backend: str | None,
    args: tuple[Any, ...],
    entry: Callable[..., Any],
    key: tuple[Any, ...],
    bare: tuple[Callable[..., Any], tuple[Any, ...]] | None,
) -> None:
    """A GUARDED slot for a positional torch call of up to 4 arguments whose constants are not only a
    trailing plain value (layer_norm(x, (8,), w, b)): the pattern of tensors and constants (PATTERN),
    the tensors confirmed by torch's guard, the general positional key for its recovery.
    """
    from opcore._guards import tensor_guard

    pattern: list[Any] = []
    for a in args:
        t = type(a)
        if t is torch_tensor_type():
            pattern.append(ALL_TENSORS)
        elif t in PLAIN or (t is tuple and all(type(v) in PLAIN for v in a)):
            pattern.append((t, a))
        else:  # a subclass, a list: the general key alone
            return
    check = tensor_guard(tuple(a for a in args if type(a) is torch_tensor_type()))
    if check is None:
        return
    slot = guarded_slot(len(args), PATTERN, tuple(pattern), check, entry, recovery_key=key, bare=bare)
    _store_guarded(op, policy, backend, args, slot)  # bounded with POSITIONAL, which is cleared with it


def _store_guarded(
    op: str, policy: ContextPolicy | None, backend: str | None, args: tuple[Any, ...], slot: tuple[Any, ...]
) -> None:
    """Put a guarded slot under its shape's key in GUARDED and, in the default context (no policy, no
    backend named), first in its op's LAST row (see opcore._dispatchcaches.LAST)."""
    with lock:
        GUARDED[(op, policy, backend, len(args), args[0].shape)] = slot
        if policy is None and backend is None:
            LAST.setdefault(op, [None] * LAST_ROW_SIZE)[len(args)] = slot


def _remember_keywords(
    op: str,
    policy: ContextPolicy | None,
    backend: str | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    bound: tuple[Any, ...],
    plan: CallPlan,
) -> None:
    """Cache an entry for a call whose keywords hold tensors: it takes (args, kwargs) and puts each
    tensor at its bound position (positional ones at their index, keywords at their schema name's).
    """
    key = keyword_key(op, policy, backend, args, kwargs)
    if key is None:
        return
    names = plan.selection.contract.schema.names
    template = list(bound)
    from_args = [i for i in range(len(args)) if array_kind_of(args[i]) is not None]
    from_kwargs = [(name, names.index(name)) for name, value in kwargs.items() if array_kind_of(value) is not None]
    if any(bound[i] is not args[i] for i in from_args) or any(bound[i] is not kwargs[n] for n, i in from_kwargs):
        return  # binding changed a tensor argument (a list of them): the slow path serves it
    for i in from_args:
        template[i] = None  # never keep the example's data alive
    for _, i in from_kwargs:
        template[i] = None
    first = plan.first

    def to_bound(raw: tuple[tuple[Any, ...], dict[str, Any]]) -> tuple[Any, ...]:
        raw_args, raw_kwargs = raw
        call = template.copy()
        for i in from_args:
            call[i] = raw_args[i]
        for name, i in from_kwargs:
            call[i] = raw_kwargs[name]
        return tuple(call)

    def called(raw_args: tuple[Any, ...], raw_kwargs: dict[str, Any]) -> Any:
        return first(*to_bound((raw_args, raw_kwargs)))

    def recover(raw: tuple[tuple[Any, ...], dict[str, Any]], error: Exception) -> Any:
        return plan.recover(to_bound(raw), error)

    with lock:
        if len(KEYWORD) >= caches.MAX_CACHED:
            KEYWORD.clear()
        RECOVER[key] = recover
        KEYWORD[key] = called
