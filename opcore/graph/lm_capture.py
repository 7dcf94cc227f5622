"""``opcore.graph.capture_lm``: a decoder captured for generation, its KV cache as the plans' state.

Two plans share the model's weights and one layout of state (the per-layer key and value caches,
allocated for ``batch_size`` x ``max_length``):

* **prefill** — the prompt, any length from 2 to ``max_length``: one torch.export with a dynamic
  sequence dim, run on the torch route node by node (compute-bound GEMMs; the torch backend's
  kernels with packed weights; no shape ever compiles anything);
* **decode** — one token per row: a graph of one token, planned and measured as ``capture`` plans any
  model (graph-runtime partitions where they beat their nodes, the guard against the torch route). On
  the host it is the prefill's graph specialized at one token (opcore.graph.specialize: one export,
  not two), where the exported program computes what the model does at one token; else its own export.

Both write the cache in place (opcore.graph.state): a step never copies it. On the host both read a
window of it: their attentions over the cache take its first W slots, W an input the session sets
past the last slot written (opcore.graph.split_attention: ``window``, ``window_prompt``; an attention
written as matmuls: opcore.graph.score_window), so a step costs what the conversation holds, not
``max_length``.

>>> lm = opcore.graph.capture_lm(model, max_length=256)                    # doctest: +SKIP
>>> out = lm.generate(ids, max_new_tokens=32)                              # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from opcore.errors import ArgumentError, OpcoreError
from opcore.graph.asked import asked_backends, asked_measure, loaded
from opcore.graph.assembly import assemble
from opcore.graph.errors import CaptureError
from opcore.graph.measuring import Timer, interleaved
from opcore.graph.options import PlanOptions
from opcore.graph.partition_guard import CompilerCrash, answer
from opcore.graph.plan import Plan
from opcore.graph.quantizing import WeightSpec
from opcore.graph.score_window import window_scores
from opcore.graph.split_attention import WINDOW, read_written, split_attention, window_length, window_prompt
from opcore.graph.state import new_state
from opcore.types import Device, DType

if TYPE_CHECKING:
    from opcore.graph.generation import LanguageModel

__all__ = ["capture_lm"]

_CAPTURE_LM = "opcore.graph.capture_lm"


def capture_lm(
    model: Any,
    *,
    max_length: int = 512,
    batch_size: int = 1,
    backends: Sequence[str] | None = None,
    device: str | None = None,
    measure: bool | Timer | None = None,
    prefill_partitions: bool | None = None,
    weights: str | None = None,
    group_size: int | None = None,
    exclude: Sequence[str] = (),
    draft_tokens: int | None = None,
) -> LanguageModel:
    """Capture a decoder-only language model for generation: a ``LanguageModel`` with ``generate``,
    step-level ``prefill``/``decode``, sessions, ``save`` and ``explain``.

    model: a transformers ``*ForCausalLM`` (Llama, Mistral, Qwen2, Phi3, Gemma, GPT-2, OPT, the MoE ones:
    Mixtral, Qwen3-MoE, gpt-oss, DeepSeek-V3, ...; opcore.graph.experts), or a
    module following opcore.graph.decoder's protocol (its own ``batch_size`` and ``max_length``
    attributes are the sizes then); max_length: prompt plus new tokens, the cache's length (allocated
    once); batch_size: the rows a step takes (fewer rows are padded to it);
    backends: as ``capture``'s; device: "cpu" (None: the model's);
    prefill_partitions: True plans the prefill onto the graph runtimes too, False keeps it on the
    torch route (which serves every prompt length without a runtime preparing a new shape); None:
    both are timed on a prompt of min(128, max_length) tokens at capture and the faster runs.
    measure: as ``capture``'s, and the decode step is also timed on each graph runtime alone against
    the ranked plan (the fastest runs; each candidate holds its runtime's copy of the weights while
    it is timed); None: True up to MEASURE_BYTES (1 GiB) of weights, False above, and with ``weights=``
    the decode step's runtimes are compared whenever the quantized weights (at most one byte an
    element) fit that bound (a 0.5B int4 decoder: OpenVINO 13.3, ONNX Runtime 18.5 tok/s), and the
    prefill against the runtime the decode step chose (its 128-token prompt: 1.0 s on the ranked
    route, 0.58 s on ONNX Runtime). Measured, a 135M
    fp32 decoder captured in 96 s and decoded 1.37x eager (on a 2-vCPU AVX-512 EPYC: 48-52 s after the
    one-trace export, opcore.graph.aten_export; 31 s in the twenty-fifth session, 2.0x eager); a 0.5B
    one took 142 to 174 s and 5.6 to 6.5 GB over its 2 GB of weights, and its guard once picked a
    slower route (4.6 to 6.0 tok/s); by the estimated rule the 0.5B took 53 s and 3.5 GB and decoded
    at 8.4 tok/s, and in the twenty-fifth session 16 s and 1.15x its weights (its prefill without
    weight copies: COPY_BYTES), decoding at 11.8 tok/s (docs/benchmarks.md).

    weights, group_size, exclude: as ``capture``'s (int8 / int4 weight-only linears, the logits' at
    int8; docs/quantized.md): prefill and decode share the quantized constants.

    draft_tokens: the most drafted tokens one step verifies, for prompt lookup decoding
    (``generate(..., prompt_lookup_num_tokens=n)``, n <= draft_tokens; opcore.graph.prompt_lookup): a
    third plan, the verify step, of 2 to draft_tokens + 1 tokens returning the logits of each, holding
    its runtime's own form of the weights as the other two do. None: the generation config's
    ``prompt_lookup_num_tokens``, else 0 (no verify step).

    The model is captured in eval mode (no dropout) and given back in the mode it was in.

    >>> lm = opcore.graph.capture_lm(LlamaForCausalLM(config).eval(), max_length=128)   # doctest: +SKIP
    """
    training = bool(getattr(model, "training", False))
    try:
        return _capture_lm(
            model,
            max_length,
            batch_size,
            backends,
            device,
            measure,
            prefill_partitions,
            weights,
            group_size,
            exclude,
            draft_tokens,
        )
    finally:
        if training:
            model.train()


def _capture_lm(
    model: Any,
    max_length: int,
    batch_size: int,
    backends: Sequence[str] | None,
    device: str | None,
    measure: bool | Timer | None,
    prefill_partitions: bool | None,
    weights: str | None,
    group_size: int | None,
    exclude: Sequence[str],
    draft_tokens: int | None = None,
) -> LanguageModel:
    import torch

    from opcore.graph.decoder import CachedDecoder, is_transformers_lm, protocol_sizes
    from opcore.graph.generation import GenerationDefaults, LanguageModel

    _check_sizes(max_length, batch_size)
    backends = asked_backends(backends, _CAPTURE_LM)
    measure = asked_measure(measure, _CAPTURE_LM)
    loaded(model, _CAPTURE_LM)
    quantized = WeightSpec.parse(weights, group_size, exclude, op=_CAPTURE_LM)
    started = time.perf_counter()
    module: Any
    if is_transformers_lm(model):
        module = CachedDecoder(model.eval(), batch_size, max_length)
        defaults = GenerationDefaults.of(model)
        if defaults.not_applied:
            import warnings

            warnings.warn(
                f"{type(model).__name__}'s generation_config sets {', '.join(defaults.not_applied)}, which "
                "opcore's generate does not apply: its tokens can differ from model.generate's (greedy search "
                "and sampling with temperature, top-k, top-p and a repetition penalty are what it does)",
                UserWarning,
                stacklevel=3,
            )
    else:
        if not isinstance(model, torch.nn.Module):
            raise ArgumentError(
                op=_CAPTURE_LM,
                arg="model",
                expected="a transformers *ForCausalLM or a torch.nn.Module following the decoder protocol",
                found=type(model).__name__,
                fix="see docs/generate.md, 'Your own module'",
            )
        batch_size, max_length = protocol_sizes(model)
        module = model.eval()
        defaults = GenerationDefaults()
    drafts = _draft_tokens(draft_tokens, defaults.prompt_lookup_num_tokens, max_length)
    place = Device.parse(device) if device is not None else _device_of(module)
    compare: Timer | None = None
    weight_bytes = _weight_bytes(module)
    if measure is None:
        # quantized plans hold their codes, not the float weights: the decode step's runtimes are
        # compared where those fit the bound, even when the float model does not
        if quantized is not None and _stored_bytes(module) <= MEASURE_BYTES:
            compare = interleaved
        measure = weight_bytes <= MEASURE_BYTES
    timer = None if measure is False else interleaved if measure is True else measure
    weighing = Weighing(quantized) if quantized is not None else None
    with torch.no_grad():
        # one export for both steps on the host (the decode step specialized from the prefill's)
        both = (
            _export_both(module, batch_size, max_length, place)
            if max_length >= 2 and place.type.value == "cpu"
            else None
        )
        with _collecting_new_objects_only():
            decode, alone = _decode_plan(
                module, batch_size, max_length, place, backends, timer, weighing, compare or timer, both and both[1]
            )
            prefill = None
            if max_length >= 2:
                copies = weight_bytes <= COPY_BYTES
                prefill = _prefill_plan(
                    module,
                    batch_size,
                    max_length,
                    place,
                    backends,
                    timer,
                    prefill_partitions,
                    weighing,
                    copies,
                    alone,
                    compare,
                    both and both[0],
                )
                if not copies:
                    prefill.notes.append(
                        f"no weight copies: the kernels run on the weights as given ({weight_bytes / 2**30:.1f} "
                        f"GiB of weights, above {COPY_BYTES / 2**30:g} GiB; the decode plan holds its own form)"
                    )
            verify = None
            if drafts:
                runs_on = alone if alone is not None else backends
                verify = _verify_plan(
                    module, batch_size, max_length, drafts, place, runs_on, weighing, weight_bytes <= COPY_BYTES
                )
    lm = LanguageModel(
        prefill, decode, batch_size=batch_size, max_length=max_length, defaults=defaults, verify_plan=verify
    )
    lm.capture_seconds = time.perf_counter() - started
    return lm


# measure=None measures at capture up to this many bytes of weights (the estimated rule above)
MEASURE_BYTES = 2**30
# the prompt length the prefill is exported, planned and measured on (or max_length, if shorter)
PROMPT = 128
# above this many bytes of weights the prefill's kernels keep no copies of them (opcore.weight_copies):
# the decode plan's runtime holds a form of its own already, and a packed copy beside it doubles the
# plan's memory for a few percent of prefill speed (the 0.5B shape on a 2-vCPU AVX-512 EPYC: 1.9 GB
# for a prefill 6 % faster; a 7B decoder's copies would not fit a 32 GB machine)
COPY_BYTES = 2**30


@contextmanager
def _collecting_new_objects_only() -> Iterator[None]:
    """The objects alive now frozen (``gc.freeze``) while the candidate plans are made and dropped:
    the ``gc.collect`` after each losing plan (it frees the runtimes' copies of the weights that the
    plan's cycles hold, 100-620 MB at the 135M shape) then looks at the objects made since, not at
    every object of the process. The export's graphs, the model and whatever the process made
    before (torch.compile's caches in the bench: ~850,000 tracked objects in all) took 0.6-0.9 s a
    collection. Unfrozen after; a process that froze objects itself (a forking server) is left as
    it is."""
    import gc

    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _weight_bytes(module: Any) -> int:
    seen: set[int] = set()
    total = 0
    for tensor in [*module.parameters(), *module.buffers()]:
        if tensor.data_ptr() not in seen:  # tied embeddings count once
            seen.add(tensor.data_ptr())
            total += tensor.numel() * tensor.element_size()
    return total


def _stored_bytes(module: Any) -> int:
    """The weights' bytes in a quantized plan, at most: every matrix (linears, embedding tables) at
    one byte an element (int8; int4 linears take less, the tables and the logits' linear stay int8),
    the rest as they are. The bound also holds with ``exclude`` up to the float matrices it keeps."""
    seen: set[int] = set()
    total = 0
    for tensor in [*module.parameters(), *module.buffers()]:
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            size = 1 if tensor.ndim == 2 and tensor.is_floating_point() else tensor.element_size()
            total += tensor.numel() * size
    return total


def _check_sizes(max_length: Any, batch_size: Any) -> None:
    for name, value in (("max_length", max_length), ("batch_size", batch_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ArgumentError(
                op=_CAPTURE_LM, arg=name, expected="an int >= 1", found=repr(value), fix=f"pass {name}=<int>"
            )


def _device_of(module: Any) -> Device:
    for tensor in module.parameters():
        return Device.parse(str(tensor.device))
    return Device.parse("cpu")


@dataclass(frozen=True, slots=True)
class Weighing:
    """``weights=`` of capture_lm: the spec, and the quantized weights prefill and decode share."""

    spec: WeightSpec
    cache: dict[Any, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Lowered:
    """One step exported and lowered: the graph (rewritten), its constants, the ATen-fallback notes
    and the rewrite notes, the examples it was exported on, and the seconds that took."""

    graph: Any
    constants: dict[str, Any]
    notes: dict[str, str]
    applied: list[str]
    examples: tuple[Any, ...]
    seconds: float


def _decode_plan(
    module: Any,
    batch_size: int,
    max_length: int,
    place: Device,
    backends: Sequence[str] | None,
    timer: Timer | None,
    weighing: Weighing | None = None,
    compare: Timer | None = None,
    exported: Exported | None = None,
) -> tuple[Plan, Sequence[str] | None]:
    """The decode step's plan, and the backends it was planned on where a graph runtime alone won
    (None: the ranked plan). Without ``backends`` and with ``compare`` (the timer, or a quantized
    plan's own), the ranked plan (measured as ``capture`` measures with ``timer``) is timed against a
    plan on each graph runtime alone (with the torch backend
    for what it declines; its partitions kept by the estimated cost rule), one at a time, and the
    faster stays: the graph runtimes' rank is a default, and a step called once per token is where
    their fixed cost per call and their kernels for one row show (on a 2-core EPYC an OpenVINO infer
    of a tiny model costs ~90 us, ONNX Runtime's a few tens). A plan that loses is dropped before the
    next is built, so at most two hold their runtimes' copies of the weights at once.

    A MoE model's experts compete in both exported forms (opcore.graph.experts) the same way:
    GATHERED (the experts' products on torch between partitions, no weight copied) and ONE_TOKEN
    (gather + bmm inside a partition, each chosen expert copied per token: the faster for small
    experts, 2.3x slower than GATHERED at 64 experts of 1024 x 768). Unmeasured, a MoE decode step is
    GATHERED on the host and ONE_TOKEN on a GPU (whose decode step is replayed as a CUDA graph, which
    gather_mm's host-side grouping would break)."""
    import gc

    from opcore.graph.experts import GATHERED, ONE_TOKEN

    split = splits(place, backends)
    wide = split_dtypes(backends) if split else frozenset()
    on_host = place.type.value == "cpu"
    if exported is not None:  # specialized from the prefill's export (_export_both)
        lowered = _finish_step(exported, max_length, weighing, split, wide, on_host)
    else:
        lowered = _lower_step(
            module, batch_size, max_length, 1, place, weighing, split, wide, GATHERED if on_host else ONE_TOKEN
        )
    best = _plan(lowered, place, backends, timer, partitions=True)
    # each plan with partitions against the torch route at a filled cache (no packed weights held by
    # the reference: it runs only where the ranked plan parts)
    check = _Reference(place, backends, weighing, False, _filled)
    filled = f"at position {min(AT, max_length - 1)} of a filled cache"
    if (apart := check.parted(best, lowered)) is not None:
        best = check.route(lowered)
        best.notes.insert(
            0,
            f"decode step: the ranked plan's partitions dropped (its logits {apart:.1e} from the torch route's "
            f"(relative) {filled}): runs the torch route",
        )
        return best, None
    if backends is not None or compare is None or not on_host:
        return best, None
    from opcore.graph.options import torch_route
    from opcore.graph.partition import compilers

    torch_backend = torch_route(best.options).backends or ("cpu",)
    label, told, alone = "ranked", [], None
    forms: list[tuple[str, Lowered | None]] = [("", lowered)]
    if any(node.op == "gather_mm" for node in lowered.graph.nodes):
        forms.append((" (experts as gather + bmm)", None))  # lowered when its turn comes
    for form, ready in forms:
        step = ready or _lower_step(module, batch_size, max_length, 1, place, weighing, split, wide, ONE_TOKEN)
        # the first form's ranked plan is ``best`` already
        candidates: list[tuple[str, Sequence[str] | None]] = [] if ready else [(f"ranked{form}", None)]
        candidates += [(f"{name} alone{form}", (name, *torch_backend)) for name in sorted(compilers())]
        # the runtime whose partitions run all of this form's ranked plan: alone, it would be the same
        # plan, planned and compiled again and timed against itself (or against what beat it already)
        same = only_partitions_of(best) if ready else None
        for name, runs_on in candidates:
            if runs_on is not None and runs_on[0] == same:
                told.append(f"{name}: the ranked{form} plan already")
                continue
            if runs_on is not None and (few := _few_nodes(step, runs_on[0])):
                told.append(f"{name}: not timed ({few})")
                continue
            try:
                other = _plan(step, place, runs_on, timer if runs_on is None else None, partitions=True)
            except Exception as error:  # a runtime that cannot take this model: the others still compete
                told.append(f"{name} not planned ({type(error).__name__}: {error})")
                continue
            if runs_on is None:
                same = only_partitions_of(other)
            if (apart := check.parted(other, step)) is not None:
                told.append(f"{name} dropped: its logits {apart:.1e} from the torch route's (relative) {filled}")
                del other
                gc.collect()
                continue
            try:
                times = compare({label: _runner(best, lowered), name: _runner(other, step)})
            except OpcoreError as error:  # a runtime whose plan fails on this step's inputs: it does not compete
                if _fails(best, lowered):
                    raise
                told.append(f"{name} failed ({type(error).__name__}: {str(error).splitlines()[0]})")
                del other
                gc.collect()
                continue
            told.append(f"{label} {times[label] * 1e6:.0f} us against {name} {times[name] * 1e6:.0f} us")
            if times[name] < times[label]:
                best, label, lowered, alone = other, name, step, runs_on
            del other
            gc.collect()
    best.notes.insert(0, f"decode step measured at capture: {'; '.join(told)}: runs {label}")
    return best, alone


class _Reference:
    """A step's plans against its nodes run on the kernels (the torch route on the host) on one feed
    (``feed``: the step's inputs and its cache, None for a new one), one route per lowered form:
    a runtime whose lowering is wrong for this model does not run, however fast. ``copies``: the
    route's weight copies (opcore.weight_copies), for where it runs in the plan's place."""

    def __init__(
        self,
        place: Device,
        backends: Sequence[str] | None,
        weighing: Weighing | None,
        copies: bool,
        feed: Callable[[Lowered], tuple[tuple[Any, ...], list[Any] | None]],
    ) -> None:
        self.place, self.backends, self.weighing, self.copies, self.feed = place, backends, weighing, copies, feed
        self.references: dict[int, tuple[Plan, tuple[Any, ...], list[Any] | None, Any]] = {}

    def _known(self, step: Lowered) -> tuple[Plan, tuple[Any, ...], list[Any] | None, Any]:
        known = self.references.get(id(step))
        if known is None:
            route = _plan(step, self.place, self.backends, None, False, self.copies)
            feed, state = self.feed(step)
            known = self.references[id(step)] = (route, feed, state, _Kept(route, feed, state).logits())
        return known

    def route(self, step: Lowered) -> Plan:
        """The torch route of ``step``."""
        return self._known(step)[0]

    def parted(self, plan: Plan, step: Lowered) -> float | None:
        """How far ``plan``'s logits part from the route's, relative to their scale, where beyond the
        bound (``_tolerance``); None where they agree or ``plan`` has no partitions."""
        if not plan.partitions:
            return None
        _, feed, state, want = self._known(step)
        apart = _apart(_Kept(plan, feed, state).logits(), want)
        return apart if apart > _tolerance(step, self.weighing) else None


# the position of the decode step's check (or the cache's last, if shorter)
AT = 24


def _filled(step: Lowered) -> tuple[tuple[Any, ...], list[Any] | None]:
    """The decode step's inputs at position AT (varied ids, the mask over AT + 1 tokens) and a cache
    holding seeded values of the scale of a model's keys and values: a step at the cache's start
    attends to its own position alone, which a wrong attention still gets right."""
    import torch

    ids, positions, slot, mask, *window = _varied(step)
    at = min(AT, mask.shape[1] - 1)
    mask = torch.zeros_like(mask)
    mask[:, : at + 1] = 1
    seeded = torch.Generator().manual_seed(1)
    state = new_state(step.graph)
    for value in state:
        if value.is_floating_point():
            value.copy_(torch.randn(value.shape, generator=seeded).to(value.dtype))
    return (ids, torch.full_like(positions, at), torch.full_like(slot, at), mask, *window), state


def _few_nodes(lowered: Lowered, runtime: str) -> str:
    """Why ``runtime`` alone is not worth planning and timing for this step ("" where it is): its
    compiler supports the ops of fewer than half of the step's nodes (the Python steps aside). Its
    plan would run the rest on the torch backend node by node: about the torch route, which the
    ranked plan is timed against where capture measures (its guard), with a few partitions of no
    weight.
    A vendor runtime of a handful of ops (the example plugin's silu and swiglu) then costs the capture
    nothing; its partitions still compete inside the ranked plan, each against its nodes."""
    from opcore.graph.partition import compilers

    compiler = compilers().get(runtime)
    if compiler is None:
        return ""
    ops = Counter(node.op for node in lowered.graph.nodes if not node.scalar and not node.op.startswith("state."))
    held = sum(count for op, count in ops.items() if _supports(compiler, op))
    nodes = sum(ops.values())
    if 2 * held >= nodes:
        return ""
    return f"its partitions could hold {held} of the step's {nodes} nodes; the rest would run as the torch route"


def _supports(compiler: Any, op: str) -> bool:
    """``compiler.supports(op)``; a plugin whose answer raises does not take the op (the plan that
    asks it again declines the backend: opcore.graph.partitioning)."""
    try:
        return answer(compiler, "supports", op)
    except CompilerCrash:
        return False


def only_partitions_of(plan: Plan) -> str | None:
    """The graph runtime whose partitions run every node of ``plan`` (the Python steps aside: state
    writes, size computations); None where any node runs on a kernel or two runtimes share them."""
    runtimes = {d.backend for d in plan.decisions if d.backend != "python"}
    if len(runtimes) != 1 or any(d.partition is None for d in plan.decisions if d.backend != "python"):
        return None
    return runtimes.pop()


def _fails(plan: Plan, lowered: Lowered) -> bool:
    """Whether one run of ``plan`` on the step's examples raises an opcore error."""
    try:
        _runner(plan, lowered)()
    except OpcoreError:
        return True
    return False


def _prefill_plan(
    module: Any,
    batch_size: int,
    max_length: int,
    place: Device,
    backends: Sequence[str] | None,
    timer: Timer | None,
    partitions: bool | None,
    weighing: Weighing | None = None,
    copies: bool = True,
    alone: Sequence[str] | None = None,
    compare: Timer | None = None,
    exported: Exported | None = None,
) -> Plan:
    """The prefill's plan: on the torch route, or with graph-runtime partitions (kept by the estimated
    cost rule; their shapes are dynamic), or (``partitions`` None, measuring, on the host) the fastest
    on a prompt of min(PROMPT, max_length) tokens, the length it is exported on, of the torch route,
    the ranked partitions and, where the decode step's measurement chose a graph runtime alone
    (``alone``: its backends), the partitions on that runtime alone; where only the decode step is
    measured (``compare``: a quantized model whose float weights are above MEASURE_BYTES), the torch
    route against that runtime's partitions. Prefill is GEMMs over the
    prompt: where a runtime's GEMMs beat torch's the partitions win (a 30-layer 135M decoder here:
    258 ms against 560 ms for 128 tokens), on a small model the partitions' calls can cost more than
    they save. The third candidate is the quantized decoders' (a 0.5B int4 one here: the ranked route
    puts each ``linear_wq`` on OpenVINO, 1.0 s a 128-token prompt at 1 thread, 1.2-2.4 s at 2 threads
    beside torch's pool; on ONNX Runtime alone, where its decode step runs, 0.58-0.6 s), and with it
    prompt and steps compute on the same kernels."""
    import gc

    # exported and planned on a prompt of the length it is measured on: the kernels prepare for
    # (and the cpu backend measures its weight packing at) a prompt's rows, not a toy's
    if exported is None:
        exported = _stateful(module, _export_step(module, batch_size, max_length, min(PROMPT, max_length), place))
    lowered = _finish_step(exported, max_length, weighing, window=place.type.value == "cpu")
    # for partitions, each write's readers read the written cache as a value (read_written): no
    # partition waits for a write, and the prompt is one partition where it was one a layer (the
    # 135M shape's 31); the torch route writes in place and reads the cache after, as the model does
    # (the value costs a gather and a select the size of the cache, per write)
    read = _read_written(lowered) if partitions is not False and splits(place, backends) else lowered
    measure = timer or (compare if alone is not None else None)
    if partitions is not None or measure is None or place.type.value != "cpu":
        if not partitions:
            return _plan(lowered, place, backends, None, False, copies)
        plan, said = _checked(
            _plan(read, place, backends, None, True, copies), lowered, place, backends, weighing, copies
        )
        if said:
            plan.notes.insert(0, f"prefill (prefill_partitions=True){said}")
        return plan
    plans = {"torch route": _plan(lowered, place, backends, None, False, copies)}
    ranked = None
    if timer is not None:  # measuring the model: its ranked partitions compete
        ranked = _plan(read, place, backends, None, True, copies)
        if ranked.partitions:
            plans["partitions"] = ranked
    # the ranked partitions on that runtime already: the same plan, planned again
    if alone is not None and (ranked is None or only_partitions_of(ranked) != alone[0]):
        other = _plan(read, place, alone, None, True, copies)
        if other.partitions:
            plans[f"{alone[0]} alone"] = other
        del other
    del ranked
    if len(plans) == 1:
        return plans["torch route"]
    # timed on a prompt of varied tokens, each route's first logits kept: a route whose logits part
    # from the torch route's (a runtime's lowering wrong for this model) does not run, however fast
    varied = _varied(lowered)
    runners = {label: _Kept(plan, varied) for label, plan in plans.items()}
    times = dict(measure(runners))
    measured = ", ".join(f"{label} {seconds * 1e3:.1f} ms" for label, seconds in times.items())
    wrong = []
    tolerance = _tolerance(lowered, weighing)
    for label in [label for label in times if label != "torch route"]:
        apart = _apart(runners[label].logits(), runners["torch route"].logits())
        if apart > tolerance:
            wrong.append(f"{label} dropped: its logits {apart:.1e} from the torch route's (relative)")
            del times[label]
    faster = min(times, key=times.__getitem__)
    chosen = plans[faster]
    chosen.notes.insert(
        0,
        f"prefill measured at capture on {lowered.examples[0].shape[1]} tokens: {measured}: runs {faster}"
        + "".join(f"; {said}" for said in wrong),
    )
    del plans
    gc.collect()
    return chosen


def _varied(lowered: Lowered) -> tuple[Any, ...]:
    """The step's examples with varied token ids (seeded; within the ids' bound): the examples' ids
    are all 0, every position alike, which an attention mixing positions wrongly still gets right."""
    import torch

    ids, *rest = lowered.examples
    bound = lowered.graph.bounds.get(lowered.graph.inputs[0])
    high = bound[1] + 1 if bound is not None else 2
    varied = torch.randint(0, high, ids.shape, generator=torch.Generator().manual_seed(0)).to(ids.device)
    return (varied, *rest)


def _runner(plan: Plan, lowered: Lowered) -> Any:
    """``plan`` run on the step's examples and a new cache (the decode step's timed cases)."""
    return _Kept(plan, lowered.examples)


class _Kept:
    """A plan run on ``feed`` and a new cache (or a copy of ``state``), its first logits kept
    (cloned): a timer's case, and what the checks against the torch route read (run once more where
    the timer made no call)."""

    def __init__(self, plan: Plan, feed: tuple[Any, ...], state: Sequence[Any] | None = None) -> None:
        cache = [value.clone() for value in state] if state is not None else new_state(plan.graph)
        self.program, self.feed = plan.program, [*feed, *cache]
        self.first: Any = None

    def __call__(self) -> Any:
        out = self.program.run(self.feed)
        if self.first is None:
            self.first = out[0].detach().float().clone()
        return out

    def logits(self) -> Any:
        if self.first is None:
            import torch

            with torch.no_grad():
                self()
        return self.first


def _apart(got: Any, want: Any) -> float:
    """The largest difference of ``got`` from ``want`` over ``want``'s largest magnitude."""
    if got.shape != want.shape:
        return float("inf")
    scale = max(float(want.abs().max()) if want.numel() else 0.0, 1e-6)
    return float((got - want).abs().max()) / scale if want.numel() else 0.0


# how far a route's logits may be from the torch route's on the same graph (relative to their
# scale): float32 computed in another order stays near 1e-6; a quantized or half-precision graph's
# runtimes round activations their own way, an error that grows with depth: ONNX Runtime's
# MatMulNBits (accuracy level 4) quantizes x per block, 5.1e-2 from the torch route's logits at the
# Qwen2-0.5B shape's decode step in int8 (24 layers; its root-mean-square error as large: a spread,
# not one outlier), which a bound of 5e-2 dropped on an AMX Xeon. A lowering that is wrong for a model
# is far beyond either (JetMoE's attention on OpenVINO's dynamic prefill: 0.15-0.72 in float32; the
# CPU plugin's attention bug behind it: 1.4 and more)
AGREE_FLOAT32 = 1e-3
AGREE_ROUNDED = 0.15


def _tolerance(lowered: Lowered, weighing: Weighing | None) -> float:
    """AGREE_FLOAT32 for a float32 graph of float weights, else AGREE_ROUNDED."""
    from opcore.graph.ir import ValueRef

    out = lowered.graph.outputs[0]
    dtype = lowered.graph.meta(out.name).dtype if isinstance(out, ValueRef) else None
    return AGREE_FLOAT32 if weighing is None and dtype == DType.FLOAT32 else AGREE_ROUNDED


def _draft_tokens(value: Any, configured: Any, max_length: int) -> int:
    """The verify step's drafted tokens: the call's, else the generation config's
    prompt_lookup_num_tokens, else 0; checked against the cache (the step writes after at least one
    token)."""
    if value is None:
        value = configured if isinstance(configured, int) and not isinstance(configured, bool) else 0
        value = min(max(value, 0), max(max_length - 2, 0))
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ArgumentError(op=_CAPTURE_LM, arg="draft_tokens", expected="an int >= 0", found=repr(value))
    if value and value + 2 > max_length:
        raise ArgumentError(
            op=_CAPTURE_LM,
            arg="draft_tokens",
            expected=f"at most max_length - 2 = {max_length - 2}: the verify step writes the last token and "
            "the drafted ones after at least one token of the prompt",
            found=str(value),
            fix=f"capture_lm(..., draft_tokens={max(max_length - 2, 0)}) or a longer max_length",
        )
    return value


def _verify_plan(
    module: Any,
    batch_size: int,
    max_length: int,
    drafts: int,
    place: Device,
    backends: Sequence[str] | None,
    weighing: Weighing | None,
    copies: bool,
) -> Plan:
    """The verify step's plan (opcore.graph.prompt_lookup): 2 to ``drafts`` + 1 tokens in (a dynamic
    length: a short draft costs its own positions), the logits of each out (transformers'
    ``logits_to_keep=0``; the prompt's step keeps the last position's alone, and a slice of the last
    n positions from a dynamic length makes torch.export guard the length at n and more). Planned on
    ``backends`` (the runtime the decode step chose, where it chose one alone), its partitions by the
    estimated cost rule: it runs as often as the decode step, on a few positions more."""
    from opcore.graph.decoder import CachedDecoder
    from opcore.graph.ir import ValueRef

    length = drafts + 1
    cached = isinstance(module, CachedDecoder)
    if cached:
        module.keep = 0  # transformers' logits_to_keep=0: every position's
    try:
        exported = _stateful(module, _export_step(module, batch_size, max_length, length, place, longest=length))
    finally:
        if cached:
            module.keep = 1
    # on the host its attentions read the slots up to the last one written (the window), as a prompt's
    lowered = _finish_step(exported, max_length, weighing, window=place.type.value == "cpu")
    graph = lowered.graph
    out = graph.outputs[0]
    shape = tuple(graph.meta(out.name).shape) if isinstance(out, ValueRef) else ()
    tokens = graph.meta(graph.inputs[0]).shape[1]
    if len(shape) != 3 or shape[1] != tokens:
        raise CaptureError(
            f"the verify step of {tokens} tokens returns logits of shape {shape}: prompt lookup needs the "
            "logits of every position of the step",
            op=_CAPTURE_LM,
            fix="return logits of shape (batch, tokens, vocab) from the module's forward (docs/generate.md, "
            "'Your own module'), or capture_lm(..., draft_tokens=0)",
        )
    read = _read_written(lowered) if splits(place, backends) else lowered
    plan, said = _checked(_plan(read, place, backends, None, True, copies), lowered, place, backends, weighing, copies)
    if not _causal(plan, lowered):
        raise CaptureError(
            f"{type(getattr(module, 'model', module)).__name__}'s step is not causal: the logits of a step's "
            "first token change with the tokens after it, so drafts verified in one step would change the "
            "tokens greedy search makes (a BERT-style model without is_decoder=True attends both ways)",
            op=_CAPTURE_LM,
            fix="set model.config.is_decoder = True before capture where the model is meant as a decoder, "
            "or capture_lm(..., draft_tokens=0)",
        )
    plan.notes.insert(
        0,
        f"verify step: {length} tokens a call (the last token and up to {drafts} drafted), the logits of each" + said,
    )
    return plan


def _checked(
    plan: Plan,
    lowered: Lowered,
    place: Device,
    backends: Sequence[str] | None,
    weighing: Weighing | None,
    copies: bool,
) -> tuple[Plan, str]:
    """``plan`` where it has no partitions or their logits agree with the torch route's on a prompt of
    varied tokens, else the torch route; and what to say of it ("" where ``plan`` stays): a
    runtime's lowering wrong for this model (OpenVINO's attention at head size 128 over a dynamic
    length was one: docs/backends/openvino.md) leaves the torch route."""
    check = _Reference(place, backends, weighing, copies, lambda step: (_varied(step), None))
    apart = check.parted(plan, lowered)
    if apart is None:
        return plan, ""
    route = check.route(lowered)
    return route, f"; its partitions' logits were {apart:.1e} from the torch route's (relative): runs the torch route"


def _causal(plan: Plan, lowered: Lowered) -> bool:
    """Whether the step's first logits stay the same when the tokens after the first change (two runs
    of the plan on the examples, each on a new cache): a causal decoder's do, to rounding."""
    ids, *rest = lowered.examples
    firsts = []
    for later in (0, 1):
        changed = ids.clone()
        changed[:, 1:] = later
        firsts.append(_Kept(plan, (changed, *rest)).logits()[:, 0])
    return _apart(firsts[1], firsts[0]) <= 1e-4


def step_examples(batch_size: int, max_length: int, length: int, device: Any) -> tuple[Any, ...]:
    """The protocol's inputs for a step of ``length`` tokens at the start of the cache."""
    import torch

    ids = torch.zeros(batch_size, length, dtype=torch.long, device=device)
    positions = torch.arange(length, device=device).expand(batch_size, length).contiguous()
    cache_position = torch.arange(length, device=device)
    mask = torch.zeros(batch_size, max_length, dtype=torch.long, device=device)
    mask[:, :length] = 1
    return ids, positions, cache_position, mask


def splits(place: Device, backends: Sequence[str] | None) -> bool:
    """Whether the decode step's attention is split so that the step can be one partition: on the CPU
    where a graph runtime may take it. Where no runtime does (the torch route, a CUDA graph replaying
    the step), the one fused attention per layer is faster than the split's ~20 nodes."""
    from opcore.graph.partition import compilers

    runtimes = set(compilers())
    return place.type.value == "cpu" and any(name in runtimes for name in (backends or runtimes))


def split_dtypes(backends: Sequence[str] | None) -> frozenset[DType]:
    """The dtypes besides float32 whose decode attention is split: bfloat16 where a graph runtime
    computes it in float32 (a partition compiler's ``bfloat16_as``), so that the split runs in its
    partition; elsewhere the split's nodes would run per node, rounding each to bfloat16."""
    from opcore.graph.partition import compilers

    runtimes = compilers()
    wide = any(getattr(runtimes.get(name), "bfloat16_as", None) == "float32" for name in (backends or runtimes))
    return frozenset({DType.BFLOAT16}) if wide else frozenset()


def _lower_step(
    module: Any,
    batch_size: int,
    max_length: int,
    length: int,
    place: Device,
    weighing: Weighing | None = None,
    split: bool = False,
    wide: frozenset[DType] = frozenset(),
    experts: str | None = None,
) -> Lowered:
    """One step exported and lowered: ``length`` 1 is the decode step; more, the prefill with a
    dynamic sequence dim (2 .. max_length); ``weighing``: its linears quantized; ``split``: its
    attention over the just-written cache split (opcore.graph.split_attention), in float32 and in the
    dtypes ``wide`` (``split_dtypes``); ``experts``: how MoE experts are exported (opcore.graph.experts;
    None: GATHERED). On the host its attentions read a window of the cache (``_finish_step``)."""
    exported = _stateful(module, _export_step(module, batch_size, max_length, length, place, experts))
    return _finish_step(exported, max_length, weighing, split, wide, place.type.value == "cpu")


@dataclass(frozen=True, slots=True)
class Exported:
    """One step as exported and lowered, before the rewrites: the program, its constants, the graph,
    the ATen-fallback notes, the examples and the seconds it took."""

    program: Any
    constants: dict[str, Any]
    graph: Any
    notes: dict[str, str]
    examples: tuple[Any, ...]
    seconds: float
    said: str = ""  # how the graph came to be, where not by its own export (explain's notes)


def _export_step(
    module: Any,
    batch_size: int,
    max_length: int,
    length: int,
    place: Device,
    experts: str | None = None,
    shortest: int = 2,
    longest: int | None = None,
) -> Exported:
    """The step of ``length`` tokens exported and lowered (see ``_lower_step``); a dynamic one from
    ``shortest`` tokens up to ``longest`` (None: max_length)."""
    from torch.export import Dim

    from opcore.graph.aten_export import with_source_lines
    from opcore.graph.capturing import export, program_constants
    from opcore.graph.experts import GATHERED
    from opcore.graph.lowering import lower

    examples = step_examples(batch_size, max_length, length, str(place))
    dynamic = None
    if length > 1:
        seq = Dim("seq", min=shortest, max=longest or max_length)
        dynamic = ({1: seq}, {1: seq}, {0: seq}, None)
    started = time.perf_counter()

    def export_and_lower(traces: bool) -> tuple[Any, dict[str, Any], Any, dict[str, str]]:
        try:
            program = export(module, examples, {}, dynamic, experts=experts or GATHERED, traces=traces)
        except CaptureError as error:
            # the export's own fix speaks of capture's options (a submodule), which capture_lm has not
            from opcore.graph.decoder import CachedDecoder

            fix = (
                "where torch.export cannot trace this decoder's step with a static cache (try batch_size=1 "
                "too), opcore.graph.capture(model, (ids,), {'use_cache': False}) runs its forward without a "
                "cache"
                if isinstance(module, CachedDecoder)
                else "write the step so that torch.export traces it (no Python branch on a tensor's values), "
                "as the protocol in docs/generate.md asks"
            )
            raise CaptureError(
                f"the {'decode' if length == 1 else 'verify' if longest else 'prefill'} step could not be exported: "
                f"{error.args[0]}",
                op=_CAPTURE_LM,
                fix=fix,
            ) from error
        constants = program_constants(program, place)
        graph, notes = lower(program, list(examples), constants, place, state=True)
        return program, constants, graph, notes

    program, constants, graph, notes = with_source_lines(export_and_lower)
    return Exported(program, constants, graph, notes, examples, time.perf_counter() - started)


def _stateful(module: Any, exported: Exported) -> Exported:
    """``exported``, where its graph writes state (the KV cache); else the CaptureError saying so."""
    if not exported.graph.state:
        raise CaptureError(
            f"{type(module).__name__} mutates no buffer: capture_lm needs the KV cache as buffers written in place",
            op=_CAPTURE_LM,
            fix="follow the protocol in docs/generate.md (the cache as buffers, index_copy_ at cache_position)",
        )
    return exported


def _export_both(
    module: Any, batch_size: int, max_length: int, place: Device
) -> tuple[Exported, Exported | None] | None:
    """(prefill, decode) from one export: the prefill's, its sequence dim declared from 1 token, and
    the decode step's graph specialized from it at length 1 (opcore.graph.specialize): one export
    where there were two (3.3-3.9 s of a 135M decoder's capture saved). The export assumes sizes of 2
    and more (torch's 0/1 specialization: a branch of the model's code on a length of 1, ``if q_len
    == 1``, is taken as for 2 without a guard), so the program is run once at one token against the
    module itself first (``_agrees_at_one_token``); where they differ, or the graph holds what
    specialize does not make static, decode is None: the caller exports that step on its own. None
    where this export fails: the caller exports both steps as before (and says why, if they fail too)."""
    from opcore.graph.specialize import NotSpecialized, specialize, symbols_of

    try:
        prefill = _export_step(module, batch_size, max_length, min(PROMPT, max_length), place, shortest=1)
    except CaptureError:
        return None
    _stateful(module, prefill)
    started = time.perf_counter()
    graph = prefill.graph
    try:
        symbol = symbols_of(graph, {graph.inputs[0]: 1})[graph.inputs[0]]
    except NotSpecialized:
        return prefill, None
    # the prefill plan takes 2 tokens and more, as before: one token is the decode step's
    prefill = replace(prefill, graph=_from_two_tokens(graph, symbol))
    examples = step_examples(batch_size, max_length, 1, str(place))
    if not _agrees_at_one_token(module, prefill.program, examples):
        return prefill, None
    try:
        decode = specialize(graph, {symbol: 1})
    except NotSpecialized:
        return prefill, None
    seconds = time.perf_counter() - started
    said = f"decode graph: the prefill's export at 1 token (opcore.graph.specialize, {seconds * 1e3:.0f} ms)"
    return prefill, Exported(prefill.program, dict(prefill.constants), decode, prefill.notes, examples, seconds, said)


def _from_two_tokens(graph: Any, symbol: str) -> Any:
    """``graph`` with its call signature's range of ``symbol`` (the sequence) starting at 2."""
    signature = graph.signature
    if signature is None or symbol not in signature.ranges:
        return graph
    lo, hi = signature.ranges[symbol]
    ranges = {**signature.ranges, symbol: (max(lo, 2), hi)}
    return replace(graph, signature=replace(signature, ranges=ranges))


def _agrees_at_one_token(module: Any, program: Any, examples: tuple[Any, ...]) -> bool:
    """Whether the exported program computes, for one token, the logits and the cache writes that the
    module computes (its buffers as they were before and after). False where either raises."""
    import torch

    buffers = dict(module.named_buffers())
    before = {name: tensor.clone() for name, tensor in buffers.items()}

    def restore() -> None:
        for name, tensor in buffers.items():
            tensor.copy_(before[name])

    def close(got: Any, want: Any, scale: float) -> bool:
        return (
            isinstance(got, torch.Tensor) and got.shape == want.shape and torch.allclose(got, want, 1e-3, 1e-4 * scale)
        )

    try:
        want = module(*examples)
        written = {name: tensor.clone() for name, tensor in buffers.items()}
        restore()
        ran = _run_lifted(program, examples)
        if ran is None:
            return False
        got, theirs = ran
        want, got = (value[0] if isinstance(value, (tuple, list)) else value for value in (want, got))
        scale = max(float(want.abs().max()) if want.numel() else 1.0, 1.0)
        shared = [name for name in written if name in theirs]
        return bool(shared) and close(got, want, scale) and all(close(theirs[n], written[n], scale) for n in shared)
    except Exception:  # a program that cannot run here is not specialized; its own export says why if it fails
        return False
    finally:
        restore()


def _run_lifted(program: Any, examples: tuple[Any, ...]) -> tuple[Any, dict[str, Any]] | None:
    """The exported program run as exported (its graph module, weights and buffers passed in, the
    buffers' new values returned, nothing written): its first user output and the buffers it writes,
    by name; None where its inputs are not what this reads. ``program.module()`` would generate and
    compile the unlifted module's Python first: 1.0-1.3 s of a 135M decoder's capture."""
    from torch.export.graph_signature import InputKind, OutputKind
    from torch.utils import _pytree

    signature = program.graph_signature
    given = iter(_pytree.tree_flatten((examples, {}))[0])
    state, constants = program.state_dict, program.constants
    arguments = []
    for spec in signature.input_specs:
        if spec.kind is InputKind.USER_INPUT:
            arguments.append(next(given, None))
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            arguments.append(state[spec.target] if spec.target in state else constants.get(spec.target))
        else:  # tokens, script objects: not a decoder's
            return None
    if any(argument is None for argument in arguments) or next(given, None) is not None:
        return None
    outputs = program.graph_module(*arguments)
    users = [out for spec, out in zip(signature.output_specs, outputs) if spec.kind is OutputKind.USER_OUTPUT]
    written = {
        spec.target: out
        for spec, out in zip(signature.output_specs, outputs)
        if spec.kind is OutputKind.BUFFER_MUTATION and spec.target is not None
    }
    return (users[0], written) if users else None


def _finish_step(
    exported: Exported,
    max_length: int,
    weighing: Weighing | None = None,
    split: bool = False,
    wide: frozenset[DType] = frozenset(),
    window: bool = False,
) -> Lowered:
    """The exported step with its call spec and bounds, its weights quantized and the rewrites
    applied (see ``_lower_step``; ``window``: its attentions over the cache read the first W slots,
    W an input: opcore.graph.split_attention's ``window`` where split, else ``window_prompt``);
    ``exported.constants`` is copied, not changed."""
    from torch.utils import _pytree

    from opcore.graph.masks import drop_full_masks
    from opcore.graph.quantizing import quantize_weights
    from opcore.graph.rewrite import apply_rewrites

    started = time.perf_counter()
    graph, constants, program = exported.graph, dict(exported.constants), exported.program
    graph = replace(
        graph,
        in_spec=_pytree.treespec_dumps(program.call_spec.in_spec),
        out_spec="",
        bounds=input_bounds(graph, max_length),
    )
    said: list[str] = []
    if weighing is not None:
        graph, said = quantize_weights(graph, constants, weighing.spec, weighing.cache)
    graph, applied = apply_rewrites(graph)
    applied[:0] = [*([exported.said] if exported.said else []), *said]
    graph, dropped = drop_full_masks(graph, constants)
    if dropped:
        applied.append(f"rewrite full attention mask dropped: {dropped} match{'es' * (dropped != 1)}")
    if window and not split:
        graph, windowed = window_prompt(graph, constants, max_length)
        if windowed:
            read = f"{windowed} attention{'s' * (windowed != 1)} read the cache's first W slots (W <= {max_length})"
            applied.append(f"attention window: {read}")
    split_window = False
    if split:
        graph, parted = split_attention(graph, constants, wide, window=max_length if window else None)
        if parted:
            applied.append(f"rewrite split_attention: {parted} match{'es' * (parted != 1)}")
        split_window = WINDOW in graph.inputs
    if window:
        graph, scored = window_scores(graph, constants, max_length)
        if scored:
            read = (
                f"{scored} attention{'s' * (scored != 1)} reading the cache through other ops (scores as matmuls, "
                "a latent's up-projection) read its first W slots"
            )
            applied.append(f"attention window: {read} (W <= {max_length})")
    examples = exported.examples
    if WINDOW in graph.inputs:
        import torch

        # a decode step is timed and checked at the window of a step after a prompt of PROMPT tokens
        # (the check's position AT within it), a prompt at its own: what they read in a conversation
        tokens = examples[0].shape[1]
        width = window_length(min(PROMPT, max_length - 1) if tokens == 1 else tokens - 1, max_length)
        examples = (*examples, torch.arange(width, device=examples[0].device))
        if split_window:
            applied.append(f"decode window: the split attention reads the cache's first W slots (W <= {max_length})")
    lowered = Lowered(graph, constants, exported.notes, applied, examples, exported.seconds)
    if split:
        lowered = _read_written(lowered)
    return replace(lowered, seconds=exported.seconds + time.perf_counter() - started)


def _read_written(lowered: Lowered) -> Lowered:
    """``lowered`` with each written cache's other readers reading it as a value
    (opcore.graph.split_attention.read_written); its constants copied, not changed."""
    constants = dict(lowered.constants)
    graph, moved, windowed = read_written(lowered.graph, constants)
    if not moved:
        return lowered
    at = f"; {windowed} at the window's slots alone" if windowed else ""
    said = f"rewrite read_written: {moved} match{'es' * (moved != 1)} (the written cache as a value{at})"
    return replace(lowered, graph=graph, constants=constants, applied=[*lowered.applied, said])


def _plan(
    lowered: Lowered,
    place: Device,
    backends: Sequence[str] | None,
    timer: Timer | None,
    partitions: bool,
    copies: bool = True,
) -> Plan:
    started = time.perf_counter()
    graph = lowered.graph
    options = PlanOptions(
        backends=tuple(backends) if backends is not None else None,
        device=str(place),
        partitions=partitions and place.type.value == "cpu",
        route="planned",
        weight_copies=copies,
        # the prefill's prompt lengths vary from call to call: its dynamic partitions compile no
        # static model of a length met thrice (opcore.shape_compiles; a stall of seconds, no gain)
        shape_compiles=not any(info.dynamic_axes for info in graph.values.values()),
    )
    plan = assemble(
        graph, lowered.constants, options, lowered.notes, examples=[*lowered.examples, *new_state(graph)], timer=timer
    )
    plan.notes[:0] = lowered.applied
    plan.timings.capture = lowered.seconds
    plan.timings.plan = time.perf_counter() - started
    return plan


def input_bounds(graph: Any, max_length: int) -> dict[str, tuple[int, int]]:
    """What the protocol's inputs hold (a Session checks the token ids; it makes the rest): ids below
    the vocabulary (the rows of the embedding tables reading them, else the logits' width), positions
    and cache slots below max_length, a 0/1 mask. Graph runtimes that compute int64 narrower take the
    position arithmetic on this proof (opcore.graph.ranges)."""
    from opcore.graph.ir import ValueRef

    ids, positions, slots, mask = graph.inputs[:4]
    vocab = graph.meta(graph.outputs[0].name).shape[-1] if isinstance(graph.outputs[0], ValueRef) else None
    for node in graph.nodes:
        if node.op in ("embedding", "embedding_wq") and ValueRef(ids) in node.args:
            tables = [a for a in node.args if isinstance(a, ValueRef) and a.name in graph.constants]
            rows = [graph.meta(t.name).shape[0] for t in tables if graph.meta(t.name).ndim == 2]
            vocab = min([*rows, *([vocab] if vocab is not None else [])])
    bounds = {positions: (0, max_length - 1), slots: (0, max_length - 1), mask: (0, 1)}
    if vocab is not None:
        bounds[ids] = (0, vocab - 1)
    return bounds
