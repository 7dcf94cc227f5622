"""PyTorch's own OpInfo samples through every available backend (tests/opinfo_run.py): no wrong
result and no exception that is not an OpcoreError; how many each backend declines, and why, is
printed (pytest -s). A deterministic subset by default (float32 and one more dtype per entry, the
first samples of each, two error inputs), ~25 s of CPU; OPCORE_OPINFO=full runs every sample of
every dtype (tens of minutes)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("expecttest", reason="torch.testing._internal needs expecttest (requirements-dev.txt)")
torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))
import opinfo_run  # noqa: E402


@pytest.fixture(scope="module")
def report() -> opinfo_run.Report:
    full = os.environ.get("OPCORE_OPINFO", "") == "full"
    return opinfo_run.run(full=full)


def test_every_backend_is_right_or_declines_with_an_opcore_error(report: opinfo_run.Report) -> None:
    print("\n" + report.text())
    assert len(report.entries) >= 60, "OpInfo entries found for opcore's ops"
    failures = {name: t.failures for name, t in report.tallies.items() if t.failures}
    assert not failures, "\n".join(f"{name}: {f}" for name, fs in failures.items() for f in fs[:20])


def test_each_backend_passes_samples_and_raises_opcore_errors_for_error_inputs(report: opinfo_run.Report) -> None:
    assert {"reference", "cpu"} <= set(report.tallies)
    for name, tally in report.tallies.items():
        assert tally.passed > 100, f"{name} passed only {tally.passed} samples"
        assert tally.errors_raised > 0, f"{name} raised no OpcoreError for OpInfo's error inputs"


def test_torch_style_arguments_are_not_declined_by_the_contracts(report: opinfo_run.Report) -> None:
    """The argument forms a torch user passes (dtype=torch.float32, device=, split by sizes, pad modes,
    int32 gather indices) bind on the reference and cpu backends: no "unexpected keyword" and no
    refusal of those forms."""
    forms = ("unexpected keyword argument 'dtype'", "unexpected keyword argument 'device'", "'split_size'",
             "argument 'mode'", "index tensor of int64", "expected a str, found dtype")  # fmt: skip
    for name in ("reference", "cpu"):
        refused = [r for r in report.tallies[name].declined if any(form in r for form in forms)]
        assert not refused, f"{name}: {refused}"
