"""Pooling contracts: max_pool2d, avg_pool2d, adaptive_avg_pool2d over (N, C, H, W) or (C, H, W).

>>> from opcore.types import TensorMeta, DType
>>> MAX_POOL2D.meta(TensorMeta((1, 2, 7, 7), DType.FLOAT32), (3, 3), (2, 2), (1, 1), (1, 1), True, False).shape
(1, 2, 4, 4)
"""

from __future__ import annotations

from functools import partial

from opcore.contracts import OpContract, define_op
from opcore.errors import ArgumentError, ShapeError
from opcore.meta import FLOATING, NUMERIC, check_dtype, check_floating, check_positive, check_rank, shape_text
from opcore.types import DType, TensorMeta

# every op defined here is of this module's family (opcore.opset.family_contracts checks it)
define = partial(define_op, family="pooling")

__all__ = [
    "ADAPTIVE_AVG_POOL2D",
    "AVG_POOL2D",
    "CONTRACTS",
    "MAX_POOL2D",
    "adaptive_bounds",
    "adaptive_output_size",
    "pooled_size",
]

_INPUT = "a 3-D (C, H, W) or 4-D (N, C, H, W) input"


def pooled_size(size: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool) -> int:
    """torch's output size of one pooled dim: floor (or ceil) of the windows that fit, where with
    ceil_mode a last window must start inside the input or its left padding.

    >>> pooled_size(7, 3, 2, 1, 1, True), pooled_size(6, 2, 2, 0, 1, True)
    (4, 3)
    """
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def adaptive_bounds(size: int, out: int) -> list[tuple[int, int]]:
    """The [start, end) window of each output of adaptive pooling: floor(i * size / out) to
    ceil((i + 1) * size / out), so windows may overlap by one.

    >>> adaptive_bounds(5, 3)
    [(0, 2), (1, 4), (3, 5)]
    """
    return [((i * size) // out, -(-((i + 1) * size) // out)) for i in range(out)]


def _check_input(x: TensorMeta) -> None:
    """3-D or 4-D, no empty dim but a 4-D input's batch."""
    check_rank("x", x, (3, 4), what=_INPUT)
    if 0 in (x.shape[1:] if x.ndim == 4 else x.shape):
        raise ShapeError(
            arg="x",
            expected=f"{_INPUT} with non-zero sizes but the batch (N)",
            found=f"shape {shape_text(x.shape)}",
        )


def _pool_meta(
    op: str,
    x: TensorMeta,
    kernel_size: tuple[int, ...],
    stride: tuple[int, ...] | None,
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    ceil_mode: bool,
) -> TensorMeta:
    _check_input(x)
    check_positive("kernel_size", kernel_size)
    steps = kernel_size if stride is None else stride
    check_positive("stride", steps)
    check_positive("padding", padding, allow_zero=True)
    check_positive("dilation", dilation)
    for p, k in zip(padding, kernel_size):
        if p > k // 2:
            raise ArgumentError(
                arg="padding",
                expected=f"at most half the kernel size {list(kernel_size)} on each dim",
                found=str(list(padding)),
                fix="pad the input first (opcore pad), or use a larger kernel",
            )
    spatial = [
        pooled_size(size, k, s, p, d, ceil_mode)
        for size, k, s, p, d in zip(x.shape[-2:], kernel_size, steps, padding, dilation)
    ]
    if min(spatial) < 1:
        raise ShapeError(
            arg="x",
            expected=f"(H, W) large enough for at least one {op} window (kernel {list(kernel_size)}, "
            f"dilation {list(dilation)}, padding {list(padding)})",
            found=f"shape {shape_text(x.shape)}, giving output size {shape_text(spatial)}",
        )
    return TensorMeta((*x.shape[:-2], *spatial), x.dtype, x.device)


def max_pool2d_meta(
    x: TensorMeta,
    kernel_size: tuple[int, ...],
    stride: tuple[int, ...] | None,
    padding: tuple[int, ...],
    dilation: tuple[int, ...],
    ceil_mode: bool,
    return_indices: bool = False,
) -> TensorMeta | tuple[TensorMeta, TensorMeta]:
    """torch's pool2d_shape_check: positive kernel, stride and dilation, padding at most half the
    kernel, at least one window; integer and floating dtypes. return_indices: also the int64 index
    of each max within its (H, W) plane, h * W + w (torch's)."""
    check_dtype("x", x, NUMERIC, fix="convert a bool tensor to uint8 first")
    out = _pool_meta("max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode)
    if return_indices:
        return out, TensorMeta(out.shape, DType.INT64, x.device)
    return out


def avg_pool2d_meta(
    x: TensorMeta,
    kernel_size: tuple[int, ...],
    stride: tuple[int, ...] | None,
    padding: tuple[int, ...],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> TensorMeta:
    """As max_pool2d's (no dilation); floating dtypes and int64 (torch's CPU kernel); a non-zero divisor."""
    check_dtype("x", x, FLOATING | {DType.INT64}, fix="convert x to a floating dtype first")
    if divisor_override is not None and divisor_override == 0:
        raise ArgumentError(arg="divisor_override", expected="a non-zero divisor or None", found="0")
    return _pool_meta("avg_pool2d", x, kernel_size, stride, padding, (1, 1), ceil_mode)


def adaptive_output_size(input_size: tuple[int, ...], output_size: tuple[int | None, ...]) -> tuple[int, ...]:
    """adaptive pooling's (H, W) out: output_size with None as the input's own size (torch's
    ``output_size=(None, 7)``). Every backend's kernel resolves it with this.

    >>> adaptive_output_size((5, 9), (None, 3))
    (5, 3)
    """
    return tuple(size if out is None else out for size, out in zip(input_size[-2:], output_size))


def adaptive_avg_pool2d_meta(x: TensorMeta, output_size: tuple[int | None, ...]) -> TensorMeta:
    """(N, C) kept (either may be empty), (H, W) -> output_size (None: that input size); floating dtypes."""
    check_rank("x", x, (3, 4), what=_INPUT)
    if 0 in x.shape[-2:]:
        raise ShapeError(arg="x", expected=f"{_INPUT} with non-zero H and W", found=f"shape {shape_text(x.shape)}")
    check_floating("x", x)
    resolved = adaptive_output_size(x.shape, output_size)
    check_positive("output_size", resolved, allow_zero=True)
    return TensorMeta((*x.shape[:-2], *resolved), x.dtype, x.device)


MAX_POOL2D = define(
    "max_pool2d(Tensor x, int[2] kernel_size, int[2]? stride=None, int[2] padding=0, int[2] dilation=1, "
    "bool ceil_mode=False, bool return_indices=False) -> Tensor",
    meta=max_pool2d_meta,
    dtypes=NUMERIC,
    doc="The largest value of each (dilated) window, padding never chosen (stride None: kernel_size); "
    "return_indices: and where each was (h * W + w, int64); mirrors torch.nn.functional.max_pool2d.",
    tags=("pooling", "reduction"),
)
AVG_POOL2D = define(
    "avg_pool2d(Tensor x, int[2] kernel_size, int[2]? stride=None, int[2] padding=0, bool ceil_mode=False, "
    "bool count_include_pad=True, int? divisor_override=None) -> Tensor",
    meta=avg_pool2d_meta,
    dtypes=FLOATING | {DType.INT64},
    doc="The mean of each window (count_include_pad: zero padding counts in the divisor); "
    "mirrors torch.nn.functional.avg_pool2d.",
    tags=("pooling", "reduction"),
)
ADAPTIVE_AVG_POOL2D = define(
    "adaptive_avg_pool2d(Tensor x, int?[2] output_size) -> Tensor",
    meta=adaptive_avg_pool2d_meta,
    dtypes=FLOATING,
    doc="The mean over output_size windows spread evenly over (H, W) (None: that input size); "
    "mirrors torch.nn.functional.adaptive_avg_pool2d.",
    tags=("pooling", "reduction"),
)

CONTRACTS: tuple[OpContract, ...] = (MAX_POOL2D, AVG_POOL2D, ADAPTIVE_AVG_POOL2D)
