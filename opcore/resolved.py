"""``opcore.resolve``: decide once, call many times, with constant inputs prepared by the kernel."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from opcore._calls import fixed_arity
from opcore.dispatch import Plan, build_plan, convert_tensors, holds_tensor, kernel_converters, selection_for, stand_ins
from opcore.errors import ArgumentError, OpcoreError, Unsupported
from opcore.explanation import Explanation, explanation_of
from opcore.kernels import Kernel, load_callable
from opcore.runtime import runtime
from opcore.selection import Selection, warn_once

__all__ = ["ResolvedOp", "resolve"]


class ResolvedOp:
    """A call decided once. Call it with the non-constant tensor arguments, in schema order.

    It skips dispatch: no meta check, no cache lookup. Call it with inputs of the same
    dtypes, devices and ranks as the examples (other sizes are fine); for anything else,
    use opcore.run or resolve again.
    """

    __slots__ = ("__call__", "_prepared", "constants", "explanation", "free", "kernel", "op")

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

    def __repr__(self) -> str:
        constants = f", constants={list(self.constants)}" if self.constants else ""
        state = ", prepared" if self._prepared else ""
        where = self.kernel.title if self.kernel is not None else "decomposition"
        return f"ResolvedOp({self.op} on {where}{state}, takes ({', '.join(self.free)}){constants})"


def resolve(
    op: str, /, *args: Any, constants: Iterable[str] = (), backend: str | None = None, **kwargs: Any
) -> ResolvedOp:
    """Decide the kernel for these example arguments once; ``constants`` names tensor arguments
    whose values are fixed (weights), which the kernel may prepare (pack) now.

    >>> linear = opcore.resolve("linear", x, w, b, constants=("w", "b"))   # doctest: +SKIP
    >>> y = linear(x)                                                        # doctest: +SKIP
    """
    rt = runtime().ensure_loaded()
    selection, bound = selection_for(rt, op, args, kwargs, backend, tune=True)
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
    template = list(bound)
    for i in free_at:
        template[i] = None

    resolved = ResolvedOp.__new__(ResolvedOp)
    resolved.op = op
    resolved.kernel = selection.accepted[0] if selection.accepted else None
    resolved.constants = constants
    resolved.free = tuple(names[i] for i in free_at)
    resolved.explanation = explanation_of(selection)
    resolved._prepared = False

    plan = build_plan(selection, bound)
    full = _filler(plan, template, free_at)
    kernel = resolved.kernel
    if kernel is not None and kernel.prepare is not None and constants:  # no constants: nothing to prepare
        prepared = _prepare(kernel, selection, bound, frozenset(constants), free_at)
        resolved._prepared = True
        rest = replace(selection, accepted=selection.accepted[1:])
        fallback = _lazy_fallback(rest, bound, template, free_at) if rest.accepted or rest.decompose else None
        resolved.__call__ = _guarded(prepared, fallback, selection, kernel, len(free_at))
    else:
        resolved.__call__ = full
    return resolved


def _filler(plan: Plan, template: list[Any], free_at: list[int]) -> Callable[..., Any]:
    """A function of the free arguments running plan.first on the full bound arguments,
    handing errors to plan.recover (one Python frame on top of the kernel).
    """
    first = plan.first
    recover = plan.recover
    n = len(free_at)
    if free_at == list(range(n)):
        return fixed_arity(first, n, tuple(template[n:]), recover)

    def fill(free: tuple[Any, ...]) -> tuple[Any, ...]:
        call = template.copy()
        for position, value in zip(free_at, free):
            call[position] = value
        return tuple(call)

    def call_filled(*free: Any) -> Any:
        bound = fill(free)
        try:
            return first(*bound)
        except Exception as error:
            return recover(bound, error)

    return call_filled


def _lazy_fallback(
    rest: Selection, bound: tuple[Any, ...], template: list[Any], free_at: list[int]
) -> Callable[..., Any]:
    """The plan behind a prepared kernel, built (and its backend imported) only if it is needed."""
    where = stand_ins(bound)  # build_plan only needs to know where the tensors are
    made: list[Callable[..., Any]] = []

    def fallback(*free: Any) -> Any:
        if not made:
            made.append(_filler(build_plan(rest, where), template, free_at))
        return made[0](*free)

    return fallback


def _prepare(
    kernel: Kernel, selection: Selection, bound: tuple[Any, ...], constants: frozenset[str], free_at: list[int]
) -> Callable[..., Any]:
    prepare = load_callable(kernel.prepare)
    if selection.kinds == {kernel.array_kind}:
        return prepare(bound, constants)
    to_kernel, back = kernel_converters(kernel, selection)  # with a transfer: constants move to the device once
    inner = prepare(convert_tensors(bound, to_kernel), constants)

    def prepared(*free: Any) -> Any:
        return back(inner(*(to_kernel(v) for v in free)))

    return prepared


def _guarded(
    prepared: Callable[..., Any], fallback: Callable[..., Any] | None, selection: Selection, kernel: Kernel, n: int
) -> Callable[..., Any]:
    """The prepared kernel as a function of the n free arguments, handing over to ``fallback``."""

    def recover(free: tuple[Any, ...], error: Exception) -> Any:
        if isinstance(error, OpcoreError):
            if not isinstance(error, Unsupported) or fallback is None or selection.strict or selection.pin:
                if error.op is None:
                    error.op = selection.contract.name
                raise error
            return fallback(*free)
        if fallback is None or selection.strict or selection.pin:
            raise error
        warn_once(selection.contract.name, kernel.backend, error, f"prepared kernel {kernel.source}")
        return fallback(*free)

    return fixed_arity(prepared, n, (), recover)
