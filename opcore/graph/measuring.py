"""Plan-time measurements: what keeps a partition, and what keeps a plan, is a time, not an estimate.

At capture, the example inputs are run once through the *torch route* (every node on the torch
backend of the plan's device, no partitions: the graph run as eager PyTorch runs it), keeping
every value. With those values:

* each compiled partition is timed against the same nodes run per node on their ranked kernels,
  and kept only where it is faster by more than a 5 % margin (``Measured.partition``); the
  estimated ``partitioning.Cost`` stays the rule where nothing can be measured (a loaded plan
  keeps what was measured when it was saved);
* the finished plan is timed against the torch route — the exported program run by torch as one
  step (opcore.graph.exported), which is eager PyTorch on the exported graph — and against the same
  route node by node on the torch backend's kernels (which pack weights: sometimes faster than
  eager); the torch route in one step runs unless one of the others is faster than it by more than
  that margin, and ``plan.notes`` says which runs and the times (explain shows it). A plan is
  therefore never slower than eager on its own graph, by construction, within the measurement's
  noise.

A timer is any function of ``{label: call}`` returning ``{label: seconds per call}``; tests inject
one to exercise the decisions without timing the machine.

>>> times = interleaved({"sum": lambda: sum(range(100))}, rounds=3)
>>> times["sum"] > 0
True
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DECISIVE",
    "LONG_DECISIVE",
    "LONG_ROUNDS",
    "LONG_S",
    "ROUNDS",
    "SETTLE_S",
    "Measured",
    "Timer",
    "decided",
    "interleaved",
    "verdict_text",
]

Timer = Callable[[Mapping[str, Callable[[], Any]]], Mapping[str, float]]

# interleaved rounds per comparison: a few runs of a model at capture, not a benchmark
ROUNDS = 5


def interleaved(cases: Mapping[str, Callable[[], Any]], rounds: int = ROUNDS) -> dict[str, float]:
    """Seconds per call of each case, the fastest of ``rounds`` rounds: one warm-up call each, then
    rounds in a new shuffled order each (drift and warm caches hit every case alike), each round
    timing enough calls to last about a millisecond (opcore.tuning's calibration) after one untimed
    call. The fastest, not the median: on a shared machine other processes only ever add time, and a
    median of a few rounds under load compares the neighbours' bursts more than the two cases.

    The untimed calls (for at least SETTLE_S): the first calls after another case pay for the thread
    pools that case left busy — torch's OpenMP workers spin a few milliseconds after eager work, and a
    graph runtime's pool after its run — which is the cost of switching runtimes, not of the case
    called in a loop (on 2 cores an OpenVINO partition right after eager torch took 13.7 ms, 9.7 ms in
    a loop). One untimed call was not enough for a model of ~4 ms: a one-partition ONNX Runtime plan
    of bench/graph.py's CNN measured 5.9 ms at capture (fastest of 5) against 4.0 in a loop, and the
    plan ran the torch route instead.

    Where a case's call lasts LONG_S or more (a 135M decoder's prompt: 250-560 ms), the comparison
    takes LONG_ROUNDS samples, the first the calibrating call (timed after the warm-up, so settled),
    and no untimed call before a sample: a switch's few milliseconds are noise at that length, and
    five rounds of such calls were 14 s of a capture_lm of 105 s (a 2-core EPYC, under load); the
    comparison of a 135M decoder's prompt plans calls each 4 times (6 with a settling call a round,
    12 with five rounds).

    The rounds end early once the fastest case is ahead by a margin no later round can plausibly
    undo (``decided``): two samples a case at least."""
    from opcore.tuning.measure import SAMPLE_US, calibrate, timed_call

    def sync() -> None:
        return None

    numbers, firsts = {}, {}
    for label, call in cases.items():
        call()
        first_us = timed_call(call, 1, sync)
        firsts[label] = first_us * 1e-6
        numbers[label] = 1 if first_us >= SAMPLE_US else calibrate(call, sync)
    long = max(firsts.values()) >= LONG_S
    if long:
        rounds = min(rounds, LONG_ROUNDS - 1)
    samples = {label: [firsts[label]] if long else [] for label in cases}
    order = list(cases)
    shuffle = random.Random(0).shuffle
    for _ in range(rounds):
        shuffle(order)
        for label in order:
            if not long:  # a pool still busy after the case before lasts milliseconds: noise at LONG_S
                _settle(cases[label])
            samples[label].append(timed_call(cases[label], numbers[label], sync) * 1e-6)
        if decided(samples, LONG_DECISIVE if long else DECISIVE):
            break
    return {label: min(values) for label, values in samples.items()}


# a comparison ends early where every sample of its fastest case is this many times faster than
# the fastest sample of every other case (see decided); LONG_DECISIVE where a call lasts LONG_S or more
DECISIVE = 1.5
LONG_DECISIVE = 1.1


def decided(samples: Mapping[str, Sequence[float]], margin: float = DECISIVE) -> bool:
    """Whether more rounds can no longer change which case is the fastest: each case has two samples
    or more, and the slowest sample of the fastest case is ``margin`` times faster than the fastest
    sample of every other case. Noise only adds time, so a later round could reverse that only where
    both of a case's samples so far were slowed by that much, in rounds where the leader's were not.
    A call of a few milliseconds loses half again to one burst of another process (DECISIVE: a 135M
    decoder's decode step against its torch route, 19.5 against 41.6 ms, took 5 rounds of 0.78 s
    where 2 decide it); a call of LONG_S or more averages bursts out (LONG_DECISIVE: the same
    decoder's 128-token prompt, three samples each of two routes in two processes, spread 2-9 %, the
    routes 16-20 % apart).

    >>> decided({"a": [1.0, 1.1], "b": [2.0, 1.8]}), decided({"a": [1.0, 1.3], "b": [2.0, 1.8]})
    (True, False)
    >>> decided({"a": [1.0, 1.05], "b": [1.2, 1.25]}, LONG_DECISIVE)
    True
    """
    if any(len(values) < 2 for values in samples.values()):
        return False
    best = {label: min(values) for label, values in samples.items()}
    leader = min(best, key=best.__getitem__)
    slowest = max(samples[leader])
    return all(best[label] >= margin * slowest for label in samples if label != leader)


# a comparison whose slowest case takes this long a call times LONG_ROUNDS samples a case (see interleaved)
LONG_S = 0.05
LONG_ROUNDS = 3

# untimed calls of a case before each of its samples last at least this long: torch's OpenMP workers
# and a graph runtime's pool stay busy after another case for longer than one call of a small model
SETTLE_S = 0.010


def _settle(call: Callable[[], Any]) -> None:
    """Call ``call`` untimed until SETTLE_S has passed (at least once)."""
    start = time.perf_counter()
    call()
    while time.perf_counter() - start < SETTLE_S:
        call()


def verdict_text(seconds: float) -> str:
    """A time for explain: "412 us", "12.3 ms"."""
    us = seconds * 1e6
    return f"{us:.0f} us" if us < 1000 else f"{us / 1000:.1f} ms"


@dataclass(frozen=True, slots=True)
class Measured:
    """What plan-time measuring needs: every value of the graph on the example inputs (by name, from
    the torch route), the timer, and how to build the two programs a partition is timed as: the
    partition alone (``alone(record)``) and its nodes on their per-node kernels (``per_node(indices)``);
    each runs from the partition's inputs to its outputs."""

    values: Mapping[str, Any]
    timer: Timer
    alone: Callable[[Any], Any]
    per_node: Callable[[Sequence[int], Sequence[str], Sequence[str]], Any]

    def partition(self, record: Any, group: Sequence[int]) -> tuple[bool, str]:
        """Whether the compiled partition ``record`` (of the nodes ``group``) beats its nodes per node."""
        spec = record.spec
        per_node = self.per_node(group, spec.inputs, spec.outputs)
        return self.compare(("partition", self.alone(record)), ("per node", per_node), spec.inputs)

    def check(self, record: Any) -> None:
        """One run of the compiled partition ``record`` alone on the example values (its first call
        checks its outputs against the spec: partition_guard)."""
        self.alone(record).run([self.values[name] for name in record.spec.inputs])

    def compare(self, first: tuple[str, Any], second: tuple[str, Any], inputs: Sequence[str]) -> tuple[bool, str]:
        """Time two programs (``(label, Program)``) on the example values of ``inputs``: whether the
        first is faster by more than opcore.tuning's tie margin (5 %: noise leaves the second, the
        per-node or torch side, in place rather than swapping at random), and the story for explain."""
        chosen, text = self.fastest(dict((first, second)), second[0], inputs)
        return chosen == first[0], text

    def fastest(self, cases: Mapping[str, Any], default: str, inputs: Sequence[str]) -> tuple[str, str]:
        """Time programs (``{label: Program}``, interleaved) on the example values of ``inputs``: the
        label of the fastest where it beats ``default`` by more than the tie margin (else ``default``),
        and the story for explain (every time, in the order given)."""
        from opcore.tuning.table import TIE_MARGIN

        feed = [self.values[name] for name in inputs]
        times = self.timer({label: _runner(program, feed) for label, program in cases.items()})
        best = min(times, key=times.__getitem__)
        chosen = best if times[best] * (1 + TIE_MARGIN) < times[default] else default
        text = "measured " + ", ".join(f"{label} {verdict_text(times[label])}" for label in cases)
        return chosen, text


def _runner(program: Any, feed: list[Any]) -> Callable[[], Any]:
    def run() -> Any:
        return program.run(feed)

    return run
