"""What ``opcore doctor`` shows about ONNX Runtime: collected here, never raising.

>>> describe()["onnxruntime"]        # doctest: +SKIP
'1.31.1'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from opcore.extend import probe
from opcore_onnxruntime.cache import SESSIONS

__all__ = ["describe"]


def _ep_devices() -> str:
    import onnxruntime

    get = getattr(onnxruntime, "get_ep_devices", None)
    if get is None:
        return f"not offered by onnxruntime {onnxruntime.__version__} (plugin EPs need 1.22+)"
    found = []
    for device in get():
        hardware = getattr(device, "device", None)
        kind = getattr(getattr(hardware, "type", None), "name", "?") if hardware is not None else "?"
        vendor = getattr(device, "ep_vendor", "") or getattr(hardware, "vendor", "")
        found.append(f"{device.ep_name} on {kind}" + (f" ({vendor})" if vendor else ""))
    return ", ".join(found) or "none"


def _opset() -> str:
    from opcore_onnxruntime.session import target_opset

    opset, ir_version = target_opset()
    return f"{opset} (IR version {ir_version})"


def describe() -> Mapping[str, str]:
    """name -> value lines; each probe that fails says why instead of raising."""
    lines: dict[str, str] = {}

    def version(module: str) -> Callable[[], str]:
        def read() -> str:
            return str(__import__(module).__version__)

        return read

    probe(lines, "onnxruntime", version("onnxruntime"))
    probe(lines, "onnx", version("onnx"))
    probe(lines, "providers", lambda: ", ".join(__import__("onnxruntime").get_available_providers()))
    probe(lines, "ep devices", _ep_devices)
    probe(lines, "opset", _opset)
    probe(lines, "session cache", SESSIONS.describe)
    probe(lines, "threads", _threads)
    probe(lines, "denormals", _denormals)
    return lines


def _threads() -> str:
    from opcore_onnxruntime.session import KEEP_SPINNING, keeps_spinning

    if keeps_spinning():
        return f"onnxruntime's default: the pool spins after each run ({KEEP_SPINNING}=1)"
    return f"the pool stops spinning when a run returns [set {KEEP_SPINNING}=1 to keep onnxruntime's default]"


def _denormals() -> str:
    import os
    import sys

    from opcore_onnxruntime.denormals import DENORMALS, flushes, misread

    value = os.environ.get(DENORMALS, "")
    problem = misread(value)
    if problem is not None:
        return f"computed: {problem}"
    if value == "keep":
        return f"onnxruntime's default: computed ({DENORMALS}=keep)"
    if "torch" in sys.modules and not flushes(()):  # the doctor loads no torch to find out
        return "computed: torch cannot set this CPU's flush-to-zero flags"
    return f"flushed to zero in plan partitions [set {DENORMALS}=keep to keep onnxruntime's default]"
