"""The built-in op families: the one list that adding a family touches.

A family ``f`` is three modules by convention: ``opcore.opset.f`` (its contracts, ``CONTRACTS``),
``opcore.reference.f`` (one numpy kernel per op, named as the op) and ``opcore.testing.ops.f``
(its conformance-kit entries, ``ENTRIES``). Everything else (``BUILTIN_DTYPES``, the reference
backend's registrations, the torch backends' dtype tables, the graph runtimes' op sets) is derived
from the contracts. This module imports nothing, so a test can extend the list before
``opcore.opset`` is imported.

>>> "shape" in FAMILIES
True
"""

from __future__ import annotations

__all__ = ["FAMILIES"]

# one entry per family, in the order ``opcore ops`` and docs/ops.md list them
FAMILIES: tuple[str, ...] = (
    "elementwise",
    "linear",
    "normalization",
    "nn",
    "shape",
    "indexing",
    "reduction",
    "selection",
    "creation",
    "pooling",
    "quantized",
)
