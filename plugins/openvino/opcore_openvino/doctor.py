"""What ``opcore doctor`` shows about OpenVINO: collected here, never raising.

>>> describe()["openvino"]        # doctest: +SKIP
'2026.4.1-22982-e213a147257-releases/2026/4'
"""

from __future__ import annotations

from collections.abc import Mapping

from opcore.extend import probe
from opcore_openvino.cache import MODELS

__all__ = ["describe"]


def _version() -> str:
    import openvino

    return str(openvino.get_version())


def _devices() -> str:
    from opcore_openvino.compiled import core

    found = []
    for device in core().available_devices:
        try:
            name = core().get_property(device, "FULL_DEVICE_NAME")
        except Exception:  # some devices have no full name
            name = ""
        found.append(f"{device} ({name})" if name else device)
    return ", ".join(found) or "none"


def _default_precision() -> str:
    from opcore_openvino.compiled import CONFIG, core

    default = core().get_property("CPU", "INFERENCE_PRECISION_HINT")
    name = default.get_type_name() if hasattr(default, "get_type_name") else str(default)
    note = " (float32 models would silently run in it)" if name != "f32" else ""
    return f"CPU default {name}{note}; opcore compiles with {CONFIG['INFERENCE_PRECISION_HINT']}"


def _weight_only() -> str:
    from opcore_openvino.compiled import CONFIG, DYNAMIC_QUANTIZATION_VAR, core

    default = core().get_property("CPU", "DYNAMIC_QUANTIZATION_GROUP_SIZE")
    group = int(CONFIG["DYNAMIC_QUANTIZATION_GROUP_SIZE"])
    chosen = "x kept float" if group == 0 else f"x rounded to 8 bits in groups of {group} ({DYNAMIC_QUANTIZATION_VAR})"
    return f"CPU default dynamic quantization group {default} (0: none); opcore: {chosen}"


def _capabilities() -> str:
    from opcore_openvino.compiled import core

    return ", ".join(core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))


def describe() -> Mapping[str, str]:
    """name -> value lines; each probe that fails says why instead of raising."""
    lines: dict[str, str] = {}
    probe(lines, "openvino", _version)
    probe(lines, "devices", _devices)
    probe(lines, "precision", _default_precision)
    probe(lines, "weight-only linears", _weight_only)
    probe(lines, "CPU capabilities", _capabilities)
    probe(lines, "compiled-model cache", MODELS.describe)
    return lines
