"""Measured placement (opcore.graph.measuring): partitions kept only where they beat their nodes per
node, and the guard that runs the torch route where it beats the plan. The decisions are tested
with injected timers (what the machine measures is not under test); the last test times for real
and checks only that a decision was made and said."""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from graph_models import MLP, LlamaBlock, seeded  # noqa: E402

import opcore  # noqa: E402
import opcore.graph  # noqa: E402
from opcore.graph.measuring import LONG_DECISIVE, LONG_ROUNDS, LONG_S, SETTLE_S, decided, interleaved  # noqa: E402

# the plan restricted to onnxruntime partitions plus the torch backend, as bench/graph.py's "plan ort"
BACKENDS = ("onnxruntime", "cpu")


class Timer:
    """A timer that runs every case once (the calls must work) and reports the given seconds, by
    the whole label where given, else by its first word ("partition", "per", "this", "the")."""

    def __init__(self, **seconds: float) -> None:
        self.seconds = seconds
        self.asked: list[tuple[str, ...]] = []

    def __call__(self, cases: Mapping[str, Callable[[], Any]]) -> dict[str, float]:
        self.asked.append(tuple(cases))
        for call in cases.values():
            call()
        return {label: self.seconds.get(label) or self.seconds[label.split()[0]] for label in cases}


def llama(x_shape: tuple[int, ...] = (2, 8, 32)) -> tuple[Any, Any]:
    torch.manual_seed(0)
    return seeded(LlamaBlock()), torch.randn(*x_shape)


def test_static_placement_makes_partitions_of_this_model() -> None:
    model, x = llama()
    plan = opcore.graph.capture(model, (x,), backends=BACKENDS, measure=False)
    assert plan.partitions  # the premise of the tests below: the estimated rule keeps partitions here
    assert not any(note.startswith("guard") for note in plan.notes)


def test_a_partition_slower_than_its_nodes_is_dropped_with_the_measurement() -> None:
    model, x = llama()
    timer = Timer(partition=2e-3, per=1e-3, this=1e-3, the=2e-3)
    plan = opcore.graph.capture(model, (x,), backends=BACKENDS, measure=timer)
    assert not plan.partitions
    assert ("partition", "per node") in timer.asked
    record = json.loads(plan.explain(format="json"))
    reasons = [c["reason"] for n in record["nodes"] for c in n["candidates"] if c["kernel"] == "onnxruntime partition"]
    assert reasons and all("not kept: measured partition 2.0 ms, per node 1.0 ms" in r for r in reasons)
    assert "not kept: measured partition 2.0 ms" in plan.explain()
    with torch.no_grad():
        torch.testing.assert_close(plan(x), model(x), rtol=1e-4, atol=1e-4)


def test_a_partition_faster_than_its_nodes_is_kept_with_the_measurement() -> None:
    model, x = llama()
    timer = Timer(partition=1e-3, per=2e-3, this=1e-3, the=2e-3)
    plan = opcore.graph.capture(model, (x,), backends=BACKENDS, measure=timer)
    assert plan.partitions and plan.options.route == "planned"
    assert all(p.note == "measured partition 1.0 ms, per node 2.0 ms" for p in plan.partitions)
    guard = "guard: measured this plan 1.0 ms, the torch route 2.0 ms, the torch route node by node 2.0 ms: "
    guard += "runs this plan"
    assert guard in plan.notes


def test_a_partition_of_every_node_is_timed_as_the_plan_not_against_its_nodes() -> None:
    """A partition holding every node the plan runs on kernels is the plan: it is run once (checked),
    and the guard's comparison against the torch route decides, not a second one against its nodes."""
    from opcore.graph.partitioning import WHOLE

    model, x = seeded(MLP(activation="silu")), torch.randn(3, 16)
    timer = Timer(partition=1e-3, per=2e-3, this=1e-3, the=2e-3)
    plan = opcore.graph.capture(model, (x,), backends=BACKENDS, measure=timer)
    (record,) = plan.partitions
    assert set(record.nodes) == {d.node for d in plan.decisions if d.backend != "python"}
    assert record.note == WHOLE and WHOLE in plan.explain()
    assert timer.asked == [("this plan", "the torch route", "the torch route node by node")]  # no ("partition", ...)
    with torch.no_grad():
        torch.testing.assert_close(plan(x), model(x), rtol=1e-5, atol=1e-5)
    slower = Timer(partition=1e-3, per=2e-3, this=3e-3, the=2e-3)
    route = opcore.graph.capture(model, (x,), backends=BACKENDS, measure=slower)
    assert route.options.route == "torch" and not route.partitions
    assert any(n.startswith("guard: measured this plan 3.0 ms, the torch route 2.0 ms") for n in route.notes)


def test_the_guard_runs_the_torch_route_where_it_is_faster_and_says_so(tmp_path) -> None:
    model, x = llama()
    timer = Timer(partition=1e-3, per=2e-3, this=3e-3, the=2e-3)
    plan = opcore.graph.capture(model, (x,), backends=BACKENDS, measure=timer)
    assert plan.options.route == "torch" and not plan.partitions
    assert {d.backend for d in plan.decisions} <= {"cpu", "python"}
    (guard,) = [note for note in plan.notes if note.startswith("guard:")]
    assert guard.startswith(
        "guard: measured this plan 3.0 ms, the torch route 2.0 ms, the torch route node by node 2.0 ms: "
        "runs the torch route (the exported program, run by torch as one step)"
    )
    assert "onnxruntime" in guard  # the plan it measured and did not keep is named
    lines = plan.explain().splitlines()  # what runs where, then the speed measured at capture
    assert lines[1] == f"  speed at capture: {guard.removeprefix('guard: ')}"
    with torch.no_grad():
        want = model(x)
        torch.testing.assert_close(plan(x), want, rtol=1e-4, atol=1e-4)
        plan.save(tmp_path / "p")
        loaded = opcore.graph.load(tmp_path / "p")  # the route is kept: no partitions come back
        assert loaded.options.route == "torch" and not loaded.partitions
        torch.testing.assert_close(loaded(x), want, rtol=1e-4, atol=1e-4)
    assert plan.verify(x).ok


@pytest.mark.parametrize(
    "options",
    [{"backends": ("onnxruntime",)}, {"backends": BACKENDS, "fallback": False}],
    ids=["without the torch backend", "fallback=False"],
)
def test_the_guard_leaves_a_plan_pinned_to_other_backends_alone(options: dict[str, Any]) -> None:
    model, x = seeded(MLP()), torch.randn(3, 16)
    timer = Timer(partition=1e-3, per=2e-3, this=3e-3, the=2e-3)
    plan = opcore.graph.capture(model, (x,), measure=timer, **options)
    assert plan.options.route == "planned"
    assert not any("this plan" in asked for asked in timer.asked)
    assert "onnxruntime" in {d.backend for d in plan.decisions}


def test_the_guard_leaves_a_strict_plan_alone() -> None:
    model, x = seeded(MLP()), torch.randn(3, 16)
    timer = Timer(partition=1e-3, per=2e-3, this=3e-3, the=2e-3)
    with opcore.strict():
        plan = opcore.graph.capture(model, (x,), backends=BACKENDS, measure=timer)
    assert plan.options.route == "planned" and not any("this plan" in asked for asked in timer.asked)


def test_a_plan_that_is_the_torch_route_node_by_node_is_timed_against_the_exported_program() -> None:
    """The issue's measured case: every node on the torch backend, node by node, below eager."""
    model, x = seeded(MLP()), torch.randn(3, 16)
    timer = Timer(partition=1e-3, per=2e-3, this=3e-3, the=2e-3)
    plan = opcore.graph.capture(model, (x,), backends=("cpu",), measure=timer)
    assert timer.asked == [("this plan", "the torch route")]  # no third case: the plan is the per-node route
    assert plan.options.route == "torch" and plan.exported is not None
    with torch.no_grad():
        torch.testing.assert_close(plan(x), model(x), rtol=1e-5, atol=1e-5)
    faster = Timer(partition=1e-3, per=2e-3, this=1e-3, the=2e-3)
    kept = opcore.graph.capture(model, (x,), backends=("cpu",), measure=faster)
    assert kept.options.route == "planned" and kept.exported is None


def test_the_torch_route_node_by_node_runs_where_it_is_fastest() -> None:
    model, x = llama()
    timer = Timer(**{"partition": 1e-3, "per": 2e-3, "this": 3e-3, "the": 2e-3, "the torch route node by node": 1e-3})
    plan = opcore.graph.capture(model, (x,), backends=BACKENDS, measure=timer)
    assert plan.options.route == "torch" and plan.exported is None and not plan.partitions
    assert len(plan.program.steps) >= len(plan.graph.nodes) - 2  # a step per node (size computations too)
    (guard,) = [note for note in plan.notes if note.startswith("guard:")]
    assert "the torch route node by node 1.0 ms: runs the torch route (node by node, every node on cpu's" in guard
    with torch.no_grad():
        torch.testing.assert_close(plan(x), model(x), rtol=1e-4, atol=1e-4)


def test_measuring_for_real_decides_and_says_what_it_measured() -> None:
    model, x = llama()
    plan = opcore.graph.capture(model, (x,), backends=BACKENDS)  # the default timer: interleaved rounds
    guard = [note for note in plan.notes if note.startswith("guard: measured this plan")]
    assert len(guard) == 1
    assert ("runs this plan" in guard[0]) == (plan.options.route == "planned")
    assert all(p.note.startswith("measured partition") for p in plan.partitions)
    with torch.no_grad():
        torch.testing.assert_close(plan(x), model(x), rtol=1e-4, atol=1e-4)


def test_interleaved_gives_a_time_per_case() -> None:
    calls: list[str] = []
    times = interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=3)
    assert set(times) == {"a", "b"} and all(t > 0 for t in times.values())
    assert calls.count("a") >= 1 + 3 and calls.count("b") >= 1 + 3  # a warm-up, then every round


def test_interleaved_times_a_case_as_it_runs_in_a_loop_not_its_first_call_after_another() -> None:
    """A case whose first call after another case is slow (a runtime's thread pool left busy by the
    previous one) is timed at its own pace: each sample follows an untimed call of the same case."""
    last: list[str] = [""]

    def case(label: str) -> Callable[[], None]:
        def call() -> None:
            time.sleep(0.012 if last[0] != label else 0.002)
            last[0] = label

        return call

    times = interleaved({label: case(label) for label in "abc"}, rounds=3)
    assert all(t < 0.008 for t in times.values()), times


def test_interleaved_waits_out_a_previous_case_that_keeps_the_machine_busy_for_several_calls() -> None:
    """A pool left spinning by the previous case can outlast one call of a small model: each sample
    follows untimed calls for SETTLE_S, so a case slow for 6 ms after a switch is timed at its own pace."""
    last, since = [""], [0.0]

    def case(label: str) -> Callable[[], None]:
        def call() -> None:
            now = time.perf_counter()
            if last[0] != label:
                last[0], since[0] = label, now
            time.sleep(0.004 if now - since[0] < 0.006 else 0.001)

        return call

    assert SETTLE_S >= 0.008
    times = interleaved({label: case(label) for label in "abc"}, rounds=3)
    assert all(t < 0.003 for t in times.values()), times


def _sleeping(calls: dict[str, int], label: str, seconds: float) -> Callable[[], None]:
    """A case lasting ``seconds`` a call that counts its calls in ``calls[label]``."""

    def call() -> None:
        calls[label] += 1
        time.sleep(seconds)

    return call


def test_interleaved_takes_fewer_samples_of_calls_that_last_long() -> None:
    """A comparison of long calls (a prompt of a 135M decoder) takes LONG_ROUNDS samples a case, the
    first its calibrating call: a warm-up, that call, then one timed call a round (no settling); a
    short case beside it is sampled as often, and the times are still each case's own."""
    calls: dict[str, int] = {"long": 0, "short": 0}
    case = functools.partial(_sleeping, calls)
    # as long as each other (nothing decided early): every round is taken
    times = interleaved({"long": case("long", LONG_S), "short": case("short", LONG_S)}, rounds=5)
    assert calls["long"] == 2 + (LONG_ROUNDS - 1), calls  # warm-up, calibrating sample, one a round
    assert times["long"] >= LONG_S and times["short"] >= LONG_S, times
    calls.update(long=0, short=0)
    interleaved({"a": case("long", 0.002), "b": case("short", 0.0015)}, rounds=5)
    assert calls["long"] >= 1 + 5, calls  # short calls: every round


def test_interleaved_stops_once_the_fastest_case_is_ahead_beyond_doubt() -> None:
    """Two samples a case where the fastest's slowest is DECISIVE times faster than every other's
    fastest (a decode step against its torch route): later rounds could not change the verdict."""
    calls: dict[str, int] = {"fast": 0, "slow": 0}
    case = functools.partial(_sleeping, calls)
    times = interleaved({"fast": case("fast", LONG_S), "slow": case("slow", LONG_S * 3)}, rounds=5)
    assert calls == {"fast": 3, "slow": 3}, calls  # warm-up, calibrating sample, one round
    assert times["fast"] * LONG_DECISIVE <= times["slow"], times
    calls.update(fast=0, slow=0)
    times = interleaved({"fast": case("fast", 0.001), "slow": case("slow", 0.006)}, rounds=5)
    a_round = math.ceil(SETTLE_S / 0.006) + 1  # the slow case's untimed calls before its sample, and the sample
    assert calls["slow"] <= 2 + 3 * a_round < 2 + 5 * a_round, calls  # two rounds (three allowed), not five
    assert times["fast"] < times["slow"], times


def test_decided_needs_two_samples_a_case_and_the_margin_against_every_other() -> None:
    assert not decided({"a": [1.0], "b": [9.0]})  # one sample: a burst could be either
    assert decided({"a": [1.0, 1.2], "b": [2.0, 1.8], "c": [5.0, 4.0]})
    assert not decided({"a": [1.0, 1.2], "b": [2.0, 1.7], "c": [5.0, 4.0]})  # b within DECISIVE of a's slowest
    assert not decided({"a": [1.0, 1.0], "b": [1.2, 3.0]})
    assert decided({"a": [1.0, 1.0], "b": [1.2, 3.0]}, LONG_DECISIVE)  # long calls: a narrower margin


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_a_partitions_outputs_belong_to_the_caller(backend: str) -> None:
    """A runtime that reused its output buffers between calls would overwrite results already handed
    out (a plan's slots, a user's outputs): a compiled partition's outputs must survive its next call."""
    pytest.importorskip(backend)
    model, x = llama()
    plan = opcore.graph.capture(model, (x,), backends=(backend, "cpu"), measure=False)
    assert plan.partitions
    generator = numpy.random.default_rng(0)
    for record in plan.partitions:
        metas = [record.spec.metas[name] for name in record.spec.inputs]
        if not all(m.dtype.value.startswith("float") for m in metas):
            continue
        feeds = [[generator.standard_normal(m.shape).astype(m.dtype.to_numpy()) for m in metas] for _ in range(2)]
        first = record.compiled(*feeds[0])
        kept = [numpy.array(a, copy=True) for a in first]
        second = record.compiled(*feeds[1])
        for a, b, c in zip(first, kept, second):
            assert not numpy.shares_memory(a, c)
            numpy.testing.assert_array_equal(a, b)


def test_a_plan_within_the_tie_margin_of_the_torch_route_runs_the_torch_route() -> None:
    """Noise must not swap routes at random: the plan is kept only where it is clearly faster."""
    model, x = llama()
    timer = Timer(partition=1e-3, per=2e-3, this=1.96e-3, the=2e-3)  # 2 % faster: within 5 %
    plan = opcore.graph.capture(model, (x,), backends=BACKENDS, measure=timer)
    assert plan.options.route == "torch" and not plan.partitions
