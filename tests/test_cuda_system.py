"""opcore_cuda.system: availability decided from facts read without torch, and the doctor's lines.

``availability(facts)`` is a pure function, so every reason is tested with the facts of the
machine it describes; ``gather_facts()`` and ``is_available()`` are tested on this machine, and in
subprocesses with CUDA_VISIBLE_DEVICES set the ways users set it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from opcore_cuda.system import Facts, availability

from opcore_cuda import system

ROOT = Path(__file__).resolve().parent.parent

# a Linux machine with a CUDA 12.8 build of torch, one GPU and a recent driver
GPU_MACHINE = Facts(
    torch_version="2.13.0+cu128",
    torch_cuda="12.8",
    visible_devices=None,
    platform="linux",
    device_evidence=("/proc/driver/nvidia/gpus/0000:01:00.0", "/dev/nvidia0"),
    driver_version="570.124.06",
)


def test_a_gpu_machine_is_available():
    assert availability(GPU_MACHINE) is True
    assert availability(replace(GPU_MACHINE, visible_devices="0,1")) is True
    assert availability(replace(GPU_MACHINE, visible_devices="GPU-8a1c2e3f")) is True
    assert availability(replace(GPU_MACHINE, device_evidence=None)) is True  # a platform without a cheap probe


def test_torch_missing_or_too_old():
    assert availability(replace(GPU_MACHINE, torch_installed=False, torch_version=None)) == (
        "torch is not installed; install a CUDA build: https://pytorch.org/get-started/locally/"
    )
    assert "no distribution metadata" in availability(replace(GPU_MACHINE, torch_version=None))
    assert availability(replace(GPU_MACHINE, torch_version="2.3.1+cu121")) == (
        "torch 2.3.1+cu121 is too old: opcore-cuda needs torch >= 2.4"
    )


def test_no_cuda_build_of_torch():
    cpu_build = replace(GPU_MACHINE, torch_version="2.13.0+cpu", torch_cuda=None)
    assert availability(cpu_build) == (
        "no CUDA build of torch (torch 2.13.0+cpu); install a CUDA build: https://pytorch.org/get-started/locally/"
    )
    rocm = replace(GPU_MACHINE, torch_version="2.13.0+rocm6.4", torch_cuda=None, torch_hip="6.4")
    assert availability(rocm) == "a ROCm build of torch (torch 2.13.0+rocm6.4): opcore-cuda targets NVIDIA CUDA builds"


@pytest.mark.parametrize("value", ["", " ", "-1", "-1,0", "none", "NoDevFiles"])
def test_no_device_visible(value):
    assert (
        availability(replace(GPU_MACHINE, visible_devices=value))
        == f"no device visible (CUDA_VISIBLE_DEVICES={value!r})"
    )


def test_no_driver_or_device():
    assert availability(replace(GPU_MACHINE, device_evidence=())) == (
        "no NVIDIA driver or device visible (no /proc/driver/nvidia/gpus/*, no /dev/nvidia*)"
    )
    windows = replace(GPU_MACHINE, platform="win32", device_evidence=())
    assert availability(windows) == "no NVIDIA driver found (no nvcuda.dll in System32)"


def test_driver_too_old_for_torchs_cuda():
    old = replace(GPU_MACHINE, driver_version="470.82.01")
    assert availability(old) == (
        "NVIDIA driver 470.82.01 is too old for torch's CUDA 12.8 (CUDA 12.x needs driver >= 525.60); "
        "update the driver, or install a torch build for an older CUDA: https://pytorch.org/get-started/locally/"
    )
    assert availability(replace(old, driver_version="525.60.13")) is True
    assert "CUDA 13.x needs driver >= 580.00" in availability(replace(GPU_MACHINE, torch_cuda="13.0"))
    assert availability(replace(old, torch_cuda="11.8")) is True
    assert availability(replace(old, forward_compat=True)) is True  # NVIDIA's forward-compatibility package
    assert availability(replace(old, torch_cuda="unknown")) is True  # torch/version.py unreadable: no judgement


def test_the_first_problem_is_the_one_reported():
    everything_wrong = replace(
        GPU_MACHINE, torch_version="2.13.0+cpu", torch_cuda=None, visible_devices="", device_evidence=()
    )
    assert availability(everything_wrong).startswith("no CUDA build of torch")


def test_facts_of_this_machine_are_read_without_torch():
    code = (
        "import sys, json\n"
        "from opcore_cuda import system\n"
        "facts = system.gather_facts()\n"
        "assert 'torch' not in sys.modules, 'gathering facts imported torch'\n"
        "print(json.dumps({'version': facts.torch_version, 'cuda': facts.torch_cuda}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    torch = pytest.importorskip("torch")
    assert facts == {"version": importlib.metadata.version("torch"), "cuda": torch.version.cuda}


def test_is_available_here_says_why_not():
    torch = pytest.importorskip("torch")
    if torch.version.cuda is not None:
        pytest.skip(f"this torch is a CUDA build ({torch.version.cuda})")
    assert system.is_available() == (
        f"no CUDA build of torch (torch {torch.__version__}); install a CUDA build: https://pytorch.org/get-started/locally/"
    )


def test_driver_version_is_read_from_the_drivers_version_file(tmp_path):
    version_file = tmp_path / "version"
    version_file.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.14  Release Build  (dvs-builder@U16)\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    assert system.driver_version(version_file) == "550.54.14"
    assert system.driver_version(tmp_path / "missing") is None
    if not os.path.exists("/proc/driver/nvidia/version"):
        assert system.gather_facts().driver_version is None


@pytest.mark.parametrize("value", ["", "-1"])
def test_cuda_visible_devices_hiding_every_gpu_crashes_nothing(value):
    code = (
        "import numpy, opcore\n"
        "reports = {r.name: r for r in opcore.backends()}\n"
        "print(reports['cuda'].status_text)\n"
        "y = opcore.run('relu', numpy.array([-1.0, 2.0], dtype='float32'))\n"
        "assert y.tolist() == [0.0, 2.0]\n"
    )
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": value}
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("unavailable: "), done.stdout
    doctor = subprocess.run(
        [sys.executable, "-m", "opcore.cli", "doctor", "--json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert doctor.returncode in (0, 1), doctor.stderr  # 1: the doctor flags problems; never a crash
    plugins = {p["name"]: p for p in json.loads(doctor.stdout)["plugins"]}
    assert plugins["cuda"]["status"] == "unavailable"
    assert plugins["cuda"]["describe"]["CUDA_VISIBLE_DEVICES"] == repr(value)


def test_describe_for_the_doctor_here():
    torch = pytest.importorskip("torch")
    lines = system.describe()
    assert lines["torch"] == importlib.metadata.version("torch")
    assert lines["torch CUDA"] == (
        torch.version.cuda or "none (a build without CUDA: https://pytorch.org/get-started/locally/)"
    )
    for name in ("cuDNN", "NVIDIA driver", "CUDA_VISIBLE_DEVICES", "TF32 matmul", "TF32 cuDNN conv", "SDPA backends"):
        assert lines[name] and not lines[name].startswith("unknown"), (name, lines[name])
    if not torch.cuda.is_available():
        assert lines["devices"].startswith("none (")
    assert lines["TF32 matmul"].startswith("off" if not torch.backends.cuda.matmul.allow_tf32 else "on")
    assert "mem-efficient" in lines["SDPA backends"] and "math" in lines["SDPA backends"]


def test_describe_reports_tf32_settings_as_they_are():
    torch = pytest.importorskip("torch")
    before = torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = False
        assert system.describe()["TF32 cuDNN conv"] == "off (torch.backends.cudnn.allow_tf32=False)"
        torch.backends.cudnn.allow_tf32 = True
        assert "float32 conv2d runs in TF32" in system.describe()["TF32 cuDNN conv"]
    finally:
        torch.backends.cudnn.allow_tf32 = before


def test_describe_never_raises(monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr(system, "_devices", lambda: 1 / 0)
    monkeypatch.setattr(system, "_sdpa", lambda: 1 / 0)
    lines = system.describe()
    assert lines["devices"].startswith("unknown (ZeroDivisionError")
    assert lines["SDPA backends"].startswith("unknown (ZeroDivisionError")


@pytest.mark.parametrize(
    ("content", "version", "expected"),
    [
        (
            "__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\nhip: Optional[str] = None\n",
            "2.13.0+cpu",
            (None, None),
        ),
        ("cuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n", "2.13.0", ("12.8", None)),
        ("cuda = None\nhip = '6.4.43482'\n", "2.13.0+rocm6.4", (None, "6.4.43482")),
        ("cuda = some_call()\n", "2.13.0", ("unknown", None)),
        (None, "2.13.0+cpu", (None, None)),  # no version.py: the local tag decides
        (None, "2.13.0+rocm6.4", (None, "6.4")),
        (None, "2.13.0", ("unknown", None)),
    ],
)
def test_torch_build_is_read_from_torchs_version_file(tmp_path, content, version, expected):
    if content is not None:
        (tmp_path / "version.py").write_text(content)
    assert system.torch_build([str(tmp_path)], version) == expected


def test_describe_without_torch_imports_nothing() -> None:
    code = "import sys; from opcore_cuda import system; lines = system.describe(); print('torch' in sys.modules, lines)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("False ") and "opcore doctor --deep" in out
