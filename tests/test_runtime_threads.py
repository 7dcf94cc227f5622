"""OPCORE_RUNTIME_THREADS: the graph runtimes' intra-op threads, one budget with torch's."""

from __future__ import annotations

import pytest

from opcore.settings import runtime_threads


def test_the_variable_reads_a_positive_count_or_nothing():
    assert runtime_threads({"OPCORE_RUNTIME_THREADS": "3"}) == 3
    assert runtime_threads({"OPCORE_RUNTIME_THREADS": " 1 "}) == 1
    for text in ("", "0", "-2", "two", "1.5"):
        assert runtime_threads({"OPCORE_RUNTIME_THREADS": text}) is None
    assert runtime_threads({}) is None


def test_onnxruntime_sessions_take_the_budget(monkeypatch):
    pytest.importorskip("onnxruntime", reason="the onnxruntime plugin's session options")
    from opcore_onnxruntime.session import session_options

    assert session_options().intra_op_num_threads == 0  # onnxruntime's default: every core
    monkeypatch.setenv("OPCORE_RUNTIME_THREADS", "1")
    assert session_options().intra_op_num_threads == 1


def test_openvino_models_take_the_budget(monkeypatch):
    pytest.importorskip("openvino", reason="the openvino plugin's compile options")
    from opcore_openvino.compiled import CONFIG, compile_config

    assert compile_config() == CONFIG
    monkeypatch.setenv("OPCORE_RUNTIME_THREADS", "1")
    assert compile_config()["INFERENCE_NUM_THREADS"] == "1"
    assert compile_config()["INFERENCE_PRECISION_HINT"] == "f32"
