"""The plugin failure matrix (issue 14, items 4, 5, 6, 11): real fake distributions on sys.path,
each failure isolated and reported, the host unaffected, the doctor's exit status right."""

from __future__ import annotations

import importlib
import itertools
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy
import pytest
from adversarial_support import fresh_warnings  # noqa: F401 (an autouse fixture)
from cli_support import run_cli

import opcore
from opcore import PluginStatus

# every test here on both paths of opcore.run: pure Python and compiled (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("run_path")

X = numpy.array([[-1.0, 2.0], [3.0, -4.0]], dtype=numpy.float32)
RELU = numpy.maximum(X, 0)
_COUNTER = itertools.count()

HEADER = """
import time, sys
import numpy
import opcore
from opcore import BackendSpec, DeviceType, Kernel, DType
"""


def _spec(name: str, extra: str = "") -> str:
    return f"""
@opcore.hookimpl
def opcore_backend():
    return BackendSpec(name={name!r}, version="1.0", priority=500, device_types=(DeviceType.CPU,){extra})
"""


def _relu_kernels(body: str = "registrar.add_kernel('relu', lambda x: numpy.maximum(x, 0), dtypes=['float32'])") -> str:
    return f"""
@opcore.hookimpl
def opcore_register_kernels(registrar):
    {body}
"""


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., str]]:
    """install(entry_point, source, dist=...) -> module name: a distribution made of a dist-info
    folder and a module, on sys.path as if pip-installed (plugins reload on next use).
    """
    made: list[str] = []
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(entry_point: str, source: str, dist: str | None = None, version: str = "1.0") -> str:
        module = f"opcore_adv_{next(_COUNTER)}"
        dist = dist or module.replace("_", "-")
        (tmp_path / f"{module}.py").write_text(HEADER + textwrap.dedent(source))
        info = tmp_path / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[opcore.backends]\n{entry_point} = {module}\n")
        importlib.invalidate_caches()
        opcore.reload_plugins()
        made.append(module)
        return module

    yield make
    for module in made:
        sys.modules.pop(module, None)


def _report(name: str) -> opcore.PluginReport:
    return {r.name: r for r in opcore.backends()}[name]


def _host_fine() -> None:
    """The host still works: the reference serves, and no report says 'already registered'."""
    numpy.testing.assert_array_equal(opcore.run("relu", X, backend="reference"), RELU)
    assert _report("reference").status is PluginStatus.LOADED
    assert not any("already registered" in r.reason for r in opcore.backends())


CASES = {
    "import error": ("import nosuchmodule_xyz\n" + _spec("advimport"), "No module named 'nosuchmodule_xyz'"),
    "hook raises": (_spec("advhook") + _relu_kernels("raise RuntimeError('table corrupted')"), "table corrupted"),
    "api version": (_spec("advapi", ", api_version=999"), "plugin API 999"),
    "priority as a str": (_spec("advprio").replace("priority=500", "priority='999'"), "priority must be an int"),
    "priority None on a kernel": (
        _spec("advkprio") + _relu_kernels("registrar.add(Kernel('relu', lambda x: x, frozenset({DType.FLOAT32}), "
                                          "priority=None))"),
        "priority must be an int",
    ),
    "device_types bogus": (_spec("advdev").replace("(DeviceType.CPU,)", "('toaster',)"), "device_types"),
    "is_available not callable": (_spec("advavail", ", is_available=True"), "is_available must be callable"),
    "exit in a hook": (_spec("advexit") + _relu_kernels("sys.exit(3)"), "SystemExit"),
    "exit in is_available": (_spec("advexit2", ", is_available=lambda: sys.exit(4)"), "SystemExit"),
    "is_available returns a list": (_spec("advlist", ", is_available=lambda: []"), "is_available() returned list"),
    "spec not a BackendSpec": ("@opcore.hookimpl\ndef opcore_backend():\n    return {'name': 'advdict'}\n",
                               "not a BackendSpec"),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_broken_plugin_fails_alone(install, case: str) -> None:
    source, reason = CASES[case]
    name = source.split("name=")[1].split(",")[0].strip("'\"") if "name=" in source else ""
    entry = name or "advdict"
    install(entry, source)
    report = _report(entry)
    assert report.status is PluginStatus.FAILED, report
    assert reason in report.reason, report.reason
    _host_fine()
    numpy.testing.assert_array_equal(opcore.run("relu", X), RELU)  # unpinned calls never reach it


def test_a_slow_probe_is_cut_at_the_time_limit(install, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPCORE_PROBE_TIMEOUT", "0.3")
    install("advslow", _spec("advslow", ", is_available=lambda: time.sleep(5) or True") + _relu_kernels())
    started = time.perf_counter()
    report = _report("advslow")
    assert time.perf_counter() - started < 2.0
    assert report.status is PluginStatus.FAILED and "did not answer within 0.3 s" in report.reason
    _host_fine()


@pytest.mark.parametrize("where", ["is_available", "hook"])
def test_an_interrupt_during_loading_leaves_a_clean_state(install, where: str) -> None:
    flag = "import builtins\nbuiltins._opcore_adv_interrupt = True\n"
    interrupt = (
        "(_ for _ in ()).throw(KeyboardInterrupt) "
        "if getattr(__import__('builtins'), '_opcore_adv_interrupt', False) else True"
    )
    if where == "is_available":
        source = flag + _spec("advint", f", is_available=lambda: {interrupt}") + _relu_kernels()
    else:
        source = (
            flag
            + _spec("advint")
            + _relu_kernels(
                f"{interrupt}\n    registrar.add_kernel('relu', lambda x: numpy.maximum(x, 0), dtypes=['float32'])"
            )
        )
    install("advint", source)
    with pytest.raises(KeyboardInterrupt):
        opcore.backends()
    import builtins

    # the flag the plugin's source set on builtins (by name: builtins has no such attribute to a type checker)
    flag_name = "_opcore_adv_interrupt"
    setattr(builtins, flag_name, False)  # the user pressed Ctrl-C once; the next call loads everything
    try:
        _host_fine()
        assert _report("advint").status is PluginStatus.LOADED
        numpy.testing.assert_array_equal(opcore.run("relu", X, backend="advint"), RELU)
    finally:
        delattr(builtins, flag_name)


def test_an_interrupted_register_plugin_leaves_nothing_behind() -> None:
    import types

    def opcore_backend():
        raise KeyboardInterrupt

    plugin = types.SimpleNamespace(__name__="advinproc", opcore_backend=opcore.hookimpl(opcore_backend))
    with pytest.raises(KeyboardInterrupt):
        opcore.register_plugin(plugin)
    assert "advinproc" not in {r.name for r in opcore.backends()}
    _host_fine()


BAD_REFERENCES = {
    "typo'd module": ("'opcore.reference.elementwis:relu'", "cannot be imported: ModuleNotFoundError"),
    "missing attribute": ("'opcore.reference.elementwise:reluu'", "cannot be imported: AttributeError"),
    "wrong arity": ("'opcore.reference.linear:linear'", "cannot take 1 positional arguments"),
}


@pytest.mark.parametrize("case", BAD_REFERENCES, ids=list(BAD_REFERENCES))
def test_a_bad_string_kernel_is_a_plugin_error_naming_the_backend(install, case: str) -> None:
    reference, message = BAD_REFERENCES[case]
    install("advref", _spec("advref") + _relu_kernels(f"registrar.add_kernel('relu', {reference}, dtypes=['float32'])"))
    assert _report("advref").status is PluginStatus.LOADED  # loading imports nothing: checked at first use
    with pytest.raises(opcore.PluginError, match=rf"kernel advref for relu\(\): fn .*{message}.*OPCORE_DISABLE=advref"):
        opcore.run("relu", X, backend="advref")
    with pytest.warns(opcore.FallbackWarning, match="advref"):
        numpy.testing.assert_array_equal(opcore.run("relu", X), RELU)  # unpinned: the next backend serves


def test_the_deep_doctor_finds_bad_string_kernels(install, tmp_path: Path) -> None:
    install(
        "advref",
        _spec("advref") + _relu_kernels("registrar.add_kernel('relu', 'nosuch_mod_q:relu', dtypes=['float32'])"),
    )
    env = {"PYTHONPATH": f"{tmp_path}{':' + sys.path[0]}", "OPCORE_DISABLE": "cpu,cuda,onnxruntime,openvino,example"}
    quick = run_cli("doctor", "--quick", env=env)
    assert quick.status == 0, quick.out[-2000:]
    deep = run_cli("doctor", "--quick", "--deep", env=env)
    assert deep.status == 1 and "backend 'advref'" in deep.out and "nosuch_mod_q" in deep.out


def test_a_name_claimed_by_two_distributions_serves_neither(install) -> None:
    sevens = "registrar.add_kernel('relu', lambda x: numpy.full_like(x, 7.0), dtypes=['float32'])"
    install("advtwin", _spec("advtwin") + _relu_kernels(sevens), dist="aaa-twin-one")
    install("advtwin", _spec("advtwin") + _relu_kernels(), dist="bbb-twin-two")
    found = {r.name: r for r in opcore.backends()}
    assert found["advtwin"].status is PluginStatus.FAILED and "claimed by 2 distributions" in found["advtwin"].reason
    other = next(r for n, r in found.items() if n.startswith("advtwin ["))
    assert other.status is PluginStatus.FAILED and "aaa-twin-one" in found["advtwin"].reason + other.reason
    with pytest.raises(opcore.PluginError, match="'advtwin'"):
        opcore.run("relu", X, backend="advtwin")
    numpy.testing.assert_array_equal(opcore.run("relu", X), RELU)  # never the impostor's sevens
    with opcore.strict():
        numpy.testing.assert_array_equal(opcore.run("relu", X), RELU)


@pytest.mark.parametrize("name", ["cpu", "reference", "onnxruntime"])
def test_a_reserved_name_is_refused_to_another_distribution(install, name: str) -> None:
    """A vendor's backend calling itself cpu (or reference, ...) is refused, naming both distributions
    and the fix; opcore's own backend of that name goes on serving, and default calls never reach the impostor."""
    sevens = "registrar.add_kernel('relu', lambda x: numpy.full_like(x, 7.0), dtypes=['float32'])"
    install(name, _spec(name) + _relu_kernels(sevens), dist="aaa-fake-vendor")
    found = {r.name: r for r in opcore.backends()}
    impostor = next(r for r in found.values() if r.distribution == "aaa-fake-vendor")
    assert impostor.status is PluginStatus.FAILED
    owner = {"cpu": "opcore-cpu", "reference": "opcore", "onnxruntime": "opcore-onnxruntime"}[name]
    assert f"reserved for opcore's distribution {owner}" in impostor.reason
    assert "aaa-fake-vendor 1.0" in impostor.reason and "OPCORE_DISABLE=aaa-fake-vendor" in impostor.reason
    if name in found and found[name].distribution is not None and found[name].distribution != "aaa-fake-vendor":
        assert found[name].status in (PluginStatus.LOADED, PluginStatus.UNAVAILABLE), found[name]
    numpy.testing.assert_array_equal(opcore.run("relu", X), RELU)  # never the impostor's sevens
    if found.get("reference") is not None and found["reference"].status is PluginStatus.LOADED:
        numpy.testing.assert_array_equal(opcore.run("relu", X, backend="reference"), RELU)


def test_a_copied_example_left_unrenamed_is_named_as_such(install, tmp_path: Path) -> None:
    install("example", _spec("example") + _relu_kernels(), dist="acme-accel")
    found = {r.name: r for r in opcore.backends()}
    copy = next(r for r in found.values() if r.distribution == "acme-accel")
    assert copy.status is PluginStatus.FAILED and "reserved" in copy.reason  # its module is its own: a reserved name
    info = next(tmp_path.glob("acme_accel-*.dist-info"))
    (info / "entry_points.txt").write_text("[opcore.backends]\nexample = opcore_example_vendor.plugin\n")
    importlib.invalidate_caches()
    opcore.reload_plugins()
    found = {r.name: r for r in opcore.backends()}
    copy = next(r for r in found.values() if r.distribution == "acme-accel")
    assert "the example plugin's own, copied and not renamed" in copy.reason, copy.reason
    assert "rename the entry point" in copy.reason


def test_the_user_chooses_by_disabling_a_distribution(install, monkeypatch: pytest.MonkeyPatch) -> None:
    install("cpu", _spec("cpu") + _relu_kernels(), dist="aaa-fake-cpu")
    monkeypatch.setenv("OPCORE_DISABLE", "AAA_fake_cpu")  # case and -/_ as pip ignores them
    opcore.reload_plugins()
    found = {r.name: r for r in opcore.backends()}
    if any(r.distribution == "opcore-cpu" for r in found.values()):
        assert found["cpu"].status in (PluginStatus.LOADED, PluginStatus.UNAVAILABLE)
        assert found["cpu"].distribution == "opcore-cpu"
    assert any(r.status is PluginStatus.DISABLED and r.distribution == "aaa-fake-cpu" for r in found.values())


ENV_CASES = {
    "OPCORE_AUTOLOAD=": ({"OPCORE_AUTOLOAD": ""}, "loads"),
    "OPCORE_STRICT=": ({"OPCORE_STRICT": ""}, "loads"),
    "OPCORE_DISABLE=REFERENCE": ({"OPCORE_DISABLE": "REFERENCE"}, "reference disabled"),
    "OPCORE_DISABLE=cpu;reference": ({"OPCORE_DISABLE": "cpu;reference"}, "reference disabled"),
    "OPCORE_DISABLE=reference openvino": ({"OPCORE_DISABLE": "reference openvino"}, "reference disabled"),
    "OPCORE_AUTOLOAD=maybe": ({"OPCORE_AUTOLOAD": "maybe"}, "error"),
    "OPCORE_CHECK=2": ({"OPCORE_CHECK": "2"}, "error"),
    "OPCORE_PROBE_TIMEOUT=-1": ({"OPCORE_PROBE_TIMEOUT": "-1"}, "error"),
    "OPCORE_PROBE_TIMEOUT=nan": ({"OPCORE_PROBE_TIMEOUT": "nan"}, "error"),
    "OPCORE_PROBE_TIMEOUT=0.5": ({"OPCORE_PROBE_TIMEOUT": "0.5"}, "loads"),
}


@pytest.mark.parametrize("case", ENV_CASES, ids=list(ENV_CASES))
def test_environment_values_mean_what_they_say(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    variables, outcome = ENV_CASES[case]
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    if outcome == "error":
        with pytest.raises(opcore.ArgumentError, match=next(iter(variables))):
            opcore.reload_plugins()
        return
    opcore.reload_plugins()
    status = _report("reference").status
    assert status is (PluginStatus.DISABLED if outcome == "reference disabled" else PluginStatus.LOADED)


DOCTOR_CASES = {
    "defaults": ({}, 0),
    "OPCORE_BACKENDS=nosuch": ({"OPCORE_BACKENDS": "nosuch"}, 1),
    "OPCORE_DISABLE=*": ({"OPCORE_DISABLE": "*"}, 1),
    "OPCORE_AUTOLOAD=0": ({"OPCORE_AUTOLOAD": "0"}, 1),
    "OPCORE_DISABLE=bogus": ({"OPCORE_DISABLE": "bogus"}, 0),
    "OPCORE_STRICT=perhaps": ({"OPCORE_STRICT": "perhaps"}, 1),
}


@pytest.mark.parametrize("case", DOCTOR_CASES, ids=list(DOCTOR_CASES))
def test_the_doctor_exit_status_says_whether_calls_will_fail(case: str) -> None:
    env, status = DOCTOR_CASES[case]
    result = run_cli("doctor", "--quick", env=env)
    assert result.status == status, result.out[-3000:]
    if case == "OPCORE_DISABLE=bogus":
        assert "'bogus', which no installed plugin or distribution provides" in result.out
    if status == 1 and "STRICT" not in case:
        assert "calls will fail" in result.out or "every call fails" in result.out


def test_explain_never_names_a_broken_kernel(install) -> None:
    install(
        "advref",
        _spec("advref")
        + _relu_kernels("registrar.add_kernel('relu', 'opcore.reference.linear:linear', dtypes=['float32'])"),
    )
    told = opcore.explain("relu", X)
    assert told.backend != "advref", str(told)
    row = next(c for c in told.candidates if c.backend == "advref")
    assert row.status.value == "failed" and "cannot take 1 positional arguments" in row.reason


COMPILER_HOOK = """
@opcore.hookimpl
def opcore_partition_compiler():
    raise RuntimeError("no accelerator board")
"""


def test_the_doctor_lists_partition_compilers_and_fails_on_a_broken_one(install, tmp_path: Path) -> None:
    install("advgraph", _spec("advgraph") + _relu_kernels() + COMPILER_HOOK)
    env = {"PYTHONPATH": f"{tmp_path}{':' + sys.path[0]}", "OPCORE_DISABLE": "cpu,cuda,onnxruntime,openvino"}
    result = run_cli("doctor", "--quick", env=env)
    assert result.status == 1, result.out[-2000:]
    assert (
        "partition compiler  does not load: opcore_partition_compiler() raised RuntimeError: no accelerator board"
        in (result.out)
    )
    import json

    document = json.loads(run_cli("doctor", "--quick", "--json", env=env).out)
    rows = {p["name"]: p["partition_compiler"] for p in document["plugins"]}
    assert rows["advgraph"] == {"ops": [], "loads": False, "error": rows["advgraph"]["error"], "computes": {}}
    assert "no accelerator board" in rows["advgraph"]["error"]
    if "example" in rows and rows["example"] is not None:  # the example vendor, where installed
        assert rows["example"]["loads"] and {"silu", "example.swiglu"} <= set(rows["example"]["ops"])
