"""The versions step of scripts/gpu_check.sh: the GPU, its driver, torch and its CUDA, the runtimes and
opcore's distributions, as ``name: value`` lines, then one ``digest:`` line for the session's note.

Every probe returns a value or a reason (never raises), so the step prints what it can on any
machine, a CPU-only one included (``gpu_check.sh --dry-run``).

    python3 scripts/gpu_check_versions.py
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys

# opcore's distributions (pyproject names), then what the GPU image is expected to bring
OPCORE_DISTRIBUTIONS = (
    "opcore",
    "opcore-cpu",
    "opcore-cuda",
    "opcore-onnxruntime",
    "opcore-openvino",
    "opcore-example-vendor",
)
RUNTIMES = ("numpy", "pluggy", "onnx", "onnxruntime", "openvino", "safetensors", "transformers", "setuptools", "pip")
SMI_FIELDS = "name,driver_version,memory.total,compute_cap"


def version_of(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def nvidia_smi(*args: str) -> str | None:
    """nvidia-smi's output, or None where it is missing or fails (its reason is in ``gpu()``)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def gpu() -> str:
    if shutil.which("nvidia-smi") is None:
        return "none visible (nvidia-smi is not on the PATH)"
    rows = nvidia_smi(f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader")
    if not rows:
        return "none visible (nvidia-smi --query-gpu failed or listed no GPU)"
    # one line per GPU: name, driver, memory, compute capability
    return "; ".join(
        "{}, driver {}, {}, compute capability {}".format(*[part.strip() for part in row.split(",")])
        if row.count(",") == 3
        else row
        for row in rows.splitlines()
    )


def torch_line() -> str:
    try:
        import torch
    except Exception as error:  # a broken torch is reported, not raised
        return f"cannot import torch: {type(error).__name__}: {error}"
    parts = [torch.__version__, f"CUDA {torch.version.cuda}"]
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    parts.append(f"cuDNN {cudnn}")
    try:
        available = torch.cuda.is_available()
    except Exception as error:
        return ", ".join([*parts, f"torch.cuda.is_available() raised {type(error).__name__}: {error}"])
    parts.append(f"cuda available {available}")
    if available:
        for index in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(index)
            parts.append(f"device {index}: {torch.cuda.get_device_name(index)} (sm_{major}{minor})")
        parts.append(
            f"TF32 matmul {torch.backends.cuda.matmul.allow_tf32}, cuDNN TF32 {torch.backends.cudnn.allow_tf32}"
        )
    return ", ".join(parts)


def onnxruntime_line() -> str:
    try:
        import onnxruntime
    except Exception as error:
        return f"cannot import onnxruntime: {type(error).__name__}: {error}"
    return f"{onnxruntime.__version__}, providers {', '.join(onnxruntime.get_available_providers())}"


def collect() -> dict[str, str]:
    """Every line of the report, by name (the digest last)."""
    found = {
        "gpu": gpu(),
        "python": f"{sys.version.split()[0]} at {sys.executable}",
        "torch": torch_line(),
        "onnxruntime": onnxruntime_line(),
        "runtimes": ", ".join(f"{name} {version_of(name)}" for name in RUNTIMES),
        "opcore distributions": ", ".join(f"{name} {version_of(name)}" for name in OPCORE_DISTRIBUTIONS),
        "environment": ", ".join(
            f"{key}={value}"
            for key, value in sorted(os.environ.items())
            if key.startswith(("OPCORE_", "CUDA_", "NVIDIA_TF32", "TORCH_", "PYTORCH_"))
        )
        or "no OPCORE_*, CUDA_*, NVIDIA_TF32*, TORCH_* or PYTORCH_* variable set",
    }
    found["digest"] = (
        f"GPU {found['gpu']}; torch {_torch_digest(found['torch'])}; "
        f"onnxruntime {version_of('onnxruntime')}; python {sys.version.split()[0]}"
    )
    return found


def _torch_digest(torch_text: str) -> str:
    """The version and its CUDA from torch_line()'s text ("2.11.0+cu130 (CUDA 13.0)"), or that text
    where torch did not import."""
    parts = torch_text.split(", ")
    cuda = next((part for part in parts if part.startswith("CUDA ")), None)
    return f"{parts[0]} ({cuda})" if cuda else torch_text


def main() -> int:
    for name, value in collect().items():
        print(f"{name}: {value}")
    table = nvidia_smi()
    print("\nnvidia-smi:\n" + (table if table is not None else "  (not available here)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
