"""The conformance tests: what ``pytest --pyargs opcore.testing --opcore-backend NAME`` collects.

Each sample and error input of every op the backend claims becomes one test, and where the
backend has a partition compiler, graphs of those ops compiled by it (test_partition); ops the backend
has no kernel for are listed as not covered in the coverage lines, and samples it declines are
skipped with the reason, so nothing passes silently.
"""

from __future__ import annotations

import pytest

from opcore.testing.conformance import ConformanceError, Status, check_error, check_sample
from opcore.testing.entries import entry_point_problems


def test_backend_loads(opcore_backend_case) -> None:
    """Every backend named with --opcore-backend is installed and loaded (unavailable: skipped)."""
    report = opcore_backend_case.report
    if report.status.value == "failed":
        pytest.fail(f"backend {report.name!r} failed to load: {report.reason}\n{report.traceback}", pytrace=False)
    if not report.ok:
        pytest.skip(f"backend {report.name!r} is {report.status_text}")


def test_sample(opcore_sample_case, opcore_coverage) -> None:
    """The backend's result equals the reference's, in the contract's dtype and shape."""
    case = opcore_sample_case
    try:
        outcome = check_sample(case.backend, case.entry, case.sample)
    except ConformanceError as error:  # its message says it all: no traceback of the kit's own frames
        opcore_coverage.record(case.backend, "sample", case.entry.op, Status.FAILED)
        failure = str(error)
    except Exception:
        opcore_coverage.record(case.backend, "sample", case.entry.op, Status.FAILED)
        raise
    else:
        failure = ""
    if failure:
        pytest.fail(failure, pytrace=False)
    opcore_coverage.record(case.backend, "sample", case.entry.op, outcome)
    if outcome.status is not Status.PASSED:
        pytest.skip(f"{outcome.status}: {outcome.reason}")


def test_error_input(opcore_error_case, opcore_coverage) -> None:
    """The backend raises the contract's error type and message for the bad input."""
    case = opcore_error_case
    try:
        outcome = check_error(case.backend, case.entry, case.case)
    except ConformanceError as error:  # its message says it all: no traceback of the kit's own frames
        opcore_coverage.record(case.backend, "error", case.entry.op, Status.FAILED)
        failure = str(error)
    except Exception:
        opcore_coverage.record(case.backend, "error", case.entry.op, Status.FAILED)
        raise
    else:
        failure = ""
    if failure:
        pytest.fail(failure, pytrace=False)
    opcore_coverage.record(case.backend, "error", case.entry.op, outcome)
    if outcome.status is not Status.PASSED:
        pytest.skip(f"{outcome.status}: {outcome.reason}")


def test_partition(opcore_partition_case) -> None:
    """A backend's partition compiler compiles the op (alone, and between two other nodes) from the
    kit's samples, runs it as the reference does, saves it and loads it back (opcore.testing.partitions)."""
    from opcore.testing.partitions import check_partition

    try:
        outcome = check_partition(opcore_partition_case)
    except ConformanceError as error:
        pytest.fail(str(error), pytrace=False)
    if outcome.status is not Status.PASSED:
        pytest.skip(f"{outcome.status}: {outcome.reason}")


def test_partition_error(opcore_partition_error_case) -> None:
    """A node the compiler does not claim is refused with a PartitionError naming it; an empty tensor
    and a dynamic axis work or are refused with a PartitionError."""
    from opcore.testing.partitions import check_partition_error

    case = opcore_partition_error_case
    try:
        outcome = check_partition_error(case.backend, case.kind)
    except ConformanceError as error:
        pytest.fail(str(error), pytrace=False)
    if outcome.status is not Status.PASSED:
        pytest.skip(f"{outcome.status}: {outcome.reason}")


def test_entry_points_load() -> None:
    """Every plugin's ``opcore.testing`` entry point gives valid entries."""
    problems = entry_point_problems()
    assert not problems, "\n".join(problems)
