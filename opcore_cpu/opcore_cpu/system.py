"""What the doctor and the loader ask about this machine: is torch there, which oneDNN, which ISA.

``is_available`` runs at load time and imports nothing heavy; ``describe`` runs only for the
doctor and never raises (a probe that fails says so in its value). It reads live values from
torch only when torch is already imported (``opcore doctor --deep`` imports it first).

>>> is_available()                                                              # doctest: +SKIP
True
>>> describe()["oneDNN"]                                                        # doctest: +SKIP
'3.12.0'
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from opcore.extend import (
    BELOW_AVX512,
    ISA_CAP_VARIABLES,
    TORCHKIT_API_VERSION,
    distribution_version,
    onednn_cap_below_avx512,
    onednn_isa_cap,
    version_mismatch,
)

__all__ = [
    "BELOW_AVX512",
    "BELOW_AVX512_FP16",
    "ISA_CAP_VARIABLES",
    "MIN_TORCH",
    "cpu_flags",
    "cpu_vendor",
    "describe",
    "float32_packing",
    "is_available",
    "isa_summary",
    "native_bfloat16_flags",
    "native_float16_flags",
    "onednn_bfloat16_reason",
    "onednn_float16_reason",
    "onednn_isa_cap",
    "onednn_version",
]

MIN_TORCH = (2, 4)  # the mkldnn pointwise ops with these signatures exist from torch 2.4 on
TORCHKIT_BUILT_FOR = 1  # the opcore.torchkit surface (TORCHKIT_API_VERSION) these kernels are written against
# /proc/cpuinfo flags that change what oneDNN can do here, in the order the doctor lists them
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16")
BFLOAT16_NO_AVX512 = "this CPU has no AVX-512 (oneDNN's bfloat16 kernels need AVX512BW/VL/DQ or AMX)"
FLOAT16_NO_FP16 = "this CPU has no AVX512-FP16 or AMX-FP16 (oneDNN's float16 kernels need one of them)"
# oneDNN ISA caps that keep it below avx512_core_fp16 (the float16 kernels' level)
BELOW_AVX512_FP16 = BELOW_AVX512 | {"AVX512_CORE", "AVX512_CORE_VNNI", "AVX512_CORE_BF16"}


def _torch_version() -> str | None:
    return distribution_version("torch")  # the METADATA header only: no email parsing of torch's long METADATA


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+", maxsplit=1)[0])[:2])


def is_available() -> bool | str:
    """True when this opcore's torchkit is the one these kernels were written for and torch >= 2.4
    is installed; otherwise the reason (cheap: no torch import)."""
    mismatch = version_mismatch("torchkit", TORCHKIT_BUILT_FOR, TORCHKIT_API_VERSION, "opcore-cpu")
    if mismatch is not None:
        return mismatch
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed; pip install 'opcore[cpu]' installs it"
    version = _torch_version()
    if version is None:
        return "torch is importable but has no distribution metadata (a source checkout?); reinstall torch"
    if _version_tuple(version) < MIN_TORCH:
        return f"torch {version} is too old: opcore-cpu needs torch >= {'.'.join(map(str, MIN_TORCH))}"
    return True


def onednn_header_version() -> str | None:
    """oneDNN's version from the headers inside the torch wheel (torch/include/oneapi/dnnl):
    the library torch was built with, read without importing torch.
    """
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        header = Path(folder) / "include" / "oneapi" / "dnnl" / "dnnl_version.h"
        try:
            text = header.read_text()
        except OSError:
            continue
        parts = [re.search(rf"#define DNNL_VERSION_{name} (\d+)", text) for name in ("MAJOR", "MINOR", "PATCH")]
        if all(parts):
            return ".".join(match.group(1) for match in parts if match)
    return None


def onednn_version() -> str | None:
    """oneDNN's version as torch reports it in torch.__config__.show() ("Intel(R) MKL-DNN v3.12.0")."""
    import torch

    match = re.search(r"(?:MKL-DNN|oneDNN)[^\n]*?v(\d+\.\d+(?:\.\d+)?)", torch.__config__.show())
    return match.group(1) if match else None


def _cpuinfo_field(name: str) -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(name):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return None


def cpu_flags() -> frozenset[str]:
    """The CPU's flags from /proc/cpuinfo (empty where there is none, e.g. macOS)."""
    return frozenset((_cpuinfo_field("flags") or "").split())


def cpu_vendor() -> str | None:
    """The CPU vendor from /proc/cpuinfo ("GenuineIntel", "AuthenticAMD", ...), or None."""
    return _cpuinfo_field("vendor_id")


@functools.cache
def float32_packing() -> str:
    """Who packs float32 weights for the oneDNN kernels (``opcore_cpu.onednn``, which re-exports this):
    "mkl" on Intel CPUs with MKL, else "onednn" (see that module's doc). Imports torch."""
    import torch

    return "mkl" if cpu_vendor() == "GenuineIntel" and torch.backends.mkl.is_available() else "onednn"


def isa_summary(flags: frozenset[str]) -> str:
    """The flags that matter to oneDNN, and what their absence means."""
    present = [flag for flag in ISA_FLAGS if flag in flags]
    if not flags:
        return "unknown (no /proc/cpuinfo)"
    text = " ".join(present) or "none of " + ", ".join(ISA_FLAGS)
    if "amx_bf16" in flags:
        return text
    if "avx512_bf16" in flags:  # the AMX note only where AVX-512 BF16 is there to fall back on
        text += " (no AMX: bfloat16 GEMMs run on AVX-512 BF16)"
    else:
        text += " (no native bfloat16: oneDNN converts to float32)"
    return text


@functools.cache
def _torch_bf16_supported() -> bool:
    import torch  # asked at selection time, when a torch kernel is about to run anyway

    # torch's own test before it lets oneDNN run bfloat16: AVX512BW/VL/DQ (or AMX, or Arm's BF16)
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def onednn_bfloat16_reason() -> str | None:
    """None where oneDNN's bfloat16 kernels run natively on this machine; otherwise why they do not:
    no AVX-512 (torch's own test), or ``ONEDNN_MAX_CPU_ISA`` capping oneDNN below it.

    The oneDNN kernels' checkers decline bfloat16 with this reason, and tests derive their
    expectations from it (imports torch on first call).

    >>> onednn_bfloat16_reason() in (None, BFLOAT16_NO_AVX512)                    # doctest: +SKIP
    True
    """
    return _native_reason(
        _torch_bf16_supported(),
        onednn_cap_below_avx512(),
        native_bfloat16_flags(cpu_flags()),
        BFLOAT16_NO_AVX512,
        "AVX-512 (its bfloat16 kernels need AVX512BW/VL/DQ or AMX)",
    )


def _native_reason(supported: bool, cap: tuple[str, str] | None, native: bool, missing: str, level: str) -> str | None:
    """None where torch says oneDNN runs the dtype natively and no ISA cap keeps oneDNN below ``level``;
    else the CPU's reason (``missing``) or the cap's."""
    if not supported and not (cap is not None and native):
        return missing
    # torch 2.13 asks oneDNN, which read the cap when torch loaded (and then says no on a CPU that has
    # the ISA); older torch asks the CPU: either way the cap is the reason where the CPU has what it needs
    if cap is not None:
        return f"{cap[0]}={cap[1]} keeps oneDNN below {level}; unset {cap[0]} to use them"
    return None


@functools.cache
def _torch_fp16_supported() -> bool:
    import torch  # asked at selection time, when a torch kernel is about to run anyway

    # torch's own test before it lets oneDNN run float16: AVX512-FP16 or AMX-FP16 (as oneDNN, capped, sees it)
    return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())


def onednn_float16_reason() -> str | None:
    """None where oneDNN's float16 kernels run natively on this machine (AVX512-FP16 or AMX-FP16, as
    on Sapphire Rapids and later Xeons); otherwise why they do not: the CPU lacks both (torch's own
    test), or ``ONEDNN_MAX_CPU_ISA`` caps oneDNN below ``AVX512_CORE_FP16``.

    The oneDNN kernels' checkers decline float16 with this reason (ATen's kernels then take it);
    tests derive their expectations from it (imports torch on first call).

    >>> onednn_float16_reason() in (None, FLOAT16_NO_FP16)                        # doctest: +SKIP
    True
    """
    cap = onednn_isa_cap()
    return _native_reason(
        _torch_fp16_supported(),
        cap if cap is not None and cap[1] in BELOW_AVX512_FP16 else None,
        native_float16_flags(cpu_flags()),
        FLOAT16_NO_FP16,
        "AVX512_CORE_FP16 (its float16 kernels need AVX512-FP16 or AMX-FP16)",
    )


def native_float16_flags(flags: frozenset[str]) -> bool:
    """Whether these /proc/cpuinfo flags have what oneDNN's float16 kernels need (AVX512-FP16 or AMX-FP16).

    >>> native_float16_flags(frozenset({"avx512f", "avx512_bf16"}))
    False
    """
    return "avx512_fp16" in flags or "amx_fp16" in flags


def native_bfloat16_flags(flags: frozenset[str]) -> bool:
    """Whether these /proc/cpuinfo flags have what oneDNN's bfloat16 kernels need (AVX512BW/VL/DQ or AMX).

    >>> native_bfloat16_flags(frozenset({"avx2", "avx512bw", "avx512vl", "avx512dq"}))
    True
    """
    return {"avx512bw", "avx512vl", "avx512dq"} <= flags or "amx_bf16" in flags


def _isa_line() -> str:
    text = isa_summary(cpu_flags())
    cap = onednn_isa_cap()
    return text if cap is None else f"{text}; oneDNN capped by {cap[0]}={cap[1]}"


def _probe(probe: Callable[[], object]) -> str:
    try:
        value = probe()
    except Exception as error:  # the doctor shows the failure next to the value
        return f"unknown ({type(error).__name__}: {error})"
    return "unknown" if value is None else str(value)


def describe() -> Mapping[str, str]:
    """name -> value lines for ``opcore doctor``; never raises."""

    def mkldnn() -> str:
        import torch

        version = onednn_version() or "version unknown"
        return version if torch.backends.mkldnn.is_available() else f"{version} (torch.backends.mkldnn unavailable)"

    def mkl() -> str:
        import torch

        match = re.search(r"Math Kernel Library Version (\d[\d.]*)", torch.__config__.show())
        available = torch.backends.mkl.is_available()
        return (match.group(1) if match else "version unknown") + ("" if available else " (unavailable)")

    def capability() -> str:
        import torch

        return torch.backends.cpu.get_cpu_capability()

    def threads() -> str:
        import torch

        return str(torch.get_num_threads())

    def packing() -> str:
        return f"{float32_packing()} (prepared float32 linear weights)"

    if "torch" not in sys.modules:  # importing torch costs ~1 s: the doctor asks for it with --deep
        return {
            "torch": _torch_version() or "not installed",
            "oneDNN": _probe(lambda: f"{onednn_header_version() or 'version unknown'} (from torch's headers)"),
            "CPU": _probe(cpu_vendor),
            "ISA": _probe(_isa_line),
            "live values": "MKL, ATen CPU capability, threads, float32 packing: `opcore doctor --deep`",
        }
    return {
        "torch": _torch_version() or "not installed",
        "oneDNN": _probe(mkldnn),
        "MKL": _probe(mkl),
        "ATen CPU capability": _probe(capability),
        "CPU": _probe(cpu_vendor),
        "ISA": _probe(_isa_line),
        "threads": _probe(threads),
        "float32 packing": _probe(packing),
    }
