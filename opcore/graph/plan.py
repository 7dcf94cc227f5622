"""A plan: a captured graph with every node decided, ready to run, explain, verify and save.

This module is the record and its call path; it imports none of what builds, saves, verifies or
refreshes plans (those import it). A plan is built by ``opcore.graph.assembly``, which hands it
its own builder (``Plan.assembler``): refreshing a plan and verifying it decide its graph again
through that, so the record never imports its builder.

>>> plan = opcore.graph.capture(model, (x,))     # doctest: +SKIP
>>> y = plan(x)                                  # doctest: +SKIP
>>> print(plan.explain())                        # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from opcore.graph.ir import Graph
from opcore.graph.options import PlanOptions, torch_route
from opcore.graph.planner import Decision
from opcore.graph.runner import Program
from opcore.types import Device

if TYPE_CHECKING:
    from opcore.graph.exported import ExportedStep
    from opcore.graph.signature import InputCheck
    from opcore.torchkit.watch import TensorWatch

__all__ = ["Assembler", "Plan", "PlanOptions", "Timings", "torch_route"]


class Assembler(Protocol):
    """What decides a graph into a plan (``opcore.graph.assembly._assemble``): every node decided under
    ``options`` without measuring; ``notes``: per node, why it is an ATen fallback; ``saved``: partitions
    to bring back instead of compiling."""

    def __call__(
        self,
        graph: Graph,
        constants: Mapping[str, Any],
        options: PlanOptions,
        notes: Mapping[str, str] | None = None,
        saved: Mapping[str, Any] | None = None,
    ) -> Plan: ...


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
        *,
        assembler: Assembler,
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
        # what built this plan, to decide its graph again (a refresh, verify's torch route)
        self.assembler = assembler

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
