"""Partitions: maximal acyclic runs of nodes that one graph runtime compiles into one model.

For each graph backend (one with a partition compiler, ``partition.compilers()``), in order of
preference (``backends=`` or the backends' priorities), a node is *accepted* when the compiler
``supports`` its op and one of the backend's kernels accepts the node's metas (the same checkers
dispatch asks). Accepted nodes are grouped along data edges into partitions that never create a
cycle (a partition is run as one step, so no outside node may sit between two of its nodes). A
partition is kept only where it pays (``pays``: enough compute nodes for the runtime's fixed cost
per call and the copies at its boundary); it is compiled now, at plan time, and where the plan
can measure (``measuring.Measured``: at capture, on the example inputs) the estimate gives way to a
time: the compiled partition is kept only where it runs faster than its nodes run per node. A compile failure
takes the failing node out (found by the compiler, or by compiling prefixes) and groups the rest
again, with the reason recorded on the node; a failure that is no node's (the first node fails alone,
and a node of another op alone fails the same way: a runtime that fails every model) takes all the
backend's nodes out at once, with one reason that explain shows first. A compiler that fails
otherwise (any other exception, no answer in time) or a partition that fails or breaks its spec is
isolated as a kernel is (opcore.graph.partition_guard): declined with one warning, or a
PartitionError where the plan is strict or pinned to the backend. Every group not kept says why on
its nodes (explain).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from opcore.errors import OpcoreError, Unsupported
from opcore.graph.ir import FACTORIES, STATE_OPS, Graph, Node, ValueRef, refs_in
from opcore.graph.measuring import Measured
from opcore.graph.partition import CompiledPartition, PartitionCompiler, PartitionSpec, PartNode, compilers
from opcore.graph.partition_guard import (
    CompilerCrash,
    answer,
    compile_timeout,
    guarded,
    host_array,
    raises_for,
    warn_partition,
)
from opcore.graph.planner import PARTITION_ONLY, Decision, Verdict, has_bfloat16, selection_verdicts
from opcore.graph.ranges import ValueProof
from opcore.graph.runner import Slot, Step
from opcore.types import DType, TensorMeta

__all__ = ["SIZE", "Cost", "PartitionRecord", "order_units", "pays", "place_partitions", "takes_sizes"]

# Ops that only move or view data: cheap per node in torch, so they count for less when deciding
# whether a partition pays, and they never split one (they join a neighbouring partition).
SHAPE_OPS = frozenset(
    {
        "reshape", "transpose", "permute", "cat", "unsqueeze", "squeeze", "flatten", "expand", "slice", "select",
        "split", "split_with_sizes", "chunk",
        "aten.slice.Tensor", "aten.unsqueeze.default", "aten.squeeze.dim", "aten.expand.default", "aten.select.int",
        "aten.clone.default", "clone",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Cost:
    """The cost rule's estimates, in microseconds (2 threads, this project's CPU benchmarks): what one
    node costs on a per-node kernel beyond its arithmetic (dispatch-free Python and a torch call),
    a shape node likewise, one graph-runtime call, and one tensor crossing a partition's boundary
    (a numpy view and the runtime's input/output binding)."""

    node_us: float = 8.0
    shape_node_us: float = 3.0
    call_us: float = 30.0
    boundary_us: float = 3.0
    min_nodes: int = 2


COST = Cost()


def pays(nodes: Sequence[Node], boundary: int, cost: Cost | None = None) -> tuple[bool, str]:
    """Whether a partition of ``nodes`` with ``boundary`` tensors in and out pays for itself, and why.

    >>> from opcore.graph.ir import Node
    >>> pays([Node("a", "linear", "", (), ("a",))] * 6, boundary=2)
    (True, 'saves ~48 us of per-node cost for ~36 us of call and boundary')
    """
    cost = cost or COST
    compute = [n for n in nodes if n.op not in SHAPE_OPS]
    saved = len(compute) * cost.node_us + (len(nodes) - len(compute)) * cost.shape_node_us
    spent = cost.call_us + boundary * cost.boundary_us
    small = large_enough(nodes, cost)
    if small is not None:
        return False, small
    if saved < spent:
        return False, f"saves ~{saved:.0f} us of per-node cost, less than ~{spent:.0f} us of call and boundary"
    return True, f"saves ~{saved:.0f} us of per-node cost for ~{spent:.0f} us of call and boundary"


def large_enough(nodes: Sequence[Node], cost: Cost | None = None) -> str | None:
    """None when ``nodes`` hold enough compute nodes to be worth compiling (measured or not), else why not."""
    cost = cost or COST
    compute = sum(n.op not in SHAPE_OPS for n in nodes)
    return None if compute >= cost.min_nodes else f"{compute} compute node(s) < the minimum of {cost.min_nodes}"


@dataclass(slots=True)
class PartitionRecord:
    """A compiled partition of the plan."""

    name: str
    backend: str
    nodes: tuple[str, ...]  # node names, topological order
    spec: PartitionSpec
    compiled: CompiledPartition
    note: str = ""  # the cost rule's verdict, and any node a compile failure took out
    saved_record: dict[str, Any] = field(default_factory=dict)
    # per output, its sizes (None: symbolic), for the check of the outputs (partition_guard.output_problem)
    dims: tuple[tuple[int | None, ...], ...] = ()
    # the partition's nodes run per node (made when the compiled partition fails while running);
    # None: no per-node route was attached (a failure raises)
    fallback: Callable[[], Callable[..., Any]] | None = None
    # sizes computed at run time outside the partition that its nodes per node read (fed to the step)
    sizes: tuple[str, ...] = ()
    # a failure while running raises (strict, fallback=False, or backends= names this backend)
    raises: bool = False

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.spec.inputs

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.spec.outputs

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "backend": self.backend,
            "nodes": len(self.nodes),
            "node_names": list(self.nodes),
            "inputs": list(self.spec.inputs),
            "outputs": list(self.spec.outputs),
            "constants": sorted(self.spec.constants),
            "dynamic": {k: sorted(v) for k, v in self.spec.dynamic.items()},
            "note": self.note,
        }

    def step(self, slot_of: Mapping[str, int]) -> Step:
        """The plan's step: the compiled partition, checked and guarded (opcore.graph.partition_guard)."""
        from opcore.graph.partition_guard import partition_call

        return Step(
            partition_call(self),
            tuple(Slot(slot_of[n]) for n in (*self.spec.inputs, *self.sizes)),
            tuple(slot_of[n] for n in self.spec.outputs),
        )

    def where(self) -> str:
        """``partition p0 on openvino (nodes embedding .. layer_norm_4, 56 nodes)``, for its run's errors."""
        first, last, count = (self.nodes[0], self.nodes[-1], len(self.nodes)) if self.nodes else ("", "", 0)
        span = f"{first} .. {last}, " if count > 1 else f"{first}, " if count else ""
        return f"partition {self.name} on {self.backend} (nodes {span}{count} nodes)"


def record_of(
    graph: Graph, spec: PartitionSpec, backend: str, nodes: Sequence[str], compiled: CompiledPartition, note: str
) -> PartitionRecord:
    """A PartitionRecord with the sizes its outputs must have (the graph's dims, symbols as None)."""
    from opcore.graph.partition_guard import output_dims

    dims = output_dims(spec, lambda name: graph.values[name].dims or graph.meta(name).shape)
    return PartitionRecord(spec.name, backend, tuple(nodes), spec, compiled, note, dims=dims)


def run_failure(where: str, error: Unsupported) -> Unsupported:
    """The error of a partition whose runtime failed while running: ``where`` (the partition, its backend
    and node range), then the runtime's own exception in full (the backend's Unsupported cites only its
    first line).

    >>> str(run_failure("partition p0 on example (nodes a .. b, 2 nodes)", Unsupported("p0 failed: boom")))
    'partition p0 on example (nodes a .. b, 2 nodes) failed while running: Unsupported: p0 failed: boom.'
    """
    cause = error.__cause__ or error
    text = str(cause).strip() or type(cause).__name__
    return Unsupported(f"{where} failed while running: {type(cause).__name__}: {text}")


def graph_backends(options: Any) -> list[tuple[str, PartitionCompiler]]:
    """The partition compilers to use, most preferred first."""
    from opcore.runtime import runtime

    found = compilers()
    if options.backends is not None:
        return [(name, found[name]) for name in options.backends if name in found]
    registry = runtime().ensure_loaded().registry
    return sorted(found.items(), key=lambda item: -registry.backends[item[0]].priority)


def place_partitions(
    graph: Graph,
    constants: Mapping[str, Any],
    options: Any,
    example: Callable[[str], Any],
    saved: Mapping[str, Any] | None = None,
    measured: Measured | None = None,
    proof: ValueProof | None = None,
    unchecked: Mapping[str, str] | None = None,
) -> tuple[list[PartitionRecord], dict[str, Decision], dict[str, tuple[Verdict, ...]]]:
    """Group, cost and compile the partitions; return them, the decision of every node they take,
    and for the nodes a compile failure or a measurement left out, that verdict (explain shows it).

    ``saved``: partitions of a saved plan (name -> (backend, node names, load function)), taken as
    they are instead of grouped and compiled. ``measured``: time each compiled partition against
    its nodes run per node and keep the faster (else the estimated cost rule, ``pays``, decides).
    ``proof``: the plan's value ranges (opcore.graph.ranges): a graph backend that computes int64
    narrower (its compiler's ``int64_as``) may take the nodes whose values are proven to fit.
    ``unchecked``: node name -> why its indices are not proven in range (opcore.graph.bounds); such a
    node stays out of partitions, which do not check indices, and runs on its kernel, which does.
    """
    if options.device != "cpu" and not options.device.startswith("cpu"):
        return [], {}, {}  # graph runtimes take host arrays; a cuda plan runs on the cuda backend's kernels
    if saved is not None:
        return (*_restore(graph, constants, saved, example, proof), {})
    verdicts = {
        node.name: selection_verdicts(node, example, options.backends, proof, graph)
        for node in graph.nodes
        if not node.scalar
    }
    records: list[PartitionRecord] = []
    claimed: dict[str, Decision] = {}
    unchecked = unchecked or {}
    timeout = compile_timeout()
    on_kernels = sum(1 for n in graph.nodes if not n.scalar and n.op not in STATE_OPS and n.op not in FACTORIES)
    for backend, compiler in graph_backends(options):
        refused: dict[str, str] = {}
        slow: dict[str, str] = {}  # nodes of partitions measured slower than their nodes per node
        unpaid: dict[str, str] = {}  # nodes of groups the estimated cost rule (or their size) left out
        broken: dict[str, str] = {}  # every node the backend accepts, after its compiler crashed
        made: list[tuple[list[int], PartitionRecord]] = []
        compiled_once = False  # a compile of this backend succeeded: its failures are its nodes'
        try:
            # what the compiler says of each op, asked once (a raising answer is a CompilerCrash)
            answers = {op: _answers(compiler, op) for op in dict.fromkeys(n.op for n in graph.nodes if not n.scalar)}
        except CompilerCrash as crash:
            broken = _crashed(options, backend, crash, _claims(graph, backend, verdicts))
            answers = {}
        sized = {op: sizes for op, (_, sizes) in answers.items()}.__getitem__
        # nodes whose indices no range proves: their kernels check them, a partition would not
        unsafe = {
            name: f"its indices are not proven in range and a partition does not check them ({why})"
            for name, why in unchecked.items()
            if _accepts(graph, graph.nodes[_position(graph, name)], backend, answers, verdicts, compiler)
        }
        while answers:
            taken = claimed.keys() | refused.keys() | slow.keys() | unsafe.keys()
            accepted = [
                i
                for i, node in enumerate(graph.nodes)
                if node.name not in taken and _accepts(graph, node, backend, answers, verdicts, compiler)
            ]
            groups = group_acyclic(graph, accepted)
            failed = whole = False
            made = []
            unpaid.clear()
            try:
                for group in groups:
                    nodes = [graph.nodes[i] for i in group]
                    spec = make_spec(graph, group, f"p{len(records) + len(made)}", constants, sized)
                    small = large_enough(nodes)
                    boundary = len(spec.inputs) + len(spec.outputs)
                    ok, why = pays(nodes, boundary) if measured is None else (small is None, small or "")
                    if not ok:
                        reason = f"{backend} group of {len(nodes)} node{'s' * (len(nodes) != 1)} not kept: "
                        reason += f"estimated cost: {why}" if measured is None else str(why)
                        unpaid.update((n.name, reason) for n in nodes)
                        continue
                    try:
                        compiled = guarded(backend, spec.name, "compile", partial(compiler.compile, spec), timeout)
                    except CompilerCrash:
                        raise
                    except OpcoreError as error:
                        bad = _failing_node(compiler, spec, error, timeout)
                        other = None if bad or compiled_once else _other_op(graph, accepted, nodes[0].op)
                        alone = None if other is None else make_spec(graph, [other], spec.name, constants, sized)
                        common = alone and _common_failure(compiler, nodes[0].op, alone, error, timeout)
                        if common:  # no node's: the backend's nodes all go, at once
                            reason = COMPILER_FAILED.format(backend=backend, why=common)
                            refused.update((graph.nodes[i].name, reason) for i in accepted)
                            unpaid.clear()
                            whole = True
                            break
                        refused[nodes[bad].name] = f"{backend} could not compile it in a partition: {_reason(error)}"
                        failed = True
                        break
                    compiled_once = True
                    record = record_of(graph, spec, backend, [n.name for n in nodes], compiled, why)
                    if measured is not None:
                        try:
                            faster, why = _timed(measured, record, group, len(group) == on_kernels)
                        except CompilerCrash as crash:  # this partition failed on the examples: it alone
                            if raises_for(options, backend):
                                raise
                            warn_partition(backend, "at capture", crash.reason, "its nodes run on kernels")
                            reason = f"{backend} partition of {len(nodes)} nodes failed on the example inputs"
                            slow.update((n.name, f"{reason}: {crash.reason}") for n in nodes)
                            continue
                        record.note = why
                        if not faster:
                            reason = f"{backend} partition of {len(nodes)} nodes not kept: {why}"
                            slow.update((n.name, reason) for n in nodes)
                            continue
                    made.append((group, record))
            except CompilerCrash as crash:
                broken = _crashed(options, backend, crash, [graph.nodes[i].name for i in accepted])
                made, refused, slow, unpaid = [], {}, {}, {}
                break
            if whole or not failed:
                break
        for group, record in made:
            if any(name in refused for name in record.nodes):
                continue
            records.append(record)
            for i in group:
                node = graph.nodes[i]
                claimed[node.name] = _claimed(node, record, verdicts[node.name])
        if refused:
            for record in records:
                if record.backend == backend:
                    record.note += "; left out after a compile failure: " + ", ".join(sorted(refused))
        rows = (*refused.items(), *slow.items(), *unsafe.items(), *unpaid.items(), *broken.items())
        for name, reason in rows:
            if name in claimed:
                continue
            verdicts[name] = (*verdicts[name], Verdict(backend, "declined", reason, f"{backend} partition"))
    refusals = {
        name: tuple(v for v in rows if v.kernel.endswith(" partition"))
        for name, rows in verdicts.items()
        if name not in claimed and any(v.kernel.endswith(" partition") for v in rows)
    }
    return records, claimed, refusals


def _position(graph: Graph, name: str) -> int:
    return next(i for i, node in enumerate(graph.nodes) if node.name == name)


def _claimed(node: Node, record: PartitionRecord, verdicts: tuple[Verdict, ...]) -> Decision:
    rows = tuple(
        Verdict(v.backend, "partition", "", f"{v.backend} partition {record.name}")
        if v.backend == record.backend and v.status in ("chosen", "fallback", PARTITION_ONLY)
        else Verdict(v.backend, "fallback", v.reason, v.kernel)
        if v.status == "chosen"
        else v
        for v in verdicts
    )
    return Decision(node.name, node.op, record.backend, f"{record.backend} partition", "", record.name, rows)


def _answers(compiler: PartitionCompiler, op: str) -> tuple[bool, bool]:
    """(supports, takes_sizes) of ``op``; a CompilerCrash where the compiler's answer raises."""
    return answer(compiler, "supports", op), takes_sizes(compiler, op)


def _claims(graph: Graph, backend: str, verdicts: Mapping[str, tuple[Verdict, ...]]) -> list[str]:
    """The nodes one of ``backend``'s kernels would take (those its partitions could have held)."""
    return [node.name for node in graph.nodes if not node.scalar and _kernel_takes(backend, verdicts[node.name])]


def _kernel_takes(backend: str, verdicts: tuple[Verdict, ...]) -> bool:
    return any(v.backend == backend and v.status in ("chosen", "fallback", PARTITION_ONLY) for v in verdicts)


def _crashed(options: Any, backend: str, crash: CompilerCrash, nodes: Sequence[str]) -> dict[str, str]:
    """A compiler that crashed (its compile, or its answer to supports/takes_sizes): raised where the
    plan is strict or pinned to ``backend``; else one warning, and the reason for each of ``nodes``."""
    if raises_for(options, backend):
        raise crash
    warn_partition(backend, "at capture", crash.reason, "its nodes run on kernels")
    return dict.fromkeys(nodes, COMPILER_FAILED.format(backend=backend, why=crash.reason))


# the reason on each node of a backend whose compiler failed for the whole graph (it crashed, or its
# every compile fails: _common_failure); explain says it once, on its first lines, not only per node
COMPILER_FAILED = "{backend}'s partition compiler failed, no partition of it is used: {why}"


def _accepts(
    graph: Graph,
    node: Node,
    backend: str,
    answers: Mapping[str, tuple[bool, bool]],
    verdicts: Mapping[str, tuple[Verdict, ...]],
    compiler: PartitionCompiler,
) -> bool:
    supports, sizes = answers.get(node.op, (False, False))
    if node.scalar or not supports:
        return False
    if not _kernel_takes(backend, verdicts[node.name]):
        return False
    if any(graph.values[o].meta is None for o in node.outputs):
        return False
    if getattr(compiler, "bfloat16_as", None) is None and has_bfloat16(graph, node):
        return False  # a runtime without bfloat16_as is never given a bfloat16 value
    return part_args(graph, node, sizes) is not None


def takes_sizes(compiler: Any, op: str) -> bool:
    """Whether ``compiler`` builds ``op`` with sizes computed at run time among its arguments (its
    optional ``takes_sizes(op)``; a compiler without it never gets them). A CompilerCrash where
    its answer raises."""
    return answer(compiler, "takes_sizes", op)


def part_args(graph: Graph, node: Node, sizes: bool = False) -> tuple[Any, ...] | None:
    """The node's arguments for a PartNode. Sizes computed at run time (a dynamic dim's size and the
    arithmetic on it) stay references where the compiler takes them for this op (``sizes``): the
    partition gets them as 0-D int64 inputs. Otherwise they are not allowed, except a reshape's one
    dynamic size, which becomes -1 (the same shape, inferred by the runtime)."""
    args = list(node.args)
    for i, value in enumerate(args):
        found = [r for r in refs_in(value) if graph.values[r.name].meta is None]
        if not found or sizes:
            continue
        if node.op == "reshape" and len(found) == 1 and isinstance(value, tuple) and -1 not in value:
            args[i] = tuple(-1 if isinstance(v, ValueRef) else v for v in value)
        else:
            return None
    return tuple(args)


def group_acyclic(graph: Graph, accepted: Sequence[int]) -> list[list[int]]:
    """Accepted nodes merged along data edges into groups that never form a cycle with the rest.

    A group with a path leaving it and coming back (through a node outside) cannot run as one step;
    each node joins the groups of its producers when the union stays free of such paths.
    """
    producer = {o: i for i, node in enumerate(graph.nodes) for o in node.outputs}
    ancestors: list[int] = []  # bitset of every node each node depends on
    for node in graph.nodes:
        bits = 0
        for name in node.refs():
            p = producer.get(name)
            if p is not None:
                bits |= ancestors[p] | (1 << p)
        ancestors.append(bits)
    wanted = set(accepted)
    group_of: dict[int, int] = {}
    groups: dict[int, int] = {}  # group id -> bitset of its nodes
    upstream: dict[int, int] = {}  # group id -> bitset of every node its nodes depend on
    next_id = 0
    for i in sorted(wanted):
        near = sorted(
            {group_of[p] for name in graph.nodes[i].refs() if (p := producer.get(name)) is not None and p in group_of},
            key=lambda g: -bin(groups[g]).count("1"),
        )
        mine, above = 1 << i, ancestors[i]
        target = None
        if near and _acyclic(groups_union(groups, near) | mine, groups_union(upstream, near) | above, ancestors):
            target = near
        else:
            for g in near:
                if _acyclic(groups[g] | mine, upstream[g] | above, ancestors):
                    target = [g]
                    break
        if target is None:
            groups[next_id], upstream[next_id] = mine, above
            group_of[i] = next_id
            next_id += 1
            continue
        keep = target[0]
        for g in target[1:]:
            merged = groups.pop(g)
            groups[keep] |= merged
            upstream[keep] |= upstream.pop(g)
            for j in _members(merged):
                group_of[j] = keep
        groups[keep] |= mine
        upstream[keep] |= above
        group_of[i] = keep
    return [list(_members(bits)) for bits in groups.values()]


def groups_union(groups: Mapping[int, int], ids: Sequence[int]) -> int:
    bits = 0
    for g in ids:
        bits |= groups[g]
    return bits


def _members(bits: int) -> Iterator[int]:
    """The indices of the set bits of ``bits``, lowest first (a step a member, not a bit)."""
    while bits:
        low = bits & -bits
        yield low.bit_length() - 1
        bits ^= low


def _acyclic(members: int, upstream: int, ancestors: Sequence[int]) -> bool:
    """No node outside ``members`` both depends on a member and is depended on by one. ``upstream``:
    every node a member depends on (the union of their ``ancestors``, kept per group as it grows: a
    walk over a 1,500-node group's members for each node it took was ~1 s of a 135M decoder's capture)."""
    return not any(ancestors[j] & members for j in _members(upstream & ~members))


def make_spec(
    graph: Graph, group: Sequence[int], name: str, constants: Mapping[str, Any], sizes: Callable[[str], bool]
) -> PartitionSpec:
    """The PartitionSpec of the nodes ``group`` (indices, topological order), for a compiler that takes
    sizes computed at run time for the ops ``sizes(op)`` says (its ``takes_sizes``, asked where the
    plan groups nodes; such a size is an input of meta ``SIZE``)."""
    nodes = [graph.nodes[i] for i in group]
    inside = {o for node in nodes for o in node.outputs}
    users = graph.users()
    members = set(group)
    graph_outputs = graph.output_names()
    inputs: list[str] = []
    used_constants: list[str] = []
    part_nodes = []
    for node in nodes:
        args = part_args(graph, node, sizes(node.op))
        if args is None:
            raise ValueError(f"node {node.name} reads sizes computed at run time")
        part_nodes.append(PartNode(node.op, args, node.outputs))
        for ref in refs_in(args):
            name_ = ref.name
            if name_ in inside:
                continue
            bucket = used_constants if name_ in constants else inputs
            if name_ not in bucket:
                bucket.append(name_)
    outputs = tuple(
        o
        for node in nodes
        for o in node.outputs
        if o in graph_outputs or any(u not in members for u in users.get(o, ()))
    )
    metas = {n: _meta(graph, n) for n in (*inputs, *used_constants, *inside)}
    dynamic = {n: graph.values[n].dynamic_axes for n in inputs if graph.values[n].dynamic_axes}
    return PartitionSpec(
        name=name,
        nodes=tuple(part_nodes),
        inputs=tuple(inputs),
        constants={n: _host_array(constants[n]) for n in used_constants},
        outputs=outputs,
        metas=metas,
        dynamic=dynamic,
        sizes={n: _dims(graph, n) for n in inside if graph.values[n].dynamic_axes},
    )


# the meta of a size computed at run time, as a partition's input: a 0-D int64 array fed per call
SIZE = TensorMeta((), DType.INT64)


def _dims(graph: Graph, name: str) -> tuple[int | None, ...]:
    return tuple(d if isinstance(d, int) else None for d in graph.values[name].dims)


def _meta(graph: Graph, name: str) -> TensorMeta:
    found = graph.values[name].meta
    return SIZE if found is None else found


def _host_array(tensor: Any) -> Any:
    return host_array(tensor.detach().cpu())


def _reason(error: Exception) -> str:
    reason = getattr(error, "reason", None)
    return str(reason if reason else error).split(" Fix: ")[0]


def _timed(measured: Measured, record: PartitionRecord, group: Sequence[int], whole: bool) -> tuple[bool, str]:
    """``measured.partition``, its first run of the compiled partition checked (partition_guard): a
    partition that fails or breaks its spec on the example inputs raises CompilerCrash.

    A partition of every node the plan would run on kernels (``whole``: the plan is that partition
    and its Python steps) is run once, not timed against its nodes per node: the plan's guard
    (opcore.graph.assembly) times the plan against the torch route, as one step and node by node,
    and runs the faster. (Unlike a partition that lost to its nodes, one that loses there is not
    followed by the next graph runtime's partitions; capture_lm times each runtime alone.) Building
    and timing the per-node side of a 1,566-node decode step (a 135M decoder) took ~1.1-1.5 s of
    its capture."""
    if whole:
        measured.check(record)  # record.fallback is None yet: a failure raises
        return True, WHOLE
    return measured.partition(record, group)


# the note of a partition holding every node the plan runs on kernels (_timed)
WHOLE = "holds every node the plan runs on kernels: timed as the plan, against the torch route"


def _failing_node(compiler: PartitionCompiler, spec: PartitionSpec, error: Exception, timeout: float | None) -> int:
    """The index of the node that broke the compile: the compiler's word, else the shortest prefix
    that fails (bisected: log2(n) compiles)."""
    node = getattr(error, "node", None)
    if isinstance(node, int) and 0 <= node < len(spec.nodes):
        return node
    good, bad = 0, len(spec.nodes)  # prefix of `good` nodes compiles; of `bad` nodes fails
    while bad - good > 1:
        middle = (good + bad) // 2
        part = spec.prefix(middle)
        try:
            guarded(compiler.backend, part.name, "compile", partial(compiler.compile, part), timeout)
            good = middle
        except CompilerCrash:
            raise
        except OpcoreError:
            bad = middle
    return bad - 1


def _other_op(graph: Graph, accepted: Sequence[int], op: str) -> int | None:
    """The last accepted node whose op is not ``op`` (None: there is none), compiled alone where a
    node of ``op`` failed alone: a failure both share is no node's."""
    return next((i for i in reversed(accepted) if graph.nodes[i].op != op), None)


def _common_failure(
    compiler: PartitionCompiler, op: str, alone: PartitionSpec, error: Exception, timeout: float | None
) -> str | None:
    """Why no partition compiles, where ``alone`` (one node of another op than ``op``, whose node
    failed alone with ``error``) fails the same way: the same exception type and reason. Then every
    compile fails (an option the runtime rejects, a setting with a bad value), and refusing the nodes
    one by one would cost a compile and a bisection each (53 compiles for 16 nodes, the plan all on
    kernels) and tell explain's first lines nothing. None where ``alone`` compiles or fails otherwise:
    two ops a runtime refuses in its own words each (``no rule for mul``) are refused one by one."""
    try:
        guarded(compiler.backend, alone.name, "compile", partial(compiler.compile, alone), timeout)
    except CompilerCrash:
        raise
    except OpcoreError as other:
        if type(other) is type(error) and _reason(other) == _reason(error):
            return f"every compile fails ({op} alone and {alone.nodes[0].op} alone alike): {_reason(error)}"
    return None


def order_units(graph: Graph, partitions: Sequence[PartitionRecord]) -> list[int | PartitionRecord]:
    """Node indices and partitions in an order that respects every data edge: a stable topological
    sort in which each partition is one unit."""
    owner: dict[str, Any] = {}  # value name -> the unit producing it: a node index or a partition name
    members: dict[str, PartitionRecord] = {}
    for partition in partitions:
        for name in partition.nodes:
            members[name] = partition
    units: list[Any] = []
    for i, node in enumerate(graph.nodes):
        record = members.get(node.name)
        key = record.name if record is not None else i
        if record is None or key not in units:
            units.append(key)
        for o in node.outputs:
            owner[o] = key
    needs: dict[Any, set[Any]] = {key: set() for key in units}
    for i, node in enumerate(graph.nodes):
        record = members.get(node.name)
        key = record.name if record is not None else i
        for ref in node.refs():
            source = owner.get(ref)
            if source is not None and source != key:
                needs[key].add(source)
    by_name = {record.name: record for record in partitions}
    placed: list[int | PartitionRecord] = []
    done: set[Any] = set()
    pending = list(units)
    while pending:
        for key in pending:
            if needs[key] <= done:
                placed.append(by_name[key] if isinstance(key, str) else key)
                done.add(key)
                pending.remove(key)
                break
        else:  # group_acyclic never makes one; a hand-edited plan file could
            raise RuntimeError("opcore.graph: the partitions depend on each other in a cycle")
    return placed


def _restore(
    graph: Graph,
    constants: Mapping[str, Any],
    saved: Mapping[str, Any],
    example: Callable[[str], Any],
    proof: ValueProof | None,
) -> tuple[list[PartitionRecord], dict[str, Decision]]:
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    records: list[PartitionRecord] = []
    claimed: dict[str, Decision] = {}
    for name, (backend, node_names, bring_back, note) in saved.items():
        group = [index[n] for n in node_names]
        spec = make_spec(graph, group, name, constants, partial(takes_sizes, compilers().get(backend)))
        compiled = bring_back(spec)
        if compiled is None:  # its compiler failed to load and to compile it: its nodes run on kernels
            continue
        record = record_of(graph, spec, backend, node_names, compiled, note)
        records.append(record)
        for i in group:
            node = graph.nodes[i]
            claimed[node.name] = _claimed(node, record, selection_verdicts(node, example, None, proof, graph))
    return records, claimed
