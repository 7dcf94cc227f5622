"""Dispatch overhead: opcore.run and a resolved op against the kernel called directly.

Targets (issues 2 and 15): the cached path of run() costs at most 1 us over the kernel (median),
positional and keyword calls alike; a resolved op at most 0.2 us. Two tables:

- numpy: the reference backend alone against its kernel called directly;
- torch (issue 15): CPU tensors, 1 thread, the cpu backend's ATen kernels against the direct torch
  call (``F.linear`` etc.), with ``torch.ops.aten.X.default`` (torch's boxed entry) for comparison;
  with ``--cuda`` the same on the GPU (needs a CUDA build of torch and a GPU).

Also prints what `import opcore` costs beyond numpy, and the first opcore.run.

    python bench/dispatch.py [--torch-only] [--cuda] [--paths] [--guards]

``--paths``: opcore.run's pure-Python path against its compiled fast path (opcore._fastrun), minima.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy

sys.path.insert(0, os.path.dirname(__file__))
from _timing import medians, table

import opcore
from opcore.reference import elementwise, linear


def first_call_ms(repeats: int = 7, settle_gc: bool = False, load_cache: bool = True) -> tuple[float, float]:
    """Median (wall ms, CPU ms), each in a fresh process with torch already imported, of the first
    opcore.run on a numpy array: loading the dispatcher and every installed plugin, selecting, and
    running (the runtime import itself, torch here, is the library's cost, not opcore's).

    The children may write bytecode caches (PYTHONDONTWRITEBYTECODE is dropped, one untimed run
    first), as an installed package has: without them every process compiles opcore's ~90 modules
    (~250 ms here). ``settle_gc``: ``gc.collect()`` after ``import torch``. Importing torch leaves
    ~170k objects that the collector has not yet examined in a full pass; the first few thousand
    allocations after it, whoever makes them, trigger that pass (~100 ms on this machine). Settled,
    the figure is opcore's own work; unsettled, it also carries that pass.

    The untimed run also writes the entry-point cache (``plugins.json``, opcore.discovery) if it is
    missing or stale, so the timed children read it, as every process after an install does;
    ``load_cache=False`` times them with ``OPCORE_LOAD_CACHE=0`` (the entry points scanned each time).
    """
    code = (
        "import time, gc, numpy, torch, opcore; " + ("gc.collect(); " if settle_gc else "") +
        "x = numpy.ones((2, 8), 'float32'); "
        "t = time.perf_counter(); c = time.process_time(); opcore.run('relu', x); "
        "print((time.perf_counter() - t) * 1e3, (time.process_time() - c) * 1e3)"
    )  # fmt: skip
    env = _child_env()
    if not load_cache:
        env["OPCORE_LOAD_CACHE"] = "0"
    subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    runs = []
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
        runs.append(tuple(map(float, out.stdout.split())))
    walls = sorted(r[0] for r in runs)
    cpus = sorted(r[1] for r in runs)
    return walls[len(walls) // 2], cpus[len(cpus) // 2]


def _child_env() -> dict[str, str]:
    """The environment for a timed child process: bytecode caches allowed, as an installed package has them."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def torch_rows(device: str) -> list[tuple[str, ...]]:
    """The torch table: run (positional, keyword), resolved, the boxed aten call, against the direct call."""
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, generator=gen).to(device)
    w = torch.randn(8, 8, generator=gen).to(device)
    b = torch.randn(8, generator=gen).to(device)
    ln_w, ln_b = torch.ones(8, device=device), torch.zeros(8, device=device)
    aten = torch.ops.aten
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("linear", (x, w), {}),
        ("linear", (x, w, b), {}),
        ("relu", (x,), {}),
        ("softmax", (x, -1), {}),
    ]
    for call in calls:
        opcore.run(call[0], *call[1], **call[2])
    resolved_linear = opcore.resolve("linear", x, w, b)
    resolved_linear_const = opcore.resolve("linear", x, w, b, constants=("w", "b"))
    resolved_relu = opcore.resolve("relu", x)
    chosen = opcore.explain("linear", x, w, b).chosen
    from opcore.dispatch import run_python  # the pure-Python path (opcore.run: the compiled one, where built)

    cases: dict[str, Callable[[], object]] = {
        "F.linear(x, w)": lambda: F.linear(x, w),
        "aten linear(x, w)": lambda: aten.linear.default(x, w),
        "run linear(x, w)": lambda: opcore.run("linear", x, w),
        "F.linear(x, w, b)": lambda: F.linear(x, w, b),
        "aten linear(x, w, b)": lambda: aten.linear.default(x, w, b),
        "run linear(x, w, b)": lambda: opcore.run("linear", x, w, b),
        "run linear(x, w, b=b)": lambda: opcore.run("linear", x, w, b=b),
        "pure linear(x, w)": lambda: run_python("linear", x, w),
        "pure linear(x, w, b)": lambda: run_python("linear", x, w, b),
        "pure linear(x, w, b=b)": lambda: run_python("linear", x, w, b=b),
        "resolved linear(x, w, b)": lambda: resolved_linear(x, w, b),
        "resolved linear(x) const w, b": lambda: resolved_linear_const(x),
        "torch.relu(x)": lambda: torch.relu(x),
        "aten relu(x)": lambda: aten.relu.default(x),
        "run relu(x)": lambda: opcore.run("relu", x),
        "pure relu(x)": lambda: run_python("relu", x),
        "resolved relu(x)": lambda: resolved_relu(x),
        "torch.softmax(x, -1)": lambda: torch.softmax(x, -1),
        "aten softmax(x, -1)": lambda: aten._softmax.default(x, -1, False),
        "run softmax(x, -1)": lambda: opcore.run("softmax", x, -1),
        "run softmax(x, dim=-1)": lambda: opcore.run("softmax", x, dim=-1),
        "pure softmax(x, -1)": lambda: run_python("softmax", x, -1),
        "pure softmax(x, dim=-1)": lambda: run_python("softmax", x, dim=-1),
        "F.layer_norm(x, (8,), w, b)": lambda: F.layer_norm(x, (8,), ln_w, ln_b),
        "aten layer_norm(x, [8], w, b)": lambda: aten.layer_norm.default(x, [8], ln_w, ln_b),
        "run layer_norm(x, (8,), w, b)": lambda: opcore.run("layer_norm", x, (8,), ln_w, ln_b),
        "run layer_norm(x, (8,), weight=w, bias=b)": lambda: opcore.run("layer_norm", x, (8,), weight=ln_w, bias=ln_b),
    }
    if sync is not None:

        def synced(fn: Callable[[], object], sync: Callable[[], None] = sync) -> Callable[[], object]:
            def call() -> None:
                fn()
                sync()

            return call

        cases = {name: synced(fn) for name, fn in cases.items()}
    times = medians(cases)
    rows: list[tuple[str, ...]] = []
    for label, direct, target in [
        ("run linear(x, w)", "F.linear(x, w)", 1.0),
        ("run linear(x, w, b)", "F.linear(x, w, b)", 1.0),
        ("run linear(x, w, b=b)", "F.linear(x, w, b)", 1.0),
        ("resolved linear(x, w, b)", "F.linear(x, w, b)", 0.2),
        ("resolved linear(x) const w, b", "F.linear(x, w, b)", 0.2),
        ("run relu(x)", "torch.relu(x)", 1.0),
        ("resolved relu(x)", "torch.relu(x)", 0.2),
        ("run softmax(x, -1)", "torch.softmax(x, -1)", 1.0),
        ("run softmax(x, dim=-1)", "torch.softmax(x, -1)", 1.0),
        ("run layer_norm(x, (8,), w, b)", "F.layer_norm(x, (8,), w, b)", 1.0),
        ("run layer_norm(x, (8,), weight=w, bias=b)", "F.layer_norm(x, (8,), w, b)", 1.0),
    ]:
        rows.append(_row(label, direct, target, times))
    for label, direct in [
        ("pure linear(x, w)", "F.linear(x, w)"),
        ("pure linear(x, w, b)", "F.linear(x, w, b)"),
        ("pure linear(x, w, b=b)", "F.linear(x, w, b)"),
        ("pure relu(x)", "torch.relu(x)"),
        ("pure softmax(x, -1)", "torch.softmax(x, -1)"),
        ("pure softmax(x, dim=-1)", "torch.softmax(x, -1)"),
        ("aten linear(x, w)", "F.linear(x, w)"),
        ("aten linear(x, w, b)", "F.linear(x, w, b)"),
        ("aten relu(x)", "torch.relu(x)"),
        ("aten softmax(x, -1)", "torch.softmax(x, -1)"),
        ("aten layer_norm(x, [8], w, b)", "F.layer_norm(x, (8,), w, b)"),
    ]:
        rows.append(_row(label, direct, None, times))
    print(f"\nopcore dispatch overhead, torch on {device} ({chosen} for linear), x 2x8 · w 8x8 float32, "
          f"{torch.get_num_threads()} thread(s); 'run': opcore.run ({_path()}); 'pure': the pure-Python run(); "
          "'aten': torch's boxed torch.ops.aten.X.default")  # fmt: skip
    return rows


def guard_rows(rounds: int = 25, number: int = 3000) -> list[tuple[str, ...]]:
    """run() and resolved ops with the Python key alone (both guards hidden), torch's TensorGuards and
    opcore's compiled guard (opcore._guards; where it is built for this torch), in one process,
    interleaved round by round; minima over the rounds (the least disturbed run of each: on a shared
    machine medians move by more than the difference).
    """
    import timeit

    import torch
    import torch.nn.functional as F

    from opcore import _guards, dispatch

    gen = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(2, 8, generator=gen), torch.randn(8, 8, generator=gen), torch.randn(8, generator=gen)
    run = dispatch.run_python  # the guard's effect on the pure-Python path (--paths: the compiled one)

    def make_cases() -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
        # resolved ops make their guard at resolve: made again under each setting
        linear = opcore.resolve("linear", x, w, b)
        linear_const = opcore.resolve("linear", x, w, b, constants=("w", "b"))
        relu = opcore.resolve("relu", x)
        return {
            "run linear(x, w, b)": (lambda: F.linear(x, w, b), lambda: run("linear", x, w, b)),
            "run linear(x, w, b=b)": (lambda: F.linear(x, w, b), lambda: run("linear", x, w, b=b)),
            "run linear(x, w)": (lambda: F.linear(x, w), lambda: run("linear", x, w)),
            "run relu(x)": (lambda: torch.relu(x), lambda: run("relu", x)),
            "run softmax(x, -1)": (lambda: torch.softmax(x, -1), lambda: run("softmax", x, -1)),
            "run softmax(x, dim=-1)": (lambda: torch.softmax(x, -1), lambda: run("softmax", x, dim=-1)),
            "resolved linear(x, w, b)": (lambda: F.linear(x, w, b), lambda: linear(x, w, b)),
            "resolved linear(x) const w, b": (lambda: F.linear(x, w, b), lambda: linear_const(x)),
            "resolved relu(x)": (lambda: torch.relu(x), lambda: relu(x)),
        }

    _guards.tensor_guard((x,))
    guards, ours = _guards._torch_guards(), _guards._compiled_guard()
    settings = {"key": (False, False), "torch": (guards, False), "opcore": (False, ours)}
    direct: dict[str, float] = {}
    best: dict[tuple[str, str], float] = {}
    for _ in range(rounds):
        for setting, (torch_guards, own) in settings.items():
            if setting == "opcore" and ours is False:
                continue
            _guards._TensorGuards, _guards._Guard = torch_guards, own
            dispatch.clear_caches()
            cases = make_cases()
            for _, call in cases.values():
                call()
            for label, (plain, call) in cases.items():
                direct[label] = min(direct.get(label, 1.0), timeit.timeit(plain, number=number) / number)
                t = timeit.timeit(call, number=number) / number
                best[(setting, label)] = min(best.get((setting, label), 1.0), t)
    _guards._TensorGuards, _guards._Guard = guards, ours
    dispatch.clear_caches()

    def cell(setting: str, label: str) -> str:
        if (setting, label) not in best:
            return f"not built: {_guards._GUARD_REASON}"
        return f"{best[(setting, label)] * 1e6:.2f} ({(best[(setting, label)] - direct[label]) * 1e6:+.2f})"

    return [(label, f"{direct[label] * 1e6:.2f}", *(cell(setting, label) for setting in settings)) for label in cases]


def _path() -> str:
    from opcore import dispatch

    return "compiled fast path" if dispatch.compiled() else f"pure Python: {dispatch.PURE_PYTHON_REASON}"


def path_rows(rounds: int = 80, number: int = 1000) -> list[tuple[str, ...]]:
    """opcore.run's two paths against the direct torch call and torch's boxed entry, in one process,
    interleaved round by round; minima over the rounds (see guard_rows): the pure-Python run()
    (dispatch.run_python) and the compiled fast path in front of it (opcore._fastrun). Then the same
    for numpy arrays on the reference backend (direct: its kernel).
    """

    import torch
    import torch.nn.functional as F

    from opcore import dispatch

    gen = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(2, 8, generator=gen), torch.randn(8, 8, generator=gen), torch.randn(8, generator=gen)
    run, pure, aten = opcore.run, dispatch.run_python, torch.ops.aten
    cases: dict[str, tuple[Callable[[], object], ...]] = {
        "linear(x, w, b)": (
            lambda: F.linear(x, w, b), lambda: aten.linear.default(x, w, b),
            lambda: pure("linear", x, w, b), lambda: run("linear", x, w, b),
        ),
        "linear(x, w, b=b)": (
            lambda: F.linear(x, w, b), lambda: aten.linear.default(x, w, b),
            lambda: pure("linear", x, w, b=b), lambda: run("linear", x, w, b=b),
        ),
        "linear(x, w)": (
            lambda: F.linear(x, w), lambda: aten.linear.default(x, w),
            lambda: pure("linear", x, w), lambda: run("linear", x, w),
        ),
        "relu(x)": (
            lambda: torch.relu(x), lambda: aten.relu.default(x), lambda: pure("relu", x), lambda: run("relu", x),
        ),
        "softmax(x, -1)": (
            lambda: torch.softmax(x, -1), lambda: aten._softmax.default(x, -1, False),
            lambda: pure("softmax", x, -1), lambda: run("softmax", x, -1),
        ),
        "softmax(x, dim=-1)": (
            lambda: torch.softmax(x, -1), lambda: aten._softmax.default(x, -1, False),
            lambda: pure("softmax", x, dim=-1), lambda: run("softmax", x, dim=-1),
        ),
    }  # fmt: skip
    best = _fastest(cases, rounds, number)
    rows = []
    for label in cases:
        direct = best[(label, 0)]
        over = [f"{best[(label, i)] * 1e6:.2f} ({(best[(label, i)] - direct) * 1e6:+.2f})" for i in (1, 2, 3)]
        rows.append((label, f"{direct * 1e6:.2f}", *over))
    return rows + _numpy_path_rows(rounds, number)


def _fastest(
    cases: dict[str, tuple[Callable[[], object], ...]], rounds: int, number: int
) -> dict[tuple[str, int], float]:
    """Each call's fastest time per call over ``rounds`` interleaved rounds of ``number`` calls, by
    (label, position), after one untimed call of each (path_rows, _numpy_path_rows)."""
    import timeit

    for calls in cases.values():
        for call in calls:
            call()
    best: dict[tuple[str, int], float] = {}
    for _ in range(rounds):
        for label, calls in cases.items():
            for i, call in enumerate(calls):
                t = timeit.timeit(call, number=number) / number
                best[(label, i)] = min(best.get((label, i), 1.0), t)
    return best


def _numpy_path_rows(rounds: int, number: int) -> list[tuple[str, ...]]:
    """path_rows for numpy arrays: the reference backend alone (as numpy_table), against its kernel."""

    from opcore import dispatch

    x = numpy.random.default_rng(0).standard_normal((2, 8)).astype(numpy.float32)
    w = numpy.random.default_rng(1).standard_normal((8, 8)).astype(numpy.float32)
    b = numpy.zeros(8, numpy.float32)
    run, pure = opcore.run, dispatch.run_python
    opcore.configure(disable=[r.name for r in opcore.backends() if r.name != "reference"])
    try:
        cases: dict[str, tuple[Callable[[], object], ...]] = {
            "numpy linear(x, w, b)": (
                lambda: linear.linear(x, w, b),
                lambda: pure("linear", x, w, b),
                lambda: run("linear", x, w, b),
            ),
            "numpy linear(x, w)": (
                lambda: linear.linear(x, w, None),
                lambda: pure("linear", x, w),
                lambda: run("linear", x, w),
            ),
            "numpy relu(x)": (lambda: elementwise.relu(x), lambda: pure("relu", x), lambda: run("relu", x)),
        }
        best = _fastest(cases, rounds, number)
    finally:
        opcore.configure(disable=None)
    rows = []
    for label in cases:
        direct = best[(label, 0)]
        over = [f"{best[(label, i)] * 1e6:.2f} ({(best[(label, i)] - direct) * 1e6:+.2f})" for i in (1, 2)]
        rows.append((label, f"{direct * 1e6:.2f}", "", *over))
    return rows


def _row(label: str, direct: str, target: float | None, times: dict[str, float]) -> tuple[str, ...]:
    overhead = (times[label] - times[direct]) * 1e6
    return (
        label,
        f"{times[direct] * 1e6:.2f}",
        f"{times[label] * 1e6:.2f}",
        f"{overhead:+.2f}",
        f"{times[label] / times[direct]:.2f}x",
        "" if target is None else f"<= {target}",
        "" if target is None else ("yes" if overhead <= target else "NO"),
    )


HEADER = ("call", "direct us", "opcore us", "overhead us", "ratio", "target", "met")


def import_cost_ms(repeats: int = 7) -> tuple[float, float, float]:
    """Median ms, each in a fresh process, of `import numpy`, of `import opcore` after it, and of
    the first opcore.run (which loads the dispatcher and every installed plugin; no runtime).
    """
    code = (
        "import time; t0 = time.perf_counter(); import numpy; t1 = time.perf_counter(); "
        "import opcore; t2 = time.perf_counter(); "
        "opcore.run('relu', numpy.ones(2, 'float32'), backend='reference'); t3 = time.perf_counter(); "
        "print((t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3)"
    )
    runs: list[tuple[float, float, float]] = []
    subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, env=_child_env())  # caches
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=_child_env()
        ).stdout
        numpy_ms, opcore_ms, first_run_ms = map(float, out.split())
        runs.append((numpy_ms, opcore_ms, first_run_ms))
    runs.sort(key=lambda r: r[1])
    return runs[len(runs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-only", action="store_true", help="only the torch table (and the first call)")
    parser.add_argument("--cuda", action="store_true", help="the torch table on the GPU too")
    parser.add_argument(
        "--guards",
        action="store_true",
        help="only run() and resolve: the Python key, torch's TensorGuards, opcore's compiled guard",
    )
    parser.add_argument(
        "--paths", action="store_true", help="only the A/B of opcore.run's pure-Python and compiled paths (minima)"
    )
    args = parser.parse_args()
    if args.paths:
        import torch

        torch.set_num_threads(1)
        print(
            f"\nopcore.run's two paths on torch tensors (cpu/aten) and numpy arrays (reference), x 2x8 · w 8x8 "
            f"float32, 1 thread, us per call, "
            f"minima of 80 interleaved rounds of 1000 calls; load {os.getloadavg()[0]:.2f}; opcore.run here: {_path()}"
        )
        print(table(("call", "direct", "aten boxed (over)", "pure Python (over)", "compiled (over)"), path_rows()))
        return
    if args.guards:
        import torch

        torch.set_num_threads(1)
        load = os.getloadavg()[0]
        print(
            f"\nrun() and resolved ops on torch tensors, x 2x8 · w 8x8 float32, 1 thread, us per call, minima; "
            f"load {load:.2f}"
        )
        columns = ("call", "direct", "Python key (over)", "TensorGuards (over)", "opcore guard (over)")
        print(table(columns, guard_rows()))
        return
    if not args.torch_only:
        numpy_table()
        opcore.configure(disable=None)  # every backend again, for the torch tables
    import torch

    torch.set_num_threads(1)
    print(table(HEADER, torch_rows("cpu")))
    if args.cuda:
        print(table(HEADER, torch_rows("cuda")))
    if not args.torch_only:
        numpy_ms, opcore_ms, _ = import_cost_ms()
        print(f"\nimport numpy: {numpy_ms:.1f} ms; import opcore after it: {opcore_ms:.1f} ms (target < 50 ms)")
    load = os.getloadavg()[0]
    for settle, what in ((True, "torch's pending GC pass settled first"), (False, "as is, with that GC pass")):
        wall, cpu = first_call_ms(settle_gc=settle)
        print(f"first opcore.run with torch imported, {what} (loads the dispatcher and every installed "
              f"plugin): {wall:.1f} ms wall, {cpu:.1f} ms CPU (target <= 50 ms); load average {load:.2f}")  # fmt: skip
    wall, cpu = first_call_ms(settle_gc=True, load_cache=False)
    print(f"the same, settled, with OPCORE_LOAD_CACHE=0 (entry points scanned, not read from plugins.json): "
          f"{wall:.1f} ms wall, {cpu:.1f} ms CPU")  # fmt: skip


def numpy_table() -> None:
    x = numpy.random.default_rng(0).standard_normal((2, 8)).astype(numpy.float32)
    w = numpy.random.default_rng(1).standard_normal((8, 8)).astype(numpy.float32)
    b = numpy.zeros(8, numpy.float32)
    # the overhead of dispatch itself: the reference backend alone, whatever else is installed
    others = [r.name for r in opcore.backends() if r.name != "reference"]
    opcore.configure(disable=others)
    opcore.run("linear", x, w)  # load plugins and fill the caches
    opcore.run("linear", x, w, b)
    opcore.run("relu", x)
    assert opcore.explain("linear", x, w).chosen == "reference"
    resolved = opcore.resolve("linear", x, w, b)
    resolved_const = opcore.resolve("linear", x, w, b, constants=("w", "b"))
    resolved_relu = opcore.resolve("relu", x)

    times = medians(
        {
            "direct linear(x, w, None)": lambda: linear.linear(x, w, None),
            "run linear(x, w)": lambda: opcore.run("linear", x, w),
            "direct linear(x, w, b)": lambda: linear.linear(x, w, b),
            "run linear(x, w, b)": lambda: opcore.run("linear", x, w, b),
            "resolved linear(x, w, b)": lambda: resolved(x, w, b),
            "resolved linear(x) const w, b": lambda: resolved_const(x),
            "direct relu(x)": lambda: elementwise.relu(x),
            "run relu(x)": lambda: opcore.run("relu", x),
            "resolved relu(x)": lambda: resolved_relu(x),
        }
    )
    rows: list[tuple[str, ...]] = []
    for label, direct, target in [
        ("run linear(x, w)", "direct linear(x, w, None)", 1.0),
        ("run linear(x, w, b)", "direct linear(x, w, b)", 1.0),
        ("resolved linear(x, w, b)", "direct linear(x, w, b)", 0.2),
        ("resolved linear(x) const w, b", "direct linear(x, w, b)", 0.2),
        ("run relu(x)", "direct relu(x)", 1.0),
        ("resolved relu(x)", "direct relu(x)", 0.2),
    ]:
        rows.append(_row(label, direct, target, times))
    print("opcore dispatch overhead, reference backend, x 2x8 · w 8x8 float32 (medians of 31 interleaved runs)")
    print(table(HEADER, rows))


if __name__ == "__main__":
    main()
