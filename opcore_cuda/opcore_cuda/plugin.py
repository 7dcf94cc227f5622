"""The ``cuda`` backend's hooks (entry point ``cuda = "opcore_cuda.plugin"`` in ``opcore.backends``).

Loading this module imports no torch: every kernel is named as ``"module:qualname"`` and imported
when it first runs; availability and the checkers live in the torch-free ``opcore_cuda.system``
and ``opcore_cuda.choice``. Without a usable GPU the backend is unavailable (with the reason) and
registers nothing, so numpy and CPU inputs never meet it.

Its kernels are keyed by device type ``cuda``: they rank only for inputs on a CUDA device, or for
numpy inputs pinned with ``backend="cuda"`` (moved to the GPU and back by the dispatcher).
Three layers, highest priority first:

- ``cuda/cublaslt`` (+10): linear_relu and linear_gelu through ``torch._addmm_activation``, the
  activation fused into the GEMM as a cuBLASLt epilogue.
- ``cuda/aten``: the shared device-generic torch kernels (``opcore.torchkit.torch_kernels``) for every
  built-in op, with ``opcore_cuda.kernels`` in place of eight of them (clamp, div, embedding, embedding_wq,
  gather, group_norm, index, layer_norm);
  scaled_dot_product_attention is torch's fused SDPA (flash / memory-efficient / cuDNN).
- ``aten.*`` ops: the shared ATen fallback (``opcore.torchkit.aten``), any ``torch.ops.aten`` op.

>>> opcore_backend().priority
400
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opcore.extend import DEFAULT_PRIORITIES, ArrayKind, BackendSpec, DeviceType, hookimpl
from opcore_cuda import __version__, system

if TYPE_CHECKING:
    from opcore.extend import Registrar

__all__ = ["CUBLASLT_LABEL", "CUBLASLT_PRIORITY", "CUDA_OVERRIDES", "opcore_backend", "opcore_register_kernels"]

CUBLASLT_LABEL = "cublaslt"
CUBLASLT_PRIORITY = 10  # above this backend's plain ATen kernels
# the kernels registered in place of the shared ones (as opcore_cuda.kernels.CUDA_OVERRIDES, which
# imports torch and so cannot be imported here)
CUDA_OVERRIDES = {
    op: f"opcore_cuda.kernels:{op}"
    for op in ("clamp", "div", "embedding", "embedding_wq", "gather", "group_norm", "index", "layer_norm")
}

# op -> (kernel, prepare, checker attribute of opcore_cuda.choice) of the cuBLASLt epilogue kernels;
# choice is imported when the backend registers, which it does only with a usable GPU (issue 15)
_CUBLASLT: dict[str, tuple[str, str, str]] = {
    "linear_relu": (
        "opcore_cuda.cublaslt:linear_relu",
        "opcore_cuda.cublaslt:prepare_linear_relu",
        "relu_epilogue_checker",
    ),
    "linear_gelu": (
        "opcore_cuda.cublaslt:linear_gelu",
        "opcore_cuda.cublaslt:prepare_linear_gelu",
        "gelu_epilogue_checker",
    ),
}


@hookimpl
def opcore_backend() -> BackendSpec:
    """PyTorch on CUDA: cheap to announce (no torch import until a kernel runs)."""
    return BackendSpec(
        name="cuda",
        version=__version__,
        priority=DEFAULT_PRIORITIES["cuda"],
        device_types=(DeviceType.CUDA,),
        is_available=system.is_available,
        describe=system.describe,
        description="PyTorch CUDA: ATen kernels (cuBLAS, cuDNN, fused SDPA), cuBLASLt epilogues, the ATen fallback",
        install_hint=f"pip install 'opcore[cuda]' with a CUDA build of torch ({system.TORCH_INSTALL_URL})",
    )


@hookimpl
def opcore_register_kernels(registrar: Registrar) -> None:
    """The shared torch kernels for CUDA, the cuBLASLt epilogue kernels on top, and the ATen fallback."""
    from opcore.extend import register_aten_fallback, register_torch_kernels

    # imported here, not with the module: without a usable GPU nothing registers, and the first
    # opcore.run need not derive the CUDA dtype tables (issue 15)
    from opcore_cuda import choice
    from opcore_cuda.dtypes import CUBLASLT_DTYPES, CUDA_DIFFERENCES

    known = registrar.contracts
    register_torch_kernels(
        registrar,
        DeviceType.CUDA,
        CUDA_DIFFERENCES,
        overrides=CUDA_OVERRIDES,
    )
    for op, (kernel, prepare, checker) in _CUBLASLT.items():
        if op not in known:
            continue
        registrar.add_kernel(
            op,
            kernel,
            dtypes=CUBLASLT_DTYPES,
            device_type=DeviceType.CUDA,
            array_kind=ArrayKind.TORCH,
            priority=CUBLASLT_PRIORITY,
            checker=getattr(choice, checker),
            prepare=prepare,
            live_constants=True,  # its prepare keeps w.t() (a view) and b: read in place
            label=CUBLASLT_LABEL,
        )
    register_aten_fallback(registrar, DeviceType.CUDA)
