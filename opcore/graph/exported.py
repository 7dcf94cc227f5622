"""The torch route as one step: the ``torch.export`` program's own graph, run by torch.

Where a plan runs the torch route (the guard at capture found it faster than the plan, or
``capture(..., route="torch")``), running it node by node through opcore's steps costs a Python
call per node more than torch's own run of the exported graph (a Llama decoder has ~180 nodes).
So a captured plan keeps the exported program's ``GraphModule`` (functional, with its parameters
and constants lifted to inputs) and runs it as one step, passing the plan's constants in: the
torch route then *is* eager PyTorch on the exported graph, with the plan's weights, and a plan is
never slower than eager by construction. Its sizes are symbolic where the capture's were, so a
plan with ``dynamic_shapes`` takes other sizes as it does.

A loaded plan has no GraphModule (``plan.json`` holds opcore's nodes, nothing is unpickled): a
loaded torch-route plan runs the same route node by node (see docs/graph.md).

>>> step = ExportedStep.of(program, graph)              # doctest: +SKIP
>>> outputs = step.bind(plan.constants)(*flat_inputs)    # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opcore.graph.ir import Graph, ValueRef
from opcore.graph.runner import Program, Slot, Step

__all__ = ["ExportedStep", "exported_program", "one_step"]


@dataclass(frozen=True, slots=True)
class ExportedStep:
    """The exported program's lifted GraphModule and how to call it: ``placeholders`` in its order,
    each a constant's name (the plan's constants are passed there), a runtime input's name (the
    plan's flat inputs, in ``graph.inputs`` order) or, for a non-tensor input torch.export
    specialized, its value in ``fixed``."""

    module: Any  # torch.fx.GraphModule: (lifted constants..., user inputs...) -> flat outputs
    placeholders: tuple[str, ...]
    fixed: Mapping[str, Any]
    outputs: int

    @classmethod
    def of(cls, program: Any, graph: Graph) -> ExportedStep:
        """The step of ``program`` (after run_decompositions) whose lowering is ``graph``."""
        placeholders = tuple(n.name for n in program.graph_module.graph.nodes if n.op == "placeholder")
        fixed = {
            spec.arg.name: getattr(spec.arg, "value", None)
            for spec in program.graph_signature.input_specs
            if spec.kind.name == "USER_INPUT" and spec.arg.name not in graph.inputs
        }
        return cls(program.graph_module, placeholders, fixed, len(graph.outputs))

    def bind(self, constants: Mapping[str, Any], inputs: Sequence[str]) -> Callable[..., tuple[Any, ...]]:
        """The call of the flat runtime inputs (named ``inputs``, in order) giving the flat outputs,
        with ``constants`` (the plan's, by name) passed where the program lifted them."""
        at = {name: i for i, name in enumerate(inputs)}
        template: list[Any] = []
        free: list[tuple[int, int]] = []  # (position among the placeholders, position among the inputs)
        for position, name in enumerate(self.placeholders):
            if name in at:
                template.append(None)
                free.append((position, at[name]))
            elif name in constants:
                template.append(constants[name])
            else:
                template.append(self.fixed.get(name))
        module = self.module

        def run(*flat: Any) -> tuple[Any, ...]:
            args = template.copy()
            for position, i in free:
                args[position] = flat[i]
            return tuple(module(*args))

        return run


def exported_program(graph: Graph, step: ExportedStep, constants: Mapping[str, Any]) -> Program:
    """The plan's program with one step: the exported program on the plan's inputs and constants,
    its flat outputs the graph's (``graph.outputs`` align with the exported outputs one to one)."""
    inputs = list(graph.inputs)
    outputs = [f"exported:{i}" for i in range(step.outputs)]
    slot_of = {name: i for i, name in enumerate([*inputs, *outputs])}
    call = step.bind(constants, inputs)
    fn = call if step.outputs != 1 else _first(call)  # a one-output step stores its value as is
    run = Step(fn, tuple(Slot(slot_of[n]) for n in inputs), tuple(slot_of[o] for o in outputs))
    return Program(slot_of, [None] * len(slot_of), [run], [slot_of[n] for n in inputs], [ValueRef(o) for o in outputs])


def _first(call: Callable[..., tuple[Any, ...]]) -> Callable[..., Any]:
    def first(*flat: Any) -> Any:
        return call(*flat)[0]

    return first


def one_step(plan: Any, exported: ExportedStep | None) -> Any:
    """The torch-route plan ``plan`` (an opcore.graph.plan.Plan) running ``exported`` as its one step
    (as is without one)."""
    if exported is None:
        return plan
    plan.exported = exported
    plan.program = exported_program(plan.graph, exported, plan.constants)
    return plan
