"""bench/beam_search.py: its arguments, and one tiny run that prints both columns with the tokens
compared (the figures themselves come from running it by hand)."""

from __future__ import annotations

from typing import Any

import pytest
from bench_modules import load_bench

pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the bench builds transformers decoders")


@pytest.fixture(scope="module")
def bench() -> Any:
    return load_bench("beam_search")


def test_the_defaults_are_four_beams_at_one_thread(bench):
    options = bench.parse_args([])
    assert (options.models, options.beams, options.batch, options.threads) == (["small", "135m"], (4,), 1, 1)
    assert (options.prompt, options.new) == (128, 64)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--models", "small,7b"], "--models: unknown 7b"),
        (["--beams", "2,x"], "--beams: expected comma-separated integers"),
        (["--beams", "0"], "--beams: expected integers >= 1"),
        (["--new", "0"], "--new: expected an integer >= 1"),
    ],
)
def test_bad_arguments_are_refused(bench, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_tiny_run_prints_both_columns_and_the_tokens_compared(bench, capsys):
    argv = ["--models", "small", "--beams", "2", "--prompt", "8", "--new", "4", "--rounds", "1"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "load average" in out and "2 beams, eager" in out
    assert "2 beams, opcore" in out and out.rstrip().split("\n")[-1].split()[-1] == "yes"
