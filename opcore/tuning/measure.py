"""``opcore.tune``: measure every kernel that can run a call, keep the times, rank by them.

Only when asked: ``opcore.tune(op, *args, **kw)``, ``opcore tune`` on the command line, or
``OPCORE_TUNE=1`` (then the first call of each signature without a measurement tunes it; a cached
call never does, and a signature measured under this fingerprint is never measured again).
Each kernel whose checker accepts the example, or declines it on speed alone (``Costly``), runs the
example's arguments as ``opcore.run`` would give them to it (array conversions included): one
warm-up call (imports, compiled models), then interleaved rounds in a shuffled order, each timing
enough calls to last about a millisecond. The medians and interquartile ranges go into the tuning
file under the signature's bucket, and the dispatch caches are cleared so the next call ranks by them.

>>> result = opcore.tune("gelu", x, approximate="tanh")   # doctest: +SKIP
>>> result.winner                                          # doctest: +SKIP
'onnxruntime'
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opcore.kernel_records import Costly, Kernel
from opcore.tuning.table import Entry, Measurement, example_text, format_us, measured_order, now, record

if TYPE_CHECKING:
    from opcore.kernel_walk import Selection
    from opcore.runtime import Runtime

__all__ = ["TuneResult", "tune", "tune_selection"]

ROUNDS = 15
SAMPLE_US = 1000.0  # each round times enough calls to last about this long (one call at least)


@dataclass(frozen=True, slots=True)
class TuneResult:
    """What one tuning measured. static: the kernel the static ranking picks (None: none accepts without
    a measurement); winner: the one the measured ranking picks now; path: the tuning file written.
    """

    op: str
    entry: Entry
    static: str | None
    winner: str | None
    path: str

    @property
    def key(self) -> str:
        return self.entry.key

    def __str__(self) -> str:
        e = self.entry
        rounds = e.measurements[0].rounds if e.measurements else 0
        lines = [e.key, f"measured {e.example} · median of {rounds} rounds · time per call"]
        rows = [("kernel", "median", "IQR", "min", "vs fastest")]
        fastest = e.measurements[0].median_us if e.measurements else 0.0
        for m in e.measurements:
            ratio = "fastest" if m.median_us == fastest else f"{m.median_us / fastest:.2f}x slower"
            rows.append((m.kernel, format_us(m.median_us), format_us(m.iqr_us), format_us(m.min_us), ratio))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for row in rows:
            lines.append("  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        lines += [f"  {kernel}: not measured: {why}" for kernel, why in e.failed]
        static = f" (static ranking: {self.static or 'none'})"
        if self.static == self.winner:
            static = " (as ranked statically)"
        lines.append(f"-> runs on {self.winner or 'nothing measured'}{static}; saved to {self.path}")
        return "\n".join(lines)


def tune(op: str, /, *args: Any, rounds: int = ROUNDS, **kwargs: Any) -> TuneResult:
    """Measure every kernel that can run this call, save the times, and rank by them from now on.

    >>> print(opcore.tune("linear", x, w))   # doctest: +SKIP
    """
    from opcore.call_plans import selection_for
    from opcore.errors import ArgumentError
    from opcore.runtime import runtime

    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ArgumentError(op="opcore.tune", arg="rounds", expected="an int >= 1", found=repr(rounds))
    rt = runtime().ensure_loaded()
    selection, bound = selection_for(rt, op, args, kwargs, None)
    return tune_selection(rt, selection, bound, rounds)


def tune_selection(rt: Runtime, selection: Selection, bound: tuple[Any, ...], rounds: int = ROUNDS) -> TuneResult:
    """Measure the candidates of an already checked selection (``opcore.tune`` and ``OPCORE_TUNE=1``)."""
    from opcore.kernel_walk import check_kernel, tuning_key

    contract = selection.contract
    ranked = rt.registry.ranked(contract.name).get((selection.device.type, selection.dtype), ())
    verdicts = [(kernel, check_kernel(kernel, selection)) for kernel in ranked]
    static = next((k.title for k, verdict in verdicts if verdict is True), None)
    candidates = [k for k, verdict in verdicts if verdict is True or isinstance(verdict, Costly)]
    if not candidates:
        if selection.error is not None:
            raise selection.error
        from opcore.kernel_walk import no_kernel_error

        raise no_kernel_error(selection, "no kernel can run it, so there is nothing to measure")
    measurements, failed = _measure(candidates, selection, bound, rounds)
    entry = Entry(
        key=tuning_key(selection),
        example=example_text(zip(contract.schema.names, selection.meta_args)),
        measurements=tuple(sorted(measurements, key=lambda m: m.median_us)),
        failed=tuple(failed),
        measured_at=now(),
    )
    path = record(rt, entry)
    rt.invalidate()  # cached plans were chosen without these times
    measured = [k for k in measured_order(candidates, entry) if entry.time_of(k.title) is not None]
    return TuneResult(contract.name, entry, static, measured[0].title if measured else static, path)


def _measure(
    candidates: list[Kernel], selection: Selection, bound: tuple[Any, ...], rounds: int
) -> tuple[list[Measurement], list[tuple[str, str]]]:
    import random
    import statistics

    from opcore.call_plans import adapt

    sync = _synchronizer(selection)
    calls: dict[str, Callable[[], Any]] = {}
    numbers: dict[str, int] = {}
    failed: list[tuple[str, str]] = []
    for kernel in candidates:
        try:
            fn = adapt(kernel, selection, bound)
            call = _bind(fn, bound)
            call()  # warm-up: imports, compiled models, first-touch allocations
            sync()
            numbers[kernel.title] = calibrate(call, sync)
        except Exception as error:  # it cannot run this signature: it keeps its static place
            failed.append((kernel.title, f"raised {type(error).__name__}: {str(error).splitlines()[0][:200]}"))
            continue
        calls[kernel.title] = call
    samples: dict[str, list[float]] = {title: [] for title in calls}
    order = list(calls)
    shuffle = random.Random(0).shuffle
    for _ in range(rounds):
        shuffle(order)  # each round in another order: drift and warm caches hit every kernel alike
        for title in order:
            samples[title].append(timed_call(calls[title], numbers[title], sync))
    measurements = []
    for title, values in samples.items():
        values.sort()
        quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
        measurements.append(
            Measurement(title, statistics.median(values), quartiles[2] - quartiles[0], values[0], len(values))
        )
    return measurements, failed


def _bind(fn: Callable[..., Any], bound: tuple[Any, ...]) -> Callable[[], Any]:
    def call() -> Any:
        return fn(*bound)

    return call


def _synchronizer(selection: Selection) -> Callable[[], None]:
    """What waits for the device: CUDA kernels run asynchronously, so a timing must end on a sync."""
    if selection.device.type.value == "cuda":
        import torch

        return torch.cuda.synchronize
    return lambda: None


def calibrate(call: Callable[[], Any], sync: Callable[[], None]) -> int:
    number = 1
    while True:
        if timed_call(call, number, sync) * number >= SAMPLE_US or number >= 1 << 16:
            return number
        number *= 4


def timed_call(call: Callable[[], Any], number: int, sync: Callable[[], None]) -> float:
    """Microseconds per call over ``number`` calls."""
    clock = time.perf_counter
    started = clock()
    for _ in range(number):
        call()
    sync()
    return (clock() - started) / number * 1e6
