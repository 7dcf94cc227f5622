"""bench/denormals.py: one tiny run prints the softmax rows and the decoder's prefill and decode rows
(the figures themselves come from running it by hand)."""

from __future__ import annotations

import os

import pytest
from bench_modules import load_bench, run_main

pytest.importorskip("onnxruntime", reason="the bench compares onnxruntime partitions")
pytest.importorskip("torch", reason="the bench runs models on torch")


def test_a_tiny_run_prints_every_row(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_bench("denormals")
    monkeypatch.delenv(bench.DENORMALS, raising=False)
    assert run_main(bench, ["--shapes", "small", "--lengths", "160", "--rounds", "3"], monkeypatch) == 0
    out = capsys.readouterr().out
    assert "load average" in out and "1 thread(s)" in out
    for row in (
        "Softmax (1, 2, 7, 161), 130 seen, rest -inf",
        "Softmax (1, 2, 7, 161), none masked",
        "small, max_length 160: prefill 128",
        "small, max_length 160: decode step",
    ):
        assert row in out, row
    assert bench.DENORMALS not in os.environ  # the bench's own setting is not left behind
