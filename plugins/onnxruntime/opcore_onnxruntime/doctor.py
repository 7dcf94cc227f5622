"""What ``opcore doctor`` shows about ONNX Runtime: collected here, never raising.

>>> describe()["onnxruntime"]        # doctest: +SKIP
'1.31.1'
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from opcore_onnxruntime.cache import DEFAULT_CACHE_SIZE, ENV_VAR

__all__ = ["describe"]


def _probe(lines: dict[str, str], name: str, read: Callable[[], str]) -> None:
    try:
        lines[name] = read()
    except Exception as error:  # the doctor reports a failing probe instead of failing
        lines[name] = f"unavailable ({type(error).__name__}: {error})"


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


def _cache() -> str:
    from opcore_onnxruntime.cache import cache_stats

    setting = os.environ.get(ENV_VAR)
    source = f"{ENV_VAR}={setting}" if setting else f"default {DEFAULT_CACHE_SIZE}; set {ENV_VAR} to change"
    return f"{cache_stats().describe()} [{source}]"


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

    _probe(lines, "onnxruntime", version("onnxruntime"))
    _probe(lines, "onnx", version("onnx"))
    _probe(lines, "providers", lambda: ", ".join(__import__("onnxruntime").get_available_providers()))
    _probe(lines, "ep devices", _ep_devices)
    _probe(lines, "opset", _opset)
    _probe(lines, "session cache", _cache)
    return lines
