"""Checkers: what the OpenVINO kernels decline, and why (``opcore.explain`` shows the reason).

The CPU plugin runs float64 as float32 and int64 as int32, saturates int8/uint8 arithmetic,
and computes integer matrix products, Relu and division in float32: results that would differ
from PyTorch's are declined here rather than returned. Checkers see TensorMeta and attribute
values only (their answers are cached per signature) and import nothing heavy.

>>> from opcore.extend import TensorMeta, DType
>>> checker_for("relu")(TensorMeta((2,), DType.FLOAT64))
"OpenVINO's CPU plugin computes float64 in float32 (use float32, or another backend for float64)"
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import numpy

from opcore.extend import DType, TensorMeta, arange_meta, dtype_checker, pooled_size, result_type, tensor_metas

__all__ = ["BFLOAT16_REASON", "checker_for"]

Checker = Callable[..., "bool | str"]

BFLOAT16_REASON = (
    "bfloat16 is not offered: OpenVINO kernels here take numpy arrays, which have no bfloat16 "
    "(use float32, or the cpu backend for bfloat16)"
)
FLOAT64_REASON = "OpenVINO's CPU plugin computes float64 in float32 (use float32, or another backend for float64)"
INT64_REASON = "OpenVINO's CPU plugin narrows int64 to int32 (use int32, or another backend for int64)"
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

# True while checking a call whose int64 inputs and integer result a graph plan proved to fit int32
# (TensorMeta.bounds, opcore.graph.ranges): the plugin's narrowing then loses nothing
_NARROWING_PROVEN: ContextVar[bool] = ContextVar("opcore_openvino_narrowing_proven", default=False)


def _dtype_reason(dtype: DType) -> str | None:
    if dtype is DType.BFLOAT16:
        return BFLOAT16_REASON
    if dtype is DType.FLOAT64:
        return FLOAT64_REASON
    if dtype is DType.INT64 and not _NARROWING_PROVEN.get():
        return INT64_REASON
    return None


def _operand(x: TensorMeta, other: Any) -> bool | str:
    if isinstance(other, int) and not isinstance(other, bool) and not _INT32_MIN <= other <= _INT32_MAX:
        return f"the Python int {other} does not fit in int32, which OpenVINO's CPU plugin computes in"
    out = result_type(x, other)
    reason = _dtype_reason(out)
    return f"the result would be {out}: {reason}" if reason else True


def _add(x: TensorMeta, other: Any, alpha: Any) -> bool | str:
    return _operand(x, other)


def _mul(x: TensorMeta, other: Any) -> bool | str:
    return _operand(x, other)


def _div(x: TensorMeta, other: Any, rounding_mode: str | None) -> bool | str:
    verdict = _operand(x, other)
    if verdict is not True or rounding_mode is None:
        return verdict
    if not result_type(x, other).is_floating:
        return (
            f"integer division with rounding_mode={rounding_mode!r}: OpenVINO's CPU plugin divides "
            "integers in float32 (inexact beyond 2**24)"
        )
    if result_type(x, other) is DType.FLOAT16:
        # the model runs in float32 under the precision hint, and the plugin folds a Convert to f16
        # away: the quotient is not rounded to float16 before truncation (5.999 -> 5, torch: 6.0 -> 6)
        return f"rounding_mode={rounding_mode!r} of float16: OpenVINO rounds the quotient in float32, not float16"
    if rounding_mode == "floor":
        # torch's floor division goes through an exact fmod; OpenVINO's Mod is a - trunc(a / b) * b
        # in float32, so quotients that round up to an integer (1.0 // 0.1) would come out one too high
        return "rounding_mode='floor': OpenVINO's float Mod is not exact, so floor division could be off by one"
    return True


# What an op's kernel declines for the dtype that picks it alone: never offered for these dtypes
# (dtype_checker's ``keyed`` rule; `opcore ops --matrix` says "no").
def _product_dtype(dtype: DType) -> str | None:
    if not dtype.is_floating:
        return (
            f"OpenVINO's CPU plugin computes {dtype} matrix products in float32 "
            "(inexact beyond 2**24, saturating where torch wraps)"
        )
    return None


def _conv_dtype(dtype: DType) -> str | None:
    if not dtype.is_floating:
        return f"OpenVINO's CPU plugin computes {dtype} convolutions in float32 (inexact beyond 2**24)"
    return None


def _max_pool_dtype(dtype: DType) -> str | None:
    return "OpenVINO's CPU plugin pools int32 in float32 (inexact beyond 2**24)" if dtype is DType.INT32 else None


_KEYED: dict[str, Callable[[DType], str | None]] = {
    **dict.fromkeys(("linear", "linear_relu", "matmul", "bmm", "addmm"), _product_dtype),
    "conv1d": _conv_dtype,
    "conv2d": _conv_dtype,
    "max_pool2d": _max_pool_dtype,
}


def _sdpa(query: TensorMeta, key: TensorMeta, value: TensorMeta, *rest: Any) -> bool | str:
    if key.shape[-2] == 0 or query.shape[-1] == 0:
        return "OpenVINO's ScaledDotProductAttention gives wrong values for an empty key sequence or embedding"
    return True


def _gather(x: TensorMeta, dim: int, index: TensorMeta) -> bool | str:
    axis = dim % max(x.ndim, 1)
    if any(have != size for d, (have, size) in enumerate(zip(index.shape, x.shape)) if d != axis):
        # a Slice of x to index's sizes is optimized away by the CPU plugin, so it cannot be fixed in the graph
        return "OpenVINO's GatherElements needs index as large as x on every dim but dim (torch allows smaller)"
    return True


def _int_operands(*values: Any) -> bool | str:
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and not _INT32_MIN <= value <= _INT32_MAX:
            return f"the Python int {value} does not fit in int32, which OpenVINO's CPU plugin computes in"
    return True


def _result(out: DType, what: str) -> bool | str:
    reason = _dtype_reason(out)
    return f"{what} would be {out}: {reason}" if reason else True


def _pow(x: TensorMeta, exponent: Any) -> bool | str:
    verdict = _operand(x, exponent)
    if verdict is True and not result_type(x, exponent).is_floating:
        return "integral pow is left to other backends (torch wraps and has its own rule for negative exponents)"
    return verdict


def _cast(x: TensorMeta, dtype: str) -> bool | str:
    return _result(DType.parse(dtype), "the result")


def _sum(x: TensorMeta, *rest: Any) -> bool | str:
    return True if x.dtype.is_floating else _result(DType.INT64, "the sum of integers")


def _cumsum(x: TensorMeta, dim: int, dtype: str | None) -> bool | str:
    out = DType.parse(dtype) if dtype is not None else x.dtype if x.dtype.is_floating else DType.INT64
    if not out.is_floating and not _NARROWING_PROVEN.get():
        return f"the running sum would be {out}: OpenVINO's CPU plugin computes integer sums in int32 or float32"
    return _result(out, "the running sum")


def _softmax(x: TensorMeta, dim: int, dtype: str | None = None) -> bool | str:
    """softmax(x, dim, dtype=...): x is cast to dtype first, which must be one the CPU plugin computes in."""
    return True if dtype is None else _result(DType.parse(dtype), "the result")


def _pad(x: TensorMeta, pad: tuple[int, ...], mode: str, value: Any) -> bool | str:
    if mode == "circular":
        return "OpenVINO's Pad has no circular mode"
    if mode != "constant" and 0 in x.shape:
        return f"OpenVINO's CPU plugin fails on an empty x in Pad mode {mode!r}"
    return True


def _max_pool2d(x: TensorMeta, *rest: Any) -> bool | str:
    if rest[-1]:  # return_indices
        return (
            "OpenVINO's MaxPool indices are not mapped to torch's (h * W + w per plane) here: return_indices=True "
            "is left to other backends"
        )
    return True


def _where(condition: TensorMeta, x: Any, other: Any) -> bool | str:
    verdict = _int_operands(x, other)
    return verdict if verdict is not True else _result(result_type(x, other), "the result")


def _masked_fill(x: TensorMeta, mask: TensorMeta, value: Any) -> bool | str:
    return _int_operands(value)


def _clamp(x: TensorMeta, min: Any, max: Any) -> bool | str:
    verdict = _int_operands(min, max)
    bounds = [b for b in (min, max) if b is not None]
    return verdict if verdict is not True else _result(result_type(x, *bounds), "the result")


def _like(x: TensorMeta, *rest: Any) -> bool | str:
    dtype = rest[-2]  # (fill_value,) dtype, device (x's own: the contract checked it)
    return True if dtype is None else _result(DType.parse(dtype), "the result")


def _arange(start: Any, end: Any, step: Any, dtype: str | None, device: str) -> bool | str:
    """An integer arange counts from int(start) by int(step): its values must fit the dtype
    (its dtype itself is the checker's dtype rule, applied to a creation op's result)."""
    out = arange_meta(start, end, step, dtype, device)
    if out.dtype.is_floating or not out.shape[0]:
        return True
    first = int(start) if end is not None else 0
    last = first + int(step) * (out.shape[0] - 1)
    info = numpy.iinfo(out.dtype.value)
    if not (info.min <= min(first, last) and max(first, last) <= info.max):
        return f"values beyond {out.dtype} (torch wraps them; OpenVINO's Convert saturates)"
    return True


def _avg_pool2d(
    x: TensorMeta,
    kernel_size: tuple[int, ...],
    stride: tuple[int, ...] | None,
    padding: tuple[int, ...],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> bool | str:
    if divisor_override is not None:
        return "OpenVINO's AvgPool has no divisor_override"
    if ceil_mode and count_include_pad:
        steps = stride or kernel_size
        for size, k, s, p in zip(x.shape[-2:], kernel_size, steps, padding):
            if (pooled_size(size, k, s, p, 1, True) - 1) * s + k > size + 2 * p:
                # torch divides such a window by its part inside the padded input
                return "OpenVINO's AvgPool divides a ceil_mode window that overhangs the padding by the whole kernel"
    return True


def _adaptive_avg_pool2d(x: TensorMeta, output_size: tuple[int, ...]) -> bool | str:
    if 0 in output_size:
        return "OpenVINO's AdaptiveAvgPool mishandles an empty output size"
    return True


def _linear_wq(x: TensorMeta, *rest: Any) -> bool | str:
    if 0 in x.shape:
        return "an empty x or weight: the decompression's reshape has nothing to take"
    return True


_SPECIFIC: dict[str, Checker] = {
    "linear_wq": _linear_wq,
    "zeros_like": _like,
    "ones_like": _like,
    "full_like": _like,
    "arange": _arange,
    "pow": _pow,
    "cast": _cast,
    "sum": _sum,
    "cumsum": _cumsum,
    "softmax": _softmax,
    "pad": _pad,
    "max_pool2d": _max_pool2d,
    "log_softmax": _softmax,
    "where": _where,
    "masked_fill": _masked_fill,
    "clamp": _clamp,
    "avg_pool2d": _avg_pool2d,
    "adaptive_avg_pool2d": _adaptive_avg_pool2d,
    "gather": _gather,
    "scaled_dot_product_attention": _sdpa,
    "add": _add,
    "sub": _add,
    "mul": _mul,
    "minimum": _mul,
    "div": _div,
    **dict.fromkeys(("eq", "ne", "lt", "le", "gt", "ge"), _mul),
}
# the indices of embedding, embedding_wq, gather and index (arguments 0, 0, 2 and 1) may be int64:
# they are below a dim's size
_SKIP = {"embedding": 0, "embedding_wq": 0, "gather": 2, "index": 1}


def checker_for(op: str) -> Checker:
    """The checker of ``op``'s kernel: bfloat16, float64 and int64 tensors are declined, then the op's rules.

    A graph plan shows the checker an int64 tensor it proves to fit int32 as int32 with its
    ``bounds`` (the partition compiler's ``int64_as``, see opcore.graph.ranges): the op's rules
    then also accept an integer result (int64 in torch) whose range the bounds prove within int32,
    since the CPU plugin's narrowing then keeps every value. A single call has no bounds.
    """
    return dtype_checker(op, _dtype_reason, _proven(op), skip=_SKIP.get(op), keyed=_KEYED.get(op))


def _proven(op: str) -> Checker | None:
    """``op``'s own rules, run with int64 results allowed where the arguments' bounds prove that the
    result fits int32 (``opcore.graph.ranges.narrowing_refused``); as they are without bounds."""
    found = _SPECIFIC.get(op)
    if found is None:
        return None
    specific: Checker = found
    skip = _SKIP.get(op)

    def check(*args: Any) -> bool | str:
        if not any(m.bounds is not None for m in tensor_metas(args)):
            return specific(*args)
        from opcore.extend import narrowing_refused

        if narrowing_refused(op, args, DType.INT32, skip) is not None:
            return specific(*args)
        token = _NARROWING_PROVEN.set(True)
        try:
            return specific(*args)
        finally:
            _NARROWING_PROVEN.reset(token)

    return check
