"""A plan: a captured graph with every node decided, ready to run, explain, verify and save.

>>> plan = opcore.graph.capture(model, (x,))     # doctest: +SKIP
>>> y = plan(x)                                  # doctest: +SKIP
>>> print(plan.explain())                        # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from opcore.graph.errors import UncoveredError
from opcore.graph.ir import Graph, Node, ValueRef
from opcore.graph.measuring import Measured, Timer
from opcore.graph.planner import Decision, NodeCall, example_tensors, plan_node, scalar_call
from opcore.graph.ranges import ValueProof, declared_sizes, value_ranges
from opcore.graph.runner import Program, Step, slot_template
from opcore.types import Device

if TYPE_CHECKING:
    from opcore.graph.exported import ExportedStep
    from opcore.graph.signature import InputCheck
    from opcore.torchkit.watch import TensorWatch

__all__ = ["Plan", "PlanOptions", "assemble", "torch_route"]


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """How a plan was asked for. backends None: every loaded backend by rank; fallback False: every
    node must run on one of ``backends`` (or, without backends, on its op's first choice).
    route "torch": measuring at capture found the torch route faster than the planned one (or
    ``capture(route="torch")`` asked for it), so the plan runs the torch route: the exported
    program as one step where the plan has it (opcore.graph.exported), else every node on the
    torch backend (``torch_route``); "planned": as decided."""

    backends: tuple[str, ...] | None = None
    fallback: bool = True
    device: str = "cpu"
    partitions: bool = True
    rewrites: bool = True
    cuda_graph: bool = False
    route: str = "planned"


def torch_route(options: PlanOptions) -> PlanOptions:
    """The options of the same graph run as eager PyTorch runs it: every node on the torch backend of
    the plan's device (the ranked rest only for what it declines), no partitions. verify compares
    against it; the capture-time guard times the plan against it."""
    torch_backend = "cuda" if options.device.startswith("cuda") else "cpu"
    return PlanOptions(
        backends=(torch_backend,), fallback=True, device=options.device, partitions=False, rewrites=options.rewrites
    )


@dataclass(slots=True)
class Timings:
    """Seconds spent: capture (torch.export and lowering), plan (deciding, preparing, compiling), load."""

    capture: float = 0.0
    plan: float = 0.0
    load: float = 0.0


class Plan:
    """A captured model, decided once. Call it as the model: ``plan(*inputs)`` returns what the model
    returns (same structure), computed by the kernels and partitions chosen at plan time.
    """

    def __init__(
        self,
        graph: Graph,
        decisions: Sequence[Decision],
        program: Program,
        constants: Mapping[str, Any],
        options: PlanOptions,
        partitions: Sequence[Any] = (),
        notes: Sequence[str] = (),
    ) -> None:
        self.graph = graph
        self.decisions = tuple(decisions)
        self.program = program
        self.constants = dict(constants)
        self.options = options
        self.partitions = tuple(partitions)
        self.notes = list(notes)  # plan-level events: rewrites applied, recompiles after load, ...
        self.timings = Timings()
        # a loaded plan: the fingerprint fields (opcore.graph.files.fingerprint) in which this process
        # differs from the saving one, its partitions compiled again from their portable files; () when
        # none differ, or the plan was captured here
        self.fingerprint_changes: tuple[str, ...] = ()
        self._specs: tuple[Any, Any] | None = None
        self._plain: tuple[int, type] | None = None  # see _plain_call
        self._plain_out: int | None = None  # see _returns_plainly
        self._inputs: InputCheck | None = None  # the call's checks (opcore.graph.signature), made on first call
        self._replay: Any = None  # a CUDA graph replay (device="cuda", static shapes), made on first call
        # the exported program this plan runs as its one step (the torch route of a captured plan);
        # None: the program runs the decided steps (a loaded plan's torch route too, node by node)
        self.exported: ExportedStep | None = None
        # the model's parameters and buffers the constants were taken from, as they were then:
        # compared before every call (a change refreshes the plan); None: a loaded plan (frozen)
        self.watch: TensorWatch | None = None
        self.refreshes = 0  # how often the plan took its weights again (opcore.graph.weights)

    @property
    def device(self) -> Device:
        return Device.parse(self.options.device)

    def _trees(self) -> tuple[Any, Any]:
        if self._specs is None:
            from torch.utils import _pytree

            self._specs = (
                _pytree.treespec_loads(self.graph.in_spec) if self.graph.in_spec else None,
                _pytree.treespec_loads(self.graph.out_spec) if self.graph.out_spec else None,
            )
        return self._specs

    def _plain_call(self) -> tuple[int, type]:
        """(n, torch.Tensor) when the model was captured with n positional tensors and nothing else
        (no keywords, no nesting, no values torch.export baked in), else (-1, torch.Tensor): a call
        of n tensors then is its own flat input list, without the pytree walk (~30 us a call)."""
        if self._plain is None:
            import torch
            from torch.utils import _pytree

            count, expected = len(self.graph.inputs), self._trees()[0]
            plain = not self.graph.fixed_inputs and expected == _pytree.tree_flatten(((0,) * count, {}))[1]
            self._plain = (count if plain else -1, torch.Tensor)
        return self._plain

    def flatten(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any]:
        """The runtime inputs in graph order, from the model's call arguments, checked against the
        captured signature (opcore.graph.signature: dtypes, devices, sizes, index bounds)."""
        check = self._inputs
        if check is None:
            from opcore.graph.signature import InputCheck

            check = self._inputs = InputCheck(self.graph, self.constants)
        count, tensor = self._plain_call()
        if len(args) == count and not kwargs and all(isinstance(a, tensor) for a in args):
            return check(list(args))  # a tensor is a pytree leaf: the walk below would give the same list
        return check(self._flat(args, kwargs))

    def _flat(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any]:
        from torch.utils import _pytree

        flat, spec = _pytree.tree_flatten((tuple(args), dict(kwargs)))
        expected = self._trees()[0]
        fixed = self.graph.fixed_inputs
        wanted = len(self.graph.inputs) + len(fixed)
        if len(flat) != wanted or (expected is not None and spec != expected):
            from opcore.errors import ArgumentError
            from opcore.graph.signature import describe_call

            raise ArgumentError(
                op="Plan",
                arg="inputs",
                expected=f"the structure the model was captured with: {describe_call(self.graph)} ({wanted} values)",
                found=f"{len(flat)} values: {spec}",
                fix="call the plan as the model was called at capture time",
            )
        if not fixed:
            return flat
        for position, value in fixed:
            if flat[position] != value:
                from opcore.errors import ArgumentError

                raise ArgumentError(
                    op="Plan",
                    arg=f"inputs[{position}]",
                    expected=f"{value!r}, the value torch.export baked into the plan",
                    found=repr(flat[position]),
                    fix="capture again with this value",
                )
        skip = {position for position, _ in fixed}
        return [value for position, value in enumerate(flat) if position not in skip]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        flat = self.flatten(args, kwargs)
        if self.watch is not None and self.watch.stale():
            self.follow()
        if self._replay is not None or self.options.cuda_graph:
            from opcore.graph.cuda import replay

            outputs = replay(self, flat)
        else:
            outputs = self.program.run(flat)
        return self.unflatten(outputs)

    def _returns_plainly(self) -> int:
        """1 when the model returns one tensor, 0 a tuple of them (or no structure was recorded), -1 anything
        else: the first two are their own unflattening, without the pytree walk (~5 us a call, and ~40 us
        right after a graph runtime's run, which leaves pytree's code and data out of the CPU's caches)."""
        if self._plain_out is None:
            from torch.utils import _pytree

            out_spec = self._trees()[1]
            count = len(self.program.outputs)
            if out_spec is None or out_spec == _pytree.tree_flatten((0,) * count)[1]:
                self._plain_out = 0
            elif out_spec == _pytree.tree_flatten(0)[1]:
                self._plain_out = 1
            else:
                self._plain_out = -1
        return self._plain_out

    def unflatten(self, outputs: list[Any]) -> Any:
        plain = self._returns_plainly()
        if plain >= 0:
            return outputs[0] if plain else tuple(outputs)
        from torch.utils import _pytree

        return _pytree.tree_unflatten(outputs, self._trees()[1])

    def explain(self, format: str = "text") -> str:
        """A one-line summary, then per node: op, backend/kernel, partition, every rejected candidate.

        >>> print(plan.explain())               # doctest: +SKIP
        >>> plan.explain(format="json")         # doctest: +SKIP
        """
        from opcore.graph.explain import render

        return render(self, format)

    def summary(self) -> str:
        from opcore.graph.explain import summary

        return summary(self)

    def verify(self, *args: Any, atol: float = 1e-4, rtol: float = 1e-4, **kwargs: Any) -> Any:
        """Run the plan and a per-node eager PyTorch run of the same graph; compare every partition's
        (and every node's) outputs, and name the first one that diverges.

        >>> report = plan.verify(x); report.ok        # doctest: +SKIP
        True
        """
        from opcore.graph.verify import verify

        return verify(self, args, kwargs, atol=atol, rtol=rtol)

    def follow(self) -> None:
        """Refresh the plan if a weight it watches changed since (a call does this first)."""
        changed = [] if self.watch is None else self.watch.changed()
        if changed:
            from opcore.graph.weights import refresh

            refresh(self, changed, called=True)

    def refresh(self) -> list[str]:
        """Prepare the plan again for the current weights: partitions holding a changed weight are
        compiled again, every kernel is resolved again. A call does this by itself after the model's
        parameters or buffers change (in place, ``load_state_dict``, assigned); a loaded plan, which
        has no model, is frozen until its ``constants`` are edited and it is refreshed by hand.
        Returns the names of the weights taken again.

        >>> model.load_state_dict(state); plan.refresh()      # doctest: +SKIP
        ['layers.0.q.weight', ...]
        """
        from opcore.graph.weights import refresh

        return refresh(self, None if self.watch is None else self.watch.changed())

    def save(self, path: Any) -> Any:
        """Write the plan to a folder: plan.json, weights.safetensors, each partition's files.

        >>> plan.save("llama.plan"); again = opcore.graph.load("llama.plan")   # doctest: +SKIP
        """
        from opcore.graph.files import save

        return save(self, path)

    def __repr__(self) -> str:
        return f"<opcore.graph.Plan: {self.summary()}>"


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
    it as one step, and the guard times that.
    """
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
        cases["the torch route"] = _program_of(graph, exported, constants)
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


def _program_of(graph: Graph, exported: ExportedStep, constants: Mapping[str, Any]) -> Program:
    from opcore.graph.exported import exported_program

    return exported_program(graph, exported, constants)


def one_step(plan: Plan, exported: ExportedStep | None) -> Plan:
    """The torch-route plan ``plan`` running ``exported`` as its one step (as is without one)."""
    if exported is None:
        return plan
    plan.exported = exported
    plan.program = _program_of(plan.graph, exported, plan.constants)
    return plan


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
        from opcore.selection import check_named

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
    plan = Plan(graph, decisions, program, constants, options, partitions)
    inside = sorted(name for name in unchecked if name in claimed)  # a saved plan's partitions, as saved
    if inside:
        plan.notes.append(
            f"indices not checked: {', '.join(inside)} run inside a saved partition, which does not check their "
            "indices and no value range proves them (opcore.graph.bounds); capture the model again"
        )
    return plan


def _proof(graph: Graph, constants: Mapping[str, Any], options: PlanOptions) -> ValueProof | None:
    """The value ranges of the plan's integer tensors, for the graph backends that compute int64 in a
    narrower dtype (their partition compiler's ``int64_as``); None when none of them can take nodes."""
    if not (options.device == "cpu" or options.device.startswith("cpu")):  # graph runtimes take host arrays
        return None
    from opcore.graph.partition import compilers
    from opcore.types import DType

    narrowing = {
        name: DType.parse(found)
        for name, compiler in compilers().items()
        if (found := getattr(compiler, "int64_as", None)) is not None
    }
    if not narrowing:
        return None
    return ValueProof(value_ranges(graph, constants, sizes=declared_sizes(graph)), narrowing)


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
