"""bench/prompt_lookup.py: its arguments, and one tiny run that prints every column with the tokens
compared and the verify step's time against the decode step's (the figures themselves come from
running it by hand)."""

from __future__ import annotations

from typing import Any

import pytest
from bench_modules import load_bench

pytest.importorskip("torch")
pytest.importorskip("transformers", reason="the bench builds transformers decoders")


@pytest.fixture(scope="module")
def bench() -> Any:
    return load_bench("prompt_lookup")


def test_the_defaults_are_ten_drafts_at_one_thread(bench):
    options = bench.parse_args([])
    assert (options.models, options.drafts, options.threads) == (["small", "135m"], 10, 1)
    assert (options.prompt, options.new) == (128, 128)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--models", "small,7b"], "--models: unknown 7b"),
        (["--drafts", "0"], "--drafts: expected an integer >= 1"),
        (["--new", "0"], "--new: expected an integer >= 1"),
    ],
)
def test_bad_arguments_are_refused(bench, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_the_repeated_prompt_repeats_a_quarter_of_its_length(bench):
    texts = bench.prompts(4096, 10)
    repeated = texts["repeated"][0].tolist()
    assert len(repeated) == 10 and repeated[:2] == repeated[2:4] == repeated[8:]
    assert texts["random"].shape == (1, 10)


def test_a_tiny_run_prints_every_column_and_the_tokens_compared(bench, capsys):
    argv = ["--models", "small", "--drafts", "3", "--prompt", "16", "--new", "12", "--rounds", "1"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "load average" in out and "repeated: opcore, prompt lookup" in out and "eager, prompt lookup" in out
    lines = [line for line in out.splitlines() if line.startswith(("random:", "repeated:"))]
    assert len(lines) == 8 and all(line.split()[-1] == "yes" for line in lines)
    assert "verify step (4 tokens)" in out
