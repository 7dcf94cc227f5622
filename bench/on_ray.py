"""opcore plans on Ray (issue 28): a saved plan run by opcore.ray.PlanPredictor in a Ray actor
against the same UDF in this process, at the same threads.

    python bench/on_ray.py [--model small|0.5b] [--threads 1] [--batch 64] [--calls 40] [--rounds 5]

Rows:
  warm throughput: rows/s of one actor (batches sent as one object-store ref, two calls in flight, as
    Ray Data keeps an actor busy) against PlanPredictor called in this process, --rounds rounds of
    --calls calls each, the two taking turns; the median round, and the best (on a shared machine
    other processes only add time). Target: actor >= 0.9x in-process.
  cold start: an actor from ``.remote()`` to ready (its worker's imports and the plan's load)
    against a fresh Python's ``import torch, opcore.graph`` plus ``opcore.graph.load`` (median of 3).
    Target: actor <= 2x in-process.
  scaling (where the machine has the cores: actors x threads <= cores): 1, 2, 4, 8 actors x 1, 2, 4
    threads, all actors busy at once, rows/s of them all. Targets: 4 actors x 4 threads >= 3x one
    actor x 4 threads (small); the 0.5b model's weight reads per second as a fraction of this machine's
    read bandwidth (a torch sum over 512 MB at the row's total threads). Rows the cores do not allow
    are printed as skipped, with why.

The models are stacks of GELU MLPs captured with a dynamic batch dim (``--model small``: width 512,
hidden 2048, 2 layers, 4.2M parameters; ``0.5b``: width 4096, hidden 16384, 4 layers, 537M).
The local cluster gets the machine's cores (``ray.init(num_cpus=os.cpu_count())``).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import numpy

sys.path.insert(0, os.path.dirname(__file__))

from _timing import table

# name -> (width, hidden, layers)
MODELS = {"small": (512, 2048, 2), "0.5b": (4096, 16384, 4)}
SCALING_ACTORS = (1, 2, 4, 8)
SCALING_THREADS = (1, 2, 4)
TARGET_WARM = 0.9  # actor rows/s over in-process rows/s, at least
TARGET_COLD = 2.0  # actor start over in-process import + load, at most
TARGET_SCALING = 3.0  # 4 actors x 4 threads over 1 actor x 4 threads (small), at least


@dataclass(frozen=True, slots=True)
class ScalingRow:
    actors: int
    threads: int
    skipped: str  # why this row does not run here; "" when it runs


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default="small", help=f"one of {', '.join(MODELS)}")
    parser.add_argument("--threads", type=int, default=1, help="threads of the actor and of the in-process UDF")
    parser.add_argument("--batch", type=int, default=64, help="rows per call")
    parser.add_argument("--calls", type=int, default=40, help="calls per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--plan", type=pathlib.Path, default=None, help="a saved plan to use instead of --model's")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="cores the scaling rows may use")
    options = parser.parse_args(argv)
    if options.model not in MODELS:
        parser.error(f"--model: unknown {options.model}; expected one of {', '.join(MODELS)}")
    for name in ("threads", "batch", "calls", "rounds", "cores"):
        if getattr(options, name) < 1:
            parser.error(f"--{name}: expected an integer >= 1")
    if options.plan is not None and not (options.plan / "plan.json").is_file():
        parser.error(f"--plan: {options.plan} has no plan.json (pass a folder Plan.save wrote)")
    return options


def scaling_rows(
    cores: int, actors: tuple[int, ...] = SCALING_ACTORS, threads: tuple[int, ...] = SCALING_THREADS
) -> list[ScalingRow]:
    """Every actors x threads row, each skipped where it needs more cores than ``cores`` (the driver
    is left out of the count: it only waits)."""
    rows = []
    for count in actors:
        for per in threads:
            need = count * per
            why = f"needs {need} cores, this machine has {cores}" if need > cores else ""
            rows.append(ScalingRow(count, per, why))
    return rows


def model_parameters(model: str) -> int:
    width, hidden, layers = MODELS[model]
    return layers * (2 * width * hidden + hidden + width)


def save_model(model: str, folder: pathlib.Path) -> pathlib.Path:
    import torch

    import opcore.graph

    width, hidden, layers = MODELS[model]
    torch.manual_seed(0)
    mlp = lambda: torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, width))  # noqa: E731
    stack = torch.nn.Sequential(*[mlp() for _ in range(layers)]).eval()
    batch = torch.export.Dim("batch")
    plan = opcore.graph.capture(stack, (torch.randn(4, width),), dynamic_shapes=({0: batch},), measure=False)
    return plan.save(folder / f"{model}.plan")


def batch_of(rows: int, width: int) -> dict[str, numpy.ndarray]:
    x = numpy.random.default_rng(0).standard_normal((rows, width)).astype(numpy.float32)
    return {"id": numpy.arange(rows), "input": x}


def in_process_round(predict: Any, batch: dict[str, Any], calls: int) -> float:
    """Seconds per call of ``calls`` calls of the UDF in this process."""
    started = time.perf_counter()
    for _ in range(calls):
        predict(batch)
    return (time.perf_counter() - started) / calls


def warm_seconds(
    path: pathlib.Path, batch: dict[str, Any], options: argparse.Namespace
) -> tuple[list[float], list[float]]:
    """Each round's seconds per call in this process and in one actor, at the same threads; their
    rounds interleaved, so that the machine's drift (a shared machine) hits both alike."""
    import ray

    from opcore.ray import PlanPredictor

    predict = PlanPredictor(path, threads=options.threads, metadata=False)
    actor = actor_class().options(num_cpus=options.threads).remote(path, threads=options.threads, metadata=False)
    batch_ref = ray.put(batch)
    in_process_round(predict, batch, 3)
    drive([actor], batch_ref, 3)
    here, away = [], []
    for _ in range(options.rounds):
        here.append(in_process_round(predict, batch, options.calls))
        away.append(drive([actor], batch_ref, options.calls) / options.calls)
    ray.kill(actor)
    return here, away


def actor_class() -> Any:
    import ray

    from opcore.ray import PlanPredictor

    class TimedPredictor(PlanPredictor):  # a method Ray can call (the UDF itself is __call__)
        def run(self, batch: dict[str, Any]) -> int:
            return len(self(batch)["output"])

    return ray.remote(TimedPredictor)


def drive(actors: list[Any], batch_ref: Any, calls: int, in_flight: int = 2) -> float:
    """Seconds for ``calls`` calls on each of ``actors``, each kept ``in_flight`` calls busy (as Ray
    Data keeps an actor busy: the next batch is there when one ends)."""
    import ray

    owner: dict[Any, Any] = {}
    left = dict.fromkeys(actors, calls)
    started = time.perf_counter()
    for actor in actors:
        for _ in range(min(in_flight, calls)):
            owner[actor.run.remote(batch_ref)] = actor
            left[actor] -= 1
    while owner:
        done, _ = ray.wait(list(owner), num_returns=1)
        actor = owner.pop(done[0])
        ray.get(done[0])
        if left[actor]:
            owner[actor.run.remote(batch_ref)] = actor
            left[actor] -= 1
    return time.perf_counter() - started


def cold_start_actor(path: pathlib.Path, threads: int) -> float:
    import ray

    started = time.perf_counter()
    actor = actor_class().options(num_cpus=threads).remote(path, threads=threads, metadata=False)
    ray.get(actor.__ray_ready__.remote())
    seconds = time.perf_counter() - started
    ray.kill(actor)
    return seconds


def cold_load_in_process(path: pathlib.Path, threads: int) -> float:
    """A fresh Python's import of torch and opcore.graph and the plan's load (the interpreter's own start
    left out, as an actor's worker is started before it is asked for)."""
    script = (
        "import time; started = time.perf_counter(); import torch, opcore.graph; "
        f"torch.set_num_threads({threads}); opcore.graph.load({str(path)!r}); print(time.perf_counter() - started)"
    )
    environ = {**os.environ, "OPCORE_RUNTIME_THREADS": str(threads)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environ, check=True)
    return float(done.stdout.split()[-1])


def scaling(path: pathlib.Path, batch: dict[str, Any], options: argparse.Namespace) -> list[tuple[str, ...]]:
    import ray

    rows: list[tuple[str, ...]] = []
    batch_ref = ray.put(batch)
    baseline: dict[int, float] = {}
    weights = model_parameters(options.model) * 4
    for row in scaling_rows(options.cores):
        label = f"{row.actors} actor(s) x {row.threads} thread(s)"
        if row.skipped:
            rows.append((label, "skipped", row.skipped, ""))
            continue
        actors = [
            actor_class().options(num_cpus=row.threads).remote(path, threads=row.threads, metadata=False)
            for _ in range(row.actors)
        ]
        ray.get([a.__ray_ready__.remote() for a in actors])
        drive(actors, batch_ref, 3)
        wall = drive(actors, batch_ref, options.calls)
        rows_per_s = row.actors * options.calls * options.batch / wall
        for actor in actors:
            ray.kill(actor)
        if row.actors == 1:
            baseline[row.threads] = rows_per_s
        scale = f"{rows_per_s / baseline[row.threads]:.2f}x one actor" if row.threads in baseline else ""
        if options.model == "0.5b":
            import torch
            from generate import read_bandwidth

            torch.set_num_threads(row.actors * row.threads)
            bandwidth = read_bandwidth("cpu", 512)
            calls_per_s = row.actors * options.calls / wall
            scale += f"; {calls_per_s * weights / bandwidth:.2f} of {bandwidth / 1e9:.1f} GB/s"
        rows.append((label, f"{rows_per_s:,.0f}", f"{wall / options.calls * 1e3:.1f} ms", scale))
    return rows


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="opcore-bench-ray-") as scratch:
        return report(options.plan or save_model(options.model, pathlib.Path(scratch)), options)


def report(path: pathlib.Path, options: argparse.Namespace) -> int:
    """The tables, for the plan at ``path``, on a local cluster of the machine's cores."""
    import ray
    import torch

    width = MODELS[options.model][0]
    batch = batch_of(options.batch, width)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    try:
        cold_in = statistics.median(cold_load_in_process(path, options.threads) for _ in range(3))
        cold_actor = statistics.median(cold_start_actor(path, options.threads) for _ in range(3))
        here_rounds, away_rounds = warm_seconds(path, batch, options)
        print(
            f"bench/on_ray.py: model {options.model} ({model_parameters(options.model) / 1e6:.1f}M parameters), "
            f"batch {options.batch} rows, {options.threads} thread(s) (torch {torch.get_num_threads()} here), "
            f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, ray {ray.__version__}"
        )
        cold = cold_actor / cold_in
        warm_rows = []
        for pick, name in ((statistics.median, "median"), (min, "best")):
            here, away = pick(here_rounds), pick(away_rounds)
            warm = here / away
            warm_rows.append(
                (
                    f"warm throughput, {name} round (rows/s)",
                    f"{options.batch / here:,.0f}",
                    f"{options.batch / away:,.0f}",
                    f"{warm:.3f}x",
                    f">= {TARGET_WARM}x: {'met' if warm >= TARGET_WARM else 'NOT met'}",
                )
            )
        print(
            table(
                ("row", "in-process", "actor", "actor / in-process", "target"),
                [
                    *warm_rows,
                    (
                        "cold start (import + load, s)",
                        f"{cold_in:.2f}",
                        f"{cold_actor:.2f}",
                        f"{cold:.3f}x",
                        f"<= {TARGET_COLD}x: {'met' if cold <= TARGET_COLD else 'NOT met'}",
                    ),
                ],
            )
        )
        print()
        print(table(("scaling", "rows/s (all actors)", "wall / calls", "vs one actor"), scaling(path, batch, options)))
    finally:
        ray.shutdown()

    return 0


if __name__ == "__main__":
    raise SystemExit(main())
