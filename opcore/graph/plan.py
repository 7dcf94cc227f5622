"""A plan: a captured graph with every node decided, ready to run, explain, verify and save.

>>> plan = opcore.graph.capture(model, (x,))     # doctest: +SKIP
>>> y = plan(x)                                  # doctest: +SKIP
>>> print(plan.explain())                        # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opcore.graph.errors import UncoveredError
from opcore.graph.ir import Graph, Node
from opcore.graph.planner import Decision, NodeCall, example_tensors, plan_node, scalar_call
from opcore.graph.runner import Program, Step, slot_template
from opcore.types import Device

__all__ = ["Plan", "PlanOptions", "assemble"]


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """How a plan was asked for. backends None: every loaded backend by rank; fallback False: every
    node must run on one of ``backends`` (or, without backends, on its op's first choice)."""

    backends: tuple[str, ...] | None = None
    fallback: bool = True
    device: str = "cpu"
    partitions: bool = True
    rewrites: bool = True
    cuda_graph: bool = False


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
        self._specs: tuple[Any, Any] | None = None
        self._replay: Any = None  # a CUDA graph replay (device="cuda", static shapes), made on first call

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

    def flatten(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Any]:
        """The runtime inputs in graph order, from the model's call arguments."""
        from torch.utils import _pytree

        flat, spec = _pytree.tree_flatten((tuple(args), dict(kwargs)))
        expected = self._trees()[0]
        fixed = self.graph.fixed_inputs
        wanted = len(self.graph.inputs) + len(fixed)
        if len(flat) != wanted or (expected is not None and spec != expected):
            from opcore.errors import ArgumentError

            raise ArgumentError(
                op="Plan",
                arg="inputs",
                expected=f"the structure the model was captured with ({wanted} values: {expected})",
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
        if self._replay is not None or self.options.cuda_graph:
            from opcore.graph.cuda import replay

            outputs = replay(self, flat)
        else:
            outputs = self.program.run(flat)
        return self.unflatten(outputs)

    def unflatten(self, outputs: list[Any]) -> Any:
        out_spec = self._trees()[1]
        if out_spec is None:
            return tuple(outputs)
        from torch.utils import _pytree

        return _pytree.tree_unflatten(outputs, out_spec)

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
) -> Plan:
    """Decide every node of ``graph`` and build the program that runs them.

    ``notes``: per node, why it is an ATen fallback; ``saved``: partitions of a saved plan to load
    instead of compiling (opcore.graph.load).
    """
    from opcore.runtime import runtime
    from opcore.settings import context_policy

    rt = runtime().ensure_loaded()
    policy = context_policy.get()
    strict_context = policy.strict if policy is not None and policy.strict is not None else rt.settings.strict
    fallback = options.fallback and not strict_context
    allowed = frozenset(options.backends) if options.backends else None
    if options.backends:
        from opcore.selection import check_named

        check_named(rt, options.backends, "opcore.graph.capture(backends=...)")
    notes = notes or {}
    example = example_tensors(graph, constants)
    partitions: Sequence[Any] = ()
    claimed: Mapping[str, Decision] = {}
    refusals: Mapping[str, Any] = {}
    if options.partitions:
        from opcore.graph.partitioning import place_partitions

        partitions, claimed, refusals = place_partitions(graph, constants, options, example, saved)
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
                    note=notes.get(node.name, ""), extra=refusals.get(node.name, ()),
                )
            )  # fmt: skip
    uncovered = [(node, call) for node, call in zip(graph.nodes, calls) if call is not None and call.fn is None]
    if uncovered:
        raise _uncovered(uncovered, options, strict_context)
    decisions = [call.decision if call is not None else claimed[node.name] for node, call in zip(graph.nodes, calls)]
    program = _program(graph, calls, constants, partitions)
    return Plan(graph, decisions, program, constants, options, partitions)


def _uncovered(uncovered: list[tuple[Node, NodeCall]], options: PlanOptions, strict_context: bool) -> UncoveredError:
    wanted = ", ".join(options.backends) if options.backends else "the ranked backends"
    mode = "fallback=False" if not options.fallback else "opcore.strict()" if strict_context else "planning"
    lines = [f"{len(uncovered)} node(s) not covered by {wanted} ({mode}):"]
    for node, call in uncovered:
        lines.append(f"  - {node.name}: {node.op}: {call.uncovered}")
    fix = "add a backend to backends=, or allow fallback=True so the ranked kernels take these nodes"
    return UncoveredError("\n".join(lines), op="opcore.graph.capture", fix=fix)


def _program(
    graph: Graph, calls: Sequence[NodeCall | None], constants: Mapping[str, Any], partitions: Sequence[Any]
) -> Program:
    names = [*graph.inputs, *graph.constants, *(o for node in graph.nodes for o in node.outputs)]
    slot_of = {name: i for i, name in enumerate(names)}
    base: list[Any] = [None] * len(names)
    for name in graph.constants:
        base[slot_of[name]] = constants[name]
    steps: list[Step] = []
    if partitions:
        from opcore.graph.partitioning import order_units

        units: Sequence[Any] = order_units(graph, partitions)
    else:
        units = range(len(graph.nodes))
    for unit in units:
        if isinstance(unit, int):
            call = calls[unit]
            node = graph.nodes[unit]
            if call is None or call.fn is None:  # claimed nodes come as partitions, uncovered ones raised
                raise RuntimeError(f"opcore.graph: node {node.name} has no call")
            steps.append(Step(call.fn, slot_template(call.args, slot_of), tuple(slot_of[o] for o in node.outputs)))
        else:
            steps.append(unit.step(slot_of))
    return Program(slot_of, base, steps, [slot_of[n] for n in graph.inputs], graph.outputs)
