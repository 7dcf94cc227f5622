"""Discovery and loading: every failure branch is isolated and reported, the rest keeps working."""

from __future__ import annotations

import logging
import subprocess
import sys
import types
from typing import Any

import numpy
import pytest
from conftest import FIXTURE_PLUGINS, reports

import opcore
from opcore import BackendSpec, DeviceType, PluginStatus

pytestmark = pytest.mark.usefixtures("only_reference")

X = numpy.array([[-1.0, 2.0], [3.0, -4.0]], dtype=numpy.float32)


def test_reference_is_loaded_through_its_entry_point() -> None:
    report = reports()["reference"]
    assert report.status is PluginStatus.LOADED
    assert report.distribution == "opcore"
    assert report.entry_point == "opcore.reference.plugin"
    assert report.kernel_count >= 28
    assert report.load_time_s >= 0


def test_each_failure_is_reported_and_the_others_still_work(fixture_plugins) -> None:
    found = reports()
    assert found["fixture_good"].status is PluginStatus.LOADED
    assert found["fixture_good"].distribution == "opcore-fixture-good"
    assert found["fixture_good"].distribution_version == "1.0"
    failed = {
        "fixture_importerror": "ImportError: libwidget.so.3",
        "fixture_badapi": "built for opcore plugin API 999",
        "fixture_unknownop": "kernel for unknown op 'rleu'",
        "fixture_hookraises": "RuntimeError: device table corrupted",
        "fixture_misnamed": "backend calls itself 'something_else'",
        "fixture_twin": "claimed by 2 distributions",
        "fixture_twin [opcore-fixture-zz-duplicate]": "claimed by 2 distributions",
    }
    for name, text in failed.items():
        assert found[name].status is PluginStatus.FAILED, name
        assert text in found[name].reason, (name, found[name].reason)
    assert "did you mean 'relu'" in found["fixture_unknownop"].reason
    assert (
        found["fixture_importerror"].traceback.startswith("Traceback")
        or "ImportError" in found["fixture_importerror"].traceback
    )
    assert found["fixture_unavailable"].status is PluginStatus.UNAVAILABLE
    assert found["fixture_unavailable"].reason == "no widget attached (looked in /dev/widget*)"
    # the working plugins work
    assert opcore.run("relu", X, backend="fixture_good").tolist() == [[0.0, 2.0], [3.0, 0.0]]
    assert opcore.run("relu", X, backend="reference").tolist() == [[0.0, 2.0], [3.0, 0.0]]
    assert opcore.run("fixture.double", X, factor=3.0)[0, 1] == 6.0


def test_a_failed_plugin_contributes_nothing(fixture_plugins) -> None:
    registry = opcore.runtime.runtime().ensure_loaded().registry
    # fixture_unknownop registered a valid float64 relu before its invalid kernel: it must not land
    assert not [k for k in registry.kernels_of("relu") if k.backend == "fixture_unknownop"]
    assert "fixture_badapi" not in registry.backends
    explanation = opcore.explain("relu", X.astype(numpy.float64))
    assert explanation.chosen == "reference"


def test_failures_are_logged_once(fixture_plugins, caplog: pytest.LogCaptureFixture) -> None:
    opcore.reload_plugins()
    with caplog.at_level(logging.WARNING, logger="opcore.plugins"):
        opcore.backends()
        opcore.backends()
        opcore.run("relu", X)
    messages = [r.getMessage() for r in caplog.records if "fixture_importerror" in r.getMessage()]
    assert len(messages) == 1
    assert "OPCORE_DISABLE=fixture_importerror" in messages[0]


def test_disable_by_environment(fixture_plugins, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPCORE_DISABLE", "fixture_importerror, fixture_good")
    opcore.reload_plugins()
    found = reports()
    assert found["fixture_importerror"].status is PluginStatus.DISABLED
    assert found["fixture_importerror"].reason == "by OPCORE_DISABLE"
    assert found["fixture_good"].status is PluginStatus.DISABLED
    assert "opcore_fixture_importerror.plugin" not in sys.modules


def test_disable_star_disables_all(fixture_plugins, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPCORE_DISABLE", "*")
    opcore.reload_plugins()
    assert {r.status for r in opcore.backends()} == {PluginStatus.DISABLED}
    with pytest.raises(opcore.NoKernelError, match="no kernel accepts float32"):
        opcore.run("relu", X)


def test_autoload_off_loads_no_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPCORE_AUTOLOAD", "0")
    opcore.reload_plugins()
    found = reports()
    assert found["reference"].status is PluginStatus.DISABLED
    assert found["reference"].reason == "by OPCORE_AUTOLOAD=0"
    from opcore.reference import plugin

    opcore.register_plugin(plugin)
    assert reports()["reference"].status is PluginStatus.LOADED
    assert opcore.run("relu", X).tolist() == [[0.0, 2.0], [3.0, 0.0]]


def test_configure_disable_reloads(fixture_plugins) -> None:
    opcore.configure(disable=["fixture_good"])
    assert reports()["fixture_good"].reason == "by opcore.configure(disable=...)"
    opcore.configure(disable=None)
    assert reports()["fixture_good"].status is PluginStatus.LOADED


def test_plugins_load_on_first_use_not_at_import() -> None:
    code = (
        "import sys, opcore; "
        "print(opcore.runtime.runtime().loaded, 'opcore.reference.plugin' in sys.modules); "
        "opcore.backends(); print(opcore.runtime.runtime().loaded)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "True"]


# --- in-process plugins -----------------------------------------------------------------------


def _plugin(name: str = "inproc", **spec: Any) -> types.SimpleNamespace:
    def opcore_backend() -> BackendSpec:
        return BackendSpec(name=name, version="0", priority=5, device_types=(DeviceType.CPU,), **spec)

    def opcore_register_kernels(registrar: opcore.Registrar) -> None:
        registrar.add_kernel("relu", lambda x: numpy.maximum(x, 0), dtypes=["float32"])

    opcore.hookimpl(opcore_backend)
    opcore.hookimpl(opcore_register_kernels)
    return types.SimpleNamespace(
        __name__=name, opcore_backend=opcore_backend, opcore_register_kernels=opcore_register_kernels
    )


def test_register_and_unregister_in_process() -> None:
    report = opcore.register_plugin(_plugin())
    assert report.status is PluginStatus.LOADED
    assert report.entry_point == "register_plugin(inproc)"
    assert report.kernel_count == 1
    assert opcore.explain("relu", X).chosen == "inproc"
    opcore.unregister_plugin("inproc")
    assert "inproc" not in reports()
    assert opcore.explain("relu", X).chosen == "reference"


def test_in_process_plugins_survive_reload() -> None:
    opcore.register_plugin(_plugin())
    opcore.reload_plugins()
    assert reports()["inproc"].status is PluginStatus.LOADED


def test_register_plugin_failure_raises_and_is_reported() -> None:
    with pytest.raises(opcore.PluginError, match="api_version|API 7"):
        opcore.register_plugin(_plugin("broken", api_version=7))
    assert reports()["broken"].status is PluginStatus.FAILED


def test_register_plugin_with_a_taken_name_fails() -> None:
    with pytest.raises(opcore.PluginError, match="a backend named 'reference' is already provided by opcore"):
        opcore.register_plugin(_plugin("reference"))
    assert reports()["reference"].status is PluginStatus.LOADED  # the first one is untouched


def test_availability_check_that_raises_fails_the_plugin() -> None:
    def broken() -> bool:
        raise OSError("probe exploded")

    with pytest.raises(opcore.PluginError, match="OSError: probe exploded"):
        opcore.register_plugin(_plugin("probe", is_available=broken))


def test_unknown_hooks_and_bad_returns_fail() -> None:
    class UnknownHook:
        @opcore.hookimpl
        def opcore_backend(self) -> BackendSpec:
            return BackendSpec(name="unknownhook", version="0", priority=1, device_types=(DeviceType.CPU,))

        @opcore.hookimpl
        def opcore_register_everything(self) -> None:
            pass

    with pytest.raises(opcore.PluginError, match="unknown hook"):
        opcore.register_plugin(UnknownHook(), name="unknownhook")

    class NotASpec:
        @opcore.hookimpl
        def opcore_backend(self) -> dict:
            return {"name": "x"}

    with pytest.raises(opcore.PluginError, match="returned dict, not a BackendSpec"):
        opcore.register_plugin(NotASpec(), name="notaspec")

    class NoBackend:
        @opcore.hookimpl
        def opcore_register_kernels(self, registrar: opcore.Registrar) -> None:
            pass

    with pytest.raises(opcore.PluginError, match="does not implement opcore_backend"):
        opcore.register_plugin(NoBackend(), name="nobackend")

    class WrongArguments:
        @opcore.hookimpl
        def opcore_backend(self) -> BackendSpec:
            return BackendSpec(name="wrongargs", version="0", priority=1, device_types=(DeviceType.CPU,))

        @opcore.hookimpl
        def opcore_register_kernels(self, registry: object) -> None:  # the spec says 'registrar'
            pass

    with pytest.raises(opcore.PluginError, match="invalid hook implementation"):
        opcore.register_plugin(WrongArguments(), name="wrongargs")


def test_fixture_plugins_folder_holds_real_metadata() -> None:
    assert (FIXTURE_PLUGINS / "opcore_fixture_good-1.0.dist-info" / "entry_points.txt").is_file()
