"""The example backend, checked with opcore's conformance kit (opcore.testing).

The kit compares each sample of an op with opcore's reference backend, and checks that every
bad input raises the contract's error: a vendor's tests need little more than these loops.
"""

from __future__ import annotations

import numpy
import pytest

import opcore
from opcore.testing import Status, check_error, check_sample, entry, error_inputs_of, samples_of

BACKEND = "example"


@pytest.mark.parametrize("sample", samples_of(entry("silu")), ids=lambda s: s.id)
def test_silu_conforms(sample):
    outcome = check_sample(BACKEND, entry("silu"), sample)
    if outcome.status is Status.DECLINED:
        # the kernel registers float32 and float64, contiguous inputs only: nothing else may be declined
        layouts = {t.layout for t in sample.tensors()}
        dtypes = {t.dtype.value for t in sample.tensors()}
        assert layouts - {"contiguous"} or dtypes - {"float32", "float64"}, outcome.reason
        pytest.skip(outcome.reason)
    assert outcome.status is Status.PASSED


@pytest.mark.parametrize("sample", samples_of(entry("example.swiglu")), ids=lambda s: s.id)
def test_swiglu_conforms(sample):
    outcome = check_sample(BACKEND, entry("example.swiglu"), sample)
    if outcome.status is Status.DECLINED:
        assert {t.dtype.value for t in sample.tensors()} == {"bfloat16"}, outcome.reason
        pytest.skip(outcome.reason)
    assert outcome.status is Status.PASSED


@pytest.mark.parametrize("sample", samples_of(entry("clamp")), ids=lambda s: s.id)
def test_clamp_conforms(sample):
    outcome = check_sample(BACKEND, entry("clamp"), sample)
    if outcome.status is Status.DECLINED:
        # float32/float64 with number (or absent) bounds: tensor bounds and other dtypes are declined
        from opcore.testing.records import TensorInput

        bounds = (*sample.args[1:], *sample.kwargs.values())
        tensor_bound = any(isinstance(a, TensorInput) for a in bounds)
        dtypes = {t.dtype.value for t in sample.tensors()}
        assert tensor_bound or dtypes - {"float32", "float64"}, outcome.reason
        pytest.skip(outcome.reason)
    assert outcome.status is Status.PASSED, outcome.reason


@pytest.mark.parametrize("case", error_inputs_of(entry("example.swiglu")), ids=lambda c: c.id)
def test_swiglu_errors(case):
    assert check_error(BACKEND, entry("example.swiglu"), case).status is Status.PASSED


def test_swiglu_runs_on_example_and_decomposes_elsewhere():
    x, gate = numpy.linspace(-3, 3, 12, dtype="float32").reshape(3, 4), numpy.ones((3, 4), "float32")
    assert opcore.explain("example.swiglu", x, gate).backend == BACKEND
    expected = x * gate / (1 + numpy.exp(-gate))
    numpy.testing.assert_allclose(opcore.run("example.swiglu", x, gate), expected, rtol=1e-6)
    # the reference has no kernel for it: pinned there, the op runs as mul(x, silu(gate)) on the reference
    assert opcore.explain("example.swiglu", x, gate, backend="reference").chosen == "decomposition"
    numpy.testing.assert_allclose(opcore.run("example.swiglu", x, gate, backend="reference"), expected, rtol=1e-6)


def test_silu_outranks_backends_below_250_and_declines_non_contiguous_inputs():
    x = numpy.linspace(-3, 3, 12, dtype="float32").reshape(3, 4)
    rows = {c.backend: c for c in opcore.explain("silu", x).candidates}
    assert rows[BACKEND].priority == 250
    winners = [c for c in rows.values() if c.priority is not None and c.priority > 250]
    assert opcore.explain("silu", x).backend == (
        BACKEND if not winners else max(winners, key=lambda c: c.priority).backend
    )
    declined = opcore.explain("silu", x.T, backend=BACKEND)
    assert declined.chosen is None
    assert "contiguous inputs only" in str(declined)


def test_the_backend_reports_itself():
    report = next(r for r in opcore.backends() if r.name == BACKEND)
    assert report.ok and report.backend.priority == 150 and report.contract_count == 1


def test_the_partition_compiler_passes_the_kit():
    """Every sample of every op the example's compiler claims, as one-node and chained partitions
    (opcore.testing.partitions: compiled, run, compared, saved, loaded), and the error cases."""
    from opcore.testing.partitions import PARTITION_ERRORS, check_partition, check_partition_error, partition_cases

    statuses = [check_partition(case).status for case in partition_cases(BACKEND, samples=None)]
    assert statuses.count(Status.PASSED) >= 20, statuses
    assert all(check_partition_error(BACKEND, kind).status is Status.PASSED for kind in PARTITION_ERRORS)
