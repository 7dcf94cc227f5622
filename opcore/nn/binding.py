"""Choosing a module's backend once and resolving its ops there.

A module describes its ops as *steps* (``Single``: one op; ``Fused``: a fused op with the
unfused parts to build it from) and ``bind`` resolves them with ``opcore.resolve``:

- ``backend=None``: the first step resolves by the ranked default (``opcore.prefer``,
  ``configure`` and the environment apply); the other steps follow its backend, and only where
  that backend cannot run one does that step take the ranked default too (said in the note).
- ``backend="name"`` or a list in preference order: each name in turn, every step pinned to it;
  the first name that runs every step wins. None does: ``NoKernelError`` with each name's reason.
- A ``Fused`` step whose backend has no kernel for the fused op (the pinned resolve would run the
  op's decomposition, unprepared) is built from its parts instead, each resolved -- with its
  weights prepared -- on that same backend (AMD PACE's rule); the note says "linear+silu by parts".

>>> bound = bind([Single("relu", (torch.zeros(1, 4),))], "cpu", what="demo")   # doctest: +SKIP
>>> bound.describe()                                                            # doctest: +SKIP
'cpu (cpu/aten)'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import opcore
from opcore.errors import ArgumentError, NoKernelError, OpcoreError
from opcore.kernel_walk import CandidateStatus
from opcore.resolved import ResolvedOp, resolve_with

__all__ = ["BackendRequest", "Bound", "Fused", "Single", "bind", "parse_backend"]

# None: the ranked default; otherwise backend names in preference order
BackendRequest = tuple[str, ...] | None


def parse_backend(backend: Any, what: str) -> BackendRequest:
    """``backend=`` as a module takes it: None, a name, or a non-empty sequence of names."""
    if backend is None:
        return None
    if isinstance(backend, str):
        return (backend,)
    if isinstance(backend, Sequence) and backend and all(isinstance(name, str) for name in backend):
        return tuple(backend)
    raise ArgumentError(
        op=what,
        arg="backend",
        expected="None (the ranked default), a backend name, or a list of names in preference order",
        found=repr(backend),
    )


@dataclass(frozen=True, slots=True)
class Single:
    """One op, resolved as ``opcore.resolve(op, *args, constants=constants, **attrs)``."""

    op: str
    args: tuple[Any, ...]
    constants: tuple[str, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.op


@dataclass(frozen=True, slots=True)
class Fused:
    """A fused op, or -- where the backend has no kernel for it -- ``combine(*parts)`` built from its
    parts resolved on the same backend. ``combine`` takes the parts' callables and returns one.
    """

    single: Single
    parts: tuple[Single | Fused, ...]
    combine: Callable[..., Callable[..., Any]]

    @property
    def name(self) -> str:
        return self.single.op


Step = Single | Fused


@dataclass(frozen=True, slots=True)
class Bound:
    """What a module's steps resolved to: one callable per step, and how they were chosen."""

    backend: str
    calls: tuple[Callable[..., Any], ...]
    # every ResolvedOp behind the calls, parts included (for inspection and tests)
    resolved: tuple[ResolvedOp, ...]
    # "linear+silu by parts", "scaled_dot_product_attention on cpu", ... ("" when nothing to say)
    notes: tuple[str, ...] = ()
    # names tried before ``backend`` and why each could not run the steps
    passed_over: tuple[tuple[str, str], ...] = ()

    @property
    def by_parts(self) -> bool:
        return any(note.endswith("by parts") for note in self.notes)

    def kernels(self) -> tuple[str, ...]:
        """The distinct kernel titles, in order; "prepared" where constants were baked in."""
        seen: dict[str, None] = {}
        for resolved in self.resolved:
            title = resolved.kernel.title if resolved.kernel is not None else f"{resolved.op} decomposition"
            seen[title + (" prepared" if resolved.prepared else "")] = None
        return tuple(seen)

    def describe(self) -> str:
        """One line for ``extra_repr``: the backend, then the notes or the kernels."""
        details = list(self.notes) if self.by_parts else [*self.kernels(), *self.notes]
        if self.passed_over:
            details.append("passed over: " + ", ".join(name for name, _ in self.passed_over))
        return f"{self.backend} ({'; '.join(details)})" if details else self.backend


def _raw(resolved: ResolvedOp) -> Callable[..., Any]:
    # the function a call of the ResolvedOp goes to (its entry): one call less per call
    return resolved._entry


def _resolve(single: Single, pin: str | None) -> ResolvedOp:
    # the module watches its parameters itself (state.PreparedModule._fresh) and binds again after a
    # change, also for constants derived from them: the resolved op need not check versions too
    return resolve_with(
        single.op, single.args, dict(single.attrs), constants=single.constants, backend=pin, watch=False
    )


def _step(
    step: Step, pin: str | None, resolved: list[ResolvedOp], notes: list[str]
) -> tuple[Callable[..., Any], str | None]:
    """Resolve one step pinned to ``pin`` (None: ranked default); returns its callable and backend."""
    if isinstance(step, Single):
        op = _resolve(step, pin)
        resolved.append(op)
        return _raw(op), op.kernel.backend if op.kernel is not None else pin
    whole = _resolve(step.single, pin)
    if whole.kernel is not None:
        resolved.append(whole)
        return _raw(whole), whole.kernel.backend
    # no kernel for the fused op on this backend: its parts, prepared, on the same backend
    calls = []
    for part in step.parts:
        call, where = _step(part, pin, resolved, notes)
        calls.append(call)
        pin = pin if pin is not None else where  # ranked default: the first part decides
    notes.append("+".join(_part_names(step)) + " by parts")
    return step.combine(*calls), pin


def _part_names(step: Fused) -> list[str]:
    """The ops a fused step is built from, one level down ("linear", "silu")."""
    return [part.name for part in step.parts]


def _on(steps: Sequence[Step], name: str) -> Bound:
    resolved: list[ResolvedOp] = []
    notes: list[str] = []
    calls = tuple(_step(step, name, resolved, notes)[0] for step in steps)
    return Bound(name, calls, tuple(resolved), tuple(notes))


def _ranked(steps: Sequence[Step]) -> Bound:
    resolved: list[ResolvedOp] = []
    notes: list[str] = []
    first, backend = _step(steps[0], None, resolved, notes)
    calls = [first]
    for step in steps[1:]:
        try:
            mine: tuple[list[ResolvedOp], list[str]] = ([], [])
            call, _ = _step(step, backend, *mine)
        except OpcoreError:
            if backend is None:
                raise
            mine = ([], [])
            call, elsewhere = _step(step, None, *mine)
            mine[1].append(f"{step.name} on {elsewhere}")
        resolved += mine[0]
        notes += mine[1]
        calls.append(call)
    return Bound(backend or "decomposition", tuple(calls), tuple(resolved), tuple(notes))


def bind(steps: Sequence[Step], backend: BackendRequest, what: str, inputs: str = "these inputs") -> Bound:
    """Resolve ``steps`` for ``backend`` (see the module docstring); ``what`` names the module in errors,
    ``inputs`` its dtype and device ("bfloat16 on cpu").
    """
    if backend is None:
        return _ranked(steps)
    passed_over: list[tuple[str, str]] = []
    for name in backend:
        try:
            bound = _on(steps, name)
        except OpcoreError as error:
            passed_over.append((name, _reason(steps, name, error)))
            continue
        return Bound(bound.backend, bound.calls, bound.resolved, bound.notes, tuple(passed_over))
    lines = "\n".join(f"  - {name}: {reason}" for name, reason in passed_over)
    many = len(backend) > 1
    raise NoKernelError(
        f"no backend of {list(backend)} runs it for {inputs}\n{lines}",
        op=what,
        fix=(
            "use a dtype those backends take (module.to(torch.float32)), "
            + ("add another backend to the list, " if many else "name a list of backends (backend=[..., 'cpu']), ")
            + "or pass backend=None for the ranked default"
        ),
    )


def _reason(steps: Sequence[Step], name: str, error: OpcoreError) -> str:
    """Why ``name`` could not run the steps: its own rows of opcore.explain, else the error's first line."""
    if not isinstance(error, NoKernelError):
        return str(error).splitlines()[0].split(" Fix: ")[0]
    for single in _singles(steps):
        try:
            explanation = opcore.explain(single.op, *single.args, backend=name, **single.attrs)
        except OpcoreError:
            continue
        if explanation.chosen is not None:
            continue
        rows = [c for c in explanation.candidates if c.backend == name]
        if rows:
            why = "; ".join(
                f"{c.status.value}: {c.reason}" if c.reason else c.status.value
                for c in rows
                if c.status is not CandidateStatus.PASSED_OVER
            )
            return f"{single.op} {why}" if why else f"{single.op}: no kernel"
        return f"{single.op}: has no kernel"
    return str(error).splitlines()[0].split(" Fix: ")[0]


def _singles(steps: Sequence[Step]) -> list[Single]:
    """Every op a binding would try, parts included, in order."""
    found: list[Single] = []
    for step in steps:
        if isinstance(step, Single):
            found.append(step)
        else:
            found.append(step.single)
            found.extend(_singles(step.parts))
    return found
