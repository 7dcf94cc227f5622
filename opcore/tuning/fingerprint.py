"""What a measurement depends on: the fingerprint a tuning file is keyed by.

A measured ranking is only true for the software and hardware it was measured on (stale tuning
caches keyed without versions gave wrong answers in TensorRT's), so the fingerprint holds the
opcore and plugin versions, the runtime libraries' versions, the CPU model and ISA, the GPUs and
the thread count. Any difference makes a tuning file stale: it is ignored, and opcore says why.

Nothing here imports torch, onnxruntime or openvino: versions come from distribution metadata,
the CPU from /proc/cpuinfo, the GPUs from the driver's /proc entries (``opcore.probes``).

>>> fp = current(runtime().ensure_loaded())           # doctest: +SKIP
>>> differences(fp, fp)                               # doctest: +SKIP
[]
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opcore._version import __version__

if TYPE_CHECKING:
    from opcore.runtime import Runtime

__all__ = ["current", "differences", "thread_count"]

# The runtime libraries whose versions change what a kernel costs (the ones the backends build on).
RUNTIME_LIBRARIES = ("numpy", "torch", "onnxruntime", "openvino")


@functools.cache
def _machine() -> tuple[tuple[str, Any], ...]:
    """The CPU model, its ISA flags present and the GPUs: fixed for the life of the process."""
    from opcore.probes import cpu_info, distribution_version, gpu_probe

    cpu = cpu_info()
    isa = sorted(name for name, present in cpu.isa or () if present)
    versions = {name: distribution_version(name) for name in RUNTIME_LIBRARIES}
    return (
        ("cpu", cpu.model or cpu.machine),
        ("isa", isa),
        ("gpu", list(gpu_probe().devices)),
        ("libraries", versions),
    )


def thread_count() -> int:
    """The intra-op threads kernels run with: torch's setting once torch is imported, else what torch
    and the other runtimes would start with (OMP_NUM_THREADS, or the cores this process may use).
    """
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        return int(torch.get_num_threads())
    text = os.environ.get("OMP_NUM_THREADS", "").strip()
    if text.isdigit() and int(text) > 0:
        return int(text)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def current(rt: Runtime) -> dict[str, Any]:
    """The fingerprint of this process: a JSON-ready dict (keys in a fixed order)."""
    plugins = {}
    for name, report in sorted(rt.loader.reports.items()):
        if report.ok and report.backend is not None:
            dist = f"{report.distribution} {report.distribution_version}" if report.distribution else "in-process"
            plugins[name] = f"{dist}, backend {report.backend.version}"
    return {"opcore": __version__, "plugins": plugins, **dict(_machine()), "threads": thread_count()}


def differences(stored: Mapping[str, Any], here: Mapping[str, Any]) -> list[str]:
    """What differs, one phrase each ("threads: 1 in the file, 2 here"); empty when they match."""
    found = []
    for key in sorted(set(stored) | set(here)):
        old, new = stored.get(key), here.get(key)
        if old == new:
            continue
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            for name in sorted(set(old) | set(new)):
                if old.get(name) != new.get(name):
                    found.append(f"{key} {name}: {_text(old.get(name))} in the file, {_text(new.get(name))} here")
        else:
            found.append(f"{key}: {_text(old)} in the file, {_text(new)} here")
    return found


def _text(value: Any) -> str:
    if value is None:
        return "absent"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return str(value)
