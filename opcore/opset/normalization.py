"""Normalization contracts: softmax, log_softmax, layer_norm, rms_norm, batch_norm (inference), group_norm.

>>> from opcore.types import TensorMeta, DType
>>> LAYER_NORM.meta(TensorMeta((2, 8), DType.FLOAT16), (8,), None, None, 1e-5).dtype
<DType.FLOAT16: 'float16'>
"""

from __future__ import annotations

from functools import partial

from opcore.contracts import OpContract, define_op
from opcore.errors import ArgumentError, DTypeError, ShapeError
from opcore.meta import FLOATING, check_floating, normalize_dim, shape_text
from opcore.types import DType, TensorMeta

# every op defined here is of this module's family (opcore.opset.family_contracts checks it)
define = partial(define_op, family="normalization")

__all__ = ["BATCH_NORM", "CONTRACTS", "GROUP_NORM", "LAYER_NORM", "LOG_SOFTMAX", "RMS_NORM", "SOFTMAX"]

# torch's CPU kernels keep the parameters of a float16/bfloat16 input in float32 if asked to
_REDUCED = frozenset({DType.FLOAT16, DType.BFLOAT16})


def softmax_meta(x: TensorMeta, dim: int, dtype: str | None = None) -> TensorMeta:
    """Same shape; x's dtype, floating only, or (torch's ``dtype=``) x cast to the floating ``dtype``
    first; a dim within range. An integer x is refused even with a dtype (torch casts it): the
    kernels are the floating ones, so the cast is the caller's, with its fix in the message."""
    check_floating("x", x)
    if dtype is None:
        out = x.dtype
    else:
        out = DType.parse(dtype)
        if out not in FLOATING:
            raise DTypeError(
                arg="dtype",
                expected="a floating dtype (x is cast to it first)",
                found=out.value,
                fix="pass dtype=torch.float32 (or leave it out for x's own floating dtype)",
            )
    normalize_dim("dim", dim, x.ndim)
    return TensorMeta(x.shape, out, x.device)


def _check_normalized_shape(x: TensorMeta, normalized_shape: tuple[int, ...]) -> None:
    if not normalized_shape:
        raise ArgumentError(
            arg="normalized_shape",
            expected="at least one size (the trailing sizes of 'x' to normalize over)",
            found="()",
        )
    count = len(normalized_shape)
    if count > x.ndim or x.shape[x.ndim - count :] != normalized_shape:
        raise ShapeError(
            arg="normalized_shape",
            expected=f"the trailing sizes of 'x' {shape_text(x.shape)}",
            found=shape_text(normalized_shape),
            fix="pass x.shape[-k:] for the last k dimensions",
        )


def _check_parameter_shape(name: str, parameter: TensorMeta | None, normalized_shape: tuple[int, ...]) -> None:
    if parameter is not None and parameter.shape != normalized_shape:
        raise ShapeError(
            arg=name,
            expected=f"the shape normalized_shape = {shape_text(normalized_shape)}",
            found=f"shape {shape_text(parameter.shape)}",
        )


def layer_norm_meta(
    x: TensorMeta,
    normalized_shape: tuple[int, ...],
    weight: TensorMeta | None,
    bias: TensorMeta | None,
    eps: float,
) -> TensorMeta:
    """normalized_shape = the trailing sizes of x; weight and bias of that shape, in x's dtype
    (or float32 for a float16/bfloat16 x, as torch's CPU kernel allows).
    """
    check_floating("x", x)
    _check_normalized_shape(x, normalized_shape)
    _check_parameter_shape("weight", weight, normalized_shape)
    _check_parameter_shape("bias", bias, normalized_shape)
    allowed = (x.dtype, DType.FLOAT32) if x.dtype in _REDUCED else (x.dtype,)
    first: tuple[str, TensorMeta] | None = None
    for name, parameter in (("weight", weight), ("bias", bias)):
        if parameter is None:
            continue
        if parameter.dtype not in allowed or (first is not None and parameter.dtype is not first[1].dtype):
            wanted = " or ".join(d.value for d in allowed)
            also = f", the same as '{first[0]}' ({first[1].dtype})" if first is not None else ""
            raise DTypeError(
                arg=name,
                expected=f"the dtype of 'x' ({wanted}){also}",
                found=parameter.dtype.value,
                fix="convert weight and bias to the dtype of x",
            )
        first = first or (name, parameter)
    return TensorMeta(x.shape, x.dtype, x.device)


def rms_norm_meta(
    x: TensorMeta, normalized_shape: tuple[int, ...], weight: TensorMeta | None, eps: float | None
) -> TensorMeta:
    """normalized_shape = the trailing sizes of x; a floating weight of that shape."""
    check_floating("x", x)
    _check_normalized_shape(x, normalized_shape)
    _check_parameter_shape("weight", weight, normalized_shape)
    if weight is not None:
        check_floating("weight", weight)
    return TensorMeta(x.shape, x.dtype, x.device)


def _check_parameter_dtypes(x: TensorMeta, named: list[tuple[str, TensorMeta]], fix: str) -> None:
    """Every parameter of one dtype: x's, or float32 for a float16/bfloat16 x (torch's CPU kernels
    refuse other mixes)."""
    if not named:
        return
    allowed = (x.dtype, DType.FLOAT32) if x.dtype in _REDUCED else (x.dtype,)
    first_name, first = named[0]
    for name, parameter in named:
        if parameter.dtype not in allowed or parameter.dtype is not first.dtype:
            wanted = " or ".join(d.value for d in allowed)
            also = f", the same as '{first_name}' ({first.dtype})" if name != first_name else ""
            raise DTypeError(arg=name, expected=f"the dtype of 'x' ({wanted}){also}", found=parameter.dtype.value,
                             fix=fix)  # fmt: skip


def group_norm_meta(
    x: TensorMeta, num_groups: int, weight: TensorMeta | None, bias: TensorMeta | None, eps: float
) -> TensorMeta:
    """x (N, C, ...) normalized over each of num_groups groups of channels (and the dims after C);
    weight and bias of shape (C,), of x's dtype (or float32 for a float16/bfloat16 x)."""
    check_floating("x", x)
    if x.ndim < 2:
        raise ShapeError(arg="x", expected="a tensor (N, C, ...) of at least 2 dimensions",
                         found=f"shape {shape_text(x.shape)}")  # fmt: skip
    channels = x.shape[1]
    if num_groups <= 0:
        raise ArgumentError(arg="num_groups", expected="a positive number of groups", found=str(num_groups))
    if channels % num_groups:
        raise ShapeError(
            arg="num_groups",
            expected=f"a divisor of the {channels} channels (dim 1) of 'x' {shape_text(x.shape)}",
            found=str(num_groups),
        )
    named = [(n, p) for n, p in (("weight", weight), ("bias", bias)) if p is not None]
    for name, parameter in named:
        if parameter.shape != (channels,):
            raise ShapeError(arg=name, expected=f"shape ({channels},): one value per channel (dim 1) of 'x'",
                             found=f"shape {shape_text(parameter.shape)}")  # fmt: skip
    _check_parameter_dtypes(x, named, "convert weight and bias to the dtype of x")
    return TensorMeta(x.shape, x.dtype, x.device)


def batch_norm_meta(
    x: TensorMeta,
    running_mean: TensorMeta,
    running_var: TensorMeta,
    weight: TensorMeta | None,
    bias: TensorMeta | None,
    training: bool,
    momentum: float,
    eps: float,
) -> TensorMeta:
    """Inference only: x (N, C, ...) normalized per channel (dim 1) by the running statistics; the
    statistics, weight and bias of shape (C,), all of one dtype: x's, or float32 for a
    float16/bfloat16 x (torch's CPU kernel refuses other mixes).
    """
    if training:
        raise ArgumentError(
            arg="training",
            expected="False (opcore is inference-only: the running statistics are used, not updated)",
            found="True",
            fix="pass training=False (module.eval()); train in the training framework",
        )
    check_floating("x", x)
    if x.ndim < 2:
        raise ShapeError(arg="x", expected="a tensor (N, C, ...) of at least 2 dimensions",
                         found=f"shape {shape_text(x.shape)}")  # fmt: skip
    channels = x.shape[1]
    named = [(n, p) for n, p in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
             ("bias", bias)) if p is not None]  # fmt: skip
    for name, parameter in named:
        if parameter.shape != (channels,):
            raise ShapeError(
                arg=name,
                expected=f"shape ({channels},): one value per channel (dim 1) of 'x' {shape_text(x.shape)}",
                found=f"shape {shape_text(parameter.shape)}",
            )
    _check_parameter_dtypes(x, named, "convert the statistics, weight and bias to one dtype: x's")
    return TensorMeta(x.shape, x.dtype, x.device)


SOFTMAX = define(
    "softmax(Tensor x, int dim, ScalarType? dtype=None) -> Tensor",
    meta=softmax_meta,
    dtypes=FLOATING,
    doc="exp(x) / sum(exp(x)) along dim, floating dtypes only (dtype: x cast to it first); mirrors torch.softmax.",
    tags=("reduction", "normalization"),
)
LOG_SOFTMAX = define(
    "log_softmax(Tensor x, int dim, ScalarType? dtype=None) -> Tensor",
    meta=softmax_meta,
    dtypes=FLOATING,
    doc="log(softmax(x, dim)) computed stably, floating dtypes only (dtype: x cast to it first); "
    "mirrors torch.log_softmax.",
    tags=("reduction", "normalization"),
)
LAYER_NORM = define(
    "layer_norm(Tensor x, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) -> Tensor",
    meta=layer_norm_meta,
    dtypes=FLOATING,
    doc="(x - mean) / sqrt(var + eps) * weight + bias over the trailing normalized_shape; "
    "mirrors torch.nn.functional.layer_norm.",
    tags=("reduction", "normalization"),
)
RMS_NORM = define(
    "rms_norm(Tensor x, int[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor",
    meta=rms_norm_meta,
    dtypes=FLOATING,
    doc="x / sqrt(mean(x**2) + eps) * weight over the trailing normalized_shape (eps None: the machine "
    "epsilon of the compute dtype); mirrors torch.nn.functional.rms_norm.",
    tags=("reduction", "normalization"),
)

BATCH_NORM = define(
    "batch_norm(Tensor x, Tensor running_mean, Tensor running_var, Tensor? weight=None, Tensor? bias=None, "
    "bool training=False, float momentum=0.1, float eps=1e-05) -> Tensor",
    meta=batch_norm_meta,
    dtypes=FLOATING,
    doc="(x - running_mean) / sqrt(running_var + eps) * weight + bias per channel (dim 1), inference only "
    "(training must be False); mirrors torch.nn.functional.batch_norm.",
    tags=("normalization",),
)

GROUP_NORM = define(
    "group_norm(Tensor x, int num_groups, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) -> Tensor",
    meta=group_norm_meta,
    dtypes=FLOATING,
    doc="(x - mean) / sqrt(var + eps) over each group of channels (with the dims after C), then weight and "
    "bias per channel; mirrors torch.nn.functional.group_norm.",
    tags=("reduction", "normalization"),
)

CONTRACTS: tuple[OpContract, ...] = (SOFTMAX, LOG_SOFTMAX, LAYER_NORM, RMS_NORM, BATCH_NORM, GROUP_NORM)
