"""Deciding every node once: the node x backend verdicts, the chosen kernel, the prepared call.

For each node, planning asks dispatch's ranked walk (every backend's checker, with the node's metas;
``selection_for``), records every candidate's verdict with its reason, picks the first accepting
kernel of the requested backends, and resolves it once (``opcore.resolve``: constants such as
weights are prepared by the kernel now, and the call skips dispatch at run time).

Where the plan's value ranges (``opcore.graph.ranges``) bound a node's integer inputs, the checkers
are asked a second time with those bounds on the metas (``TensorMeta.bounds``): a graph runtime may
then take the node into a partition (status "partition only"), while the node's own kernel is still
chosen as for a single call, which sees no bounds.

A graph backend that computes bfloat16 in a wider dtype inside its partitions (its compiler's
``bfloat16_as``: OpenVINO computes it in float32) is asked about a bfloat16 node a second time with
its bfloat16 values shown as that dtype: an accept becomes "partition only" too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from typing import Any

from opcore.call_plans import build_plan, selection_for
from opcore.contracts import OpContract
from opcore.errors import DTypeError, OpcoreError
from opcore.graph.ir import Graph, Node, ValueRef, python_step, refs_in, substitute
from opcore.graph.ranges import NO_INT64, Interval, ValueProof, node_narrowing, shown
from opcore.kernel_walk import CandidateStatus, select
from opcore.resolved import resolve_with
from opcore.runtime import runtime
from opcore.settings import context_policy
from opcore.types import DType, TensorMeta, is_tensor

__all__ = [
    "PARTITION_ONLY",
    "Decision",
    "NodeCall",
    "Verdict",
    "bfloat16_dtype_shown",
    "has_bfloat16",
    "plan_node",
    "scalar_call",
    "selection_verdicts",
]

# the status of a graph backend that accepts a node only with the plan's value ranges (in a partition)
PARTITION_ONLY = "partition only"


@dataclass(frozen=True, slots=True)
class Verdict:
    """One backend's answer for one node: status "chosen", "fallback" (accepts, not chosen),
    "declined" (its checker said no, ``reason`` says why), "no kernel", "partition" (a graph
    backend took the node into a compiled partition), "partition only" (its checker accepts the
    node with the plan's value ranges, which only a partition of the plan has), "passed over", ..."""

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
    proof: ValueProof | None = None,
) -> NodeCall:
    """Decide and prepare one node. ``example(name)``: a constant's tensor, or an example tensor of a
    value's meta (scalars: their example value). ``allowed`` None: any backend; else only these
    unless ``fallback`` lets the ranked rest take what they decline. ``proof``: the plan's value
    ranges (they change the verdicts of graph backends that narrow int64; the node's own kernel is
    chosen as for a single call, without them).
    """
    rt = runtime().ensure_loaded()
    contract = rt.registry.contract(node.op)
    selection, bound, args, kwargs = _select(node, example, order)
    verdicts = _narrowed(graph, node, example, order, proof, _verdicts(selection)) + extra
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
    # pinned to the kernel chosen for the examples; with fallback, a call that kernel declines (a
    # view's strides, which the examples' contiguous metas did not show) takes the next kernel
    resolved = resolve_with(node.op, args, kwargs, constants=fixed, backend=kernel.backend, fall_back=fallback)
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
    node: Node,
    example: Callable[[str], Any],
    order: Sequence[str] | None,
    ranges: Mapping[str, Interval] | None = None,
    narrow: DType | None = None,
    wide: DType | None = None,
) -> tuple[Any, tuple[Any, ...], tuple[Any, ...], dict[str, Any]]:
    """Dispatch's ranked walk for the node's example arguments (nothing runs). With ``ranges``: the
    checkers see the arguments' metas as a runtime that computes int64 in ``narrow`` gets them
    (``ranges.shown``: proven int64 as ``narrow``, bounded tensors with their ``bounds``), and
    bfloat16 (tensors and a ``dtype`` argument) as ``wide`` where it is given."""
    rt = runtime().ensure_loaded()
    contract = rt.registry.contract(node.op)
    bound = substitute(node.args, example)
    args, kwargs = split_call(contract, bound)
    with _preferring(order) if order else nullcontext():
        selection, full = selection_for(rt, node.op, args, kwargs, None)
        if ranges is not None and (narrow is not None or wide is not None):
            selection = _select_shown(rt, contract, full, node, ranges, narrow, wide)
    return selection, bound, args, kwargs


def _select_shown(
    rt: Any,
    contract: OpContract,
    full: tuple[Any, ...],
    node: Node,
    ranges: Mapping[str, Interval],
    narrow: DType | None,
    wide: DType | None = None,
) -> Any:
    """The walk on the metas shown (bound first: the schema checks take tensors). An argument the
    contract wants int64 whatever its values (gather's index) is shown as it is: the contract's
    DTypeError names it."""
    names = contract.schema.names
    kept: set[int] = set()
    policy = context_policy.get()
    if narrow is not None:
        full = _result_dtype_shown(full, names, narrow, node.op)
    if wide is not None:
        full = bfloat16_dtype_shown(full, names, wide)
    while True:
        metas = tuple(
            value if i in kept else _widened(_shown(value, given, ranges, narrow), wide)
            for i, (value, given) in enumerate(zip(full, node.args))
        )
        try:
            return select(rt, contract, metas + full[len(metas) :], policy, policy.pin if policy else None)
        except DTypeError as error:
            where = names.index(error.arg) if error.arg in names else None
            if where is None or where in kept:
                raise
            kept.add(where)


def _result_dtype_shown(full: tuple[Any, ...], names: Sequence[str], narrow: DType, op: str) -> tuple[Any, ...]:
    """The int64 result dtype a creation op (no tensor among its arguments: an ``arange(s0)`` of a
    dynamic size) or a ``cast`` (a float's bucket cast to int64) names, shown as ``narrow``: asked
    only once the plan proved the result's values fit ``narrow`` (a cast computes its result in the
    dtype it names, nothing before it)."""
    if "dtype" not in names or (op != "cast" and any(is_tensor(v) for v in full)):
        return full
    at = names.index("dtype")
    if at >= len(full) or full[at] not in (None, "int64", DType.INT64):
        return full
    return (*full[:at], narrow.value, *full[at + 1 :])


def _is_bfloat16(value: Any) -> bool:
    """Whether a ``dtype`` argument (a name, a DType, a torch dtype) names bfloat16."""
    if value is None or isinstance(value, bool):
        return False
    try:
        return DType.parse(value) is DType.BFLOAT16
    except OpcoreError:
        return False


def bfloat16_dtype_shown(full: tuple[Any, ...], names: Sequence[str], wide: DType) -> tuple[Any, ...]:
    """A ``dtype`` argument naming bfloat16 (a cast to it, a bfloat16 full) shown as ``wide``."""
    if "dtype" not in names:
        return full
    at = names.index("dtype")
    if at >= len(full) or not _is_bfloat16(full[at]):
        return full
    return (*full[:at], wide.value, *full[at + 1 :])


def _widened(value: Any, wide: DType | None) -> Any:
    """A bound argument with its bfloat16 tensors shown as ``wide`` metas (lists item by item)."""
    if wide is None:
        return value
    if isinstance(value, TensorMeta) or is_tensor(value):
        meta = value if isinstance(value, TensorMeta) else TensorMeta.of(value)
        return replace(meta, dtype=wide) if meta.dtype is DType.BFLOAT16 else value
    if isinstance(value, tuple):
        return tuple(_widened(v, wide) for v in value)
    return value


def _shown(value: Any, given: Any, ranges: Mapping[str, Interval], narrow: DType | None) -> Any:
    """A bound argument as the checkers see it (lists item by item); tensors without a range as they are."""
    if narrow is None:
        return value
    if isinstance(given, ValueRef) and given.name in ranges and is_tensor(value):
        return shown(TensorMeta.of(value), ranges[given.name], narrow)
    if isinstance(given, (tuple, list)) and isinstance(value, tuple) and len(value) == len(given):
        return tuple(_shown(v, g, ranges, narrow) for v, g in zip(value, given))
    return value


def _narrowed(
    graph: Graph,
    node: Node,
    example: Callable[[str], Any],
    order: Sequence[str] | None,
    proof: ValueProof | None,
    verdicts: tuple[Verdict, ...],
) -> tuple[Verdict, ...]:
    """The verdicts, with those of each graph backend that computes int64 narrower (``proof.int64_as``)
    and declined the node asked again where the plan proves its int64 values fit: an accept becomes
    "partition only" (only a partition of the plan has the proof); a decline says what is not proven.
    Then each graph backend that computes bfloat16 wider (``proof.bfloat16_as``) and declined a
    bfloat16 node is asked again with those values shown wider (``_widened_rows``)."""
    if proof is None or node.scalar:
        return verdicts
    accepting = (CandidateStatus.CHOSEN.value, CandidateStatus.FALLBACK.value)
    for backend, narrow in proof.int64_as.items():
        mine = [v for v in verdicts if v.backend == backend]
        if not mine or any(v.status in accepting for v in mine):
            continue
        why = node_narrowing(graph, node, proof.ranges, narrow)
        if why == NO_INT64:
            continue
        plain = "; ".join(v.reason for v in mine if v.reason)
        if why is not None:
            note = f" (the plan's value ranges do not prove {narrow} is enough: {why})"
            rows = tuple(Verdict(v.backend, v.status, v.reason + note, v.kernel) for v in mine)
        else:
            try:
                again = _verdicts(_select(node, example, order, proof.ranges, narrow)[0])
            except OpcoreError:  # the narrowed metas are not a call the contract takes: as on its own
                continue
            rows = tuple(
                Verdict(
                    v.backend,
                    PARTITION_ONLY,
                    f"in a partition: the plan proves its int64 values fit {narrow}; on its own: {plain}",
                    v.kernel,
                )
                if v.status in accepting
                else v
                for v in again
                if v.backend == backend
            )
        verdicts = _replace_rows(verdicts, backend, rows)
    for backend, wide in proof.bfloat16_as.items():
        verdicts = _widened_rows(graph, node, example, order, proof, backend, wide, verdicts)
    return verdicts


def has_bfloat16(graph: Graph, node: Node) -> bool:
    """Whether one of the node's tensor inputs or outputs is bfloat16."""
    names = (*(r.name for r in refs_in(node.args)), *node.outputs)
    return any((m := graph.values[n].meta) is not None and m.dtype is DType.BFLOAT16 for n in names)


def _widened_rows(
    graph: Graph,
    node: Node,
    example: Callable[[str], Any],
    order: Sequence[str] | None,
    proof: ValueProof,
    backend: str,
    wide: DType,
    verdicts: tuple[Verdict, ...],
) -> tuple[Verdict, ...]:
    """``backend``'s verdicts on a bfloat16 node it declined, asked again with its bfloat16 values shown
    as ``wide`` (what its partitions compute them in; proven int64 narrowed as for ``_narrowed``): an
    accept becomes "partition only"; a decline leaves the first answer (it names bfloat16's reason)."""
    accepting = (CandidateStatus.CHOSEN.value, CandidateStatus.FALLBACK.value, PARTITION_ONLY)
    mine = [v for v in verdicts if v.backend == backend]
    if not mine or any(v.status in accepting for v in mine) or not has_bfloat16(graph, node):
        return verdicts
    narrow = proof.int64_as.get(backend)
    if narrow is not None and node_narrowing(graph, node, proof.ranges, narrow) is not None:
        narrow = None  # nothing to narrow, or not proven: the checkers see its int64 values as they are
    try:
        again = _verdicts(_select(node, example, order, proof.ranges, narrow, wide)[0])
    except OpcoreError:  # the widened metas are not a call the contract takes: as on its own
        return verdicts
    why = f"in a partition: bfloat16 computed in {wide}; on its own: " + "; ".join(v.reason for v in mine if v.reason)
    rows = tuple(
        Verdict(v.backend, PARTITION_ONLY, why, v.kernel)
        for v in again
        if v.backend == backend and v.status in accepting
    )
    return _replace_rows(verdicts, backend, rows) if rows else verdicts


def _replace_rows(verdicts: tuple[Verdict, ...], backend: str, rows: tuple[Verdict, ...]) -> tuple[Verdict, ...]:
    at = next(i for i, v in enumerate(verdicts) if v.backend == backend)
    rest = [v for v in verdicts if v.backend != backend]
    return (*rest[:at], *rows, *rest[at:])


def _verdicts(selection: Any) -> tuple[Verdict, ...]:
    return tuple(
        Verdict(c.backend, c.status.value, c.reason, c.title if c.priority is not None else "")
        for c in selection.candidates
    )


def selection_verdicts(
    node: Node,
    example: Callable[[str], Any],
    order: Sequence[str] | None,
    proof: ValueProof | None = None,
    graph: Graph | None = None,
) -> tuple[Verdict, ...]:
    """Every backend's verdict on the node (its kernels' checkers asked with the node's metas; with
    ``proof`` and ``graph``, "partition only" where a narrowing graph backend takes it with the plan's
    value ranges)."""
    verdicts = _verdicts(_select(node, example, order)[0])
    return verdicts if graph is None else _narrowed(graph, node, example, order, proof, verdicts)


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
