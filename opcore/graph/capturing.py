"""``opcore.graph.capture``: a model captured once with torch.export, lowered to opcore ops, planned.

>>> plan = opcore.graph.capture(model, (x,))                                   # doctest: +SKIP
>>> plan = opcore.graph.capture(model, (x,), backends=["openvino"], fallback=False)   # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from opcore.errors import ArgumentError
from opcore.graph.asked import asked_backends, asked_measure, loaded
from opcore.graph.assembly import assemble
from opcore.graph.aten_export import decomposed, with_source_lines
from opcore.graph.complex_rotary import exportable_complex_rotary
from opcore.graph.decomposing import decompositions
from opcore.graph.dynamic_rope import traceable_dynamic_rope
from opcore.graph.errors import CaptureError
from opcore.graph.experts import GATHERED, exportable_experts
from opcore.graph.jetmoe_export import exportable_jetmoe
from opcore.graph.llama4_export import exportable_llama4
from opcore.graph.measuring import Timer, interleaved
from opcore.graph.options import PlanOptions
from opcore.graph.plan import Plan
from opcore.graph.quantizing import WeightSpec
from opcore.types import Device

__all__ = ["capture", "export"]

_CAPTURE = "opcore.graph.capture"


def capture(
    model: Any,
    example_inputs: Any,
    example_kwargs: Mapping[str, Any] | None = None,
    *,
    dynamic_shapes: Any = None,
    backends: Sequence[str] | None = None,
    device: str | None = None,
    fallback: bool = True,
    submodule: str | None = None,
    rewrites: bool = True,
    partitions: bool = True,
    measure: bool | Timer = True,
    route: str | None = None,
    freeze: bool = False,
    weights: str | None = None,
    group_size: int | None = None,
    exclude: Sequence[str] = (),
) -> Plan:
    """Capture ``model`` (an nn.Module) on ``example_inputs`` and plan it across the backends.

    dynamic_shapes: as torch.export's (e.g. ``({0: torch.export.Dim("batch")},)``); backends: the
    backends to plan on, in order of preference (None: all, by rank); device: "cpu" or "cuda" (None:
    the examples' device); fallback=False (or ``opcore.strict()``): every node must run on
    ``backends``, else UncoveredError lists the nodes that do not; submodule: capture only this
    part of the model ("layers.0.mlp"), called with ``example_inputs``; rewrites=False: keep the
    graph as exported (no fused ops, see opcore.graph.rewrite); measure: time on the example inputs
    what the estimates cannot decide (each partition against its nodes per node, the plan against
    the torch route: see opcore.graph.measuring); False: the estimated cost rule alone; a function
    ``{label: call} -> {label: seconds}``: that timer; route: None (the guard decides, when
    measuring) or "torch": run the torch route, the exported program as one step (nothing is
    planned onto other backends or measured).

    weights: None (as the model has them), "int8" or "int4": each linear with a constant weight runs
    ``linear_wq`` on that weight's codes (opcore.graph.quantizing, docs/quantized.md): int8 per output
    channel, int4 in groups of ``group_size`` (None: 128), the logits' linear at int8; each embedding
    with a constant table runs ``embedding_wq`` on the table's int8 codes (one scale a row); ``exclude``:
    fnmatch patterns of state_dict names kept float ("lm_head.weight", "*.mlp.*"). A quantized plan
    is measured against its own nodes run per node (not the float model's torch route) and takes its
    weights at capture (as freeze=True).

    After capture, the plan watches the model's parameters and buffers: a call after one changed
    (in place, ``load_state_dict``, assigned) prepares the plan again first (``Plan.refresh``).
    freeze=True: the weights are taken as they are now and not compared again per call (as
    ``torch.jit.freeze``, Inductor's freezing, an ONNX Runtime session or ``openvino.convert_model``
    take them): the watch's cost is saved (~0.1 ms a call for ~90 tensors right after a graph
    runtime's run, docs/graph.md); after changing a weight in place, call ``plan.refresh()`` (the plan's
    ``constants`` are the model's tensors: an assigned one is not among them; capture again for that).

    >>> plan = opcore.graph.capture(torch.nn.Linear(8, 4).eval(), (torch.randn(2, 8),))  # doctest: +SKIP
    """
    from opcore.graph.lowering import lower

    if route not in (None, "torch"):
        raise ArgumentError(
            op=_CAPTURE,
            arg="route",
            expected="None or 'torch'",
            found=repr(route),
            fix="leave route=None (the guard decides) or pass route='torch' (the exported program as one step)",
        )
    backends = asked_backends(backends, _CAPTURE)
    measure = asked_measure(measure, _CAPTURE)
    started = time.perf_counter()
    model = _part(model, submodule)
    loaded(model, _CAPTURE)
    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    kwargs = dict(example_kwargs or {})
    place = Device.parse(device) if device is not None else _device_of(args, kwargs)
    import torch
    from torch.utils import _pytree

    flat = _pytree.tree_leaves((args, kwargs))

    def export_and_lower(traces: bool) -> tuple[Any, dict[str, Any], Any, dict[str, str], bool]:
        with _NoCache(model) as uncached:
            program = export(model, args, kwargs, dynamic_shapes, traces=traces)
        constants = program_constants(program, place)
        graph, notes = lower(program, flat, constants, place)
        return program, constants, graph, notes, uncached

    program, constants, graph, notes, uncached = with_source_lines(export_and_lower)
    graph = replace(
        graph,
        in_spec=_pytree.treespec_dumps(program.call_spec.in_spec),
        out_spec=_pytree.treespec_dumps(program.call_spec.out_spec),
    )
    applied: list[str] = []
    said: list[str] = []
    quantized = WeightSpec.parse(weights, group_size, exclude)
    if quantized is not None and route == "torch":
        raise ArgumentError(
            op=_CAPTURE,
            arg="route",
            expected="None with weights=... (the torch route runs the exported float program)",
            found="'torch'",
            fix="drop route='torch' to run the quantized plan, or drop weights= to run the float model",
        )
    if quantized is not None:
        from opcore.graph.quantizing import quantize_weights

        graph, said = quantize_weights(graph, constants, quantized)
    if rewrites:
        from opcore.graph.rewrite import apply_rewrites

        graph, applied = apply_rewrites(graph)
        from opcore.graph.masks import drop_full_masks

        graph, dropped = drop_full_masks(graph, constants)
        if dropped:
            applied.append(f"rewrite full attention mask dropped: {dropped} match{'es' * (dropped != 1)}")
    captured = time.perf_counter()
    options = PlanOptions(
        backends=backends,
        fallback=fallback,
        device=str(place),
        partitions=partitions,
        rewrites=rewrites,
        cuda_graph=place.type.value == "cuda" and not any(i.dynamic_axes for i in graph.values.values()),
        route=route or "planned",
    )
    skip = {position for position, _ in graph.fixed_inputs}
    examples = [value for position, value in enumerate(flat) if position not in skip]
    timer = None if measure is False else interleaved if measure is True else measure
    from opcore.graph.exported import ExportedStep
    from opcore.graph.weights import watch_of

    with torch.no_grad():
        # a quantized graph is not the exported (float) program: no torch route of it to run or time
        exported = None if quantized is not None else ExportedStep.of(program, graph)
        plan = assemble(graph, constants, options, notes, examples=examples, timer=timer, exported=exported)
    if route == "torch":
        applied.append("route: the torch route, as capture(route='torch') asked (the exported program as one step)")
    if uncached:
        applied.append(NO_CACHE_NOTE)
    if quantized is not None:
        applied.extend([*said, QUANTIZED_NOTE])
    elif freeze:
        applied.append(FROZEN_NOTE)
    else:
        plan.watch = watch_of(model, program, graph)
    plan.notes[:0] = applied
    plan.timings.capture = captured - started
    plan.timings.plan = time.perf_counter() - captured
    return plan


NO_CACHE_NOTE = (
    "captured without the KV cache (config.use_cache=False while exporting): the plan returns no "
    "past_key_values; to generate, use opcore.graph.capture_lm(model)"
)

QUANTIZED_NOTE = (
    "quantized weights: taken and quantized at capture, not compared per call; after changing the "
    "model's weights, capture it again"
)

FROZEN_NOTE = (
    "frozen weights: taken at capture and not compared per call (capture(freeze=True)); after an in-place "
    "change, plan.refresh() prepares the plan again from them"
)


def export(
    model: Any,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    dynamic_shapes: Any,
    *,
    experts: str = GATHERED,
    traces: bool = False,
) -> Any:
    """torch.export's program with nothing decomposed (every op stays whole: linear, attention, ...),
    in functional form (opcore.graph.aten_export); the exporter's refusal becomes a CaptureError with
    its reason. ``experts``: how a transformers MoE layer's experts are exported
    (opcore.graph.experts); ``traces``: each node's stack trace recorded (see ``with_source_lines``)."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise ArgumentError(
            op=_CAPTURE,
            arg="model",
            expected="a torch.nn.Module",
            found=type(model).__name__,
            fix="wrap a function in a torch.nn.Module whose forward calls it",
        )
    try:
        # functional (no in-place ops left), decomposing only what opcore.graph.decomposing names: every other
        # op stays whole; opcore's own ATen fallback runs any op no backend claims
        with (
            exportable_experts(model, experts),
            exportable_complex_rotary(model),
            exportable_llama4(model),
            exportable_jetmoe(model),
            traceable_dynamic_rope(model),
        ):
            return decomposed(model, args, kwargs, dynamic_shapes, decompositions(), traces=traces)
    except Exception as error:
        reason = _first_lines(str(error))
        raise CaptureError(
            f"torch.export could not capture {type(model).__name__}: {type(error).__name__}: {reason}",
            op=_CAPTURE,
            fix=_export_fix(str(error)),
        ) from error


def _export_fix(text: str) -> str:
    """The fix for an exporter's refusal: the known causes named, else the general advice."""
    if "Cache" in text and ("output" in text or "pytree" in text.lower()):
        return (
            "call the model with use_cache=False (a KV cache is not a plan output), or capture it for "
            "generation with opcore.graph.capture_lm(model), which holds the cache as the plan's state"
        )
    if "specialized it to be a constant (1)" in text or "specialized it to be a constant (0)" in text:
        return (
            "torch.export takes a size of 1 (or 0) in an example as that size for good: give the examples "
            "at least 2 along each dynamic dim (e.g. a batch of 2), the plan then takes every size in its range"
        )
    if "mismatch between the structure of `inputs` and `dynamic_shapes`" in text:
        return (
            "give dynamic_shapes one entry per example input and then per keyword argument, in order (None "
            "for one without a dynamic dim: ({1: seq}, None) for (ids,) with {'use_cache': False}), or a "
            "dict by the forward's parameter names ({'input_ids': {1: seq}}), as torch.export takes them"
        )
    return (
        "capture a part of the model that torch.export accepts (capture(..., submodule='path')), "
        "or fix what the exporter names"
    )


class _NoCache:
    """Within the block, a transformers model's config asks for no KV cache (``use_cache=False``):
    ``capture`` of a decoder with default arguments returns the logits, not a cache object a plan
    cannot hold. Restored after."""

    def __init__(self, model: Any) -> None:
        config = getattr(model, "config", None)
        self.config = config if getattr(config, "use_cache", False) is True else None

    def __enter__(self) -> bool:
        if self.config is not None:
            self.config.use_cache = False
        return self.config is not None

    def __exit__(self, *exc: Any) -> None:
        if self.config is not None:
            self.config.use_cache = True


def _first_lines(text: str, limit: int = 6) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    shown = "\n".join(lines[:limit])
    return shown + ("\n..." if len(lines) > limit else "")


def _part(model: Any, submodule: str | None) -> Any:
    if not submodule:
        return model
    try:
        return model.get_submodule(submodule)
    except AttributeError as error:
        names = [name for name, _ in model.named_modules() if name][:8]
        raise ArgumentError(
            op=_CAPTURE,
            arg="submodule",
            expected=f"a submodule path of {type(model).__name__} (e.g. {', '.join(names) or 'none'})",
            found=repr(submodule),
        ) from error


def _device_of(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Device:
    from torch.utils import _pytree

    for leaf in _pytree.tree_leaves((args, kwargs)):
        if hasattr(leaf, "device"):
            return Device.parse(str(leaf.device))
    return Device.parse("cpu")


def program_constants(program: Any, device: Device) -> dict[str, Any]:
    """Placeholder name -> tensor, for every parameter, buffer and lifted constant, on the plan's device."""
    found: dict[str, Any] = {}
    for spec in program.graph_signature.input_specs:
        kind = spec.kind.name
        if kind in ("PARAMETER", "BUFFER"):
            value = program.state_dict.get(spec.target)
            if value is None:  # a non-persistent buffer
                value = program.constants[spec.target]
        elif kind == "CONSTANT_TENSOR":
            value = program.constants[spec.target]
        elif kind == "USER_INPUT":
            continue
        else:
            raise CaptureError(
                f"the exported program has a {kind} input ({spec.target}), which a plan cannot hold", op=_CAPTURE
            )
        found[spec.arg.name] = value.detach().to(str(device))
    return found
