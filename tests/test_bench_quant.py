"""bench/quant.py: its arguments, and one tiny run that prints every backend's row and the target line
(the figures themselves come from running it by hand)."""

from __future__ import annotations

from typing import Any

import pytest
from bench_modules import load_bench

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def bench() -> Any:
    return load_bench("quant")


def test_the_defaults_are_one_thread_and_the_issue_shapes(bench):
    options = bench.parse_args([])
    assert (options.threads, options.sizes, options.kn) == (1, [1, 32], 4096)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sizes", "1,x"], "--sizes: expected integers"),
        (["--kn", "100"], "--kn: expected a positive multiple of 128"),
    ],
)
def test_bad_arguments_are_refused(bench, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_tiny_run_prints_a_row_per_backend_and_the_target(bench, capsys):
    assert bench.main(["--kn", "256", "--sizes", "1", "--repeats", "1", "--no-torchao"]) == 0
    out = capsys.readouterr().out
    assert "load average" in out and "threads 1" in out
    for row in ("eager F.linear float32", "cpu int8 float32 (torch kernel)", "cpu int4 g128 bfloat16 (torch kernel)"):
        assert row in out
    for backend in ("onnxruntime", "openvino"):
        assert f"{backend} int8" in out or f"not measured: {backend} int8" in out
    assert "torch dynamic int8 (x int8 per tensor)" in out or "not measured: torch dynamic int8" in out
    assert "target M=1 int8 >= 3.0x eager float32:" in out
    assert "(torch dynamic" not in out.split("target M=1")[1]  # not weight-only: never the target's row
    assert "torchao int8 g" not in out and "not measured: torchao int8 float32: skipped" in out
