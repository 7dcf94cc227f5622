"""The built-in op contracts, one module per family.

>>> from opcore.opset import BUILTIN_CONTRACTS
>>> sorted(c.name for c in BUILTIN_CONTRACTS)[:3]
['add', 'bmm', 'cat']
"""

from __future__ import annotations

from collections.abc import Mapping

from opcore.contracts import OpContract
from opcore.opset import elementwise, linear, nn, normalization, shape
from opcore.types import DType

__all__ = ["BUILTIN_CONTRACTS", "BUILTIN_DTYPES"]

BUILTIN_CONTRACTS: tuple[OpContract, ...] = (
    elementwise.CONTRACTS + linear.CONTRACTS + normalization.CONTRACTS + nn.CONTRACTS + shape.CONTRACTS
)

# For each built-in op, the dtypes its contract accepts for the argument whose dtype picks the
# kernel (the first tensor, or the contract's dtype_arg): what a complete backend registers.
BUILTIN_DTYPES: Mapping[str, frozenset[DType]] = {
    **elementwise.DTYPES,
    **linear.DTYPES,
    **normalization.DTYPES,
    **nn.DTYPES,
    **shape.DTYPES,
}
