"""Is CUDA usable here, and why not: decided without importing torch; and the doctor's lines.

``is_available()`` runs at load time, so it only reads files and the environment (well under a
millisecond): torch's distribution metadata, torch's own ``torch/version.py`` (whose ``cuda`` is
None in a CPU build), ``CUDA_VISIBLE_DEVICES``, the NVIDIA driver's ``/proc`` and ``/dev`` entries
and its version. ``gather_facts()`` collects them and ``availability(facts)`` decides, so every
branch can be tested with made-up facts. What this cannot see (a GPU the driver refuses, a context
that fails to initialise) surfaces when a kernel first moves data there: torch's reason comes back
as ``opcore.Unsupported`` (see ``opcore.torchkit.arrays.to_device``).

``describe()`` runs only for the doctor: it imports torch and asks it about the devices, but never
raises (a probe that fails says so in its value).

>>> availability(Facts(torch_version="2.13.0+cpu", torch_cuda=None))[:48]
'no CUDA build of torch (torch 2.13.0+cpu); insta'
"""

from __future__ import annotations

import ast
import glob
import importlib.util
import os
import re
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

from opcore.extend import TORCHKIT_API_VERSION, distribution_version, record, version_mismatch

__all__ = [
    "MIN_DRIVER",
    "MIN_TORCH",
    "TORCH_INSTALL_URL",
    "Facts",
    "availability",
    "describe",
    "driver_version",
    "gather_facts",
    "is_available",
    "torch_build",
]

TORCH_INSTALL_URL = "https://pytorch.org/get-started/locally/"
MIN_TORCH = (2, 4)
TORCHKIT_BUILT_FOR = 1  # the opcore.torchkit surface (TORCHKIT_API_VERSION) these kernels are written against
# NVIDIA's minimum driver per CUDA major release (CUDA minor version compatibility; "CUDA
# Compatibility" guide, table 1): a torch built for CUDA 12.x runs on any driver >= 525.
MIN_DRIVER: Mapping[int, tuple[int, int]] = {11: (450, 80), 12: (525, 60), 13: (580, 0)}
# where NVIDIA's forward-compatibility package puts its libcuda (NGC containers): with it, a newer
# CUDA runs on an older data-center driver, so the driver's version is not held against it
_FORWARD_COMPAT = "/usr/local/cuda/compat"
_UNKNOWN = "unknown"  # torch_cuda when torch/version.py cannot be read


@record
class Facts:
    """What availability is decided from (all read without importing torch).

    torch_version None: torch is not installed (or has no metadata, see torch_installed).
    torch_cuda: ``torch.version.cuda`` as written in torch/version.py; None: a build without CUDA;
    "unknown": the file could not be read. torch_hip: the same for ROCm builds.
    visible_devices None: CUDA_VISIBLE_DEVICES is not set.
    device_evidence: the driver entries and device nodes found (empty: none); None: not looked for
    (a platform where opcore has no cheap probe).
    driver_version None: not known (no /proc/driver/nvidia/version).
    """

    torch_version: str | None
    torch_cuda: str | None
    torch_installed: bool = True
    torch_hip: str | None = None
    visible_devices: str | None = None
    platform: str = "linux"
    device_evidence: tuple[str, ...] | None = None
    driver_version: str | None = None
    forward_compat: bool = False


# --- gathering ----------------------------------------------------------------------------------


def _torch_version() -> str | None:
    return distribution_version("torch")  # the METADATA header only: no email parsing of torch's long METADATA


def torch_build(folders: list[str], version: str | None) -> tuple[str | None, str | None]:
    """(cuda, hip) of the torch installed in ``folders`` (its package folders), read from its
    torch/version.py, which torch's build writes (``cuda: Optional[str] = None`` in a CPU build,
    ``cuda = '12.8'`` in a CUDA one); from the version's local tag ("+cpu", "+rocm6.4") when that
    file cannot be read, and "unknown" when neither tells.
    """
    for folder in folders:
        try:
            text = (Path(folder) / "version.py").read_text(encoding="utf-8")
        except OSError:
            continue
        values: dict[str, str | None] = {}
        for name in ("cuda", "hip"):
            match = re.search(rf"^{name}\s*(?::[^=\n]*)?=\s*(.+?)\s*$", text, re.MULTILINE)
            if match:
                try:
                    value = ast.literal_eval(match.group(1))
                except (ValueError, SyntaxError):
                    value = _UNKNOWN
                values[name] = value if value is None or isinstance(value, str) else _UNKNOWN
        if "cuda" in values:
            return values["cuda"], values.get("hip")
    local = (version or "").partition("+")[2]
    if local == "cpu":
        return None, None
    if local.startswith("rocm"):
        return None, local.removeprefix("rocm") or _UNKNOWN
    return _UNKNOWN, None


def _device_evidence(platform: str) -> tuple[str, ...] | None:
    if platform.startswith("linux"):
        found = sorted(glob.glob("/proc/driver/nvidia/gpus/*")) + sorted(glob.glob("/dev/nvidia[0-9]*"))
        if os.path.exists("/dev/dxg") and glob.glob("/usr/lib/wsl/lib/libcuda.so*"):
            found.append("/dev/dxg (WSL2)")
        if os.path.exists("/dev/nvhost-ctrl-gpu"):
            found.append("/dev/nvhost-ctrl-gpu (Jetson)")
        return tuple(found)
    if platform == "win32":
        dll = Path(os.environ.get("SystemRoot", r"C:\Windows")) / "System32" / "nvcuda.dll"
        return (str(dll),) if dll.exists() else ()
    return None


def driver_version(path: Path = Path("/proc/driver/nvidia/version")) -> str | None:
    """The kernel module's version from the driver's version file ("NVRM version: ... 550.54.14 ..."), or None."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    match = re.search(r"\b(\d{3,}\.\d+(?:\.\d+)?)\b", text)
    return match.group(1) if match else None


def _forward_compat() -> bool:
    paths = os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
    return os.path.isdir(_FORWARD_COMPAT) or any("compat" in Path(p).parts for p in paths if p)


def gather_facts() -> Facts:
    """This machine's facts (cheap: file reads and environment variables, no torch import)."""
    spec = importlib.util.find_spec("torch")
    installed = spec is not None
    version = _torch_version() if installed else None
    folders = list(spec.submodule_search_locations or ()) if spec is not None else []
    cuda, hip = torch_build(folders, version) if installed else (None, None)
    platform = sys.platform
    return Facts(
        torch_version=version,
        torch_cuda=cuda,
        torch_installed=installed,
        torch_hip=hip,
        visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        platform=platform,
        device_evidence=_device_evidence(platform),
        driver_version=driver_version(),
        forward_compat=_forward_compat(),
    )


# --- deciding -----------------------------------------------------------------------------------


def _numbers(text: str, count: int) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:count])


def _no_visible_device(value: str | None) -> bool:
    """CUDA reads CUDA_VISIBLE_DEVICES up to its first invalid entry, so an empty value, or one
    whose first entry is not an index or a GPU-/MIG- UUID ("-1" is the usual one), hides every GPU.
    """
    if value is None:
        return False
    first = value.split(",")[0].strip()
    return not (first.isdigit() or first.startswith(("GPU-", "MIG-")))


def availability(facts: Facts) -> bool | str:
    """True, or why CUDA cannot be used, from ``facts`` alone (the first problem found, in the
    order a user would fix them: torch, its build, the environment, the driver).
    """
    get_torch = f"install a CUDA build: {TORCH_INSTALL_URL}"
    if not facts.torch_installed:
        return f"torch is not installed; {get_torch}"
    if facts.torch_version is None:
        return "torch is importable but has no distribution metadata (a source checkout?); reinstall torch"
    if _numbers(facts.torch_version.split("+")[0], 2) < MIN_TORCH:
        return f"torch {facts.torch_version} is too old: opcore-cuda needs torch >= {'.'.join(map(str, MIN_TORCH))}"
    if facts.torch_cuda is None:
        if facts.torch_hip is not None:
            return f"a ROCm build of torch (torch {facts.torch_version}): opcore-cuda targets NVIDIA CUDA builds"
        return f"no CUDA build of torch (torch {facts.torch_version}); {get_torch}"
    if _no_visible_device(facts.visible_devices):
        return f"no device visible (CUDA_VISIBLE_DEVICES={facts.visible_devices!r})"
    if facts.device_evidence is not None and not facts.device_evidence:
        if facts.platform == "win32":
            return "no NVIDIA driver found (no nvcuda.dll in System32)"
        return "no NVIDIA driver or device visible (no /proc/driver/nvidia/gpus/*, no /dev/nvidia*)"
    cuda_major = _numbers(facts.torch_cuda, 1)
    needed = MIN_DRIVER.get(cuda_major[0]) if cuda_major else None
    if needed and facts.driver_version and not facts.forward_compat:
        found = _numbers(facts.driver_version, 2)
        if found < needed:
            return (
                f"NVIDIA driver {facts.driver_version} is too old for torch's CUDA {facts.torch_cuda} "
                f"(CUDA {cuda_major[0]}.x needs driver >= {needed[0]}.{needed[1]:02d}); update the driver, "
                f"or install a torch build for an older CUDA: {TORCH_INSTALL_URL}"
            )
    return True


def is_available() -> bool | str:
    """True when this opcore's torchkit is the one these kernels were written for and a CUDA build
    of torch, a visible device and a recent enough driver are present; otherwise the reason (cheap:
    no torch import).
    """
    mismatch = version_mismatch("torchkit", TORCHKIT_BUILT_FOR, TORCHKIT_API_VERSION, "opcore-cuda")
    return mismatch if mismatch is not None else availability(gather_facts())


# --- the doctor ---------------------------------------------------------------------------------


def _probe(probe: Callable[[], object]) -> str:
    try:
        value = probe()
    except Exception as error:  # the doctor shows the failure next to the value
        return f"unknown ({type(error).__name__}: {error})"
    return "unknown" if value is None else str(value)


def _cuda_state() -> tuple[bool, str]:
    """(usable, why not): torch.cuda.is_available(), with the warning torch gives when it is not."""
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        usable = torch.cuda.is_available()
    if usable:
        return True, ""
    said = [str(w.message).strip().splitlines()[0] for w in caught if str(w.message).strip()]
    reason = availability(gather_facts())
    return False, said[0] if said else (reason if isinstance(reason, str) else "torch.cuda.is_available() is False")


def _devices() -> list[tuple[str, str]]:
    import torch

    usable, reason = _cuda_state()
    if not usable:
        return [("devices", f"none ({reason})")]
    lines = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        memory = props.total_memory / 2**30
        lines.append((f"device {index}", f"{props.name} (sm_{props.major}{props.minor}, {memory:.1f} GiB)"))
    return lines or [("devices", "none (torch.cuda.device_count() is 0)")]


def _tf32() -> tuple[str, str]:
    import torch

    matmul = torch.get_float32_matmul_precision()
    matmul_tf32 = torch.backends.cuda.matmul.allow_tf32
    conv_tf32 = torch.backends.cudnn.allow_tf32
    return (
        f"{'on' if matmul_tf32 else 'off'} (torch.backends.cuda.matmul.allow_tf32={matmul_tf32}, "
        f"float32_matmul_precision={matmul!r})",
        f"{'on' if conv_tf32 else 'off'} (torch.backends.cudnn.allow_tf32={conv_tf32}"
        + ("; torch's default: float32 conv2d runs in TF32 on Ampere and newer, ~1e-3 relative)" if conv_tf32 else ")"),
    )


def _sdpa() -> str:
    import torch

    cuda = torch.backends.cuda
    parts = [
        f"flash {'on' if cuda.flash_sdp_enabled() else 'off'}"
        + ("" if cuda.is_flash_attention_available() else " (not in this build)"),
        f"mem-efficient {'on' if cuda.mem_efficient_sdp_enabled() else 'off'}",
        f"cuDNN {'on' if cuda.cudnn_sdp_enabled() else 'off'}",
        f"math {'on' if cuda.math_sdp_enabled() else 'off'}",
    ]
    return ", ".join(parts)


def describe() -> Mapping[str, str]:
    """name -> value lines for ``opcore doctor``; never raises. Imports torch (not at load time)."""
    facts = gather_facts()
    lines: dict[str, str] = {"torch": facts.torch_version or "not installed"}
    if not facts.torch_installed:
        return lines
    if "torch" not in sys.modules:  # importing torch costs ~1 s: the doctor asks for it with --deep
        lines["NVIDIA driver"] = facts.driver_version or "not found (no /proc/driver/nvidia/version)"
        lines["CUDA_VISIBLE_DEVICES"] = "(not set)" if facts.visible_devices is None else repr(facts.visible_devices)
        lines["live values"] = "torch CUDA, cuDNN, devices, TF32, SDPA backends: `opcore doctor --deep`"
        return lines

    def torch_cuda() -> str:
        import torch

        return torch.version.cuda or f"none (a build without CUDA: {TORCH_INSTALL_URL})"

    def cudnn() -> str:
        import torch

        return str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else "not available"

    lines["torch CUDA"] = _probe(torch_cuda)
    lines["cuDNN"] = _probe(cudnn)
    lines["NVIDIA driver"] = facts.driver_version or "not found (no /proc/driver/nvidia/version)"
    lines["CUDA_VISIBLE_DEVICES"] = "(not set)" if facts.visible_devices is None else repr(facts.visible_devices)
    try:
        lines.update(_devices())
    except Exception as error:
        lines["devices"] = f"unknown ({type(error).__name__}: {error})"
    try:
        lines["TF32 matmul"], lines["TF32 cuDNN conv"] = _tf32()
    except Exception as error:
        lines["TF32"] = f"unknown ({type(error).__name__}: {error})"
    lines["SDPA backends"] = _probe(_sdpa)
    lines["cuBLASLt epilogues"] = (
        "off (DISABLE_ADDMM_CUDA_LT=1: linear_relu/linear_gelu run GEMM then activation)"
        if os.environ.get("DISABLE_ADDMM_CUDA_LT") == "1"
        else "on (torch._addmm_activation)"
    )
    return lines
