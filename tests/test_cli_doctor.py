"""``opcore doctor``: the record, its text and JSON forms, hints, and the exit status."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest
from cli_support import FAILING, Result, environment, run_cli

import opcore
from opcore import probes
from opcore.backend import BackendSpec
from opcore.cli import doctor
from opcore.reports import PluginReport, PluginStatus
from opcore.types import DeviceType

# A broken plugin installed (several), a disabled one and a missing one named in OPCORE_BACKENDS.
SCENARIO = {"OPCORE_DISABLE": "fixture_unavailable", "OPCORE_BACKENDS": "nonexistent,reference"}

TOP_LEVEL_KEYS = {
    "schema", "opcore", "python", "platform", "cpu", "gpu", "plugins", "libraries", "settings",
    "settings_error", "environment", "hints", "summary", "collect_time_s", "tuning", "loading",
}  # fmt: skip
PLUGIN_KEYS = {
    "name", "status", "reason", "traceback", "distribution", "distribution_version", "entry_point",
    "backend", "kernel_count", "contract_count", "load_time_s", "describe", "describe_error", "describe_time_s",
    "partition_compiler",
}  # fmt: skip


@pytest.fixture(scope="module")
def text() -> Result:
    return run_cli("doctor", fixtures=True, env=SCENARIO)


@pytest.fixture(scope="module")
def data() -> dict:
    result = run_cli("doctor", "--json", fixtures=True, env=SCENARIO)
    assert result.status == 1, result.err
    assert result.err == ""
    return result.json()


def _plugin(data: dict, name: str) -> dict:
    found = [p for p in data["plugins"] if p["name"] == name]
    assert len(found) == 1, [p["name"] for p in data["plugins"]]
    return found[0]


# -- text ------------------------------------------------------------------------------------------


def test_both_forms_say_how_run_serves_a_cached_torch_call(text: Result, data: dict) -> None:
    """opcore.run's fast path (issue 15): compiled, or pure Python with the reason; as this process has it."""
    from opcore import dispatch

    fast_path = data["opcore"]["fast_path"]
    if dispatch.PURE_PYTHON_REASON is None:  # the doctor's process imports the same build
        assert fast_path == "compiled (opcore._fastrun)"
    else:
        assert fast_path.startswith("pure Python: ")
    assert any(line.split()[:1] == ["run"] and fast_path in line for line in text.out.splitlines()), text.out


def test_both_forms_say_which_compiled_parts_are_built(text: Result, data: dict) -> None:
    """opcore._fastrun and opcore._torchguard: "built" where their files are installed (found, not
    loaded: no libtorch without --deep), else what building them takes."""
    import importlib.util

    parts = data["opcore"]["compiled_parts"]
    assert list(parts) == ["opcore._fastrun", "opcore._torchguard"]
    for name, state in parts.items():
        assert (state == "built") == (importlib.util.find_spec(name) is not None), (name, state)
    row = next(line for line in text.out.splitlines() if line.split()[:1] == ["built"])
    assert all(name in row for name in parts), row


def test_a_core_without_its_compiled_parts_says_how_to_build_them(tmp_path: Path) -> None:
    """A copy of the core without its extensions (what pip installs without a compiler): the doctor
    says neither is built and what each takes, and opcore.run is pure Python. The copy is imported
    as an installed package: the editable install's finder, which would find this checkout's builds
    for any opcore on the path, is taken out of the child first."""
    shutil.copytree(
        Path(opcore.__file__).parent, tmp_path / "opcore", ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__")
    )
    script = (
        "import runpy, sys; sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in repr(f)]; "
        "runpy.run_module('opcore.cli', run_name='__main__', alter_sys=True)"
    )

    def doctor(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", script, "doctor", *args],
            capture_output=True,
            text=True,
            env=environment(PYTHONPATH=str(tmp_path)),
            cwd=tmp_path,
            timeout=120,
            check=False,
        )
        assert done.returncode in (0, 1), done.stderr
        return done.stdout

    data = json.loads(doctor("--json"))
    assert data["opcore"]["path"] == str(tmp_path / "opcore")
    parts = data["opcore"]["compiled_parts"]
    assert parts["opcore._fastrun"].startswith("not built: a C compiler"), parts
    assert parts["opcore._torchguard"].startswith("not built: optional"), parts
    assert "--no-build-isolation" in parts["opcore._torchguard"]
    assert data["opcore"]["fast_path"].startswith("pure Python: opcore._fastrun was not built"), data["opcore"]
    row = next(line for line in doctor().splitlines() if line.split()[:1] == ["built"])
    assert "opcore._fastrun not built" in row and "opcore._torchguard not built: optional" in row, row


def test_both_forms_say_which_tensor_guard_serves(text: Result, data: dict) -> None:
    """opcore's compiled guard where it was built for this torch, else torch's TensorGuards and why;
    only with --deep (the doctor loads no torch otherwise)."""
    assert data["opcore"]["tensor_guard"] == "not checked: torch is not loaded (opcore doctor --deep checks it)"
    pytest.importorskip("torch")
    from opcore import _guards

    deep = run_cli("doctor", "--deep", fixtures=True, env=SCENARIO)
    deep_data = json.loads(run_cli("doctor", "--deep", "--json", fixtures=True, env=SCENARIO).out)
    guard = deep_data["opcore"]["tensor_guard"]
    assert guard == _guards.guard_in_use()  # the doctor's process imports the same build
    if guard.startswith("opcore._torchguard"):
        import torch

        assert guard == f"opcore._torchguard (compiled for torch {torch.__version__})"
    else:
        assert guard.startswith(("torch's TensorGuards (", "none: the Python key alone (")) and guard.endswith(")")
    assert any(line.split()[:1] == ["guard"] and guard in line for line in deep.out.splitlines()), deep.out
    assert any(line.split()[:1] == ["guard"] for line in text.out.splitlines()), text.out


def test_text_lists_every_plugin_with_its_status(text: Result) -> None:
    assert text.status == 1
    lines = text.out.splitlines()
    assert "  fixture_good  loaded" in lines
    assert "  reference  loaded" in lines
    assert "  fixture_unavailable  disabled: by OPCORE_DISABLE" in lines
    for name, reason in FAILING.items():
        line = next(line for line in lines if line.startswith(f"  {name}  "))
        assert line.startswith(f"  {name}  failed: ") and reason in line, line


def test_text_shows_distribution_entry_point_and_backend_facts(text: Result) -> None:
    out = text.out
    assert "distribution  opcore-fixture-importerror 0.3" in out
    assert "entry point   opcore_fixture_importerror.plugin" in out
    assert "backend       version 1.0 · api 1 · devices cpu · priority 50" in out  # fixture_good
    assert "kernels       5 · 1 op contract added · loaded in" in out
    assert "widget        v2" in out  # fixture_good's describe()
    assert "api 999" in out  # fixture_badapi's announced API version
    assert "set OPCORE_DISABLE=fixture_importerror to skip it" in out


def test_text_flags_the_missing_backend_and_ends_with_the_verdict(text: Result) -> None:
    assert "OPCORE_BACKENDS names 'nonexistent', which is not installed" in text.out
    assert "OPCORE_BACKENDS=nonexistent,reference" in text.out
    verdict = text.out.rstrip().splitlines()[-1]
    assert verdict.startswith("problem: ") and "plugins failed to load" in verdict and "exit status 1" in verdict
    assert text.out.splitlines()[0].startswith("opcore doctor: for people")


def test_text_is_plain_when_piped_and_quiet_on_stderr(text: Result) -> None:
    assert "\x1b[" not in text.out
    assert text.err == ""  # the load report replaces the loader's log lines
    assert "Traceback" not in text.out
    assert "opcore doctor --verbose" in text.out


def test_verbose_shows_the_tracebacks() -> None:
    result = run_cli("doctor", "--verbose", "--quick", fixtures=True, env=SCENARIO)
    assert result.status == 1
    assert "traceback:" in result.out
    assert "ImportError: libwidget.so.3" in result.out.split("traceback:", 1)[1]
    assert 'File "' in result.out


def test_color_always_paints_the_statuses() -> None:
    result = run_cli("doctor", "--color", "always", "--quick", fixtures=True, env=SCENARIO)
    assert "\x1b[32mloaded\x1b[0m" in result.out
    assert "\x1b[31;1mfailed: import failed" in result.out


# -- JSON ------------------------------------------------------------------------------------------


def test_json_has_the_documented_keys(data: dict) -> None:
    assert data["schema"] == doctor.SCHEMA_VERSION == 1
    assert set(data) == TOP_LEVEL_KEYS
    for plugin in data["plugins"]:
        assert set(plugin) == PLUGIN_KEYS
    assert set(data["summary"]) == {"plugins", "loaded", "unavailable", "failed", "disabled", "exit_status"}
    assert set(data["settings"]) == {"backends", "disable", "strict", "autoload", "tune"}
    doc = (Path(__file__).resolve().parent.parent / "docs" / "cli.md").read_text(encoding="utf-8")
    for key in TOP_LEVEL_KEYS | PLUGIN_KEYS:
        assert f'"{key}"' in doc, f"docs/cli.md does not document {key!r}"


def test_json_plugins(data: dict) -> None:
    good = _plugin(data, "fixture_good")
    assert good["status"] == "loaded"
    assert good["distribution"] == "opcore-fixture-good" and good["distribution_version"] == "1.0"
    assert good["entry_point"] == "opcore_fixture_good.plugin"
    assert good["backend"]["priority"] == 50 and good["backend"]["device_types"] == ["cpu"]
    assert good["backend"]["api_version"] == 1
    assert good["kernel_count"] == 5 and good["contract_count"] == 1
    assert good["describe"] == {"widget": "v2"}
    assert good["load_time_s"] > 0 and good["describe_time_s"] >= 0

    broken = _plugin(data, "fixture_importerror")
    assert broken["status"] == "failed"
    assert broken["reason"].startswith("import failed: ImportError: libwidget.so.3")
    assert "libwidget.so.3" in broken["traceback"]
    assert broken["backend"] is None and broken["describe"] is None

    for name, reason in FAILING.items():
        assert reason in _plugin(data, name)["reason"]
    assert _plugin(data, "fixture_badapi")["backend"]["api_version"] == 999

    disabled = _plugin(data, "fixture_unavailable")
    assert disabled["status"] == "disabled" and disabled["reason"] == "by OPCORE_DISABLE"
    assert disabled["distribution"] == "opcore-fixture-unavailable"

    statuses = [p["status"] for p in data["plugins"]]
    assert statuses == sorted(statuses, key=["loaded", "unavailable", "failed", "disabled"].index)


def test_json_settings_environment_hints_summary(data: dict) -> None:
    assert data["settings"]["backends"] == {"value": ["nonexistent", "reference"], "source": "OPCORE_BACKENDS"}
    assert data["settings"]["disable"] == {"value": ["fixture_unavailable"], "source": "OPCORE_DISABLE"}
    assert data["settings"]["strict"] == {"value": False, "source": "default"}
    assert data["settings_error"] is None
    assert data["environment"] == SCENARIO
    assert any("'nonexistent', which is not installed" in h["message"] for h in data["hints"])
    summary = data["summary"]
    assert summary["failed"] == len([p for p in data["plugins"] if p["status"] == "failed"]) >= len(FAILING)
    assert summary["disabled"] == 1 and summary["exit_status"] == 1
    assert summary["plugins"] == len(data["plugins"])
    assert {lib["name"] for lib in data["libraries"]} >= {"numpy", "pluggy", "torch", "onnxruntime", "openvino"}
    assert data["cpu"]["logical_cores"] >= 1


def test_unavailable_plugin_shows_its_reason() -> None:
    result = run_cli("doctor", "--json", "--quick", fixtures=True)
    plugin = _plugin(result.json(), "fixture_unavailable")
    assert plugin["status"] == "unavailable"
    assert plugin["reason"] == "no widget attached (looked in /dev/widget*)"
    assert plugin["backend"]["priority"] == 500


def test_exit_status_zero_when_nothing_failed() -> None:
    result = run_cli(
        "doctor",
        "--quick",
        fixtures=True,
        OPCORE_DISABLE="fixture_importerror,fixture_badapi,"
        "fixture_hookraises,fixture_unknownop,fixture_misnamed,fixture_twin,opcore-fixture-zz-duplicate",
    )
    assert result.status == 0, result.out
    assert "disabled: by OPCORE_DISABLE" in result.out
    assert result.out.rstrip().splitlines()[-1].startswith("no problems found")


def test_exit_status_one_when_every_call_would_fail() -> None:
    result = run_cli("doctor", "--quick", fixtures=True, OPCORE_AUTOLOAD="0")
    assert result.status == 1, result.out
    assert "disabled: by OPCORE_AUTOLOAD=0" in result.out
    assert "no backend is loaded (every plugin is disabled): every call fails" in result.out
    assert result.out.rstrip().splitlines()[-1].startswith("problem: calls will fail")


def test_invalid_setting_is_reported_not_raised() -> None:
    result = run_cli("doctor", "--json", OPCORE_STRICT="banana")
    assert result.status == 1
    data = result.json()
    assert "OPCORE_STRICT" in data["settings_error"] and "banana" in data["settings_error"]
    assert data["plugins"] == [] and data["settings"] == {}
    text = run_cli("doctor", OPCORE_STRICT="banana")
    assert text.status == 1 and "invalid: " in text.out and "Traceback" not in text.out + text.err


def test_typo_in_a_variable_is_hinted() -> None:
    result = run_cli("doctor", "--json", "--quick", OPCORE_STRIKT="1")
    hints = [h for h in result.json()["hints"] if "OPCORE_STRIKT" in h["message"]]
    assert hints and hints[0]["fix"] == "did you mean OPCORE_STRICT?"


def test_gpu_without_cuda_backend_is_hinted(tmp_path: Path) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    result = run_cli("doctor", "--json", "--quick", PATH=f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    data = result.json()
    assert data["gpu"]["visible"] is True
    cuda_loaded = any(
        p["status"] == "loaded" and "cuda" in (p["backend"] or {}).get("device_types", []) for p in data["plugins"]
    )
    if cuda_loaded:
        pytest.skip("a CUDA backend is loaded here, so there is nothing to hint")
    assert any(h["message"].startswith("a GPU is visible") for h in data["hints"])


def test_on_this_machine_the_installed_backends_load_in_under_two_seconds() -> None:
    started = time.perf_counter()
    result = run_cli("doctor", "--json")
    wall = time.perf_counter() - started
    data = result.json()
    assert result.status == data["summary"]["exit_status"]
    by_name = {p["name"]: p for p in data["plugins"]}
    assert by_name["reference"]["status"] == "loaded"
    # each installed backend loads where its own availability check (cheap: no runtime import) says
    # its runtime is here, and is unavailable with that check's reason where not
    for name, dist, module in (
        ("cpu", "opcore-cpu", "opcore_cpu.system"),
        ("onnxruntime", "opcore-onnxruntime", "opcore_onnxruntime.plugin"),
        ("openvino", "opcore-openvino", "opcore_openvino.plugin"),
    ):
        if _installed(dist):
            available = importlib.import_module(module).is_available()
            expected = ("loaded", "") if available is True else ("unavailable", available)
            assert (by_name[name]["status"], by_name[name]["reason"] or "") == expected, by_name[name]
    if _installed("opcore-cuda") and not data["gpu"]["visible"]:
        assert by_name["cuda"]["status"] == "unavailable" and by_name["cuda"]["reason"]
    quick = run_cli("doctor", "--json", "--quick").json()
    # the doctor's own work; describe() may import torch (~1 s), which a busy machine can stretch
    assert quick["collect_time_s"] < 2.0, quick["collect_time_s"]
    assert data["collect_time_s"] < wall


def _installed(distribution: str) -> bool:
    try:
        metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


# -- the record, in process --------------------------------------------------------------------------


def _report(describe) -> PluginReport:
    spec = BackendSpec(name="probe", version="1", priority=1, device_types=(DeviceType.CPU,), describe=describe)
    return PluginReport("probe", PluginStatus.LOADED, backend=spec, kernel_count=1)


def test_describe_that_raises_is_recorded() -> None:
    def broken() -> dict:
        raise RuntimeError("no runtime")

    info = doctor._describe(_report(broken), timeout_s=5)
    assert info.describe is None and info.describe_error == "describe() raised RuntimeError: no runtime"


def test_describe_that_hangs_is_abandoned() -> None:
    def hang() -> dict[str, str]:
        time.sleep(2)
        return {}

    info = doctor._describe(_report(hang), timeout_s=0.05)
    assert info.describe_error == "describe() did not answer within 0.05 s"
    assert info.describe_time_s is not None and info.describe_time_s < 1


def test_describe_that_returns_no_mapping_is_recorded() -> None:
    info = doctor._describe(_report(lambda: ["x"]), timeout_s=5)
    assert info.describe_error == "describe() returned list, not a mapping"


def test_describe_values_become_strings() -> None:
    info = doctor._describe(_report(lambda: {"threads": 2, "devices": "CPU"}), timeout_s=5)
    assert info.describe == (("threads", "2"), ("devices", "CPU"))


def test_failed_plugins_are_not_described() -> None:
    spec = BackendSpec(name="x", version="1", priority=1, device_types=(DeviceType.CPU,), describe=lambda: {"a": "b"})
    info = doctor._describe(PluginReport("x", PluginStatus.FAILED, "boom", backend=spec), timeout_s=5)
    assert info.describe is None and info.describe_error == ""


def test_gpu_probe_reads_nvidia_smi(tmp_path: Path) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-1)'\necho 'GPU 1: NVIDIA H200 (UUID: GPU-2)'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    found = probes.gpu_probe(which=lambda name: str(fake))
    assert found.visible
    if not os.path.isdir("/proc/driver/nvidia/gpus"):
        assert found.devices == ("GPU 0: NVIDIA H200 (UUID: GPU-1)", "GPU 1: NVIDIA H200 (UUID: GPU-2)")
        assert found.evidence == "nvidia-smi -L listed 2"


def test_gpu_probe_survives_a_hanging_tool(tmp_path: Path) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nsleep 5\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    started = time.perf_counter()
    found = probes.gpu_probe(which=lambda name: str(fake), timeout_s=0.2)
    assert time.perf_counter() - started < 3
    if not found.visible:
        assert "nvidia-smi -L failed (TimeoutExpired)" in found.evidence


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="reads /proc/cpuinfo (Linux)")
def test_cpu_info_reads_the_isa_flags() -> None:
    info = probes.cpu_info()
    assert info.isa is not None
    assert [name for name, _ in info.isa] == list(probes.ISA_FLAGS)
    flags = Path("/proc/cpuinfo").read_text().split("flags", 1)[-1].splitlines()[0].split()
    assert dict(info.isa)["avx2"] == ("avx2" in flags)


def test_deep_reports_live_torch_values() -> None:
    result = run_cli("doctor", "--deep")
    assert "ATen CPU capability" in result.out
    quick = run_cli("doctor")
    assert "oneDNN" in quick.out and "opcore doctor --deep" in quick.out


def test_a_partition_compiler_says_what_it_computes_int64_and_bfloat16_in() -> None:
    """OpenVINO's compiler computes int64 in int32 and bfloat16 in float32 (int64_as, bfloat16_as):
    both forms say so; a compiler with neither says nothing (ONNX Runtime's)."""
    pytest.importorskip("openvino", reason="opcore-openvino's partition compiler needs openvino")
    data = run_cli("doctor", "--json").json()
    found = _plugin(data, "openvino")["partition_compiler"]
    assert found["loads"] and found["computes"] == {"int64": "int32", "bfloat16": "float32"}
    if any(p["name"] == "onnxruntime" and p["partition_compiler"] for p in data["plugins"]):
        assert _plugin(data, "onnxruntime")["partition_compiler"]["computes"] == {}
    lines = [line for line in run_cli("doctor").out.splitlines() if "partition compiler" in line]
    assert any(line.endswith("computes int64 in int32, bfloat16 in float32") for line in lines), lines
