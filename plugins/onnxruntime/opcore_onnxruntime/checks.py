"""Checkers: what the ONNX Runtime kernels decline, and why (``opcore.explain`` shows the reason).

They see TensorMeta and attribute values only (their answers are cached per signature), and
import nothing heavy: this module is loaded with the plugin.

>>> from opcore.extend import TensorMeta, DType
>>> checker_for("conv2d")(TensorMeta((1, 2, 4, 4), DType.FLOAT64), TensorMeta((3, 2, 3, 3), DType.FLOAT64),
...                       None, (1, 1), (0, 0), (1, 1), 1)
"ONNX Runtime's CPU Conv has float32 and float16 kernels only, found float64"
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opcore.extend import DType, TensorMeta, dtype_checker, result_type

__all__ = ["BFLOAT16_REASON", "checker_for"]

Checker = Callable[..., "bool | str"]

BFLOAT16_REASON = (
    "bfloat16 is not offered: ONNX Runtime kernels take numpy arrays, which have no bfloat16 "
    "(use float32, or the cpu backend for bfloat16)"
)
_CONV_DTYPES = frozenset({DType.FLOAT32, DType.FLOAT16})


def _gelu_float64(x: TensorMeta, approximate: str) -> bool | str:
    if x.dtype is DType.FLOAT64 and approximate == "none":
        return "ONNX Runtime has no float64 Gelu or Erf kernel (approximate='tanh' works in float64)"
    return True


# What an op's kernel declines for the dtype that picks it alone: never offered for these dtypes
# (dtype_checker's ``keyed`` rule; `opcore ops --matrix` says "no").
def _erf_dtype(dtype: DType) -> str | None:
    if dtype is DType.FLOAT64:
        return "ONNX Runtime has no float64 Erf kernel (use float32, or another backend for float64)"
    return None


def _conv_dtype(dtype: DType) -> str | None:
    if dtype not in _CONV_DTYPES:
        return f"ONNX Runtime's CPU Conv has float32 and float16 kernels only, found {dtype}"
    return None


def _max_pool_dtype(dtype: DType) -> str | None:
    if dtype is DType.INT64:
        return "ONNX Runtime's MaxPool has no int64 kernel (and float64 is inexact beyond 2**53)"
    return None


def _avg_pool_dtype(dtype: DType) -> str | None:
    if dtype is DType.INT64:
        return "ONNX Runtime's AveragePool has no int64 kernel (torch truncates the integer mean)"
    return None


def _wq_dtype(dtype: DType) -> str | None:
    if dtype is DType.FLOAT64:
        return "ONNX Runtime's MatMulNBits has float32 and float16 kernels only, found float64"
    return None


def _linear_wq(x: TensorMeta, qweight: TensorMeta, *rest: Any) -> bool | str:
    from opcore.extend import group_of, nbits_block

    group_size = rest[-1]
    k = x.shape[-1]
    if k == 0 or 0 in x.shape:
        return "MatMulNBits takes no empty x or weight"
    group = group_of(group_size, k)
    if nbits_block(group) is None:
        return f"MatMulNBits' blocks are powers of two >= 16: a group of {group} inputs is made of none"
    return True


def _pad_dtype(dtype: DType) -> str | None:
    return "ONNX Runtime has no int16 Pad kernel" if dtype is DType.INT16 else None


_KEYED: dict[str, Callable[[DType], str | None]] = {
    "erf": _erf_dtype,
    "conv1d": _conv_dtype,
    "conv2d": _conv_dtype,
    "max_pool2d": _max_pool_dtype,
    "avg_pool2d": _avg_pool_dtype,
    "pad": _pad_dtype,
    "linear_wq": _wq_dtype,
}


def _linear_gelu(x: TensorMeta, w: TensorMeta, b: TensorMeta | None, approximate: str) -> bool | str:
    return _gelu_float64(x, approximate)


def _sdpa(query: TensorMeta, key: TensorMeta, *rest: Any) -> bool | str:
    if query.shape[-1] == 0:
        # the graph optimizer fuses the key's Transpose and the scale into FusedMatMul, which reads
        # stale memory (or fails) for an empty inner dimension
        return "ONNX Runtime's fused attention MatMul mishandles an empty embedding dimension (E = 0)"
    return True


def _target(dtype: str | None) -> bool | str:
    if dtype is not None and DType.parse(dtype) is DType.BFLOAT16:
        return BFLOAT16_REASON
    return True


def _cast(x: TensorMeta, dtype: str) -> bool | str:
    return _target(dtype)


def _cumsum(x: TensorMeta, dim: int, dtype: str | None) -> bool | str:
    return _target(dtype)


def _pow(x: TensorMeta, exponent: Any) -> bool | str:
    if not result_type(x, exponent).is_floating:
        return (
            "integral pow is left to other backends: torch wraps on overflow and gives 0 (or +-1) for "
            "negative exponents, which this builder does not reproduce"
        )
    return True


def _like(x: TensorMeta, *rest: Any) -> bool | str:
    return _target(rest[-2])  # (fill_value,) dtype, device (x's own: the contract checked it)


def _max_pool2d(x: TensorMeta, *rest: Any) -> bool | str:
    if rest[-1]:  # return_indices
        return (
            "ONNX Runtime's MaxPool indices are not mapped to torch's (h * W + w per plane) here: return_indices=True "
            "is left to other backends"
        )
    return True


def _avg_pool2d(x: TensorMeta, *rest: Any) -> bool | str:
    if rest[-1] is not None:
        return "ONNX's AveragePool has no divisor_override"
    return True


def _pad(x: TensorMeta, pad: tuple[int, ...], mode: str, value: Any) -> bool | str:
    """ONNX Runtime's reflect, edge and wrap Pad fail on an empty x and on a dim its negative pads cut
    to nothing before the other side grows it (torch reads the uncut dim there)."""
    if mode == "constant":
        return True
    if 0 in x.shape:
        return f"ONNX Runtime's Pad fails on an empty x in mode {mode!r}"
    for i in range(len(pad) // 2):
        if x.shape[x.ndim - 1 - i] + min(pad[2 * i], 0) + min(pad[2 * i + 1], 0) <= 0:
            return f"ONNX Runtime's Pad in mode {mode!r} fails where negative pads cut a dim to nothing"
    return True


def _group_norm(x: TensorMeta, *rest: Any) -> bool | str:
    if 0 in x.shape:
        return "an empty x: the (N, groups, -1) view of group_norm is ambiguous to ONNX Runtime's Reshape"
    return True


_SPECIFIC: dict[str, Checker] = {
    "group_norm": _group_norm,
    "zeros_like": _like,
    "ones_like": _like,
    "full_like": _like,
    "pow": _pow,
    "cast": _cast,
    "cumsum": _cumsum,
    "avg_pool2d": _avg_pool2d,
    "max_pool2d": _max_pool2d,
    "pad": _pad,
    "scaled_dot_product_attention": _sdpa,
    "gelu": _gelu_float64,
    "linear_gelu": _linear_gelu,
    "linear_wq": _linear_wq,
}


def _bfloat16(dtype: DType) -> str | None:
    return BFLOAT16_REASON if dtype is DType.BFLOAT16 else None


def checker_for(op: str) -> Checker:
    """The checker of ``op``'s kernel: bfloat16 is declined for every op, then the op's own rules."""
    return dtype_checker(op, _bfloat16, _SPECIFIC.get(op), keyed=_KEYED.get(op))
