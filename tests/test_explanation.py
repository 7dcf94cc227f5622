"""explain(): every candidate with its status and reason, and the chosen one."""

from __future__ import annotations

import numpy
import pytest

import opcore
from opcore.kernel_walk import CandidateStatus

pytestmark = pytest.mark.usefixtures("only_reference")

X = numpy.ones((2, 2), numpy.float32)


def test_explain_lists_every_plugin(fixture_plugins) -> None:
    explanation = opcore.explain("relu", numpy.ones((5, 5), numpy.float32))
    statuses = {c.backend: c.status for c in explanation.candidates}
    assert statuses["fixture_good"] is CandidateStatus.DECLINED
    assert statuses["reference"] is CandidateStatus.CHOSEN
    assert statuses["fixture_importerror"] is CandidateStatus.FAILED
    assert statuses["fixture_unavailable"] is CandidateStatus.UNAVAILABLE
    assert explanation.chosen == "reference" and explanation.backend == "reference"
    text = str(explanation)
    assert text.splitlines()[0] == "relu(x: float32[5, 5] on cpu)"
    assert "fixture only takes up to 16 elements, got 25" in text
    assert text.endswith("-> runs on reference")


def test_explain_shows_fallbacks_and_missing_dtypes(fixture_plugins) -> None:
    explanation = opcore.explain("tanh", X)
    rows = {c.backend: c for c in explanation.candidates}
    assert rows["fixture_good"].status is CandidateStatus.CHOSEN
    assert rows["reference"].status is CandidateStatus.FALLBACK
    doubles = opcore.explain("relu", X.astype(numpy.float64))
    assert "no kernel for float64 on cpu (has float32 on cpu)" in str(doubles)


def test_explain_reports_what_run_would_raise(fixture_plugins) -> None:
    explanation = opcore.explain("exp", X, backend="fixture_good")
    assert explanation.chosen is None and explanation.backend is None
    assert explanation.error is not None and "fixture never runs exp" in explanation.error
    assert "-> cannot run:" in str(explanation)


def test_explain_raises_for_bad_inputs_like_run() -> None:
    with pytest.raises(opcore.ShapeError):
        opcore.explain("linear", X, numpy.ones((3, 5), numpy.float32))


def test_explain_does_not_run_anything(fixture_plugins) -> None:
    from opcore_fixture_good.plugin import CALLS

    CALLS.clear()
    opcore.explain("relu", X)
    assert CALLS == []
