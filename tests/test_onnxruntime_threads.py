"""Four threads of mixed ops on the ONNX Runtime backend give results bitwise identical to a serial
run, also while the session cache evicts and rebuilds. ``bench/threads.py`` runs the same for 10 s.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime", reason="the ONNX Runtime backend needs onnxruntime")

import opcore

BENCH = Path(__file__).resolve().parent.parent / "bench" / "threads.py"


def _bench_threads():
    spec = importlib.util.spec_from_file_location("bench_threads", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_four_threads_match_a_serial_run():
    if not any(r.name == "onnxruntime" and r.ok for r in opcore.backends()):
        pytest.skip("the onnxruntime plugin is not installed")
    import opcore_onnxruntime

    size = opcore_onnxruntime.cache_size()
    try:
        report = _bench_threads().run_threads(
            "onnxruntime", seconds=4.0, threads=4, shrink_cache=opcore_onnxruntime.set_cache_size
        )
    finally:
        opcore_onnxruntime.set_cache_size(size)
    assert not report.errors, report.errors
    assert report.mismatches == 0
    assert report.calls > 100
