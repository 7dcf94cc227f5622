"""The dtypes torch's CUDA kernels support, per op: what the "cuda/aten" kernels declare, as the
contracts' dtypes except where ``CUDA_DIFFERENCES`` says CUDA differs.

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

from opcore.extend import BUILTIN_CONTRACTS, FLOATING, DType, torch_dtypes

__all__ = ["CUBLASLT_DTYPES", "CUDA_DIFFERENCES", "CUDA_DTYPES", "FLOATING"]

# op -> the dtypes torch's CUDA kernels take where they are not the contract's
CUDA_DIFFERENCES: Mapping[str, frozenset[DType]] = {
    "linear": FLOATING,  # no integer GEMM on CUDA ("addmm_cuda" not implemented for 'Long', seen on an H200)
    "addmm": FLOATING,
    "matmul": FLOATING,
    "bmm": FLOATING,
    "linear_relu": FLOATING,
    "conv1d": FLOATING,  # cuDNN (and torch's slow CUDA convolutions) are floating only
    "conv2d": FLOATING,  # cuDNN (and torch's slow CUDA convolutions) are floating only
    # CUDA's pooling kernels dispatch over floating types (not probed on a GPU: conservative)
    "max_pool2d": FLOATING,
    "avg_pool2d": FLOATING,
    # contributed by opcore-cpu (opcore_cpu.contracts) until the core has them; registered only
    # when the contract exists
    "conv2d_relu": FLOATING,
    "conv2d_silu": FLOATING,
}

# every built-in op; notes on the ones CUDA serves through its own kernel (opcore_cuda.kernels):
# clamp (a NaN bound), div (CUDA does not raise on an integer division by zero), layer_norm and
# group_norm (float32 parameters of a float16 input), embedding, embedding_wq, gather and index
# (check the indices)
CUDA_DTYPES: Mapping[str, frozenset[DType]] = torch_dtypes(BUILTIN_CONTRACTS, CUDA_DIFFERENCES)

# torch._addmm_activation's cuBLASLt path takes these (and float64, which gains nothing from it)
CUBLASLT_DTYPES = frozenset({DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32})
