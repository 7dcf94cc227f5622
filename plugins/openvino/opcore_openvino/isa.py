"""oneDNN's ISA cap as OpenVINO's CPU plugin meets it.

``ONEDNN_MAX_CPU_ISA`` (or the older ``DNNL_MAX_CPU_ISA``) caps oneDNN's code paths; it is the switch
for trying an AVX2 machine's path on an AVX-512 one. OpenVINO's CPU plugin carries its own oneDNN,
which reads the same variable, while the plugin's own JIT kernels still follow the CPU: with the cap
below AVX-512 on an AVX-512 CPU, OpenVINO 2026.4's plugin kills the process with a segmentation fault
in its first MVN (layer_norm) inference (measured on an AMD EPYC with AVX512_BF16: AVX, AVX2 and
AVX2_VNNI crash, SSE41 raises, AVX512_CORE and above run). A crash is not an error a dispatcher can
fall back from, so the backend reports itself unavailable under such a cap and says why.

>>> isa_cap_reason({"ONEDNN_MAX_CPU_ISA": "avx2"}, frozenset({"avx2", "avx512f"}))[:28]
'ONEDNN_MAX_CPU_ISA=AVX2 caps'
>>> isa_cap_reason({"ONEDNN_MAX_CPU_ISA": "AVX2"}, frozenset({"avx2"})) is None  # the CPU's own level
True
"""

from __future__ import annotations

from collections.abc import Mapping

from opcore.extend import ISA_CAP_VARIABLES, onednn_cap_below_avx512

__all__ = ["CAP_VARIABLES", "isa_cap_reason"]

CAP_VARIABLES = ISA_CAP_VARIABLES  # oneDNN reads the first one set (opcore.isacap)


def isa_cap_reason(environ: Mapping[str, str] | None = None, flags: frozenset[str] | None = None) -> str | None:
    """Why openvino cannot run under the ISA cap set in ``environ`` (``os.environ`` by default) on a
    CPU with these ``/proc/cpuinfo`` ``flags`` (read when a cap is set and none are given), or None.
    """
    cap = onednn_cap_below_avx512(environ)
    if cap is None:
        return None
    if flags is None:
        from opcore.extend import cpu_info

        flags = frozenset(name for name, present in cpu_info().isa or () if present)
    if "avx512f" not in flags:
        return None  # an AVX2 CPU capped at its own level (or lower): nothing of OpenVINO's is above the cap
    variable, value = cap
    return (
        f"{variable}={value} caps oneDNN below this CPU's AVX-512, and OpenVINO's CPU plugin, which reads it "
        "too, crashes the process under such a cap (a segmentation fault in MVN); unset "
        f"{variable} to use openvino"
    )
