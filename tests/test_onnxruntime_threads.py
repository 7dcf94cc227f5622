"""Four threads of mixed ops on the ONNX Runtime backend give results bitwise identical to a serial
run, also while the session cache evicts and rebuilds. ``bench/threads.py`` runs the same for 10 s.
"""

from __future__ import annotations

import pytest

pytest.importorskip("onnxruntime", reason="the ONNX Runtime backend needs onnxruntime")

from runtime_cases import assert_threads_match_a_serial_run


def test_four_threads_match_a_serial_run():
    assert_threads_match_a_serial_run("onnxruntime", "opcore_onnxruntime")
