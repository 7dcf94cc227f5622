"""Four threads of mixed ops on the OpenVINO backend give results bitwise identical to a serial
run, also while the compiled-model cache evicts and rebuilds. ``bench/threads.py`` runs the same for 10 s.
"""

from __future__ import annotations

import pytest

pytest.importorskip("openvino", reason="the OpenVINO backend needs openvino")

from runtime_cases import assert_threads_match_a_serial_run


def test_four_threads_match_a_serial_run():
    assert_threads_match_a_serial_run("openvino", "opcore_openvino")
