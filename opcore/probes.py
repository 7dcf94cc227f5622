"""Cheap probes of the machine (the doctor, the tuning fingerprint): each returns a record, never raises.

None of them imports torch, onnxruntime or openvino: versions come from the installed
distributions' metadata, and details (oneDNN, providers, devices) are read only from a
runtime that a backend's ``describe()`` has already imported.

>>> cpu_info().logical_cores >= 1   # doctest: +SKIP
True
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opcore import distmeta

__all__ = [
    "ISA_FLAGS",
    "CpuInfo",
    "GpuProbe",
    "LibraryInfo",
    "cpu_info",
    "distribution_version",
    "gpu_probe",
    "libraries",
]

# The instruction sets that decide which kernels are fast here (oneDNN, OpenVINO and ONNX
# Runtime pick their code paths from these), as /proc/cpuinfo spells them.
ISA_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
)

# Runtime libraries the backends build on, in the order the doctor lists them.
LIBRARIES = ("numpy", "pluggy", "torch", "onnxruntime", "onnx", "openvino")


@dataclass(frozen=True, slots=True)
class CpuInfo:
    """model None: unknown (reason says why). isa None: flags not readable on this system."""

    model: str | None
    machine: str
    logical_cores: int | None
    # Cores this process may run on (the affinity mask; containers often allow fewer).
    usable_cores: int | None
    isa: tuple[tuple[str, bool], ...] | None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class GpuProbe:
    """visible: an NVIDIA GPU was seen. evidence: how it was (or was not) found."""

    visible: bool
    devices: tuple[str, ...]
    evidence: str


@dataclass(frozen=True, slots=True)
class LibraryInfo:
    """version None: not installed (reason says so). details: extras read from an already
    imported module (oneDNN version, providers, devices); empty when it was not imported.
    """

    name: str
    version: str | None
    details: tuple[tuple[str, str], ...] = ()
    reason: str = ""


def cpu_info() -> CpuInfo:
    machine = platform.machine() or "unknown"
    logical = os.cpu_count()
    try:
        usable: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = logical
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            text = handle.read(256 * 1024)
    except OSError as error:
        model = platform.processor() or None
        reason = f"/proc/cpuinfo not readable ({type(error).__name__}); ISA flags unknown"
        return CpuInfo(model, machine, logical, usable, None, reason)
    model_match = re.search(r"^(?:model name|Model|cpu model)\s*:\s*(.+)$", text, re.MULTILINE)
    flags_match = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", text, re.MULTILINE)
    model = model_match.group(1).strip() if model_match else (platform.processor() or None)
    if flags_match is None:
        return CpuInfo(model, machine, logical, usable, None, "no flags line in /proc/cpuinfo")
    flags = set(flags_match.group(1).split())
    return CpuInfo(model, machine, logical, usable, tuple((f, f in flags) for f in ISA_FLAGS))


def gpu_probe(which: Callable[[str], str | None] = shutil.which, timeout_s: float = 1.5) -> GpuProbe:
    """Looks for an NVIDIA GPU without any CUDA library: the driver's /proc entries, the device
    node, then ``nvidia-smi -L`` (bounded by ``timeout_s``).
    """
    gpus = "/proc/driver/nvidia/gpus"
    try:
        entries = sorted(os.listdir(gpus))
    except OSError:
        entries = []
    if entries:
        return GpuProbe(True, tuple(_proc_gpu(gpus, e) for e in entries), f"{len(entries)} under {gpus}")
    tool = which("nvidia-smi")
    if tool is not None:
        try:
            done = subprocess.run([tool, "-L"], capture_output=True, text=True, timeout=timeout_s, check=False)
        except (OSError, subprocess.SubprocessError) as error:
            listed: list[str] = []
            smi = f"nvidia-smi -L failed ({type(error).__name__})"
        else:
            listed = [line.strip() for line in done.stdout.splitlines() if line.startswith("GPU ")]
            smi = f"nvidia-smi -L listed {len(listed)}" if done.returncode == 0 else "nvidia-smi -L failed"
        if listed:
            return GpuProbe(True, tuple(listed), smi)
    else:
        smi = "nvidia-smi not on PATH"
    if os.path.exists("/dev/nvidia0"):
        return GpuProbe(True, ("/dev/nvidia0",), f"/dev/nvidia0 exists ({smi})")
    return GpuProbe(False, (), f"none found: no {gpus}, no /dev/nvidia0, {smi}")


def _proc_gpu(root: str, entry: str) -> str:
    """A GPU's model and address from the driver's information file ("NVIDIA H100 80GB HBM3 (PCI
    0000:1b:00.0)"); the address alone when that file has no model line.
    """
    try:
        with open(os.path.join(root, entry, "information"), encoding="utf-8", errors="replace") as handle:
            found = re.search(r"^Model:\s*(.+)$", handle.read(4096), re.MULTILINE)
    except OSError:
        found = None
    return f"{found.group(1).strip()} (PCI {entry})" if found else f"PCI {entry}"


def distribution_version(name: str) -> str | None:
    """The installed distribution's version from its metadata (no import); None when absent or unreadable."""
    return distmeta.version(name)


def _torch_details(module: Any) -> list[tuple[str, str]]:
    details = []
    config = module.__config__.show()
    found = re.search(r"(?:oneDNN|MKL-DNN)\s+v([\w.]+)", config)
    if found:
        details.append(("oneDNN", found.group(1)))
    capability = re.search(r"CPU capability usage:\s*(\S+)", config)
    if capability:
        details.append(("CPU capability", capability.group(1)))
    cuda = getattr(module.version, "cuda", None)
    details.append(("CUDA build", cuda or "no (CPU-only build)"))
    return details


def _onnxruntime_details(module: Any) -> list[tuple[str, str]]:
    return [("providers", ", ".join(module.get_available_providers()))]


_DETAILS: dict[str, Callable[[Any], list[tuple[str, str]]]] = {
    "torch": _torch_details,
    "onnxruntime": _onnxruntime_details,
    # openvino: its devices need a Core (0.1-0.4 s); the openvino backend's describe() lists them
}


def libraries(names: tuple[str, ...] = LIBRARIES) -> tuple[LibraryInfo, ...]:
    found = []
    for name in names:
        version = distribution_version(name)
        if version is None:
            found.append(LibraryInfo(name, None, (), "not installed"))
            continue
        module = sys.modules.get(name)
        details: list[tuple[str, str]] = []
        probe = _DETAILS.get(name)
        if module is not None and probe is not None:
            try:
                details = probe(module)
            except Exception as error:
                details = [("details", f"unreadable: {type(error).__name__}: {error}")]
        found.append(LibraryInfo(name, version, tuple(details)))
    return tuple(found)
