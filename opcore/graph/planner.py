"""Deciding every node once: the node x backend verdicts, the chosen kernel, the prepared call.

For each node, planning asks dispatch's ranked walk (every backend's checker, with the node's metas;
``selection_for``), records every candidate's verdict with its reason, picks the first accepting
kernel of the requested backends, and resolves it once (``opcore.resolve``: constants such as
weights are prepared by the kernel now, and the call skips dispatch at run time).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from opcore.contracts import OpContract
from opcore.dispatch import build_plan, selection_for
from opcore.graph.ir import Graph, Node, ValueRef, python_step, refs_in, substitute
from opcore.resolved import resolve
from opcore.runtime import runtime
from opcore.selection import CandidateStatus

__all__ = ["Decision", "NodeCall", "Verdict", "plan_node", "scalar_call", "selection_verdicts"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """One backend's answer for one node: status "chosen", "fallback" (accepts, not chosen),
    "declined" (its checker said no, ``reason`` says why), "no kernel", "partition" (a graph
    backend took the node into a compiled partition), "passed over", ..."""

    backend: str
    status: str
    reason: str = ""
    kernel: str = ""  # the kernel's title ("cpu/onednn"); "" for a backend without one


@dataclass(frozen=True, slots=True)
class Decision:
    """What runs one node. backend "python": a size computation; "decomposition": the contract's
    decomposition (its parts dispatched); partition None: the node runs on its own kernel."""

    node: str
    op: str
    backend: str
    kernel: str = ""
    source: str = ""  # the kernel's module:qualname ("" for partitions and size computations)
    partition: str | None = None
    verdicts: tuple[Verdict, ...] = ()
    note: str = ""  # why the node is not its contract's op (the ATen fallback), or a partition's story


@dataclass(frozen=True, slots=True)
class NodeCall:
    """The planned call of one node: ``fn(*args)``, args with ValueRefs for the graph's values."""

    decision: Decision
    fn: Callable[..., Any] | None  # None: no backend covers the node (``uncovered`` says why)
    args: tuple[Any, ...] = ()
    uncovered: str = ""


def scalar_call(node: Node) -> NodeCall:
    """A size computation (``x.shape[0] * 8``) of a graph with dynamic dims: plain Python."""
    return NodeCall(Decision(node.name, node.op, "python"), python_step(node.op), node.args)


@contextmanager
def _preferring(order: Sequence[str] | None) -> Iterator[None]:
    if not order:
        yield
        return
    import opcore

    with opcore.prefer(*order):
        yield


def split_call(contract: OpContract, bound: Sequence[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Bound arguments as (positional, keyword-only) for opcore.run / resolve."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for argument, value in zip(contract.schema.arguments, bound):
        if argument.kwarg_only:
            kwargs[argument.name] = value
        else:
            args.append(value)
    return tuple(args), kwargs


def plan_node(
    graph: Graph,
    node: Node,
    example: Callable[[str], Any],
    *,
    order: Sequence[str] | None,
    allowed: frozenset[str] | None,
    fallback: bool,
    note: str = "",
    extra: tuple[Verdict, ...] = (),
) -> NodeCall:
    """Decide and prepare one node. ``example(name)``: a constant's tensor, or an example tensor of a
    value's meta (scalars: their example value). ``allowed`` None: any backend; else only these
    unless ``fallback`` lets the ranked rest take what they decline.
    """
    rt = runtime().ensure_loaded()
    contract = rt.registry.contract(node.op)
    selection, bound, args, kwargs = _select(node, example, order)
    verdicts = _verdicts(selection) + extra
    wanted = [k for k in selection.accepted if allowed is None or k.backend in allowed]
    kernel = wanted[0] if wanted else (selection.accepted[0] if selection.accepted and fallback else None)
    if kernel is not None:
        verdicts = tuple(_mark(v, kernel.title) for v in verdicts)
    if kernel is None:
        if fallback and selection.decompose:
            decision = Decision(node.name, node.op, "decomposition", verdicts=verdicts, note=note)
            return NodeCall(decision, build_plan(selection, bound), node.args)
        declined = [f"{v.kernel or v.backend}: {v.status}" + (f" ({v.reason})" if v.reason else "") for v in verdicts]
        why = "; ".join(declined) or "no backend has a kernel for it"
        if allowed is not None:
            why = f"none of {', '.join(sorted(allowed))} accepts it: {why}"
        return NodeCall(Decision(node.name, node.op, "", verdicts=verdicts, note=note), None, uncovered=why)
    decision = Decision(node.name, node.op, kernel.backend, kernel.title, kernel.source, None, verdicts, note)
    constants = set(graph.constants)
    if _reads_sizes(graph, node):
        # sizes computed at run time (dynamic dims) are arguments too: call the kernel on all of them
        pinned, full = selection_for(rt, node.op, args, kwargs, kernel.backend)
        return NodeCall(decision, _torch_results(contract, build_plan(pinned, full)), node.args)
    names = contract.schema.names
    fixed = tuple(
        names[i] for i, value in enumerate(node.args) if isinstance(value, ValueRef) and value.name in constants
    )
    resolved = resolve(node.op, *args, constants=fixed, backend=kernel.backend, **kwargs)
    free = tuple(node.args[names.index(name)] for name in resolved.free)
    return NodeCall(decision, _torch_results(contract, resolved), free)


def _torch_results(contract: OpContract, fn: Callable[..., Any]) -> Callable[..., Any]:
    """A creation op's call giving torch tensors, as every value of a plan is: without a tensor
    input, opcore.run gives a CPU result back as a numpy array."""
    if not contract.creates:
        return fn
    import torch

    def creating(*args: Any) -> Any:
        result = fn(*args)
        return torch.from_numpy(result) if not isinstance(result, torch.Tensor) else result

    return creating


def _select(
    node: Node, example: Callable[[str], Any], order: Sequence[str] | None
) -> tuple[Any, tuple[Any, ...], tuple[Any, ...], dict[str, Any]]:
    """Dispatch's ranked walk for the node's example arguments (nothing runs)."""
    rt = runtime().ensure_loaded()
    contract = rt.registry.contract(node.op)
    bound = substitute(node.args, example)
    args, kwargs = split_call(contract, bound)
    with _preferring(order) if order else nullcontext():
        selection, _ = selection_for(rt, node.op, args, kwargs, None)
    return selection, bound, args, kwargs


def _verdicts(selection: Any) -> tuple[Verdict, ...]:
    return tuple(
        Verdict(c.backend, c.status.value, c.reason, c.title if c.priority is not None else "")
        for c in selection.candidates
    )


def selection_verdicts(node: Node, example: Callable[[str], Any], order: Sequence[str] | None) -> tuple[Verdict, ...]:
    """Every backend's verdict on the node (its kernels' checkers asked with the node's metas)."""
    return _verdicts(_select(node, example, order)[0])


def _mark(verdict: Verdict, chosen: str) -> Verdict:
    """Dispatch's own order may differ from the plan's (backends=...): say which kernel the plan took."""
    if verdict.status in (CandidateStatus.CHOSEN.value, CandidateStatus.FALLBACK.value):
        status = CandidateStatus.CHOSEN.value if verdict.kernel == chosen else CandidateStatus.FALLBACK.value
        return Verdict(verdict.backend, status, verdict.reason, verdict.kernel)
    return verdict


def _reads_sizes(graph: Graph, node: Node) -> bool:
    return any(graph.values[ref.name].meta is None for ref in refs_in(node.args))


def example_tensors(graph: Graph, constants: Mapping[str, Any]) -> Callable[[str], Any]:
    """example(name) for plan_node: constants as they are, empty tensors of each value's meta."""
    import torch

    made: dict[str, Any] = {}

    def example(name: str) -> Any:
        if name in constants:
            return constants[name]
        info = graph.values[name]
        if info.meta is None:
            return info.example
        found = made.get(name)
        if found is None:
            meta = info.meta
            found = made[name] = torch.empty(meta.shape, dtype=meta.dtype.to_torch(), device=str(meta.device))
        return found

    return example
