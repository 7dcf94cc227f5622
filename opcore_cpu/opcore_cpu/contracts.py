"""conv2d + activation contracts, contributed by this plugin while the core has none.

They follow the core's fused linear ops: the conv2d schema, conv2d's meta function, and a
decomposition into ``conv2d`` then the activation (each dispatched on its own), so every backend
serves them; this backend runs them as one oneDNN call. When the core defines an op of the
same name, the core's contract wins and the plugin only adds kernels.

>>> CONV2D_RELU.name, CONV2D_SILU.name
('conv2d_relu', 'conv2d_silu')
"""

from __future__ import annotations

from typing import Any

from opcore.extend import FLOATING, NUMERIC, OpContract, TensorMeta, check_floating, conv2d_meta, define_op

__all__ = ["CONTRACTS", "CONV2D_RELU", "CONV2D_SILU"]

_ARGUMENTS = (
    "Tensor x, Tensor weight, Tensor? bias=None, int[2] stride=1, int[2] padding=0, int[2] dilation=1, int groups=1"
)


def conv2d_float_meta(
    x: TensorMeta,
    weight: TensorMeta,
    bias: TensorMeta | None,
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    groups: int,
) -> TensorMeta:
    """conv2d's checks, floating dtypes only (silu needs them)."""
    out = conv2d_meta(x, weight, bias, stride, padding, dilation, groups)
    check_floating("x", x)
    return out


def conv2d_relu_decomposition(*args: Any) -> Any:
    from opcore.extend import run

    return run("relu", run("conv2d", *args))


def conv2d_silu_decomposition(*args: Any) -> Any:
    from opcore.extend import run

    return run("silu", run("conv2d", *args))


CONV2D_RELU = define_op(
    f"conv2d_relu({_ARGUMENTS}) -> Tensor",
    meta=conv2d_meta,
    dtypes=NUMERIC,
    doc="relu(conv2d(...)) in one call; mirrors torch.relu(torch.nn.functional.conv2d(...)).",
    tags=("convolution", "fused"),
    decomposition=conv2d_relu_decomposition,
)
CONV2D_SILU = define_op(
    f"conv2d_silu({_ARGUMENTS}) -> Tensor",
    meta=conv2d_float_meta,
    dtypes=FLOATING,
    doc="silu(conv2d(...)) in one call, floating dtypes only; mirrors "
    "torch.nn.functional.silu(torch.nn.functional.conv2d(...)).",
    tags=("convolution", "fused"),
    decomposition=conv2d_silu_decomposition,
)

CONTRACTS: tuple[OpContract, ...] = (CONV2D_RELU, CONV2D_SILU)
