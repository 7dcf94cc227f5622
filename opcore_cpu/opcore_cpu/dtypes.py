"""The dtypes torch's CPU kernels support, per op: what the "cpu/aten" kernels declare.

The table is the contracts' dtypes (``opcore.torchkit.registration.torch_dtypes``) except where
``CPU_DIFFERENCES`` says torch on CPU differs. Checked on torch 2.13: tests/test_torch_kernels.py
runs each op in each declared dtype against the reference, so ``opcore.explain`` never shows this
backend for a dtype it would then fail on. Every built-in contract's dtypes turned out to be
supported on CPU, bool included where the contract takes it: there is no difference to declare.

>>> sorted(d.value for d in CPU_DTYPES["gelu"])
['bfloat16', 'float16', 'float32', 'float64']
"""

from __future__ import annotations

from collections.abc import Mapping

from opcore.extend import BUILTIN_CONTRACTS, FLOATING, DType, torch_dtypes
from opcore_cpu.contracts import CONTRACTS

__all__ = ["CPU_DIFFERENCES", "CPU_DTYPES", "FLOATING", "ONEDNN_DTYPES"]

# op -> the dtypes torch's CPU kernels take where they are not the contract's (none today)
CPU_DIFFERENCES: Mapping[str, frozenset[DType]] = {}

# every op this backend serves with torch (the built-in ops and this plugin's conv2d_relu/silu)
CPU_DTYPES: Mapping[str, frozenset[DType]] = torch_dtypes((*BUILTIN_CONTRACTS, *CONTRACTS), CPU_DIFFERENCES)

# oneDNN's fused inner product and convolution: float32 everywhere, bfloat16 with AVX-512 and float16
# with AVX512-FP16 or AMX-FP16 (Sapphire Rapids and later; the checkers decline each elsewhere, and
# ATen's kernels take it); float64 oneDNN refuses.
ONEDNN_DTYPES = frozenset({DType.FLOAT32, DType.BFLOAT16, DType.FLOAT16})
