"""The dispatcher: run, resolve and explain.

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
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy

from opcore._calls import fixed_arity
from opcore.arrays import converter, result_converter
from opcore.contracts import OpContract
from opcore.errors import KernelResultError, NoKernelError, OpcoreError, PluginError, Unsupported
from opcore.kernels import Kernel
from opcore.registry import load_kernel_callable
from opcore.results import checked, listed, result_error, result_problem
from opcore.runtime import Runtime, on_change, runtime
from opcore.selection import Candidate, CandidateStatus, Selection, no_kernel_error, select, warn_once
from opcore.settings import ContextPolicy, context_policy
from opcore.types import ArrayKind, array_kind_of

__all__ = [
    "Plan",
    "build_plan",
    "clear_caches",
    "convert_tensors",
    "holds_tensor",
    "kernel_converters",
    "run",
    "stand_ins",
]

MAX_CACHED = 8192  # signatures; past this the caches start over (bounds memory for varying shapes)

_ndarray = numpy.ndarray
_PLAIN = frozenset({int, float, bool, str, type(None)})
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
# the guard's check, the entry, the inline key for its recovery)
_GUARDED: dict[tuple[Any, ...], tuple[Any, ...]] = {}
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


def _positions_of(contract: OpContract) -> dict[str, int]:
    """The contract's keyword -> position table (see _POSITIONS)."""
    schema = contract.schema
    return {a.name: i for i, a in enumerate(schema.arguments) if i < schema.n_positional and not a.kwarg_only}


def run(op: str, /, *args: Any, backend: str | None = None, **kwargs: Any) -> Any:
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
    # _inline_key builds the same key for the slow path; test_dispatch checks that the two agree.
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
    if n and not kwargs and (t := type(args[0])) is _Tensor:  # the guarded torch signature, if it is this one
        slot = _GUARDED.get((op, _policy(), backend, n, args[0].shape))
        if slot is not None:
            last = args[-1]
            if slot[1] is _ALL_TENSORS:
                hit = type(last) is _Tensor and (n < 3 or type(args[1]) is _Tensor) and slot[3](*args)
            else:
                hit = (
                    type(last) is slot[1] and last == slot[2] and (n < 3 or type(args[1]) is _Tensor)
                    and slot[3](*args[:-1])
                )  # fmt: skip
            if hit:
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


def _inline_key(
    op: str, policy: ContextPolicy | None, backend: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, ...] | None:
    """run()'s inline key as a function (None when run() builds none for these arguments)."""
    if any(type(v) not in _PLAIN for v in kwargs.values()):
        return None
    types = [type(a) for a in args]
    if 1 <= len(args) <= 3 and all(t is _ndarray for t in types):
        key: list[Any] = [op, policy, backend]
        for a in args:
            key += (a.dtype, a.shape, a.strides)
        return (*key, *kwargs.items())
    tensors = len(args) if types and types[-1] is _Tensor else len(args) - 1
    if not 1 <= len(args) <= 3 or tensors < 1 or (tensors == 1 and len(args) == 3):
        return None
    if any(t is not _Tensor for t in types[:tensors]) or (tensors < len(args) and types[-1] not in _PLAIN):
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


def _bound_key(values: tuple[Any, ...]) -> list[Any]:
    key: list[Any] = []
    for a in values:
        t = type(a)
        if t is _ndarray:
            key += (a.dtype, a.shape, a.strides)
        elif t is tuple:
            key.append(tuple(_bound_key(a)))
        elif isinstance(a, _ndarray):  # a subclass (np.matrix, masked): select refuses it, with the fix
            key += (t, a.dtype, a.shape, a.strides)
        elif array_kind_of(a) is not None:
            if t not in _TORCH_TYPES:
                _note_torch_type(t)
            key.append(_torch_signature(a))
        else:
            key += (t, a)
    return key


def _run_slow(op: str, args: tuple[Any, ...], kwargs: dict[str, Any], backend: str | None) -> Any:
    rt = runtime().ensure_loaded()
    contract = rt.registry.contract(op)
    positions = _POSITIONS.get(op)
    if positions is None:  # also for positional calls: a later keyword call then finds it in run()
        positions = _POSITIONS[op] = _positions_of(contract)
    if kwargs:
        moved = _as_positional(args, kwargs, positions)
        if moved is not None:  # cached under the positional call's key (run() moves them the same way)
            args, kwargs = moved, {}
    try:
        bound = contract.schema.bind(args, kwargs)
    except OpcoreError as error:
        if error.op is None:
            error.op = op
        raise
    policy = context_policy.get()
    canonical = (op, policy, backend, *_bound_key(bound))
    plan = _BOUND.get(canonical)
    if plan is not None:
        _remember(op, policy, backend, args, kwargs, bound, plan)
        return plan(*bound)
    pin = backend if backend is not None else (policy.pin if policy is not None else None)
    selection = select_tuned(rt, contract, bound, policy, pin)
    if selection.error is not None:
        raise selection.error
    plan = build_plan(selection, bound, rt.settings.check)
    result = plan.first_call(bound)  # checks the result; drops a kernel that broke the contract
    with _lock:
        if len(_BOUND) >= MAX_CACHED:
            clear_caches()
        _BOUND[canonical] = plan
    _remember(op, policy, backend, args, kwargs, bound, plan)
    return result


def _remember(
    op: str,
    policy: ContextPolicy | None,
    backend: str | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    bound: tuple[Any, ...],
    plan: Plan,
) -> None:
    """Cache an entry taking the raw positional arguments, under run()'s inline key and (without
    keywords) the general positional key, when such a key is well defined.

    The entry runs the first kernel bare; run() hands its errors to the matching recovery.
    """
    inline = _inline_key(op, policy, backend, args, kwargs)
    if kwargs and inline is None:
        _remember_keywords(op, policy, backend, args, kwargs, bound, plan)
        return
    key = None if kwargs else _positional_key(op, policy, backend, args)
    if key is None and inline is None:
        return
    first = plan.first
    n = len(args)
    if all(bound[i] is args[i] for i in range(n)):
        tail = bound[n:]
        entry = fixed_arity(first, n, tail)  # first itself when nothing is appended

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

    with _lock:
        if len(_POSITIONAL) + len(_INLINE) >= MAX_CACHED:
            _POSITIONAL.clear()
            _INLINE.clear()
            _RECOVER.clear()
            _GUARDED.clear()
        if key is not None:
            _RECOVER[key] = recover
            _POSITIONAL[key] = entry
        if inline is not None:
            _RECOVER[inline] = recover
            _INLINE[inline] = entry
    if inline is not None and not kwargs and type(args[0]) is _Tensor:
        _guard(op, policy, backend, args, entry, inline)


class _AllTensors:
    """Marks a _GUARDED slot whose arguments are all tensors (no trailing plain value)."""


_ALL_TENSORS = _AllTensors


def _guard(
    op: str,
    policy: ContextPolicy | None,
    backend: str | None,
    args: tuple[Any, ...],
    entry: Callable[..., Any],
    inline: tuple[Any, ...],
) -> None:
    """Put a newly cached torch signature of an inline shape in its _GUARDED slot (see there)."""
    from opcore._guards import tensor_guard

    last = args[-1]
    tensors = args if type(last) is _Tensor else args[:-1]
    check = tensor_guard(tensors)
    if check is None:
        return
    plain = _ALL_TENSORS if tensors is args else type(last)
    with _lock:  # bounded with _INLINE, which is cleared with it
        _GUARDED[(op, policy, backend, len(args), args[0].shape)] = (
            len(args), plain, None if plain is _ALL_TENSORS else last, check, entry, inline
        )  # fmt: skip


def _remember_keywords(
    op: str,
    policy: ContextPolicy | None,
    backend: str | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    bound: tuple[Any, ...],
    plan: Plan,
) -> None:
    """Cache an entry for a call whose keywords hold tensors: it takes (args, kwargs) and puts each
    tensor at its bound position (positional ones at their index, keywords at their schema name's).
    """
    key = _keyword_key(op, policy, backend, args, kwargs)
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

    with _lock:
        if len(_KEYWORD) >= MAX_CACHED:
            _KEYWORD.clear()
        _RECOVER[key] = recover
        _KEYWORD[key] = called


# --- plans: what a cached signature runs ------------------------------------------------------


class Plan:
    """What a cached signature runs: ``first`` (the chosen kernel, bare, conversions included)
    and ``recover`` (what happens when it raises). Calling the plan does both.

    check True (strict mode, OPCORE_CHECK=1): every kernel call's result is checked against the
    contract's output metas. Otherwise only the first call (first_call) and the fallbacks are.
    """

    __slots__ = ("bound_example", "calls", "check", "first", "selection")

    def __init__(
        self, selection: Selection, calls: list[Callable[..., Any] | None], bound: tuple[Any, ...], check: bool = False
    ) -> None:
        self.selection = selection
        self.check = check or selection.strict
        self.calls = calls
        # positions of tensors only (no data kept): what adapt() needs for the fallbacks
        self.bound_example = stand_ins(bound)
        decomposition = calls[0] if selection.decompose else None  # build_plan put it there, ready
        self.first: Callable[..., Any] = decomposition if decomposition is not None else self.call_at(0)

    def __call__(self, *args: Any) -> Any:
        try:
            return self.first(*args)
        except Exception as error:
            return self.recover(args, error)

    def recover(self, args: tuple[Any, ...], error: Exception) -> Any:
        return _recover(self, 0, args, error)

    def first_call(self, args: tuple[Any, ...]) -> Any:
        """The signature's first call: the result checked; a kernel that breaks the contract is
        dropped from the plan (a fallback with a warning), or raises when pinned or strict.
        """
        selection = self.selection
        while True:
            try:
                result = self.first(*args)
            except Exception as error:
                return self.recover(args, error)
            if selection.decompose or self.check:  # parts were checked by their dispatch / checked already
                return result
            kernel = selection.accepted[0]
            problem = result_problem(result, selection.outputs, selection.caller_kind, listed(selection))
            if problem is None:
                return result
            broken = result_error(selection.contract.name, kernel.title, kernel.source, problem)
            if selection.pin is not None or selection.strict:
                raise broken
            warn_once(selection.contract.name, kernel.backend, broken, f"the result of kernel {kernel.source}")
            self.drop_first(str(broken))

    def drop_first(self, reason: str) -> None:
        """Never run the first kernel for this signature again: the next accepted one, or the
        decomposition, or NoKernelError.
        """
        selection = self.selection
        kernel = selection.accepted.pop(0)
        self.calls.pop(0)
        selection.candidates = [
            Candidate(c.backend, CandidateStatus.DECLINED, reason, c.label, c.source, c.priority)
            if c.backend == kernel.backend and c.label == kernel.label
            else c
            for c in selection.candidates
        ]
        if selection.accepted:
            self.first = self.call_at(0)
        elif selection.contract.decomposition is not None and not selection.strict:
            selection.decompose = True
            self.first = _decomposition_plan(selection)
            self.calls = [self.first]
        else:
            raise no_kernel_error(selection, reason)

    def bare_call(self, index: int) -> Callable[..., Any]:
        """The index-th accepted kernel (or the decomposition), imported and adapted on first need."""
        call = self.calls[index]
        if call is None:
            call = self.calls[index] = adapt(self.selection.accepted[index], self.selection, self.bound_example)
        return call

    def call_at(self, index: int) -> Callable[..., Any]:
        """The index-th accepted kernel, imported and adapted on first need; checked if check is on."""
        call = self.bare_call(index)
        if self.check:
            kernel = self.selection.accepted[index]
            s = self.selection
            return checked(call, s.contract.name, kernel.title, kernel.source, s.outputs, s.caller_kind, listed(s))
        return call

    def __repr__(self) -> str:
        return f"Plan({self.selection.contract.name} -> {_title(self.selection)})"


def stand_ins(bound: tuple[Any, ...]) -> tuple[Any, ...]:
    """The bound arguments with every tensor replaced by a marker and everything else by None: where
    the tensors are (what adapt needs), without keeping an example's data alive.
    """
    return tuple(_stand_in(v) for v in bound)


def _stand_in(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_TENSOR if array_kind_of(v) is not None else None for v in value)
    return _TENSOR if array_kind_of(value) is not None else None


class _TensorMarker:
    __slots__ = ()


_TENSOR = _TensorMarker()


def _title(selection: Selection) -> str:
    return selection.accepted[0].title if selection.accepted else "decomposition"


def build_plan(selection: Selection, bound: tuple[Any, ...], check: bool = False) -> Plan:
    """The plan for a selection: the first kernel adapted to the caller's arrays (the ones behind it
    are imported and adapted only if it hands over), or the decomposition. check: see Plan.
    """
    if selection.decompose:
        return Plan(selection, [_decomposition_plan(selection)], bound)
    calls: list[Callable[..., Any] | None] = [None] * len(selection.accepted)
    while selection.accepted:
        try:
            calls[0] = adapt(selection.accepted[0], selection, bound)
            break
        except Exception as error:  # a kernel that cannot be imported: the next one, unless pinned or strict
            plugin_bug = isinstance(error, PluginError) or not isinstance(error, OpcoreError)
            if not plugin_bug or selection.pin is not None or selection.strict:
                raise
            warn_once(selection.contract.name, selection.accepted[0].backend, error, "importing the kernel")
            selection.accepted.pop(0)
            calls.pop(0)
    if not selection.accepted:
        if selection.contract.decomposition is not None:
            selection.decompose = True
            return Plan(selection, [_decomposition_plan(selection)], bound)
        raise no_kernel_error(selection, "every accepted kernel failed to import")
    return Plan(selection, calls, bound, check)


def _recover(plan: Plan, index: int, args: tuple[Any, ...], error: Exception) -> Any:
    selection = plan.selection
    op = selection.contract.name
    if selection.decompose:  # errors of the parts were handled by their own dispatch
        raise error
    reasons: list[str] = []
    last_crash: Exception | None = None
    while True:
        kernel = selection.accepted[index]
        if isinstance(error, Unsupported):
            reasons.append(f"{kernel.title} handed over at run time: {error}")
        elif isinstance(error, OpcoreError) and not isinstance(error, KernelResultError):
            if error.op is None:
                error.op = op
            raise error
        elif isinstance(error, KernelResultError) and (selection.pin is not None or selection.strict):
            raise error
        else:
            if selection.pin is not None or selection.strict:
                mode = f"pinned to {selection.pin!r}" if selection.pin else "strict mode"
                if hasattr(error, "add_note"):  # Python 3.11+
                    error.add_note(
                        f"opcore: raised by kernel {kernel.title} ({kernel.source}) for {op}(); "
                        f"no fallback because of {mode}"
                    )
                raise error
            warn_once(op, kernel.backend, error, f"kernel {kernel.source}")
            reasons.append(f"{kernel.title} raised {type(error).__name__}: {error}")
            last_crash = error
        index += 1
        if index < len(selection.accepted):
            try:
                return _checked_fallback(plan, index, args)
            except Exception as next_error:
                error = next_error
                continue
        if selection.contract.decomposition is not None and not selection.strict:
            return _decomposition_plan(selection)(*args)
        raise no_kernel_error(selection, "; ".join(reasons)) from last_crash


def _checked_fallback(plan: Plan, index: int, args: tuple[Any, ...]) -> Any:
    """A fallback kernel's call, its result always checked (a rare path: the one before it failed)."""
    result = plan.call_at(index)(*args)
    if not plan.check:
        s = plan.selection
        problem = result_problem(result, s.outputs, s.caller_kind, listed(s))
        if problem is not None:
            kernel = s.accepted[index]
            raise result_error(s.contract.name, kernel.title, kernel.source, problem)
    return result


def _decomposition_plan(selection: Selection) -> Callable[..., Any]:
    decomposition = selection.contract.decomposition
    if decomposition is None:  # select() decomposes only an op that has one; a bug if reached
        raise no_kernel_error(selection, f"{selection.contract.name} has no decomposition")
    pin = selection.pin
    if pin is None:
        return decomposition

    def pinned_decomposition(*args: Any) -> Any:
        current = context_policy.get()
        token = context_policy.set(
            ContextPolicy.make(current.order if current else None, current.strict if current else None, pin)
        )
        try:
            return decomposition(*args)
        except NoKernelError as error:  # say which call failed: the user asked for the whole op
            raise NoKernelError(
                f"no kernel of {pin!r} accepts it, and its decomposition needs a part {pin!r} cannot run:\n{error}",
                op=selection.contract.name,
                fix=f"drop backend={pin!r} to let the op or its parts run elsewhere",
            ) from error
        finally:
            context_policy.reset(token)

    return pinned_decomposition


def kernel_converters(kernel: Kernel, selection: Selection) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """How the caller's arrays reach ``kernel`` (one array at a time) and how its result comes back.

    A selection with a ``transfer`` device (numpy inputs pinned to a device backend) moves the
    arrays there on the way in and brings the result back to host numpy on the way out.
    """
    if selection.transfer is not None and kernel.array_kind is ArrayKind.TORCH:
        from opcore.torchkit import arrays as torch_arrays

        return torch_arrays.to_device(str(selection.transfer)), torch_arrays.to_host
    dtypes = tuple(m.dtype for m in selection.outputs)
    return converter(kernel.array_kind), result_converter(kernel.array_kind, selection.caller_kind, dtypes)


def adapt(kernel: Kernel, selection: Selection, bound: tuple[Any, ...]) -> Callable[..., Any]:
    """The kernel's function, wrapped in conversions only when the arrays are of another kind
    (or must move to another device). A function carrying ``specialize(*metas)`` is asked for the
    callable that serves this signature (one Python frame less on the hot path, see opcore.torchkit.kernels).
    """
    fn = load_kernel_callable(kernel, selection.contract)
    specialize = getattr(fn, "specialize", None)
    if specialize is not None:
        fn = specialize(*selection.meta_args) or fn
    if selection.kinds == {kernel.array_kind}:
        return fn
    to_kernel, back = kernel_converters(kernel, selection)
    positions = [i for i, value in enumerate(bound) if holds_tensor(value)]

    def converted(*args: Any) -> Any:
        call = list(args)
        for i in positions:
            value = call[i]
            if type(value) is tuple:
                call[i] = tuple(None if v is None else to_kernel(v) for v in value)
            else:
                call[i] = to_kernel(value)
        return back(fn(*call))

    return converted


def holds_tensor(value: Any) -> bool:
    """A tensor, a list with tensors, or the stand-in a Plan keeps instead of its example's data."""
    if isinstance(value, tuple):
        return any(holds_tensor(v) for v in value)
    return value is _TENSOR or array_kind_of(value) is not None


def convert_tensors(values: tuple[Any, ...], convert: Callable[[Any], Any]) -> tuple[Any, ...]:
    """``values`` with every tensor (also inside lists) passed through ``convert``."""
    return tuple(
        tuple(None if v is None else convert(v) for v in value)
        if isinstance(value, tuple)
        else convert(value)
        if array_kind_of(value) is not None
        else value
        for value in values
    )


def selection_for(
    rt: Runtime, op: str, args: tuple[Any, ...], kwargs: dict[str, Any], backend: str | None, tune: bool = False
) -> tuple[Selection, tuple[Any, ...]]:
    """Bind and select without running (explain, resolve, tune). tune: measure first under OPCORE_TUNE=1."""
    contract = rt.registry.contract(op)
    try:
        bound = contract.schema.bind(args, kwargs)
    except OpcoreError as error:
        if error.op is None:
            error.op = op
        raise
    policy = context_policy.get()
    pin = backend if backend is not None else (policy.pin if policy is not None else None)
    return (select_tuned if tune else select)(rt, contract, bound, policy, pin), bound


def select_tuned(
    rt: Runtime, contract: OpContract, bound: tuple[Any, ...], policy: ContextPolicy | None, pin: str | None
) -> Selection:
    """select(), but with OPCORE_TUNE=1 a signature the tuning file has no measurement for is measured
    first (once: afterwards the file has it). Only on a cache miss, never on the cached path.
    """
    selection = select(rt, contract, bound, policy, pin)
    if rt.settings.tune and selection.measured is None:
        from opcore.errors import NoKernelError
        from opcore.tuning.measure import tune_selection

        try:
            tune_selection(rt, selection, bound)
        except NoKernelError:  # nothing to measure: the selection says why
            return selection
        selection = select(rt, contract, bound, policy, pin)
    return selection
