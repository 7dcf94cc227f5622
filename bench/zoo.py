"""The model zoo (bench/zoo_models.py): every architecture captured with default arguments, static and
with dynamic dims, timed against eager and torch.compile.

Per model, batch and thread count, one table row per column: eager (the model called as is, under
torch.inference_mode), compile (``torch.compile(model)``; its first call minus a warm one is "build
s"), plan (``opcore.graph.capture(model, args, kwargs)``, default arguments: measured at capture),
plan ov / plan ort (``backends=("openvino", "cpu")`` / ``("onnxruntime", "cpu")``: partitions of one
runtime), dynamic (the same capture with the entry's dynamic dims, called at the example's shape).
Each plan's row gives max |diff| against eager relative to the output's scale (its largest |value|),
what runs where (``plan.summary()``), its capture time and, for "plan", the time to save and load
it. The columns take turns, in a new order each round (bench/_timing.medians); the table gives
medians per call and the ratio to eager.

``--busy``: a second process spins on one core while the models run (what "the machine is busy"
means in issue 25's targets); the plans' graph runtimes get the threads torch has
(OPCORE_RUNTIME_THREADS), so no two thread pools compete for the same cores.

The summary after the tables: models captured by default, dynamic captures that ran and matched,
median and minimum speed-up of the plan over eager at batch 1, models below 1.0x, models where the
plan is behind compile, and the dynamic plan against the static one (partition counts, and the time
ratio from the two plans timed again as a pair, twice the rounds, after the table's columns: the
median of the per-round ratios, each round timing the two back to back).

    python bench/zoo.py --threads 1 --batches 1 --rounds 15            # the table in docs/benchmarks.md
    python bench/zoo.py --models llama,bert --skip compile --busy
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pathlib
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import torch
from _timing import medians, paired_ratio, table
from zoo_models import ZOO, ZooCase, by_name

PLANS: dict[str, tuple[str, ...] | None] = {
    "plan": None,
    "plan ov": ("openvino", "cpu"),
    "plan ort": ("onnxruntime", "cpu"),
}


def first_tensor(out: Any) -> torch.Tensor:
    """The model's main output (logits, last hidden state, the first of a tuple)."""
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "to_tuple"):
        return first_tensor(out.to_tuple()[0])
    if isinstance(out, (tuple, list)):
        return first_tensor(out[0])
    raise TypeError(f"no tensor in {type(out).__name__}")


def relative_diff(got: Any, want: torch.Tensor) -> float:
    """max |got - want| over the output's scale (max |want|, at least 1e-6)."""
    a, b = first_tensor(got).double(), want.double()
    return float((a - b).abs().max()) / max(float(b.abs().max()), 1e-6)


@dataclass
class Row:
    column: str
    seconds: float | None = None
    diff: float | None = None
    runs: str = ""
    build_s: float | None = None
    load_s: float | None = None
    partitions: int | None = None
    note: str = ""


@dataclass
class Group:
    case: ZooCase
    batch: int
    threads: int
    rows: dict[str, Row] = field(default_factory=dict)
    paired: float | None = None  # the static plan's time over the dynamic one's, timed as a pair

    def dynamic_vs_static(self) -> float | None:
        """The paired ratio, else the ratio of the two columns (None without both)."""
        plan, dynamic = self.rows.get("plan"), self.rows.get("dynamic")
        if self.paired is not None:
            return self.paired
        if plan is None or dynamic is None or not plan.seconds or not dynamic.seconds:
            return None
        return plan.seconds / dynamic.seconds

    def ratio(self, column: str) -> float | None:
        eager, other = self.rows.get("eager"), self.rows.get(column)
        if eager is None or other is None or eager.seconds is None or other.seconds is None:
            return None
        return eager.seconds / other.seconds


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0][:160] if str(error) else ''}"


def _spin(stop: Any) -> None:
    while not stop.is_set():
        pass


def bench_group(case: ZooCase, batch: int, threads: int, skip: set[str], rounds: int, length: int) -> Group:
    import opcore.graph

    torch.set_num_threads(threads)
    os.environ["OPCORE_RUNTIME_THREADS"] = str(threads)
    group = Group(case, batch, threads)
    model = case.build("bench")
    args, kwargs = case.inputs(batch, length)
    with torch.inference_mode():
        want = first_tensor(model(*args, **kwargs))
    calls: dict[str, Callable[[], Any]] = {}

    def call(fn: Callable[..., Any]) -> Callable[[], Any]:
        def run() -> Any:
            with torch.inference_mode():
                return fn(*args, **kwargs)

        return run

    calls["eager"] = call(model)
    group.rows["eager"] = Row("eager", diff=0.0)
    if "compile" not in skip:
        row = group.rows["compile"] = Row("compile")
        try:
            compiled = call(torch.compile(model))
            started = time.perf_counter()
            got = compiled()
            first = time.perf_counter() - started
            started = time.perf_counter()
            compiled()
            row.build_s = first - (time.perf_counter() - started)
            row.diff = relative_diff(got, want)
            calls["compile"] = compiled
        except Exception as error:  # the row says why compile failed; the bench goes on
            row.note = _reason(error)
    for label, backends in PLANS.items():
        if label != "plan" and "runtimes" in skip:
            continue
        row = group.rows[label] = Row(label)
        try:
            started = time.perf_counter()
            plan = opcore.graph.capture(model, args, kwargs, backends=backends)
            row.build_s = time.perf_counter() - started
            row.diff = relative_diff(plan(*args, **kwargs), want)
            row.runs, row.partitions = plan.summary(), len(plan.partitions)
            calls[label] = call(plan)
            if label == "plan":
                folder = pathlib.Path(tempfile.mkdtemp(prefix="opcore-zoo-"))
                plan.save(folder / "plan")
                started = time.perf_counter()
                loaded = opcore.graph.load(folder / "plan")
                row.load_s = time.perf_counter() - started
                loaded_diff = relative_diff(loaded(*args, **kwargs), want)
                if loaded_diff > 1e-4:
                    row.note = f"loaded plan differs: {loaded_diff:.1e}"
        except Exception as error:  # the row says why; the bench goes on
            row.note = _reason(error)
    if "dynamic" not in skip and case.dims:
        row = group.rows["dynamic"] = Row("dynamic")
        try:
            started = time.perf_counter()
            # torch.export takes a dim of size 1 in the example as 1 for good: the dynamic capture's
            # example has 2 rows at least, the plan is then timed on the row's own inputs
            wide_args, wide_kwargs = case.inputs(max(batch, 2), length)
            shapes = case.dynamic_shapes(max(64, 2 * length))
            plan = opcore.graph.capture(model, wide_args, wide_kwargs, dynamic_shapes=shapes)
            row.build_s = time.perf_counter() - started
            row.diff = relative_diff(plan(*args, **kwargs), want)
            row.runs, row.partitions = plan.summary(), len(plan.partitions)
            calls["dynamic"] = call(plan)
        except Exception as error:
            row.note = _reason(error)
    for label, seconds in medians(calls, repeats=rounds, warmup=1).items():
        group.rows[label].seconds = seconds
    if "plan" in calls and "dynamic" in calls:
        # the two plans compute the same thing: timed again as a pair, twice the rounds, without the
        # other columns between them (one column's median moves by 5-10 % from run to run here), the
        # ratio taken per round (back to back) and its median kept
        group.paired = paired_ratio(calls["plan"], calls["dynamic"], repeats=2 * rounds, warmup=1)
    return group


def report(group: Group) -> str:
    header = ("column", "ms", "x eager", "max rel diff", "build s", "load s", "runs")
    rows = []
    for label, row in group.rows.items():
        ratio = group.ratio(label)
        rows.append(
            (
                label,
                "-" if row.seconds is None else f"{row.seconds * 1e3:.3f}",
                "-" if ratio is None else f"{ratio:.2f}x",
                "-" if row.diff is None else f"{row.diff:.1e}",
                "-" if row.build_s is None else f"{row.build_s:.1f}",
                "-" if row.load_s is None else f"{row.load_s:.2f}",
                row.note or row.runs,
            )
        )
    case = group.case
    title = f"### {case.name} ({case.family}: {case.what}), batch {group.batch}, {group.threads} thread(s)"
    paired = "" if group.paired is None else f"dynamic vs static, timed as a pair: {group.paired:.2f}x; "
    return f"{title}\n\n{table(header, rows)}\n({paired}load average {os.getloadavg()[0]:.2f})\n"


def summary(groups: list[Group]) -> str:
    models = sorted({g.case.name for g in groups})
    captured = {g.case.name for g in groups if g.rows["plan"].diff is not None and g.rows["plan"].diff <= 1e-4}
    dynamic = [g for g in groups if "dynamic" in g.rows]
    dynamic_ok = {g.case.name for g in dynamic if g.rows["dynamic"].diff is not None and g.rows["dynamic"].diff <= 1e-4}
    lines = [
        f"models: {len(models)}; captured with default arguments and matching eager (rel. diff <= 1e-4): "
        f"{len(captured)}/{len(models)}"
        + (f" (not: {', '.join(sorted(set(models) - captured))})" if set(models) - captured else ""),
        f"dynamic dims captured and matching: {len(dynamic_ok)}/{len({g.case.name for g in dynamic})}"
        + (
            f" (not: {', '.join(sorted({g.case.name for g in dynamic} - dynamic_ok))})"
            if len(dynamic_ok) < len({g.case.name for g in dynamic})
            else ""
        ),
    ]
    for threads in sorted({g.threads for g in groups}):
        at = [g for g in groups if g.batch == min(x.batch for x in groups) and g.threads == threads]
        ratios = {g.case.name: r for g in at if (r := g.ratio("plan")) is not None}
        if ratios:
            below = sorted(name for name, r in ratios.items() if r < 1.0)
            behind = sorted(
                g.case.name
                for g in at
                if (p := g.ratio("plan")) is not None and (c := g.ratio("compile")) is not None and p < c
            )
            worst = min(ratios, key=ratios.__getitem__)
            lines.append(
                f"batch {at[0].batch}, {threads} thread(s): "
                f"plan vs eager median {statistics.median(ratios.values()):.2f}x, "
                f"minimum {ratios[worst]:.2f}x ({worst}), below 1.0x: {len(below)} {below or ''}, "
                f"behind compile: {len(behind)} {behind or ''}"
            )
        pairs = [(g.case.name, g.rows["plan"], g.rows["dynamic"], r) for g in at if (r := g.dynamic_vs_static())]
        if pairs:
            speed = {name: r for name, _, _, r in pairs}
            slow = sorted(name for name, r in speed.items() if r < 0.9)
            more = [name for name, p, d, _ in pairs if (d.partitions or 0) > (p.partitions or 0)]
            lines.append(
                f"  dynamic vs static plan (timed as pairs): median {statistics.median(speed.values()):.2f}x, "
                f"minimum {min(speed.values()):.2f}x ({min(speed, key=speed.__getitem__)}), "
                f"below 0.9x: {len(slow)} {slow or ''}; more partitions than static: {len(more)} {more or ''}"
            )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="", help="comma-separated zoo names (default: all)")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--length", type=int, default=32, help="sequence length of the text inputs")
    parser.add_argument("--skip", default="", help="comma-separated: compile, runtimes, dynamic")
    parser.add_argument("--busy", action="store_true", help="a second process spins on one core meanwhile")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    warnings.filterwarnings("ignore")
    cases = [by_name(n) for n in options.models.split(",") if n] or list(ZOO)
    skip = {s for s in options.skip.split(",") if s}
    print(f"# bench/zoo.py: {len(cases)} models, torch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f}{', one core kept busy' if options.busy else ''}")  # fmt: skip
    stop, spinner = None, None
    if options.busy:
        stop = multiprocessing.Event()
        spinner = multiprocessing.Process(target=_spin, args=(stop,), daemon=True)
        spinner.start()
    groups = []
    try:
        for case in cases:
            for batch in (int(b) for b in options.batches.split(",")):
                for threads in (int(t) for t in options.threads.split(",")):
                    group = bench_group(case, batch, threads, skip, options.rounds, options.length)
                    groups.append(group)
                    print(report(group), flush=True)
    finally:
        if stop is not None and spinner is not None:
            stop.set()
            spinner.join()
    print(summary(groups))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
