"""Shared timing helper for the benchmarks: interleaved repeats, medians per call."""

from __future__ import annotations

import os
import random
import statistics
import timeit
from collections.abc import Callable, Mapping, Sequence


def calibrate(fn: Callable[[], object], target_s: float = 0.01, warmup: int = 3) -> int:
    """How many calls take about ``target_s``, counted after ``warmup`` untimed calls: one-time work
    (a plan that compiles a shape the second time it meets it, lazy allocations) must not make a
    case look slow here, or it would be timed in short samples that a switch between cases costs more.
    """
    for _ in range(warmup):
        fn()
    number = 1
    while True:
        elapsed = timeit.timeit(fn, number=number)
        if elapsed >= target_s or number >= 1 << 20:
            return number
        number *= 2 if elapsed > target_s / 10 else 10


def _rounds(
    cases: Mapping[str, Callable[[], object]], repeats: int, warmup: int, target_s: float = 0.01
) -> dict[str, list[float]]:
    """Seconds per call of each case, one sample per round: the cases take turns, in a new order each
    round, each sample about ``target_s`` long after ``warmup`` untimed calls."""
    numbers = {name: calibrate(fn, target_s) for name, fn in cases.items()}
    samples: dict[str, list[float]] = {name: [] for name in cases}
    order = list(cases)
    shuffle = random.Random(0).shuffle
    for _ in range(repeats):
        shuffle(order)
        for name in order:
            for _ in range(warmup):
                cases[name]()
            samples[name].append(timeit.timeit(cases[name], number=numbers[name]) / numbers[name])
    return samples


def medians(
    cases: Mapping[str, Callable[[], object]],
    repeats: int = 31,
    pick: Callable[[list[float]], float] = statistics.median,
    warmup: int = 0,
) -> dict[str, float]:
    """Median seconds per call of each case. The cases take turns, in a new order each round, so
    drift and what ran just before (warm caches, a 64 MB weight just streamed) hit them alike.
    ``pick=min``: the fastest round instead (on a shared machine other processes only add time).
    ``warmup``: untimed calls before each timed sample, so that a case is timed as it runs in a loop
    and not as the first call after another case (which, for whole models, also pays the thread pools
    the previous case left spinning: bench/graph.py prints that switching cost apart).
    """
    return {name: pick(values) for name, values in _rounds(cases, repeats, warmup).items()}


def paired_ratio(
    first: Callable[[], object],
    second: Callable[[], object],
    repeats: int = 31,
    warmup: int = 0,
    target_s: float = 0.05,
) -> float:
    """The median over ``repeats`` rounds of first's time per call over second's, each round timing
    both back to back (in a new order each round, ``warmup`` untimed calls before each sample of
    about ``target_s``). For two cases that compute the same thing: a ratio per round cancels what
    drifts between rounds (another process, the clock), which a ratio of two medians taken over the
    whole run keeps; samples longer than ``medians``' 10 ms average over a 2-vCPU machine's bursts."""
    samples = _rounds({"first": first, "second": second}, repeats, warmup, target_s)
    return statistics.median([a / b for a, b in zip(samples["first"], samples["second"])])


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda row: "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths)))  # noqa: E731
    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


def machine_load() -> str:
    """The load average and, where the kernel reports it (Linux PSI, /proc/pressure/cpu), the share of
    the last 10 and 60 seconds in which some runnable task waited for a CPU. On a VM whose load
    average counts idle pool threads (a 2-vCPU VM read 22 with nothing running, December 2026) the
    pressure is what says whether the cores were taken while the bench ran."""
    load = "load average " + ", ".join(f"{v:.2f}" for v in os.getloadavg())
    try:
        with open("/proc/pressure/cpu") as found:
            fields = dict(item.split("=", 1) for item in found.readline().split()[1:])
        return f"{load}; CPU pressure {float(fields['avg10']):.1f} % (10 s), {float(fields['avg60']):.1f} % (60 s)"
    except (OSError, KeyError, ValueError):
        return load
