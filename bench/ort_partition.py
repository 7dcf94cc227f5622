"""A whole model as one graph-runtime partition against the runtime used directly, taken apart:
onnxruntime (the default) or, with ``--engine openvino``, OpenVINO.

For each model of ``bench/graph.py`` (same models, inputs and direct runs: an ONNX Runtime
InferenceSession of ``torch.onnx.export``'s model, or the CPU plugin's compiled model of
``openvino.convert_model``'s) and its plan restricted to that runtime's partitions
(``capture(..., backends=(ENGINE, "cpu"), measure=False)``, one partition):

1. **the models the runtime runs**: op-type counts of the two models as written and as ORT's
   optimizer leaves them (``SessionOptions.optimized_model_filepath``; the partition's with its own
   external initializers); for OpenVINO, as the CPU plugin executes them (the compiled model's
   ``get_runtime_model()``: each layer's ``layerType`` and ``runtimePrecision``, after its fusions);
2. **where the time goes** (``--profile``): ORT's profiler on both sessions, or OpenVINO's
   ``PERF_COUNT`` (per layer type and the primitive it chose), runs alternated, the median per run;
3. **the model against our per-run overhead**: the direct run, the partition's session or compiled
   model called alone (numpy in, numpy out: no opcore around it), the plan (torch tensors in and
   out) and the same plan frozen (``capture(freeze=True)``: without the comparison of the model's
   weights before each call), interleaved in a new order each round; median and minimum, and the direct run's time over
   each; and CPU time per call: the process's (the runtime's pool threads included, ORT's spinning
   too). With ``--threads N`` both are made here at N threads (ORT's intra-op threads, OpenVINO's
   ``INFERENCE_NUM_THREADS``; no plan column, whose partition runs at the runtime's default); at
   one ORT thread the CPU time is the calling thread's: all of a run's work, without the waits of a
   loaded machine (on the shared 2-core machine the wall times of 2-thread sessions move by several
   times). OpenVINO's CPU time is always the process's; at one thread the plugin runs on the
   calling thread, so that is the thread's (42.1 ms both for the BERT layer at batch 8, wall 66 ms
   at load 3).
   Both sides of OpenVINO's comparison are compiled with ``opcore_openvino.compiled.CONFIG``
   (``INFERENCE_PRECISION_HINT=f32``).

The machine is shared: the minimum is the least disturbed run, the median the typical one; read the
ratios of one run.

    python bench/ort_partition.py --models cnn,bert --batches 1,8 --rounds 41 --profile
    python bench/ort_partition.py --models cnn,bert --threads 1  # one thread each, CPU time too
    python bench/ort_partition.py --engine openvino --models cnn,bert,bert-layer --threads 1 --profile
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy
import torch

sys.path.insert(0, os.path.dirname(__file__))
from _timing import table
from graph import MODELS, onnxruntime_direct


def session(source: Any, externals: dict[str, numpy.ndarray], threads: int, **settings: Any) -> Any:
    """An InferenceSession as the partition's is made (opcore_onnxruntime.session.session_options:
    the pool stops spinning when a run returns), with ``settings`` set."""
    import onnxruntime
    from opcore_onnxruntime.session import session_options

    options = session_options()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads
    for name, value in settings.items():
        setattr(options, name, value)
    if externals:
        names = list(externals)
        options.add_external_initializers(
            names, [onnxruntime.OrtValue.ortvalue_from_numpy(externals[n]) for n in names]
        )
    return onnxruntime.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def op_types(path: pathlib.Path) -> collections.Counter[str]:
    import onnx

    return collections.Counter(node.op_type for node in onnx.load(str(path), load_external_data=False).graph.node)


def counts_table(direct: pathlib.Path, compiled: Any, folder: pathlib.Path, threads: int) -> str:
    """Op types of both models, as written and after ORT's optimizer."""
    (folder / "partition.onnx").write_bytes(compiled.model.SerializeToString())
    models = {"direct": (str(direct), {}), "partition": (compiled.model.SerializeToString(), compiled.externals)}
    found = {f"{label} written": op_types(folder / ("model.onnx" if label == "direct" else "partition.onnx"))
             for label in models}  # fmt: skip
    for label, (source, externals) in models.items():
        path = folder / f"{label}.optimized.onnx"
        session(source, externals, threads, optimized_model_filepath=str(path))
        found[f"{label} optimized"] = op_types(path)
    columns = list(found)
    ops = sorted(set().union(*found.values()), key=lambda op: (-found["partition optimized"][op], op))
    rows = [(op, *(str(found[c][op] or "") for c in columns)) for op in ops]
    rows.append(("(nodes)", *(str(sum(found[c].values())) for c in columns)))
    return table(("op type", *columns), rows)


def profile_table(sources: dict[str, tuple[Any, dict[str, numpy.ndarray]]], feed: numpy.ndarray, runs: int,
                  threads: int, folder: pathlib.Path) -> str:  # fmt: skip
    """ORT's profiler, both sessions' runs alternated: the median per run of each op type's time."""
    sessions = {label: session(source, externals, threads, enable_profiling=True,
                               profile_file_prefix=str(folder / label.replace(" ", "-")))
                for label, (source, externals) in sources.items()}  # fmt: skip
    for _ in range(runs + 2):
        for s in sessions.values():
            s.run(None, {s.get_inputs()[0].name: feed})
    medians: dict[str, dict[str, float]] = {}
    for label, s in sessions.items():
        events = json.loads(pathlib.Path(s.end_profiling()).read_text())
        spans = [(e["ts"], e["ts"] + e["dur"], collections.Counter({"(model_run)": e["dur"]}))
                 for e in events if e.get("cat") == "Session" and e["name"] == "model_run"][2:]  # fmt: skip
        for e in events:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                for start, end, counter in spans:
                    if start <= e["ts"] <= end:
                        counter[e["args"]["op_name"]] += e["dur"]
                        break
        seen = set().union(*(c for _, _, c in spans))
        medians[label] = {op: statistics.median(c[op] for _, _, c in spans) / 1e3 for op in seen}
    ops = sorted(set().union(*medians.values()), key=lambda op: -max(m.get(op, 0.0) for m in medians.values()))
    rows = [(op, *(f"{m.get(op, 0.0):.3f}" for m in medians.values())) for op in ops]
    return table(("op type (ms per run)", *medians), rows)


def timing_table(runs: dict[str, Callable[[], Any]], rounds: int, one_thread: bool) -> str:
    """Wall time per call, and CPU time: with ``one_thread`` the calling thread's (time.thread_time:
    all of a run's work is on it, and a loaded machine's waits are not), else the process's
    (time.process_time: the runtime's pool threads too, ORT's spinning included). The first run is
    the reference the others are compared with."""
    clock = time.thread_time if one_thread else time.process_time
    wall: dict[str, list[float]] = {label: [] for label in runs}
    used: dict[str, list[float]] = {label: [] for label in runs}
    for fn in runs.values():  # warm-up
        fn()
    order = list(runs)
    reference = order[0]
    for index in range(rounds):
        random.Random(index).shuffle(order)
        for label in order:
            started, cpu_started = time.perf_counter(), clock()
            runs[label]()
            wall[label].append(time.perf_counter() - started)
            used[label].append(clock() - cpu_started)
    median = {label: statistics.median(v) for label, v in wall.items()}
    least = {label: min(v) for label, v in wall.items()}
    on_cpu = {label: statistics.median(v) for label, v in used.items()}
    header: tuple[str, ...] = ("", "median ms", "min ms", f"{reference} / this (median)", "(min)")
    rows: list[tuple[str, ...]] = [
        (label, f"{median[label] * 1e3:.2f}", f"{least[label] * 1e3:.2f}",
         f"{median[reference] / median[label]:.2f}x", f"{least[reference] / least[label]:.2f}x")
        for label in runs
    ]  # fmt: skip
    header += ("thread cpu ms" if one_thread else "process cpu ms", f"{reference} / this (cpu)")
    rows = [(*row, f"{on_cpu[label] * 1e3:.2f}", f"{on_cpu[reference] / on_cpu[label]:.3f}x")
            for row, label in zip(rows, runs)]  # fmt: skip
    return table(header, rows)


# --- OpenVINO (--engine openvino) ---------------------------------------------------------------


def ov_compiled(model: Any, threads: int, **settings: str) -> Any:
    """A CompiledModel made as the partition's (opcore_openvino.compiled.CONFIG: float32 precision), at
    ``threads`` inference threads (0: the plugin's default), with ``settings`` set."""
    from opcore_openvino.compiled import CONFIG, DEVICE, core

    config = {**CONFIG, **settings}
    if threads:
        config["INFERENCE_NUM_THREADS"] = str(threads)
    return core().compile_model(model, DEVICE, config)


def ov_written(model: Any) -> collections.Counter[str]:
    return collections.Counter(op.get_type_name() for op in model.get_ordered_ops())


def ov_executed(compiled: Any) -> collections.Counter[str]:
    """The CPU plugin's runtime model: its nodes by layerType (runtimePrecision)."""
    found: collections.Counter[str] = collections.Counter()
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        found[f"{info['layerType'].astype(str)} ({info['runtimePrecision'].astype(str)})"] += 1
    return found


def ov_counts_table(models: dict[str, Any], threads: int) -> str:
    """Op types of both models as written, and the nodes the CPU plugin executes."""
    found = {}
    for label, model in models.items():
        found[f"{label} written"] = ov_written(model)
    for label, model in models.items():
        found[f"{label} executed"] = ov_executed(ov_compiled(model, threads))
    columns = list(found)
    rows = []
    for kind in ("written", "executed"):
        group = [c for c in columns if c.endswith(kind)]
        for op in sorted(set().union(*(found[c] for c in group)), key=lambda op: (-found[group[-1]][op], op)):
            rows.append((f"{op} [{kind}]", *(str(found[c][op] or "") if c in group else "" for c in columns)))
    rows.append(("(nodes)", *(str(sum(found[c].values())) for c in columns)))
    return table(("op type", *columns), rows)


def ov_profile_table(models: dict[str, Any], feed: numpy.ndarray, runs: int, threads: int) -> str:
    """PERF_COUNT on both compiled models, runs alternated: the median per run of each executed layer
    type's time (layerType and the primitive the plugin chose, e.g. FullyConnected brgemm_avx2_f32)."""
    requests = {label: ov_compiled(model, threads, PERF_COUNT="YES").create_infer_request()
                for label, model in models.items()}  # fmt: skip
    spans: dict[str, list[collections.Counter[str]]] = {label: [] for label in requests}
    for index in range(runs + 2):
        for label, request in requests.items():
            request.infer([feed])
            if index >= 2:
                counter: collections.Counter[str] = collections.Counter()
                for info in request.profiling_info:
                    if info.status == info.Status.EXECUTED:
                        counter[f"{info.node_type} {info.exec_type}"] += info.real_time.total_seconds() * 1e3
                counter["(sum)"] = sum(counter.values())
                spans[label].append(counter)
    medians = {label: {op: statistics.median(c[op] for c in found) for op in set().union(*found)}
               for label, found in spans.items()}  # fmt: skip
    ops = sorted(set().union(*medians.values()), key=lambda op: -max(m.get(op, 0.0) for m in medians.values()))
    rows = [(op, *(f"{m.get(op, 0.0):.3f}" for m in medians.values())) for op in ops if max(
        m.get(op, 0.0) for m in medians.values()) >= 0.001]  # fmt: skip
    return table(("layer type, primitive (ms per run)", *medians), rows)


def ov_runner(compiled: Any, feed: numpy.ndarray) -> Callable[[], Any]:
    """One infer request, the output copied out (as bench/graph.py's direct column and the partition do)."""
    request = compiled.create_infer_request()
    return lambda: (request.infer([feed], share_inputs=True), request.get_output_tensor(0).data.copy())


def take_apart_openvino(case: Any, model: Any, x: torch.Tensor, rounds: int, threads: int, profile: bool) -> None:
    import openvino

    plan = one_partition_plan(case, model, x, "openvino")
    if plan is None:
        return
    compiled = plan.partitions[0].compiled
    direct = openvino.convert_model(model, example_input=(x,))
    models = {"ov direct": direct, "partition": compiled.model}
    shapes = {label: " ".join(str(p.get_partial_shape()) for p in m.get_parameters()) for label, m in models.items()}
    print("inputs: " + ", ".join(f"{label} {shape}" for label, shape in shapes.items()), end="\n\n")
    print(ov_counts_table(models, threads), end="\n\n")
    feed = x.numpy()
    if profile:
        print(ov_profile_table(models, feed, max(rounds // 4, 5), threads), end="\n\n")
    runs: dict[str, Callable[[], Any]] = {
        label: ov_runner(ov_compiled(m, threads), feed) for label, m in models.items()
    }
    if not threads:  # the plan's own compiled model runs at the plugin's default threads
        frozen = frozen_plan(model, x, "openvino")
        runs["partition (plan's)"] = lambda: compiled(feed)
        runs["plan"] = lambda: plan(x)
        runs["plan, frozen"] = lambda: frozen(x)
    print(timing_table(runs, rounds, False), f"\nload average {os.getloadavg()[0]:.1f}", end="\n\n", flush=True)


# --- both -----------------------------------------------------------------------------------------


def one_partition_plan(case: Any, model: Any, x: torch.Tensor, engine: str) -> Any:
    """The plan restricted to ``engine``'s partitions (not measured: it stays what was compiled), its
    heading printed; None, said so, where it is not one partition."""
    import opcore.graph

    plan = opcore.graph.capture(model, (x,), backends=(engine, "cpu"), partitions=True, measure=False)
    print(f"### {case.title}, batch {x.shape[0]}: {plan.summary()}\n")
    if len(plan.partitions) != 1:
        print("not one partition: nothing to take apart\n")
        return None
    return plan


def frozen_plan(model: Any, x: torch.Tensor, engine: str) -> Any:
    """The same plan with frozen weights (capture(freeze=True)): no comparison of the model's weights
    before each call, as the engine used directly has none."""
    import opcore.graph

    return opcore.graph.capture(model, (x,), backends=(engine, "cpu"), partitions=True, measure=False, freeze=True)


def take_apart(name: str, batch: int, rounds: int, threads: int, profile: bool, engine: str = "onnxruntime") -> None:
    case = MODELS[name]
    torch.manual_seed(0)
    model = case.make().eval()
    x = case.example(batch)
    if engine == "openvino":
        take_apart_openvino(case, model, x, rounds, threads, profile)
        return
    folder = pathlib.Path(tempfile.mkdtemp(prefix="opcore-ort-partition-"))
    direct = onnxruntime_direct(model, x, folder)
    plan = one_partition_plan(case, model, x, "onnxruntime")
    if plan is None:
        return
    compiled = plan.partitions[0].compiled
    print(counts_table(folder / "model.onnx", compiled, folder, threads), end="\n\n")
    feed = x.numpy()
    sources = {"ort direct": (str(folder / "model.onnx"), {}),
               "partition session": (compiled.model.SerializeToString(), compiled.externals)}  # fmt: skip
    if profile:
        print(profile_table(sources, feed, max(rounds // 4, 5), threads, folder), end="\n\n")
    frozen = frozen_plan(model, x, "onnxruntime")
    runs: dict[str, Callable[[], Any]] = {"ort direct": direct, "partition session": lambda: compiled(feed),
                                          "plan": lambda: plan(x), "plan, frozen": lambda: frozen(x)}  # fmt: skip
    if threads:  # the plan's own sessions run at ORT's default: both are made here instead, without the plan
        runs = {label: _runner(session(source, externals, threads), feed)
                for label, (source, externals) in sources.items()}  # fmt: skip
    print(timing_table(runs, rounds, threads == 1), f"\nload average {os.getloadavg()[0]:.1f}", end="\n\n", flush=True)


def _runner(made: Any, feed: numpy.ndarray) -> Callable[[], Any]:
    feeds = {made.get_inputs()[0].name: feed}
    return lambda: made.run(None, feeds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=("onnxruntime", "openvino"), default="onnxruntime")
    parser.add_argument("--models", default="cnn,bert", help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--rounds", type=int, default=41, help="interleaved rounds (one call each)")
    parser.add_argument("--threads", "--ort-threads", type=int, default=0, dest="threads",
                        help="threads of the sessions / compiled models this script makes (ORT's intra-op "
                        "threads, OpenVINO's INFERENCE_NUM_THREADS; 0: the engine's default, as the plan's and "
                        "bench/graph.py's)")  # fmt: skip
    parser.add_argument("--profile", action="store_true", help="the engine's profiler per op type")
    options = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    print(f"torch {torch.__version__}, 1 torch thread, {options.engine}, load average {os.getloadavg()[0]:.1f}\n")
    for name in options.models.split(","):
        for batch in (int(b) for b in options.batches.split(",")):
            take_apart(name, batch, options.rounds, options.threads, options.profile, options.engine)


if __name__ == "__main__":
    main()
