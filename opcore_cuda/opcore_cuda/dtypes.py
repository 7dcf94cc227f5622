"""The dtypes torch's CUDA kernels support, per op: what the "cuda/aten" kernels declare.

Unlike ``opcore_cpu.dtypes`` this table could not be probed on a GPU when it was written; it
follows torch's CUDA dispatch macros, and is conservative where CUDA differs from CPU: no integer
kernels for the matrix products (cuBLAS has no integer addmm/mm/bmm; "addmm_cuda" not implemented
for 'Long') nor for conv2d (cuDNN has none). Every floating op also takes float64 on CUDA (slow on
consumer GPUs, but correct), so float64 is declared with float16, bfloat16 and float32.

>>> sorted(d.value for d in CUDA_DTYPES["linear"])
['bfloat16', 'float16', 'float32', 'float64']
"""

from __future__ import annotations

from collections.abc import Mapping

from opcore.types import DType

__all__ = ["CUBLASLT_DTYPES", "CUDA_DTYPES", "FLOATING"]

FLOATING = frozenset({DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32, DType.FLOAT64})
INTEGRAL = frozenset({DType.UINT8, DType.INT8, DType.INT16, DType.INT32, DType.INT64})
NUMERIC = FLOATING | INTEGRAL
EVERY = NUMERIC | {DType.BOOL}

CUDA_DTYPES: Mapping[str, frozenset[DType]] = {
    "add": EVERY,
    "sub": NUMERIC,  # torch refuses bool - bool on every device
    "mul": EVERY,
    "div": EVERY,  # opcore_cuda.kernels.div: CUDA does not raise on an integer division by zero
    "relu": NUMERIC,  # clamp_min's CUDA kernel takes every numeric dtype
    "gelu": FLOATING,
    "silu": FLOATING,
    "sigmoid": EVERY,  # integer and bool inputs are computed in the promoted float dtype
    "tanh": EVERY,
    "exp": EVERY,
    "linear": FLOATING,  # no integer GEMM on CUDA
    "matmul": FLOATING,
    "bmm": FLOATING,
    "linear_relu": FLOATING,
    "linear_silu": FLOATING,
    "linear_gelu": FLOATING,
    "gated_mlp": FLOATING,
    "softmax": FLOATING,
    "log_softmax": FLOATING,
    "layer_norm": FLOATING,  # opcore_cuda.kernels.layer_norm: float32 parameters of a float16 input
    "rms_norm": FLOATING,
    "embedding": EVERY,  # keyed by the weight's dtype; opcore_cuda.kernels.embedding checks the indices
    "conv2d": FLOATING,  # cuDNN (and torch's slow CUDA convolutions) are floating only
    "scaled_dot_product_attention": FLOATING,  # flash / memory-efficient / cuDNN / math, torch picks
    "transpose": EVERY,
    "permute": EVERY,
    "reshape": EVERY,
    "cat": EVERY,
    # contributed by opcore-cpu (opcore_cpu.contracts) until the core has them; registered only
    # when the contract exists
    "conv2d_relu": FLOATING,
    "conv2d_silu": FLOATING,
}

# torch._addmm_activation's cuBLASLt path takes these (and float64, which gains nothing from it)
CUBLASLT_DTYPES = frozenset({DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32})
