"""Weights after capture: a captured plan follows its model's parameters and buffers.

A plan takes the model's weights as its constants at capture, and prepares them: graph-runtime
partitions compile them in (ONNX initializers, OpenVINO constants), per-node kernels pack them
(oneDNN). torch.export, ONNX and OpenVINO freeze weights; torch.compile sees updates, and so does
a PyTorch user's expectation. A captured plan therefore watches the model's parameters and buffers
it took (opcore.torchkit.watch, the mechanism opcore.nn modules use): where each lives in the model,
the tensor, its version counter and its data pointer, compared before every call. After a change —
an in-place update (``p.mul_``, an optimizer step), ``load_state_dict`` (copying in, or
``assign=True``), an assignment, ``p.data = t`` — the call refreshes the plan first: partitions
holding a changed weight are compiled again, every per-node kernel is resolved again (packing the
new weights), the torch route's exported program is given the new tensors; the placement and
route decided at capture stay. ``plan.notes`` records it. A weight of another shape or dtype, or
one removed, raises ``WeightsError`` naming it (the plan was planned for those shapes).

A loaded plan has no model: its weights are those of its file, frozen. Its ``constants`` may be
edited and ``plan.refresh()`` called, which prepares everything again from them.

>>> model.load_state_dict(state)      # doctest: +SKIP
>>> y = plan(x)                        # refreshed first: the new weights, never stale ones  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opcore.graph.errors import WeightsError
from opcore.graph.ir import Graph
from opcore.graph.measuring import verdict_text
from opcore.torchkit.watch import TensorWatch
from opcore.types import TensorMeta, is_tensor

__all__ = ["refresh", "watch_of"]

_NOTE = "weights: "


def watch_of(model: Any, program: Any, graph: Graph) -> TensorWatch:
    """The watch of every parameter and buffer of ``model`` that ``graph`` holds as a constant
    (labelled with the constant's name), from the exported ``program``'s signature."""
    slots = []
    for spec in program.graph_signature.input_specs:
        kind, name = spec.kind.name, spec.arg.name
        if kind not in ("PARAMETER", "BUFFER") or name not in graph.constants:
            continue
        owner, _, attr = str(spec.target).rpartition(".")
        try:
            module = model.get_submodule(owner) if owner else model
        except AttributeError:  # not a plain attribute path: nothing to watch it through
            continue
        holder = module._parameters if kind == "PARAMETER" else module._buffers
        if holder.get(attr) is not None:
            slots.append((name, holder, attr))
    return TensorWatch.of(slots)


def refresh(plan: Any, changed: Sequence[str] | None, *, called: bool = False) -> list[str]:
    """Prepare ``plan`` again for the weights ``changed`` (constant names; None: a loaded plan,
    every constant from ``plan.constants``). ``called``: a call found the change (said in the
    notes). Returns the changed weights' names in the model."""
    import torch

    started = time.perf_counter()
    constants = dict(plan.constants)
    if changed is None:  # a loaded plan: its constants, perhaps edited by hand
        taken = list(plan.graph.constants)
        for name in taken:
            _checked(plan.graph, name, constants[name])
    else:
        taken = list(changed)
        now = plan.watch.current()
        for name in taken:
            constants[name] = _checked(plan.graph, name, now[name]).detach().to(plan.options.device)
    names = [plan.graph.sources.get(n, n) for n in taken]
    if not taken:
        return names
    with torch.no_grad():
        fresh, recompiled = _rebuilt(plan, constants, set(taken))
    plan.constants = constants
    plan.program, plan.partitions = fresh.program, fresh.partitions
    plan.decisions = tuple(
        old if (old.backend, old.kernel, old.partition) == (new.backend, new.kernel, new.partition) else new
        for old, new in zip(plan.decisions, fresh.decisions)
    )  # the same choice keeps its record (a measured verdict that a rebuild does not repeat)
    if plan.watch is not None:
        plan.watch = plan.watch.again()
    plan._replay = None  # a CUDA graph captured the old steps
    _note(plan, names, recompiled, time.perf_counter() - started, called)
    return names


def _checked(graph: Graph, name: str, tensor: Any) -> Any:
    """The new tensor of constant ``name``, if the plan can take it (its capture's shape and dtype)."""
    source = graph.sources.get(name, name)
    fix = "capture the model again (opcore.graph.capture) for weights of another shape or dtype"
    if tensor is None:
        raise WeightsError(f"the model's {source} is gone (None) since capture", op="Plan", fix=fix)
    want = graph.meta(name)
    if not is_tensor(tensor):  # a loaded plan's constants edited by hand: TensorMeta would not name the weight
        raise WeightsError(
            op="Plan",
            arg=source,
            expected=f"a tensor {want.dtype.value}{list(want.shape)}, as at capture",
            found=type(tensor).__name__,
            fix="set plan.constants[name] to a torch.Tensor (or numpy array) of that shape and dtype",
        )
    found = TensorMeta.of(tensor)
    if (want.shape, want.dtype) != (found.shape, found.dtype):
        raise WeightsError(
            op="Plan",
            arg=source,
            expected=f"{want.dtype.value}{list(want.shape)}, as at capture",
            found=f"{found.dtype.value}{list(found.shape)}",
            fix=fix,
        )
    return tensor


def _rebuilt(plan: Any, constants: Mapping[str, Any], changed: set[str]) -> tuple[Any, list[str]]:
    """The plan's program made again with ``constants``: the same route and partitions (those
    holding a changed constant compiled again, the rest kept as compiled), every kernel resolved."""
    from opcore.graph.exported import one_step
    from opcore.graph.options import torch_route
    from opcore.graph.partitioning import compilers

    notes = {d.node: d.note for d in plan.decisions if d.partition is None and d.note}
    if plan.options.route == "torch":
        return one_step(plan.assembler(plan.graph, constants, torch_route(plan.options), notes), plan.exported), []
    found = compilers()
    saved: dict[str, tuple[str, tuple[str, ...], Callable[[Any], Any], str]] = {}
    recompiled = []
    for record in plan.partitions:
        if changed & set(record.spec.constants):
            saved[record.name] = (record.backend, record.nodes, found[record.backend].compile, record.note)
            recompiled.append(record.name)
        else:
            saved[record.name] = (record.backend, record.nodes, _as_compiled(record.compiled), record.note)
    fresh = plan.assembler(plan.graph, constants, plan.options, notes, saved=saved if plan.options.partitions else None)
    return fresh, recompiled


def _as_compiled(compiled: Any) -> Callable[[Any], Any]:
    def bring_back(spec: Any) -> Any:
        return compiled

    return bring_back


def _note(plan: Any, names: list[str], recompiled: list[str], seconds: float, called: bool) -> None:
    """One note per plan, updated: how often it was refreshed, after what, at what cost."""
    plan.notes[:] = [n for n in plan.notes if not n.startswith(_NOTE)]
    plan.refreshes += 1
    count = plan.refreshes
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    parts = [f"partitions {', '.join(recompiled)} compiled again" if recompiled else "no partition held them"]
    parts.append("kernels resolved again")
    how = "found by a call" if called else "plan.refresh()"
    plan.notes.append(
        f"{_NOTE}refreshed {count} time{'s' * (count != 1)}, last after {shown} changed ({how}): "
        f"{'; '.join(parts)}, {verdict_text(seconds)}"
    )
