"""bench/decode_window.py: one tiny run prints the window's, every slot's and transformers' step for
each max_length (the figures themselves come from running it by hand)."""

from __future__ import annotations

import pytest
from bench_modules import load_bench, run_main

pytest.importorskip("transformers", reason="the bench builds its models from transformers configs")
pytest.importorskip("torch", reason="the bench runs models on torch")


def test_a_tiny_run_prints_every_row(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from opcore.graph.partition import compilers

    if not compilers():
        pytest.skip("no graph runtime: the decode step keeps its fused attention, which has no window")
    bench = load_bench("decode_window")
    assert run_main(bench, ["--shapes", "small", "--lengths", "160,224", "--rounds", "3"], monkeypatch) == 0
    out = capsys.readouterr().out
    assert "load average" in out and "1 thread(s)" in out
    rows = [line.split(None, 5) for line in out.splitlines() if line.startswith("small, max_length")]
    # per max_length a decode step at slot 140 reading 160 slots and a prompt reading 128, whatever the
    # cache's length; each one's logits agree with every slot's (the bench checks)
    assert [row[:5] for row in rows] == [
        ["small,", "max_length", f"{length}:", *step]
        for length in ("160", "224")
        for step in (["decode", "step"], ["prefill", "128"])
    ], out
    assert [row[5].split()[:2] for row in rows] == [["140", "(W"], ["0-127", "(W"]] * 2, out
    assert [row[5].split()[2] for row in rows] == ["160)", "128)"] * 2, out


def test_the_models_eager_attention_reads_the_window_too(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # --attention eager: the same model with its attention as matmuls (opcore.graph.score_window),
    # on the torch route where no graph runtime is installed
    bench = load_bench("decode_window")
    assert (
        run_main(bench, ["--shapes", "small", "--lengths", "160", "--rounds", "3", "--attention", "eager"], monkeypatch)
        == 0
    )
    out = capsys.readouterr().out
    rows = [line.split(None, 6) for line in out.splitlines() if line.startswith("small eager, max_length")]
    assert [row[4:6] for row in rows] == [["decode", "step"], ["prefill", "128"]], out
    assert [row[6].split()[0] for row in rows] == ["140", "0-127"], out


def test_a_latent_cache_reads_the_window(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # --shapes mla: DeepSeek-V2's latent attention (opcore.graph.score_window through the up-projection)
    bench = load_bench("decode_window")
    assert run_main(bench, ["--shapes", "mla", "--lengths", "160", "--rounds", "3"], monkeypatch) == 0
    out = capsys.readouterr().out
    rows = [line.split(None, 5) for line in out.splitlines() if line.startswith("mla, max_length")]
    assert [row[3:5] for row in rows] == [["decode", "step"], ["prefill", "128"]], out
    assert [row[5].split()[0] for row in rows] == ["140", "0-127"], out
