"""The pytest plugin of the conformance kit: ``--opcore-backend``, the parametrisation over
(backend, op, sample), and the coverage lines at the end of the run.

It is registered through the ``pytest11`` entry point of the ``opcore`` distribution, so it loads
in every pytest session of an environment where opcore is installed; it stays inert there (it
imports neither opcore's plugins nor any backend, and adds no test) unless a test asks for one of
its fixtures, as ``opcore/testing/test_conformance.py`` does::

    pytest --pyargs opcore.testing --opcore-backend onnxruntime      # one backend
    pytest --pyargs opcore.testing --opcore-backend all              # every installed backend
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from opcore.reports import PluginReport
    from opcore.testing.coverage import Coverage
    from opcore.testing.records import ErrorInput, OpEntry, Sample

__all__ = ["BackendCase", "ErrorCase", "PartitionErrorCase", "SampleCase"]

OPTION = "--opcore-backend"
ALL = "all"
_FIXTURES = (
    "opcore_sample_case", "opcore_error_case", "opcore_backend_case", "opcore_partition_case",
    "opcore_partition_error_case",
)  # fmt: skip


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("opcore", "opcore conformance kit (pytest --pyargs opcore.testing)")
    group.addoption(
        OPTION,
        action="append",
        dest="opcore_backends",
        metavar="NAME",
        default=None,
        help="run the conformance kit against this backend (repeatable); "
        f"'{ALL}' (the default): every installed backend (those that did not load are reported with the reason)",
    )


@dataclass(frozen=True)
class BackendCase:
    """One backend the run was asked for; report None: asked for but not installed."""

    name: str
    report: PluginReport | None

    @property
    def id(self) -> str:
        return self.name


@dataclass(frozen=True)
class SampleCase:
    backend: str
    entry: OpEntry
    sample: Sample

    @property
    def id(self) -> str:
        return f"{self.backend}-{self.entry.op}-{self.sample.id}"


@dataclass(frozen=True)
class ErrorCase:
    backend: str
    entry: OpEntry
    case: ErrorInput

    @property
    def id(self) -> str:
        return f"{self.backend}-{self.entry.op}-{self.case.id}"


class _KitSession:
    """What one pytest session runs: the backends, the entries, and the tally (made on first use)."""

    def __init__(self, requested: list[str] | None) -> None:
        import opcore
        from opcore.backend import DEFAULT_PRIORITIES
        from opcore.reports import PluginStatus
        from opcore.testing.conformance import claims
        from opcore.testing.coverage import Coverage
        from opcore.testing.entries import entries

        reports = {report.name: report for report in opcore.backends()}
        # "all": the loaded backends by priority, then the others (reported with why they do not run)
        everything = sorted(
            reports.values(),
            key=lambda r: (r.status is not PluginStatus.LOADED, -(r.backend.priority if r.backend else 0), r.name),
        )
        chosen: list[str] = []
        for name in requested or [ALL]:
            for expanded in [r.name for r in everything] if name == ALL else [name]:
                if expanded not in chosen:
                    chosen.append(expanded)
        unknown = [name for name in chosen if name not in reports]
        if unknown:
            installed = ", ".join(sorted(reports)) or "none"
            published = [name for name in unknown if name in DEFAULT_PRIORITIES]
            raise pytest.UsageError(
                f"{OPTION} {', '.join(unknown)}: no installed plugin provides "
                f"{'this backend' if len(unknown) == 1 else 'these backends'} (installed: {installed}). Fix: "
                + (f"pip install 'opcore[{','.join(published)}]', " if published else "")
                + "install the vendor's distribution, or check the name"
            )
        registry = opcore.runtime.runtime().ensure_loaded().registry
        self.entries: tuple[OpEntry, ...] = tuple(e for e in entries() if e.op in registry.contracts)
        self.orphans = tuple(e.op for e in entries() if e.op not in registry.contracts)
        # contracts (a plugin's own ops) that nobody wrote an entry for: they are not checked at all
        self.unchecked = tuple(sorted(set(registry.contracts) - {e.op for e in self.entries}))
        self.cases = tuple(BackendCase(name, reports.get(name)) for name in chosen)
        self.run = tuple(c.name for c in self.cases if c.report is not None and c.report.ok)
        self.coverage: Coverage = Coverage(tuple(e.op for e in self.entries))
        for case in self.cases:
            if case.name in self.run:
                covered = tuple(e.op for e in self.entries if claims(case.name, e.op))
                self.coverage.add_backend(case.name, covered)
            else:
                self.coverage.add_backend(case.name, not_run=case.report.status_text if case.report else "")
        self.used = False

    def sample_cases(self) -> Iterator[SampleCase]:
        from opcore.testing.conformance import claims
        from opcore.testing.entries import samples_of

        for backend in self.run:
            for entry in self.entries:
                if claims(backend, entry.op):
                    for sample in samples_of(entry):
                        yield SampleCase(backend, entry, sample)

    def error_cases(self) -> Iterator[ErrorCase]:
        from opcore.testing.conformance import claims
        from opcore.testing.entries import error_inputs_of

        for backend in self.run:
            for entry in self.entries:
                covered = claims(backend, entry.op)
                for case in error_inputs_of(entry):
                    if case.raised_by == "meta" or covered:
                        yield ErrorCase(backend, entry, case)

    def partition_cases(self) -> Iterator[Any]:
        """Graphs for each backend's partition compiler (opcore.testing.partitions); none without one."""
        from opcore.testing.partitions import partition_cases

        for backend in self.run:
            yield from partition_cases(backend)

    def partition_error_cases(self) -> Iterator[Any]:
        from opcore.graph.partition import compilers
        from opcore.testing.partitions import PARTITION_ERRORS

        found = compilers()
        for backend in self.run:
            if backend in found:
                yield from (PartitionErrorCase(backend, kind) for kind in PARTITION_ERRORS)


@dataclass(frozen=True)
class PartitionErrorCase:
    """A partition-specific case (opcore.testing.partitions.PARTITION_ERRORS) on one backend's compiler."""

    backend: str
    kind: str

    @property
    def id(self) -> str:
        return f"{self.backend}-{self.kind.replace(' ', '-')}"


_SESSION = pytest.StashKey[_KitSession]()


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("opcore_backends", None):
        kit_session(config)  # named backends are checked now: a typo is a usage error, not a collection error


def kit_session(config: pytest.Config) -> _KitSession:
    """The session's kit state, made (and opcore's plugins loaded) on first use."""
    found = config.stash.get(_SESSION, None)
    if found is None:
        found = _KitSession(config.getoption("opcore_backends"))
        config.stash[_SESSION] = found
    return found


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    wanted = [name for name in _FIXTURES if name in metafunc.fixturenames]
    if not wanted:
        return  # not a kit test: nothing to do (this hook runs for every test of every session)
    session = kit_session(metafunc.config)
    session.used = True
    for name in wanted:
        makers = {
            "opcore_sample_case": session.sample_cases,
            "opcore_error_case": session.error_cases,
            "opcore_partition_case": session.partition_cases,
            "opcore_partition_error_case": session.partition_error_cases,
        }
        cases: list[Any] = list(makers.get(name, lambda: session.cases)())
        metafunc.parametrize(name, cases, ids=[case.id for case in cases])


@pytest.fixture(scope="session")
def opcore_backends(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """The loaded backends this run checks (``--opcore-backend``; default every installed one that loaded)."""
    return kit_session(request.config).run


@pytest.fixture(scope="session")
def opcore_coverage(request: pytest.FixtureRequest) -> Coverage:
    """The tally behind the coverage lines (tests record their outcomes in it)."""
    session = kit_session(request.config)
    session.used = True
    return session.coverage


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    session = config.stash.get(_SESSION, None)
    if session is None or not session.used:
        return
    reference = {e.reference for e in session.entries if isinstance(e.reference, str)}
    terminalreporter.section("opcore conformance kit")
    terminalreporter.write_line(
        f"results compared with backend {', '.join(sorted(reference)) or 'reference'}; "
        f"{len(session.entries)} ops with entries"
        + (f" (entries without a contract here: {', '.join(session.orphans)})" if session.orphans else "")
    )
    if session.unchecked:
        terminalreporter.write_line(f"ops without an entry, not checked: {', '.join(session.unchecked)}")
    for line in session.coverage.lines():
        terminalreporter.write_line(line)
