"""Four threads of mixed ops on the ONNX Runtime backend give results bitwise identical to a serial
run, also while the session cache evicts and rebuilds. ``bench/threads.py`` runs the same for 10 s.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("onnxruntime", reason="the ONNX Runtime backend needs onnxruntime")

from runtime_cases import assert_threads_match_a_serial_run


def test_four_threads_match_a_serial_run():
    assert_threads_match_a_serial_run("onnxruntime", "opcore_onnxruntime")


# onnxruntime's pool threads spin after a run; in a process that runs torch too that spin takes the
# cores torch's next op needs (docs/benchmarks.md "Thread pools in one process"). opcore's sessions
# stop it when a run returns, one-op sessions and partitions alike, unless OPCORE_ORT_KEEP_SPINNING=1.
SPIN_STOP = "session.force_spinning_stop"


def _spin_stop(session: Any) -> str | None:
    try:
        return str(session.get_session_options().get_session_config_entry(SPIN_STOP))
    except RuntimeError:  # onnxruntime raises for a key never set
        return None


def _relu_session() -> Any:
    import numpy
    from opcore_onnxruntime.graph import Graph
    from opcore_onnxruntime.session import open_session, target_opset

    graph = Graph("relu", *target_opset())
    session, _, _ = open_session(graph, graph.op("Relu", graph.input(numpy.dtype("float32"), 2)))
    return session


def test_sessions_stop_spinning_when_a_run_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    from opcore_onnxruntime.session import KEEP_SPINNING

    monkeypatch.delenv(KEEP_SPINNING, raising=False)
    assert _spin_stop(_relu_session()) == "1"


def test_keep_spinning_leaves_onnxruntime_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from opcore_onnxruntime.session import KEEP_SPINNING

    monkeypatch.setenv(KEEP_SPINNING, "1")
    assert _spin_stop(_relu_session()) is None
