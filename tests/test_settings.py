"""Precedence: backend= > prefer/strict context > configure > environment > priority."""

from __future__ import annotations

import asyncio
import threading

import numpy
import pytest

import opcore
from opcore.settings import settings_from

pytestmark = pytest.mark.usefixtures("only_reference")

X = numpy.array([[-1.0, 2.0]], dtype=numpy.float32)


def chosen(**kwargs) -> str | None:
    return opcore.explain("relu", X, **kwargs).chosen


def test_priority_decides_by_default(fixture_plugins) -> None:
    assert chosen() == "fixture_good"  # priority 50 over reference's 0


def test_environment_order(fixture_plugins, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPCORE_BACKENDS", "reference,fixture_good")
    opcore.reload_plugins()
    assert chosen() == "reference"
    assert "reference, fixture_good (from OPCORE_BACKENDS)" in str(opcore.explain("relu", X))


def test_configure_beats_environment(fixture_plugins, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPCORE_BACKENDS", "reference")
    opcore.reload_plugins()
    previous = opcore.configure(backends=["fixture_good"])
    assert previous.backends == ("reference",)
    assert chosen() == "fixture_good"
    opcore.configure(backends=None)  # None clears the override... and the env order shows again
    assert chosen() == "reference"


def test_context_beats_configure(fixture_plugins) -> None:
    opcore.configure(backends=["fixture_good"])
    with opcore.prefer("reference"):
        assert chosen() == "reference"
        with opcore.prefer("fixture_good"):  # the innermost context wins
            assert chosen() == "fixture_good"
        assert chosen() == "reference"
    assert chosen() == "fixture_good"


def test_call_argument_beats_context(fixture_plugins) -> None:
    with opcore.prefer("fixture_good"):
        assert chosen(backend="reference") == "reference"
        assert opcore.run("relu", X, backend="reference").tolist() == [[0.0, 2.0]]


def test_order_only_reorders_fallback_still_happens(fixture_plugins) -> None:
    big = numpy.ones((5, 5), numpy.float32)  # fixture_good declines more than 16 elements
    with opcore.prefer("fixture_good"):
        assert opcore.explain("relu", big).chosen == "reference"


def test_strict_from_each_level(fixture_plugins, monkeypatch: pytest.MonkeyPatch) -> None:
    big = numpy.ones((5, 5), numpy.float32)
    assert opcore.run("relu", big).shape == (5, 5)  # falls back to reference
    with opcore.strict(), pytest.raises(opcore.NoKernelError, match="strict mode: only 'fixture_good' may run it"):
        opcore.run("relu", big)
    opcore.configure(strict=True)
    with pytest.raises(opcore.NoKernelError):
        opcore.run("relu", big)
    with opcore.strict(False):  # the context beats configure
        assert opcore.run("relu", big).shape == (5, 5)
    opcore.configure(reset=True)
    monkeypatch.setenv("OPCORE_STRICT", "1")
    opcore.reload_plugins()
    with pytest.raises(opcore.NoKernelError):
        opcore.run("relu", big)


def test_strict_follows_the_preferred_order(fixture_plugins) -> None:
    with opcore.strict(), opcore.prefer("reference"):
        assert chosen() == "reference"
        assert "passed over" in str(opcore.explain("relu", X))


def test_context_is_per_thread(fixture_plugins) -> None:
    seen: list[str | None] = []
    with opcore.prefer("reference"):
        thread = threading.Thread(target=lambda: seen.append(chosen()))
        thread.start()
        thread.join()
        assert chosen() == "reference"
    assert seen == ["fixture_good"]


def test_context_is_per_task(fixture_plugins) -> None:
    async def pick(name: str | None) -> str | None:
        if name is None:
            await asyncio.sleep(0)
            return chosen()
        with opcore.prefer(name):
            await asyncio.sleep(0)
            return chosen()

    async def main() -> list[str | None]:
        return list(await asyncio.gather(pick("reference"), pick(None), pick("fixture_good")))

    assert asyncio.run(main()) == ["reference", "fixture_good", "fixture_good"]


def test_prefer_names_must_be_loaded(fixture_plugins) -> None:
    with pytest.raises(opcore.PluginError, match="opcore.prefer names backend 'nope', which is not installed"):
        with opcore.prefer("nope"):
            pass
    with pytest.raises(opcore.PluginError, match="which is failed"):
        with opcore.prefer("fixture_badapi"):
            pass


def test_environment_order_naming_a_missing_backend_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPCORE_BACKENDS", "openvinoo,reference")
    opcore.reload_plugins()
    with pytest.raises(opcore.PluginError, match="OPCORE_BACKENDS names backend 'openvinoo'"):
        opcore.run("relu", X)


def test_settings_parsing() -> None:
    settings = settings_from(
        {
            "OPCORE_BACKENDS": " cpu, reference ,",
            "OPCORE_DISABLE": "a,b",
            "OPCORE_STRICT": "yes",
            "OPCORE_AUTOLOAD": "off",
        },
        {},
    )
    assert settings.backends == ("cpu", "reference")
    assert settings.disable == frozenset({"a", "b"})
    assert settings.strict is True and settings.autoload is False
    assert settings.source("strict") == "OPCORE_STRICT"
    with pytest.raises(opcore.ArgumentError, match="OPCORE_STRICT' expected 1 or 0"):
        settings_from({"OPCORE_STRICT": "maybe"}, {})
    with pytest.raises(opcore.ArgumentError, match="expected a bool"):
        opcore.configure(strict="yes")
