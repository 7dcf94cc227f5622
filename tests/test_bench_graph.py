"""bench/graph.py's arguments: --device picks the CPU or the GPU columns (the benchmark itself runs by hand)."""

from __future__ import annotations

from typing import Any

import pytest
from bench_modules import load_bench

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def bench() -> Any:
    return load_bench("graph")


def test_the_device_is_the_cpu_unless_asked(bench):
    assert bench.parse_args([]).device == "cpu"


def test_device_cuda_is_parsed_with_the_other_options(bench):
    options = bench.parse_args(["--device", "cuda", "--models", "llama,cnn", "--batches", "1,8", "--rounds", "5"])
    assert (options.device, options.models, options.batches, options.rounds) == ("cuda", "llama,cnn", "1,8", 5)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--device", "tpu"], "invalid choice: 'tpu'"),
        (["--device", "cuda", "--targets-only"], "--targets-only reads the exported graphs on the CPU"),
        (["--models", "llama,resnet"], "--models: unknown resnet; expected some of llama, gpt2"),
    ],
)
def test_bad_arguments_are_refused_with_the_fix(bench, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_device_cuda_without_a_gpu_exits_2_with_the_reason(bench, capsys, monkeypatch):
    monkeypatch.setattr(bench, "no_gpu_reason", lambda: "no CUDA build of torch")
    assert bench.main(["--device", "cuda", "--models", "llama"]) == 2
    assert "no usable GPU: no CUDA build of torch" in capsys.readouterr().err


def test_the_cuda_columns_are_reported_in_their_own_order(bench):
    result = bench.Result(times={"eager": 2e-3, "cuda graph": 1e-3}, diffs={"eager": 0.0, "cuda graph": 1e-6})
    result.notes["compile ro"] = "RuntimeError: no triton"
    rows = bench.report(bench.MODELS["llama"], 1, result, bench.CUDA_COLUMNS).splitlines()[4:]
    assert [row.split("  ")[0] for row in rows] == ["eager", "compile ro", "cuda graph"]
    assert "2.00x" in rows[2] and "RuntimeError: no triton" in rows[1]
