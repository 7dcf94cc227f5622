"""The dtypes torch's CPU kernels support, per op: what the "cpu/aten" kernels declare.

Probed on torch 2.13 (tests/test_cpu_dtypes.py runs each op in each declared dtype against the
reference and checks that torch refuses the ones left out), so ``opcore.explain`` never shows
this backend for a dtype it would then fail on. Every built-in contract's dtypes turned out to
be supported on CPU, bool included where the contract takes it.

>>> sorted(d.value for d in CPU_DTYPES["gelu"])
['bfloat16', 'float16', 'float32', 'float64']
"""

from __future__ import annotations

from collections.abc import Mapping

from opcore.types import DType

__all__ = ["CPU_DTYPES", "FLOATING", "ONEDNN_DTYPES"]

FLOATING = frozenset({DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64})
INTEGRAL = frozenset({DType.UINT8, DType.INT8, DType.INT16, DType.INT32, DType.INT64})
NUMERIC = FLOATING | INTEGRAL
EVERY = NUMERIC | {DType.BOOL}

CPU_DTYPES: Mapping[str, frozenset[DType]] = {
    "add": EVERY,
    "sub": NUMERIC,  # torch refuses bool - bool
    "mul": EVERY,
    "div": EVERY,
    "relu": NUMERIC,  # "Boolean inputs not supported for relu"
    "gelu": FLOATING,
    "silu": FLOATING,
    "sigmoid": EVERY,
    "tanh": EVERY,
    "exp": EVERY,
    "linear": NUMERIC,  # addmm has no bool kernel
    "matmul": NUMERIC,
    "bmm": NUMERIC,
    "linear_relu": NUMERIC,
    "linear_silu": FLOATING,
    "linear_gelu": FLOATING,
    "gated_mlp": FLOATING,
    "softmax": FLOATING,
    "log_softmax": FLOATING,
    "layer_norm": FLOATING,
    "rms_norm": FLOATING,
    "embedding": EVERY,  # keyed by the weight's dtype
    "conv2d": NUMERIC,  # slow_conv2d_cpu has integer kernels, no bool one
    "scaled_dot_product_attention": FLOATING,
    "transpose": EVERY,
    "permute": EVERY,
    "reshape": EVERY,
    "cat": EVERY,
    # contributed by this plugin (opcore_cpu.contracts) until the core has them
    "conv2d_relu": NUMERIC,
    "conv2d_silu": FLOATING,
}

# oneDNN's fused inner product and convolution: float32 everywhere, bfloat16 with AVX-512 (the
# checker declines it on older CPUs). float16 needs AVX512-FP16 or AMX-FP16, which the machines
# this was built on lack, so it is not declared (it would be untested); float64 oneDNN refuses.
ONEDNN_DTYPES = frozenset({DType.FLOAT32, DType.BFLOAT16})
