"""``opcore.resolve``: decide once, call many times, with constant inputs prepared by the kernel."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy

from opcore.call_plans import CallPlan, build_plan, convert_tensors, holds_tensor, kernel_converters, selection_for
from opcore.dispatch import compiled_part
from opcore.errors import ArgumentError
from opcore.explanation import Explanation, explanation_of
from opcore.kernel_records import Kernel
from opcore.kernel_walk import Selection, select
from opcore.registry import load_kernel_callable
from opcore.results import listed as _listed
from opcore.results import result_error, result_problem
from opcore.runtime import runtime
from opcore.settings import ContextPolicy, context_policy
from opcore.tuning.selecting import select_tuned
from opcore.types import ArrayKind, array_kind_of, is_tensor
from opcore.weight_copies import weight_copies, weight_copies_allowed

__all__ = ["ResolvedOp", "resolve", "resolve_with"]


class _CallSlot:
    """ResolvedOp's base in pure Python: the entry in a ``__call__`` slot, which type slot dispatch finds
    and calls (a method lookup and an argument tuple per call). Where opcore._fastrun is built, its
    ResolvedBase takes this place: a call goes straight to the entry (vectorcall), ~0.2 us less.
    """

    __slots__ = ("__call__",)
    __call__: Callable[..., Any]

    @property
    def _entry(self) -> Callable[..., Any]:
        return self.__call__

    @_entry.setter
    def _entry(self, entry: Callable[..., Any]) -> None:
        self.__call__ = entry

    @property
    def _armed(self) -> bool:
        """Whether calls are guarded before the entry, by the compiled base's _arm (never here)."""
        return False

    def _disarm(self) -> None:
        """Every call goes to the entry (as here it always does)."""


if TYPE_CHECKING:
    _Base = _CallSlot
else:
    _Base = compiled_part("ResolvedBase") or _CallSlot


class ResolvedOp(_Base):
    """A call decided once. Call it with the non-constant tensor arguments, in schema order.

    It skips dispatch for every signature it has seen: one key (type, dtype, shape, strides,
    device of each argument) and one dict lookup before the kernel; the examples' signature of
    torch tensors is confirmed by torch's tensor guard alone (opcore._guards). A signature it has not seen
    is checked once, as opcore.run checks a new one: the contract (a ShapeError for an input the
    constants do not fit), the checkers (another kernel serves it if the resolved one declines),
    and the kernel's first result.
    """

    __slots__ = ("_prepared", "_watched", "constants", "explanation", "free", "kernel", "op")

    # _entry, set per instance (the base's): the kernel call with the constants bound, or the decomposition
    _prepared: bool
    _watched: bool
    op: str
    # None: no kernel accepted the examples and the op runs as its decomposition.
    kernel: Kernel | None
    constants: tuple[str, ...]
    free: tuple[str, ...]
    explanation: Explanation

    @property
    def backend(self) -> str:
        return self.kernel.backend if self.kernel is not None else "decomposition"

    @property
    def prepared(self) -> bool:
        """True when the kernel's prepare step baked the constants in (packed weights, initializers)."""
        return self._prepared

    @property
    def watched(self) -> bool:
        """True when each call compares the torch constants' version counters first: a prepared
        kernel holding its own form of them (packed, compiled in), prepared again after an update.
        """
        return self._watched

    def __repr__(self) -> str:
        constants = f", constants={list(self.constants)}" if self.constants else ""
        state = ", prepared" if self._prepared else ""
        where = self.kernel.title if self.kernel is not None else "decomposition"
        return f"ResolvedOp({self.op} on {where}{state}, takes ({', '.join(self.free)}){constants})"


_inherit = compiled_part("inherit_vectorcall") if _Base is not _CallSlot else None
if _inherit is not None:  # Python 3.11 keeps a heap subclass off its compiled base's vectorcall
    _inherit(ResolvedOp)


def resolve(
    op: str, /, *args: Any, constants: Iterable[str] = (), backend: str | None = None, **kwargs: Any
) -> ResolvedOp:
    """Decide the kernel for these example arguments once; ``constants`` names tensor arguments
    whose values are fixed (weights), which the kernel may prepare (pack) now.

    >>> linear = opcore.resolve("linear", x, w, b, constants=("w", "b"))   # doctest: +SKIP
    >>> y = linear(x)                                                        # doctest: +SKIP
    """
    return resolve_with(op, args, kwargs, constants=constants, backend=backend)


def resolve_with(
    op: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    constants: Iterable[str] = (),
    backend: str | None = None,
    watch: bool = True,
    fall_back: bool = False,
) -> ResolvedOp:
    """``resolve`` with its options apart from the op's arguments. watch=False: the caller watches
    its torch constants itself and resolves again after a change (opcore.nn modules compare their
    parameters, from which they derive constants such as a concatenated qkv weight), so the
    resolved op skips its per-call version check. fall_back=True: ``backend`` is the kernel the
    examples chose, not a demand: a later call whose arguments that backend declines (a view's
    strides the examples did not have) takes the ranked walk's next kernel instead of an error
    (a plan's nodes, where the plan allows fallback).

    >>> relu = resolve_with("relu", (x,), {}, watch=False)                    # doctest: +SKIP
    """
    rt = runtime().ensure_loaded()
    selection, bound = selection_for(rt, op, args, kwargs, backend, select_tuned)
    if selection.error is not None:
        raise selection.error
    contract = selection.contract
    names = contract.schema.names
    constants = tuple(constants)
    tensor_at = [i for i, v in enumerate(bound) if holds_tensor(v)]
    for name in constants:
        if name not in names or names.index(name) not in tensor_at:
            raise ArgumentError(
                op=op,
                arg="constants",
                expected=f"names of tensor arguments passed in this call ({', '.join(names[i] for i in tensor_at)})",
                found=repr(name),
            )
    constant_at = {names.index(n) for n in constants}
    free_at = [i for i in tensor_at if i not in constant_at]
    # numpy constants are snapshots on every backend (numpy arrays have no version counter, and graph
    # runtimes bake constants in): one copy, made before any kernel sees them. torch constants stay
    # live: a kernel that reads them in place sees an update as is; the entry of one that holds its
    # own form of them re-prepares when one's version counter moved (an in-place update).
    bound = tuple(_snapshot(v) if i in constant_at else v for i, v in enumerate(bound))
    template = list(bound)
    for i in free_at:
        template[i] = None

    resolved = ResolvedOp.__new__(ResolvedOp)
    resolved.op = op
    resolved.constants = constants
    resolved.free = tuple(names[i] for i in free_at)
    resolved.explanation = explanation_of(selection)
    resolved._prepared = False

    check = rt.settings.check or selection.strict
    plan = build_plan(selection, bound, check)  # may drop a kernel that fails to import
    kernel = resolved.kernel = selection.accepted[0] if selection.accepted and not selection.decompose else None
    first = plan.bare_call(0)  # bare: the entry checks results itself when check is on
    versioned: tuple[Any, ...] = ()
    if kernel is not None and kernel.prepare is not None and constants:  # no constants: nothing to prepare
        first = _prepare(kernel, selection, bound, frozenset(constants), free_at)
        resolved._prepared = True
        # a kernel reading the constants in place (declared live_constants, no conversion between the
        # caller's arrays and its own) needs no watch: an in-place update reaches it as is
        live = kernel.live_constants and selection.kinds == {kernel.array_kind} and selection.transfer is None
        if watch and not live:
            versioned = tuple(t for i in sorted(constant_at) for t in _torch_tensors(bound[i]))
    signatures = _Signatures(selection, kernel, first, resolved._prepared, template, free_at, check)
    signatures.fall_back = fall_back
    resolved._watched = bool(versioned)
    if versioned:  # the prepared kernel holds its own form of these: prepare again after an in-place update
        signatures.watch(versioned, bound, frozenset(constants))
    resolved._entry = signatures.entry(bound)
    signatures.target = resolved
    return resolved


def _snapshot(value: Any) -> Any:
    """A constant as resolve keeps it: a numpy array copied (layout kept), anything else as is."""
    if type(value) is numpy.ndarray:
        return value.copy(order="K")
    if isinstance(value, tuple):
        return tuple(_snapshot(v) for v in value)
    return value


def _torch_tensors(value: Any) -> tuple[Any, ...]:
    if isinstance(value, tuple):
        return tuple(t for v in value for t in _torch_tensors(v))
    # inference tensors (made under torch.inference_mode) keep no version counter: not watched
    return (value,) if array_kind_of(value) is ArrayKind.TORCH and not value.is_inference() else ()


MAX_SIGNATURES = 1024  # per resolved op; past this its signature caches start over


class _Signatures:
    """The signatures a resolved op has checked, and the plans of those the resolved kernel does not serve.

    A call whose signature was seen runs the resolved kernel bare (``first``); any other goes
    through ``slow`` once: the contract's checks, the ranked walk under the policy of the resolve
    call, and the first result's check. Errors go to the recovery of that signature's plan (the
    dispatcher's one fallback walk).
    """

    __slots__ = (
        "armed", "check", "constant_names", "copies", "example_key", "examples", "fall_back", "first", "free_at",
        "kernel", "kinds", "mark", "policy", "prepared", "routes", "seen", "selection", "target", "template",
        "versioned",
    )  # fmt: skip

    def __init__(
        self,
        selection: Selection,
        kernel: Kernel | None,
        first: Callable[..., Any],
        prepared: bool,
        template: list[Any],
        free_at: list[int],
        check: bool,
    ) -> None:
        self.selection = selection
        self.kernel = kernel
        self.first = first
        self.prepared = prepared
        self.template = template
        self.free_at = free_at
        self.check = check
        self.policy: ContextPolicy | None = context_policy.get()
        self.kinds = (selection.kinds, selection.caller_kind, selection.transfer)
        # signature -> its plan's recover; with check: (verify, recover)
        self.seen: dict[Any, Any] = {}
        self.routes: dict[Any, CallPlan] = {}
        # torch constants whose version counter the entry compares on every call (prepared kernels only)
        self.versioned: tuple[Any, ...] = ()
        self.examples: tuple[Any, ...] = ()
        self.constant_names: frozenset[str] = frozenset()
        self.copies = True  # whether kernels may keep copies of the constants (watch: as first prepared)
        # (guard, tail, failed, number of free arguments) where the compiled base may call the kernel
        self.armed: tuple[Any, tuple[Any, ...], Any, int] | None = None
        self.target: Any = None  # the resolved op, armed through its compiled base's _arm
        self.fall_back = False  # a pinned backend that declines a later call: the ranked walk's next (resolve_with)

    def watch(self, versioned: tuple[Any, ...], bound: tuple[Any, ...], constants: frozenset[str]) -> None:
        """Prepare again when one of ``versioned`` changes in place; ``bound``'s free arguments are
        kept as the examples prepare is called with (an example's data is never read).
        """
        self.versioned, self.examples, self.constant_names = versioned, bound, constants
        self.copies = weight_copies_allowed()  # what the first prepare was allowed: so is the next

    def reprepare(self) -> Callable[..., Any]:
        """The kernel prepared again from the constants' current values (after an in-place update),
        under the weight-copies setting it was first prepared under (opcore.weight_copies)."""
        assert self.kernel is not None  # watch() is only called for a prepared kernel
        with weight_copies(self.copies):
            self.first = _prepare(self.kernel, self.selection, self.examples, self.constant_names, self.free_at)
        return self.first

    def entry(self, bound: tuple[Any, ...]) -> Callable[..., Any]:
        """The resolved op's __call__: a generated function of exactly the free arguments."""
        keys = tuple(_key_kind(bound[i]) for i in self.free_at)
        tail = [i for i in range(len(self.template)) if i not in self.free_at]
        strides = self.kernel is not None and self.kernel.checker is not None
        # free torch tensors only: torch's C++ tensor guard confirms the examples' signature (~0.13 us a
        # tensor against ~0.45 for the Python comparison); where torch offers none, the comparison stays
        guard = None
        if not self.check and keys and all(kind == "torch" for kind in keys):
            from opcore._guards import tensor_guard

            guard = tensor_guard(tuple(bound[i] for i in self.free_at))
        make = _entry_maker(
            tuple(self.free_at),
            len(self.template),
            keys,
            self.prepared,
            self.check,
            strides,
            len(self.versioned),
            guard is not None,
        )
        examples: list[Any] = [guard] if guard is not None else []
        for i, kind in zip(self.free_at, keys):
            a = bound[i]
            if guard is not None:
                pass
            elif kind == "numpy":
                examples += (type(a), a.dtype, a.shape, a.strides)
            elif kind == "torch":
                examples += (type(a), a.dtype, a.shape, a.device, a.stride())
        call, self.mark, keyof, failed = make(
            self.first,
            self.seen,
            self.slow,
            _signature,
            self.reprepare,
            *self.versioned,
            *(self.template[i] for i in tail),
            *examples,
        )
        self.example_key = keyof(*(bound[i] for i in self.free_at))
        # the compiled base's armed path: the guard and the kernel called from C, where the kernel's
        # arguments are the free ones followed by the rest (prepared: the free ones alone); no watch
        if guard is not None and not self.versioned and (self.prepared or _leading(self.free_at)):
            rest = () if self.prepared else tuple(self.template[i] for i in tail)
            self.armed = (guard, rest, failed, len(self.free_at))
        return call

    def fill(self, free: tuple[Any, ...]) -> tuple[Any, ...]:
        call = self.template.copy()
        for position, value in zip(self.free_at, free):
            call[position] = value
        return tuple(call)

    def slow(self, free: tuple[Any, ...], key: Any) -> Any:
        """A signature not seen yet (key None: one without a cheap key, checked every time)."""
        bound = self.fill(free)
        if key is not None:
            route = self.routes.get(key)
            if route is not None:
                return route(*bound)
        rt = runtime().ensure_loaded()
        selection = select(rt, self.selection.contract, bound, self.policy, self.selection.pin)
        if selection.error is not None and self.fall_back and self.selection.pin is not None:
            # the pinned backend was the examples' choice: these arguments go to the next that takes them
            selection = select(rt, self.selection.contract, bound, self.policy, None)
        if selection.error is not None:
            raise selection.error
        plan = build_plan(selection, bound, self.check)
        kinds = (selection.kinds, selection.caller_kind, selection.transfer)
        chosen = None if selection.decompose else selection.accepted[0]
        # re-resolved: another kernel serves this signature, or the same one specialized otherwise for it
        # (adapt() asks a kernel's specialize() per signature: linear with a 1-D weight and a bias)
        specialized = not self.prepared and chosen is not None and plan.calls[0] is not self.first
        if kinds != self.kinds or chosen != self.kernel or specialized:
            result = plan.first_call(bound)
            self._route(key, plan)
            return result
        try:
            result = self.first(*(free if self.prepared else bound))
        except Exception as error:
            return plan.recover(bound, error)
        problem = (
            None
            if chosen is None
            else result_problem(result, selection.outputs, selection.caller_kind, _listed(selection))
        )
        if problem is None or chosen is None:
            if key is not None:
                if len(self.seen) >= MAX_SIGNATURES:
                    self.seen.clear()
                self.seen[key] = (_verifier(selection), plan.recover) if self.check else plan.recover
                if key == self.example_key:
                    self.mark(plan.recover)  # the fast branch may serve the examples' signature now
                    self._arm()
            return result
        plan.reject_first(chosen, problem)
        self._route(key, plan)
        return plan.first_call(bound)

    def _arm(self) -> None:
        """The compiled base calls guard and kernel itself from now on (where it is built and may)."""
        target = self.target
        if self.armed is not None and target is not None and hasattr(target, "_arm"):
            guard, rest, failed, nargs = self.armed
            target._arm(guard, self.first, rest, failed, nargs)

    def _route(self, key: Any, plan: CallPlan) -> None:
        if key is not None:
            if len(self.routes) >= MAX_SIGNATURES:
                self.routes.clear()
            self.routes[key] = plan


def _leading(positions: list[int]) -> bool:
    """Whether the free arguments come first (0, 1, ...): the rest can then be appended to them."""
    return positions == list(range(len(positions)))


def _verifier(selection: Selection) -> Callable[[Any], Any]:
    """For check mode: the result as is, or KernelResultError naming the kernel."""
    if selection.decompose:
        return _same
    kernel = selection.accepted[0]
    outputs, kind, op, listed = selection.outputs, selection.caller_kind, selection.contract.name, _listed(selection)

    def verify(result: Any) -> Any:
        problem = result_problem(result, outputs, kind, listed)
        if problem is not None:
            raise result_error(op, kernel.title, kernel.source, problem)
        return result

    return verify


def _same(value: Any) -> Any:
    return value


def _key_kind(example: Any) -> str:
    """How the generated entry keys an argument: inline for plain numpy and torch, else _signature()."""
    if type(example) is numpy.ndarray:
        return "numpy"
    if is_tensor(example) and str(example.layout) == "torch.strided":
        return "torch"
    return "other"


def _signature(value: Any) -> Any:
    """The key of any free argument (lists of tensors, sparse tensors); raises for anything else."""
    if isinstance(value, tuple):
        return tuple(_signature(v) for v in value)
    if value is None:
        return None
    if type(value) is numpy.ndarray:
        return (type(value), value.dtype, value.shape, value.strides)
    if is_tensor(value):
        strided = str(value.layout) == "torch.strided"
        return (type(value), value.dtype, value.shape, value.device, value.stride() if strided else value.layout)
    raise TypeError(f"no signature for {type(value).__name__}")


_KEYS = {
    "numpy": "type({a}), {a}.dtype, {a}.shape, {a}.strides",
    "torch": "type({a}), {a}.dtype, {a}.shape, {a}.device, {a}.stride()",
    "other": "sig({a})",
}
# the inline test against the examples' signature: dtype by identity (numpy and torch keep one object
# per built-in dtype; another equal one only takes the dict path), strides only when a checker may care
_SAME = {
    "numpy": "type({a}) is C{j} and {a}.dtype is D{j} and {a}.shape == S{j}",
    "torch": "type({a}) is C{j} and {a}.dtype is D{j} and {a}.shape == S{j} and {a}.device == V{j}",
}
_EXAMPLE_FIELDS = {"numpy": "CDST", "torch": "CDSVT"}  # class, dtype, shape, (device), strides: entry() passes these
_STRIDES = {"numpy": " and {a}.strides == T{j}", "torch": " and {a}.stride() == T{j}"}


@functools.cache
def _entry_maker(
    free_at: tuple[int, ...],
    size: int,
    keys: tuple[str, ...],
    prepared: bool,
    check: bool,
    strides: bool,
    versioned: int = 0,
    guarded: bool = False,
) -> Callable[..., tuple[Callable[..., Any], Callable[[Any], None], Callable[..., Any], Callable[..., Any]]]:
    """Source for a resolved op's entry, generated per shape of call (as _calls.fixed_arity is): a
    function of exactly the free arguments. Its fast branch compares each argument with the examples'
    signature (once that was checked: ``mark``); other signatures take one key and a dict lookup.
    With ``versioned`` torch constants, every call first compares their version counters (one
    attribute read each) and prepares the kernel again after an in-place update. ``guarded``: the
    fast branch asks torch's tensor guard G (opcore._guards) instead, passed in place of the examples;
    it checks every field of the key (and more: requires_grad), so a miss only takes the dict path.
    Returns make(...) -> (call, mark, keyof, failed): failed(error, *free) is the fast branch's
    recovery, for the compiled base's armed path (ResolvedBase._arm).
    """
    params = [f"a{j}" for j in range(len(free_at))]
    full = [f"a{free_at.index(i)}" if i in free_at else f"t{i}" for i in range(size)]
    tails = [name for name in full if name.startswith("t")]
    full_tuple = "(" + "".join(f"{name}, " for name in full) + ")"
    free_tuple = "(" + "".join(f"{name}, " for name in params) + ")"
    arguments = ", ".join(params if prepared else full)
    key = "(" + "".join(_KEYS[kind].format(a=a) + ", " for a, kind in zip(params, keys)) + ")"
    inline = not check and bool(keys) and all(kind in _SAME for kind in keys)
    examples = (
        ["G"] if guarded else [f"{v}{j}" for j, kind in enumerate(keys) if kind in _SAME for v in _EXAMPLE_FIELDS[kind]]
    )
    watched = [f"k{v}" for v in range(versioned)]
    counts = [f"v{v}" for v in range(versioned)]
    lines = [f"def make({', '.join(['first', 'seen', 'slow', 'sig', 'remake', *watched, *tails, *examples])}):"]
    lines += ["    ready = False", "    recover0 = None"]
    if guarded:  # G answers False until mark() puts the guard there: no separate test of ready per call
        lines += ["    guard = G", "    def G(*args):", "        return False"]
    lines += [f"    {c} = {k}._version" for k, c in zip(watched, counts)]
    if versioned:
        lines += [
            "    def refresh():",
            f"        nonlocal first, {', '.join(counts)}",
            # read before preparing (an update during it refreshes again), stored after (a failed prepare is retried)
            f"        now = ({''.join(f'{k}._version, ' for k in watched)})",
            "        first = remake()",
            f"        ({''.join(f'{c}, ' for c in counts)}) = now",
        ]
    lines += [f"    def call({', '.join(params)}):"]
    if versioned:
        changed = " or ".join(f"{k}._version != {c}" for k, c in zip(watched, counts))
        lines += [f"        if {changed}:", "            refresh()"]
    if inline:
        same = (
            f"G({', '.join(params)})"
            if guarded
            else " and ".join(
                _SAME[kind].format(a=a, j=j) + (_STRIDES[kind].format(a=a, j=j) if strides else "")
                for j, (a, kind) in enumerate(zip(params, keys))
            )
        )
        lines += [
            f"        if {same}:" if guarded else f"        if ready and {same}:",
            "            try:",
            f"                return first({arguments})",
            "            except Exception as error:",
            f"                return recover0({full_tuple}, error)",
        ]
    lines += [
        "        try:",
        f"            key = {key}",
        "        except Exception:  # not an array of the examples' kind: checked every time",
        f"            return slow({free_tuple}, None)",
        "        entry = seen.get(key)",
        "        if entry is None:",
        f"            return slow({free_tuple}, key)",
        "        try:",
        f"            return entry[0](first({arguments}))" if check else f"            return first({arguments})",
        "        except Exception as error:",
        f"            return {'entry[1]' if check else 'entry'}({full_tuple}, error)",
        "    def mark(recover):",
        f"        nonlocal ready, recover0{', G' if guarded else ''}",
        "        recover0 = recover",
        f"        ready = {inline}",
        *(["        G = guard"] if guarded and inline else []),
        f"    def keyof({', '.join(params)}):",
        f"        return {key}",
        f"    def failed(error, {', '.join(params)}):",
        f"        return recover0({full_tuple}, error)",
        "    return call, mark, keyof, failed",
    ]
    namespace: dict[str, Any] = {}
    exec(compile("\n".join(lines) + "\n", f"<opcore resolved entry {free_at}/{size}>", "exec"), namespace)
    return namespace["make"]


def _prepare(
    kernel: Kernel, selection: Selection, bound: tuple[Any, ...], constants: frozenset[str], free_at: list[int]
) -> Callable[..., Any]:
    prepare = load_kernel_callable(kernel, selection.contract, "prepare")
    if selection.kinds == {kernel.array_kind}:
        return prepare(bound, constants)
    to_kernel, back = kernel_converters(kernel, selection)  # with a transfer: constants move to the device once
    inner = prepare(convert_tensors(bound, to_kernel), constants)

    def prepared(*free: Any) -> Any:
        return back(inner(*(to_kernel(v) for v in free)))

    return prepared
