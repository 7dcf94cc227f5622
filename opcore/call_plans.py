"""Plans: what a cached signature runs, and the selection that makes one.

A CallPlan holds the chosen kernel bare (conversions included) and what happens when it raises: the
next accepted kernel (imported and adapted only then), the contract's decomposition, or
NoKernelError with every reason. run() (opcore.dispatch), resolve (opcore.resolved) and
opcore.graph's planner build their plans here.

>>> selection, bound = selection_for(runtime().ensure_loaded(), "relu", (x,), {}, None)  # doctest: +SKIP
>>> build_plan(selection, bound)(*bound)                                                 # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opcore.arrays import converter, result_converter
from opcore.contracts import OpContract
from opcore.errors import KernelResultError, NoKernelError, OpcoreError, PluginError, Unsupported
from opcore.kernel_records import Kernel
from opcore.kernel_walk import Candidate, CandidateStatus, Selection, no_kernel_error, select, warn_once
from opcore.registry import load_kernel_callable
from opcore.results import checked, listed, result_error, result_problem
from opcore.runtime import Runtime
from opcore.settings import ContextPolicy, context_policy
from opcore.types import ArrayKind, array_kind_of

__all__ = [
    "CallPlan",
    "adapt",
    "bind",
    "build_plan",
    "convert_tensors",
    "holds_tensor",
    "kernel_converters",
    "selection_for",
    "stand_ins",
]


class CallPlan:
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
            self.reject_first(kernel, problem)

    def reject_first(self, kernel: Kernel, problem: str) -> None:
        """The first kernel's result broke the contract (``problem``): KernelResultError when pinned
        or strict, else one warning and the kernel dropped (drop_first). run's and resolve's first calls.
        """
        selection = self.selection
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
        return f"CallPlan({self.selection.contract.name} -> {_title(self.selection)})"


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


def build_plan(selection: Selection, bound: tuple[Any, ...], check: bool = False) -> CallPlan:
    """The plan for a selection: the first kernel adapted to the caller's arrays (the ones behind it
    are imported and adapted only if it hands over), or the decomposition. check: see CallPlan.
    """
    if selection.decompose:
        return CallPlan(selection, [_decomposition_plan(selection)], bound)
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
            return CallPlan(selection, [_decomposition_plan(selection)], bound)
        raise no_kernel_error(selection, "every accepted kernel failed to import")
    return CallPlan(selection, calls, bound, check)


def _recover(plan: CallPlan, index: int, args: tuple[Any, ...], error: Exception) -> Any:
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


def _checked_fallback(plan: CallPlan, index: int, args: tuple[Any, ...]) -> Any:
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
        from opcore import arrays_torch as torch_arrays

        return torch_arrays.to_device(str(selection.transfer)), torch_arrays.to_host
    dtypes = tuple(m.dtype for m in selection.outputs)
    return converter(kernel.array_kind), result_converter(kernel.array_kind, selection.caller_kind, dtypes)


def adapt(kernel: Kernel, selection: Selection, bound: tuple[Any, ...]) -> Callable[..., Any]:
    """The kernel's function, wrapped in conversions only when the arrays are of another kind
    (or must move to another device). A function carrying ``specialize(*metas)`` is asked for the
    callable that serves this signature (one Python frame less on the hot path, see opcore.torchkit.torch_kernels).
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
    """A tensor, a list with tensors, or the stand-in a CallPlan keeps instead of its example's data."""
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


def bind(contract: OpContract, op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The call bound to the contract's schema; a binding error names ``op`` (run's slow path, selection_for)."""
    try:
        return contract.schema.bind(args, kwargs)
    except OpcoreError as error:
        if error.op is None:
            error.op = op
        raise


def selection_for(
    rt: Runtime,
    op: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    backend: str | None,
    choose: Callable[..., Selection] = select,
) -> tuple[Selection, tuple[Any, ...]]:
    """Bind and select without running (explain, resolve, tune). choose: select, or a function of its
    arguments in its place (resolve passes tuning's opcore.tuning.selecting.select_tuned)."""
    contract = rt.registry.contract(op)
    bound = bind(contract, op, args, kwargs)
    policy = context_policy.get()
    pin = backend if backend is not None else (policy.pin if policy is not None else None)
    return choose(rt, contract, bound, policy, pin), bound
