"""oneDNN's ISA cap, as the environment sets it for every oneDNN in the process.

oneDNN's dispatcher reads ``ONEDNN_MAX_CPU_ISA``, else the older ``DNNL_MAX_CPU_ISA``, and runs no code
above that ISA; torch's oneDNN and OpenVINO's own copy both read them (the cpu and openvino backends ask
here). Imports nothing but ``os``: the backends ask at load time.

>>> onednn_isa_cap({"DNNL_MAX_CPU_ISA": " avx2 "})
('DNNL_MAX_CPU_ISA', 'AVX2')
>>> onednn_cap_below_avx512({"ONEDNN_MAX_CPU_ISA": "avx512_core"}) is None
True
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["BELOW_AVX512", "ISA_CAP_VARIABLES", "onednn_cap_below_avx512", "onednn_isa_cap"]

ISA_CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
# values that leave oneDNN below AVX512_CORE (AVX512BW/VL/DQ); any other (AVX512_*, AVX10_*, DEFAULT, ALL) does not
BELOW_AVX512 = frozenset({"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2"})


def onednn_isa_cap(environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """(variable, value) of oneDNN's ISA cap where one is set in ``environ`` (``os.environ`` by
    default), the value upper-cased; else None."""
    environ = os.environ if environ is None else environ
    for name in ISA_CAP_VARIABLES:
        value = environ.get(name, "").strip()
        if value:
            return name, value.upper()
    return None


def onednn_cap_below_avx512(environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """oneDNN's ISA cap (as onednn_isa_cap) where it keeps oneDNN below AVX-512; else None."""
    cap = onednn_isa_cap(environ)
    return cap if cap is not None and cap[1] in BELOW_AVX512 else None
