"""Shared by the benchmarks that run on a GPU (--device cuda): whether one can be used here."""

from __future__ import annotations


def no_gpu_reason() -> str | None:
    """Why nothing can be measured on a GPU here (the cuda backend's own reason), or None (checked
    without importing torch first)."""
    try:
        from opcore_cuda.system import is_available
    except ImportError:
        return "opcore-cuda is not installed (pip install 'opcore[cuda]')"
    available = is_available()
    if available is not True:
        return str(available)
    import torch

    return None if torch.cuda.is_available() else "torch.cuda.is_available() is False"
