"""bench/on_ray.py's arguments and its scaling grid (the benchmark itself runs by hand: it starts a
Ray cluster; the scaling rows need 16 cores)."""

from __future__ import annotations

from typing import Any

import pytest
from bench_modules import load_bench


@pytest.fixture(scope="module")
def bench() -> Any:
    return load_bench("on_ray")


def test_the_defaults(bench):
    options = bench.parse_args(["--cores", "16"])
    assert (options.model, options.threads, options.batch, options.calls, options.rounds) == ("small", 1, 64, 40, 5)
    assert options.plan is None and options.cores == 16


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "7b"], "--model: unknown 7b; expected one of small, 0.5b"),
        (["--threads", "0"], "--threads: expected an integer >= 1"),
        (["--plan", "/nonexistent"], "--plan: /nonexistent has no plan.json"),
    ],
)
def test_bad_arguments_are_refused_with_the_fix(bench, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_on_two_cores_the_scaling_rows_past_them_say_why_they_are_skipped(bench):
    rows = {(r.actors, r.threads): r.skipped for r in bench.scaling_rows(2)}
    assert [key for key, why in rows.items() if not why] == [(1, 1), (1, 2), (2, 1)]
    assert rows[(4, 4)] == "needs 16 cores, this machine has 2"


def test_sixteen_cores_run_the_targets_rows(bench):
    rows = {(r.actors, r.threads): r.skipped for r in bench.scaling_rows(16)}
    assert rows[(4, 4)] == "" and rows[(1, 4)] == "" and rows[(8, 2)] == ""
    assert rows[(8, 4)] == "needs 32 cores, this machine has 16"


def test_the_model_sizes_are_the_docstrings(bench):
    assert round(bench.model_parameters("small") / 1e6, 1) == 4.2
    assert round(bench.model_parameters("0.5b") / 1e6) == 537
