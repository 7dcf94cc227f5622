"""``opcore bench OP --shapes ... [--backends a,b]``: the same call on each backend, side by side.

Per backend: resolve once (``opcore.resolve(..., backend=name)``, so dispatch is not timed; or
``--mode run`` to time ``opcore.run`` with its dispatch), one first call (compilation, sessions),
warm-up calls, then repeated timed rounds of N calls each (N chosen so a round lasts long enough
to time). Reported per call: median, interquartile range, min and max over the rounds, and the
median relative to the fastest backend. A backend that would not run the op shows why instead.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opcore.backend import DEFAULT_PRIORITIES
from opcore.cli.inputs import CallSpec, TensorSpec, add_input_arguments, prepare_call
from opcore.cli.render import Style, dumps_json, format_seconds, style_for, table
from opcore.errors import NoKernelError, OpcoreError, PluginError, Unsupported

__all__ = ["BenchResult", "add_parser", "measure", "run_bench"]

EXAMPLES = """\
examples:
  opcore bench linear --shapes 2x8,8x8
  opcore bench linear --shapes 32x4096,4096x4096 --dtype bfloat16 --backends cpu,openvino
  opcore bench linear --shapes 32x4096,4096x4096 --constants w    # weights prepared (packed) once
  opcore bench softmax --shapes 64x1024 --attr dim=-1 --json

exit status: 0 at least one backend ran, 1 none could, 2 bad arguments or input"""


@dataclass(frozen=True, slots=True)
class BenchResult:
    """One backend's row. status: "ok" (timed), "skipped" (it would not run the op: reason), or
    "failed" (it raised while running: reason). Times are seconds per call; None unless ok.
    """

    backend: str
    status: str
    kernel: str = ""
    reason: str = ""
    first_call_s: float | None = None
    number: int = 0
    times_s: tuple[float, ...] = ()

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.times_s) if self.times_s else None

    def quartiles(self) -> tuple[float, float] | None:
        if not self.times_s:
            return None
        if len(self.times_s) < 2:
            return self.times_s[0], self.times_s[0]
        q1, _, q3 = statistics.quantiles(self.times_s, n=4, method="inclusive")
        return q1, q3


def add_parser(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "bench",
        parents=[parent],
        help="time an op on each backend side by side",
        description="Run one call on each backend: warm-up, repeated timed rounds, the median and spread "
        "per call, and the speed relative to the fastest.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(parser)
    parser.add_argument("--backends", metavar="A,B", help="the backends to compare (default: every loaded one)")
    parser.add_argument(
        "--mode",
        choices=("resolve", "run"),
        default="resolve",
        help="resolve: decide once and time the kernel call (default); run: time opcore.run with its dispatch",
    )
    parser.add_argument(
        "--constants", metavar="NAMES", default="", help="tensor arguments fixed across calls (w,b): prepared once"
    )
    parser.add_argument("--repeat", type=_positive, default=15, help="timed rounds per backend (default 15)")
    parser.add_argument("--warmup", type=_natural, default=3, help="untimed calls before the rounds (default 3)")
    parser.add_argument(
        "--min-time", type=float, default=0.2, metavar="SECONDS", help="timed seconds per backend to aim for (0.2)"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.set_defaults(handler=run_bench)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, found {text!r}")
    return value


def _natural(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 0, found {text!r}")
    return value


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _skip_reason(op: str, name: str, kwargs: dict[str, Any], error: OpcoreError) -> str:
    """Why a pinned resolve failed, in one line: the backend's own row of the explanation."""
    import opcore

    try:
        explanation = opcore.explain(op, backend=name, **kwargs)
    except OpcoreError as again:
        return _first_line(again).split(" Fix:")[0]
    for candidate in explanation.candidates:
        if candidate.backend == name and candidate.reason:
            said = candidate.status.value in candidate.reason  # "has no kernel for linear" says it already
            return candidate.reason if said else f"{candidate.status.value}: {candidate.reason}"
    return _first_line(error).split(" Fix:")[0]


def _synchronizer(call: CallSpec) -> Callable[[], None]:
    if call.device.type.value == "cuda":
        import torch

        return torch.cuda.synchronize
    return lambda: None


def measure(
    fn: Callable[..., Any],
    free: tuple[Any, ...],
    *,
    warmup: int,
    repeat: int,
    min_time: float,
    sync: Callable[[], None],
    progress: Callable[[str], None],
) -> tuple[float, int, tuple[float, ...]]:
    """(first call, calls per round, seconds per call of each round)."""
    started = time.perf_counter()
    fn(*free)
    sync()
    first = time.perf_counter() - started
    progress("warming up")
    for _ in range(warmup):
        fn(*free)
    sync()

    def one_round(number: int) -> float:
        begin = time.perf_counter()
        for _ in range(number):
            fn(*free)
        sync()
        return time.perf_counter() - begin

    # calls per round: grow until a round lasts its share of min_time (as timeit.autorange does)
    target = max(min_time / repeat, 1e-4)
    number = 1
    while True:
        elapsed = one_round(number)
        if elapsed >= target or number >= 1_000_000:
            break
        number = max(number * 2, int(number * target / max(elapsed, 1e-9) * 1.1))
    times = []
    for i in range(repeat):
        progress(f"round {i + 1}/{repeat}")
        times.append(one_round(number) / number)
    return first, number, tuple(times)


def _bench_one(
    name: str, call: CallSpec, kwargs: dict[str, Any], args: argparse.Namespace, progress: Any
) -> BenchResult:
    import opcore
    from opcore.runtime import runtime

    report = runtime().report(name)
    if report is None:
        hint = f"pip install 'opcore[{name}]'" if name in DEFAULT_PRIORITIES else "no plugin provides it"
        return BenchResult(name, "skipped", reason=f"not installed ({hint})")
    if not report.ok:
        return BenchResult(name, "skipped", reason=report.status_text.split(" Fix: ")[0])
    constants = tuple(n.strip() for n in args.constants.split(",") if n.strip())
    try:
        resolved = opcore.resolve(args.op, constants=constants, backend=name, **kwargs)
    except (NoKernelError, PluginError, Unsupported) as error:  # this backend's answer; bad input raises
        return BenchResult(name, "skipped", reason=_skip_reason(args.op, name, kwargs, error))
    kernel = resolved.kernel.title if resolved.kernel is not None else "decomposition"
    if resolved.prepared:
        kernel += " (prepared)"
    if args.mode == "run":
        fn: Callable[..., Any] = lambda: opcore.run(args.op, backend=name, **kwargs)  # noqa: E731
        free: tuple[Any, ...] = ()
    else:
        fn, free = resolved, tuple(kwargs[n] for n in resolved.free)
    try:
        first, number, times = measure(
            fn,
            free,
            warmup=args.warmup,
            repeat=args.repeat,
            min_time=args.min_time,
            sync=_synchronizer(call),
            progress=lambda text: progress(name, text),
        )
    except (NoKernelError, PluginError) as error:  # a decomposition whose parts this backend lacks
        return BenchResult(name, "skipped", kernel, _first_line(error).split(" Fix:")[0])
    except OpcoreError as error:
        return BenchResult(name, "failed", kernel, _first_line(error).split(" Fix:")[0])
    except Exception as error:  # a kernel crash is a result to show, not a reason to stop the others
        return BenchResult(name, "failed", kernel, f"{type(error).__name__}: {_first_line(error)}")
    return BenchResult(name, "ok", kernel, "", first, number, times)


def _backend_names(args: argparse.Namespace) -> list[str]:
    import opcore

    if args.backends:
        return [n.strip() for n in args.backends.split(",") if n.strip()]
    loaded = [(r.name, r.backend.priority) for r in opcore.backends() if r.ok and r.backend is not None]
    return [name for name, priority in sorted(loaded, key=lambda item: (-item[1], item[0]))]


def _inputs_text(call: CallSpec) -> str:
    parts = []
    for name, value in call.tensors:
        if isinstance(value, TensorSpec):
            parts.append(f"{name}: {value}")
        elif isinstance(value, tuple):
            parts.append(f"{name}: [{', '.join(map(str, value))}]")
    parts.extend(f"{name}={value!r}" for name, value in call.attrs)
    return f"{call.op}({', '.join(parts)})"


def bench_json(call: CallSpec, results: list[BenchResult], args: argparse.Namespace) -> dict[str, Any]:
    """The results as JSON (documented in docs/cli.md)."""
    from opcore._version import __version__
    from opcore.probes import cpu_info

    fastest = _fastest(results)
    best_s = fastest.median_s if fastest is not None else None
    rows = []
    for r in results:
        quartiles = r.quartiles()
        rows.append(
            {
                "backend": r.backend,
                "status": r.status,
                "kernel": r.kernel,
                "reason": r.reason,
                "first_call_s": r.first_call_s,
                "calls_per_round": r.number,
                "times_s": list(r.times_s),
                "median_s": r.median_s,
                "q1_s": quartiles[0] if quartiles else None,
                "q3_s": quartiles[1] if quartiles else None,
                "min_s": min(r.times_s) if r.times_s else None,
                "max_s": max(r.times_s) if r.times_s else None,
                "relative": (r.median_s / best_s) if best_s and r.median_s is not None else None,
            }
        )
    cpu = cpu_info()
    return {
        "schema": 1,
        "op": call.op,
        "call": _inputs_text(call),
        "array_kind": call.array_kind,
        "device": str(call.device),
        "mode": args.mode,
        "constants": [n.strip() for n in args.constants.split(",") if n.strip()],
        "warmup": args.warmup,
        "repeat": args.repeat,
        "results": rows,
        "fastest": fastest.backend if fastest else None,
        "environment": {
            "opcore": __version__,
            "python": sys.version.split()[0],
            "cpu": cpu.model,
            "usable_cores": cpu.usable_cores,
        },
    }


def _fastest(results: list[BenchResult]) -> BenchResult | None:
    timed = [(median_s, r) for r in results if (median_s := r.median_s) is not None]
    return min(timed, key=lambda pair: pair[0])[1] if timed else None


def render_table(call: CallSpec, results: list[BenchResult], args: argparse.Namespace, style: Style) -> str:
    fastest = _fastest(results)
    mode = "opcore.resolve: dispatch decided once" if args.mode == "resolve" else "opcore.run: dispatch included"
    lines = [
        _inputs_text(call),
        style.dim(
            f"{call.array_kind} on {call.device} · {mode} · median of {args.repeat} rounds after "
            f"{args.warmup} warm-up calls · time per call"
        ),
    ]
    best_s = fastest.median_s if fastest is not None else None
    rows: list[tuple[str, ...]] = [("backend", "kernel", "median", "IQR", "min", "first call", "vs fastest")]
    for r in results:
        median_s, quartiles = r.median_s, r.quartiles()
        if r.status != "ok" or median_s is None or quartiles is None:  # only an ok row has times
            text = style.warn(r.reason) if r.status == "skipped" else style.bad(f"failed: {r.reason}")
            rows.append((r.backend, r.kernel or "-", text))
            continue
        q1, q3 = quartiles
        ratio = median_s / best_s if best_s else 1.0
        relative = style.good("fastest") if r is fastest else f"{ratio:.2f}x slower"
        rows.append(
            (
                r.backend,
                r.kernel,
                format_seconds(median_s),
                f"{format_seconds(q1)} .. {format_seconds(q3)}",
                format_seconds(min(r.times_s)),
                format_seconds(r.first_call_s),
                relative,
            )
        )
    lines.append(table(rows, style=style))
    return "\n".join(lines)


def run_bench(args: argparse.Namespace, style: Style) -> int:
    call, kwargs = prepare_call(args)
    if args.min_time <= 0:
        raise OpcoreError(op="opcore bench", arg="--min-time", expected="a positive number of seconds",
                          found=repr(args.min_time))  # fmt: skip
    names = _backend_names(args)
    show = sys.stderr.isatty()
    err_style = style_for(sys.stderr)

    def progress(name: str, text: str) -> None:
        if show:
            index = names.index(name) + 1 if name in names else 0
            sys.stderr.write(f"\r\x1b[K{err_style.dim(f'bench {call.op} [{index}/{len(names)}]')} {name}: {text}")
            sys.stderr.flush()

    import opcore

    # bad input fails the same way on every backend: check it once, before any row (exit status 2)
    opcore.explain(args.op, **kwargs)
    results = []
    try:
        for name in names:
            progress(name, "resolving")
            results.append(_bench_one(name, call, kwargs, args, progress))
    finally:
        if show:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
    if args.json:
        print(dumps_json(bench_json(call, results, args)))
    else:
        print(render_table(call, results, args, style))
    return 0 if any(r.status == "ok" for r in results) else 1
