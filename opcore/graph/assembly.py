"""Building a plan: every node of a captured graph decided (kernels ranked, partitions placed and, where
asked, measured against the torch route), and the program that runs them.

>>> plan = assemble(graph, constants, PlanOptions())      # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from opcore.graph.errors import UncoveredError
from opcore.graph.exported import exported_program, one_step
from opcore.graph.ir import Graph, Node, ValueRef
from opcore.graph.measuring import Measured, Timer
from opcore.graph.options import PlanOptions, torch_route
from opcore.graph.plan import Plan
from opcore.graph.planner import Decision, NodeCall, example_tensors, plan_node, scalar_call
from opcore.graph.ranges import ValueProof, declared_sizes, value_ranges
from opcore.graph.runner import Program, Step, slot_template
from opcore.shape_compiles import shape_compiles
from opcore.weight_copies import weight_copies

if TYPE_CHECKING:
    from opcore.graph.exported import ExportedStep

__all__ = ["assemble", "build_program", "nodes_program", "outside_sizes"]


def assemble(
    graph: Graph,
    constants: Mapping[str, Any],
    options: PlanOptions,
    notes: Mapping[str, str] | None = None,
    saved: Mapping[str, Any] | None = None,
    *,
    examples: Sequence[Any] | None = None,
    timer: Timer | None = None,
    exported: ExportedStep | None = None,
) -> Plan:
    """Decide every node of ``graph`` and build the program that runs them.

    ``notes``: per node, why it is an ATen fallback; ``saved``: partitions of a saved plan to load
    instead of compiling (opcore.graph.load). ``examples`` (the flat runtime inputs) and ``timer``:
    measure at plan time (see opcore.graph.measuring): partitions are kept where they are faster
    than their nodes per node, and the plan runs the torch route where that is faster than it.
    ``exported``: the exported program (capture has it, a loaded plan not): the torch route runs
    it as one step, and the guard times that. The kernels prepare their constants under
    ``options.weight_copies`` (opcore.weight_copies), the partitions compile or load under
    ``options.shape_compiles`` (opcore.shape_compiles).
    """
    with weight_copies(options.weight_copies), shape_compiles(options.shape_compiles):
        return _assembled(graph, constants, options, notes, saved, examples, timer, exported)


def _assembled(
    graph: Graph,
    constants: Mapping[str, Any],
    options: PlanOptions,
    notes: Mapping[str, str] | None,
    saved: Mapping[str, Any] | None,
    examples: Sequence[Any] | None,
    timer: Timer | None,
    exported: ExportedStep | None,
) -> Plan:
    if options.route == "torch":
        plan = _assemble(graph, constants, torch_route(options), notes)
        plan.options = options
        return one_step(plan, exported)
    route: Plan | None = None
    measured: Measured | None = None
    told: list[str] = []
    if examples is not None and timer is not None and _guarded(options):
        route = _assemble(graph, constants, torch_route(options), notes)
        measured, why = _measure_on(graph, constants, options, route, examples, timer)
        if measured is None:
            route = None
            told.append(f"not measured, the estimated cost rule decided: {why}")
    elif examples is not None and timer is not None and options.partitions and saved is None:
        told.append(f"not measured: {_unguarded_why(options)}; the estimated cost rule kept or left out partitions")
    plan = _assemble(graph, constants, options, notes, saved, measured)
    plan.notes[:0] = told
    if measured is None or route is None:
        return plan
    differs = _differs(plan, route)
    if exported is None and not differs:  # the plan is the torch route: nothing else to run
        return plan
    # the torch route as it runs (the exported program in one step), and node by node where that is
    # not this plan itself (the torch backend's kernels pack weights: it can beat eager)
    cases = {"this plan": plan.program}
    if exported is not None:
        cases["the torch route"] = exported_program(graph, exported, constants)
    if differs:
        cases["the torch route node by node" if exported is not None else "the torch route"] = route.program
    chosen, story = measured.fastest(cases, "the torch route", graph.inputs)
    if chosen == "this plan":
        plan.notes.insert(0, f"guard: {story}: runs this plan")
        return plan
    summary = plan.summary()
    route.options = replace(options, route="torch")
    if chosen == "the torch route" and exported is not None:
        one_step(route, exported)
        how = "the exported program, run by torch as one step"
    else:
        how = f"node by node, every node on {route.options.device}'s torch backend"
    route.notes[:0] = [f"guard: {story}: runs the torch route ({how}), not the plan it measured ({summary})"]
    return route


def _guarded(options: PlanOptions) -> bool:
    """Whether the torch route may replace the plan: a host plan whose requested backends include the
    torch one, with fallback allowed (a plan pinned to other backends keeps what was asked for)."""
    host = options.device == "cpu" or options.device.startswith("cpu")
    allowed = options.backends is None or "cpu" in options.backends
    return host and allowed and options.fallback and not _strict()


def _unguarded_why(options: PlanOptions) -> str:
    """Why ``_guarded`` said no, for the plan's note."""
    if not (options.device == "cpu" or options.device.startswith("cpu")):
        return f"a plan on {options.device} (graph runtimes take host arrays)"
    if options.backends is not None and "cpu" not in options.backends:
        return f"pinned backends ({', '.join(options.backends)}): the plan keeps what was asked for"
    if not options.fallback:
        return "fallback=False: the plan keeps what was asked for"
    return "opcore.strict(): the plan keeps what was asked for"


def _strict() -> bool:
    """Whether opcore.strict() (or OPCORE_STRICT) is in force: every node must run where it was asked to."""
    from opcore.graph.partition_guard import strict_in_force

    return strict_in_force()


def _measure_on(
    graph: Graph,
    constants: Mapping[str, Any],
    options: PlanOptions,
    route: Plan,
    examples: Sequence[Any],
    timer: Timer,
) -> tuple[Measured | None, str]:
    """Every value of the graph on the example inputs (run through the torch route), and how to build
    the programs a partition is timed as; None and why when the route cannot run the examples."""
    from opcore.graph.partitioning import PartitionRecord

    try:
        slots = route.program.run(examples, keep=True)
    except Exception as error:
        return None, f"the torch route failed on the example inputs ({type(error).__name__}: {_first(error)})"
    values = {name: slots[i] for name, i in route.program.slot_of.items()}
    example = example_tensors(graph, constants)
    index = {node.name: i for i, node in enumerate(graph.nodes)}

    def alone(record: PartitionRecord) -> Program:
        group = [index[name] for name in record.nodes]
        nothing: list[NodeCall | None] = [None] * len(graph.nodes)
        return build_program(graph, [record], nothing, constants, record.inputs, record.outputs, group)

    def per_node(group: Sequence[int], inputs: Sequence[str], outputs: Sequence[str]) -> Any:
        program, sizes = nodes_program(graph, group, constants, options, example, inputs, outputs)
        return SizesFed(program, [values[name] for name in sizes]) if sizes else program

    return Measured(values, timer, alone, per_node), ""


def nodes_program(
    graph: Graph,
    group: Sequence[int],
    constants: Mapping[str, Any],
    options: PlanOptions,
    example: Any,
    inputs: Sequence[str],
    outputs: Sequence[str],
) -> tuple[Program, list[str]]:
    """The nodes ``group`` run per node on their ranked kernels, from ``inputs`` then the sizes they
    read besides (returned second: computed before the group, a sym_size of layer 0 read in layer 1,
    which a partition has built in) to ``outputs``."""
    allowed = frozenset(options.backends) if options.backends else None
    calls: list[NodeCall | None] = [None] * len(graph.nodes)
    for i in group:
        node = graph.nodes[i]
        calls[i] = (
            scalar_call(node)
            if node.scalar
            else plan_node(graph, node, example, order=options.backends, allowed=allowed, fallback=True)
        )
    sizes = outside_sizes(graph, group, inputs)
    return build_program(graph, list(group), calls, constants, [*inputs, *sizes], outputs, group), sizes


def _per_node_route(graph: Graph, record: Any, constants: Mapping[str, Any], options: PlanOptions, example: Any) -> Any:
    """Attach to partition ``record`` the per-node route of its nodes (made when first needed: its
    compiled partition failed while running) and whether such a failure raises instead."""
    from opcore.graph.partition_guard import raises_for

    index = {node.name: i for i, node in enumerate(graph.nodes)}
    group = [index[name] for name in record.nodes]
    record.sizes = tuple(outside_sizes(graph, group, record.inputs))
    record.raises = raises_for(options, record.backend)

    def fallback() -> Any:
        with weight_copies(options.weight_copies):  # made when first needed, long after assemble
            program, _ = nodes_program(graph, group, constants, options, example, record.inputs, record.outputs)
        single = len(record.outputs) == 1

        def run(*tensors: Any) -> Any:
            found = program.run(list(tensors))
            return found[0] if single else tuple(found)

        return run

    record.fallback = fallback
    return record


def outside_sizes(graph: Graph, group: Sequence[int], inputs: Sequence[str]) -> list[str]:
    """The scalars (sizes computed at run time) that the nodes ``group`` read and neither compute nor
    take among ``inputs``."""
    produced = {o for i in group for o in graph.nodes[i].outputs}
    given = set(inputs) | set(graph.constants) | produced
    found: dict[str, None] = {}
    for i in group:
        for name in graph.nodes[i].refs():
            if name not in given and graph.values[name].meta is None:
                found[name] = None
    return list(found)


class SizesFed:
    """A program run on its first inputs, the sizes it also reads appended as measured at capture."""

    __slots__ = ("program", "sizes")

    def __init__(self, program: Program, sizes: Sequence[Any]) -> None:
        self.program, self.sizes = program, list(sizes)

    def run(self, flat_inputs: Sequence[Any]) -> list[Any]:
        return self.program.run([*flat_inputs, *self.sizes])


def _first(error: Exception) -> str:
    return (str(error).strip().splitlines() or [""])[0][:160]


def _differs(plan: Plan, route: Plan) -> bool:
    """Whether the plan runs anything otherwise than the torch route does."""
    if plan.partitions:
        return True
    return any((a.backend, a.kernel) != (b.backend, b.kernel) for a, b in zip(plan.decisions, route.decisions))


def _assemble(
    graph: Graph,
    constants: Mapping[str, Any],
    options: PlanOptions,
    notes: Mapping[str, str] | None = None,
    saved: Mapping[str, Any] | None = None,
    measured: Measured | None = None,
) -> Plan:
    from opcore.runtime import runtime

    rt = runtime().ensure_loaded()
    strict_context = _strict()
    fallback = options.fallback and not strict_context
    allowed = frozenset(options.backends) if options.backends else None
    if options.backends:
        from opcore.kernel_walk import check_named

        check_named(rt, options.backends, "opcore.graph.capture(backends=...)")
    notes = notes or {}
    example = example_tensors(graph, constants)
    proof = _proof(graph, constants, options)
    partitions: Sequence[Any] = ()
    unchecked: Mapping[str, str] = {}
    claimed: Mapping[str, Decision] = {}
    refusals: Mapping[str, Any] = {}
    if options.partitions:
        from opcore.graph.bounds import index_bounds
        from opcore.graph.partitioning import place_partitions

        unchecked = index_bounds(graph, constants).unchecked
        partitions, claimed, refusals = place_partitions(
            graph, constants, options, example, saved, measured, proof, unchecked
        )
    for record in partitions:
        _per_node_route(graph, record, constants, options, example)
    calls: list[NodeCall | None] = []
    for node in graph.nodes:
        if node.name in claimed:
            calls.append(None)
        elif node.scalar:
            calls.append(scalar_call(node))
        else:
            calls.append(
                plan_node(
                    graph, node, example, order=options.backends, allowed=allowed, fallback=fallback,
                    note=notes.get(node.name, ""), extra=refusals.get(node.name, ()), proof=proof,
                )
            )  # fmt: skip
    uncovered = [(node, call) for node, call in zip(graph.nodes, calls) if call is not None and call.fn is None]
    if uncovered:
        raise _uncovered(uncovered, options, strict_context)
    decisions = [call.decision if call is not None else claimed[node.name] for node, call in zip(graph.nodes, calls)]
    if partitions:
        from opcore.graph.partitioning import order_units

        units: Sequence[Any] = order_units(graph, partitions)
    else:
        units = range(len(graph.nodes))
    program = build_program(graph, units, calls, constants, graph.inputs, graph.outputs)
    plan = Plan(graph, decisions, program, constants, options, partitions, assembler=_assemble)
    inside = sorted(name for name in unchecked if name in claimed)  # a saved plan's partitions, as saved
    if inside:
        plan.notes.append(
            f"indices not checked: {', '.join(inside)} run inside a saved partition, which does not check their "
            "indices and no value range proves them (opcore.graph.bounds); capture the model again"
        )
    return plan


def _proof(graph: Graph, constants: Mapping[str, Any], options: PlanOptions) -> ValueProof | None:
    """The value ranges of the plan's integer tensors, for the graph backends that compute int64 in a
    narrower dtype (their partition compiler's ``int64_as``), and who computes bfloat16 in what
    (``bfloat16_as``); None when no graph backend has either."""
    if not (options.device == "cpu" or options.device.startswith("cpu")):  # graph runtimes take host arrays
        return None
    from opcore.graph.partition import compilers
    from opcore.types import DType

    found = compilers()
    narrowing = {
        name: DType.parse(dtype) for name, c in found.items() if (dtype := getattr(c, "int64_as", None)) is not None
    }
    widening = {
        name: DType.parse(dtype) for name, c in found.items() if (dtype := getattr(c, "bfloat16_as", None)) is not None
    }
    if not narrowing and not widening:
        return None
    return ValueProof(value_ranges(graph, constants, sizes=declared_sizes(graph)), narrowing, widening)


def _uncovered(uncovered: list[tuple[Node, NodeCall]], options: PlanOptions, strict_context: bool) -> UncoveredError:
    wanted = ", ".join(options.backends) if options.backends else "the ranked backends"
    mode = "fallback=False" if not options.fallback else "opcore.strict()" if strict_context else "planning"
    lines = [f"{len(uncovered)} node(s) not covered by {wanted} ({mode}):"]
    for node, call in uncovered:
        lines.append(f"  - {node.name}: {node.op}: {call.uncovered}")
    fix = "add a backend to backends=, or allow fallback=True so the ranked kernels take these nodes"
    return UncoveredError("\n".join(lines), op="opcore.graph.capture", fix=fix)


def build_program(
    graph: Graph,
    units: Sequence[Any],
    calls: Sequence[NodeCall | None],
    constants: Mapping[str, Any],
    inputs: Sequence[str],
    outputs: Sequence[Any],
    members: Sequence[int] | None = None,
) -> Program:
    """The program running ``units`` (node indices, run by ``calls[i]``, and partition records) from
    the values ``inputs`` to ``outputs`` (names or ValueRefs, or constants as the graph's outputs are).
    ``members``: the indices of the nodes whose outputs get slots (None: every node)."""
    produced = (o for i in (range(len(graph.nodes)) if members is None else members) for o in graph.nodes[i].outputs)
    names = [*inputs, *graph.constants, *produced]
    slot_of = {name: i for i, name in enumerate(names)}
    base: list[Any] = [None] * len(names)
    for name in graph.constants:
        base[slot_of[name]] = constants[name]
    steps: list[Step] = []
    for unit in units:
        if isinstance(unit, int):
            call = calls[unit]
            node = graph.nodes[unit]
            if call is None or call.fn is None:  # claimed nodes come as partitions, uncovered ones raised
                raise RuntimeError(f"opcore.graph: node {node.name} has no call")
            steps.append(Step(call.fn, slot_template(call.args, slot_of), tuple(slot_of[o] for o in node.outputs)))
        else:
            steps.append(unit.step(slot_of))
    wanted = [ValueRef(o) if isinstance(o, str) else o for o in outputs]
    return Program(slot_of, base, steps, [slot_of[n] for n in inputs], wanted)
