"""How close a backend's result must be to the reference's, per result dtype.

The reference computes in float64 and rounds once, so it gives the correctly rounded result;
a backend computing in the input dtype (or accumulating in float32) may differ by a few units
in the last place, more for long reductions. Integer and bool results must be exact.

>>> tolerance_for(DType.FLOAT16)
Tolerance(rtol=0.002, atol=0.001)
"""

from __future__ import annotations

from collections.abc import Mapping

from opcore.testing.records import OpEntry, Sample, Tolerance
from opcore.types import DType

__all__ = ["DEFAULT_TOLERANCES", "EXACT", "REDUCED_PRECISION_CHAINS", "tolerance_for"]

EXACT = Tolerance(0.0, 0.0)

# torch.testing.assert_close's defaults, a little wider for float16 (a few ulps of 2**-10)
DEFAULT_TOLERANCES: Mapping[DType, Tolerance] = {
    DType.FLOAT16: Tolerance(2e-3, 1e-3),
    DType.BFLOAT16: Tolerance(1.6e-2, 1e-2),
    DType.FLOAT32: Tolerance(1.3e-5, 1e-5),
    DType.FLOAT64: Tolerance(1e-7, 1e-7),
}

# For ops a backend may compute as several rounded steps (fused linear + activation, gated MLP,
# attention, normalization): each step in float16 or bfloat16 adds its own rounding.
REDUCED_PRECISION_CHAINS: Mapping[DType, Tolerance] = {
    DType.FLOAT16: Tolerance(1e-2, 1e-2),
    DType.BFLOAT16: Tolerance(5e-2, 5e-2),
}


def tolerance_for(dtype: DType, entry: OpEntry | None = None, sample: Sample | None = None) -> Tolerance:
    """The sample's own tolerance, else the entry's for ``dtype``, else the default (exact for
    integer and bool results).
    """
    if sample is not None and sample.tolerance is not None:
        return sample.tolerance
    if entry is not None and dtype in entry.tolerances:
        return entry.tolerances[dtype]
    return DEFAULT_TOLERANCES.get(dtype, EXACT)
