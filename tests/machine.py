"""What this machine offers, asked the way opcore's backends ask it, so that a test's expectation
comes from the machine it runs on: a capability is asserted where present, its decline reason
where absent.

>>> onednn_reason("float32") is None
True
"""

from __future__ import annotations

import pytest

import opcore
from opcore.types import DType


def needs_backend(name: str) -> None:
    """Skip unless backend ``name`` loaded here, saying why it did not (not installed, or its reason)."""
    report = next((r for r in opcore.backends() if r.name == name), None)
    if report is None:
        pytest.skip(f"backend {name!r} is not installed here")
    if not report.ok:
        pytest.skip(f"backend {name!r} is {report.status.value} here: {report.reason}")


def onednn_reason(dtype: str | DType) -> str | None:
    """None where the cpu backend's oneDNN kernels take ``dtype`` here; else the reason its checker gives."""
    from opcore_cpu.system import onednn_bfloat16_reason, onednn_float16_reason

    if DType(dtype) is DType.BFLOAT16:
        return onednn_bfloat16_reason()
    if DType(dtype) is DType.FLOAT16:
        return onednn_float16_reason()
    return None


def onednn_or_aten(dtype: str | DType) -> str:
    """The cpu kernel chosen for a problem above oneDNN's crossover in ``dtype``."""
    return "cpu/onednn" if onednn_reason(dtype) is None else "cpu/aten"


def check_onednn_choice(explanation, dtype: str | DType) -> None:
    """oneDNN chosen where it takes ``dtype`` here; otherwise ATen, with oneDNN declined for the reason."""
    reason = onednn_reason(dtype)
    if reason is None:
        assert explanation.chosen == "cpu/onednn", str(explanation)
        return
    assert explanation.chosen == "cpu/aten", str(explanation)
    row = next(c for c in explanation.candidates if c.title == "cpu/onednn")
    assert row.status.value == "declined" and row.reason == reason, (row.status, row.reason)
