"""Shared fixtures: a clean opcore state per test, and the fixture plugins with real metadata."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import opcore
from opcore.settings import ENV_VARS

FIXTURE_PLUGINS = Path(__file__).parent / "fixture_plugins"


@pytest.fixture(autouse=True)
def clean_opcore(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Every test starts from the environment's defaults: no OPCORE_* variables, no overrides, and a
    tuning file of its own that does not exist yet (never the user's).
    """
    monkeypatch.setenv("OPCORE_TUNE_FILE", str(tmp_path / "tuning.json"))
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    before = {name: os.environ.get(name) for name in ENV_VARS}
    runtime = opcore.runtime.runtime()
    if runtime.overrides or runtime.in_process or any(v is not None for v in before.values()):
        runtime.overrides.clear()
        runtime.in_process.clear()
        opcore.reload_plugins()
    yield
    runtime.overrides.clear()
    if runtime.in_process:
        runtime.in_process.clear()
    for name in ENV_VARS:  # a fixture's OPCORE_* (only_reference) is still set here: the next test starts clean
        monkeypatch.delenv(name, raising=False)
    opcore.reload_plugins()


@pytest.fixture
def fixture_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Make the plugin distributions under tests/fixture_plugins visible, as if pip-installed."""
    monkeypatch.syspath_prepend(str(FIXTURE_PLUGINS))
    importlib.invalidate_caches()
    opcore.reload_plugins()
    yield FIXTURE_PLUGINS
    for name in [m for m in sys.modules if m.startswith("opcore_fixture_")]:
        del sys.modules[name]


@pytest.fixture
def only_reference(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Core tests reason about ranking with the reference backend and the fixture plugins alone:
    every other installed backend (cpu, onnxruntime, openvino, example, ...) is disabled.
    """
    from opcore.plugins import PluginLoader

    others = sorted({ep.name for ep in PluginLoader.entry_points()} - {"reference"})
    others = [name for name in others if not name.startswith("fixture_")]
    if others:
        monkeypatch.setenv("OPCORE_DISABLE", ",".join(others))
        opcore.reload_plugins()
    yield


def reports() -> dict[str, opcore.PluginReport]:
    return {r.name: r for r in opcore.backends()}


@pytest.fixture(params=["python", "compiled"])
def run_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The test once on each path of opcore.run (issue 15): the pure-Python run() and the compiled fast
    path in front of it (opcore._fastrun). In this process by dispatch.use_compiled; in
    child processes the test starts, by OPCORE_PURE_PYTHON. The compiled run is skipped, with the
    reason, where the extension is not there. Fallback warnings are given once per process: each
    run starts with none given yet, as the test's single run did.
    """
    from opcore import dispatch, kernel_walk

    kernel_walk._warned.clear()

    fast = dispatch.run
    if request.param == "compiled":
        if fast is dispatch.run_python:
            pytest.skip(f"the compiled fast path is not in this process: {dispatch.PURE_PYTHON_REASON}")
        yield "compiled"
        return
    monkeypatch.setenv("OPCORE_PURE_PYTHON", "1")
    dispatch.use_compiled(False)
    try:
        yield "python"
    finally:
        dispatch.use_compiled(True)
