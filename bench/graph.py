"""Whole models: eager PyTorch, torch.compile, the graph runtimes used directly, and opcore.graph plans.

Models (random weights, fp32, built from configs: nothing is downloaded): three Hugging Face
``transformers`` architectures — a Llama-style decoder (LlamaForCausalLM), GPT-2 (GPT2LMHeadModel)
and BERT (BertModel) — each with 2 layers, hidden 512, 8 heads, vocabulary 4096, on 64 tokens;
and a small ResNet-style CNN written here (three stages of two basic blocks, BatchNorm, 64x64
images). Batch 1 and 8, torch.set_num_threads(2) (ONNX Runtime and OpenVINO use their defaults,
which are the machine's cores: 2 here). Medians of interleaved rounds (bench/_timing.py), each
sample after one untimed call, so that a column is timed as it runs in a loop; the first call of
the ranked plan right after eager (and of eager right after it) is printed apart ("switching").

Columns: eager; torch.compile (Inductor, compile time apart); OpenVINO ``convert_model`` used
directly and an ONNX Runtime session of ``torch.onnx.export`` (each where it works, else why
not); the opcore plan ranked by default, and plans restricted to openvino or onnxruntime
partitions (+ the cpu backend for what they do not take), each also frozen (``capture(freeze=True)``:
the weights are not compared before each call, as in the runtimes used directly, whose weights are
baked in; right after a runtime's run that comparison finds its ~90 tensors out of the CPU's caches:
~0.1 ms a call); the torch route two ways — "route 1
step", ``capture(route="torch")``: the exported program run by torch as one step (what a plan runs
where the guard picks the torch route), and "route per node": the same route through opcore's
steps, one per node (what the guard's torch route was before, and what a loaded torch-route plan
runs); speed-ups against eager, max |diff| against eager. Then per model: capture and load
times (each after ``gc.collect()``: the bench's own garbage, ~0.5M objects, would otherwise cost
whichever of them a full collection pass lands in ~0.3 s), coverage (nodes per backend,
partitions), the share of nodes each graph runtime accepts,
the exported ATen targets, and the cost of the weights watch: ``plan.watch.stale()`` per call
(timeit minimum in a loop, and the median right after a run of the plan) and one refresh after an
in-place update of one weight, and the cost of checking each call against the captured signature
(``input checks``: per call, the guard alone, and the full check of a call of new sizes). The load
average (``os.getloadavg``) and the CPU pressure where Linux reports it (``_timing.machine_load``)
are printed with each table.

Targets (issue 11): ranked plan >= 1.5x eager on the Llama decoder at batch 1 and never below eager;
a one-partition plan >= 0.95x the same engine used directly; load >= 5x faster than capture;
max |diff| <= 1e-4. Issue 12: >= 95% of each model's nodes accepted by onnxruntime and openvino.

On a GPU (``--device cuda``; scripts/gpu_check.sh runs it): the model and its input on the GPU, and
the columns eager; "compile ro", ``torch.compile(mode="reduce-overhead")`` (Inductor with CUDA
graphs); "cuda graph", the opcore cuda plan (``capture(device="cuda")``, replayed through one CUDA
graph: opcore/graph/cuda.py); "cuda route", ``capture(device="cuda", route="torch")``, the exported
program in one step, replayed too. Every call is timed to the end of its GPU work (synchronised),
under inference mode; each column's first call (compile, capture) is printed apart. ``--skip``
takes compile, plan (the cuda graph column) and route there. No usable GPU: exit status 2, with why.

    python bench/graph.py                          # every model, batch 1 and 8 (several minutes)
    python bench/graph.py --models llama --batches 1
    python bench/graph.py --skip compile,onnx      # leave out columns (compile: Inductor is slow to compile here)
    python bench/graph.py --skip compile,frozen    # without the frozen plan columns
    python bench/graph.py --models llama,gpt2 --skip compile,openvino,onnx,plans   # eager vs the torch route
    python bench/graph.py --targets-only --write docs/benchmarks.md   # regenerate the ATen-targets section
    python bench/graph.py --device cuda --models llama,cnn --rounds 5   # on a GPU: CUDA graphs against eager, compile
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import os
import pathlib
import re
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(__file__))
from _gpu import no_gpu_reason
from _timing import machine_load, medians, table

VOCAB, HIDDEN, LAYERS, HEADS, SEQUENCE = 4096, 512, 2, 8, 64
THREADS = 2
BATCHES = (1, 8)
OV_CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}
GRAPH_RUNTIMES = ("onnxruntime", "openvino")
ACCEPTING = ("chosen", "fallback", "partition", "partition only")  # verdicts that mean "this backend runs it"


# --- the models ---------------------------------------------------------------------------------


class FirstOutput(nn.Module):
    """A transformers model called on input ids, returning one tensor (logits or hidden states):
    what every column compares."""

    def __init__(self, model: nn.Module, key: str) -> None:
        super().__init__()
        self.model, self.key = model, key

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(input_ids=input_ids), self.key)


def llama() -> nn.Module:
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=1376,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=2 * SEQUENCE,
        use_cache=False,
    )
    return FirstOutput(transformers.LlamaForCausalLM(config), "logits")


def gpt2() -> nn.Module:
    import transformers

    config = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_embd=HIDDEN,
        n_layer=LAYERS,
        n_head=HEADS,
        n_positions=2 * SEQUENCE,
        bos_token_id=0,
        eos_token_id=0,
        use_cache=False,
    )
    return FirstOutput(transformers.GPT2LMHeadModel(config), "logits")


def bert() -> nn.Module:
    import transformers

    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=4 * HIDDEN,
        max_position_embeddings=2 * SEQUENCE,
    )
    return FirstOutput(transformers.BertModel(config), "last_hidden_state")


class BasicBlock(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = nn.Sequential()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class SmallResNet(nn.Module):
    """conv-bn-relu stem, three stages of two basic blocks (32, 64, 128 channels), pool, fc."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        blocks, channels = [], 32
        for width, stride in ((32, 1), (64, 2), (128, 2)):
            blocks += [BasicBlock(channels, width, stride), BasicBlock(width, width, 1)]
            channels = width
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.blocks(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


class LayerOutput(nn.Module):
    """One transformers layer called on hidden states, returning its hidden states (a tensor)."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        out = self.layer(hidden)
        return out[0] if isinstance(out, tuple) else out


def bert_layer() -> nn.Module:
    """BERT's first encoder layer alone: a graph that each runtime takes whole, as one partition
    (the row for "a one-partition plan >= 0.95x the engine used directly")."""
    model: Any = bert()
    return LayerOutput(model.model.encoder.layer[0])


def cnn() -> nn.Module:
    model = SmallResNet()
    generator = torch.Generator().manual_seed(1)
    for module in model.modules():  # non-trivial BatchNorm statistics, as a trained model has
        # (running statistics are None only for a BatchNorm built with track_running_stats=False)
        if isinstance(module, nn.BatchNorm2d) and module.running_mean is not None and module.running_var is not None:
            module.running_mean.uniform_(-0.1, 0.1, generator=generator)
            module.running_var.uniform_(0.5, 1.5, generator=generator)
    return model


@dataclass(frozen=True)
class ModelCase:
    name: str
    title: str
    make: Callable[[], nn.Module]
    example: Callable[[int], torch.Tensor]
    # False: plans keep the estimated placement (capture(measure=False)), so that a graph one runtime
    # takes whole is timed as that one partition, whatever the guard would choose
    measure: bool = True


def _ids(batch: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, SEQUENCE), generator=torch.Generator().manual_seed(batch))


def _images(batch: int) -> torch.Tensor:
    return torch.randn(batch, 3, 64, 64, generator=torch.Generator().manual_seed(batch))


def _hidden(batch: int) -> torch.Tensor:
    return torch.randn(batch, SEQUENCE, HIDDEN, generator=torch.Generator().manual_seed(batch))


MODELS = {
    "llama": ModelCase("llama", "Llama-style decoder (LlamaForCausalLM)", llama, _ids),
    "gpt2": ModelCase("gpt2", "GPT-2 (GPT2LMHeadModel)", gpt2, _ids),
    "bert": ModelCase("bert", "BERT (BertModel)", bert, _ids),
    "cnn": ModelCase("cnn", "ResNet-style CNN (SmallResNet, 64x64)", cnn, _images),
    "bert-layer": ModelCase("bert-layer", "BERT encoder layer, one partition per runtime", bert_layer, _hidden, False),
}


# --- the columns --------------------------------------------------------------------------------


def _reason(error: BaseException) -> str:
    """The first informative line of an error, short enough for a table note."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    text = next((line for line in lines if "No conversion rule" in line or "not supported" in line.lower()), None)
    text = text or (lines[0] if lines else "")
    return f"{type(error).__name__}: {text[:200]}"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Native code's prints to stdout and stderr dropped (file descriptors 1 and 2)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def openvino_direct(model: nn.Module, x: torch.Tensor) -> Callable[[], numpy.ndarray]:
    import openvino

    converted = openvino.convert_model(model, example_input=(x,))
    compiled = openvino.Core().compile_model(converted, "CPU", OV_CONFIG)
    request = compiled.create_infer_request()
    feed = x.numpy()

    def run() -> numpy.ndarray:  # copied out, as a partition's outputs are (the request reuses its memory)
        request.infer([feed], share_inputs=True)
        return request.get_output_tensor(0).data.copy()

    return run


def onnxruntime_direct(model: nn.Module, x: torch.Tensor, folder: pathlib.Path) -> Callable[[], numpy.ndarray]:
    import onnxruntime
    from opcore_onnxruntime.session import session_options

    path = folder / "model.onnx"
    with warnings.catch_warnings(), _quiet():  # the exporter prints the whole graph when it fails
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=False)
    # the options opcore's sessions get (onnxruntime's defaults, and the pool stops spinning when a
    # run returns): with onnxruntime's default spin its pool keeps a core for ~10 ms after each run,
    # and the column timed next — eager, or a plan's partition — ran on what was left (the BERT
    # layer's one partition read 0.6-0.7x this column at 2 threads that way, 1.0x with the same options)
    options = session_options()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = {"x": x.numpy()}
    return lambda: session.run(["y"], feeds)[0]


def plan_of(
    model: nn.Module, x: torch.Tensor, backends: tuple[str, ...] | None, measure: bool = True, freeze: bool = False
) -> Any:
    import opcore.graph

    return opcore.graph.capture(model, (x,), backends=backends, partitions=True, measure=measure, freeze=freeze)


# the plan columns: title -> (backends (None: every backend, by rank), frozen weights). A frozen plan
# does not compare the model's weights before each call (capture(freeze=True)), as the direct runtimes,
# whose weights are baked in, do not: the one-partition comparisons are judged both ways
PLANS: dict[str, tuple[tuple[str, ...] | None, bool]] = {
    "plan": (None, False),
    "plan ov": (("openvino", "cpu"), False),
    "plan ort": (("onnxruntime", "cpu"), False),
    "plan ov frozen": (("openvino", "cpu"), True),
    "plan ort frozen": (("onnxruntime", "cpu"), True),
}


@dataclass
class Result:
    times: dict[str, float] = field(default_factory=dict)
    diffs: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # capture, load


def _diff(a: Any, b: torch.Tensor) -> float:
    return float(numpy.max(numpy.abs(numpy.asarray(a, dtype=numpy.float64) - b.double().cpu().numpy())))


def _timed(label: str, make: Callable[[], Any], result: Result) -> Any:
    started = time.perf_counter()
    try:
        value = make()
    except Exception as error:
        result.notes[label] = _reason(error)
        return None
    result.extra[f"{label} build s"] = f"{time.perf_counter() - started:.1f}"
    return value


def torch_routes(model: nn.Module, x: torch.Tensor, runs: dict[str, Callable[[], Any]], result: Result) -> None:
    """The "route 1 step" and "route per node" columns: the torch route as the exported program in
    one step, and the same route node by node (the per-node program a loaded torch-route plan runs)."""
    import opcore.graph
    from opcore.graph.assembly import assemble
    from opcore.graph.options import torch_route

    plan = _timed("route 1 step", lambda: opcore.graph.capture(model, (x,), route="torch"), result)
    if plan is None:
        return
    runs["route 1 step"] = partial(plan, x)
    with torch.no_grad():
        per_node = assemble(plan.graph, plan.constants, torch_route(plan.options)).program

    def node_by_node() -> Any:
        return per_node.run([x])[0]

    runs["route per node"] = node_by_node
    result.extra["torch route"] = f"{len(plan.graph.nodes)} nodes; 1 step: {plan.summary()}"


def weights_watch(plan: Any, model: nn.Module, x: torch.Tensor, result: Result) -> None:
    """What following the model's weights costs: the per-call check, and one refresh after an
    in-place update of one weight (multiplied by 1: the values stay)."""
    import timeit

    watch = plan.watch
    check = min(timeit.repeat(watch.stale, number=1000, repeat=7)) / 1000
    after = []  # right after a run of the plan, which leaves the watched objects out of the CPU's caches
    for _ in range(21):
        plan(x)
        started = time.perf_counter()
        watch.stale()
        after.append(time.perf_counter() - started)
    weight = next(p for p in model.parameters() if p.dim() == 2)
    with torch.no_grad():
        weight.mul_(1.0)
        started = time.perf_counter()
        plan(x)
        refreshed = time.perf_counter() - started
    result.extra["weights watch"] = (
        f"{len(watch)} tensors, check {check * 1e6:.1f} us per call in a loop, {statistics.median(after) * 1e6:.1f} "
        f"right after a run of the plan (median of 21); a call after an in-place update of one "
        f"weight {refreshed * 1e3:.0f} ms (refresh included: {plan.notes[-1]})"
    )


def input_checks(plan: Any, x: torch.Tensor, result: Result) -> None:
    """What checking a call against the captured signature costs (opcore.graph.signature): the whole check
    as a call runs it (the guard passing, then each index bound's aminmax), the index bounds alone,
    and the full signature check a call of new sizes or strides takes instead of the guard."""
    import timeit

    plan(x)  # makes the check and arms its guard
    check = plan._inputs
    flat = [x]
    per_call = min(timeit.repeat(lambda: check(flat), number=2000, repeat=7)) / 2000
    full = min(timeit.repeat(lambda: check.full(flat), number=500, repeat=7)) / 500
    armed = check._guard  # None where no guard takes the inputs: every call then runs the full check
    guard_cost = (
        float("nan") if armed is None else min(timeit.repeat(lambda: armed(*flat), number=2000, repeat=7)) / 2000
    )
    bounds = ", ".join(f"{plan.graph.inputs[b.position]} in [{b.low}, {b.high}]" for b in check.bounds) or "none"
    result.extra["input checks"] = (
        f"{per_call * 1e6:.1f} us per call (guard {guard_cost * 1e6:.2f} us, index bounds: {bounds}); "
        f"the full signature check, for new sizes or strides, {full * 1e6:.1f} us"
    )


def _inference(run: Callable[[], Any]) -> Callable[[], Any]:
    def inference() -> Any:
        with torch.inference_mode():
            return run()

    return inference


def bench_model(case: ModelCase, batch: int, skip: set[str], rounds: int, fastest: bool = False) -> Result:
    torch.manual_seed(0)
    model = case.make().eval()
    x = case.example(batch)
    result = Result()
    with torch.inference_mode():
        reference = model(x)
    runs: dict[str, Callable[[], Any]] = {}

    def eager() -> Any:
        with torch.inference_mode():
            return model(x)

    runs["eager"] = eager
    if "compile" not in skip:
        compiled = torch.compile(model)

        def compiled_run() -> Any:
            with torch.inference_mode():
                return compiled(x)

        if _timed("compile", compiled_run, result) is not None:
            runs["compile"] = compiled_run
    if "openvino" not in skip:
        made = _timed("ov direct", lambda: openvino_direct(model, x), result)
        if made is not None:
            runs["ov direct"] = made
    folder = pathlib.Path(tempfile.mkdtemp(prefix="opcore-bench-"))
    if "onnx" not in skip:
        made = _timed("ort direct", lambda: onnxruntime_direct(model, x, folder), result)
        if made is not None:
            runs["ort direct"] = made
    if "route" not in skip:
        torch_routes(model, x, runs, result)
    if "plan" not in skip:
        for label, (backends, freeze) in PLANS.items():
            if ("plans" in skip and label != "plan") or ("frozen" in skip and freeze):
                continue
            if label == "plan":
                gc.collect()  # capture and load (below) timed settled: no pass over the bench's garbage inside either
            plan = _timed(label, partial(plan_of, model, x, backends, case.measure, freeze), result)
            if plan is None:
                continue
            runs[label] = partial(plan, x)
            guard = [note.split(": ", 1)[1] for note in plan.notes if note.startswith("guard: ")]
            result.extra[f"{label} runs"] = plan.summary() + (f" ({guard[0]})" if guard else "")
            if label == "plan":
                result.extra["coverage"] = coverage(plan)
                result.seconds["capture"] = plan.timings.capture + plan.timings.plan
                result.extra["capture s"] = f"{result.seconds['capture']:.2f}"
                try:
                    save_and_load(plan, folder / "plan", x, reference, result)
                except Exception as error:  # a plan that cannot be saved says why, the bench goes on
                    result.extra["save/load"] = _reason(error)
                weights_watch(plan, model, x, result)
                input_checks(plan, x, result)
    for label, run in runs.items():
        try:
            result.diffs[label] = _diff(_tensor(run()), reference)
        except Exception as error:  # a column that builds but fails to run says so
            result.notes[label] = _reason(error)
    runs = {label: run for label, run in runs.items() if label not in result.notes}
    # every column called as eager is: under torch.inference_mode() (what a user timing inference
    # does; the plan and route columns ran without it before, eager with it: about 4 % apart)
    runs = {label: _inference(run) for label, run in runs.items()}
    # each sample after one untimed call: a column as it runs in a loop; switching() times the
    # first call after the other runtime apart
    pick = min if fastest else statistics.median
    result.times = medians(runs, repeats=rounds, pick=pick, warmup=1)
    if "plan" in runs:
        result.extra["switching"] = switching(runs["eager"], runs["plan"], result.times, rounds, pick)
    return result


def switching(
    eager: Callable[[], Any], plan: Callable[[], Any], times: dict[str, float], rounds: int, pick: Any
) -> str:
    """The ranked plan's first call right after eager, and eager's right after the plan, against each
    called in a loop: the thread pool one runtime leaves busy (torch's OpenMP workers spin a few ms
    after eager work; ONNX Runtime's pool no longer does, opcore_onnxruntime.session_options) takes
    the cores the next one needs."""
    after: dict[str, list[float]] = {"plan": [], "eager": []}
    for _ in range(rounds):
        for first, then, label in ((eager, plan, "plan"), (plan, eager, "eager")):
            first()
            started = time.perf_counter()
            then()
            after[label].append(time.perf_counter() - started)
    return (
        f"plan right after eager {pick(after['plan']) * 1e3:.2f} ms (in a loop {times['plan'] * 1e3:.2f}); "
        f"eager right after the plan {pick(after['eager']) * 1e3:.2f} ms (in a loop {times['eager'] * 1e3:.2f})"
    )


def save_and_load(plan: Any, folder: pathlib.Path, x: torch.Tensor, reference: torch.Tensor, result: Result) -> None:
    """Save the plan, load it back (timed), and compare the loaded plan's output with eager."""
    import opcore.graph

    started = time.perf_counter()
    plan.save(folder)
    result.extra["save s"] = f"{time.perf_counter() - started:.2f}"
    gc.collect()  # as before the capture: a full pass over this process's ~0.5M objects costs ~0.3 s here
    started = time.perf_counter()
    loaded = opcore.graph.load(folder)
    result.seconds["load"] = time.perf_counter() - started
    result.extra["load s"] = f"{result.seconds['load']:.2f}"
    result.diffs["loaded"] = _diff(_tensor(loaded(x)), reference)


def _tensor(value: Any) -> Any:
    return value.detach().cpu() if isinstance(value, torch.Tensor) else value


def coverage(plan: Any) -> str:
    """Per graph runtime: the share of the plan's nodes it accepts (its checker says yes)."""
    import json

    nodes = [n for n in json.loads(plan.explain(format="json"))["nodes"] if n["backend"] != "python"]
    parts = []
    for backend in GRAPH_RUNTIMES:
        accepted = sum(
            any(c["backend"] == backend and c["status"] in ACCEPTING for c in n["candidates"]) for n in nodes
        )
        parts.append(f"{backend} {accepted}/{len(nodes)} ({100 * accepted / max(len(nodes), 1):.0f}%)")
    return ", ".join(parts)


# --- on a GPU: --device cuda ---------------------------------------------------------------------

# the --device cuda columns: eager on the GPU; torch.compile(mode="reduce-overhead") (Inductor, its
# kernels replayed through CUDA graphs); the opcore cuda plan, capture(device="cuda"): every node on
# the cuda backend, replayed through one CUDA graph (opcore/graph/cuda.py); and the torch route on
# the GPU, capture(device="cuda", route="torch"): the exported program in one step, replayed too
CUDA_COLUMNS = ("eager", "compile ro", "cuda graph", "cuda route")


def _on_gpu(run: Callable[[], Any]) -> Callable[[], Any]:
    """``run`` under inference mode, timed to the end of its GPU work (the timer sees the host only)."""

    def synchronized() -> Any:
        with torch.inference_mode():
            out = run()
        torch.cuda.synchronize()
        return out

    return synchronized


def bench_model_cuda(case: ModelCase, batch: int, skip: set[str], rounds: int, fastest: bool = False) -> Result:
    """The CUDA_COLUMNS of one model and batch. Each column's first call (Inductor's compile, a CUDA
    graph's capture) is timed apart ("first call s"); the medians are of the calls after it."""
    import opcore.graph

    torch.manual_seed(0)
    model = case.make().eval().cuda()
    x = case.example(batch).cuda()
    result = Result()
    with torch.inference_mode():
        reference = model(x)
    runs: dict[str, Callable[[], Any]] = {"eager": partial(model, x)}
    if "compile" not in skip:
        runs["compile ro"] = partial(torch.compile(model, mode="reduce-overhead"), x)
    if "plan" not in skip:
        plan = _timed("cuda graph", lambda: opcore.graph.capture(model, (x,), device="cuda"), result)
        if plan is not None:
            runs["cuda graph"] = partial(plan, x)
            result.extra["cuda graph runs"] = plan.summary()
    if "route" not in skip:
        route = _timed("cuda route", lambda: opcore.graph.capture(model, (x,), device="cuda", route="torch"), result)
        if route is not None:
            runs["cuda route"] = partial(route, x)
    runs = {label: _on_gpu(run) for label, run in runs.items()}
    for label, run in runs.items():
        started = time.perf_counter()
        try:
            result.diffs[label] = _diff(_tensor(run()), reference)
        except Exception as error:  # a column that builds but fails to run says so
            result.notes[label] = _reason(error)
            continue
        result.extra[f"{label} first call s"] = f"{time.perf_counter() - started:.2f}"
    runs = {label: run for label, run in runs.items() if label not in result.notes}
    result.times = medians(runs, repeats=rounds, pick=min if fastest else statistics.median, warmup=1)
    return result


# --- ATen targets ------------------------------------------------------------------------------


def exported_nodes(case: ModelCase) -> list[dict[str, Any]]:
    """The model's nodes as captured (batch 1, no rewrites, no partitions): each with its ATen
    target, the opcore op it maps to (``aten.*``: the ATen fallback) and every backend's verdict."""
    import json

    import opcore.graph

    plan = opcore.graph.capture(case.make().eval(), (case.example(1),), rewrites=False, partitions=False)
    return json.loads(plan.explain(format="json"))["nodes"]


def _accepts(node: dict[str, Any], backend: str) -> bool:
    return any(c["backend"] == backend and c["status"] in ACCEPTING for c in node["candidates"])


MARK_BEGIN = "<!-- bench/graph.py --targets-only: begin -->"
MARK_END = "<!-- bench/graph.py --targets-only: end -->"


def targets_section(cases: list[ModelCase]) -> str:
    """Per model: the share of nodes each graph runtime accepts, then every exported ATen target
    with its count, the opcore op it becomes, and how many of its nodes each runtime accepts."""
    lines = [
        MARK_BEGIN,
        "",
        f"`opcore.graph.capture(model, (x,), rewrites=False)` at batch 1 (torch {torch.__version__.split('+')[0]}): "
        "every exported node (after the few decompositions capture applies: opcore.graph.decomposing), "
        "the opcore op it maps to (`aten.*`: the ATen fallback), and how many of its "
        "nodes each graph runtime's checkers accept. int64 nodes count where the plan's value ranges prove "
        "their values fit what the runtime computes them in (OpenVINO: int32; verdict `partition only`: see "
        "docs/graph.md, Value ranges); size computations (`python`) are not counted. "
        "Regenerate with `python bench/graph.py --targets-only --write docs/benchmarks.md`.",
        "",
        "| model | nodes | onnxruntime accepts | openvino accepts |",
        "|---|---|---|---|",
    ]
    details = []
    for case in cases:
        nodes = [n for n in exported_nodes(case) if n["backend"] != "python"]
        shares = []
        for backend in GRAPH_RUNTIMES:
            accepted = sum(_accepts(n, backend) for n in nodes)
            shares.append(f"{accepted} ({100 * accepted / max(len(nodes), 1):.0f}%)")
        lines.append(f"| {case.title} | {len(nodes)} | {' | '.join(shares)} |")
        by_target: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        for node in nodes:
            by_target[node["target"]].append(node)
        details += ["", f"{case.title}:", "", "| ATen target | nodes | opcore op | onnxruntime | openvino |"]
        details.append("|---|---|---|---|---|")
        for target, group in sorted(by_target.items(), key=lambda item: (-len(item[1]), item[0])):
            ops = sorted({n["op"] for n in group})
            counts = [str(sum(_accepts(n, backend) for n in group)) for backend in GRAPH_RUNTIMES]
            details.append(f"| `{target}` | {len(group)} | {', '.join(ops)} | {' | '.join(counts)} |")
    return "\n".join([*lines, *details, "", MARK_END])


def write_section(path: pathlib.Path, section: str) -> None:
    text = path.read_text()
    pattern = re.compile(re.escape(MARK_BEGIN) + ".*?" + re.escape(MARK_END), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip() + "\n\n## Exported ATen targets of the graph benchmark's models\n\n" + section + "\n"
    path.write_text(text)


# --- main ---------------------------------------------------------------------------------------


COLUMNS = ("eager", "compile", "ov direct", "ort direct", *PLANS, "route 1 step", "route per node")


def report(case: ModelCase, batch: int, result: Result, columns: tuple[str, ...] = COLUMNS) -> str:
    eager = result.times.get("eager")
    header = ("column", "ms", "vs eager", "max |diff|", "note")
    rows: list[tuple[str, ...]] = []
    for label in columns:
        if label in result.times:
            ms = result.times[label] * 1e3
            ratio = f"{eager / result.times[label]:.2f}x" if eager else "-"
            rows.append((label, f"{ms:.2f}", ratio, f"{result.diffs.get(label, float('nan')):.1e}", ""))
        elif label in result.notes:
            rows.append((label, "-", "-", "-", result.notes[label]))
    lines = [f"### {case.title}, batch {batch} ({machine_load()} after the run)", "", table(header, rows)]
    lines += [f"{key}: {value}" for key, value in result.extra.items()]
    if "loaded" in result.diffs:
        lines.append(f"loaded plan max |diff|: {result.diffs['loaded']:.1e}")
    verdicts = targets(case, batch, result)
    if verdicts:
        lines.append("targets: " + "; ".join(verdicts))
    return "\n".join(lines)


def targets(case: ModelCase, batch: int, result: Result) -> list[str]:
    """Issue 11's targets that this table can judge, each "met" or "MISSED"."""
    times, found = result.times, []

    def judge(text: str, ok: bool) -> None:
        found.append(f"{text} {'met' if ok else 'MISSED'}")

    if "plan" in times and "eager" in times and case.measure:  # unmeasured (one-partition) rows have no guard
        speedup = times["eager"] / times["plan"]
        floor = 1.5 if (case.name, batch) == ("llama", 1) else 1.0
        judge(f"plan {speedup:.2f}x eager >= {floor}", speedup >= floor)
    engines = {"openvino": "ov direct", "onnxruntime": "ort direct"}
    pairs = [(plan, engines[backends[0]]) for plan, (backends, _) in PLANS.items() if backends]
    for plan, direct in pairs:
        if plan in times and direct in times:
            ratio = times[direct] / times[plan]
            ran = result.extra.get(f"{plan} runs", "")
            if ran.startswith("torch route") or "runs the torch route" in ran:  # the guard chose torch's run
                found.append(f"{plan} {ratio:.2f}x {direct} not judged (it ran the torch route, not its partitions)")
            else:
                judge(f"{plan} {ratio:.2f}x {direct} >= 0.95", ratio >= 0.95)
    if {"capture", "load"} <= set(result.seconds):
        ratio = result.seconds["capture"] / result.seconds["load"]
        judge(f"load {ratio:.1f}x faster than capture >= 5", ratio >= 5)
    plans = [result.diffs[label] for label in (*PLANS, "loaded") if label in result.diffs]
    if plans:
        judge(f"max |diff| {max(plans):.1e} <= 1e-4", max(plans) <= 1e-4)
    return found


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda: on the GPU, eager against torch.compile(mode='reduce-overhead'), the opcore cuda plan's "
        "CUDA graph replay and the torch route's (the CPU columns are left out)",
    )
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument(
        "--skip",
        default="",
        help="columns to leave out: compile, openvino, onnx, plan (every plan column), plans (the plans restricted "
        "to one runtime, frozen too), frozen (the frozen plan columns), route (the torch route columns)",
    )
    parser.add_argument("--rounds", type=int, default=11, help="interleaved timing rounds (median of them)")
    parser.add_argument(
        "--fastest", action="store_true", help="the fastest round instead of the median (a busy machine only adds time)"
    )
    parser.add_argument("--threads", type=int, default=THREADS, help="torch threads (steadier at 1 on a busy machine)")
    parser.add_argument("--targets-only", action="store_true", help="print the exported ATen targets and stop")
    parser.add_argument("--write", type=pathlib.Path, help="with --targets-only: replace that section of this file")
    options = parser.parse_args(argv)
    unknown = [name for name in options.models.split(",") if name and name not in MODELS]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; expected some of {', '.join(MODELS)}")
    if options.targets_only and options.device != "cpu":
        parser.error("--targets-only reads the exported graphs on the CPU: leave out --device cuda")
    return options


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    torch.set_num_threads(options.threads)
    warnings.filterwarnings("ignore")
    cases = [MODELS[name] for name in options.models.split(",") if name]
    if options.targets_only:
        section = targets_section(cases)
        if options.write:
            write_section(options.write, section)
        print(section)
        return 0
    skip = {s for s in options.skip.split(",") if s}
    device = ""
    if options.device == "cuda":
        reason = no_gpu_reason()
        if reason is not None:
            print(f"bench/graph.py --device cuda: no usable GPU: {reason}", file=sys.stderr)
            return 2
        device = f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda}), "
    print(
        f"{device}torch {torch.__version__}, {options.threads} torch threads; "
        f"{'the fastest' if options.fastest else 'medians'} of {options.rounds} interleaved rounds\n"
    )
    for case in cases:
        for batch in (int(b) for b in options.batches.split(",")):
            if options.device == "cuda":
                result = bench_model_cuda(case, batch, skip, options.rounds, options.fastest)
                print(report(case, batch, result, CUDA_COLUMNS), end="\n\n", flush=True)
            else:
                result = bench_model(case, batch, skip, options.rounds, options.fastest)
                print(report(case, batch, result), end="\n\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
