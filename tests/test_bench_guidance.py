"""bench/guidance.py: its arguments, and one tiny run that prints the unguided and guided columns
with the tokens compared (the figures themselves come from running it by hand)."""

from __future__ import annotations

from typing import Any

import pytest
from bench_modules import load_bench

pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the bench builds transformers decoders")


@pytest.fixture(scope="module")
def bench() -> Any:
    return load_bench("guidance")


def test_the_defaults_are_one_scale_at_one_thread(bench):
    options = bench.parse_args([])
    assert (options.models, options.scales, options.batch, options.threads) == (["small", "135m"], (1.5,), 1, 1)
    assert (options.prompt, options.new) == (128, 64)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--models", "small,7b"], "--models: unknown 7b"),
        (["--scales", "2,x"], "--scales: expected comma-separated numbers"),
        (["--scales", "1"], "--scales: 1 is no guidance"),
        (["--new", "0"], "--new: expected an integer >= 1"),
    ],
)
def test_bad_arguments_are_refused(bench, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_tiny_run_prints_both_columns_and_the_tokens_compared(bench, capsys):
    argv = ["--models", "small", "--scales", "2", "--prompt", "8", "--new", "4", "--rounds", "1"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "load average" in out and "no guidance, eager" in out and "guidance 2, opcore" in out
    lines = [line.split() for line in out.rstrip().split("\n") if "opcore" in line]
    assert [line[-1] for line in lines] == ["yes", "yes"]
